"""numba kernels of the compiled one-capacity LRU engine: a strict byte-level reader of Mooncake JSONL pieces and
one LRU cache plus the blocks seen, replayed with the lean replay's exact semantics (:mod:`kvcalc.trace.lean`).

Imported only by :mod:`kvcalc.trace.jit_lru` (which imports numba only when it is dispatched); every kernel is
``@njit(cache=True)``, so a process after the first loads the machine code from ``__pycache__``.

- :func:`parse_piece`: one piece of whole lines (the reader's 64 KiB pieces) into arrays: per request the
  timestamp [ms], input and output lengths [tokens] and its ids' count, and the ids. Strict: it accepts only
  lines of exactly the four fields (any order, each once; spaces allowed between tokens), integer timestamps
  within +-2^53 (never ``-0``), lengths 0..2^63-1 without sign, ids in int64 written as JSON integers, at most
  1,000,000 ids a line, no blank line, ids per request under the reader's rule. Anything else returns a
  refusal, and the normal reader (msgspec, then ``json`` for the message) reads that piece: every error
  message, and every value, is the normal reader's.
- :func:`replay`: the requests of a batch through one LRU cache (an exact LRU as a hash table of the cached
  ids and a ring of (node, time) uses, stale entries skipped: about one random memory access per block access
  instead of a linked list's four) and through the infinite cache (the blocks seen: a bit per id for dense ids
  plus a hash set, or, after the switch the lean replay makes, the bounded :class:`~kvcalc.trace.seen_sample.
  SeenSample`, ported here op for op).

Hash tables: open addressing in a power-of-two table at most half full, linear probing, a splitmix64 mix of
the id, deletion by backward shift (no tombstones). This module computes; it never prints.
"""

from __future__ import annotations

import numpy as np
from numba import njit

KEY_PRIME = (1 << 20) - 3  # as kvcalc.trace.seen_sample.KEY_PRIME (a test pins them equal)
MAX_IDS = 1_000_000  # as kvcalc.trace.reader.MAX_IDS_PER_LINE
TS_BOUND = 1 << 53  # as kvcalc.trace.reader.MAX_TIMESTAMP_MS
WIDE = 1 << 20  # as kvcalc.trace.lean.WIDE_TABLE_BYTES
PER_BLOCK = 4  # as kvcalc.trace.lean.TABLE_BYTES_PER_BLOCK
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_I64_MAX = np.uint64((1 << 63) - 1)

_FIELDS = (b"timestamp", b"input_length", b"output_length", b"hash_ids")
_NAMES = np.array([list(f.ljust(16, b" ")) for f in _FIELDS], np.uint8)  # the field names, as bytes
_POW10 = np.array([10.0 ** k for k in range(23)])
_NAME_LENGTHS = np.array([len(f) for f in _FIELDS], np.int64)

# scalar state of the LRU (``lru`` int64 array): indices
L_SIZE, L_HEAD, L_TAIL, L_TIME = 0, 1, 2, 3
# scalar state of the seen blocks (``seen`` int64 array)
S_COUNT, S_SET, S_SWITCH, S_THRESHOLD, S_SAMPLED = 0, 1, 2, 3, 4


@njit(cache=True, inline="always")
def _mix(h, mask):
    """splitmix64's finaliser of the id, masked to a slot [0, mask]."""
    x = np.uint64(h)
    x = (x ^ (x >> _S30)) * _M1
    x = (x ^ (x >> _S27)) * _M2
    x = x ^ (x >> _S31)
    return np.int64(x & np.uint64(mask))


# ---- the reader ---------------------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def _skip_spaces(buf, i, end):
    while i < end and buf[i] == 32:
        i += 1
    return i


@njit(cache=True)
def _number(buf, i, end, signed):
    """A JSON integer at ``buf[i:]``: (status, value as int64, next index); status 0 ok, 1 refused (a fraction,
    an exponent, a leading zero, a sign where none may be, -0, or out of int64)."""
    neg = False
    if i < end and buf[i] == 45:  # '-'
        if not signed:
            return 1, 0, i
        neg = True
        i += 1
    start = i
    mag = np.uint64(0)
    while i < end:
        c = buf[i]
        if c < 48 or c > 57:
            break
        if i - start >= 19:
            return 1, 0, i
        mag = mag * np.uint64(10) + np.uint64(c - 48)
        i += 1
    digits = i - start
    if digits == 0 or (digits > 1 and buf[start] == 48):
        return 1, 0, i
    if i < end and (buf[i] == 46 or buf[i] == 101 or buf[i] == 69):  # '.', 'e', 'E': not an integer here
        return 1, 0, i
    if neg:
        if mag == 0 or mag > _I64_MAX + np.uint64(1):
            return 1, 0, i
        return 0, -np.int64(mag - np.uint64(1)) - 1, i
    if mag > _I64_MAX:
        return 1, 0, i
    return 0, np.int64(mag), i


@njit(cache=True)
def _timestamp(buf, i, end):
    """A JSON number ``-?int(.digits)?`` of at most 15 significant digits (no exponent, never -0): (status,
    value, next index). Exact: the digits (< 2^53) and 10^k (k <= 22) are exact doubles, so their quotient is
    the correctly rounded value, as msgspec (and Python's float()) give it (Clinger's fast path)."""
    neg = i < end and buf[i] == 45
    if neg:
        i += 1
    start = i
    mant = 0
    digits = 0
    frac = -1
    while i < end:
        c = buf[i]
        if 48 <= c <= 57:
            mant = mant * 10 + (c - 48)
            digits += 1
            if frac >= 0:
                frac += 1
        elif c == 46 and frac < 0:  # '.'
            if i == start:
                return 1, 0.0, i
            frac = 0
        else:
            break
        i += 1
    int_digits = digits - max(frac, 0)
    if int_digits == 0 or frac == 0 or digits > 15 or (int_digits > 1 and buf[start] == 48):
        return 1, 0.0, i
    if i < end and (buf[i] == 101 or buf[i] == 69) or (neg and mant == 0):  # an exponent; -0
        return 1, 0.0, i
    x = np.float64(mant)
    if frac > 0:
        x = x / _POW10[frac]
    return 0, -x if neg else x, i


@njit(cache=True)
def _key(buf, i, end):
    """The field name at ``buf[i]`` (a '"'): (0 timestamp, 1 input_length, 2 output_length, 3 hash_ids, -1 any
    other), the index after its closing quote."""
    j = i + 1
    while j < end and buf[j] != 34:
        if buf[j] == 92:  # an escape: not one of ours as written
            return -1, j
        j += 1
    n = j - i - 1
    for which in range(4):
        if n == _NAME_LENGTHS[which]:
            same = True
            for m in range(n):
                if buf[i + 1 + m] != _NAMES[which, m]:
                    same = False
                    break
            if same:
                return which, j + 1
    return -1, j + 1


@njit(cache=True)
def parse_piece(buf, rule, block_tokens, ts, inputs, outputs, counts, ids):
    """Parse a piece of whole lines (no final newline) into the arrays (see the module doc).

    ``rule``: 0 ceil, 1 floor, -1 not decided yet (the first request with a partial block decides it).
    Returns (status, requests, ids, rule after the piece, largest id, smallest id); status 0: every line
    accepted; 1: refused (the normal reader reads the piece).
    """
    end = len(buf)
    i = 0
    nreq = 0
    nids = 0
    hi = np.int64(-(1 << 63))
    lo = np.int64((1 << 63) - 1)
    while True:
        i = _skip_spaces(buf, i, end)
        if i >= end or buf[i] != 123:  # '{': a blank line or something else
            return 1, nreq, nids, rule, hi, lo
        i += 1
        have = 0
        first_id = nids
        while True:
            i = _skip_spaces(buf, i, end)
            if i >= end or buf[i] != 34:
                return 1, nreq, nids, rule, hi, lo
            which, i = _key(buf, i, end)
            if which < 0 or have & (1 << which):
                return 1, nreq, nids, rule, hi, lo
            have |= 1 << which
            i = _skip_spaces(buf, i, end)
            if i >= end or buf[i] != 58:  # ':'
                return 1, nreq, nids, rule, hi, lo
            i = _skip_spaces(buf, i + 1, end)
            if which == 3:
                if i >= end or buf[i] != 91:  # '['
                    return 1, nreq, nids, rule, hi, lo
                i = _skip_spaces(buf, i + 1, end)
                if i < end and buf[i] == 93:  # ']'
                    i += 1
                else:
                    while True:
                        status, v, i = _number(buf, i, end, True)
                        if status or nids - first_id >= MAX_IDS or nids >= len(ids):
                            return 1, nreq, nids, rule, hi, lo
                        ids[nids] = v
                        nids += 1
                        if v > hi:
                            hi = v
                        if v < lo:
                            lo = v
                        i = _skip_spaces(buf, i, end)
                        if i < end and buf[i] == 44:  # ','
                            i = _skip_spaces(buf, i + 1, end)
                            continue
                        if i < end and buf[i] == 93:
                            i += 1
                            break
                        return 1, nreq, nids, rule, hi, lo
            elif which == 0:
                status, x, i = _timestamp(buf, i, end)
                if status:
                    return 1, nreq, nids, rule, hi, lo
                ts[nreq] = x
            else:
                status, v, i = _number(buf, i, end, False)
                if status:
                    return 1, nreq, nids, rule, hi, lo
                if which == 1:
                    inputs[nreq] = v
                else:
                    outputs[nreq] = v
            i = _skip_spaces(buf, i, end)
            if i < end and buf[i] == 44:
                i += 1
                continue
            if i < end and buf[i] == 125:  # '}'
                i += 1
                break
            return 1, nreq, nids, rule, hi, lo
        if have != 15:
            return 1, nreq, nids, rule, hi, lo
        n = nids - first_id
        length = inputs[nreq]
        floor = length // block_tokens
        ceil = floor + (1 if length % block_tokens else 0)
        if rule < 0 and length % block_tokens:
            if n == ceil:
                rule = 0
            elif n == floor:
                rule = 1
            else:
                return 1, nreq, nids, rule, hi, lo
        if n != (floor if rule == 1 else ceil):
            return 1, nreq, nids, rule, hi, lo
        counts[nreq] = n
        nreq += 1
        i = _skip_spaces(buf, i, end)
        if i >= end:
            return 0, nreq, nids, rule, hi, lo
        if buf[i] != 10 or nreq >= len(counts):  # one object per line
            return 1, nreq, nids, rule, hi, lo
        i += 1


# ---- hash tables ---------------------------------------------------------------------------------------------

@njit(cache=True, inline="always")
def _find(tab, mask, h):
    """The slot of ``h`` in the LRU table ``tab`` (pairs: id, node + 1; 0 empty), or the empty slot it would take."""
    s = _mix(h, mask)
    while tab[2 * s + 1] != 0 and tab[2 * s] != h:
        s = (s + 1) & mask
    return s


@njit(cache=True)
def _delete(tab, mask, s):
    """Empty slot ``s`` of the LRU table, shifting back the entries after it (no tombstones)."""
    tab[2 * s + 1] = 0
    j = s
    while True:
        j = (j + 1) & mask
        if tab[2 * j + 1] == 0:
            return
        k = _mix(tab[2 * j], mask)  # the entry's own slot: it may move back to s unless k lies in (s, j]
        if (j > s and (k <= s or k > j)) or (j < s and k <= s and k > j):
            tab[2 * s] = tab[2 * j]
            tab[2 * s + 1] = tab[2 * j + 1]
            tab[2 * j + 1] = 0
            s = j


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
    while seen[S_SAMPLED] > seen[6] and seen[S_THRESHOLD] > 1:
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
def _push(lru, ring, node, t, ntime):
    """Append the use (node, t) to the ring; a full ring drops its stale uses first (a node used again since)."""
    r = len(ring) // 2
    if lru[L_TAIL] - lru[L_HEAD] == r:
        w = lru[L_HEAD]
        for p in range(lru[L_HEAD], lru[L_TAIL]):
            q = 2 * (p & (r - 1))
            if ntime[ring[q]] == ring[q + 1]:
                d = 2 * (w & (r - 1))
                ring[d], ring[d + 1] = ring[q], ring[q + 1]
                w += 1
        lru[L_TAIL] = w
    q = 2 * (lru[L_TAIL] & (r - 1))
    ring[q] = node
    ring[q + 1] = t
    lru[L_TAIL] += 1


@njit(cache=True)
def _access(h, cap, lru, tab, nkey, ntime, ring):
    """One block access past the request's hit run: refresh it, or insert it evicting the least recent."""
    mask = len(tab) // 2 - 1
    s = _find(tab, mask, h)
    t = lru[L_TIME] + 1
    lru[L_TIME] = t
    if tab[2 * s + 1]:
        node = tab[2 * s + 1] - 1
    else:
        if lru[L_SIZE] < cap:
            node = lru[L_SIZE]
            lru[L_SIZE] += 1
        else:  # the least recent: the oldest use in the ring that is its node's last
            r = len(ring) // 2
            while True:
                q = 2 * (lru[L_HEAD] & (r - 1))
                lru[L_HEAD] += 1
                if ntime[ring[q]] == ring[q + 1]:
                    break
            node = ring[q]
            _delete(tab, mask, _find(tab, mask, nkey[node]))
            s = _find(tab, mask, h)
        nkey[node] = h
        tab[2 * s] = h
        tab[2 * s + 1] = node + 1
    ntime[node] = t
    _push(lru, ring, node, t, ntime)


@njit(cache=True)
def replay(ids, counts, inputs, nreq, block_tokens, cap, lru, tab, nkey, ntime, ring,
           seen, bits, skeys, sused, mkeys, mused, me0, me1, out):
    """A batch of ``nreq`` requests (``counts`` ids each, in ``ids``; ``inputs`` [tokens]) through the LRU cache
    of ``cap`` blocks and the blocks seen, as :func:`kvcalc.trace.lean._replay` does; adds to ``out``: hit
    blocks, reused tokens, the infinite cache's hit blocks and reused tokens (exact mode; in sample mode its
    LRU-run part, the sample holding the rest), blocks."""
    b = block_tokens
    mask = len(tab) // 2 - 1
    top = 8 * len(bits)
    pos = 0
    hits = reused = inf_hits = inf_reused = 0
    sampled = seen[S_SWITCH] == 2
    for r in range(nreq):
        n = counts[r]
        length = inputs[r]
        hit = 0
        if cap:
            while hit < n:  # the leading run of cached blocks, refreshed as counted
                s = _find(tab, mask, ids[pos + hit])
                if tab[2 * s + 1] == 0:
                    break
                node = tab[2 * s + 1] - 1
                t = lru[L_TIME] + 1
                lru[L_TIME] = t
                ntime[node] = t
                _push(lru, ring, node, t, ntime)
                hit += 1
            for j in range(hit, n):
                _access(ids[pos + j], cap, lru, tab, nkey, ntime, ring)
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
                if h < 0 or h >= 8 * max(WIDE, PER_BLOCK * (seen[S_COUNT] + 1)):
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
                if seen[S_SAMPLED] > seen[6]:
                    shrink(seen, mkeys, mused, me0, me1)
        pos += n
    out[0] += hits
    out[1] += reused
    out[2] += inf_hits
    out[3] += inf_reused
    out[4] += pos


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
