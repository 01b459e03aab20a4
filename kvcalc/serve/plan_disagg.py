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

from dataclasses import dataclass, replace

# P:D pairs searched (prefill engines <= decode engines: decode holds the KV of every running request)
MAX_ENGINES = 8


def pd_shapes(tps: list[int], most: int) -> list[tuple[int, int, int, int]]:
    """(prefill TP, P, decode TP, D): 1 <= P, D <= MAX_ENGINES, P x prefill TP + D x decode TP <= most GPUs and
    no more prefill GPUs than decode GPUs (decode holds the KV of every running request); with one TP this is
    1 <= P <= D."""
    return [(tp_p, p, tp_d, d) for tp_p in tps for tp_d in tps for p in range(1, MAX_ENGINES + 1)
            for d in range(1, MAX_ENGINES + 1) if tp_p * p + tp_d * d <= most and tp_p * p <= tp_d * d]


def handoff_bytes(spec, prompt, held=None):
    """KV each request hands to the decode side, minus the prefix of ``held`` tokens the decode engine already
    holds (serve/sharing.py's shared bytes, group by group; the fixed state always moves), / --kv-compression ->
    (bytes of the request [B], bytes each GPU sends or receives [B]: ``spec``'s TP share), arrays by request."""
    import numpy as np

    from kvcalc.model import attention as att
    from kvcalc.serve.sharing import shared_bytes

    groups = att.resolve_groups(spec.model, spec.opts)
    prompt = np.asarray(prompt, dtype=np.int64)
    held = np.zeros_like(prompt) if held is None else np.asarray(held, dtype=np.int64)
    scale = 1.0 / spec.kv_compression if spec.kv_compression else 1.0
    each = [(att.stored_bytes(g, prompt) + att.state_bytes(g) - shared_bytes([g], prompt, held)) * scale
            for g in groups]
    moved = sum(each)
    per_gpu = sum(b * att.per_gpu_share(g, spec.tp) for b, g in zip(each, groups))
    return np.asarray(moved, dtype=float), np.asarray(per_gpu, dtype=float)


def handoff_s(spec, link, prompt, held=None):
    """Seconds to hand each request's KV to the decode side: latency + per-GPU bytes / bandwidth [s] (``spec``
    with the smaller TP of the two sides: its GPUs send or receive the larger share; ``held``: see
    :func:`handoff_bytes`)."""
    from kvcalc.move.links import transfer_time_s

    return transfer_time_s(handoff_bytes(spec, prompt, held)[1], link.latency_s, link.bandwidth_bytes_per_s())


@dataclass
class PdRun:
    """One disaggregated replica's run (see :func:`run_pd`), per request in request order."""

    run: object          # scheduler.Run of all requests: send, decode side's first token and finish
    pool: object         # the decode engines' Pool
    sch: object          # their Scheduling
    specs: list          # [prefill BenchSpec, each decode engine's BenchSpec]
    ready_s: object      # prefill done (its one token) [s]
    handoff_s: object    # the hand-off's time [s]
    moved_bytes: object  # KV handed over [B]
    held_tokens: object  # prompt tokens whose KV the decode engine already held [tokens]


def simulate_pd(spec, req, prefill: int, decode: int, link, decode_spec=None):
    """One disaggregated replica of ``spec`` (tp, model, hardware; the decode engines ``decode_spec`` when their
    TP differs) serving ``req`` -> (Run of all its requests in request order, decode StepModel's pool,
    scheduling, [BenchSpecs run])."""
    r = run_pd(spec, req, prefill, decode, link, decode_spec)
    return r.run, r.pool, r.sch, r.specs


def run_pd(spec, req, prefill: int, decode: int, link, decode_spec=None, decode_cache: bool = False) -> PdRun:
    """:func:`simulate_pd` with what the hand-off was. ``decode_cache``: the decode engines keep a prefix cache
    of the blocks handed to them (``req.keys``; ``req.warm_keys`` are held from the start), request k goes to
    decode engine k mod D (the proxy's round robin in request order, as the prefill engines split them: A and C
    meet the same engines), and only the leading blocks its engine does not hold when its prefill ends move
    (vLLM's NixlConnector pulls the prompt tokens beyond the decode side's local prefix-cache hit); else every
    prompt token moves and the requests go to engine k mod D in order of the hand-offs' arrival."""
    import numpy as np

    from kvcalc.serve.bench import simulate_spec
    from kvcalc.serve.plan_traffic import part
    from kvcalc.serve.scheduler import Requests, Run

    n = len(req.prompt)
    prompt = np.asarray(req.prompt, dtype=np.int64)
    output = np.asarray(req.output, dtype=np.int64)
    pre_req = Requests(np.asarray(req.send_s, dtype=float), prompt, np.ones(n, dtype=np.int64), req.keys,
                       req.key_tokens, warm_keys=req.warm_keys)
    pre_spec = replace(spec, dp=prefill, trace=pre_req, num_prompts=n, max_concurrency=None)
    _, pre_runs, _, _, _ = simulate_spec(pre_spec)
    send = np.empty(n)
    ready = np.empty(n)
    for e, r in enumerate(pre_runs):
        send[e::prefill] = r.send_s
        ready[e::prefill] = r.first_s
    dec = decode_spec if decode_spec is not None else spec
    side = spec if spec.tp <= dec.tp else dec
    held = None
    engine = np.empty(n, dtype=np.int64)
    if decode_cache:
        engine[:] = np.arange(n) % decode  # request k to engine k mod D, as the prefill side splits them
        if req.keys is not None:
            held = _held_tokens(side, link, req, ready, engine, decode)
    hand = handoff_s(side, link, prompt) if held is None else handoff_s(side, link, prompt, held)
    arrive = ready + hand
    order = np.argsort(arrive, kind="stable")
    if not decode_cache:
        engine[order] = np.arange(n) % decode
    dec_req = Requests(arrive[order], prompt[order], output[order], None, req.key_tokens)
    first = np.empty(n)
    done = np.empty(n)
    specs = [pre_spec]
    dec_runs = []
    for e in range(decode):
        idx = np.flatnonzero(engine[order] == e)
        p = part(dec_req, idx)
        p.handed = prompt[order][idx]
        dspec = replace(dec, dp=1, trace=p, num_prompts=len(idx), prefix_caching=False, max_concurrency=None)
        specs.append(dspec)
        if not len(idx):  # fewer requests than decode engines: this one idles
            continue
        _, runs, _, pool, sch = simulate_spec(dspec)
        first[order[idx]] = runs[0].first_s
        done[order[idx]] = runs[0].done_s
        dec_runs += runs
    run = Run(send, first, done, output, prompt, steps=sum(r.steps for r in pre_runs + dec_runs),
              preemptions=sum(r.preemptions for r in pre_runs + dec_runs),
              cached_tokens=sum(r.cached_tokens for r in pre_runs),
              prefill_tokens=sum(r.prefill_tokens for r in pre_runs),
              peak_running=max(r.peak_running for r in dec_runs), jumps=sum(r.jumps for r in pre_runs + dec_runs),
              prefill_time_s=sum(r.prefill_time_s + r.decode_time_s for r in pre_runs),
              decode_time_s=sum(r.prefill_time_s + r.decode_time_s for r in dec_runs))
    held = np.zeros(n, dtype=np.int64) if held is None else held
    return PdRun(run, pool, sch, specs, ready, hand, handoff_bytes(side, prompt, held)[0], held)


def _held_tokens(side, link, req, ready, engine, decode: int):
    """Prompt tokens of each request whose blocks its decode engine holds when its prefill ends: the leading
    block keys that a request handed to the same engine earlier brought (its KV arrived by then) or that are
    warm, at most the prompt - 1 tokens in whole blocks (vLLM computes at least one token) [tokens]."""
    import heapq

    import numpy as np

    kt = req.key_tokens
    warm = req.warm_keys or frozenset()
    held_keys = [set() for _ in range(decode)]
    pending = [[] for _ in range(decode)]  # per engine: (arrival, request) of hand-offs under way
    held = np.zeros(len(req.prompt), dtype=np.int64)
    time_of = {}  # (prompt, held) -> hand-off seconds: workloads repeat a few lengths
    for i in np.argsort(ready, kind="stable").tolist():
        e = int(engine[i])
        while pending[e] and pending[e][0][0] <= ready[i]:
            held_keys[e].update(req.keys[heapq.heappop(pending[e])[1]])
        keys, mine = req.keys[i], held_keys[e]
        most = min(len(keys), (int(req.prompt[i]) - 1) // kt)
        b = 0
        while b < most and (keys[b] in mine or keys[b] in warm):
            b += 1
        held[i] = b * kt
        k = (int(req.prompt[i]), b * kt)
        if k not in time_of:
            time_of[k] = float(handoff_s(side, link, [k[0]], [k[1]])[0])
        heapq.heappush(pending[e], (ready[i] + time_of[k], i))
    return held
