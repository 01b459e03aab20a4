"""``kvcalc plan --disagg on|auto``: prefill/decode disaggregated replicas on the bench core.

A replica is P prefill engines of ``tp`` GPUs and D decode engines of the same or another TP ("PP:DD", e.g.
"2P:1D" of 2 x TP2 prefill and 1 x TP4 decode), as vLLM's
disaggregated serving behind a proxy runs them (examples/online_serving/disaggregated_serving: the proxy sends
each request to a prefill instance with max_tokens = 1, then to a decode instance with the request's own
max_tokens, which finds the prompt's KV already handed over):

1. the prefill engines run every request with one output token (the bench core's scheduler, every P-th request
   to each); a request's KV is ready when its prefill ends;
2. the KV moves to the decode side as one copy per GPU over the link (latency + the GPU's share of the
   request's stored KV bytes / bandwidth: move/links.py; KV heads shard over TP, a latent is replicated);
3. the decode engines get the requests in order of arrival (every D-th to each) with the prompt's KV handed
   over (scheduler.Requests.handed: only the last prompt token is computed) and generate every output token.

TTFT = the decode engine's first token - the send; TPOT from the decode engine's tokens; GPU time = every
engine's. The client's --max-concurrency is not modelled here (plan refuses it with --disagg).
"""

from __future__ import annotations

from dataclasses import replace

# P:D pairs searched (prefill engines <= decode engines: decode holds the KV of every running request)
MAX_ENGINES = 8


def pd_shapes(tps: list[int], most: int) -> list[tuple[int, int, int, int]]:
    """(prefill TP, P, decode TP, D): 1 <= P, D <= MAX_ENGINES, P x prefill TP + D x decode TP <= most GPUs and
    no more prefill GPUs than decode GPUs (decode holds the KV of every running request); with one TP this is
    1 <= P <= D."""
    return [(tp_p, p, tp_d, d) for tp_p in tps for tp_d in tps for p in range(1, MAX_ENGINES + 1)
            for d in range(1, MAX_ENGINES + 1) if tp_p * p + tp_d * d <= most and tp_p * p <= tp_d * d]


def handoff_s(spec, link, prompt):
    """Seconds to hand each request's KV to the decode side: latency + per-GPU bytes / bandwidth [s] (``spec``
    with the smaller TP of the two sides: its GPUs send or receive the larger share)."""
    import numpy as np

    from kvcalc.model import attention as att
    from kvcalc.move.links import transfer_time_s

    groups = att.resolve_groups(spec.model, spec.opts)
    prompt = np.asarray(prompt, dtype=np.int64)
    per_gpu = sum((att.stored_bytes(g, prompt) + att.state_bytes(g)) * att.per_gpu_share(g, spec.tp) for g in groups)
    return transfer_time_s(np.asarray(per_gpu, dtype=float), link.latency_s, link.bandwidth_bytes_per_s())


def simulate_pd(spec, req, prefill: int, decode: int, link, decode_spec=None):
    """One disaggregated replica of ``spec`` (tp, model, hardware; the decode engines ``decode_spec`` when their
    TP differs) serving ``req`` -> (Run of all its requests in request order, decode StepModel's pool,
    scheduling, [BenchSpecs run])."""
    import numpy as np

    from kvcalc.serve.bench import simulate_spec
    from kvcalc.serve.plan_traffic import part
    from kvcalc.serve.scheduler import Requests, Run

    n = len(req.prompt)
    prompt = np.asarray(req.prompt, dtype=np.int64)
    output = np.asarray(req.output, dtype=np.int64)
    pre_req = Requests(np.asarray(req.send_s, dtype=float), prompt, np.ones(n, dtype=np.int64), req.keys,
                       req.key_tokens)
    pre_spec = replace(spec, dp=prefill, trace=pre_req, num_prompts=n, max_concurrency=None)
    _, pre_runs, _, _, _ = simulate_spec(pre_spec)
    send = np.empty(n)
    ready = np.empty(n)
    for e, r in enumerate(pre_runs):
        send[e::prefill] = r.send_s
        ready[e::prefill] = r.first_s
    dec = decode_spec if decode_spec is not None else spec
    arrive = ready + handoff_s(spec if spec.tp <= dec.tp else dec, link, prompt)
    order = np.argsort(arrive, kind="stable")
    dec_req = Requests(arrive[order], prompt[order], output[order], None, req.key_tokens)
    first = np.empty(n)
    done = np.empty(n)
    specs = [pre_spec]
    dec_runs = []
    for e in range(decode):
        idx = np.arange(e, n, decode)
        p = part(dec_req, idx)
        p.handed = prompt[order][idx]
        dspec = replace(dec, dp=1, trace=p, num_prompts=len(idx), prefix_caching=False, max_concurrency=None)
        _, runs, _, pool, sch = simulate_spec(dspec)
        first[order[idx]] = runs[0].first_s
        done[order[idx]] = runs[0].done_s
        dec_runs += runs
        specs.append(dspec)
    run = Run(send, first, done, output, prompt, steps=sum(r.steps for r in pre_runs + dec_runs),
              preemptions=sum(r.preemptions for r in pre_runs + dec_runs),
              cached_tokens=sum(r.cached_tokens for r in pre_runs),
              peak_running=max(r.peak_running for r in dec_runs),
              prefill_time_s=sum(r.prefill_time_s + r.decode_time_s for r in pre_runs),
              decode_time_s=sum(r.prefill_time_s + r.decode_time_s for r in dec_runs))
    return run, pool, sch, specs
