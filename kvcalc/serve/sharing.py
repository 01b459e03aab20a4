"""KV held under prefix sharing, layer group by layer group.

A request of L tokens whose first c tokens are a cached shared prefix stores, in each layer group, only what
that group keeps for the prefix and what no other request (or the prefix cache) already holds:
  full attention / MLA   the c prefix tokens are shared;
  sliding window W       only the prefix tokens still inside the request's window are shared:
                         max(0, c - max(0, L - W)) (a window that has slid past the prefix shares nothing);
  compressed (ratio r)   the floor(c / r) compressed entries built from the prefix, plus the window part as above;
  indexer keys           follow the entries they index.
Saved bytes never exceed what the group stores for the request, so KV held is never negative.
The prefix tree's own copy of a segment (first token a, end token b) holds, per group,
stored(b) - stored(a): what the segment adds to a request that ends with it (0 for a window already full).
"""

from __future__ import annotations

from kvcalc.model import attention as att


def _at_least_0(x):
    """max(0, x) for a number or a numpy array (numpy is imported only when an array is passed)."""
    if isinstance(x, (int, float)):
        return max(0, x)
    import numpy as np

    return np.maximum(x, 0)


def shared_entries(g: att.GroupLayout, context_tokens, cached_tokens) -> tuple:
    """(dense, compressed) entries per layer of a request's KV that its cached prefix provides [entries]; ints or
    numpy arrays of requests."""
    if g.window_tokens is None:
        dense = cached_tokens
    else:
        dense = _at_least_0(cached_tokens - _at_least_0(context_tokens - g.window_tokens))
    compressed = cached_tokens // g.ratio if g.ratio is not None else 0
    return dense, compressed


def shared_bytes(groups: list[att.GroupLayout], context_tokens, cached_tokens):
    """Bytes of one request's KV (L = ``context_tokens``) held elsewhere thanks to its cached prefix of
    ``cached_tokens`` tokens, summed over layer groups [B] (a number, or an array for arrays of requests)."""
    total = 0.0
    for g in groups:
        dense, compressed = shared_entries(g, context_tokens, cached_tokens)
        indexed = {"dense": dense, "compressed": compressed}.get(g.indexed, 0)
        total += g.layers * ((dense + compressed) * g.entry_bytes + indexed * g.indexer_bytes)
    return total


def segment_bytes(groups: list[att.GroupLayout], segments: tuple[tuple[int, int, int], ...]) -> float:
    """Bytes the prefix tree holds for its shared segments: sum over segments (a, b, copies) of
    copies x sum over groups of stored(b) - stored(a) [B]."""
    return sum(k * sum(att.stored_bytes(g, b) - att.stored_bytes(g, a) for g in groups) for a, b, k in segments)
