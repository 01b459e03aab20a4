"""The one replay engine interface: readers -> accesses -> engines -> results.

A reader (:mod:`kvcalc.trace.reader`, :mod:`kvcalc.trace.formats`) yields batches of records, each with
``timestamp`` [ms], ``input_length``, ``output_length`` [tokens] and ``hash_ids`` (the request's block accesses,
in order). An engine consumes them and answers per capacity:

- ``add_records(records, signed=True)``: replay a batch (``signed`` False promises no negative id in it);
- ``finish(skipped_lines=0)``: the answers, an object whose ``at(capacity_tokens)`` is the
  :class:`~kvcalc.trace.result.ReplayResult` of one capacity (None = infinite).

Engines behind it: :class:`PolicyEngine` (one cache per capacity under any policy of
:mod:`kvcalc.trace.policies`), :class:`kvcalc.trace.lean.LeanEngine` (one LRU capacity and the infinite cache,
pure Python), :class:`kvcalc.trace.lru_one.OneLruEngine` (the same answers in numpy chunks, for large traces and
caches), :class:`kvcalc.trace.lru_curve.LruStackEngine` (every LRU capacity at once; its
answers are an :class:`~kvcalc.trace.lru_curve.LruProfile`), :class:`kvcalc.trace.replicas.ReplicaEngine`
(N replicas of one policy behind a router), and the tiered engines of :mod:`kvcalc.trace.tiers` and
:mod:`kvcalc.trace.tier_curve` (LruStackEngine's feed; their answers come from ``finish_tiers`` /
``finish_curve``). :func:`run_pass` drives any of them over a reader with the trace statistics alongside.

This module computes; it never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kvcalc.trace.policies import PolicyCache, make_cache
from kvcalc.trace.result import ReplayResult
from kvcalc.trace.stats import StatsAccumulator, TraceStats


class Answers(Protocol):
    def at(self, capacity_tokens: int | None) -> ReplayResult: ...


class Engine(Protocol):
    def add_records(self, records: Sequence, signed: bool = True) -> None: ...

    def finish(self, skipped_lines: int = 0) -> Any: ...  # an Answers


@dataclass(frozen=True)
class FixedAnswers:
    """The results of the capacities an engine replayed, by capacity [tokens] (None = infinite); ``estimate``:
    how the infinite capacity was estimated (a :class:`~kvcalc.trace.seen_sample.InfiniteEstimate`), None when
    exact."""

    results: dict
    estimate: Any = None

    def at(self, capacity_tokens: int | None) -> ReplayResult:
        if capacity_tokens not in self.results:
            raise KeyError(f"capacity {capacity_tokens!r} was not replayed")
        return self.results[capacity_tokens]


@dataclass(frozen=True)
class TraceAnalysis:
    """Statistics and replay results of one streaming pass over a trace."""

    stats: TraceStats
    results: tuple[ReplayResult, ...]
    profile: Any = None  # the LRU depth histograms (an LruProfile), when asked for (any capacity at once)
    first_problem: str | None = None  # "FILE:LINE: problem" of the first skipped line (skip_bad)
    trace_format: str | None = None  # the format the trace was read as (kvcalc.trace.formats.FORMATS)


class PolicyEngine:
    """One cache per capacity [tokens] (None = infinite) under one policy, each replaying every request."""

    def __init__(self, capacities_tokens: Sequence[int | None], block_tokens: int, policy: str,
                 factory: Callable[[str, int | None, int], PolicyCache] = make_cache):
        self.caches = {c: factory(policy, c, block_tokens) for c in dict.fromkeys(capacities_tokens)}

    def add_records(self, records: Sequence, signed: bool = True) -> None:
        for cache in self.caches.values():
            add = cache.add
            for r in records:
                add(r.hash_ids, r.input_length)

    def finish(self, skipped_lines: int = 0) -> FixedAnswers:
        return FixedAnswers({c: cache.finish(skipped_lines) for c, cache in self.caches.items()})


def format_read(reader) -> str:
    """The format a reader read (after its pass: hash-id JSONL under the rule its lines followed)."""
    kind = getattr(reader, "kind", None)
    if kind is not None:
        return kind
    return "full-blocks" if getattr(reader, "rule", None) == "floor" else "mooncake"


def run_pass(reader, engine: Engine, block_tokens: int) -> tuple[StatsAccumulator, Any]:
    """Feed every batch of ``reader`` (a :class:`~kvcalc.trace.reader.TraceReader` or any reader with
    ``signed_batches``) to ``engine``, the statistics alongside; returns (statistics so far, the answers)."""
    stats = StatsAccumulator(block_tokens)
    for records, _, signed in reader.signed_batches():
        stats.add_records(records)
        engine.add_records(records, signed)
    return stats, engine.finish(reader.skipped_lines)


class Tee:
    """Several engines fed the same batches in one pass; ``finish`` gives their answers, in order."""

    def __init__(self, *engines: Engine):
        self.engines = engines

    def add_records(self, records: Sequence, signed: bool = True) -> None:
        for engine in self.engines:
            engine.add_records(records, signed)

    def finish(self, skipped_lines: int = 0) -> tuple:
        return tuple(e.finish(skipped_lines) for e in self.engines)
