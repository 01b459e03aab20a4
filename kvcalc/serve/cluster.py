"""N data-parallel replicas of the serving model stepped in lockstep on one clock, a router picking each request's
replica at its arrival from the replicas' simulated state (as vLLM's DP load balancer and llm-d's KV-aware router
do), for ``kvcalc bench --trace FILE --dp N --router least-loaded|prefix``.

"At the arrival", precisely: request k, sent at s_k [s] (its send time: the trace's timestamp; the client's cap
and the front end come after the router, on the chosen replica), is routed from each replica's state after
every step that starts before s_k (the step running at s_k included: the request can join at the earliest the
step after it, by when that step's finishes and prefills are done). It is then sent to the chosen replica, which
admits it, as always, at the first step starting at or after it reaches the engine. Requests sent at the same
time are routed one after the other, each seeing the ones before it in flight.

Routers (:data:`CLOCK_ROUTERS`):

- ``least-loaded``: the replica with the fewest requests in flight (sent to it and not finished: waiting,
  running, preempted, or held by the client's cap); ties: fewer prompt tokens in flight, then the lowest index;
- ``prefix``: the replica whose prefix cache holds the longest run of the request's leading block keys (blocks
  whose prefill has completed, as the scheduler's own hit count reads them; without prefix caching no replica
  holds any, so this is least-loaded); ties by least-loaded's rule;
- a sequence of replica indices, one per request: a fixed assignment (round-robin and session decide without
  the clock); the lockstep run then equals simulating each replica on its share alone (tests hold it).

This module computes; it never prints. serve/ never imports trace/: the clockless routers live in
trace/replicas.py.
"""

from __future__ import annotations

CLOCK_ROUTERS = ("least-loaded", "prefix")


def _chooser(router, reps):
    """``choose(k, keys) -> replica`` for ``router`` (a name of CLOCK_ROUTERS or one replica per request)."""
    order = range(len(reps))
    if router == "least-loaded":
        def choose(k, keys):
            return min(order, key=lambda i: (*reps[i].in_flight(), i))
    elif router == "prefix":
        def choose(k, keys):
            runs = [r.cached_run(keys) if keys else 0 for r in reps]
            return min(order, key=lambda i: (-runs[i], *reps[i].in_flight(), i))
    elif isinstance(router, str):
        raise ValueError(f"{router!r} is not one of {', '.join(CLOCK_ROUTERS)} (or a fixed assignment)")
    else:
        fixed = [int(i) for i in router]

        def choose(k, keys):
            return fixed[k]
    return choose


def simulate_cluster(sm, pool, req, sch, replicas: int, router):
    """Step ``replicas`` replicas (each ``pool`` and ``sch``, timed by ``sm``) in lockstep over ``req`` (scheduler
    Requests, in send order), routing each request at its send time (see the module doc) -> (one Run per replica,
    with its requests in send order; each request's replica, a list). ValueError when the pool cannot hold the
    largest request, the send times are not sorted, or ``sm`` has no decode forms (the O(1) loop's)."""
    import numpy as np

    from kvcalc.out import progress
    from kvcalc.serve import scheduler_fast
    from kvcalc.serve.scheduler_live import Replica
    from kvcalc.serve.scheduler_state import begin_run

    st, _ = begin_run(pool, req, sch)   # a pool too small for the largest request: ValueError, as one replica's
    n = st.n
    forms = scheduler_fast.plan(sm, pool, req)
    if forms is None:
        raise ValueError("--router least-loaded and prefix step the replicas in lockstep on the O(1) scheduler "
                         "loop, which has no form for this model's layers and KV format (chunked attention with a "
                         "KIVI residual); --router round-robin or session decide without the clock")
    send, prompt, output = st.sched_send.tolist(), st.prompt.tolist(), st.output.tolist()
    if n and bool(np.any(np.diff(st.sched_send) < 0)):
        raise ValueError("the requests' send times must be sorted")
    if not isinstance(router, str) and len(router) != n:
        raise ValueError(f"a fixed assignment needs one replica per request ({len(router)} for {n})")
    keys = req.keys if req.keys is not None else [None] * n
    handed = np.asarray(req.handed, dtype=np.int64).tolist() if req.handed is not None else [0] * n
    load = st.load.tolist() if st.load is not None else [0.0] * n
    tick = progress.counter(n)
    reps = [Replica(sm, pool, sch, forms, req.key_tokens, keyed=req.keys is not None, handed=req.handed is not None,
                    loads=req.load_s is not None, warm_keys=req.warm_keys, tick=tick) for _ in range(replicas)]
    choose = _chooser(router, reps)
    chosen: list = []
    at = None
    for k in range(n):
        t = send[k]
        if t != at:   # a second request at the same time: the replicas are there already
            for r in reps:
                r.advance_to(t)
            at = t
        i = choose(k, keys[k])
        if not 0 <= i < replicas:
            raise ValueError(f"request {k}: replica {i} is not in [0, {replicas})")
        reps[i].submit(send[k], prompt[k], output[k], keys[k], handed[k], load[k])
        chosen.append(i)
    return [r.run_to_end() for r in reps], chosen
