"""``kvcalc bench``: what ``vllm bench serve`` would print, from the scheduler (scheduler.py) and the step time
(step_time.py) with the GPU's calibration (presets/calibration/).

Engines: vllm (KV pool from memory/engine_vllm.py, online-server defaults per GPU from the calibration),
sglang (memory/engine_sglang.py's pool, page 1, chunked_prefill_size 8,192; admission reserves the output as its
conservative scheduler does; each step prefill-only or decode-only, as without --enable-mixed-chunk), trtllm (vLLM's pool estimate, 32-token blocks, max_num_tokens 8,192,
max_batch_size 2,048, GUARANTEED_NO_EVICT admission: the whole prompt + output must fit). ``dp`` replicas of
``tp`` GPUs each take every dp-th request, or those ``replica_of`` gives them, or, with router least-loaded or
prefix, those routed to them at their send times from the replicas' simulated state (serve/cluster.py); with
``ep`` (--enable-expert-parallel) they are the DP ranks of one engine whose experts shard over all tp x dp GPUs
(serve/expert_parallel.py).

Metrics, as vLLM's saved result names them (vllm/benchmarks/serve.py): duration (first send to last finish)
[s], completed, total_input_tokens, total_output_tokens, request_throughput [req/s], output_throughput,
total_token_throughput [tok/s], mean/median/p99 TTFT and TPOT [ms] (TPOT = (E2EL - TTFT) / (output - 1) per
request of more than one token), mean_itl_ms (all inter-token gaps: sum (E2EL - TTFT) / sum (output - 1)),
median_itl_ms and p99_itl_ms (of the same gaps pooled over requests, as vLLM's list of ITLs: each gap is the
time between two of a request's tokens, one decode step when it ran in successive steps), mean_e2el_ms; plus gpu_seconds (duration x GPUs) and $ per M tokens: the GPU time of each step is split
between input and output by the step's prefill vs decode tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

from kvcalc.model import attention as att
from kvcalc.model.schema import HardwarePreset, LinkPreset, ModelPreset

ENGINES = ("vllm", "sglang", "trtllm")
SGLANG_CHUNKED_PREFILL = 8192   # server_args chunked_prefill_size on >= 80 GB GPUs
SGLANG_MAX_RUNNING = 4096       # init_memory_pool's cap on max_running_requests
TRTLLM_MAX_TOKENS = 8192        # trtllm-serve --max_num_tokens default
TRTLLM_MAX_BATCH = 2048         # trtllm-serve --max_batch_size default
TRTLLM_BLOCK = 32               # KvCacheConfig tokens_per_block default


@dataclass(frozen=True)
class BenchSpec:
    """One ``vllm bench serve`` run to predict (lengths [tokens], rate [req/s], sizes as the flags give them)."""

    model_name: str
    model: ModelPreset
    hw_name: str
    hw: HardwarePreset
    link: Optional[LinkPreset]
    cal: object                      # CalibrationPreset
    cal_name: str
    tp: int = 1
    dp: int = 1
    engine: str = "vllm"
    async_scheduling: bool = False
    input_len: int = 1024
    output_len: int = 128
    num_prompts: int = 1000
    request_rate: float = math.inf
    max_concurrency: Optional[int] = None
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    max_model_len: Optional[int] = None
    prefix_caching: bool = False
    shared_prefix_tokens: int = 0
    shared_prefix_groups: int = 1
    seed: int = 0
    opts: att.KvOptions = att.KvOptions()
    output_lens: Optional[tuple] = None   # measured per-request output lengths (early EOS), else output_len
    input_lens: Optional[tuple] = None    # measured per-request prompt lengths (bench --measured), else input_len
    burstiness: float = 1.0               # vllm's --burstiness: gamma inter-arrival times of shape B (1 = Poisson)
    trace: Optional[object] = None        # scheduler.Requests read from a trace
    router: str = "round-robin"           # how requests are spread over the dp replicas: least-loaded and prefix
                                          # route on the clock (serve/cluster.py) unless replica_of is given
    replica_of: Optional[object] = None   # each request's replica (int array, in the requests' order); None: every dp-th
    usd_per_gpu_hour: Optional[float] = None
    kv_compression: Optional[float] = None  # the article's section-11 what-if: KV stored and read / FACTOR
    started: bool = False                 # the run is known to have started: its pool held max_model_len
    pool: Optional[object] = None         # a scheduler.Pool given by the caller (cost/compare's KV budget), else
                                          # the engine's own sizing
    ep: bool = False                      # --enable-expert-parallel: the experts shard over tp x dp GPUs, each of
                                          # the dp ranks runs its own batch (DP attention): serve/expert_parallel.py

    @property
    def gpus(self) -> int:
        return self.tp * self.dp


def requests_of(spec: BenchSpec):
    """The run's requests: random dataset (fixed lengths, or each request's from ``input_lens``/``output_lens``;
    Poisson arrivals with ``seed``, gamma ones of shape ``burstiness`` and mean 1 / rate as vllm bench serve draws
    them (``np.random.gamma(shape=burstiness, scale=1 / (rate x burstiness))``), or all at t = 0; a shared prefix of
    TOKENS before each prompt, one per group, as vllm's --random-prefix-len) or a trace."""
    import numpy as np

    from kvcalc.serve.scheduler import Requests

    if spec.trace is not None:
        return spec.trace
    n = spec.num_prompts
    if math.isinf(spec.request_rate):
        send = np.zeros(n)
    else:
        rng = np.random.default_rng(spec.seed)
        gaps = (rng.exponential(1.0 / spec.request_rate, n) if spec.burstiness == 1 else
                rng.gamma(spec.burstiness, 1.0 / (spec.request_rate * spec.burstiness), n))
        send = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    prompt = (np.asarray(spec.input_lens, dtype=np.int64) if spec.input_lens is not None
              else np.full(n, spec.input_len, dtype=np.int64)) + spec.shared_prefix_tokens
    output = (np.asarray(spec.output_lens, dtype=np.int64) if spec.output_lens is not None
              else np.full(n, spec.output_len, dtype=np.int64))
    keys, key_tokens = None, 16
    if spec.shared_prefix_tokens:
        blocks = spec.shared_prefix_tokens // key_tokens
        groups = spec.shared_prefix_groups
        keys = [tuple((i % groups, b) for b in range(blocks)) for i in range(n)]
    return Requests(send, prompt, output, keys, key_tokens)


def pool_and_limits(spec: BenchSpec):
    """(Pool, Scheduling) of one replica from the engine's sizing (memory/) and the defaults."""
    from kvcalc.memory import engine_common as ec
    from kvcalc.memory.engine_report import engine_groups
    from kvcalc.memory.engine_sglang import sglang_sizing
    from kvcalc.memory.engine_vllm import vllm_sizing
    from kvcalc.out import units
    from kvcalc.serve.scheduler import Pool, Scheduling

    cal = spec.cal
    ep_w = None
    if spec.ep:  # the experts shard over tp x dp GPUs: each GPU holds less, its KV pool more
        from kvcalc.serve.expert_parallel import weights_per_gpu

        ep_w = weights_per_gpu(spec.model, spec.tp, spec.dp)
    max_len = spec.max_model_len or spec.model.max_context_tokens or (spec.input_len + spec.output_len)
    fe = dict(frontend_s_per_request=units.us_to_s(cal.frontend_us_per_request),
              frontend_s_per_input_token=cal.frontend_ns_per_input_token * 1e-9)
    common = dict(prefix_caching=spec.prefix_caching, max_concurrency=spec.max_concurrency, **fe)
    if spec.engine == "sglang":
        chunk = spec.max_num_batched_tokens or SGLANG_CHUNKED_PREFILL
        groups = engine_groups("sglang", spec.model, spec.opts)
        s = sglang_sizing(spec.model, groups, spec.hw, ec.EngineInputs(engine="sglang", tp=spec.tp,
                                                                      max_model_len=max_len, weights_bytes=ep_w))
        pool = _floor(Pool(num_blocks=int(s["kv_cache_tokens"]), block_size=1, batched_tokens=chunk), spec, max_len)
        seqs = spec.max_num_seqs or SGLANG_MAX_RUNNING
        return pool, Scheduling(chunk, seqs, reserve_output=True, mixed_batches=False, **common)
    if spec.pool is not None:  # the caller's pool (serve/served.py: the cost model's KV budget), vLLM's limits
        batched = spec.max_num_batched_tokens or cal.vllm_default_max_num_batched_tokens
        seqs = spec.max_num_seqs or cal.vllm_default_max_num_seqs
        return replace(spec.pool, batched_tokens=batched), Scheduling(batched, seqs, **common)
    groups = att.resolve_groups(spec.model, spec.opts)
    if spec.engine == "trtllm":
        batched = spec.max_num_batched_tokens or TRTLLM_MAX_TOKENS
        seqs = spec.max_num_seqs or TRTLLM_MAX_BATCH
        block = TRTLLM_BLOCK
        if ep_w is None:  # vLLM's sizing stands in for TensorRT-LLM's, not vLLM's MXFP4 MoE weight layout
            ep_w = ec.weights(spec.model, ec.EngineInputs(tp=spec.tp)).value
    else:
        batched = spec.max_num_batched_tokens or cal.vllm_default_max_num_batched_tokens
        seqs = spec.max_num_seqs or cal.vllm_default_max_num_seqs
        block = None
    s = vllm_sizing(spec.model, groups, spec.hw, ec.EngineInputs(
        engine="vllm", tp=spec.tp, max_model_len=max_len, max_num_batched_tokens=batched, max_num_seqs=seqs,
        block_size=block, weights_bytes=ep_w))
    kg = s["kgroups"]
    pool = Pool(num_blocks=int(s["num_gpu_blocks"]), block_size=int(s["block_size"]),
                full_groups=sum(1 for g in kg if g.kind == "full"),
                sliding_windows=tuple(g.window_tokens for g in kg if g.kind == "sliding"),
                state_groups=sum(1 for g in kg if g.kind == "state"), batched_tokens=batched)
    pool = _floor(pool, spec, max_len)
    return pool, Scheduling(batched, seqs, reserve_output=spec.engine == "trtllm", **common)


def _floor(pool, spec: BenchSpec, max_len: int):
    """A measured run that started had a pool of at least one max_model_len request (vLLM refuses to start
    otherwise): when kvcalc's estimate of the pool is smaller, the run's own evidence wins."""
    if spec.started and pool.need_one(max_len) > pool.num_blocks:
        return replace(pool, num_blocks=pool.need_one(max_len))
    return pool


def _split(req, dp: int, r: int, replica_of=None):
    """Replica r's share of the requests: every dp-th, or those ``replica_of`` (one replica per request) gives it."""
    import numpy as np

    if dp == 1:
        return req
    at = slice(r, None, dp) if replica_of is None else np.flatnonzero(np.asarray(replica_of) == r)
    return req.take(at)


def spec_step_model(spec: BenchSpec):
    """The StepModel of one engine (DP rank) of ``spec``: step_time.step_model, with expert parallelism."""
    from kvcalc.serve.step_time import step_model

    sm = step_model(spec.model, spec.hw, spec.link, spec.cal, spec.tp, spec.engine, spec.async_scheduling,
                    spec.opts)
    if spec.ep:
        from kvcalc.serve.expert_parallel import with_expert_parallel

        sm = with_expert_parallel(sm, spec.model, spec.hw, spec.cal, spec.tp, spec.dp)
    return sm


def simulate_spec(spec: BenchSpec, lockstep: bool = False):
    """Run the scheduler for every replica -> (metrics dict, list of Run, StepModel, Pool, Scheduling). With
    ``dp`` > 1, router least-loaded or prefix and no ``replica_of``, the replicas run in lockstep and each request
    is routed at its send time from their simulated state (serve/cluster.py); otherwise each replica is simulated
    alone on its share (every dp-th, or ``replica_of``); ``lockstep`` runs that share in lockstep too (the
    figures are the same: a test holds it)."""
    from kvcalc.serve.cluster import CLOCK_ROUTERS, simulate_cluster
    from kvcalc.serve.scheduler import simulate

    sm = spec_step_model(spec)
    pool, sch = pool_and_limits(spec)
    if spec.kv_compression:  # the same bytes hold FACTOR x the blocks; every step reads 1 / FACTOR of the KV
        sm = replace(sm, kv_scale=1.0 / spec.kv_compression)
        pool = replace(pool, num_blocks=int(pool.num_blocks * spec.kv_compression))
    if spec.dp > 1 and sch.max_concurrency:
        sch = replace(sch, max_concurrency=max(1, sch.max_concurrency // spec.dp))
    every = requests_of(spec)
    req, kept = _admissible(every, spec)
    refused = 0 if kept is None else len(every.prompt) - len(kept)
    if kept is not None and spec.replica_of is not None:
        spec = replace(spec, replica_of=[spec.replica_of[i] for i in kept.tolist()])
    clocked = spec.dp > 1 and spec.replica_of is None and spec.router in CLOCK_ROUTERS
    if clocked or (lockstep and spec.dp > 1):
        fixed = [k % spec.dp for k in range(len(req.prompt))] if spec.replica_of is None else spec.replica_of
        runs, _ = simulate_cluster(sm, pool, req, sch, spec.dp, spec.router if clocked else fixed)
    else:
        runs = [simulate(sm, pool, _split(req, spec.dp, r, spec.replica_of), sch) for r in range(spec.dp)]
    return metrics(runs, spec) | {"failed": refused}, runs, sm, pool, sch


def _admissible(req, spec: BenchSpec):
    """(the requests the engine serves, the indices kept or None when all are): vLLM's server rejects a prompt + max_tokens above
    max_model_len [tokens] with HTTP 400, and ``vllm bench serve`` counts it as failed. A trace's longer requests
    are dropped and counted so; a random dataset (every request the same length) is refused with exit 2, since
    none would be served (and an absurd output length would step for ever)."""
    import numpy as np

    from kvcalc.out.errors import InputError

    max_len = spec.max_model_len or spec.model.max_context_tokens
    if not max_len:
        return req, None
    total = np.asarray(req.prompt, dtype=np.int64) + np.asarray(req.output, dtype=np.int64)
    ok = total <= max_len
    if spec.trace is not None and ok.any():
        if ok.all():
            return req, None
        at = np.flatnonzero(ok)
        return req.take(at), at
    over = np.flatnonzero(~ok)
    if over.size:
        i = int(over[0])
        what = (f"trace request {i + 1}" if spec.trace is not None
                else "--random-input-len + --random-output-len" + (" + --shared-prefix" if spec.shared_prefix_tokens
                                                                      else ""))
        where = "--max-model-len" if spec.max_model_len else f"{spec.model_name}'s max_context_tokens"
        raise InputError(f"{what}: {int(total[i]):,} tokens exceeds {where} ({max_len:,}); the engine refuses "
                         f"such a request" + (" (every request of the trace)" if spec.trace is not None else ""))
    return req, None


def _pct(x, q):
    import numpy as np

    return float(np.percentile(x, q)) if len(x) else 0.0


def _pooled_gaps(runs):
    """Every run's gaps between successive output tokens, pooled: (gaps [s], tokens with each). A run put
    together from others (serve/plan_disagg.py) has no gap list: its requests count with their mean gap."""
    import numpy as np

    values, counts = [], []
    for r in runs:
        if r.gap_s is not None:
            values.append(r.gap_s)
            counts.append(r.gap_n)
            continue
        out = np.asarray(r.output)
        multi = out > 1
        values.append((r.done_s[multi] - r.first_s[multi]) / (out[multi] - 1))
        counts.append(out[multi] - 1)
    return np.concatenate(values).astype(float), np.concatenate(counts).astype(np.int64)


def pooled_percentile(values, counts, q: float) -> float:
    """np.percentile(np.repeat(values, counts), q) (its default linear rule, the one vLLM's bench uses) without
    building the repeated list: 10^5 requests x 200 tokens are 2 x 10^7 gaps [the values' unit]."""
    import numpy as np

    keep = counts > 0
    values, counts = np.asarray(values)[keep], np.asarray(counts)[keep]
    if not len(values):
        return 0.0
    order = np.argsort(values, kind="stable")
    v, ends = values[order], np.cumsum(counts[order])
    n = int(ends[-1])
    pos = (n - 1) * (q / 100)
    lo = math.floor(pos)
    a = float(v[np.searchsorted(ends, lo, side="right")])
    b = float(v[np.searchsorted(ends, min(lo + 1, n - 1), side="right")])
    t = pos - lo
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t)  # numpy's _lerp, both halves


def metrics(runs, spec: BenchSpec) -> dict:
    """vLLM's saved-result fields from the runs (see the module docstring)."""
    import numpy as np

    from kvcalc.out import units

    send = np.concatenate([r.send_s for r in runs])
    first = np.concatenate([r.first_s for r in runs])
    done = np.concatenate([r.done_s for r in runs])
    out = np.concatenate([r.output for r in runs]).astype(float)
    prompt = np.concatenate([r.prompt for r in runs]).astype(float)
    n = len(send)
    duration = float(done.max() - send.min()) if n else 0.0
    ttft = first - send
    e2el = done - send
    multi = out > 1
    tpot = (e2el[multi] - ttft[multi]) / (out[multi] - 1)
    gaps = float((out[multi] - 1).sum())
    itl = float((e2el[multi] - ttft[multi]).sum()) / gaps if gaps else 0.0
    gap_s, gap_n = _pooled_gaps(runs)
    tin, tout = float(prompt.sum()), float(out.sum())
    gpu_s = duration * spec.gpus
    price = spec.usd_per_gpu_hour if spec.usd_per_gpu_hour is not None else spec.hw.usd_per_gpu_hour
    usd = gpu_s * units.usd_per_hour_to_usd_per_s(price)
    pre = sum(r.prefill_time_s for r in runs)
    busy = pre + sum(r.decode_time_s for r in runs)
    share = pre / busy if busy else 0.0
    ms = 1e3
    return {
        "duration": duration, "completed": n, "total_input_tokens": int(tin), "total_output_tokens": int(tout),
        "request_throughput": n / duration if duration else 0.0,
        "output_throughput": tout / duration if duration else 0.0,
        "total_token_throughput": (tin + tout) / duration if duration else 0.0,
        "mean_ttft_ms": float(ttft.mean()) * ms, "median_ttft_ms": float(np.median(ttft)) * ms,
        "p99_ttft_ms": _pct(ttft, 99) * ms,
        "mean_tpot_ms": float(tpot.mean()) * ms if len(tpot) else 0.0,
        "median_tpot_ms": float(np.median(tpot)) * ms if len(tpot) else 0.0,
        "p99_tpot_ms": _pct(tpot, 99) * ms,
        "mean_itl_ms": itl * ms, "median_itl_ms": pooled_percentile(gap_s, gap_n, 50) * ms,
        "p99_itl_ms": pooled_percentile(gap_s, gap_n, 99) * ms, "mean_e2el_ms": float(e2el.mean()) * ms,
        "gpu_seconds": gpu_s, "usd": usd,
        "usd_per_mtok_input": units.usd_per_million(usd * share, tin) if tin else 0.0,
        "usd_per_mtok_output": units.usd_per_million(usd * (1 - share), tout) if tout else 0.0,
        "usd_per_mtok_blended": units.usd_per_million(usd, tin + tout) if tin + tout else 0.0,
        "preemptions": sum(r.preemptions for r in runs), "steps": sum(r.steps for r in runs),
        "cached_tokens": sum(r.cached_tokens for r in runs),
        "peak_running": max(r.peak_running for r in runs),
    } | _ttft_split(runs, send, first)


def _ttft_split(runs, send, first) -> dict:
    """The mean TTFT [ms] split where the runs kept when each request reached the engine: in the front end
    (its serial queue and cost per request, from the send) and in the engine (waiting for the pool or the token
    budget, then prefill, to the first token); empty where they did not (a disaggregated run)."""
    import numpy as np

    if any(r.engine_s is None for r in runs) or not len(send):
        return {}
    from kvcalc.out import units

    engine = np.concatenate([r.engine_s for r in runs])
    return {"mean_ttft_frontend_ms": units.s_to_ms(float((engine - send).mean())),
            "mean_ttft_engine_ms": units.s_to_ms(float((first - engine).mean()))}
