"""One LRU capacity, exact, in numpy chunks, with memory for the cache (and the blocks seen) only.

For one capacity of ``C`` blocks only the top ``C`` of the LRU stack can hit, so the state carried from chunk
to chunk is the ``K = min(C, distinct)`` most recent distinct blocks (their ids in LRU order: slots
``0..K-1``, ``K-1`` the most recent): a deeper block is a miss at ``C`` until it is used again, and is then treated as never seen.
Within a chunk of ``n`` accesses, slot ``K + j`` is access ``j``. The slots are grouped by id, which gives each
slot's next use; for each access, ``q`` is the slot of its block's last use before its request (none: not in
the state nor earlier in the chunk). A request's hit run at
``C`` is its leading accesses whose block is among the ``C`` most recent distinct blocks at the request's
start ``s``: ``live(q, s) <= C``, where ``live(q, s)`` = the slots ``p`` in ``[q, s)`` whose next use is at or
after ``s`` (the distinct blocks used since ``q``; :mod:`kvcalc.trace.lru_curve` derives the same depth).
``live`` never grows with ``q``, so only the slots where a request's running minimum of ``q`` drops are
tested (mostly its first block). A test is free when ``s - q <= C``; otherwise bounds from a table of the slot
axis cut into ``b``-slot bins (:func:`live_counts`: for bins ``k`` and ``m``, the slots of bin ``k`` next used
after bin ``m``, summed over ``k``) decide, and the few tests within ``3b`` of ``C`` count exactly over the
partial bins. After the chunk the state becomes the ``C`` most recent live slots.

Grouping the slots by id is one ``np.sort`` of 64-bit keys (a multiplicative hash of the id in the
high bits, the access index in the low bits; equal hashes of unequal ids are detected and the chunk falls back
to a stable ``argsort``), about a third of a stable argsort's time.

The infinite cache (the blocks seen before a request: the trace's distinct blocks and maximum hit rate) is
kept as :class:`kvcalc.trace.lean.LeanEngine` keeps it, with figures identical to its own: the exact ids seen
(:class:`SeenIds`: a bit per id while the ids fit the lean replay's bit-table bound, else a sorted int64 array)
until, unless ``exact_stats``, the lean replay would move to its bounded sample
(:class:`~kvcalc.trace.seen_sample.SeenSample`): after the batch in which an id is negative or at least
``8 x max(2^20, 4 x (distinct ids before it + 1))``; from the next batch on the same sample is fed the same
sampled ids (picked in numpy, added in Python per request that has one).

Memory: the state (8 B per cached block), one chunk (at least :data:`CHUNK_ACCESSES` accesses, and ``K / 4``:
about 100 B per access, so ~25 B per cached block once the cache is large), the ids seen (a bit per id up to
8 B per distinct block, or the bounded sample), and numpy itself (~16 MB). :func:`kvcalc.trace.analysis.
one_lru_in_numpy` says when this engine answers instead of the lean replay. This module computes; it
never prints.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import chain

import numpy as np

from kvcalc.trace.engine import FixedAnswers
from kvcalc.trace import lean
from kvcalc.trace.lru_curve import _keep_chunk_arrays_on_the_heap
from kvcalc.trace.result import capacity_blocks_for, replay_result
from kvcalc.trace.seen_sample import KEY_PRIME, SeenSample

CHUNK_ACCESSES = 1 << 16  # accesses per numpy chunk, at least
_HASH = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing's odd multiplier (2^64 / golden ratio)
_INF = np.iinfo(np.int64).max


def group_by_id(ids: np.ndarray) -> np.ndarray:
    """A permutation that groups equal ``ids`` together, each group in access order (the groups in hash order, not
    by value), via one sort of ``hash(id) << b | index`` keys (``b`` bits for the index); an equal hash of two
    unequal ids falls back to a stable argsort."""
    n = len(ids)
    bits = max(n - 1, 1).bit_length()
    mask = np.uint64((1 << bits) - 1)
    keys = ids.view(np.uint64) * _HASH
    keys &= ~mask
    keys |= np.arange(n, dtype=np.uint64)
    keys.sort()
    order = (keys & mask).astype(np.int64)
    keys >>= np.uint64(bits)
    sorted_ids = ids[order]
    same_hash = keys[1:] == keys[:-1]
    if np.any(same_hash & (sorted_ids[1:] != sorted_ids[:-1])):  # two ids, one hash: sort by the ids
        return np.argsort(ids, kind="stable")
    return order


def live_counts(nxt: np.ndarray, q: np.ndarray, s: np.ndarray, prev: np.ndarray, lo: int, hi: int,
                bin_slots: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per query ``i``: bounds on ``live(q_i, s_i)``, the slots ``p`` in ``[q_i, s_i)`` with ``nxt[p] >= s_i``
    [slots]: (lower, upper), exact (equal) where ``lo <= lower <= hi`` could not be decided from bins alone,
    i.e. every answer is exact enough to compare with any threshold in ``lo .. hi`` (``lower > hi``: above it;
    ``upper <= lo``: within it). ``prev[j]``: the slot whose next use is ``j`` (-1 if none), so that
    ``nxt[prev[j]] == j``; ``nxt``: the next use of each slot (a large value when none)."""
    total = len(nxt)
    b = bin_slots or max(64, int(np.sqrt(2 * total)))  # about total / 2 cells in the table
    bins = -(-total // b)
    nb = np.minimum(nxt // b, bins)  # the bin of the next use; ``bins``: none
    table = np.bincount(np.arange(total) // b * (bins + 1) + nb, minlength=bins * (bins + 1))
    table = table.reshape(bins, bins + 1)
    after = np.cumsum(table[:, ::-1], axis=1)[:, ::-1]  # after[k][m]: slots of bin k next used in bin >= m
    summed = np.zeros((bins + 1, bins + 1), np.int64)
    np.cumsum(after, axis=0, out=summed[1:])  # summed[k][m]: the same over bins < k
    kq = -(-q // b)
    ks = s // b
    wide = kq < ks
    lower = np.zeros(len(q), np.int64)
    upper = np.minimum(s - q, total)
    kqw, ksw = kq[wide], ks[wide]
    nxt_bin = np.minimum(ksw + 1, bins)
    full = summed[ksw, nxt_bin] - summed[kqw, nxt_bin]  # bins kq..ks-1, next used after bin ks
    slack = (kqw * b - q[wide]) + (s[wide] - ksw * b) + np.minimum((ksw + 1) * b, total) - s[wide]
    lower[wide] = full
    upper[wide] = np.minimum(full + slack, s[wide] - q[wide])
    open_ = np.flatnonzero((upper > lo) & (lower <= hi))
    if len(open_):
        lower[open_] = upper[open_] = _exact_live(nxt, prev, q[open_], s[open_], b, summed, bins)
    return lower, upper


def _exact_live(nxt, prev, q, s, b, summed, bins):
    """``live(q, s)`` exactly: the bins' count plus the partial bins, scanned (at most ``3 b`` slots each)."""
    total = len(nxt)
    kq = -(-q // b)
    ks = s // b
    wide = kq < ks
    steps = np.arange(2 * b)
    # short windows (no whole bin) and the head / tail of wide ones: slots scanned one by one
    head_end = np.where(wide, kq * b, s)
    out = _scan(nxt, q, head_end, s, steps)
    tail_start = np.where(wide, ks * b, s)
    out += _scan(nxt, tail_start, s, s, steps[:b])
    w = np.flatnonzero(wide)
    if len(w):
        kqw, ksw, sw = kq[w], ks[w], s[w]
        nxt_bin = np.minimum(ksw + 1, bins)
        out[w] += summed[ksw, nxt_bin] - summed[kqw, nxt_bin]
        # slots of the whole bins next used in [s, end of bin ks): found from the uses j, through prev[j]
        j = sw[:, None] + steps[None, :b]
        inside = j < np.minimum((ksw + 1) * b, total)[:, None]
        pj = prev[np.minimum(j, total - 1)]
        out[w] += np.count_nonzero(inside & (pj >= (kqw * b)[:, None]) & (pj < (ksw * b)[:, None]), axis=1)
    return out


def _scan(nxt, start, end, s, steps):
    """Per query: slots ``p`` in ``[start, end)`` (at most ``len(steps)`` of them) with ``nxt[p] >= s``."""
    p = start[:, None] + steps[None, :]
    inside = p < end[:, None]
    return np.count_nonzero(inside & (nxt[np.minimum(p, len(nxt) - 1)] >= s[:, None]), axis=1)


def _reused(hits: np.ndarray, inputs: list[int], block_tokens: int) -> int:
    """Reused tokens of requests with these hit runs [blocks] and input lengths [tokens]: the sum of
    ``min(hits x B, input)``, in Python integers (exact for any lengths and block size)."""
    return sum(map(min, map(block_tokens.__mul__, hits.tolist()), inputs))


class SeenIds:
    """Exact set of int64 ids: a bit per id while every id is in ``0 .. 8 x max(2^20, 4 x count)`` (the lean
    replay's bit-table bound: at most 4 B per id, about an eighth of a byte for dense ids), else a sorted array
    plus a sorted side array merged in once it passes a quarter of it (8 B per id; a stable sort of two sorted
    runs is one linear merge, so merges cost O(1) per id amortised)."""

    def __init__(self) -> None:
        self.bits: np.ndarray | None = np.zeros(0, np.uint8)  # bit h & 7 of bits[h >> 3]: id h seen
        self.main = self.side = np.zeros(0, np.int64)
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def contains(self, ids: np.ndarray) -> np.ndarray:
        found = np.zeros(len(ids), bool)
        if self.bits is not None:
            inside = np.flatnonzero((ids >= 0) & (ids < 8 * len(self.bits)))
            h = ids[inside]
            found[inside] = (self.bits[h >> 3] >> (h & 7).astype(np.uint8)) & 1
            return found
        for arr in (self.main, self.side):
            if len(arr):
                loc = np.searchsorted(arr, ids)
                found |= arr[np.minimum(loc, len(arr) - 1)] == ids
        return found

    def add(self, new: np.ndarray) -> None:
        """Add ids not yet in the set (distinct)."""
        if not len(new):
            return
        self.count += len(new)
        if self.bits is not None:
            allowed = max(lean.WIDE_TABLE_BYTES, lean.TABLE_BYTES_PER_BLOCK * (self.count + 1))
            low, high = int(new.min()), int(new.max())
            if low >= 0 and high < 8 * allowed:
                size = len(self.bits)
                if (high >> 3) >= size:
                    grown = np.zeros(min(allowed, max((high >> 3) + 1, size + (size >> 2), 1 << 16)), np.uint8)
                    grown[:size] = self.bits
                    self.bits = grown
                np.bitwise_or.at(self.bits, new >> 3, (1 << (new & 7)).astype(np.uint8))
                return
            self.main = np.flatnonzero(np.unpackbits(self.bits, bitorder="little")).astype(np.int64)
            self.bits = None
        side = np.concatenate((self.side, np.sort(new)))
        side.sort(kind="stable")
        if len(side) > max(len(self.main) >> 2, 1 << 12):
            merged = np.concatenate((self.main, side))
            merged.sort(kind="stable")
            self.main, self.side = merged, np.zeros(0, np.int64)
        else:
            self.side = side

    def tolist(self) -> list[int]:
        if self.bits is not None:
            return np.flatnonzero(np.unpackbits(self.bits, bitorder="little")).tolist()
        return self.main.tolist() + self.side.tolist()


class OneLruEngine:
    """One finite LRU capacity [tokens] and the infinite cache, exact, in numpy (see the module doc); the
    engine interface of :mod:`kvcalc.trace.engine`, answers equal to :class:`kvcalc.trace.lean.LeanEngine`'s
    for the same capacities (``exact_stats`` alike)."""

    def __init__(self, capacities_tokens: Sequence[int | None], block_tokens: int, exact_stats: bool = True,
                 chunk_accesses: int = CHUNK_ACCESSES, max_sampled_ids: int | None = None):
        finite = {c for c in capacities_tokens if c is not None}
        if len(finite) != 1:
            raise ValueError("OneLruEngine: exactly one finite capacity")
        self.capacity_tokens = finite.pop()
        self.block_tokens = block_tokens
        self.limit = capacity_blocks_for(self.capacity_tokens, block_tokens)
        self.exact_stats = exact_stats
        self.chunk_accesses = max(1, int(chunk_accesses))
        self._max_sampled = max_sampled_ids
        _keep_chunk_arrays_on_the_heap()
        self._ids = np.zeros(0, np.int64)  # the cached blocks' ids, in LRU order (slot 0: least recent)
        self.seen: SeenIds | None = SeenIds()
        self.sample: SeenSample | None = None
        self._parts: list[np.ndarray] = []
        self._counts: list[int] = []
        self._inputs: list[int] = []
        self._batch_ends: list[int] = []  # requests buffered at the end of each batch
        self._buffered = 0
        self.counts = [0] * 6  # hit blocks, reused tokens (LRU); the same, infinite cache; blocks; input tokens
        self.requests = 0

    def add_records(self, records: Sequence, signed: bool = True) -> None:
        ids = [r.hash_ids for r in records]
        counts = list(map(len, ids))
        n = sum(counts)
        self._parts.append(np.fromiter(chain.from_iterable(ids), np.int64, count=n))
        self._counts += counts
        self._inputs += [r.input_length for r in records]
        self._batch_ends.append(len(self._counts))
        self._buffered += n
        self.requests += len(records)
        if max(self._buffered, len(self._counts)) >= max(self.chunk_accesses, len(self._ids) >> 2):
            self._flush()

    def _flush(self) -> None:
        if not self._counts:
            return
        ids = np.concatenate(self._parts) if len(self._parts) > 1 else self._parts[0]
        counts = np.array(self._counts, np.int64)
        inputs = self._inputs  # Python integers: the token sums stay exact whatever the lengths
        ends = self._batch_ends
        self._parts, self._counts, self._inputs, self._batch_ends, self._buffered = [], [], [], [], 0
        starts = np.cumsum(counts) - counts
        req = np.repeat(np.arange(len(counts)), counts)
        k = len(self._ids)
        hits, order = self._lru_chunk(ids, req, starts, counts)
        b = self.block_tokens
        c = self.counts
        c[0] += int(hits.sum())
        c[1] += _reused(hits, inputs, b)
        c[4] += len(ids)
        c[5] += sum(inputs)
        split = 0  # requests answered from the exact ids seen
        if self.seen is not None:
            split = self._exact_chunk(ids, order[order >= k] - k, req, starts, inputs, ends)
        if split < len(counts):
            self._sampled_chunk(ids, req, starts, counts, inputs, hits, split)

    def _lru_chunk(self, ids, req, starts, counts) -> tuple[np.ndarray, np.ndarray]:
        """Each request's hit run at the capacity [blocks], and the grouping of the state's and chunk's slots by
        id (:func:`group_by_id`); the state moves on to the chunk's end."""
        k, cap = len(self._ids), self.limit
        slots = np.concatenate((self._ids, ids))  # the id at each slot: state 0..k-1, chunk k..k+n-1
        total = len(slots)
        order = group_by_id(slots)
        sorted_ids = slots[order]
        same = sorted_ids[1:] == sorted_ids[:-1]  # order[i + 1] is the next use of order[i]
        del sorted_ids
        before, after = order[:-1][same], order[1:][same]
        nxt = np.full(total, _INF, np.int64)
        nxt[before] = after
        hits = np.zeros(len(counts), np.int64)
        if cap and len(ids):
            prev_all = np.full(total, -1, np.int64)  # prev_all[j]: the slot whose next use is j (-1: none)
            prev_all[after] = before
            prev = prev_all[k:]
            # a block last used in its own request (a repeat) neither ends the run of blocks seen before the
            # request nor moves its oldest slot (the first use did both): its slot counts as the newest
            unseen = prev < 0
            s_req = k + starts
            q = np.where(prev < s_req[req], prev, total)
            unseen_so_far = np.cumsum(unseen)
            unseen_so_far -= (unseen_so_far - unseen)[starts[req]]
            need = np.flatnonzero(unseen_so_far == 0)  # per request: its leading run of blocks seen before it
            if len(need):
                q_need, req_need = q[need], req[need]
                shift = req_need * (total + 1)
                oldest = np.minimum.accumulate(q_need - shift) + shift  # running min of q per request
                record = np.flatnonzero(oldest == q_need)
                q_rec = q_need[record]
                s_rec = s_req[req_need[record]]
                ok = s_rec - q_rec <= cap
                test = np.flatnonzero(~ok)
                if len(test):
                    lower, _ = live_counts(nxt, q_rec[test], s_rec[test], prev_all, cap, cap)
                    ok[test] = lower <= cap
                filled = np.zeros(len(need), np.int64)
                filled[record] = np.arange(len(record))
                hit = ok[np.maximum.accumulate(filled)]
                hits = np.bincount(req_need, weights=hit, minlength=len(counts)).astype(np.int64)
        # the state: the cap most recent live slots (never used again in the chunk), in LRU order
        self._ids = slots[np.flatnonzero(nxt == _INF)[-cap:]] if cap else slots[:0]
        return hits, order

    def _exact_chunk(self, ids, order, req, starts, inputs, ends) -> int:
        """The infinite cache's counts from the exact ids seen, for the chunk's requests up to the end of the
        batch where the lean replay would switch to its sample (then started); returns that many requests."""
        n, nreq = len(ids), len(starts)  # order: the chunk's accesses grouped by id, in access order
        sorted_ids = ids[order]
        first = np.ones(n, bool)
        np.not_equal(sorted_ids[1:], sorted_ids[:-1], out=first[1:])
        first_idx = np.flatnonzero(first)
        fids = sorted_ids[first_idx]
        del sorted_ids
        in_seen = self.seen.contains(fids)
        first_pos = order[first_idx]
        split, switch = nreq, False
        if not self.exact_stats:
            new_pos = np.sort(first_pos[~in_seen])
            new_ids = ids[new_pos]
            rank = len(self.seen) + np.arange(len(new_ids))
            bound = 8 * np.maximum(lean.WIDE_TABLE_BYTES, lean.TABLE_BYTES_PER_BLOCK * (rank + 1))
            sparse = np.flatnonzero((new_ids < 0) | (new_ids >= bound))
            if len(sparse):
                r = int(req[new_pos[sparse[0]]])
                split = next(e for e in ends if e > r)  # the end of the batch holding it
                switch = True
        group_of = np.empty(n, np.int64)
        group_of[order] = np.cumsum(first) - 1
        first_req = req[first_pos]
        seen_before = in_seen[group_of] | (first_req[group_of] < req)
        cut = n if split == nreq else int(starts[split])
        not_seen = ~seen_before[:cut]
        so_far = np.cumsum(not_seen)
        so_far -= (so_far - not_seen)[starts[req[:cut]]]
        inf = np.bincount(req[:cut], weights=so_far == 0, minlength=split).astype(np.int64)
        self.counts[2] += int(inf.sum())
        self.counts[3] += _reused(inf, inputs[:split], self.block_tokens)
        self.seen.add(fids[~in_seen & (first_req < split)])
        if switch:
            self.sample = SeenSample(self.seen.tolist(), self._max_sampled)
            self.seen = None
        return split

    def _sampled_chunk(self, ids, req, starts, counts, inputs, hits, first_req) -> None:
        """Requests ``first_req..`` through the sample, as the lean replay picks and adds their ids."""
        b = self.block_tokens
        sample = self.sample
        h = hits[first_req:]
        self.counts[2] += int(h.sum())
        self.counts[3] += _reused(h, inputs[first_req:], b)
        lo = int(starts[first_req])
        keys = ids[lo:] % KEY_PRIME
        cand = np.flatnonzero(keys < sample.threshold) + lo  # sampled ids, then those after the LRU's hit run
        cand = cand[cand - starts[req[cand]] >= hits[req[cand]]]
        if not len(cand):
            return
        creq = req[cand]
        cut = np.flatnonzero(np.diff(creq)) + 1
        last_key = (ids[starts + counts - 1] % KEY_PRIME).tolist()
        c_ids, c_keys = ids[cand].tolist(), keys[cand - lo].tolist()
        bounds = [0, *cut.tolist(), len(cand)]
        counts_l = counts.tolist()
        for r, i, j in zip(creq[[0, *cut.tolist()]].tolist(), bounds, bounds[1:]):
            t = sample.threshold
            picked = [c_ids[m] for m in range(i, j) if c_keys[m] < t]
            if picked:
                sample.add_picked(picked, last_key[r] < t, inputs[r], counts_l[r], b)

    def finish(self, skipped_lines: int = 0) -> FixedAnswers:
        self._flush()
        hits, reused, inf_hits, inf_reused, total, inputs = self.counts
        b, n = self.block_tokens, self.requests
        estimate = None
        if self.sample is not None:
            distinct, extra_hits, extra_reused, estimate = self.sample.estimate()
            if estimate.rate == 1:
                estimate = None
            inf_hits, inf_reused = min(inf_hits + extra_hits, total), min(inf_reused + extra_reused, inputs)
        else:
            distinct = len(self.seen)
        return FixedAnswers({
            None: replay_result("lru", b, None, None, n, skipped_lines, inputs, inf_reused, total, inf_hits,
                                distinct),
            self.capacity_tokens: replay_result("lru", b, self.capacity_tokens, self.limit, n, skipped_lines,
                                                inputs, reused, total, hits, len(self._ids)),
        }, estimate)
