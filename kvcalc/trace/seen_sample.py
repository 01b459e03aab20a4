"""The infinite cache estimated from a bounded hashed sample of the block ids, for ids too sparse for a bit table.

The lean replay (:mod:`kvcalc.trace.lean`) keeps the ids seen in a byte or bit table while the ids are dense
(Mooncake's remapped ids); 64-bit hashes (or negative ids) would need a dict of every distinct id (~100 B each:
228 MB for a 240k-request trace whose OrderedDict reference holds 14 MB). Instead, unless asked for exact
statistics, the ids seen so far move into a :class:`SeenSample`: a fixed-size adaptive sample (Flajolet's
adaptive sampling; the fixed-size variant of SHARDS, Waldspurger et al., FAST 2015):

- an id is in the sample when ``id mod P < threshold``, ``P`` = :data:`KEY_PRIME` (2^20 - 3, a prime): one
  C-level step per id (``map(P.__rmod__, ids)``; a real hash of each id, even CPython's tuple hash in C, cost
  as much as the LRU cache itself, measured). Ids that are hashes (the case that needs the sample) give a
  uniform key; an arithmetic progression of ids (a constant step not a multiple of P) spreads evenly over the
  residues too, since the sample is used only for ids spread over at least 8 x 2^20 values (or negative);
  a set of ids concentrated on a few residues would bias it (``--exact-stats`` then). The threshold starts at
  P (rate 1: every id) and halves whenever the sample holds more than :data:`MAX_SAMPLED_IDS` ids, dropping
  the ids above it. An id kept now was kept since the switch, so the final sample is a (near-)Bernoulli
  sample of the ids at rate ``R = threshold / P`` over the whole trace after the switch, and its seen-state
  is exact;
- the infinite cache's hit run of a request is exact up to the LRU cache's own hit run (those blocks are
  cached, hence seen); beyond it, a sampled block counts as an extra hit while every sampled block before it
  in that part of the request was seen. With prefix-hash ids (an id names its whole prefix, as Mooncake's and
  kv-cache-tester's do), a block was seen iff its whole prefix was, so this is each sampled block's exact
  infinite-cache outcome. Each sampled id ``i`` accumulates its extra hit blocks ``y_i`` (and tokens);
- estimates (Horvitz-Thompson under Bernoulli sampling at rate R): extra hits ``Y = sum_i y_i / R`` with
  standard error ``sqrt((1 - R) x sum_i y_i^2) / R``; distinct blocks ``|S| / R`` with standard error
  ``sqrt(|S| (1 - R)) / R`` (about ``1 / sqrt(|S|)`` relative). While the rate is 1 everything is exact (a
  standard error of 0).

Memory: at most :data:`MAX_SAMPLED_IDS` ids (a set, ~70 B each) plus the ids that ever had an extra hit
(a dict of two counts), whatever the trace's length or id values. This module computes; it never prints.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import compress, islice

MAX_SAMPLED_IDS = 1 << 13  # sample size bound [ids]: distinct blocks within ~1.1% (one standard error)
KEY_PRIME = (1 << 20) - 3  # 1,048,573, a prime: an id's sampling key is id mod this


def sample_key(block_id: int) -> int:
    """The id's sampling key, in ``0 .. KEY_PRIME - 1`` (the id is kept while its key is below the threshold)."""
    return block_id % KEY_PRIME


@dataclass(frozen=True)
class InfiniteEstimate:
    """How the infinite cache's figures were estimated (see the module doc): standard errors in their units."""

    rate: float  # the final sampling rate [fraction]
    sampled_ids: int  # ids in the final sample [blocks]
    distinct_blocks_std_error: float  # [blocks]
    hit_blocks_std_error: float  # [blocks]
    reused_tokens_std_error: float  # [tokens]


class SeenSample:
    """The sampled seen blocks and each sampled id's extra infinite-cache hits (see the module doc)."""

    def __init__(self, seen_ids: Iterable[int], max_ids: int | None = None):
        self.max_ids = MAX_SAMPLED_IDS if max_ids is None else max_ids
        self.threshold = KEY_PRIME
        self.ids: set[int] = set(seen_ids)
        self.extra: dict[int, list[int]] = {}  # sampled id -> [extra hit blocks, extra reused tokens]
        self._shrink()

    def _shrink(self) -> None:
        """Halve the threshold until the sample fits, dropping the ids above it (and their counts)."""
        while len(self.ids) > self.max_ids and self.threshold > 1:
            self.threshold >>= 1
            t = self.threshold
            self.ids = {h for h in self.ids if sample_key(h) < t}
            self.extra = {h: v for h, v in self.extra.items() if h in self.ids}

    def add(self, ids: Sequence[int], start: int, input_length: int, block_tokens: int) -> None:
        """A request's blocks from position ``start`` on (after the LRU cache's hit run): count each sampled
        block's extra hit while the sampled blocks before it (from ``start``) were seen, then mark them seen."""
        tail = islice(ids, start, None) if start else ids
        picked = list(compress(range(start, len(ids)), map(self.threshold.__gt__, map(KEY_PRIME.__rmod__, tail))))
        if picked:
            self.add_picked([ids[j] for j in picked], picked[-1] == len(ids) - 1, input_length, len(ids),
                            block_tokens)

    def add_picked(self, picked: list[int], last: bool, input_length: int, n_blocks: int,
                   block_tokens: int) -> None:
        """The sampled ids of a request's blocks after the LRU run, in order (``last``: the final one is the
        request's last block, which holds ``min(B, input_length - (n_blocks - 1) x B)`` tokens, B = block_tokens): count each
        one's extra hit while the ones before it were seen, then mark them seen."""
        seen = self.ids
        extra = self.extra
        final = picked[-1] if last else None
        end = len(picked) - 1
        run = True
        for k, h in enumerate(picked):
            if run and h in seen:
                counts = extra.get(h)
                if counts is None:
                    counts = extra[h] = [0, 0]
                counts[0] += 1
                counts[1] += min(block_tokens, input_length - (n_blocks - 1) * block_tokens) \
                    if k == end and final is not None else block_tokens
            else:
                run = False
                seen.add(h)
        if len(seen) > self.max_ids:
            self._shrink()

    @property
    def rate(self) -> float:
        return self.threshold / KEY_PRIME

    def estimate(self) -> tuple[int, int, int, InfiniteEstimate]:
        """(distinct blocks, extra hit blocks, extra reused tokens) estimated, rounded, and their errors."""
        r = self.rate
        blocks = sum(v[0] for v in self.extra.values())
        tokens = sum(v[1] for v in self.extra.values())
        blocks_sq = sum(v[0] * v[0] for v in self.extra.values())
        tokens_sq = sum(v[1] * v[1] for v in self.extra.values())
        n = len(self.ids)
        errors = InfiniteEstimate(r, n, math.sqrt(n * (1 - r)) / r, math.sqrt((1 - r) * blocks_sq) / r,
                                  math.sqrt((1 - r) * tokens_sq) / r)
        return round(n / r), round(blocks / r), round(tokens / r), errors
