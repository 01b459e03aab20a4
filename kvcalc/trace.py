"""Trace replay: prefix-cache hit rates of a request trace, for one capacity or a whole curve.

Trace format (Mooncake; one JSON object per line, blank lines ignored):

- ``timestamp``: arrival time [ms], relative (int or float; any finite number)
- ``input_length``, ``output_length``: [tokens], integers >= 0
- ``hash_ids``: one integer id per ``block_tokens``-token block of the input, so
  ``len(hash_ids) == ceil(input_length / block_tokens)`` (the last block may be partial). An equal id at the
  same position means the whole prefix up to and including that block is identical. Ids must fit in a
  signed 64-bit integer.

Reading is streaming (line by line; the file is never read whole). A bad line raises :class:`InputError`
with one line ``FILE:LINE: problem``; with ``skip_bad=True`` bad lines are skipped and counted instead
(``skipped_lines`` in every result). A trace without any valid request is an error.

Replay semantics (block granularity, ``B = block_tokens``; a capacity of ``C`` tokens holds
``floor(C / B)`` blocks; capacity ``None`` is an infinite cache):

1. A request reuses the longest run of its *leading* hash ids that are all in the cache, checked against the
   cache as it was before the request: ``hit_blocks`` = that run's length,
   ``reused_tokens = min(hit_blocks * B, input_length)``.
2. Then every block of the request is inserted or refreshed, in order:

   - ``lru``: a present block becomes the most recently used; an absent one is inserted as the most recently
     used; while the cache holds more than its capacity it evicts the least recently used block.
   - ``fifo``: a present block keeps its place (no refresh); an absent one is inserted at the tail; while
     the cache holds more than its capacity it evicts the block inserted first.

   A request longer than the cache therefore evicts its own first blocks.
3. Reported per capacity: ``token_hit_rate = reused_tokens / input_tokens``,
   ``block_hit_rate = hit_blocks / total_blocks``, ``peak_cached_blocks`` = the largest number of blocks the
   cache held after any request.

One-pass LRU curve (:func:`lru_curve`, :func:`lru_profile`): LRU has the inclusion property: a cache of
``C`` blocks always holds the ``C`` most recently used distinct blocks (the top ``C`` of the global LRU
stack). Before a request, block ``j`` has depth ``d_j`` = the number of distinct blocks whose last access is
at or after its own (infinite if never seen), so it is cached at capacity ``C`` iff ``d_j <= C``, and the
request's hit run at ``C`` is the number of leading ``j`` whose prefix maximum ``m_j = max(d_0..d_j) <= C``.
Each block's tokens (``B``, or the remainder for the last block) and a count of one go into histograms keyed
by ``m_j``; cumulative sums give reused tokens and hit blocks at every capacity at once, equal to separate
replays exactly. Depths are computed with numpy in chunks of requests: timestamps are compacted to the
live blocks at each chunk start, and within a chunk the depth of a block last seen at slot ``q``, for a
request starting at slot ``s``, is ``(s - q) - #{earlier accesses j in the chunk with prev(j) >= q}``,
counted for all accesses at once with a wavelet matrix. Memory: the distinct blocks plus one chunk.

This module computes; it never prints.
"""

from __future__ import annotations

import json
import math
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from kvcalc.errors import InputError
from kvcalc.units import ms_to_s

DEFAULT_BLOCK_TOKENS = 512
POLICIES = ("lru", "fifo")
DEFAULT_CHUNK_ACCESSES = 1 << 16  # minimum accesses per numpy chunk of the LRU curve
_MAX_CHUNK_ACCESSES = 1 << 24  # keeps request index * _DEPTH_SPAN below 2^63

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_REQUIRED_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
_DEPTH_SPAN = 1 << 36  # depths (and chunk slots) stay below this; per-request offset for segmented scans
_INF_DEPTH = _DEPTH_SPAN - 1


# ---------------------------------------------------------------- records and results


class TraceRequest(NamedTuple):
    """One request of a trace (a NamedTuple: cheap to create for millions of lines)."""

    timestamp_ms: float  # arrival [ms]
    input_length: int  # [tokens]
    output_length: int  # [tokens]
    hash_ids: tuple[int, ...]  # one id per block_tokens-token input block
    line_number: int  # 1-based line in the file (0 when built in memory)


@dataclass(frozen=True)
class LengthStats:
    """Distribution of a per-request length [tokens]; percentiles by linear interpolation."""

    total_tokens: int
    mean_tokens: float
    p50_tokens: float
    p90_tokens: float
    p99_tokens: float
    max_tokens: int


@dataclass(frozen=True)
class TraceStats:
    """Whole-trace statistics; ``max_*`` figures are those of an infinite cache."""

    block_tokens: int
    requests: int
    skipped_lines: int
    duration_s: float  # latest minus earliest timestamp [s]
    input: LengthStats
    output: LengthStats
    total_blocks: int  # sum of len(hash_ids) [blocks]
    distinct_blocks: int  # distinct hash ids [blocks]
    max_reused_tokens: int  # [tokens]
    max_token_hit_rate: float  # [fraction]
    max_block_hit_rate: float  # [fraction]


@dataclass(frozen=True)
class ReplayResult:
    """Outcome of replaying a trace through one cache capacity."""

    policy: str
    block_tokens: int
    capacity_tokens: int | None  # None = infinite
    capacity_blocks: int | None  # floor(capacity_tokens / block_tokens); None = infinite
    requests: int
    skipped_lines: int
    input_tokens: int  # [tokens]
    reused_tokens: int  # [tokens]
    total_blocks: int  # [blocks]
    hit_blocks: int  # [blocks]
    token_hit_rate: float  # reused_tokens / input_tokens [fraction]
    block_hit_rate: float  # hit_blocks / total_blocks [fraction]
    peak_cached_blocks: int  # [blocks]


@dataclass(frozen=True)
class LruProfile:
    """LRU hit histograms keyed by stack depth: answers every capacity of one trace (see module doc).

    ``reused_tokens_upto[d]`` / ``hit_blocks_upto[d]`` are the reused tokens / hit blocks of a cache of
    ``d`` blocks, for ``d`` in ``0 .. distinct_blocks`` (larger caches behave like ``distinct_blocks``).
    """

    block_tokens: int
    requests: int
    skipped_lines: int
    input_tokens: int  # [tokens]
    total_blocks: int  # [blocks]
    distinct_blocks: int  # [blocks]
    reused_tokens_upto: np.ndarray  # [tokens], int64, cumulative by cache size in blocks
    hit_blocks_upto: np.ndarray  # [blocks], int64, cumulative by cache size in blocks

    def at(self, capacity_tokens: int | None) -> ReplayResult:
        """The LRU replay result of one capacity [tokens] (None = infinite)."""
        capacity_blocks = capacity_blocks_for(capacity_tokens, self.block_tokens)
        d = self.distinct_blocks if capacity_blocks is None else min(capacity_blocks, self.distinct_blocks)
        return _result(
            "lru", self.block_tokens, capacity_tokens, capacity_blocks, self.requests, self.skipped_lines,
            self.input_tokens, int(self.reused_tokens_upto[d]), self.total_blocks,
            int(self.hit_blocks_upto[d]), d,
        )


@dataclass(frozen=True)
class TraceAnalysis:
    """Statistics and replay results of one streaming pass over a trace."""

    stats: TraceStats
    results: tuple[ReplayResult, ...]
    profile: LruProfile | None = None  # the LRU depth histograms, when asked for (any capacity at once)
    first_problem: str | None = None  # "FILE:LINE: problem" of the first skipped line (skip_bad)


# ---------------------------------------------------------------- small pure helpers


def capacity_tokens_from_bytes(capacity_bytes: float, kv_bytes_per_block: float, block_tokens: int) -> int:
    """Cache capacity [tokens] of ``capacity_bytes`` [B] holding whole blocks of ``kv_bytes_per_block`` [B].

    ``floor(capacity_bytes / kv_bytes_per_block) * block_tokens``; e.g. 80 GB at 10 MB per 512-token block
    -> 8000 blocks -> 4,096,000 tokens.
    """
    _check_block_tokens(block_tokens)
    for value, what in ((capacity_bytes, "capacity bytes"), (kv_bytes_per_block, "KV bytes per block")):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InputError(f"{what}: {value!r} is not a finite number")
    if capacity_bytes < 0:
        raise InputError(f"capacity bytes: must be >= 0, got {capacity_bytes:g}")
    if kv_bytes_per_block <= 0:
        raise InputError(f"KV bytes per block: must be > 0, got {kv_bytes_per_block:g}")
    if float(capacity_bytes).is_integer() and float(kv_bytes_per_block).is_integer():
        blocks = int(capacity_bytes) // int(kv_bytes_per_block)  # exact for whole byte counts
    else:
        blocks = math.floor(capacity_bytes / kv_bytes_per_block)
    return blocks * block_tokens


def capacity_blocks_for(capacity_tokens: int | None, block_tokens: int) -> int | None:
    """Whole blocks [blocks] that ``capacity_tokens`` [tokens] holds: floor division; None stays None."""
    _check_block_tokens(block_tokens)
    if capacity_tokens is None:
        return None
    if isinstance(capacity_tokens, bool) or not isinstance(capacity_tokens, (int, np.integer)):
        raise InputError(f"cache capacity: {capacity_tokens!r} is not a whole number of tokens")
    if capacity_tokens < 0:
        raise InputError(f"cache capacity: must be >= 0 tokens, got {capacity_tokens}")
    return int(capacity_tokens) // block_tokens


def capacity_grid(max_capacity_tokens: int, points: int = 20, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> list[int]:
    """About ``points`` capacities [tokens], geometric from one block to ``max_capacity_tokens``.

    Each is a whole number of blocks; duplicates after rounding are dropped (so fewer may come back).
    """
    _check_block_tokens(block_tokens)
    if points < 1:
        raise InputError(f"curve points: must be >= 1, got {points}")
    max_blocks = max(1, int(max_capacity_tokens) // block_tokens)
    if points == 1:
        return [max_blocks * block_tokens]
    blocks = np.unique(np.rint(np.geomspace(1, max_blocks, points)).astype(np.int64))
    return [int(b) * block_tokens for b in blocks]


def _check_block_tokens(block_tokens: int) -> None:
    """Raise InputError unless block_tokens [tokens] is a whole number >= 1."""
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1:
        raise InputError(f"block size: must be a whole number of tokens >= 1, got {block_tokens!r}")


def _check_policy(policy: str) -> None:
    """Raise InputError unless policy is one of POLICIES."""
    if policy not in POLICIES:
        raise InputError(f"policy: unknown {policy!r}; choose one of {', '.join(POLICIES)}")


def _rate(part: int, whole: int) -> float:
    """part / whole [fraction]; 0 when whole is 0."""
    return part / whole if whole else 0.0


def _result(policy: str, block_tokens: int, capacity_tokens: int | None, capacity_blocks: int | None,
            requests: int, skipped_lines: int, input_tokens: int, reused_tokens: int, total_blocks: int,
            hit_blocks: int, peak_cached_blocks: int) -> ReplayResult:
    """A ReplayResult with its rates derived from the counts [tokens], [blocks]."""
    return ReplayResult(
        policy=policy, block_tokens=block_tokens, capacity_tokens=capacity_tokens,
        capacity_blocks=capacity_blocks, requests=requests, skipped_lines=skipped_lines,
        input_tokens=input_tokens, reused_tokens=reused_tokens, total_blocks=total_blocks,
        hit_blocks=hit_blocks, token_hit_rate=_rate(reused_tokens, input_tokens),
        block_hit_rate=_rate(hit_blocks, total_blocks), peak_cached_blocks=peak_cached_blocks,
    )


# ---------------------------------------------------------------- streaming reader


def _short(value: object) -> str:
    """repr of a value, cut to keep error messages on one short line."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 40 else text[:37] + "..."


def _check_length(obj: dict, field: str) -> tuple[int | None, str | None]:
    """(length [tokens], None) if obj[field] is an int >= 0 (not a bool), else (None, problem)."""
    value = obj[field]
    if type(value) is not int:
        return None, f"{field} must be an integer number of tokens, got {_short(value)} ({type(value).__name__})"
    if value < 0:
        return None, f"{field} must be >= 0 tokens, got {value}"
    return value, None


def parse_trace_line(line: bytes | str, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                     line_number: int = 0) -> tuple[TraceRequest | None, str | None]:
    """Parse one non-blank line -> (request, None) or (None, problem) [problem: one line, no location]."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            return None, "not UTF-8 text"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(line.rstrip()) or exc.msg.startswith("Unterminated string"):
            return None, "truncated JSON (the line ends inside the object)"
        return None, f"malformed JSON ({str(exc).splitlines()[0]})"
    if type(obj) is not dict:
        return None, f"expected a JSON object, got {type(obj).__name__}"
    for field in _REQUIRED_FIELDS:
        if field not in obj:
            return None, f"missing field {field!r}"
    timestamp = obj["timestamp"]
    if type(timestamp) not in (int, float) or not math.isfinite(timestamp):
        return None, f"timestamp must be a finite number of ms, got {_short(timestamp)}"
    input_length, problem = _check_length(obj, "input_length")
    if problem:
        return None, problem
    output_length, problem = _check_length(obj, "output_length")
    if problem:
        return None, problem
    ids = obj["hash_ids"]
    if type(ids) is not list:
        return None, f"hash_ids must be a list of integers, got {type(ids).__name__}"
    expected = -(-input_length // block_tokens)
    if len(ids) != expected:
        return None, (f"hash_ids has {len(ids)} ids but input_length {input_length} needs "
                      f"ceil({input_length}/{block_tokens}) = {expected} (wrong block size?)")
    for h in ids:
        if type(h) is not int:
            return None, f"hash_ids must be integers, found {_short(h)} ({type(h).__name__})"
    if ids and (min(ids) < _INT64_MIN or max(ids) > _INT64_MAX):
        return None, "hash_ids must fit in a signed 64-bit integer"
    return TraceRequest(timestamp, input_length, output_length, tuple(ids), line_number), None


class TraceReader:
    """Streaming iterable of :class:`TraceRequest` from a JSONL trace file.

    Iterating reads the file line by line. Errors are :class:`InputError` with one line
    ``FILE:LINE: problem``; with ``skip_bad`` bad lines are counted in ``skipped_lines`` (the first problem is
    kept in ``first_problem``). When the file is exhausted without any request, iteration raises.
    """

    def __init__(self, path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False):
        _check_block_tokens(block_tokens)
        self.path = Path(path)
        self.block_tokens = block_tokens
        self.skip_bad = skip_bad
        self.requests = 0
        self.skipped_lines = 0
        self.first_problem: str | None = None

    def __iter__(self) -> Iterator[TraceRequest]:
        self.requests = self.skipped_lines = 0
        self.first_problem = None
        try:
            handle = open(self.path, "rb")
        except FileNotFoundError:
            raise InputError(f"{self.path}: no such trace file") from None
        except IsADirectoryError:
            raise InputError(f"{self.path}: is a directory, not a trace file") from None
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read ({exc.strerror})") from None
        with handle:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                request, problem = parse_trace_line(line, self.block_tokens, line_number)
                if problem is not None:
                    message = f"{self.path}:{line_number}: {problem}"
                    if not self.skip_bad:
                        raise InputError(message)
                    self.skipped_lines += 1
                    if self.first_problem is None:
                        self.first_problem = message
                    continue
                self.requests += 1
                yield request
        if self.requests == 0:
            skipped = f" ({self.skipped_lines} bad lines skipped)" if self.skipped_lines else ""
            raise InputError(f"{self.path}: no requests in the trace{skipped}")


def read_trace(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False) -> TraceReader:
    """A streaming reader of ``path`` (see :class:`TraceReader`)."""
    return TraceReader(path, block_tokens, skip_bad)


# ---------------------------------------------------------------- statistics


class _StatsAccumulator:
    """Trace statistics, one request at a time; holds lengths (8 bytes each) and the distinct ids."""

    def __init__(self, block_tokens: int):
        self.block_tokens = block_tokens
        self.input_lengths = array("q")
        self.output_lengths = array("q")
        self.first_ms = math.inf
        self.last_ms = -math.inf
        self.seen: set[int] = set()
        self.total_blocks = 0
        self.hit_blocks = 0
        self.reused_tokens = 0

    def add(self, request: TraceRequest) -> None:
        """Account one request."""
        self.input_lengths.append(request.input_length)
        self.output_lengths.append(request.output_length)
        self.first_ms = min(self.first_ms, request.timestamp_ms)
        self.last_ms = max(self.last_ms, request.timestamp_ms)
        seen = self.seen
        hit = 0
        for h in request.hash_ids:
            if h not in seen:
                break
            hit += 1
        seen.update(request.hash_ids)
        self.total_blocks += len(request.hash_ids)
        self.hit_blocks += hit
        self.reused_tokens += min(hit * self.block_tokens, request.input_length)

    def finish(self, skipped_lines: int) -> TraceStats:
        """The statistics of everything added."""
        requests = len(self.input_lengths)
        input_tokens = sum(self.input_lengths)
        return TraceStats(
            block_tokens=self.block_tokens,
            requests=requests,
            skipped_lines=skipped_lines,
            duration_s=ms_to_s(self.last_ms - self.first_ms) if requests else 0.0,
            input=_length_stats(self.input_lengths),
            output=_length_stats(self.output_lengths),
            total_blocks=self.total_blocks,
            distinct_blocks=len(self.seen),
            max_reused_tokens=self.reused_tokens,
            max_token_hit_rate=_rate(self.reused_tokens, input_tokens),
            max_block_hit_rate=_rate(self.hit_blocks, self.total_blocks),
        )


def _length_stats(lengths: array) -> LengthStats:
    """Total, mean, p50/p90/p99 and max of per-request lengths [tokens]."""
    values = np.frombuffer(lengths, dtype=np.int64) if len(lengths) else np.zeros(1, np.int64)
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return LengthStats(
        total_tokens=int(values.sum()) if len(lengths) else 0,
        mean_tokens=float(values.mean()),
        p50_tokens=float(p50),
        p90_tokens=float(p90),
        p99_tokens=float(p99),
        max_tokens=int(values.max()),
    )


def stats_of_requests(requests: Iterable[TraceRequest], block_tokens: int = DEFAULT_BLOCK_TOKENS,
                      skipped_lines: int = 0) -> TraceStats:
    """Statistics of in-memory requests (hash_ids must already fit ``block_tokens``)."""
    _check_block_tokens(block_tokens)
    acc = _StatsAccumulator(block_tokens)
    for request in requests:
        acc.add(request)
    return acc.finish(skipped_lines)


def trace_stats(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False) -> TraceStats:
    """Statistics of a trace file, in one streaming pass."""
    reader = read_trace(path, block_tokens, skip_bad)
    acc = _StatsAccumulator(block_tokens)
    for request in reader:
        acc.add(request)
    return acc.finish(reader.skipped_lines)


# ---------------------------------------------------------------- single-capacity replay (direct simulation)


class _CacheSimulator:
    """One cache (LRU or FIFO) of a fixed capacity, simulated directly with an OrderedDict."""

    def __init__(self, capacity_tokens: int | None, block_tokens: int, policy: str):
        _check_policy(policy)
        self.policy = policy
        self.block_tokens = block_tokens
        self.capacity_tokens = capacity_tokens
        self.capacity_blocks = capacity_blocks_for(capacity_tokens, block_tokens)
        self._limit = math.inf if self.capacity_blocks is None else self.capacity_blocks
        self._refresh = policy == "lru"
        self._cache: OrderedDict[int, None] = OrderedDict()
        self.requests = self.input_tokens = self.reused_tokens = 0
        self.total_blocks = self.hit_blocks = self.peak_cached_blocks = 0

    def add(self, hash_ids: Sequence[int], input_length: int) -> int:
        """Replay one request: count its leading hit run, then insert/refresh its blocks in order.

        Returns the request's hit blocks [blocks].
        """
        cache = self._cache
        hit = 0
        for h in hash_ids:
            if h not in cache:
                break
            hit += 1
        limit = self._limit
        refresh = self._refresh
        move_to_end = cache.move_to_end
        for h in hash_ids:
            if h in cache:
                if refresh:
                    move_to_end(h)
            else:
                cache[h] = None
                if len(cache) > limit:
                    cache.popitem(last=False)
        self.requests += 1
        self.input_tokens += input_length
        self.reused_tokens += min(hit * self.block_tokens, input_length)
        self.total_blocks += len(hash_ids)
        self.hit_blocks += hit
        if len(cache) > self.peak_cached_blocks:
            self.peak_cached_blocks = len(cache)
        return hit

    @property
    def cached_blocks(self) -> int:
        """Blocks the cache holds now [blocks]."""
        return len(self._cache)

    def finish(self, skipped_lines: int = 0) -> ReplayResult:
        """The result of everything replayed."""
        return _result(
            self.policy, self.block_tokens, self.capacity_tokens, self.capacity_blocks, self.requests,
            skipped_lines, self.input_tokens, self.reused_tokens, self.total_blocks, self.hit_blocks,
            self.peak_cached_blocks,
        )


class RequestReplay(NamedTuple):
    """What one request got from the cache in a single-capacity replay."""

    request: TraceRequest
    reused_tokens: int  # min(hit_blocks * block_tokens, input_length) [tokens]
    hit_blocks: int  # leading blocks found in the cache [blocks]
    cached_blocks: int  # blocks the cache holds after the request [blocks]


def _replay_steps(sim: _CacheSimulator, requests: Iterable[TraceRequest]) -> Iterator[RequestReplay]:
    """Feed requests through ``sim`` one at a time, yielding each request's outcome."""
    block_tokens = sim.block_tokens
    for request in requests:
        hit = sim.add(request.hash_ids, request.input_length)
        yield RequestReplay(request, min(hit * block_tokens, request.input_length), hit, sim.cached_blocks)


def replay_per_request(requests: Iterable[TraceRequest], capacity_tokens: int | None,
                       block_tokens: int = DEFAULT_BLOCK_TOKENS, policy: str = "lru") -> Iterator[RequestReplay]:
    """Replay requests through one cache of ``capacity_tokens`` [tokens] (None = infinite), lazily.

    Yields one :class:`RequestReplay` per request, in order (same semantics as :func:`replay`); arguments are
    checked at the call, before the first request is read. ``requests`` may be a streaming reader.
    """
    return _replay_steps(_CacheSimulator(capacity_tokens, block_tokens, policy), requests)


def replay_requests(requests: Iterable[TraceRequest], capacity_tokens: int | None,
                    block_tokens: int = DEFAULT_BLOCK_TOKENS, policy: str = "lru",
                    skipped_lines: int = 0) -> ReplayResult:
    """Replay in-memory requests through one cache of ``capacity_tokens`` [tokens] (None = infinite)."""
    sim = _CacheSimulator(capacity_tokens, block_tokens, policy)
    for _ in _replay_steps(sim, requests):
        pass
    return sim.finish(skipped_lines)


def replay(path: str | Path, capacity_tokens: int | None, block_tokens: int = DEFAULT_BLOCK_TOKENS,
           policy: str = "lru", skip_bad: bool = False) -> ReplayResult:
    """Replay a trace file through one cache of ``capacity_tokens`` [tokens] (None = infinite)."""
    sim = _CacheSimulator(capacity_tokens, block_tokens, policy)
    reader = read_trace(path, block_tokens, skip_bad)
    for _ in _replay_steps(sim, reader):
        pass
    return sim.finish(reader.skipped_lines)


# ---------------------------------------------------------------- one-pass LRU curve (stack depths)


def count_prefix_at_least(values: np.ndarray, prefix_len: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """For each query i: ``#{j < prefix_len[i] : values[j] >= thresholds[i]}`` (offline, vectorized).

    ``values`` and ``thresholds`` are non-negative integers; a wavelet matrix over ``values`` answers all
    queries in O((len(values) + len(queries)) * bits) numpy work.
    """
    n_values = len(values)
    n_queries = len(prefix_len)
    if n_queries == 0:
        return np.zeros(0, np.int64)
    top = max(int(values.max()) if n_values else 0, int(thresholds.max())).bit_length()
    dtype = np.int32 if top < 31 and n_values < 2**31 else np.int64
    current = values.astype(dtype)
    thr = thresholds.astype(dtype)
    start = np.zeros(n_queries, dtype)
    end = prefix_len.astype(dtype)
    less = np.zeros(n_queries, dtype)
    rank1 = np.zeros(n_values + 1, dtype)  # rank1[i] = ones among current[:i]
    for bit in range(top - 1, -1, -1):
        bits = (current >> bit) & 1
        np.cumsum(bits, out=rank1[1:])
        zeros = n_values - int(rank1[-1])
        take_ones = ((thr >> bit) & 1).astype(bool)
        r1s = rank1[start]
        r1e = rank1[end]
        r0s = start - r1s
        r0e = end - r1e
        less += np.where(take_ones, r0e - r0s, 0)  # values with a 0 here are below the threshold
        start = np.where(take_ones, zeros + r1s, r0s)
        end = np.where(take_ones, zeros + r1e, r0e)
        ones = bits.astype(bool)
        current = np.concatenate((current[~ones], current[ones]))  # stable partition: zeros first
    return prefix_len.astype(np.int64) - less.astype(np.int64)


class _LruStackEngine:
    """LRU stack-depth histograms over a stream of requests, computed in numpy chunks (see module doc).

    State between chunks: the known ids (sorted) and each one's last-access slot, compacted so that the
    ``D`` known blocks occupy slots ``0..D-1`` in LRU order (slot ``D-1`` = most recent). A chunk holds at
    least ``chunk_accesses`` accesses and at least ``D / 4`` (capped at 2^24), so the O(D) work per chunk
    (compaction, histogram update) stays O(1) per access and memory stays O(D).
    """

    def __init__(self, block_tokens: int, chunk_accesses: int = DEFAULT_CHUNK_ACCESSES):
        _check_block_tokens(block_tokens)
        self.block_tokens = block_tokens
        self.chunk_accesses = max(1, int(chunk_accesses))
        self._flush_at = self.chunk_accesses
        self._known_ids = np.zeros(0, np.int64)
        self._known_slot = np.zeros(0, np.int64)
        self._hist_tokens = np.zeros(1, np.int64)  # index: prefix-max depth [blocks]
        self._hist_blocks = np.zeros(1, np.int64)
        self._ids: list[int] = []
        self._counts: list[int] = []
        self._inputs: list[int] = []
        self.requests = self.input_tokens = self.total_blocks = 0

    def add(self, hash_ids: Sequence[int], input_length: int) -> None:
        """Buffer one request; a full buffer is processed as a chunk."""
        self.requests += 1
        self.input_tokens += input_length
        if hash_ids:
            self._ids.extend(hash_ids)
            self._counts.append(len(hash_ids))
            self._inputs.append(input_length)
            if len(self._ids) >= self._flush_at:
                self._flush()

    def _flush(self) -> None:
        """Process the buffered requests: depths, histograms, then the compacted state."""
        if not self._ids:
            return
        ids = np.array(self._ids, dtype=np.int64)
        counts = np.array(self._counts, dtype=np.int64)
        inputs = np.array(self._inputs, dtype=np.int64)
        self._ids, self._counts, self._inputs = [], [], []
        self.total_blocks += len(ids)
        prev, q, req, pos, starts, found_loc, fids, found, last_local = self._previous_accesses(ids, counts)
        depth = self._depths(prev, q, req, starts)
        self._accumulate(depth, req, pos, inputs)
        self._compact(len(ids), found_loc, fids, found, last_local)
        self._flush_at = min(max(self.chunk_accesses, len(self._known_ids) // 4), _MAX_CHUNK_ACCESSES)

    def _previous_accesses(self, ids: np.ndarray, counts: np.ndarray):
        """Per access: slot of its previous access (prev) and of its last access before its request (q).

        Slots: known blocks ``0..D-1``; this chunk's accesses ``D + j``. ``-1`` = never seen.
        """
        n = len(ids)
        d = len(self._known_ids)
        starts = np.cumsum(counts) - counts  # first access of each request [chunk index]
        req = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
        pos = np.arange(n, dtype=np.int64) - starts[req]  # block position inside its request
        order = np.argsort(ids, kind="stable")  # by id, then time
        sorted_ids = ids[order]
        first = np.ones(n, bool)
        np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=first[1:])
        last = np.ones(n, bool)
        np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=last[:-1])
        prev_sorted = np.empty(n, np.int64)
        prev_sorted[1:] = d + order[:-1]
        first_idx = np.flatnonzero(first)
        fids = sorted_ids[first_idx]
        loc = np.searchsorted(self._known_ids, fids)
        if d:
            found = self._known_ids[np.minimum(loc, d - 1)] == fids
        else:
            found = np.zeros(len(fids), bool)
        from_state = np.full(len(fids), -1, np.int64)
        from_state[found] = self._known_slot[loc[found]]
        prev_sorted[first_idx] = from_state
        # q: the previous access of the first occurrence of the id within the same request
        req_sorted = req[order]
        group_start = first.copy()
        group_start[1:] |= req_sorted[1:] != req_sorted[:-1]
        group_idx = np.maximum.accumulate(np.where(group_start, np.arange(n), 0))
        prev = np.empty(n, np.int64)
        prev[order] = prev_sorted
        q = np.empty(n, np.int64)
        q[order] = prev_sorted[group_idx]
        last_local = order[np.flatnonzero(last)]  # chunk index of each distinct id's last access
        return prev, q, req, pos, starts, loc, fids, found, last_local

    def _depths(self, prev: np.ndarray, q: np.ndarray, req: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Stack depth [blocks] of each access before its request; _INF_DEPTH if never seen."""
        d = len(self._known_ids)
        if d + len(prev) >= _INF_DEPTH:
            raise InputError("trace too large for the LRU curve (2^36 distinct blocks)")
        depth = np.full(len(prev), _INF_DEPTH, np.int64)
        seen = q >= 0
        q_seen = q[seen]
        prefix = starts[req[seen]]  # earlier accesses of the chunk: indices 0 .. start-1
        newer = count_prefix_at_least(prev + 1, prefix, q_seen + 1)  # accesses re-touching slots >= q
        depth[seen] = (d + prefix - q_seen) - newer
        return depth

    def _accumulate(self, depth: np.ndarray, req: np.ndarray, pos: np.ndarray, inputs: np.ndarray) -> None:
        """Add each access's tokens and one block to the histograms at its request's prefix-max depth."""
        offset = req * _DEPTH_SPAN  # segmented running max: each request starts above the previous
        prefix_max = np.maximum.accumulate(depth + offset) - offset
        tokens = np.minimum(self.block_tokens, inputs[req] - pos * self.block_tokens)
        finite = prefix_max < _INF_DEPTH
        keys = prefix_max[finite]
        if not len(keys):
            return
        size = int(keys.max()) + 1
        add_blocks = np.bincount(keys, minlength=size)
        add_tokens = np.rint(np.bincount(keys, weights=tokens[finite], minlength=size)).astype(np.int64)
        if size > len(self._hist_blocks):
            grow = size - len(self._hist_blocks)
            self._hist_blocks = np.concatenate((self._hist_blocks, np.zeros(grow, np.int64)))
            self._hist_tokens = np.concatenate((self._hist_tokens, np.zeros(grow, np.int64)))
        self._hist_blocks[:size] += add_blocks
        self._hist_tokens[:size] += add_tokens

    def _compact(self, n: int, loc: np.ndarray, fids: np.ndarray, found: np.ndarray,
                 last_local: np.ndarray) -> None:
        """Renumber the live slots (each block's last access) to ``0..D'-1``, keeping their order."""
        d = len(self._known_ids)
        alive = np.zeros(d + n, bool)
        alive[:d] = True
        alive[self._known_slot[loc[found]]] = False  # re-accessed: their old slot is dead
        alive[d + last_local] = True
        new_slot = np.cumsum(alive) - 1
        known_slot = new_slot[self._known_slot]
        chunk_slot = new_slot[d + last_local]
        known_slot[loc[found]] = chunk_slot[found]
        fresh = ~found
        self._known_ids = np.insert(self._known_ids, loc[fresh], fids[fresh])
        self._known_slot = np.insert(known_slot, loc[fresh], chunk_slot[fresh])

    def finish(self, skipped_lines: int = 0) -> LruProfile:
        """The cumulative histograms of everything added."""
        self._flush()
        distinct = len(self._known_ids)
        tokens = np.zeros(distinct + 1, np.int64)
        blocks = np.zeros(distinct + 1, np.int64)
        size = min(len(self._hist_tokens), distinct + 1)
        tokens[:size] = self._hist_tokens[:size]
        blocks[:size] = self._hist_blocks[:size]
        return LruProfile(
            block_tokens=self.block_tokens, requests=self.requests, skipped_lines=skipped_lines,
            input_tokens=self.input_tokens, total_blocks=self.total_blocks, distinct_blocks=distinct,
            reused_tokens_upto=np.cumsum(tokens), hit_blocks_upto=np.cumsum(blocks),
        )


def lru_profile_of_requests(requests: Iterable[TraceRequest], block_tokens: int = DEFAULT_BLOCK_TOKENS,
                            skipped_lines: int = 0,
                            chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> LruProfile:
    """LRU depth histograms of in-memory requests (one pass)."""
    engine = _LruStackEngine(block_tokens, chunk_accesses)
    for request in requests:
        engine.add(request.hash_ids, request.input_length)
    return engine.finish(skipped_lines)


def lru_profile(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False,
                chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> LruProfile:
    """LRU depth histograms of a trace file, in one streaming pass."""
    reader = read_trace(path, block_tokens, skip_bad)
    engine = _LruStackEngine(block_tokens, chunk_accesses)
    for request in reader:
        engine.add(request.hash_ids, request.input_length)
    return engine.finish(reader.skipped_lines)


def lru_curve_of_requests(requests: Iterable[TraceRequest], capacities_tokens: Sequence[int | None],
                          block_tokens: int = DEFAULT_BLOCK_TOKENS, skipped_lines: int = 0,
                          chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> tuple[ReplayResult, ...]:
    """LRU results at every capacity [tokens] (None = infinite) of in-memory requests, in one pass."""
    for capacity in capacities_tokens:
        capacity_blocks_for(capacity, block_tokens)  # validate before the pass
    profile = lru_profile_of_requests(requests, block_tokens, skipped_lines, chunk_accesses)
    return tuple(profile.at(capacity) for capacity in capacities_tokens)


def lru_curve(path: str | Path, capacities_tokens: Sequence[int | None], block_tokens: int = DEFAULT_BLOCK_TOKENS,
              skip_bad: bool = False, chunk_accesses: int = DEFAULT_CHUNK_ACCESSES) -> tuple[ReplayResult, ...]:
    """LRU results at every capacity [tokens] (None = infinite) of a trace file, in one streaming pass."""
    for capacity in capacities_tokens:
        capacity_blocks_for(capacity, block_tokens)
    profile = lru_profile(path, block_tokens, skip_bad, chunk_accesses)
    return tuple(profile.at(capacity) for capacity in capacities_tokens)


# ---------------------------------------------------------------- everything in one pass


def analyze_trace(path: str | Path, capacities_tokens: Sequence[int | None],
                  block_tokens: int = DEFAULT_BLOCK_TOKENS, policy: str = "lru",
                  skip_bad: bool = False, keep_profile: bool = False) -> TraceAnalysis:
    """Statistics plus one result per capacity [tokens] (None = infinite), in one streaming pass.

    LRU with several capacities uses the stack-depth curve; one LRU capacity or FIFO simulates directly
    (FIFO: one OrderedDict per capacity). ``keep_profile`` (LRU only) always uses the stack-depth curve and
    returns its :class:`LruProfile`, which answers capacities chosen after the pass (e.g. a grid up to the
    working set).
    """
    _check_policy(policy)
    _check_block_tokens(block_tokens)
    if keep_profile and policy != "lru":
        raise InputError(f"policy: the one-pass capacity profile exists for lru only, not {policy!r}")
    for capacity in capacities_tokens:
        capacity_blocks_for(capacity, block_tokens)
    reader = read_trace(path, block_tokens, skip_bad)
    stats = _StatsAccumulator(block_tokens)
    use_curve = policy == "lru" and (len(capacities_tokens) > 1 or keep_profile)
    engine = _LruStackEngine(block_tokens) if use_curve else None
    sims = [] if use_curve else [_CacheSimulator(c, block_tokens, policy) for c in capacities_tokens]
    for request in reader:
        stats.add(request)
        if engine is not None:
            engine.add(request.hash_ids, request.input_length)
        for sim in sims:
            sim.add(request.hash_ids, request.input_length)
    skipped = reader.skipped_lines
    profile = engine.finish(skipped) if engine is not None else None
    if profile is not None:
        results = tuple(profile.at(c) for c in capacities_tokens)
    else:
        results = tuple(sim.finish(skipped) for sim in sims)
    return TraceAnalysis(stats=stats.finish(skipped), results=results,
                         profile=profile if keep_profile else None, first_problem=reader.first_problem)
