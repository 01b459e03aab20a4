"""``kvcalc bench``'s Result: one row in the names of vLLM's saved result (+ GPU-seconds and $ per M tokens), the
run's pool and limits as notes, and the step-time terms for --explain."""

from __future__ import annotations

import math

from kvcalc.out.results import Column, LazyLines, Result, Table
from kvcalc.out.units import fmt_ms
from kvcalc.serve.bench import BenchSpec, simulate_spec

COLUMNS = (
    Column("duration", "duration", "s"), Column("completed", "completed", "int"),
    Column("total_input_tokens", "input tokens", "int"), Column("total_output_tokens", "output tokens", "int"),
    Column("request_throughput", "req/s", "float"), Column("output_throughput", "output tok/s", "float"),
    Column("total_token_throughput", "total tok/s", "float"),
    Column("mean_ttft_ms", "mean TTFT ms", "float"), Column("median_ttft_ms", "median TTFT ms", "float"),
    Column("p99_ttft_ms", "P99 TTFT ms", "float"), Column("mean_tpot_ms", "mean TPOT ms", "float"),
    Column("median_tpot_ms", "median TPOT ms", "float"), Column("p99_tpot_ms", "P99 TPOT ms", "float"),
    Column("mean_itl_ms", "mean ITL ms", "float"), Column("median_itl_ms", "median ITL ms", "float"),
    Column("p99_itl_ms", "P99 ITL ms", "float"), Column("mean_e2el_ms", "mean E2EL ms", "float"),
    Column("gpu_seconds", "GPU-seconds", "float"), Column("usd_per_mtok_input", "$/M in", "usd"),
    Column("usd_per_mtok_output", "$/M out", "usd"), Column("usd_per_mtok_blended", "$/M blended", "usd"),
)


REPLICA_COLUMNS = (
    Column("replica", "replica", "text"), Column("requests", "requests", "int"),
    Column("input_tokens", "input tokens", "int"), Column("cached_tokens", "cached tokens", "int"),
    Column("hit_rate", "hit rate", "percent"), Column("load_share", "load share", "percent"),
    Column("mean_ttft_ms", "mean TTFT ms", "float"), Column("load_imbalance", "load imbalance", "float"),
)


def replica_rows(runs) -> list[dict]:
    """Per replica and ``all``: requests, prompt tokens [tokens], tokens read from the prefix cache [tokens], hit
    rate = cached / input, load share = the replica's share of the input, mean TTFT [ms] (None for a replica
    without requests); on ``all``, load imbalance = the busiest replica's input / the mean (1.0 = even)."""
    import numpy as np

    inputs = [int(np.sum(r.prompt)) for r in runs]
    total = sum(inputs)
    rows = []
    for i, (r, n_in) in enumerate(zip(runs, inputs)):
        ttft = (r.first_s - r.send_s) * 1e3
        rows.append({"replica": str(i), "requests": len(r.prompt), "input_tokens": n_in,
                     "cached_tokens": r.cached_tokens, "hit_rate": r.cached_tokens / n_in if n_in else 0.0,
                     "load_share": n_in / total if total else 0.0,
                     "mean_ttft_ms": float(np.mean(ttft)) if len(ttft) else None, "load_imbalance": None})
    cached = sum(r.cached_tokens for r in runs)
    ttft_all = np.concatenate([(r.first_s - r.send_s) * 1e3 for r in runs])
    mean = total / len(runs)
    rows.append({"replica": "all", "requests": len(ttft_all), "input_tokens": total, "cached_tokens": cached,
                 "hit_rate": cached / total if total else 0.0, "load_share": 1.0 if total else 0.0,
                 "mean_ttft_ms": float(np.mean(ttft_all)) if len(ttft_all) else None,
                 "load_imbalance": max(inputs) / mean if mean else 1.0})
    return rows


def bench_result(spec: BenchSpec, notes: tuple = ()) -> Result:
    """Simulate ``spec`` and build the Result every output format renders."""
    row, runs, sm, pool, sch = simulate_spec(spec)
    inputs = {"model": spec.model_name, "hardware": spec.hw_name, "calibration": spec.cal_name, "gpus": spec.gpus,
              "tp": spec.tp, "dp": spec.dp, "engine": spec.engine, "async_scheduling": spec.async_scheduling,
              "dataset": "trace" if spec.trace is not None else "random",
              "random_input_len": spec.input_len, "random_output_len": spec.output_len,
              "num_prompts": row["completed"],
              "request_rate": None if math.isinf(spec.request_rate) else spec.request_rate,
              "max_concurrency": spec.max_concurrency, "max_num_seqs": sch.max_num_seqs,
              "max_num_batched_tokens": sch.max_num_batched_tokens, "enable_prefix_caching": spec.prefix_caching,
              "shared_prefix_tokens": spec.shared_prefix_tokens, "shared_prefix_groups": spec.shared_prefix_groups,
              "seed": spec.seed, "kv_pool_blocks": pool.num_blocks, "block_size": pool.block_size,
              "compute_dtype": sm.math_dtype, "router": spec.router, "expert_parallel": spec.ep,
              "ep": spec.gpus if spec.ep else 1, "attention": "dp" if spec.ep and spec.dp > 1 else "tp"}
    main_row = {c.key: row[c.key] for c in COLUMNS}
    main_row |= {k: row[k] for k in ("preemptions", "steps", "cached_tokens", "peak_running", "failed",
                                     "mean_ttft_frontend_ms", "mean_ttft_engine_ms") if k in row}
    plural = "s" if spec.dp > 1 else ""
    refused = ([f"{row['failed']:,} trace requests longer than max_model_len "
                f"({spec.max_model_len or spec.model.max_context_tokens:,} tokens) are refused, as vLLM's server "
                f"refuses them (HTTP 400), and left out of every figure"] if row["failed"] else [])
    out_notes = refused + [
        f"predicted, not measured: {spec.engine} on {spec.tp} x {spec.hw_name} (x {spec.dp} "
        f"{'DP rank' if spec.ep else 'replica'}{plural}), calibration "
        f"{spec.cal_name} (presets/calibration; docs/serving-model.md shows its error on measured runs)",
        f"KV pool {pool.num_blocks:,} blocks of {pool.block_size} tokens per replica; limits {sch.max_num_batched_tokens:,} "
        f"batched tokens and {sch.max_num_seqs:,} sequences per step; {row['steps']:,} steps, {row['preemptions']:,} "
        f"preemptions, at most {row['peak_running']:,} running",
        f"matmuls in {sm.math_dtype} (the dtype {spec.hw_name} computes {spec.model_name}'s weights in)",
    ]
    if spec.ep:
        out_notes.append(
            f"expert parallel: {spec.model.moe_experts} experts over {spec.gpus} GPUs; "
            + (f"{spec.dp} DP ranks each run their own batch (DP attention, attention weights on every rank), "
               f"their MoE layers in lockstep taken as {spec.dp} x a rank's tokens; 2 all-to-alls per MoE layer over "
               f"{'the scale-out link' if spec.gpus > 8 else 'the scale-up link'}" if spec.dp > 1 else
               "one rank: the usual all-reduce sums the experts' outputs (no all-to-all)"))
    if spec.prefix_caching:
        out_notes.append(f"prefix caching: {row['cached_tokens']:,} prompt tokens read from the cache, not "
                         "prefilled (cached blocks are kept for the whole run and still counted in each request's "
                         "blocks)")
    extra = ()
    if spec.dp > 1:
        from kvcalc.out.units import fmt_percent

        reps = replica_rows(runs)
        extra = (Table("replicas", f"Per replica ({spec.router} routing)", REPLICA_COLUMNS, tuple(reps)),)
        how = _routing(spec)
        out_notes.append(f"replicas: {how}; " + "; ".join(
            f"{r['replica']}: {r['requests']:,} requests, {fmt_percent(r['hit_rate'])} of {r['input_tokens']:,} "
            f"input tokens cached, load share {fmt_percent(r['load_share'])}" for r in reps[:-1][:16])
            + ("; ..." if len(reps) > 17 else "") + f"; load imbalance {reps[-1]['load_imbalance']:.3f} "
            f"(busiest replica's input / the mean), {fmt_percent(reps[-1]['hit_rate'])} cached in all")
    return Result(command="bench", inputs=inputs,
                  main=Table("bench", "Predicted `vllm bench serve` result", COLUMNS, (main_row,)), extra=extra,
                  explain=LazyLines(lambda: explain_lines(sm, row, spec, sch)), notes=tuple(out_notes) + tuple(notes))


def _routing(spec: BenchSpec) -> str:
    """How the requests were spread over the replicas, in one clause (serve/cluster.py for the clock's rules)."""
    from kvcalc.serve.cluster import CLOCK_ROUTERS

    if spec.replica_of is None and spec.router in CLOCK_ROUTERS:
        rule = ("the fewest requests in flight" if spec.router == "least-loaded" else
                "the longest run of its leading blocks already prefilled in the replica's prefix cache, then the "
                "fewest requests in flight")
        return (f"{spec.router} routing on the serving clock: each request, at its send time, to the replica with "
                f"{rule} (ties: fewer prompt tokens in flight, then the lowest index)")
    if spec.replica_of is None:
        return "every dp-th request"
    return (f"{spec.router} routing, decided in send order without the clock (kvcalc trace --router's rule)")


def explain_lines(sm, row: dict, spec: BenchSpec, sch) -> list[str]:
    """The step time's terms with the numbers substituted, for a decode step and a full prefill step."""
    ctx = spec.input_len + spec.shared_prefix_tokens + spec.output_len // 2
    n = max(1, min(row["peak_running"], sch.max_num_seqs))
    lines = ["step time = max(compute, memory) + communication + overhead (kvcalc/serve/step_time.py)",
             f"  matmul efficiency eff(n) = {sm.eff_max:g} x n / (n + {sm.half_tokens:g}); HBM efficiency "
             f"{sm.hbm_eff:g}; peaks {sm.matmul_peak / 1e12:,.1f} TFLOP/s ({sm.math_dtype}) and "
             f"{sm.attn_peak / 1e12:,.1f} (bf16 attention) per GPU; HBM {sm.hbm_bytes_per_s / 1e12:g} TB/s"]
    if sm.sparse_heads:
        have, run = sm.sparse_heads
        lines.append(f"  sparse attention: FlashMLA's sparse kernels run each GPU's {have} query heads as {run} (their "
                     f"tile; x{run / have:g} the attention FLOPs), in the latent, in prefill"
                     + (" and decode" if spec.engine == "vllm" else ""))
    for what, tokens, seqs, sampled, attn, kv in (
            (f"decode step of {n} requests at context {ctx:,}", n, n, n,
             n * float(sm.decode_attention_flops(ctx + 1)), n * float(sm.kv_read_bytes(ctx + 1))),
            (f"prefill step of {sch.max_num_batched_tokens:,} tokens (one chunk from position 0)",
             sch.max_num_batched_tokens, 1, 1, sm.prefill_attention_flops(0, sch.max_num_batched_tokens),
             float(sm.kv_read_bytes(sch.max_num_batched_tokens)))):
        t = sm.terms(float(tokens), float(seqs), float(sampled), attn, kv)
        p = sm.compute_parts(float(tokens), float(sampled), attn)
        parts = ", ".join(f"{name} {fmt_ms(float(p[key]), '.3f')}" for name, key in (
            ("dense", "dense_s"), ("experts", "experts_s"), ("LM head", "head_s"), ("attention", "attention_s"))
            if key != "experts_s" or sm.experts)
        total = max(t["compute_s"], t["memory_s"]) + t["comm_s"] + t.get("ep_comm_s", 0.0) + t["overhead_s"]
        experts = (f"; experts touched {float(sm.distinct_experts(float(tokens) * sm.moe_token_scale)):.1f} of "
                   f"{sm.experts} per layer" if sm.experts else "")
        ep = f" (the experts' share / {sm.ep} EP GPUs x {sm.tp})" if sm.ep else ""
        lines += [f"{what}:",
                  f"  compute = 2 x ({sm.dense_params:.4g} dense + {sm.expert_active_params:.4g} expert) params x "
                  f"{tokens:,} tokens / eff + {attn:.4g} attention FLOP = {fmt_ms(t['compute_s'], '.3f')}"
                  f" ({parts})",
                  f"  memory = ({sm.dense_weight_bytes:.4g} + {sm.expert_weight_bytes:.4g} x touched share{ep}) B / "
                  f"{sm.tp} + {kv:.4g} B KV per GPU = {fmt_ms(t['memory_s'], '.3f')}{experts}",
                  f"  communication = {fmt_ms(t['comm_s'], '.3f')} ({sm.tp}-way TP, 2 all-reduces x {sm.layers} layers)"
                  + (f" + {fmt_ms(t['ep_comm_s'], '.3f')} (EP over {sm.a2a_ranks} GPUs, 2 all-to-alls x {sm.layers}"
                     " MoE layers)" if "ep_comm_s" in t else "") + ";"
                  f" overhead = {fmt_ms(t['overhead_s'], '.3f')}" + (
                      f" (of it the kernel floor, {sm.kernels_per_layer:g} kernels x {sm.layers} layers: "
                      f"{fmt_ms(sm.kernel_floor_s, '.3f')})" if sm.kernel_floor_s else "")
                  + ("; a CUDA graph replay: no engine step cost" if sm.graph_max_bs
                     and bool(sm.replays_graph(tokens, seqs)) else "")
                  + f" -> step {fmt_ms(total, '.3f')}"]
    return lines
