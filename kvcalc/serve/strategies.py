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

STRATEGIES = {"lru": "A: LRU, no prefix reuse", "prefix-tree": "C: radix prefix tree + reference counts"}


def first_requests(w: WorkloadPreset) -> dict[int, int]:
    """Requests that are the first of a group at some level -> the lowest such level.

    Groups are contiguous (floor(i g / n) never decreases), so group k of level s starts at request
    ceil(k n / g); a request builds a new prefix from the first level where it starts a group, and every other
    request reuses all shared segments. O(sum of groups), however many requests.
    """
    n = w.requests
    firsts: dict[int, int] = {}
    for level, seg in enumerate(w.shared):
        for k in range(seg.groups):
            i = -(-k * n // seg.groups)
            firsts[i] = min(firsts.get(i, level), level)
    return firsts


def _offsets(w: WorkloadPreset) -> list[int]:
    """Cumulative shared-prefix tokens after 0, 1, ... segments."""
    out = [0]
    for s in w.shared:
        out.append(out[-1] + s.tokens)
    return out


def cached_prefixes(w: WorkloadPreset, strategy: str, warm: bool = False) -> Counter:
    """Counter of (class index, cached tokens) over all requests [requests]."""
    if strategy == "lru" or not w.shared:
        return Counter({(ci, 0): c.count for ci, c in enumerate(w.classes)})
    offsets = _offsets(w)
    if warm:
        return Counter({(ci, offsets[-1]): c.count for ci, c in enumerate(w.classes)})
    firsts = sorted(first_requests(w).items())
    out: Counter = Counter()
    lo = 0
    for ci, c in enumerate(w.classes):
        hi = lo + c.count
        inside = [level for i, level in firsts if lo <= i < hi]
        for level in inside:
            out[(ci, offsets[level])] += 1
        if c.count > len(inside):
            out[(ci, offsets[-1])] += c.count - len(inside)
        lo = hi
    return out


def prefix_nodes(w: WorkloadPreset) -> list[int]:
    """Distinct cached copies of each shared segment: the groups that start at that level or above."""
    levels = list(first_requests(w).values())
    return [sum(1 for lv in levels if lv <= s) for s in range(len(w.shared))]


def prefix_cache_tokens(w: WorkloadPreset) -> int:
    """Tokens the prefix tree holds for the shared segments: sum of segment tokens x distinct copies."""
    return sum(s.tokens * k for s, k in zip(w.shared, prefix_nodes(w)))


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
    """

    slices: tuple[Slice, ...]
    prefix_cache_tokens: int
    extra_cache_tokens: int
    labels: tuple[str, ...]


def workload_mix(w: WorkloadPreset, strategy: str, warm: bool = False) -> RequestMix:
    """The request mix of a workload preset under ``strategy``."""
    slices = tuple(Slice(w.classes[ci].name, w.classes[ci].context_tokens, cached, w.classes[ci].output_tokens, n)
                   for (ci, cached), n in sorted(cached_prefixes(w, strategy, warm).items()))
    cache = prefix_cache_tokens(w) if strategy == "prefix-tree" else 0
    return RequestMix(slices, cache, cache if warm else 0, tuple(c.name for c in w.classes))
