"""A cluster of replicas behind a router: each replica has its own prefix cache (any policy); the router picks one
replica per request, in file order (the replay has no clock: a replica's load is the input tokens routed to it
so far).

Routers (:data:`ROUTERS`):

- ``round-robin``: request k goes to replica ``k mod N``;
- ``least-loaded``: the replica with the fewest input tokens routed so far (ties: the lowest index);
- ``session``: conversation affinity: a request's first block id, mixed by splitmix64, modulo N picks the
  replica (a conversation's turns share their first block; the traces carry no session id); a request without
  blocks goes round-robin;
- ``prefix``: cache-aware (as llm-d's or Dynamo's KV-aware routing): the replica whose cache holds the longest
  leading run of the request's blocks now; ties by load, then the lowest index.

Per replica and in total: requests, reused tokens and hit rates; load imbalance = the largest replica's input
tokens / the mean (1.0 = even). N = 1 is the single-node replay exactly (a test holds it).

This module computes; it never prints.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvcalc.out.errors import InputError
from kvcalc.out.units import MAX_REPLICAS  # noqa: F401  (one definition, beside the other options' bounds)
from kvcalc.trace.policies import PolicyCache, make_cache
from kvcalc.trace.result import ReplayResult, replay_result

ROUTERS = ("round-robin", "least-loaded", "session", "prefix")
_MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """SplitMix64's finaliser of ``x`` (any integer, taken mod 2^64): a well-mixed 64-bit value."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def check_replicas(replicas: int, router: str) -> None:
    """InputError unless 1 <= replicas <= MAX_REPLICAS and router is one of ROUTERS (close names suggested)."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_REPLICAS:
        raise InputError(f"--replicas: must be a whole number from 1 to {MAX_REPLICAS:,}, got {replicas!r}")
    if router not in ROUTERS:
        import difflib

        close = difflib.get_close_matches(str(router), ROUTERS, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(f"--router: {router!r} is not one of {', '.join(ROUTERS)}{hint}")


@dataclass(frozen=True)
class ReplicaResult:
    """One capacity's replay over N replicas: each replica's result and the cluster's."""

    router: str
    replicas: tuple[ReplayResult, ...]
    total: ReplayResult  # summed counts; peak cached blocks = the sum of the replicas' peaks
    load_imbalance: float  # max replica input tokens / mean [ratio]; 1.0 = even


class ReplicaEngine:
    """N caches of ``capacity_tokens`` [tokens] each (None = infinite) under ``policy``, behind ``router``."""

    def __init__(self, replicas: int, capacity_tokens: int | None, block_tokens: int, policy: str = "lru",
                 router: str = "round-robin", on_request: Callable[[int, int, int], None] | None = None):
        """``on_request(input_length, output_length, hit_blocks)``, if given, hears every request's outcome."""
        check_replicas(replicas, router)
        self.on_request = on_request
        self.router = router
        self.capacity_tokens = capacity_tokens
        self.caches: list[PolicyCache] = [make_cache(policy, capacity_tokens, block_tokens) for _ in range(replicas)]
        self.load = [0] * replicas  # input tokens routed to each [tokens]
        self._count = 0

    def route(self, hash_ids: Sequence[int]) -> int:
        """The replica this request goes to (see the module doc)."""
        n = len(self.caches)
        k = self._count
        self._count += 1
        if n == 1:
            return 0
        if self.router == "round-robin" or (self.router == "session" and not hash_ids):
            return k % n
        if self.router == "session":
            return splitmix64(hash_ids[0]) % n
        load = self.load
        if self.router == "least-loaded":
            return min(range(n), key=load.__getitem__)
        runs = [c.hit_run(hash_ids) for c in self.caches]
        return min(range(n), key=lambda i: (-runs[i], load[i], i))

    def add_records(self, records: Sequence, signed: bool = True) -> None:
        caches, load, hear = self.caches, self.load, self.on_request
        for r in records:
            i = self.route(r.hash_ids)
            hit = caches[i].add(r.hash_ids, r.input_length)
            load[i] += r.input_length
            if hear is not None:
                hear(r.input_length, r.output_length, hit)

    def assignments(self, requests: Sequence[tuple[Sequence[int], int]]) -> list[int]:
        """The replica of each (hash ids, input length [tokens]) request, routed and replayed in order as
        :meth:`add_records` does (``kvcalc bench --trace --router session`` splits its requests by this; bench's
        least-loaded and prefix route on the serving clock instead: serve/cluster.py)."""
        caches, load, out = self.caches, self.load, []
        for hash_ids, input_length in requests:
            i = self.route(hash_ids)
            caches[i].add(hash_ids, input_length)
            load[i] += input_length
            out.append(i)
        return out

    def finish(self, skipped_lines: int = 0) -> ReplicaResult:
        parts = tuple(c.finish(skipped_lines) for c in self.caches)
        first = parts[0]
        total = replay_result(
            first.policy, first.block_tokens, first.capacity_tokens, first.capacity_blocks,
            sum(p.requests for p in parts), skipped_lines, sum(p.input_tokens for p in parts),
            sum(p.reused_tokens for p in parts), sum(p.total_blocks for p in parts),
            sum(p.hit_blocks for p in parts), sum(p.peak_cached_blocks for p in parts))
        mean = sum(self.load) / len(self.load)
        return ReplicaResult(self.router, parts, total, max(self.load) / mean if mean else 1.0)


class ReplicaSet:
    """One :class:`ReplicaEngine` per capacity, behind the engine interface (``at(c)`` is the cluster's total)."""

    def __init__(self, capacities_tokens: Sequence[int | None], replicas: int, block_tokens: int, policy: str,
                 router: str):
        self.engines = {c: ReplicaEngine(replicas, c, block_tokens, policy, router)
                        for c in dict.fromkeys(capacities_tokens)}

    def add_records(self, records: Sequence, signed: bool = True) -> None:
        for engine in self.engines.values():
            engine.add_records(records)

    def finish(self, skipped_lines: int = 0) -> dict:
        return {c: e.finish(skipped_lines) for c, e in self.engines.items()}
