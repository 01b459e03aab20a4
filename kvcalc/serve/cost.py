"""One strategy on one scenario: prefill tokens and FLOPs, TTFT, KV held, decode speed, GPU time and $/M tokens.

TTFT: the concurrent requests all arrive together; by default the node is processor-shared among the requests
still prefilling, so no request waits longer than the batch takes (FCFS and the article's even split are
options; :mod:`kvcalc.serve.ttft`).
KV held: every request's KV minus what its cached prefix provides, layer group by layer group, plus the prefix
cache's own copy where it is held beside the requests (:mod:`kvcalc.serve.sharing`).
Decode: every request decodes at ``decode_tokens_per_s`` (given) or at the roofline step rate
max(FLOPs / (gpus x peak x MFU_decode), bytes read / (gpus x HBM bandwidth x utilisation)) for the whole batch.
Cost: node $/s x time; $ per M input tokens = prefill $ / input tokens; per M output = decode $ / output tokens.
Break-even bandwidth: paged KV bytes per token / prefill seconds per token; a link faster than this makes
loading a reused token's KV cheaper than recomputing it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from kvcalc.memory.blocks import paged_bytes_per_token
from kvcalc.memory.capacity import per_gpu_request_bytes
from kvcalc.model import attention as att
from kvcalc.model.kv import read_bytes, request_bytes
from kvcalc.model.schema import HardwarePreset, LinkPreset, ModelPreset
from kvcalc.model.workload_schema import WorkloadPreset
from kvcalc.move.links import breakeven_bandwidth_bytes_per_s
from kvcalc.out.units import SECONDS_PER_HOUR, usd_per_hour_to_usd_per_s, usd_per_million
from kvcalc.serve import compute, served, sharing, strategies
from kvcalc.serve.ttft import TTFT_MODELS, ttft_by_slice


@dataclass(frozen=True)
class CostInputs:
    """A resolved scenario: presets plus every assumption, each with where it came from."""

    model_name: str
    model: ModelPreset
    hardware_name: str
    hardware: HardwarePreset
    gpus: int
    workload_name: str
    workload: WorkloadPreset
    usd_per_gpu_hour: float
    peak_flops_per_gpu: float
    mfu_prefill: float
    attention_flops: bool
    decode_tokens_per_s: Optional[float]
    mfu_decode: float = 0.5
    hbm_bandwidth_utilization: float = 0.9
    hbm_utilization: float = 0.9
    warm: bool = False
    kv_options: att.KvOptions = att.KvOptions()
    sources: dict = field(default_factory=dict)
    pd_link_name: Optional[str] = None   # prefill -> decode link (disaggregated serving)
    pd_link: Optional[LinkPreset] = None
    pd_overlap_s: Optional[float] = None
    workload_title: Optional[str] = None  # replaces workload.display_name (e.g. a replayed trace's)
    engine: str = "ideal"                 # KV budget: ideal, or what vLLM/SGLang allocate (memory/engine_*.py)
    engine_inputs: Optional[object] = None  # an EngineInputs: --engine-input values read from a log (else estimated)
    ttft_model: str = "processor-sharing"  # processor-sharing | fcfs | even-split (serve/ttft.py)
    scenario_name: str = ""               # the scenario the assumptions come from (named in the assumptions)
    decode_model: str = "stated"          # stated: decode_tokens_per_s and MFU; serving: serve/served.py's run
    kv_compression: Optional[float] = None  # the article's section-11 what-if: KV stored, read, moved / FACTOR
    pd_split: Optional[tuple] = None       # with a pd_link on the serving model: (prefill, decode) engines


def kv_budget_bytes_per_gpu(inp: CostInputs, groups) -> float:
    """The KV budget of one GPU [B]: device memory (as CUDA reports it where the preset says; the article's
    scenario keeps its stated datasheet GB) x utilisation - weights / GPUs (ideal), or the engine's KV pool
    (blocks x block bytes) with its inputs estimated from the presets (``kvcalc capacity --engine`` walks it)."""
    if inp.engine == "ideal":
        return max(0.0, inp.hardware.device_memory_bytes * inp.hbm_utilization - inp.model.weight_bytes / inp.gpus)
    from kvcalc.memory.engine_report import pool_bytes_per_gpu

    return pool_bytes_per_gpu(inp.engine, inp.model, inp.kv_options, inp.hardware, inp.gpus, inp.engine_inputs)


def roofline_decode_tokens_per_s(inp: CostInputs, groups, mix: strategies.RequestMix) -> float:
    """Per-request decode rate of all requests decoding as one batch, at mid-generation [tok/s]."""
    m, hw = inp.model, inp.hardware
    n = sum(s.count for s in mix.slices)
    flops = n * 2.0 * m.params_active
    weights_read = min(m.params_total, n * m.params_active) * m.mean_weight_bytes_per_param
    kv_read = sum(s.count * read_bytes(groups, s.context_tokens + s.output_tokens // 2) for s in mix.slices)
    if inp.kv_compression:  # the section-11 what-if: every step reads 1 / FACTOR of the KV
        kv_read /= inp.kv_compression
    t_compute, t_memory = compute.decode_step_s(flops, weights_read + kv_read, inp.gpus, inp.peak_flops_per_gpu,
                                                inp.mfu_decode, hw.hbm_bandwidth_bytes_per_s,
                                                inp.hbm_bandwidth_utilization)
    return 1.0 / max(t_compute, t_memory)


def strategy_row(inp: CostInputs, strategy: str, mix: strategies.RequestMix | None = None
                 ) -> tuple[dict, list[dict]]:
    """The raw figures of one strategy -> (row, per-class rows). ``mix`` defaults to the workload's."""
    return _strategy(inp, strategy, mix)[:2]


def _strategy(inp: CostInputs, strategy: str, mix: strategies.RequestMix | None = None, prior=None, given=None):
    """:func:`strategy_row` + what the serving model's run was (None on the stated path) -> (row, classes, info).
    The serving model runs the workload's own requests, or ``given`` (served.GivenRequests: a trace's, whose
    replay gave ``mix``); a ``mix`` without them keeps the stated path. ``prior``: A's serving-model info on the
    same inputs (C reuses its run when nothing is shared)."""
    served = inp.decode_model == "serving" and (mix is None or given is not None)
    groups = att.resolve_groups(inp.model, inp.kv_options)
    mix = mix or strategies.workload_mix(inp.workload, strategy, inp.warm)
    sl = mix.slices
    n = sum(s.count for s in sl)
    input_tokens = sum(s.count * s.context_tokens for s in sl)
    output_tokens = sum(s.count * s.output_tokens for s in sl)
    reused = sum(s.count * s.cached_tokens for s in sl)
    flops_each = [compute.prefill_flops(inp.model, groups, s.cached_tokens, s.context_tokens - s.cached_tokens,
                                        inp.attention_flops) for s in sl]
    flops = sum(f * s.count for f, s in zip(flops_each, sl))
    node_flops_per_s = inp.gpus * inp.peak_flops_per_gpu * inp.mfu_prefill
    prefill_s = flops / node_flops_per_s
    rank = {label: i for i, label in enumerate(mix.labels)}
    order = sorted(range(len(sl)), key=lambda k: (rank[sl[k].label], sl[k].cached_tokens))
    ttfts = ttft_by_slice(flops_each, [s.count for s in sl], order, node_flops_per_s, inp.ttft_model)
    ttft_sum = {label: 0.0 for label in mix.labels}
    ttft_n = {label: 0 for label in mix.labels}
    for (t_sum, _), s in zip(ttfts, sl):
        ttft_sum[s.label] += t_sum
        ttft_n[s.label] += s.count

    paged = sum(paged_bytes_per_token(g) for g in groups)
    kv_all = sum(s.count * request_bytes(groups, s.context_tokens) for s in sl)
    saved = sum(s.count * sharing.shared_bytes(groups, s.context_tokens, s.cached_tokens) for s in sl)
    prefix_bytes = (sharing.segment_bytes(groups, mix.segments) if mix.segments
                    else mix.prefix_cache_tokens * paged)
    extra_bytes = prefix_bytes * mix.extra_cache_tokens / mix.prefix_cache_tokens if mix.prefix_cache_tokens else 0.0
    kvs = 1.0 / inp.kv_compression if inp.kv_compression else 1.0  # the section-11 what-if, else 1
    kv_stored = (kv_all - saved + extra_bytes) * kvs
    share = sum(s.count * per_gpu_request_bytes(groups, s.context_tokens, inp.gpus) for s in sl) / kv_all
    budget_gpu = kv_budget_bytes_per_gpu(inp, groups)
    kv_gpu = kv_stored * share
    roof = roofline_decode_tokens_per_s(inp, groups, mix) if groups[0].kind != "flat" else None
    tps = inp.decode_tokens_per_s if inp.decode_tokens_per_s is not None else roof
    decode_s = output_tokens / (tps * n)
    node_usd_per_s = inp.gpus * usd_per_hour_to_usd_per_s(inp.usd_per_gpu_hour)
    prefill_usd, decode_usd = prefill_s * node_usd_per_s, decode_s * node_usd_per_s
    per_token_s = compute.prefill_s_per_token(inp.model, inp.gpus, inp.peak_flops_per_gpu, inp.mfu_prefill)
    row = {
        "strategy": strategy, "model": inp.model_name, "hardware": inp.hardware_name, "gpus": inp.gpus,
        "workload": inp.workload_name, "requests": n, "input_tokens": input_tokens, "output_tokens": output_tokens,
        "prefill_tokens": input_tokens - reused, "reused_tokens": reused, "hit_rate": reused / input_tokens,
        "prefill_flops": flops, "prefill_time_s": prefill_s,
        "ttft_mean_s": sum(ttft_sum.values()) / n,
        "ttft_max_s": max(t_max for _, t_max in ttfts),
        "kv_stored_bytes": kv_stored, "prefix_cache_bytes": prefix_bytes * kvs,
        "kv_stored_bytes_per_gpu": kv_gpu, "kv_budget_bytes_per_gpu": budget_gpu,
        "kv_spill_bytes_per_gpu": max(0.0, kv_gpu - budget_gpu), "kv_fits": kv_gpu <= budget_gpu,
        "decode_tokens_per_s": tps, "decode_tokens_per_s_roofline": roof,
        "decode_tokens_per_s_total": tps * n, "decode_time_s": decode_s,
        "gpu_seconds": (prefill_s + decode_s) * inp.gpus,
        "prefill_usd": prefill_usd, "decode_usd": decode_usd,
        "usd_per_mtok_input": usd_per_million(prefill_usd, input_tokens),
        "usd_per_mtok_output": usd_per_million(decode_usd, output_tokens) if output_tokens else None,
        "usd_per_mtok_blended": usd_per_million(prefill_usd + decode_usd, input_tokens + output_tokens),
        "breakeven_bandwidth_bytes_per_s": breakeven_bandwidth_bytes_per_s(paged * kvs, per_token_s),
        "kv_handoff_bytes": (kv_all - saved) * kvs,
    }
    class_rows = [{"strategy": strategy, "class": label, "requests": ttft_n[label],
                   "ttft_mean_s": ttft_sum[label] / ttft_n[label]} for label in mix.labels if ttft_n[label]]
    info = None
    if served:
        from kvcalc.serve.served import CannotServe, served_row

        try:
            row, class_rows, info = served_row(inp, strategy, row, groups, budget_gpu, prior, given,
                                               kv_budget_bytes_per_gpu)
        except CannotServe as e:  # the stated closed forms, labelled as such (see _notes)
            row["serving_model_skipped"] = str(e)
    if inp.pd_link is not None:
        from kvcalc.move.handoff import handoff_fields

        row |= handoff_fields(row, inp.pd_link_name, inp.pd_link, inp.pd_overlap_s)
        if info is not None and info["pd"] is not None:  # the run's own hand-offs (serve/served_pd.py)
            from kvcalc.serve.served_pd import handoff_row

            row |= handoff_row(row, info["pd"])
    return row, class_rows, info


COST_COLUMNS = (
    ("strategy", "strategy", "text"), ("prefill_tokens", "prefill tokens", "int"),
    ("hit_rate", "hit rate", "percent"), ("prefill_flops", "prefill FLOPs", "flops"),
    ("prefill_time_s", "prefill", "s"), ("kv_stored_bytes", "KV held", "bytes"),
    ("kv_fits", "fits", "bool"),  # the KV held within the per-GPU budget (HBM after weights, or the engine's pool)
    ("usd_per_mtok_input", "$/M in", "usd"), ("usd_per_mtok_output", "$/M out", "usd"),
    ("usd_per_mtok_blended", "$/M blended", "usd"),
)
# compare's table: the strategy labels are long ("A lru (no prefix reuse)"), so $/M in and out stay in the C - A
# table below it (and in JSON/CSV), keeping the table within 120 columns
COMPARE_COLUMNS = tuple(c for c in COST_COLUMNS if c[0] not in ("usd_per_mtok_input", "usd_per_mtok_output"))
DELTA_KEYS = ("prefill_tokens", "reused_tokens", "prefill_flops", "prefill_time_s", "ttft_mean_s", "ttft_max_s",
              "kv_stored_bytes", "gpu_seconds", "usd_per_mtok_input", "usd_per_mtok_output", "usd_per_mtok_blended")
DELTA_KINDS = {"prefill_tokens": "int", "reused_tokens": "int", "prefill_flops": "flops", "kv_stored_bytes": "bytes",
               "gpu_seconds": "float", "output_throughput_tokens_per_s": "float"}


STATED_ONLY = ("peak_flops_per_gpu", "mfu_prefill", "decode_tokens_per_s", "ttft")  # unused by the serving model


def assumptions(inp: CostInputs, served_info=None) -> list[dict]:
    """Every assumption of the scenario with its value (raw) and where it came from; ``served_info`` (the serving
    model's run) replaces the stated rates with the run's own."""
    if served_info:
        return [a for a in assumptions(inp) if a["assumption"] not in STATED_ONLY] + served.assumptions(
            inp, served_info)
    s = inp.sources
    return [
        {"assumption": "scenario", "value": inp.scenario_name or "given inputs",
         "source": s.get("scenario", "the scenario preset's assumptions, with the command line's overrides")},
        {"assumption": "model", "value": inp.model_name, "source": inp.model.source},
        {"assumption": "hardware", "value": f"{inp.gpus} x {inp.hardware_name}", "source": inp.hardware.source},
        {"assumption": "workload", "value": inp.workload_name, "source": s.get("workload", inp.workload.source)},
        {"assumption": "peak_flops_per_gpu", "value": inp.peak_flops_per_gpu, "kind": "flops_per_s",
         "source": s.get("peak", "")},
        {"assumption": "mfu_prefill", "value": inp.mfu_prefill, "kind": "float", "source": s.get("mfu", "")},
        {"assumption": "attention_flops", "value": inp.attention_flops,
         "source": s.get("attention", "on: 2 x layers x q_heads x (d_qk + d_v) per attended token pair")},
        {"assumption": "decode_tokens_per_s", "value": inp.decode_tokens_per_s, "kind": "tokens_per_s",
         "source": s.get("decode", "")},
        {"assumption": "usd_per_gpu_hour", "value": inp.usd_per_gpu_hour, "kind": "usd", "source": s.get("price", "")},
        {"assumption": "prefix_cache", "value": "warm" if inp.warm else "cold",
         "source": s.get("prefix_cache", "cold: each shared segment prefilled once per group; warm: never")},
        {"assumption": "pd_link", "value": inp.pd_link_name or "none (colocated)",
         "source": s.get("pd", "prefill and decode share the GPUs: no KV hand-off")},
        {"assumption": "ttft", "value": inp.ttft_model,
         "source": s.get("ttft", TTFT_MODELS.get(inp.ttft_model, ""))},
    ]


def _pd_tables(inp: CostInputs, rows: list[dict]) -> tuple:
    """The disaggregation table when the scenario names a prefill -> decode link, else nothing."""
    if inp.pd_link is None:
        return ()
    from kvcalc.move.handoff import pd_table

    if "pd_handoff_max_s" in rows[0]:  # simulated disaggregated (serve/served_pd.py)
        return (pd_table(rows, "simulated: one copy per GPU after each prefill, inside TTFT; prefill = the prefill "
                         "engines' busy time, summed; exposed = what a prefetch would leave"),)
    return (pd_table(rows),)


def _workload_title(inp: CostInputs) -> str:
    """The workload's display name (a trace's title when the trace replaced the workload)."""
    return inp.workload_title or inp.workload.display_name


def _inputs_echo(inp: CostInputs, served_info=None) -> dict:
    """The JSON inputs: every scenario value (the stated rates too, unused on the serving model, so the keys stay
    the same) plus the serving model's own."""
    extra = served.assumptions(inp, served_info) if served_info else []
    return {a["assumption"]: a["value"] for a in assumptions(inp) + extra} | {
        "gpus": inp.gpus, "hardware": inp.hardware_name}


def _assumption_table(inp: CostInputs, served_info=None):
    from kvcalc.out.results import Column, Table

    return Table("assumptions", "Assumptions and where they come from",
                 (Column("assumption", "assumption", "text"), Column("value", "value", "auto"),
                  Column("source", "source", "text")),
                 tuple({"kind": "text", **a} for a in assumptions(inp, served_info)))


def _notes(inp: CostInputs, rows: list[dict], infos: list | None = None) -> list[str]:
    from kvcalc.model.kv import context_notes
    from kvcalc.out.units import fmt_bytes

    notes = context_notes(inp.model_name, inp.model, [c.context_tokens for c in inp.workload.classes])
    if infos:
        notes += served.notes(inp, rows, infos)
    elif inp.decode_model == "stated" and inp.sources.get("decode_model") and inp.scenario_name != "article":
        notes.append(f"decode at {inp.sources['decode_model']}, not the serving model")
    for r in rows[:1]:
        if r.get("serving_model_skipped"):
            notes.append(f"the serving model cannot run this ({r['serving_model_skipped']}): the figures are the "
                         "stated closed forms (decode at the scenario's stated rate, every request at once)")
    for r in rows:
        if not r["kv_fits"] and infos:
            notes.append(f"{strategies.STRATEGIES[r['strategy']]}: KV of all requests at once "
                         f"({fmt_bytes(r['kv_stored_bytes_per_gpu'])} per GPU) exceeds the budget "
                         f"({fmt_bytes(r['kv_budget_bytes_per_gpu'])} per GPU): the scheduler queues and preempts")
        elif not r["kv_fits"]:
            notes.append(f"{strategies.STRATEGIES[r['strategy']]}: KV ({fmt_bytes(r['kv_stored_bytes_per_gpu'])} per GPU) exceeds the "
                         f"{'HBM' if inp.engine == 'ideal' else inp.engine + ' KV pool'} budget ({fmt_bytes(r['kv_budget_bytes_per_gpu'])} per GPU): "
                         f"{fmt_bytes(r['kv_spill_bytes_per_gpu'])} per GPU spills to DRAM/SSD")
    if inp.engine != "ideal":
        notes.append(f"KV budget = the {inp.engine} KV pool with its inputs "
                     f"{'from --engine-input, the rest ' if inp.engine_inputs is not None else ''}"
                     "estimated from the presets (kvcalc capacity --engine walks it term by term)")
    m = inp.model
    if m.as_stated_kv_bytes_per_token is not None:
        notes.append("the model is an as-stated flat figure: no attention FLOPs, no roofline decode")
    elif inp.attention_flops and not (m.q_heads and m.qk_head_dim and m.v_head_dim):
        notes.append(f"{inp.model_name}: no q_heads/qk_head_dim/v_head_dim in the model file: attention FLOPs "
                     "are left out of prefill")
    if not compute.embedding_params(m)[1] and m.as_stated_kv_bytes_per_token is None:
        notes.append(f"{inp.model_name}: no vocab_size/hidden_size in the model file: prefill counts every active "
                     "parameter per token (the input embedding and LM head are not separated)")
    return notes


def _explain(inp: CostInputs, rows: list[dict], infos: list | None = None) -> list[str]:
    from kvcalc.out.units import fmt_count, fmt_flops, fmt_rate, fmt_seconds, fmt_usd

    if infos:
        return served.explain(inp, rows, infos)
    node = inp.gpus * inp.peak_flops_per_gpu * inp.mfu_prefill
    head = compute.embedding_params(inp.model)[1]
    out = [f"node compute = {inp.gpus} x {fmt_rate(inp.peak_flops_per_gpu, 'FLOP/s')} x MFU {inp.mfu_prefill:g} "
           f"= {fmt_rate(node, 'FLOP/s')}"]
    for r in rows:
        out += [
            f"{dict(strategies.LABELS)[r['strategy']]}: prefill tokens = {fmt_count(r['input_tokens'])} - {fmt_count(r['reused_tokens'])} "
            f"reused = {fmt_count(r['prefill_tokens'])}",
            f"  prefill FLOPs = 2 x {fmt_count(compute.per_token_matmul_params(inp.model))} x "
            f"{fmt_count(r['prefill_tokens'])}"
            + (f" + 2 x {fmt_count(head)} LM head x {fmt_count(r['requests'])} requests" if head else "")
            + (" + attention" if inp.attention_flops else "") + f" = {fmt_flops(r['prefill_flops'])}; "
            f"time = {fmt_flops(r['prefill_flops'])} / {fmt_rate(node, 'FLOP/s')} = {fmt_seconds(r['prefill_time_s'])}",
            f"  decode = {fmt_rate(r['decode_tokens_per_s'], 'tok/s')} x {fmt_count(r['requests'])} requests = "
            f"{fmt_count(r['decode_tokens_per_s_total'])} tok/s; $/M out = "
            f"{fmt_usd(inp.gpus * inp.usd_per_gpu_hour)}/h / "
            f"{fmt_count(r['decode_tokens_per_s_total'] * SECONDS_PER_HOUR)} tok/h x 1e6 = "
            f"{fmt_usd(r['usd_per_mtok_output'])}",
        ]
    if inp.model_name == "deepseek-v4-flash-article" or inp.model.as_stated_kv_bytes_per_token is not None:
        out += [
            "article check: TTFT of a 2K request is 2,000 x 26 GFLOP / (16 PFLOP/s / 100) = 0.325 s, not 3.25 ms.",
            "article check: 2 MB of KV for 100 requests uses 6.3 B/token; the real V4 Flash holds ~1.4 GB "
            "(+ ~1.2 GB compressor state): see the v4-flash-8xh100 scenario.",
            "article check: its blended $6-7 vs $4.5-5.5 cannot come from its inputs: at its own prefill times "
            "prefill is < 1% of the decode cost.",
        ]
    return out


def fit_title(rows: list[dict], served_info=None) -> str:
    """What a table's title adds when a strategy's KV does not fit its budget [text] (also in a note after it);
    on the serving model the requests that do not fit wait in the scheduler's queue."""
    over = [dict(strategies.LABELS)[r["strategy"]] for r in rows if not r["kv_fits"]]
    then = "requests queue for the KV pool" if served_info else "it spills to DRAM/SSD"
    return f": KV does not fit for {' and '.join(over)}, {then}" if over else ""


def _ttft_title(inp: CostInputs, served_info) -> str:
    return "the scheduler's run" if served_info else inp.ttft_model


def cost_result(inp: CostInputs, strategy: str):
    """The ``kvcalc cost`` result: one strategy, per-class TTFT, assumptions."""
    from kvcalc.out.results import Column, LazyLines, Result, Table

    row, classes, info = _strategy(inp, strategy)
    infos = [info] if info else []
    cols = served.SERVED_COST_COLUMNS if info else tuple(c for c in COST_COLUMNS if c[0] != "strategy")
    main = Table("cost", f"{strategies.STRATEGIES[strategy]} on {_workload_title(inp)}{fit_title([row], info)}",
                 tuple(Column(*c) for c in cols), (row,))  # the strategy is named in the title
    return strategies.labelled(Result(
        "cost", _inputs_echo(inp, info) | {"strategy": strategy}, main,
        (_class_table(classes, _ttft_title(inp, info)), *_pd_tables(inp, [row]), _assumption_table(inp, info)),
        LazyLines(lambda: _explain(inp, [row], infos)), tuple(_notes(inp, [row], infos))))


def _class_table(rows: list[dict], ttft_model: str):  # ttft_model: how TTFT was found [text]
    from kvcalc.out.results import Column, Table

    return Table("classes", f"TTFT per request class ({ttft_model})",
                 (Column("strategy", "strategy", "text"), Column("class", "class", "text"),
                  Column("requests", "requests", "int"), Column("ttft_mean_s", "TTFT mean", "s")), tuple(rows))


def delta_rows(a: dict, c: dict) -> list[dict]:
    """C minus A for each compared figure: absolute and relative (None where A is 0)."""
    out = []
    for k in DELTA_KEYS + served.SERVED_DELTA_KEYS:
        if a.get(k) is None or c.get(k) is None:
            continue
        d = c[k] - a[k]
        out.append({"field": k, "kind": DELTA_KINDS.get(k, "s" if k.endswith("_s") else "usd"),
                    "lru": a[k], "prefix_tree": c[k], "delta": d, "relative": d / a[k] if a[k] else None})
    return out


def compare_result(inp: CostInputs, mixes: dict | None = None, given=None):
    """The ``kvcalc compare`` result: A and C side by side, deltas, per-class TTFT, assumptions.
    ``mixes`` maps strategy -> RequestMix (e.g. from a trace replay); default: the workload's. ``given``
    (served.GivenRequests): the trace's requests, which the serving model then runs instead of the workload's."""
    from kvcalc.out.results import Column, LazyLines, Result, Table

    mixes = mixes or {}
    a, ca, ia = _strategy(inp, "lru", mixes.get("lru"), given=given)
    c, cc, ic = _strategy(inp, "prefix-tree", mixes.get("prefix-tree"), ia, given)
    infos = [i for i in (ia, ic) if i]
    cols = served.SERVED_COMPARE_COLUMNS if infos else COMPARE_COLUMNS
    main = Table("compare", f"A vs C on {_workload_title(inp)}: {inp.model_name} on {inp.gpus} x "
                 f"{inp.hardware_name}{fit_title([a, c], ia)}", tuple(Column(*x) for x in cols), (a, c))
    label = dict(strategies.LABELS)
    deltas = Table("deltas", "C - A", (Column("field", "figure", "text"), Column("lru", label["lru"], "auto"),
                                      Column("prefix_tree", label["prefix-tree"], "auto"),
                                      Column("delta", "C - A", "auto"),
                                      Column("relative", "relative", "percent")), tuple(delta_rows(a, c)))
    return strategies.labelled(Result(
        "compare", _inputs_echo(inp, ia), main,
        (deltas, _class_table(ca + cc, _ttft_title(inp, ia)), *_pd_tables(inp, [a, c]), _assumption_table(inp, ia)),
        LazyLines(lambda: _explain(inp, [a, c], infos)), tuple(_notes(inp, [a, c], infos))))
