"""``kvcalc plan``'s Result: the cheapest configurations (one row each, cheapest first, in bench's names), the
rejected families with why, the Pareto frontier of what was simulated, and a deployment hint per configuration
(the ``vllm serve`` flags the simulation assumed, and the ``kvcalc bench`` line that re-runs one replica)."""

from __future__ import annotations

import math

from kvcalc.out.results import Column, LazyLines, Result, Table
from kvcalc.out.units import fmt_ms
from kvcalc.serve.plan_search import Plan, frontier, row_key
from kvcalc.serve.plan_space import PLAN_SAMPLE, Targets, Traffic

COLUMNS = (
    Column("hardware", "hardware", "text"), Column("gpus", "GPUs", "int"), Column("tp", "TP", "int"),
    Column("dp", "DP", "int"), Column("ep", "EP", "int"), Column("disagg", "P:D", "text"),
    Column("decode_tp", "D TP", "int"), Column("replicas", "replicas", "int"), Column("usd_per_hour", "$/hour", "usd"), Column("usd_per_mtok_input", "$/M in", "usd"),
    Column("usd_per_mtok_output", "$/M out", "usd"), Column("usd_per_mtok_blended", "$/M blended", "usd"),
    Column("output_throughput_per_gpu", "out tok/s per GPU", "float"),
    Column("tokens_per_s_per_user", "tok/s per user", "float"),
    Column("median_ttft_ms", "p50 TTFT ms", "float"), Column("p99_ttft_ms", "p99 TTFT ms", "float"),
    Column("median_tpot_ms", "p50 TPOT ms", "float"), Column("p99_tpot_ms", "p99 TPOT ms", "float"),
    Column("kv_pool_tokens", "KV pool tok/engine", "int"), Column("hit_rate", "hit rate", "percent"),
    Column("lower_tier_hit_rate", "of it below HBM", "percent"),
)
REJECTED = (
    Column("hardware", "hardware", "text"), Column("tp", "TP", "int"), Column("dp", "DP", "int"),
    Column("ep", "EP", "int"), Column("disagg", "P:D", "text"), Column("decode_tp", "D TP", "int"),
    Column("reason", "fails on", "text"), Column("miss_ratio", "x target", "float"), Column("detail", "why", "text"),
)
FRONTIER = (
    Column("hardware", "hardware", "text"), Column("gpus", "GPUs", "int"), Column("tp", "TP", "int"),
    Column("dp", "DP", "int"), Column("ep", "EP", "int"), Column("disagg", "P:D", "text"),
    Column("decode_tp", "D TP", "int"), Column("replicas", "replicas", "int"), Column("tokens_per_s_per_user", "tok/s per user", "float"),
    Column("output_throughput_per_gpu", "out tok/s per GPU", "float"), Column("meets", "meets targets", "bool"),
)
X_AXIS = Column("tokens_per_s_per_user", "tok/s per user", "float")
Y_AXIS = Column("output_throughput_per_gpu", "output tok/s per GPU", "float")


def hint(row: dict, model_name: str, max_model_len: int) -> str:
    """The engine flags one replica of ``row`` assumes, as a ``vllm serve`` line (x replicas behind a router)."""
    from kvcalc.memory.engine_common import EngineInputs

    util = EngineInputs().gpu_memory_utilization
    dp = f" --data-parallel-size {row['dp']}" if row["dp"] > 1 else ""
    if row.get("ep", 1) > 1:
        dp += " --enable-expert-parallel"
    reps = f" (x {row['replicas']} replicas behind a router)" if row["replicas"] > 1 else ""
    line = (f"vllm serve {model_name} --tensor-parallel-size {row['tp']}{dp} --max-num-seqs {row['max_num_seqs']} "
            f"--max-num-batched-tokens {row['max_num_batched_tokens']} --max-model-len {max_model_len} "
            f"--gpu-memory-utilization {util:g}")
    if row["disagg"]:
        p, d = row["disagg"].rstrip("D").split("P:")
        sides = (f"{p} prefill + {d} decode instances" if row["decode_tp"] == row["tp"] else
                 f"{p} prefill instances + {d} decode instance{'s' if d != '1' else ''} with --tensor-parallel-size "
                 f"{row['decode_tp']}")
        return (f"{line} --kv-transfer-config '{{\"kv_connector\":\"NixlConnector\",\"kv_role\":\"kv_both\"}}' "
                f"on {sides} behind vLLM's disaggregated-serving proxy{reps}")
    return line + reps


def bench_line(spec, traffic: Traffic) -> str:
    """The ``kvcalc bench`` command that re-runs one replica's simulation (random dataset only)."""
    rate = "" if math.isinf(spec.request_rate) else f" --request-rate {spec.request_rate!r}"  # bench: inf
    parts = [f"kvcalc bench --model {spec.model_name} --hardware {spec.hw_name} --tp {spec.tp} --dp {spec.dp}",
             f"--random-input-len {spec.input_len} --random-output-len {spec.output_len}",
             f"--num-prompts {spec.num_prompts}{rate} --max-model-len {spec.max_model_len}"]
    if spec.max_concurrency:
        parts.append(f"--max-concurrency {spec.max_concurrency}")
    if spec.ep:
        parts.append("--enable-expert-parallel")
    if spec.prefix_caching:
        parts.append("--enable-prefix-caching")
    if spec.shared_prefix_tokens:
        parts.append(f"--shared-prefix {spec.shared_prefix_tokens}:{spec.shared_prefix_groups}")
    if spec.seed:
        parts.append(f"--seed {spec.seed}")
    return " ".join(parts)


def plan_result(plan: Plan, targets: Targets, traffic: Traffic, inputs: dict, notes: tuple = ()) -> Result:
    """The Result every format renders; the rows are the configurations found (empty when none meets)."""
    shown = plan.rows
    # the EP and decode-TP columns only where they can differ: an MoE model's search, a disaggregated one
    hidden = set() if any(r["ep"] > 1 for r in plan.simulated + plan.rejected) else {"ep"}
    if not any(r["disagg"] for r in plan.simulated + plan.rejected):
        hidden.add("decode_tp")
    if not inputs.get("tiers"):
        hidden.add("lower_tier_hit_rate")

    def shown_columns(cols):
        return tuple(c for c in cols if c.key not in hidden)
    ep = "" if "ep" in hidden else " x EP"
    out_notes = [f"searched {plan.enumerated:,} candidates ({plan.families} hardware x TP x DP{ep} families x "
                 f"replicas up to {inputs['max_gpus']} GPUs): {plan.bound_pruned:,} pruned by a lower bound "
                 f"(memory, TPOT or TTFT) before any simulation, {plan.simulations:,} simulated, the rest not "
                 "needed (dearer than the answers)" + (f"; {plan.unprobed:,} of the families were never simulated "
                                                       "(even their cheapest configuration costs more than the "
                                                       "answers)" if plan.unprobed else ""),
                 "predicted, not measured: each configuration is the bench core's simulation (kvcalc bench) of its "
                 "replicas; docs/serving-model.md shows that model's error on measured runs"]
    if traffic.split is None and traffic.finite_rate and inputs["num_prompts"] > PLAN_SAMPLE:
        out_notes.append(f"at a finite rate the search simulates at most the first {PLAN_SAMPLE:,} requests of each "
                         f"engine's share of the {inputs['num_prompts']:,} prompts (a longer run only waits longer, "
                         f"so a sample that misses rejects); {plan.verified:,} configuration(s) that met the targets "
                         f"on it were re-simulated with their whole share, {plan.unverified:,} of them then missed "
                         "and are not answers; every deployment shown is a whole-share run (its bench line re-runs it)")
    max_len = inputs["max_model_len"]
    for i, row in enumerate(shown, 1):
        out_notes.append(f"deploy #{i}: {hint(row, inputs['model'], max_len)}")
        sp = plan.specs.get(row_key(row))
        if traffic.split is None and sp and not row["disagg"]:
            out_notes.append(f"check #{i} (one replica): {bench_line(sp[0], traffic)}")
    out_notes += list(notes)
    rows = tuple({k: v for k, v in r.items() if k not in ("meets", "ttft_ratio", "tpot_ratio")} for r in shown)
    extra = [Table("rejected", f"Families that cannot meet the targets (hardware x TP x DP{ep}, any replicas)",
                   shown_columns(REJECTED), tuple(sorted(plan.rejected, key=lambda r: (r["hardware"], r["tp"], r["dp"],
                                                                     r["disagg"] or "", r["ep"],
                                                                     r["decode_tp"] or 0))))
             ] if plan.rejected else []
    front = frontier(plan.simulated)
    extra.append(Table("frontier", "Pareto frontier of the simulated configurations (tok/s per user vs output "
                       "tok/s per GPU)", shown_columns(FRONTIER), tuple(front)))
    return Result(command="plan", inputs=inputs,
                  main=Table("plan", f"Cheapest deployments meeting p99 TTFT <= {fmt_ms(targets.ttft_p99_s, 'g')} and "
                             f"p99 TPOT <= {fmt_ms(targets.tpot_p99_s, 'g')}", shown_columns(COLUMNS), rows),
                  extra=tuple(extra), explain=LazyLines(lambda: explain_lines(plan, targets)),
                  notes=tuple(out_notes))


def explain_lines(plan: Plan, targets: Targets) -> list[str]:
    """How the search decided, family by family."""
    lines = ["bounds before simulating (kvcalc/serve/plan_space.py): memory = the engine's KV pool (vLLM's sizing, "
             "memory/engine_vllm.py) must hold the longest request; TPOT >= one step of one decode token with no KV "
             "read (weights / (HBM x efficiency) + communication + fixed costs); TTFT >= front end + the request's "
             "own uncached prefill as one step + a fixed cost per further chunk",
             f"targets: p99 TTFT <= {fmt_ms(targets.ttft_p99_s, 'g')}, p99 TPOT <= {fmt_ms(targets.tpot_p99_s, 'g')}"]
    for r in plan.rejected:
        ratio = "" if r["miss_ratio"] is None else f"; {r['miss_ratio']:.3g}x the target"
        pd = _pd_words(r)
        lines.append(f"  {r['hardware']} tp {r['tp']} dp {r['dp']}{pd}: {r['reason']} ({r['detail']}{ratio})")
    for r in sorted(plan.simulated, key=lambda r: (r["usd_per_hour"], r["hardware"], r["tp"], r["dp"])):
        verdict = "meets" if r["meets"] else "misses"
        pd = _pd_words(r)
        lines.append(f"  simulated {r['hardware']} tp {r['tp']} dp {r['dp']}{pd} x {r['replicas']}: ${r['usd_per_hour']:,.2f}"
                     f"/h, p99 TTFT {r['p99_ttft_ms']:,.1f} ms, p99 TPOT {r['p99_tpot_ms']:,.2f} ms: {verdict}")
    return lines


def _pd_words(r: dict) -> str:
    """" 2P:1D (decode tp 4) ep 8" for the explain lines: what sets a family apart beyond hardware, tp and dp."""
    pd = f" {r['disagg']}" if r["disagg"] else ""
    if r["disagg"] and r["decode_tp"] != r["tp"]:
        pd += f" (decode tp {r['decode_tp']})"
    return pd + (f" ep {r['ep']}" if r["ep"] > 1 else "")


def miss_line(plan: Plan, targets: Targets, max_gpus: int) -> str:
    """The one line of an impossible plan: the closest configuration and what it misses by."""
    head = (f"plan: no configuration within {max_gpus} GPUs meets p99 TTFT <= {fmt_ms(targets.ttft_p99_s, 'g')} and "
            f"p99 TPOT <= {fmt_ms(targets.tpot_p99_s, 'g')}")
    c = plan.closest
    if c is not None:
        misses = []
        if c["ttft_ratio"] > 1:
            misses.append(f"p99 TTFT {c['p99_ttft_ms']:,.1f} ms ({c['ttft_ratio']:.3g}x the target)")
        if c["tpot_ratio"] > 1:
            misses.append(f"p99 TPOT {c['p99_tpot_ms']:,.2f} ms ({c['tpot_ratio']:.3g}x the target)")
        plural = "s" if c["replicas"] > 1 else ""
        ep = f", ep {c['ep']}" if c["ep"] > 1 else ""
        return (f"{head}; closest: {c['gpus']} x {c['hardware']} (tp {c['tp']}, dp {c['dp']}{ep}, {c['replicas']} "
                f"replica{plural}) misses by {', '.join(misses)}")
    if plan.rejected:
        r = min(plan.rejected, key=lambda r: (r["miss_ratio"] is None, r["miss_ratio"] or 0.0))
        ratio = "" if r["miss_ratio"] is None else f" ({r['miss_ratio']:.3g}x the target)"
        ep = f" ep {r['ep']}" if r["ep"] > 1 else ""
        return f"{head}; closest: {r['hardware']} tp {r['tp']} dp {r['dp']}{ep} fails on {r['reason']}: {r['detail']}{ratio}"
    return head + "; no candidate fits --max-gpus"


def frontier_chart(plan: Plan, width: int = 72) -> str:
    """The Pareto frontier of the simulated configurations as a terminal chart, the chosen one marked."""
    from kvcalc.out.chart_text import line_chart

    front = frontier(plan.simulated)
    data = [("Pareto frontier (simulated configurations)", [r["tokens_per_s_per_user"] for r in front],
             [r["output_throughput_per_gpu"] for r in front])]
    if plan.rows:
        c = plan.rows[0]
        ep = f" ep {c['ep']}" if c["ep"] > 1 else ""
        data.append((f"chosen: {c['gpus']} x {c['hardware']}, tp {c['tp']} dp {c['dp']}{ep} x {c['replicas']}",
                     [c["tokens_per_s_per_user"]], [c["output_throughput_per_gpu"]]))
    return line_chart(data, X_AXIS, Y_AXIS, width=width, title="Throughput per GPU vs tokens/s per user")
