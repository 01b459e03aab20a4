"""``cost`` and ``compare`` with a prefill -> decode link (``--pd-link`` or a scenario's ``pd_link``) on the
serving model: A and C run disaggregated, on the path ``kvcalc plan --disagg`` simulates
(serve/plan_disagg.py), instead of colocated with the hand-off priced beside the run.

The split: the scenario's GPUs become P prefill engines and D decode engines of gpus / (P + D) GPUs each, every
engine one tensor-parallel group (``--pd-split P:D``, else the scenario's ``pd_split``, else half and half,
1:1). A split whose engines do not divide the GPUs, or whose engines cannot hold the model's weights and the
longest request, is refused (exit 2) rather than run on some other split.

The run, as vLLM's disaggregated serving behind its proxy (examples/online_serving/disaggregated_serving):
1. the prefill engines run every request with one output token, every P-th to each, sent at its time; C with
   prefix caching (its cached blocks skip the prefill), A without;
2. when its prefill ends the request's KV moves over the link as one copy per GPU, in parallel: latency + the
   GPU's share of the bytes / bandwidth (a latent is replicated, KV heads shard over TP). C's decode engines keep
   a prefix cache of the blocks handed to them, and the leading blocks a request's decode engine already holds
   when its prefill ends do not move: vLLM's NixlConnector on the decode side pulls only the prompt tokens
   beyond its local prefix-cache hit (``get_num_new_matched_tokens``: len(prompt) - num_computed_tokens; it
   reads into the request's unhashed blocks only, and a full local hit moves nothing). The fixed per-request
   state always moves. A moves every prompt token's KV;
3. request k goes to decode engine k mod D (round robin in request order, as the prefill engines split them:
   A and C meet the same engines), admitted when its KV has arrived; it computes only its last prompt token and
   generates every output token.

Figures: TTFT = the decode engine's first token - the send (the prefill queue and prefill, the hand-off, the
decode side's queue and first step); TPOT from the decode engines; wall = first send to last finish;
GPU-seconds = wall x every GPU of both sides; $/M input = the prefill engines' GPU-seconds x price / input
tokens, $/M output = the decode engines' / output tokens: each side pays for its own GPUs, idle or not.
KV fits is judged on a decode engine: its 1/D of the requests' KV against its per-GPU budget.
"""

from __future__ import annotations

from dataclasses import replace


def split_of(inp) -> tuple[int, int, int]:
    """(prefill engines, decode engines, GPUs per engine) of ``inp``'s split (InputError when the engines do not
    share the GPUs evenly)."""
    from kvcalc.out.errors import InputError

    p, d = inp.pd_split or (1, 1)
    if inp.gpus < p + d:
        raise InputError(f"{_named(inp)} {p}:{d}: {p + d} engines need at least {p + d} GPUs, not {inp.gpus:,}: "
                         "give more --gpus (or fewer engines)")
    if inp.gpus % (p + d):
        raise InputError(f"{_named(inp)} {p}:{d}: {p + d} engines cannot share {inp.gpus:,} GPUs evenly (each "
                         "engine gets gpus / (P + D) GPUs); give a --pd-split whose P + D divides --gpus, or other "
                         "--gpus")
    return p, d, inp.gpus // (p + d)


def _named(inp) -> str:
    src = inp.sources.get("pd_split", "")
    return "--pd-split" if src == "--pd-split" else (
        "the scenario's pd_split" if src.startswith("the scenario") else "--pd-split (default)")


def split_text(inp) -> str:
    """'1 prefill engine + 1 decode engine of 4 x h100-sxm each (4-way TP, --pd-split 1:1)' [text]."""
    p, d, tp = split_of(inp)
    return (f"{p} prefill engine{'s' * (p > 1)} + {d} decode engine{'s' * (d > 1)} of {tp} x {inp.hardware_name} "
            f"each ({tp}-way TP, --pd-split {p}:{d})")


def engine_inputs(inp):
    """``inp`` as one engine of the split sees it: gpus = its TP (the KV budget and pool per GPU follow)."""
    return replace(inp, gpus=split_of(inp)[2])


def refused(inp, why: str):
    """The InputError of a split whose engines cannot serve the requests (``why``: served.CannotServe's text)."""
    from kvcalc.out.errors import InputError

    p, d, tp = split_of(inp)
    return InputError(f"{_named(inp)} {p}:{d}: an engine of {tp} x {inp.hardware_name} cannot serve "
                      f"{inp.model_name}: {why}; give fewer engines (or more --gpus)")


def simulate(inp, spec):
    """Run one strategy's requests (``spec``: an engine's BenchSpec from served.spec_of on engine_inputs) through
    the split -> ((metrics, [Run], decode StepModel, decode Pool, Scheduling), plan_disagg.PdRun)."""
    from kvcalc.serve.bench import metrics, spec_step_model
    from kvcalc.serve.plan_disagg import run_pd

    p, d, tp = split_of(inp)
    pd = run_pd(spec, spec.trace, p, d, inp.pd_link, decode_cache=True)
    m = metrics([pd.run], replace(spec, tp=1, dp=tp * (p + d)))  # GPU time: every engine's GPUs
    sm = spec_step_model(pd.specs[1])
    if spec.kv_compression:
        sm = replace(sm, kv_scale=1.0 / spec.kv_compression)
    return (m, [pd.run], sm, pd.pool, pd.sch), pd


def row_fields(inp, row: dict, m: dict, groups, prompt, pd, budget: float) -> dict:
    """The figures a disaggregated run (``pd``: plan_disagg.PdRun) changes in a served row (``prompt``: its
    requests' prompt lengths [tokens]; ``budget``: an engine's KV budget per GPU [B]): dollars by side, KV fits
    on a decode engine, the KV handed over, the split [raw SI units]."""
    import numpy as np

    from kvcalc.memory.capacity import per_gpu_request_bytes
    from kvcalc.model.kv import request_bytes
    from kvcalc.out.units import usd_per_hour_to_usd_per_s, usd_per_million

    p, d, tp = split_of(inp)
    usd_per_s = usd_per_hour_to_usd_per_s(inp.usd_per_gpu_hour)
    prefill_usd = m["duration"] * p * tp * usd_per_s
    decode_usd = m["duration"] * d * tp * usd_per_s
    lengths, counts = np.unique(np.asarray(prompt), return_counts=True)  # ``prompt``: each request's [tokens]
    share = (sum(k * per_gpu_request_bytes(groups, int(t), tp) for t, k in zip(lengths, counts))
             / sum(k * request_bytes(groups, int(t)) for t, k in zip(lengths, counts)))
    kv_gpu = row["kv_stored_bytes"] * share / d
    return {
        "pd_split": f"{p}:{d}", "pd_prefill_gpus": p * tp, "pd_decode_gpus": d * tp, "pd_engine_tp": tp,
        "prefill_usd": prefill_usd, "decode_usd": decode_usd,
        "usd_per_mtok_input": usd_per_million(prefill_usd, row["input_tokens"]),
        "usd_per_mtok_output": usd_per_million(decode_usd, row["output_tokens"]) if row["output_tokens"] else None,
        "kv_stored_bytes_per_gpu": kv_gpu, "kv_budget_bytes_per_gpu": budget,
        "kv_spill_bytes_per_gpu": max(0.0, kv_gpu - budget), "kv_fits": kv_gpu <= budget,
        "kv_handoff_bytes": float(pd.moved_bytes.sum()), "pd_decode_held_tokens": int(pd.held_tokens.sum()),
    }


def handoff_row(row: dict, pd) -> dict:
    """The per-request hand-off times of the run, replacing move/handoff.py's closed form on the mean request
    (one copy per GPU of its share: the mean, the longest, and what a speculative prefetch behind the overlap
    window would leave exposed, on average) [s]."""
    import numpy as np

    from kvcalc.move.links import exposed_prefetch_s

    hand = np.asarray(pd.handoff_s, dtype=float)
    return {"pd_handoff_s_per_request": float(hand.mean()), "pd_handoff_max_s": float(hand.max()),
            "pd_exposed_s_per_request": float(np.mean(exposed_prefetch_s(hand, row["pd_overlap_s"])))}


def notes(inp, rows: list[dict]) -> list[str]:
    """What the disaggregated runs were [text lines]."""
    from kvcalc.out.units import fmt_bytes, fmt_seconds
    from kvcalc.serve import strategies

    out = [f"disaggregated: every request prefilled on a prefill engine (one output token), its KV handed over "
           f"{inp.pd_link_name} as one copy per GPU, then decoded on a decode engine: TTFT includes the prefill "
           "queue, the hand-off and the decode side's first step; $/M in pays the prefill GPUs, $/M out the decode "
           "GPUs (wall x GPUs each); split: " + inp.sources.get("pd_split", "")]
    for r in rows:
        if "pd_decode_held_tokens" not in r:
            continue
        held = (f"; the decode side already held {r['pd_decode_held_tokens']:,} prompt tokens' KV (a prefix cache "
                "of what it was handed: vLLM's NixlConnector pulls only the tokens beyond its local hit)"
                if r["strategy"] == "prefix-tree" else "")
        out.append(f"{strategies.STRATEGIES[r['strategy']]}: hand-off {fmt_bytes(r['pd_handoff_bytes_per_request'])}"
                   f" per request, {fmt_seconds(r['pd_handoff_s_per_request'])} on average (longest "
                   f"{fmt_seconds(r['pd_handoff_max_s'])}) inside TTFT{held}")
    return out


def explain(inp, row: dict) -> list[str]:
    """The split's dollars with the numbers substituted [text lines]."""
    from kvcalc.out.units import fmt_seconds, fmt_usd

    p, d, tp = split_of(inp)
    return [f"  disaggregated {p}:{d} of {tp} GPUs each: $ in = {fmt_seconds(row['wall_time_s'])} x {p * tp} "
            f"prefill GPUs x {fmt_usd(inp.usd_per_gpu_hour)}/h = {fmt_usd(row['prefill_usd'])}; $ out = "
            f"{fmt_seconds(row['wall_time_s'])} x {d * tp} decode GPUs x {fmt_usd(inp.usd_per_gpu_hour)}/h = "
            f"{fmt_usd(row['decode_usd'])}; busy: prefill engines {fmt_seconds(row['prefill_time_s'])}, decode "
            f"engines {fmt_seconds(row['decode_time_s'])}"]


def assumption(inp) -> dict:
    """The split as an assumption row."""
    p, d, tp = split_of(inp)
    return {"assumption": "pd_split", "value": f"{p}:{d} ({p} prefill + {d} decode x {tp} GPUs)",
            "source": inp.sources.get("pd_split", "")}
