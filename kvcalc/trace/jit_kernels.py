"""numba kernels of the compiled one-capacity LRU engine: one LRU cache plus the blocks seen, replayed with the
lean replay's exact semantics (:mod:`kvcalc.trace.lean`); the reader's kernels are in :mod:`kvcalc.trace.jit_reader`.

Imported only by :mod:`kvcalc.trace.jit_lru` (which imports numba only when it is dispatched); every kernel is
``@njit(cache=True)``, so a process after the first loads the machine code from ``__pycache__``.

:func:`replay`: the requests of a batch through one LRU cache (an exact LRU as a hash table of the cached ids
and a ring of (node, time) uses, 8 B each, whose stale entries, a node used again since, are skipped: about one random
memory access per block access plus one per eviction, where a linked list takes four) and through the infinite
cache (the blocks seen: a bit per id for dense ids plus a hash set, or, after the switch the lean replay makes,
the bounded :class:`~kvcalc.trace.seen_sample.SeenSample`, ported here step for step).

Hash tables: open addressing in a power-of-two table at most half full, linear probing, splitmix64's mix of
the id, deletion by backward shift (no tombstones). This module computes; it never prints.
"""

from __future__ import annotations

import numpy as np
from numba import njit

KEY_PRIME = (1 << 20) - 3  # as kvcalc.trace.seen_sample.KEY_PRIME (a test pins them equal)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_LOW32 = (1 << 32) - 1


# scalar state of the LRU (``lru`` int64 array): indices
L_SIZE, L_HEAD, L_TAIL, L_TIME = 0, 1, 2, 3
# scalar state of the seen blocks (``seen`` int64 array)
# (distinct ids seen; ids in the hash set; 0 exact, 1 switch after this batch, 2 sampled; the sample's threshold;
# ids in the sample; the lean replay's WIDE_TABLE_BYTES; MAX_SAMPLED_IDS; TABLE_BYTES_PER_BLOCK)
S_COUNT, S_SET, S_SWITCH, S_THRESHOLD, S_SAMPLED, S_WIDE, S_MAX, S_PER_BLOCK = range(8)


@njit(cache=True, inline="always")
def _mix(h, mask):
    """splitmix64's finaliser of the id, masked to a slot [0, mask]."""
    x = np.uint64(h)
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    x = x ^ (x >> _S31)
    return np.int64(x & np.uint64(mask))


# ---- hash tables ---------------------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def _tag(h):
    """The id's 32-bit tag (the high half of splitmix64's mix, sign-extended): its slot is ``tag & mask``."""
    x = np.uint64(h)
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    return np.int64(x ^ (x >> _S31)) >> 32


@njit(cache=True, inline="always")
def _find(tab, mask, nodes, h, tag):
    """The slot of ``h`` in the LRU table (entries ``tag << 32 | node + 1``, 0 empty; the id itself is the node's,
    compared only when the tags agree), or the empty slot it would take."""
    s = tag & mask
    while True:
        e = tab[s]
        if e == 0 or ((e >> 32) == tag and nodes[2 * ((e & _LOW32) - 1)] == h):
            return s
        s = (s + 1) & mask


@njit(cache=True, inline="always")
def _find_entry(tab, mask, e):
    """The slot holding entry ``e`` (which is in the table)."""
    s = (e >> 32) & mask
    while tab[s] != e:
        s = (s + 1) & mask
    return s


@njit(cache=True, inline="always")
def _delete(tab, mask, s):
    """Empty slot ``s`` of the LRU table, shifting back the entries after it (no tombstones; an entry's own
    slot is its tag's low bits, so no id is read)."""
    tab[s] = 0
    j = s
    while True:
        j = (j + 1) & mask
        e = tab[j]
        if e == 0:
            return
        k = (e >> 32) & mask  # the entry's own slot: it may move back to s unless k lies in (s, j]
        if (j > s and (k <= s or k > j)) or (j < s and k <= s and k > j):
            tab[s] = e
            tab[j] = 0
            s = j


@njit(cache=True)
def rehash(tab, new):
    """Every entry of one LRU table into another, empty and larger."""
    mask = len(new) - 1
    for e in tab:
        if e:
            t = (e >> 32) & mask
            while new[t]:
                t = (t + 1) & mask
            new[t] = e


@njit(cache=True, inline="always")
def _set_find(keys, used, h):
    mask = len(keys) - 1
    s = _mix(h, mask)
    while used[s] and keys[s] != h:
        s = (s + 1) & mask
    return s


@njit(cache=True)
def set_insert_all(keys, used, new_keys, new_used, e0, e1, n0, n1):
    """Insert every member of one set (keys/used, counts e0/e1) into another, empty one (new_keys/new_used,
    counts n0/n1; the counts arrays may be empty when the set has none)."""
    for s in range(len(keys)):
        if used[s]:
            t = _set_find(new_keys, new_used, keys[s])
            new_keys[t] = keys[s]
            new_used[t] = 1
            if len(e0):
                n0[t] = e0[s]
                n1[t] = e1[s]


@njit(cache=True)
def migrate(bits, keys, used, new_keys, new_used):
    """After the bit table grew: the hash set's ids it now covers move to it; the others to ``new_keys``.
    Returns the ids left in the set."""
    left = 0
    top = 8 * len(bits)
    for s in range(len(keys)):
        if used[s]:
            h = keys[s]
            if 0 <= h < top:
                bits[h >> 3] |= np.uint8(1 << (h & 7))
            else:
                t = _set_find(new_keys, new_used, h)
                new_keys[t] = h
                new_used[t] = 1
                left += 1
    return left


@njit(cache=True, inline="always")
def _sample_key(h):
    k = h % KEY_PRIME
    return k + KEY_PRIME if k < 0 else k


@njit(cache=True)
def shrink(seen, mkeys, mused, me0, me1):
    """:meth:`SeenSample._shrink`: halve the threshold until the sample fits, dropping the ids above it and their
    counts (rebuilt in place)."""
    while seen[S_SAMPLED] > seen[S_MAX] and seen[S_THRESHOLD] > 1:
        seen[S_THRESHOLD] >>= 1
        t = seen[S_THRESHOLD]
        keep = 0
        for s in range(len(mkeys)):
            if mused[s] and _sample_key(mkeys[s]) < t:
                keep += 1
        k = np.empty(keep, np.int64)
        a = np.empty(keep, np.int64)
        b = np.empty(keep, np.int64)
        m = 0
        for s in range(len(mkeys)):
            if mused[s] and _sample_key(mkeys[s]) < t:
                k[m], a[m], b[m] = mkeys[s], me0[s], me1[s]
                m += 1
        mused[:] = 0
        for m in range(keep):
            s = _set_find(mkeys, mused, k[m])
            mkeys[s], mused[s], me0[s], me1[s] = k[m], 1, a[m], b[m]
        seen[S_SAMPLED] = keep


# ---- the replay ----------------------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def _live(nodes, e):
    """The ring entry ``e`` (node << 32 | time mod 2^32) is its node's last use. Times mod 2^32 suffice: an
    entry is popped or dropped by a compaction within two ring lengths (at most 2^31 uses: fewer than 2^29
    cached blocks, :class:`kvcalc.trace.jit_lru.JitLruEngine`) after it goes stale."""
    return (nodes[2 * (e >> 32) + 1] & _LOW32) == (e & _LOW32)


@njit(cache=True, inline="always")
def _push(lru, ring, node, t, nodes):
    """Append the use (node, t) to the ring; a full ring drops its stale uses first (a node used again since)."""
    r = len(ring)
    if lru[L_TAIL] - lru[L_HEAD] == r:
        w = lru[L_HEAD]
        for p in range(lru[L_HEAD], lru[L_TAIL]):
            e = ring[p & (r - 1)]
            if _live(nodes, e):
                ring[w & (r - 1)] = e
                w += 1
        lru[L_TAIL] = w
    ring[lru[L_TAIL] & (r - 1)] = (node << 32) | (t & _LOW32)
    lru[L_TAIL] += 1


@njit(cache=True, inline="always")
def _access(h, cap, lru, tab, nodes, ring):
    """One block access past the request's hit run: refresh it, or insert it evicting the least recent."""
    mask = len(tab) - 1
    tag = _tag(h)
    s = _find(tab, mask, nodes, h, tag)
    t = lru[L_TIME] + 1
    lru[L_TIME] = t
    if tab[s]:
        node = (tab[s] & _LOW32) - 1
    else:
        if lru[L_SIZE] < cap:
            node = lru[L_SIZE]
            lru[L_SIZE] += 1
            tab[s] = (tag << 32) | (node + 1)
        else:  # the least recent: the oldest use in the ring that is its node's last
            r = len(ring)
            while True:
                e = ring[lru[L_HEAD] & (r - 1)]
                lru[L_HEAD] += 1
                if _live(nodes, e):
                    break
            node = e >> 32
            old = (_tag(nodes[2 * node]) << 32) | (node + 1)
            mine = (tag << 32) | (node + 1)
            if mine != old:  # inserted first, the evicted entry deleted after (room for one more)
                tab[s] = mine
                _delete(tab, mask, _find_entry(tab, mask, old))
            else:  # the same tag: the two entries would be alike; delete first, then find room again
                _delete(tab, mask, _find_entry(tab, mask, old))
                nodes[2 * node] = h
                tab[_find(tab, mask, nodes, h, tag)] = mine
        nodes[2 * node] = h
    nodes[2 * node + 1] = t
    _push(lru, ring, node, t, nodes)


@njit(cache=True)
def replay(ids, counts, inputs, nreq, block_tokens, cap, lru, tab, nodes, ring,
           seen, bits, skeys, sused, mkeys, mused, me0, me1, out):
    """A batch of ``nreq`` requests (``counts`` ids each, in ``ids``; ``inputs`` [tokens]) through the LRU cache
    of ``cap`` blocks and the blocks seen, as :func:`kvcalc.trace.lean._replay` does; adds to ``out``: hit
    blocks, reused tokens, the infinite cache's hit blocks and reused tokens (exact mode; in sample mode its
    LRU-run part, the sample holding the rest), blocks."""
    b = block_tokens
    mask = len(tab) - 1
    top = 8 * len(bits)
    pos = 0
    hits = reused = inf_hits = inf_reused = touched = 0
    sampled = seen[S_SWITCH] == 2
    for r in range(nreq):
        n = counts[r]
        length = inputs[r]
        hit = 0
        if cap:
            for j in range(pos, pos + n):  # touch the request's slots and nodes first: independent loads, so the
                e = tab[_tag(ids[j]) & mask]  # memory fetches overlap (the loop below waits on each in turn)
                touched += e + nodes[2 * max((e & _LOW32) - 1, 0) + 1]
            while hit < n:  # the leading run of cached blocks, refreshed as counted
                h = ids[pos + hit]
                s = _find(tab, mask, nodes, h, _tag(h))
                if tab[s] == 0:
                    break
                node = (tab[s] & _LOW32) - 1
                t = lru[L_TIME] + 1
                lru[L_TIME] = t
                nodes[2 * node + 1] = t
                _push(lru, ring, node, t, nodes)
                hit += 1
            for j in range(hit, n):
                _access(ids[pos + j], cap, lru, tab, nodes, ring)
        hits += hit
        reused += min(hit * b, length)
        if not sampled:
            inf = hit
            while inf < n:  # the blocks seen before: the infinite cache's run goes on
                h = ids[pos + inf]
                if 0 <= h < top:
                    if not (bits[h >> 3] >> (h & 7)) & 1:
                        break
                elif seen[S_SET] == 0 or not sused[_set_find(skeys, sused, h)]:
                    break
                inf += 1
            for j in range(inf, n):  # mark the rest seen; a new id beyond the bit-table bound: the switch
                h = ids[pos + j]
                if 0 <= h < top:
                    byte = h >> 3
                    bit = np.uint8(1 << (h & 7))
                    if bits[byte] & bit:
                        continue
                    bits[byte] |= bit
                else:
                    s = _set_find(skeys, sused, h)
                    if sused[s]:
                        continue
                    skeys[s] = h
                    sused[s] = 1
                    seen[S_SET] += 1
                if h < 0 or h >= 8 * max(seen[S_WIDE], seen[S_PER_BLOCK] * (seen[S_COUNT] + 1)):
                    if seen[S_SWITCH] == 0:
                        seen[S_SWITCH] = 1
                seen[S_COUNT] += 1
            inf_hits += inf
            inf_reused += min(inf * b, length)
        else:
            inf_hits += hit
            inf_reused += min(hit * b, length)
            if hit < n:  # SeenSample.add_picked over the sampled ids after the LRU run
                t = seen[S_THRESHOLD]
                last = _sample_key(ids[pos + n - 1]) < t
                run = True
                for j in range(hit, n):
                    h = ids[pos + j]
                    if _sample_key(h) >= t:
                        continue
                    s = _set_find(mkeys, mused, h)
                    if run and mused[s]:
                        me0[s] += 1
                        me1[s] += min(b, length - (n - 1) * b) if j == n - 1 and last else b
                    else:
                        run = False
                        if not mused[s]:
                            mkeys[s], mused[s], me0[s], me1[s] = h, 1, 0, 0
                            seen[S_SAMPLED] += 1
                if seen[S_SAMPLED] > seen[S_MAX]:
                    shrink(seen, mkeys, mused, me0, me1)
        pos += n
    out[0] += hits
    out[1] += reused
    out[2] += inf_hits
    out[3] += inf_reused
    out[4] += pos
    out[5] = touched  # kept, so the touching loads stay


@njit(cache=True)
def start_sample(seen, bits, skeys, sused, mkeys, mused):
    """The switch (:class:`SeenSample` built from every id seen): the ids seen into the sample table (sized by the
    caller for all of them), then :func:`shrink`."""
    m = 0
    for byte in range(len(bits)):
        v = bits[byte]
        if v:
            for k in range(8):
                if (v >> k) & 1:
                    h = 8 * byte + k
                    s = _set_find(mkeys, mused, h)
                    mkeys[s] = h
                    mused[s] = 1
                    m += 1
    for s0 in range(len(skeys)):
        if sused[s0]:
            s = _set_find(mkeys, mused, skeys[s0])
            mkeys[s] = skeys[s0]
            mused[s] = 1
            m += 1
    seen[S_SAMPLED] = m
    seen[S_SWITCH] = 2
