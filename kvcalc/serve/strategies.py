"""Scheduling strategies on one workload: how many tokens each request takes from a prefix cache.

A ``lru``: no reuse across requests; every request prefills its whole context.
C ``prefix-tree``: a radix tree with reference counts. Requests are served in order (class by class);
a request reuses the longest run of leading shared segments whose exact prefix (its group at every level)
some earlier request already built. Cold: each shared segment is prefilled once per group. Warm
(``warm=True``): every shared segment is already cached, so it is never prefilled.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from kvcalc.model.workload_schema import WorkloadPreset
from kvcalc.out.errors import InputError
from kvcalc.out.units import MAX_GROUP_START_TESTS

STRATEGIES = {"lru": "A lru (no prefix reuse)", "prefix-tree": "C prefix-tree (radix tree + reference counts)"}
# what tables and Markdown show for each strategy (JSON/CSV keep lru / prefix-tree): A's "lru" is its eviction
# to DRAM/SSD, not a prefix cache (it reuses nothing across requests), unlike trace's LRU prefix cache
LABELS = (("lru", "A lru (no prefix reuse)"), ("prefix-tree", "C prefix-tree"))


def labelled(result):
    """``result`` with every ``strategy`` column of its tables showing :data:`LABELS` (values unchanged)."""
    from dataclasses import replace

    def table(t):
        cols = tuple(replace(c, labels=LABELS) if c.key == "strategy" and c.kind == "text" else c for c in t.columns)
        return replace(t, columns=cols)

    return replace(result, main=table(result.main), extra=tuple(table(t) for t in result.extra))


def _starts_below(x: int, groups: int, n: int) -> int:
    """Group starts of a level with ``groups`` groups below request x: starts are ceil(k n / g), k < g, and
    ceil(k n / g) < x  <=>  k <= floor((x - 1) g / n), so there are min(g, floor((x - 1) g / n) + 1) [requests]."""
    return 0 if x <= 0 else min(groups, (x - 1) * groups // n + 1)


def _is_start(i, groups: int, n: int):
    """Whether request i (int array) starts a group of a level with ``groups`` <= n groups: request i is in
    group floor(i g / n), which changes at i iff some multiple of n lies in ((i - 1) g, i g], i.e. iff
    (i g) mod n < g."""
    return (i * groups) % n < groups


_CHUNK = 1 << 20        # group starts tested per numpy pass: bounded memory whatever the group count
_PYTHON_WALK = 50_000   # up to this many membership tests, plain Python (no numpy import)
_INT64_SAFE = 2**62     # i x g below this fits numpy int64
_LIST_COST = 3          # one start listed by _union_counts costs about 3 membership tests of _new_starts


def _new_starts(groups: int, kept: list[int], n: int, bounds: list[int]) -> list[int]:
    """Starts of a level with ``groups`` groups that start no group of the levels ``kept`` (whose group counts
    neither divide nor are divided by it), per class range [bounds[c], bounds[c+1]) [requests].
    Walks the starts in plain Python when they are few, else in chunks of numpy integers (Python integers
    inside numpy when i x g could overflow int64)."""
    out = [0] * (len(bounds) - 1)
    if groups * (len(kept) + 1) <= _PYTHON_WALK:
        from bisect import bisect_right

        for k in range(groups):
            i = -(-k * n // groups)
            if not any(_is_start(i, g, n) for g in kept):
                out[bisect_right(bounds, i) - 1] += 1
        return out
    import numpy as np

    wide = n * max([groups, *kept]) >= _INT64_SAFE
    for k0 in range(0, groups, _CHUNK):
        k = np.arange(k0, min(groups, k0 + _CHUNK), dtype=np.int64)
        if wide:
            k = k.astype(object)
        i = -(-k * n // groups)                  # ascending, so classes are found by bisection
        new = np.ones(len(i), dtype=bool)
        for g in kept:
            new &= np.asarray(~_is_start(i, g, n) if not wide else [not x for x in _is_start(i, g, n)], dtype=bool)
        edges = np.searchsorted(i[new], bounds)
        for c in range(len(out)):
            out[c] += int(edges[c + 1] - edges[c])
    return out


def _union_counts(w: WorkloadPreset, bounds: list[int]) -> list[list[int]]:
    """first_counts by enumerating every level's group starts once: the first level of each start, counted per
    class. O(sum of groups) time; memory bounded by walking the requests in windows of ~_CHUNK starts."""
    n, groups = w.requests, [seg.groups for seg in w.shared]
    out = [[0] * (len(bounds) - 1) for _ in groups]
    total = sum(groups)
    if total <= _PYTHON_WALK:
        from bisect import bisect_right

        first: dict[int, int] = {}
        for level, g in enumerate(groups):
            for k in range(g):
                first.setdefault(-(-k * n // g), level)
        for i, level in first.items():
            out[level][bisect_right(bounds, i) - 1] += 1
        return out
    import numpy as np

    windows = -(-total // max(1, _CHUNK // 4))   # ~2^18 starts a window: ~60 MB at most, measured
    dtype = object if n * max(groups) >= _INT64_SAFE else np.int64
    classes = len(bounds) - 1
    for j in range(windows):
        a, b = j * n // windows, (j + 1) * n // windows
        ks = [(level, g, _starts_below(a, g, n), _starts_below(b, g, n)) for level, g in enumerate(groups)]
        if b - a <= 4 * _CHUNK and dtype is np.int64:   # a dense first-level map of the window: no sort
            first_level = np.full(b - a, -1, dtype=np.int32)
            for level, g, k0, k1 in reversed(ks):       # lower levels written last, so they win
                first_level[-(-np.arange(k0, k1, dtype=np.int64) * n // g) - a] = level
            starts_a = np.flatnonzero(first_level >= 0)
            levels_a = first_level[starts_a]
            starts_a += a
        else:
            starts, levels = [], []
            for level, g, k0, k1 in ks:
                k = np.arange(k0, k1, dtype=np.int64).astype(dtype)
                starts.append(-(-k * n // g))
                levels.append(np.full(k1 - k0, level, dtype=np.int64))
            starts_a, first = np.unique(np.concatenate(starts), return_index=True)   # first = lowest level
            levels_a = np.concatenate(levels)[first]
        cls = np.searchsorted(np.asarray(bounds[1:-1], dtype=dtype), starts_a, side="right")
        per = np.bincount(levels_a.astype(np.int64) * classes + cls.astype(np.int64), minlength=len(groups) * classes)
        for level in range(len(groups)):
            for c in range(classes):
                out[level][c] += int(per[level * classes + c])
    return out


def _walk_tests(groups: list[int]) -> tuple[int, tuple[int, int] | None]:
    """(membership tests :func:`first_counts`'s walk costs, the first pair of counts that do not divide each
    other or None) for these levels' group counts: the kept counts as first_counts keeps them. Once more than
    _NUMPY_KEPT counts are kept (many mutually non-dividing levels), the rest goes on in numpy."""
    walk_tests, kept, worst = 0, [], None
    for i, g in enumerate(groups):
        if len(kept) > _NUMPY_KEPT and max(groups) < _INT64_SAFE:
            return _walk_tests_numpy(groups[i:], kept, walk_tests, worst)
        if not any(k % g == 0 for k in kept):
            if not all(g % k == 0 for k in kept):
                walk_tests += g * len(kept)
                worst = worst or (next(k for k in kept if g % k), g)
            kept = [k for k in kept if g % k] + [g]
    return walk_tests, worst


_NUMPY_KEPT = 64        # more kept counts than this: _walk_tests goes on with them in a numpy array


def _walk_tests_numpy(groups: list[int], kept: list[int] = (), walk_tests: int = 0,
                      worst: tuple[int, int] | None = None) -> tuple[int, tuple[int, int] | None]:
    """:func:`_walk_tests` from a state (kept counts, tests so far, first pair) on, each level tested against the
    kept counts in a few array operations: 1,000 levels with groups 1..1,000 keep ~500 counts, 5 x 10^5 Python
    modulos (~75 ms), here ~25 ms. Counts below 2^62 (int64)."""
    import numpy as np

    kept = np.asarray(kept, dtype=np.int64)
    for g in groups:
        if kept.size and not (kept % g).all():          # g divides a kept count: adds nothing
            continue
        keep = np.remainder(g, kept) != 0               # kept counts that do not divide g
        if keep.any():
            walk_tests += g * int(kept.size)
            worst = worst or (int(kept[keep][0]), g)
        kept = np.append(kept[keep], np.int64(g))
    return walk_tests, worst


def start_tests(w: WorkloadPreset) -> tuple[int, int]:
    """(membership tests the closed-form pass walks, starts a full listing walks) for ``w``'s shared levels: a
    dry run of :func:`first_counts`. Raises InputError when the cheaper of the two, in tests (a listed start
    costs _LIST_COST tests), exceeds MAX_GROUP_START_TESTS: the time any workload costs stays bounded
    (about 22 ns per test, 70 ns per listed start, measured on 2 x 10^7 and 1.9 x 10^7)."""
    groups = [seg.groups for seg in w.shared]
    listing = sum(groups)
    walk_tests, worst = _walk_tests(groups)
    cost = min(walk_tests, _LIST_COST * listing)
    if cost > MAX_GROUP_START_TESTS:
        raise InputError(f"shared prefix: group counts {worst[0]:,} and {worst[1]:,} do not divide each other; "
                         f"counting the requests that start a group would take {cost:,} tests "
                         f"(limit {MAX_GROUP_START_TESTS:,}); use group counts where one divides the other, "
                         "or fewer groups")
    return walk_tests, listing


def first_counts(w: WorkloadPreset) -> list[list[int]]:
    """[level][class] -> requests of the class that first start a group at that level [requests].

    A request builds a new prefix from the first level where it starts a group (every other request reuses all
    shared segments); the requests that start a group at some level <= s are the union U_s of the levels' group
    starts, and |U_s| is the number of distinct prefix-tree nodes at level s. One pass over the levels with
    running per-class totals of |U_s|: a level whose group count g divides one already seen adds nothing (its
    starts ceil(k n / g) = ceil(k m n / (m g)) are among them); a level that every kept count divides adds
    (its starts in the class) - (the running total), both closed forms, so equal groups are one term and 10^9
    groups cost O(1); only group counts that do not divide each other walk their starts (numpy, in chunks),
    testing each against the kept counts - or, when that costs more than listing every level's starts once
    (many small mutually non-dividing counts), every start is listed once instead (``_union_counts``).
    """
    n = w.requests
    bounds = [0]
    for c in w.classes:
        bounds.append(bounds[-1] + c.count)
    walk_tests, listing = start_tests(w)
    if walk_tests > _LIST_COST * listing:
        return _union_counts(w, bounds)
    held = [0] * len(w.classes)          # |U_s ∩ class|, running
    kept: list[int] = []                 # group counts whose starts make up U_s (none divides another)
    out = []
    for seg in w.shared:
        g = seg.groups
        if any(k % g == 0 for k in kept):
            new = [0] * len(held)
        elif all(g % k == 0 for k in kept):
            new = [_starts_below(hi, g, n) - _starts_below(lo, g, n) - h
                   for lo, hi, h in zip(bounds, bounds[1:], held)]
            kept = []
        else:
            new = _new_starts(g, kept, n, bounds)
            kept = [k for k in kept if g % k]
        kept.append(g)
        held = [h + x for h, x in zip(held, new)]
        out.append(new)
    return out


def _offsets(w: WorkloadPreset) -> list[int]:
    """Cumulative shared-prefix tokens after 0, 1, ... segments."""
    out = [0]
    for s in w.shared:
        out.append(out[-1] + s.tokens)
    return out


def cached_prefixes(w: WorkloadPreset, strategy: str, warm: bool = False, counts=None) -> Counter:
    """Counter of (class index, cached tokens) over all requests [requests]; ``counts`` = first_counts(w) when
    already known."""
    if strategy == "lru" or not w.shared:
        return Counter({(ci, 0): c.count for ci, c in enumerate(w.classes)})
    offsets = _offsets(w)
    if warm:
        return Counter({(ci, offsets[-1]): c.count for ci, c in enumerate(w.classes)})
    out: Counter = Counter()
    left = [c.count for c in w.classes]
    for level, per_class in enumerate(counts if counts is not None else first_counts(w)):
        for ci, k in enumerate(per_class):
            if k:
                out[(ci, offsets[level])] += k
                left[ci] -= k
    for ci, k in enumerate(left):
        if k:
            out[(ci, offsets[-1])] += k
    return out


def prefix_nodes(w: WorkloadPreset, counts=None) -> list[int]:
    """Distinct cached copies of each shared segment: requests that start a group at that level or above
    (running totals over the levels)."""
    out, total = [], 0
    for per_class in counts if counts is not None else first_counts(w):
        total += sum(per_class)
        out.append(total)
    return out


def prefix_segments(w: WorkloadPreset, counts=None) -> tuple[tuple[int, int, int], ...]:
    """(first token, end token, distinct copies) of each shared segment: what the prefix tree holds."""
    offsets = _offsets(w)
    return tuple((a, b, k) for a, b, k in zip(offsets, offsets[1:], prefix_nodes(w, counts)))


def prefix_cache_tokens(w: WorkloadPreset) -> int:
    """Tokens the prefix tree holds for the shared segments: sum of segment tokens x distinct copies."""
    return sum((b - a) * k for a, b, k in prefix_segments(w))


class Slice(NamedTuple):
    """``count`` requests of one class with the same context, cached prefix and output [tokens]."""

    label: str
    context_tokens: int
    cached_tokens: int
    output_tokens: int
    count: int


@dataclass(frozen=True)
class RequestMix:
    """What one strategy does with every request, plus the prefix cache it keeps [tokens].

    ``extra_cache_tokens`` are cached tokens not already held by some request of the mix (a warm cache's
    segments; a trace replay's cache contents); a cold prefix tree's segments live in their first request.
    ``segments`` are the prefix tree's shared segments as (first token, end token, copies), so their bytes can
    be counted layer group by layer group; empty = only a token count is known (a trace's LRU cache).
    """

    slices: tuple[Slice, ...]
    prefix_cache_tokens: int
    extra_cache_tokens: int
    labels: tuple[str, ...]
    segments: tuple[tuple[int, int, int], ...] = ()


def workload_mix(w: WorkloadPreset, strategy: str, warm: bool = False) -> RequestMix:
    """The request mix of a workload preset under ``strategy``."""
    counts = first_counts(w) if strategy == "prefix-tree" else None
    slices = tuple(Slice(w.classes[ci].name, w.classes[ci].context_tokens, cached, w.classes[ci].output_tokens, n)
                   for (ci, cached), n in sorted(cached_prefixes(w, strategy, warm, counts).items()))
    segments = prefix_segments(w, counts) if strategy == "prefix-tree" else ()
    cache = sum((b - a) * k for a, b, k in segments)
    return RequestMix(slices, cache, cache if warm else 0, tuple(c.name for c in w.classes), segments)
