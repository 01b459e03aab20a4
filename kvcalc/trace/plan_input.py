"""A trace as ``kvcalc plan``'s traffic: its requests (trace/bench_input.py, arrivals scaled by --rate-scale) and
their split over N replicas by one of the routers of trace/replicas.py (round-robin, least-loaded, session,
prefix: each replica's own unbounded prefix cache decides where the prefix router sends a request)."""

from __future__ import annotations

from kvcalc.trace.bench_input import trace_requests


def plan_requests(path: str, limit: int, block_tokens: int, rate_scale: float = 1.0):
    """scheduler.Requests of the trace's first ``limit`` requests; arrivals x 1 / ``rate_scale`` (2 = twice the
    rate)."""
    req = trace_requests(path, limit=limit, block_tokens=block_tokens)
    req.send_s = req.send_s / rate_scale
    return req


def router_split(req, router: str, block_tokens: int):
    """``split(replicas) -> [Requests per replica]`` routing ``req`` in arrival order through ``router``."""
    from kvcalc.serve.plan_traffic import part
    from kvcalc.trace.replicas import ReplicaEngine

    def split(replicas: int):
        eng = ReplicaEngine(replicas, None, block_tokens, "lru", router)
        index: list[list[int]] = [[] for _ in range(replicas)]
        for i, keys in enumerate(req.keys):
            k = eng.route(list(keys))
            if router == "prefix":
                eng.caches[k].add(list(keys), int(req.prompt[i]))
            eng.load[k] += int(req.prompt[i])
            index[k].append(i)
        return [part(req, ix) for ix in index]
    return split
