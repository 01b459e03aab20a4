"""A trace as ``kvcalc plan``'s traffic: its requests (trace/bench_input.py, arrivals scaled by --rate-scale) and
their split over N replicas by one of the routers of trace/replicas.py (round-robin, least-loaded, session,
prefix: each replica's own unbounded prefix cache decides where the prefix router sends a request)."""

from __future__ import annotations

from kvcalc.trace.bench_input import read_trace_requests, skipped_note


def plan_requests(path: str, limit: int, block_tokens: int, rate_scale: float = 1.0, skip_bad: bool = False):
    """(scheduler.Requests of the trace's first ``limit`` requests, arrivals x 1 / ``rate_scale`` (2 = twice the
    rate); the note on the bad lines ``skip_bad`` left out, or None)."""
    req, skipped, first = read_trace_requests(path, limit=limit, block_tokens=block_tokens, skip_bad=skip_bad)
    req.send_s = req.send_s / rate_scale
    return req, skipped_note(skipped, first)


def router_split(req, router: str, block_tokens: int):
    """``split(replicas) -> [Requests per replica]`` routing ``req`` in arrival order through ``router``."""
    from kvcalc.serve.plan_traffic import part
    from kvcalc.trace.replicas import ReplicaEngine

    def split(replicas: int):
        eng = ReplicaEngine(replicas, None, block_tokens, "lru", router)
        index: list[list[int]] = [[] for _ in range(replicas)]
        keys_of = req.keys if req.keys is not None else [()] * len(req.prompt)  # lengths only: no keys
        for i, keys in enumerate(keys_of):
            k = eng.route(list(keys))
            if router == "prefix":
                eng.caches[k].add(list(keys), int(req.prompt[i]))
            eng.load[k] += int(req.prompt[i])
            index[k].append(i)
        return [part(req, ix) for ix in index]
    return split
