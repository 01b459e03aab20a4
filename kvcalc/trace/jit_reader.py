"""numba kernels of the compiled one-capacity engine's reader: a strict byte-level parser of Mooncake JSONL
pieces, and a count per distinct length (the statistics' percentiles).

Imported only by :mod:`kvcalc.trace.jit_lru`; every kernel is ``@njit(cache=True)``.

:func:`parse_piece`: one piece of whole lines (the reader's 64 KiB pieces) into arrays: per request the
timestamp [ms], input and output lengths [tokens] and its ids' count, and the ids. Strict: it accepts only lines
of exactly the four fields (any order, each once; spaces allowed between tokens), timestamps of at most 15
significant digits without exponent (never ``-0``), lengths without sign, ids in int64 written as JSON
integers, at most 1,000,000 ids a line, no blank line, ids per request under the reader's rule. Anything else
returns a refusal, and the normal reader (msgspec, then ``json`` for the message) reads that piece: every error
message, and every value, is the normal reader's. This module computes; it never prints.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from kvcalc.trace.jit_kernels import _mix

MAX_IDS = 1_000_000  # as kvcalc.trace.reader.MAX_IDS_PER_LINE (a test pins them equal)
_I64_MAX = np.uint64((1 << 63) - 1)
_FIELDS = (b"timestamp", b"input_length", b"output_length", b"hash_ids")
_NAMES = np.array([list(f.ljust(16, b" ")) for f in _FIELDS], np.uint8)  # the field names, as bytes
_POW10 = np.array([10.0 ** k for k in range(23)])
_NAME_LENGTHS = np.array([len(f) for f in _FIELDS], np.int64)


@njit(cache=True, inline="always")
def _skip_spaces(buf, i, end):
    while i < end and buf[i] == 32:
        i += 1
    return i


@njit(cache=True, inline="always")
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
    ten = np.uint64(10)
    while True:  # two digits a step (half the multiply chain); the piece ends with a 0 byte: no bound test
        d = np.uint64(buf[i]) - np.uint64(48)
        if d > np.uint64(9):
            break
        e = np.uint64(buf[i + 1]) - np.uint64(48)
        if e > np.uint64(9):
            mag = mag * ten + d
            i += 1
            break
        mag = mag * np.uint64(100) + (d * ten + e)
        i += 2
    digits = i - start
    if digits == 0 or digits > 19 or (digits > 1 and buf[start] == 48):  # more than 19 digits wrapped: refused
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
    """Parse a piece of whole lines (no final newline), followed in ``buf`` by one 0 byte, into the arrays (see
    the module doc).

    ``rule``: 0 ceil, 1 floor, -1 not decided yet (the first request with a partial block decides it).
    Returns (status, requests, ids, rule after the piece, largest id, smallest id); status 0: every line
    accepted; 1: refused (the normal reader reads the piece).
    """
    end = len(buf) - 1  # the piece, then a 0 byte
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


@njit(cache=True)
def count_values(values, keys, used, counts, state):
    """Add one to the count of each value (a hash map: ``keys``/``used``/``counts``, ``state[0]`` distinct
    values; the caller keeps it at most half full)."""
    mask = len(keys) - 1
    for v in values:
        s = _mix(v, mask)
        while used[s] and keys[s] != v:
            s = (s + 1) & mask
        if not used[s]:
            keys[s], used[s], counts[s] = v, 1, 0
            state[0] += 1
        counts[s] += 1
