"""Everything about a trace in one streaming pass: its statistics and one replay result per capacity.

Several LRU capacities, the curve and per-request depths are read off the stack-depth profile of
:mod:`kvcalc.trace.lru_curve` (numpy; every capacity in one pass). One LRU capacity (or none, or only the
infinite one) and FIFO, which has no inclusion property, are replayed directly by :mod:`kvcalc.trace.lean`
(pure Python, memory for the cache and the blocks seen only), or, for one LRU capacity of a large trace and a
large cache (:func:`one_lru_in_numpy`), by :mod:`kvcalc.trace.lru_one` (numpy chunks carrying only the cache).
All give identical results.

This module computes; it never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from kvcalc.out.errors import InputError
from kvcalc.trace.engine import TraceAnalysis, format_read, run_pass
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, TraceRequest, check_block_tokens
from kvcalc.trace.result import capacity_blocks_for, check_policy
from kvcalc.trace.stats import StatsAccumulator, TraceStats

if TYPE_CHECKING:
    from kvcalc.trace.lru_curve import DepthChunk

__all__ = ["TraceAnalysis", "analyze_trace", "stats_of_requests", "trace_stats"]


def analyze_trace(path: str | Path, capacities_tokens: Sequence[int | None],
                  block_tokens: int = DEFAULT_BLOCK_TOKENS, policy: str = "lru",
                  skip_bad: bool = False, keep_profile: bool = False,
                  sink: Callable[[DepthChunk], None] | None = None, trace_format: str = "mooncake",
                  progress: Callable[[int], None] | None = None, engine=None,
                  sample_rate: float | None = None, exact_stats: bool = False) -> TraceAnalysis:
    """Statistics plus one result per capacity [tokens] (None = infinite), in one streaming pass.

    Several LRU capacities come from the stack-depth profile (one pass answers every capacity);
    ``keep_profile`` returns that :class:`LruProfile`, which answers capacities chosen after the pass (e.g. a
    grid up to the working set), and ``sink`` receives the engine's per-request depths chunk by chunk
    (:class:`DepthChunk`). Without those, other policies and at most one finite LRU capacity are replayed
    directly (:class:`kvcalc.trace.lean.LeanEngine`: no numpy, memory for the cache only). ``engine``: any
    other engine of the interface (:mod:`kvcalc.trace.engine`), e.g. replicas; its answers must know the
    infinite capacity. ``trace_format``: see :mod:`kvcalc.trace.formats` (``auto`` detects it);
    ``progress``: called with the bytes read so far. ``sample_rate`` (with ``keep_profile``): the profile is a
    stratified sampled estimate (:mod:`kvcalc.trace.stratified`), anchored to the infinite cache the same pass
    replays (exact, or the bounded sample's estimate). ``exact_stats`` False (the default): on the
    lean path, ids too sparse for a bit table make the infinite cache's figures (distinct blocks, maximum hit
    rate) estimates from a bounded sample (``stats.estimate`` says so, with standard errors); True keeps a dict
    of every id.
    """
    check_policy(policy)
    check_block_tokens(block_tokens)
    if (keep_profile or sink is not None) and policy != "lru":
        raise InputError(f"policy: the one-pass capacity profile exists for lru only, not {policy!r}")
    for capacity in capacities_tokens:
        capacity_blocks_for(capacity, block_tokens)
    from kvcalc.trace.formats import open_replay_trace
    from kvcalc.trace.lean import LeanEngine, answers_lean

    reader = open_replay_trace(path, block_tokens, skip_bad, trace_format, progress)
    if sample_rate is not None:
        from kvcalc.trace.engine import Tee
        from kvcalc.trace.stratified import StratifiedLruEngine

        if not keep_profile or policy != "lru" or sink is not None or engine is not None:
            raise InputError("--sample-rate: samples the LRU curve only (--curve)")
        stats, (profile, exact) = run_pass(reader, Tee(StratifiedLruEngine(sample_rate, block_tokens),
                                                       LeanEngine([None], block_tokens, exact_stats=exact_stats)),
                                         block_tokens)
        profile = profile.anchored(exact.at(None))
        return TraceAnalysis(stats=stats.finish(reader.skipped_lines, exact.at(None), exact.estimate),
                             results=tuple(profile.at(c) for c in capacities_tokens), profile=profile,
                             first_problem=reader.first_problem, trace_format=format_read(reader))
    direct = engine is None and not keep_profile and sink is None  # no curve, no per-request depths
    jit_pass = None
    if direct and one_lru_in_numba(path, capacities_tokens, policy, block_tokens, reader):
        try:
            from kvcalc.trace.jit_lru import JitLruEngine, JitTraceReader, jit_pass
        except (ImportError, RuntimeError, OSError):  # numba found but unusable (broken, or nowhere to cache)
            jit_pass = None
    if jit_pass is not None:
        reader = JitTraceReader(reader)
        stats, answers = jit_pass(reader, JitLruEngine(capacities_tokens, block_tokens, exact_stats), block_tokens)
        return TraceAnalysis(stats=stats.finish(reader.skipped_lines, answers.at(None), answers.estimate),
                             results=tuple(answers.at(c) for c in capacities_tokens),
                             first_problem=reader.first_problem, trace_format=format_read(reader))
    if direct and one_lru_in_numpy(path, capacities_tokens, policy, block_tokens):
        from kvcalc.trace.lru_one import OneLruEngine

        engine = OneLruEngine(capacities_tokens, block_tokens, exact_stats)
    elif direct and answers_lean(capacities_tokens, policy):
        engine = LeanEngine(capacities_tokens, block_tokens, policy, exact_stats)
    elif engine is None:
        from kvcalc.trace.lru_curve import LruStackEngine

        engine = LruStackEngine(block_tokens, sink=sink)
    stats, answers = run_pass(reader, engine, block_tokens)
    skipped = reader.skipped_lines
    return TraceAnalysis(stats=stats.finish(skipped, answers.at(None), getattr(answers, "estimate", None)),
                         results=tuple(answers.at(c) for c in capacities_tokens),
                         profile=answers if keep_profile else None, first_problem=reader.first_problem,
                         trace_format=format_read(reader))


NUMPY_ONE_LRU_BYTES = 32 << 20  # a trace file of at least this size [B] ...
MIN_NUMPY_CAPACITY_BLOCKS = 250_000  # ... and a capacity of at least this many blocks (128m tokens at 512): numpy


def one_lru_in_numpy(path: str | Path, capacities_tokens: Sequence[int | None], policy: str,
                     block_tokens: int = DEFAULT_BLOCK_TOKENS) -> bool:
    """True when one LRU capacity (and the infinite one) is replayed by :class:`kvcalc.trace.lru_one.OneLruEngine`
    rather than the lean replay (both give identical answers): exactly one distinct finite capacity of at least
    :data:`MIN_NUMPY_CAPACITY_BLOCKS` blocks, and a trace file of at least :data:`NUMPY_ONE_LRU_BYTES` (its size
    on disk, compressed or not).

    Why (``bench/bench_throughput.py``): numpy's import costs about 0.2 s of CPU and 16 MB, and the engine's
    chunks about 10 MB more; the numpy engine's ~340 ns less per block access repay the time from about 600,000
    accesses (random 64-bit ids take ~21 B of JSON each, dense ids ~7 B: 32 MB is 1.5 to 4.5 M accesses). Its
    memory beats the lean replay's only once the cache is large (the OrderedDict costs ~100-300 B per cached
    block, the numpy state ~50 B): at 250,000 blocks it takes 0.6x the lean replay's peak memory, while at a small
    cache (3m tokens, 5,859 blocks) it takes 2x, which would break the issue's bound of 2x the OrderedDict
    reference's memory."""
    finite = {c for c in capacities_tokens if c is not None}
    if policy != "lru" or len(finite) != 1 or capacity_blocks_for(finite.pop(), block_tokens) < \
            MIN_NUMPY_CAPACITY_BLOCKS:
        return False
    try:
        return Path(path).stat().st_size >= NUMPY_ONE_LRU_BYTES
    except OSError:  # the reader names the problem
        return False


NUMBA_ONE_LRU_BYTES = 64 << 20  # a trace file of at least this size [B] ...
MIN_NUMBA_CAPACITY_BLOCKS = 250_000  # ... and a capacity of at least this many blocks: the numba engine
MAX_NUMBA_BLOCK_TOKENS = 1 << 24  # block sizes up to this [tokens] (its token sums stay within int64)


def numba_usable() -> bool:
    """numba can be imported (found, never imported here) and is not switched off (``NUMBA_DISABLE_JIT``)."""
    import os
    from importlib.util import find_spec

    if os.environ.get("NUMBA_DISABLE_JIT", "0").strip() not in ("", "0"):
        return False
    try:
        return find_spec("numba") is not None
    except (ImportError, ValueError):
        return False


def one_lru_in_numba(path: str | Path, capacities_tokens: Sequence[int | None], policy: str,
                     block_tokens: int, reader) -> bool:
    """True when one LRU capacity (and the infinite one) is replayed by the compiled engine
    (:mod:`kvcalc.trace.jit_lru`; identical answers): numba usable (:func:`numba_usable`), the plain
    Mooncake/hash-id JSONL reader (:class:`~kvcalc.trace.reader.TraceReader`, plain or compressed), exactly one
    distinct finite capacity of at least :data:`MIN_NUMBA_CAPACITY_BLOCKS` blocks, a block size up to
    :data:`MAX_NUMBA_BLOCK_TOKENS`, and a trace file of at least :data:`NUMBA_ONE_LRU_BYTES` on disk.

    Why (``bench/bench_throughput.py``, 2026-12-03): numba's start-up (its import, the kernels loaded from their
    cache) costs about 0.5 s of CPU more than numpy's and ~115 MB more resident memory. In time, its ~150 ns per
    block access against the numpy engine's ~300 (128m, random 64-bit ids) repay the 0.5 s from about 3.4 M
    accesses: 64 MiB of JSONL holds 2.8 M random 64-bit ids (~24 B each) or ~9 M dense ones (~7 B). In
    memory, only against a reference that itself holds a large cache: at 3m tokens (5,859 blocks) the
    OrderedDict reference peaks at 14 MB and numba's process at 157 MB, 11x (the issue's bound is 2x), so
    small caches stay on the lean replay, which meets the bound; at 250,000 blocks (128m) 1.75x."""
    finite = {c for c in capacities_tokens if c is not None}
    if policy != "lru" or len(finite) != 1 or capacity_blocks_for(finite.pop(), block_tokens) < \
            MIN_NUMBA_CAPACITY_BLOCKS or block_tokens > MAX_NUMBA_BLOCK_TOKENS:
        return False
    from kvcalc.trace.reader import TraceReader

    if type(reader) is not TraceReader or not numba_usable():
        return False
    try:
        return Path(path).stat().st_size >= NUMBA_ONE_LRU_BYTES
    except OSError:  # the reader names the problem
        return False


def stats_of_requests(requests: Iterable[TraceRequest], block_tokens: int = DEFAULT_BLOCK_TOKENS,
                      skipped_lines: int = 0) -> TraceStats:
    """Statistics of in-memory requests (hash_ids must already fit ``block_tokens``)."""
    check_block_tokens(block_tokens)
    from kvcalc.trace.lru_curve import LruStackEngine

    acc = StatsAccumulator(block_tokens)
    engine = LruStackEngine(block_tokens)
    for request in requests:
        acc.add(request.timestamp_ms, request.input_length, request.output_length)
        engine.add(request.hash_ids, request.input_length)
    return acc.finish(skipped_lines, engine.finish(skipped_lines).at(None))


def trace_stats(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False) -> TraceStats:
    """Statistics of a trace file, in one streaming pass."""
    return analyze_trace(path, [], block_tokens, skip_bad=skip_bad).stats
