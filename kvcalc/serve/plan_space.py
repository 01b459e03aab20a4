"""``kvcalc plan``'s search space: the deployment families (hardware x TP x DP inside one replica), the
candidates (a family x a number of replicas, at most ``max_gpus`` GPUs in all), the traffic a replica gets, and
the physical lower bounds that reject a family before anything is simulated.

A replica is one ``vllm serve`` of ``tp`` x ``dp`` GPUs (``--tensor-parallel-size tp --data-parallel-size dp``:
dp engines of tp GPUs each, every dp-th request to each, as ``kvcalc bench --dp`` runs them; for an MoE model
also with ``--enable-expert-parallel``: the experts over all tp x dp GPUs, attention data-parallel); ``replicas``
copies of it sit behind a router. GPUs = tp x dp x replicas. TP must divide the query heads and divide or be a
multiple of every group's KV heads (vLLM's rule: KV heads are replicated once tp > kv_heads); a replica fits in
one node of NODE_GPUS GPUs.

Bounds (each a true lower bound on what the bench core then simulates, so a family they reject could not meet
the target; the arguments are in the docstrings of :func:`tpot_floor_s` and :func:`ttft_floor_s`):
memory (the engine's KV pool must hold the longest request), TPOT (a step of one decode token, with no KV read)
and TTFT (the front end + the request's own uncached prefill as the fewest, largest steps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable, Optional

NODE_GPUS = 8  # GPUs per node (HGX/DGX H100, H200, B200 boards): one replica's TP x DP stays inside one node
PLAN_SAMPLE = 300  # requests per engine the search simulates at a finite rate (its first ones: a longer run
                    # only waits longer, so a sample that misses rejects); an answer is re-simulated whole


@dataclass(frozen=True)
class Targets:
    """The latency targets [s]."""

    ttft_p99_s: float
    tpot_p99_s: float


@dataclass(frozen=True)
class Traffic:
    """The requests to serve: the random dataset (``base`` holds its lengths, rate [req/s], prompts, client cap
    and seed) or, with ``split``, a request list (a trace or a workload) routed to the replicas:
    ``split(replicas) -> [scheduler.Requests per replica]``. ``requests`` is the whole list (the bounds' input)."""

    base: object                          # bench.BenchSpec without model/hardware: lengths, rate, caps, seed
    split: Optional[Callable] = None
    requests: Optional[object] = None     # scheduler.Requests of all of them (trace/workload)
    label: str = "random"
    router: str = "round-robin"
    tiers: Optional[Callable] = None      # --tiers: (replica's requests, its BenchSpec, its Pool) -> (the requests
                                          # with their tiered hits and load times, lower-tier hit tokens)

    @property
    def finite_rate(self) -> bool:
        return self.split is not None or not math.isinf(self.base.request_rate)


@dataclass(frozen=True)
class Family:
    """One hardware x TP x DP, with what it needs: model, hardware, link, calibration (a BenchSpec template)."""

    hw_name: str
    tp: int
    dp: int
    spec: object  # bench.BenchSpec with this hardware, tp and dp and the traffic's lengths
    note: Optional[str] = None  # the calibration it borrows, if any
    prefill: int = 0            # disaggregated: prefill engines (0: aggregated)
    decode: int = 0             # disaggregated: decode engines
    pd_link: object = None      # disaggregated: the link the KV is handed over (LinkPreset)
    ep: bool = False            # --enable-expert-parallel: experts over tp x dp GPUs, DP attention (MoE models)
    decode_spec: object = None  # disaggregated: the decode engines' BenchSpec when their TP differs (else spec)

    @property
    def decode_tp(self) -> int:
        """TP of the decode engines (disaggregated; the prefill engines have ``tp``)."""
        return self.decode_spec.tp if self.decode_spec is not None else self.tp

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.prefill + self.decode_tp * self.decode if self.prefill else self.tp * self.dp

    @property
    def engines(self) -> int:
        """Engines sharing a replica's requests (the widest side when disaggregated)."""
        return max(self.prefill, self.decode) if self.prefill else self.dp

    @property
    def disagg(self) -> Optional[str]:
        """"1P:3D" when disaggregated, else None."""
        return f"{self.prefill}P:{self.decode}D" if self.prefill else None

    @property
    def usd_per_gpu_hour(self) -> float:
        p = self.spec.usd_per_gpu_hour
        return p if p is not None else self.spec.hw.usd_per_gpu_hour

    @property
    def ep_size(self) -> int:
        """GPUs the experts shard over (1: no expert parallelism, the experts split by TP)."""
        return self.tp * self.dp if self.ep else 1

    def key(self) -> tuple:
        return (self.hw_name, self.tp, self.dp, self.disagg, self.ep_size, self.decode_tp if self.prefill else None)


@dataclass(frozen=True)
class Candidate:
    """A family x replicas."""

    family: Family
    replicas: int

    @property
    def gpus(self) -> int:
        return self.family.gpus_per_replica * self.replicas

    @property
    def usd_per_hour(self) -> float:
        """GPUs x the hardware's USD per GPU-hour [USD/h]."""
        return self.gpus * self.family.usd_per_gpu_hour

    def order(self) -> tuple:
        f = self.family
        return (self.usd_per_hour, self.gpus, f.hw_name, f.tp, f.dp, f.disagg or "", f.ep_size, f.decode_tp,
                self.replicas)


@dataclass
class Bounds:
    """A family's bounds: the pool (blocks) vs the longest request's need, and the TPOT and TTFT floors [s]."""

    pool_blocks: int
    need_blocks: int
    kv_pool_tokens: int
    tpot_floor_s: float
    ttft_floor_s: float
    limits: dict = field(default_factory=dict)


def hardware_choices(names) -> list:
    """[(name, hardware preset, scale-up link or None, (calibration, its name), borrowed-calibration note)] of
    hardware preset names or paths (catalog errors name the bad one)."""
    from kvcalc.model import catalog
    from kvcalc.serve.calibration import calibration_for

    out = []
    for name in names:
        hw = catalog.load_hardware(name)
        link = catalog.load_link(hw.scaleup_link) if hw.scaleup_link else None
        cal, cal_name, note = calibration_for(name)
        out.append((catalog.name_of(name), hw, link, (cal, cal_name), note))
    return out


def tp_sizes(model, most: int = NODE_GPUS) -> list[int]:
    """TP sizes (powers of two up to ``most``) the model's heads allow: q_heads % tp == 0 and, per layer group,
    kv_heads % tp == 0 or tp % kv_heads == 0 (vLLM's check in its model loader)."""
    from kvcalc.model import attention as att

    heads = [g.kv_heads for g in att.resolve_groups(model, att.KvOptions()) if g.kv_heads]
    out = []
    tp = 1
    while tp <= most:
        q_ok = not model.q_heads or model.q_heads % tp == 0
        if q_ok and all(h % tp == 0 or tp % h == 0 for h in heads):
            out.append(tp)
        tp *= 2
    return out


def families(model, hardware: list[tuple[str, object, object, object, Optional[str]]], template,
             max_gpus: int, disagg: str = "off", pd_link=None) -> list[Family]:
    """Every hardware x TP x DP with tp x dp <= min(NODE_GPUS, max_gpus) (``disagg`` off or auto; for a model
    with routed experts each also with expert parallelism over its tp x dp GPUs, serve/expert_parallel.py), and with
    ``disagg`` on or auto every hardware x P prefill engines of one TP x D decode engines of the same or another
    TP (plan_disagg.pd_shapes), the KV handed over ``pd_link``
    (default: the hardware's scale-up link). ``hardware``: (name, preset, scale-up link or None, calibration,
    borrowed-calibration note) each; ``template``: the BenchSpec of the traffic."""
    from kvcalc.serve.plan_disagg import pd_shapes

    out = []
    most = min(NODE_GPUS, max_gpus)
    tps = tp_sizes(model, most)
    for hw_name, hw, link, (cal, cal_name), note in hardware:
        specs = {tp: replace(template, hw_name=hw_name, hw=hw, link=link if tp > 1 else None, cal=cal,
                             cal_name=cal_name, tp=tp, dp=1) for tp in tps}
        for tp, spec in specs.items():
            dp = 1
            while disagg != "on" and tp * dp <= most:
                out.append(Family(hw_name, tp, dp, replace(spec, dp=dp), note))
                if model.moe_experts and tp * dp > 1:  # the same GPUs with expert parallelism
                    out.append(Family(hw_name, tp, dp, replace(spec, dp=dp, ep=True), note, ep=True))
                dp *= 2
        if disagg != "off" and (pd_link or link) is not None:
            out += [Family(hw_name, tp_p, 1, specs[tp_p], note, p, d, pd_link or link,
                           decode_spec=specs[tp_d] if tp_d != tp_p else None) for tp_p, p, tp_d, d in pd_shapes(tps, most)]
    return out


def candidates(fams: list[Family], max_gpus: int) -> list[Candidate]:
    """Every family x replicas from 1 to max_gpus // (tp x dp), cheapest first."""
    out = [Candidate(f, r) for f in fams for r in range(1, max_gpus // f.gpus_per_replica + 1)]
    return sorted(out, key=Candidate.order)


def replica_spec(c: Candidate, traffic: Traffic, part=None, full: bool = False, prompts: int | None = None):
    """The BenchSpec one replica of ``c`` runs: with the random dataset, 1 / replicas of the rate, of the prompts
    (at most PLAN_SAMPLE per engine at a finite rate unless ``full``: the search's sample) and of the client's
    concurrency cap (a Poisson stream split at random is a Poisson stream of the share's rate); ``prompts``: at
    most that many of the share (the first); with a request list, ``part`` (that replica's requests)."""
    spec = c.family.spec
    if part is not None:
        return replace(spec, trace=part, num_prompts=len(part.prompt))
    b = traffic.base
    r = c.replicas
    n = max(1, b.num_prompts // r)
    if prompts is not None:
        n = min(n, prompts)
    elif traffic.finite_rate and not full:
        n = min(n, PLAN_SAMPLE * c.family.engines)  # at most PLAN_SAMPLE per engine
    conc = None if b.max_concurrency is None else max(1, b.max_concurrency // r)
    return replace(spec, num_prompts=n, request_rate=b.request_rate / r, max_concurrency=conc)


# ---------------------------------------------------------------- lower bounds (before any simulation)

def tpot_floor_s(sm) -> float:
    """A floor under every decode gap [s]: a step holding a request's decode has T >= 1 tokens, S >= 1
    sequences and >= 1 sampled, and every term of the step time (max(compute, memory) + communication +
    overhead) rises with T, S, the attention FLOPs and the KV read; so each gap is >= step_s(1, 1, 1, 0, 0) (the
    weights read once over HBM bandwidth x efficiency + the fixed costs), and so is every TPOT and its p99."""
    return float(sm.step_s(1.0, 1.0, 1.0, 0.0, 0.0))


def ttft_floor_s(sm, sch, prompt, cached) -> "object":
    """A floor under each request's TTFT [s], elementwise over prompts [tokens] and the most of each that a
    prefix cache could hold (``cached`` [tokens]): the serial front end (its cost per request + per prompt
    token), then prefilling u = prompt - cached (>= 1) tokens in k >= ceil(u / B) steps (B = the token budget).
    The step time is subadditive in the tokens (t / eff(t) = (t + n_half) / eff_max; the distinct experts
    E (1 - (1 - k/E)^T) are concave; max(a1 + a2, b1 + b2) <= max(a1, b1) + max(a2, b2)) and other requests in
    the same steps only add to it, so the k steps take >= one step of all u tokens (attention FLOPs of positions
    cached+1 .. prompt, no KV read) + (k - 1) fixed costs."""
    import numpy as np

    prompt = np.asarray(prompt, dtype=np.int64)
    u = np.maximum(prompt - np.asarray(cached, dtype=np.int64), 1)
    start = prompt - u
    budget = sch.max_num_batched_tokens
    pairs = {}
    for s, n in zip(start.tolist(), u.tolist()):
        if (s, n) not in pairs:
            pairs[(s, n)] = float(sm.step_s(float(n), 1.0, 1.0, sm.prefill_attention_flops(s, n), 0.0))
    first = np.asarray([pairs[(s, n)] for s, n in zip(start.tolist(), u.tolist())])
    extra = (np.ceil(u / budget) - 1) * (sm.step_overhead_s + sm.per_sequence_s)
    frontend = sch.frontend_s_per_request + sch.frontend_s_per_input_token * prompt
    return frontend + first + extra


def cache_ceiling(req, prefix_caching: bool):
    """The most tokens of each request a prefix cache could hold when it arrives [tokens]: its leading blocks
    that any earlier request also has (the engine's cache holds only blocks of earlier requests, and a replica
    sees a subset of them), at most prompt - 1 (one token is always computed)."""
    import numpy as np

    n = len(req.prompt)
    if not prefix_caching or req.keys is None:
        return np.zeros(n, dtype=np.int64)
    seen: set = set()
    out = np.zeros(n, dtype=np.int64)
    for i, keys in enumerate(req.keys):
        hit = 0
        for k in keys:
            if k not in seen:
                break
            hit += 1
        out[i] = min(hit * req.key_tokens, int(req.prompt[i]) - 1)
        seen.update(keys)
    return out


def family_bounds(f: Family, traffic: Traffic) -> Bounds:
    """Pool and floors of family ``f`` for the traffic (see the module docstring); the p99 TTFT floor is the
    99th percentile of the per-request floors (a percentile of a dominated array is dominated). Prefill and
    decode engines of different TP: the TTFT floor of the prefill side (a request's first token needs its
    prefill there), the TPOT floor of the decode side, and the memory bound of the side whose pool falls
    shorter of the longest request."""
    b = spec_bounds(f.spec, traffic)
    if f.prefill and f.decode_spec is not None:
        d = spec_bounds(f.decode_spec, traffic)
        short = b if b.pool_blocks - b.need_blocks <= d.pool_blocks - d.need_blocks else d
        b = Bounds(short.pool_blocks, short.need_blocks, d.kv_pool_tokens, d.tpot_floor_s, b.ttft_floor_s,
                   short.limits)
    return b


def spec_bounds(spec, traffic: Traffic) -> Bounds:
    """:func:`family_bounds` of one engine's BenchSpec."""
    import numpy as np

    from kvcalc.serve.bench import pool_and_limits, spec_step_model

    pool, sch = pool_and_limits(spec)
    sm = spec_step_model(spec)
    if traffic.requests is not None:
        req = traffic.requests
        cached = cache_ceiling(req, spec.prefix_caching)
        floors = ttft_floor_s(sm, sch, req.prompt, cached)
        ttft = float(np.percentile(floors, 99))
        longest = int(np.max(req.prompt + (req.output if sch.reserve_output else 1)))
        has_decode = bool(np.max(req.output) > 1)
    else:
        prompt = spec.input_len + spec.shared_prefix_tokens
        # every request but the first of each group may find the shared prefix cached: the smaller floor holds
        warm = (spec.shared_prefix_tokens // 16) * 16 if spec.prefix_caching else 0
        ttft = float(ttft_floor_s(sm, sch, [prompt], [min(warm, prompt - 1)])[0])
        longest = prompt + (spec.output_len if sch.reserve_output else 1)
        has_decode = spec.output_len > 1
    return Bounds(pool_blocks=int(pool.num_blocks), need_blocks=int(pool.need_one(longest)),
                  kv_pool_tokens=int(pool.num_blocks * pool.block_size),
                  tpot_floor_s=tpot_floor_s(sm) if has_decode else 0.0, ttft_floor_s=ttft,
                  limits={"max_num_seqs": sch.max_num_seqs, "max_num_batched_tokens": sch.max_num_batched_tokens,
                          "block_size": pool.block_size})
