"""``cost`` and ``compare`` on the serving model: a scenario's workload run through bench's scheduler and step
time (scheduler.py, step_time.py, the GPU's calibration), instead of a stated decode rate.

Every scenario except ``article`` (which keeps the article's stated 60 tok/s, its MFU 1 and its even split) and
except when the user states a decode rate or a prefill MFU (--decode-tokens-per-s, --mfu-prefill) or the model is
an as-stated flat figure (nothing to time) is costed this way (CostInputs.decode_model = "serving").

The run: the workload's requests in file order (class by class), all sent at t = 0 (a workload has no arrival
times: its requests arrive together, as the cost model always assumed), on one replica of ``gpus``-way tensor
parallelism. A lru = no prefix caching; C prefix-tree = vLLM's prefix caching, with each shared segment's
16-token blocks keyed by the segment's groups (request i of N is in group floor(i g / N) of a segment of g
groups, as strategies.py counts them); ``--warm`` puts every shared block in the cache before the run.
KV pool: with --engine vllm or sglang, the engine's own (bench's sizing); with the ideal budget (the default), the
same budget kv_fits is judged by: per-GPU budget / (16 x per-GPU KV bytes per token at the requests' mean final
context) blocks of 16 tokens. A pool smaller than the requests' KV means requests wait and are preempted (the
scheduler), never "all decode at once".
Figures from the run (bench.metrics: one implementation): wall time, throughput, TTFT and TPOT mean and p99,
GPU-seconds = wall time x GPUs; each step's time is split between prefill and decode by its tokens, so $/M input
pays the prefill share of the GPU time and $/M output the decode share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

KEY_TOKENS = 16  # vLLM's block: prefix caching hits whole blocks
# what one run may simulate (a few seconds on one core at most: 200,000 requests of 800 + 500 tokens took 15 s),
# a bigger workload falls back to the stated closed forms, said in a note (never sampled or cut silently)
MAX_SIMULATED_REQUESTS = 100_000
MAX_PREFILL_STEPS = 10_000        # prompt tokens / max_num_batched_tokens
MAX_DECODE_TOKENS = 50_000_000    # output tokens of all requests (one numpy cell each)


def serving_reason(scenario_name: str, model, decode_given: bool, mfu_given: bool) -> Optional[str]:
    """Why a scenario keeps its stated decode rate [text], or None when it runs on the serving model."""
    if scenario_name == "article":
        return "the article's stated figures (60 tok/s per request, MFU 1)"
    if model.as_stated_kv_bytes_per_token is not None:
        return "an as-stated flat model: no architecture to time steps with"
    if decode_given or mfu_given:
        return "--decode-tokens-per-s / --mfu-prefill given: the stated rates"
    return None


def workload_requests(w, strategy: str, warm: bool):
    """The workload's requests for the scheduler (see the module docstring) -> scheduler.Requests."""
    import numpy as np

    from kvcalc.serve.scheduler import Requests

    prompt = np.concatenate([np.full(c.count, c.context_tokens, dtype=np.int64) for c in w.classes])
    output = np.concatenate([np.full(c.count, c.output_tokens, dtype=np.int64) for c in w.classes])
    n = len(prompt)
    send = np.zeros(n)
    if strategy != "prefix-tree" or not w.shared:
        return Requests(send, prompt, output)
    ends, at = [], 0
    for seg in w.shared:
        at += seg.tokens
        ends.append(at)
    blocks = at // KEY_TOKENS
    starts = [e - s.tokens for e, s in zip(ends, w.shared)]
    # block b's identity: the groups of every segment that starts before the block ends
    levels = [sum(1 for a in starts if a < (b + 1) * KEY_TOKENS) for b in range(blocks)]
    gs = [s.groups for s in w.shared]
    keys = []
    for i in range(n):
        path = tuple(i * g // n for g in gs)
        keys.append(tuple((b, path[:levels[b]]) for b in range(blocks)))
    warm_keys = frozenset(k for ks in keys for k in ks) if warm else None
    return Requests(send, prompt, output, keys, KEY_TOKENS, warm_keys=warm_keys)


@dataclass(frozen=True)
class GivenRequests:
    """Requests that replace the workload's (``compare --trace``: the trace's arrivals, lengths and hash ids as
    bench --trace reads them), with each request's class label [text] and the labels' order for the class table."""

    requests: object        # scheduler.Requests, its keys = the prompt's prefix blocks (None: nothing to reuse)
    labels: tuple           # one per request
    label_order: tuple


def given_requests(given: GivenRequests, strategy: str):
    """The given requests for one strategy: A (lru) without prefix keys, C with them -> scheduler.Requests."""
    from kvcalc.serve.scheduler import Requests

    r = given.requests
    if strategy == "prefix-tree":
        return r
    return Requests(r.send_s, r.prompt, r.output, None, r.key_tokens)


class CannotServe(Exception):
    """The serving model cannot run this workload (too big to simulate, or a request larger than the pool): the
    cost path falls back to the stated closed forms and says why."""


def check_size(w) -> None:
    """CannotServe when the workload is too big to simulate interactively (see the MAX_ constants), or when a
    request class generates no token: a server needs max_tokens >= 1 (vLLM's SamplingParams refuses 0), so a
    scheduler run has no first token to time."""
    if any(c.output_tokens < 1 for c in w.classes):
        raise CannotServe("a request class has 0 output tokens, and an engine generates at least one: no first "
                          "token to time")
    counts = [(c.count, c.context_tokens, c.output_tokens) for c in w.classes]
    check_counts(sum(k for k, _, _ in counts), sum(k * p for k, p, _ in counts), sum(k * o for k, _, o in counts))


def check_counts(n: int, prompt: int, output: int) -> None:
    """CannotServe when ``n`` requests of ``prompt`` and ``output`` tokens in all are more than one run simulates."""
    for what, value, limit in (("requests", n, MAX_SIMULATED_REQUESTS),
                               ("prefill steps", prompt // 8192, MAX_PREFILL_STEPS),
                               ("output tokens", output, MAX_DECODE_TOKENS)):
        if value > limit:
            raise CannotServe(f"{value:,} {what} is more than it simulates ({limit:,})")


def _check_longest_fits(spec) -> None:
    """CannotServe when the longest request (prompt + output) cannot hold its KV in the whole pool: the scheduler
    would preempt and recompute it forever."""
    from kvcalc.serve.bench import pool_and_limits

    pool = pool_and_limits(spec)[0]
    blocks = int(pool.num_blocks * (spec.kv_compression or 1.0))
    longest = int((spec.trace.prompt + spec.trace.output).max())
    if pool.need_one(longest) > blocks:
        raise CannotServe(f"a request of {longest:,} tokens (prompt + output) needs {pool.need_one(longest):,} KV "
                          f"blocks, more than the whole pool ({blocks:,} blocks of {pool.block_size} tokens per GPU "
                          "after the weights)")


def ideal_pool(inp, groups, budget_gpu: float, given: Optional[GivenRequests] = None):
    """The ideal KV budget as a pool of 16-token blocks (module docstring) -> scheduler.Pool."""
    import numpy as np

    from kvcalc.memory.capacity import per_gpu_request_bytes
    from kvcalc.serve.scheduler import Pool

    if given is None:
        final = [(c.count, c.context_tokens + c.output_tokens) for c in inp.workload.classes]
    else:  # each distinct final length once, with its count
        lengths, counts = np.unique(given.requests.prompt + given.requests.output, return_counts=True)
        final = list(zip(counts.tolist(), lengths.tolist()))
    tokens = sum(k * t for k, t in final)
    per_token = sum(k * per_gpu_request_bytes(groups, t, inp.gpus) for k, t in final) / tokens
    return Pool(num_blocks=int(budget_gpu // (KEY_TOKENS * per_token)), block_size=KEY_TOKENS)


def spec_of(inp, strategy: str, groups, budget_gpu: float, given: Optional[GivenRequests] = None):
    """The BenchSpec of one strategy's run (bench's engine, calibration and limits); ``given``: the requests that
    replace the workload's."""
    from kvcalc.model import catalog
    from kvcalc.serve.bench import BenchSpec
    from kvcalc.serve.calibration import calibration_for

    hw = inp.hardware
    cal, cal_name, note = calibration_for(inp.hardware_name)
    link = catalog.load_link(hw.scaleup_link) if hw.scaleup_link and inp.gpus > 1 else None
    req = workload_requests(inp.workload, strategy, inp.warm) if given is None else given_requests(given, strategy)
    engine = inp.engine if inp.engine in ("vllm", "sglang") else "vllm"
    # --kv-compression: simulate_spec scales the pool's blocks and the KV each step reads
    pool = ideal_pool(inp, groups, budget_gpu, given) if inp.engine == "ideal" else None
    spec = BenchSpec(model_name=inp.model_name, model=inp.model, hw_name=inp.hardware_name, hw=hw, link=link,
                     cal=cal, cal_name=cal_name, tp=inp.gpus, engine=engine, num_prompts=len(req.prompt),
                     input_len=int(req.prompt.mean()), output_len=int(req.output.mean()),  # --explain's steps
                     prefix_caching=strategy == "prefix-tree", opts=inp.kv_options, trace=req,
                     usd_per_gpu_hour=inp.usd_per_gpu_hour, kv_compression=inp.kv_compression, pool=pool,
                     max_model_len=int(max(req.prompt) + max(req.output)))
    return spec, note


def served_row(inp, strategy: str, row: dict, groups, budget_gpu: float, prior: Optional[dict] = None,
               given: Optional[GivenRequests] = None, budget_of=None) -> tuple[dict, list[dict], dict]:
    """``row`` (the static figures: tokens, FLOPs, KV) with its times and dollars from the scheduler's run, the
    per-class TTFT rows, and what the run was (pool, limits, step model, counters) -> (row, class rows, info).
    ``prior``: A's info on the same inputs, whose run C reuses when the workload shares no prefix. ``given``: the
    requests that replace the workload's (a trace's), sent at their own times. ``budget_of(inp, groups)``: the
    KV budget per GPU of other inputs [B] (cost.kv_budget_bytes_per_gpu), for a disaggregated run's engines."""
    import numpy as np

    from kvcalc.memory.blocks import paged_bytes_per_token
    from kvcalc.move.links import breakeven_bandwidth_bytes_per_s
    from kvcalc.out.units import usd_per_hour_to_usd_per_s, usd_per_million
    from kvcalc.serve.bench import simulate_spec

    if given is None:
        check_size(inp.workload)
    else:
        r = given.requests
        check_counts(len(r.prompt), int(r.prompt.sum()), int(r.output.sum()))
    pd = None
    if inp.pd_link is None:
        spec, note = spec_of(inp, strategy, groups, budget_gpu, given)
    else:  # disaggregated: each engine's spec and budget (serve/served_pd.py)
        from kvcalc.serve import served_pd

        one = served_pd.engine_inputs(inp)
        budget_gpu = budget_of(one, groups)
        spec, note = spec_of(one, strategy, groups, budget_gpu, given)
    nothing_shared = not inp.workload.shared if given is None else given.requests.keys is None
    if prior is not None and nothing_shared:  # C with no shared segment has nothing to hit: A's run
        m, runs, sm, pool, sch = prior["simulated"]
        pd = prior["pd"]
    elif inp.pd_link is not None:
        try:  # a decode engine holds the longest request's prompt + output (a prefill engine its prompt + 1)
            _check_longest_fits(spec)
        except CannotServe as e:  # the split is refused, not run colocated
            raise served_pd.refused(inp, str(e)) from None
        try:
            (m, runs, sm, pool, sch), pd = served_pd.simulate(inp, spec)
        except ValueError as e:
            raise CannotServe(str(e)) from None
    else:
        _check_longest_fits(spec)
        try:
            m, runs, sm, pool, sch = simulate_spec(spec)
        except ValueError as e:
            raise CannotServe(str(e)) from None
    r = runs[0]
    ttft = r.first_s - r.send_s
    usd = m["gpu_seconds"] * usd_per_hour_to_usd_per_s(inp.usd_per_gpu_hour)
    busy = r.prefill_time_s + r.decode_time_s
    prefill_usd = usd * r.prefill_time_s / busy if busy else 0.0
    out = dict(row)
    out |= {
        "prefill_time_s": r.prefill_time_s, "decode_time_s": r.decode_time_s,
        "ttft_mean_s": m["mean_ttft_ms"] / 1e3, "ttft_max_s": float(ttft.max()),
        "ttft_p99_s": m["p99_ttft_ms"] / 1e3, "tpot_mean_s": m["mean_tpot_ms"] / 1e3,
        "tpot_p99_s": m["p99_tpot_ms"] / 1e3, "wall_time_s": m["duration"],
        "request_throughput_per_s": m["request_throughput"],
        "output_throughput_tokens_per_s": m["output_throughput"],
        "decode_tokens_per_s": 1e3 / m["mean_tpot_ms"] if m["mean_tpot_ms"] else None,
        "decode_tokens_per_s_total": m["output_throughput"],
        "gpu_seconds": m["gpu_seconds"], "prefill_usd": prefill_usd, "decode_usd": usd - prefill_usd,
        "usd_per_mtok_input": m["usd_per_mtok_input"],
        "usd_per_mtok_output": m["usd_per_mtok_output"] if row["output_tokens"] else None,
        "usd_per_mtok_blended": usd_per_million(usd, row["input_tokens"] + row["output_tokens"]),
        "preemptions": m["preemptions"], "peak_running": m["peak_running"], "steps": m["steps"],
        "cached_tokens": m["cached_tokens"], "kv_pool_blocks": pool.num_blocks,
    }
    if pd is not None:
        out |= served_pd.row_fields(inp, out, m, groups, spec.trace.prompt, pd, budget_gpu)
    if r.prefill_tokens:  # prefill seconds per token as the run measured them (the break-even's denominator)
        paged = sum(paged_bytes_per_token(g) for g in groups)
        out["breakeven_bandwidth_bytes_per_s"] = breakeven_bandwidth_bytes_per_s(
            paged, r.prefill_time_s / r.prefill_tokens)
    classes, at = [], 0
    if given is None:  # per class: requests are numbered class by class
        for c in inp.workload.classes:
            classes.append({"strategy": strategy, "class": c.name, "requests": c.count,
                            "ttft_mean_s": float(np.mean(ttft[at:at + c.count]))})
            at += c.count
    else:
        labels = np.asarray(given.labels)
        for label in given.label_order:
            mine = labels == label
            classes.append({"strategy": strategy, "class": label, "requests": int(mine.sum()),
                            "ttft_mean_s": float(np.mean(ttft[mine]))})
    info = {"cal_name": spec.cal_name, "note": note, "engine": spec.engine, "pool": pool, "sch": sch, "sm": sm,
            "run": r, "spec": spec, "metrics": m, "simulated": (m, runs, sm, pool, sch), "given": given is not None,
            "pd": pd}
    return out, classes, info



# cost's table on the serving model: the run's times replace the stated prefill time and FLOPs
SERVED_COST_COLUMNS = (
    ("prefill_tokens", "prefill tokens", "int"), ("hit_rate", "hit rate", "percent"),
    ("ttft_mean_s", "TTFT mean", "s"), ("tpot_mean_s", "TPOT mean", "s"), ("wall_time_s", "wall", "s"),
    ("kv_stored_bytes", "KV held", "bytes"), ("kv_fits", "fits", "bool"),
    ("usd_per_mtok_input", "$/M in", "usd"), ("usd_per_mtok_output", "$/M out", "usd"),
    ("usd_per_mtok_blended", "$/M blended", "usd"),
)
SERVED_COMPARE_COLUMNS = (
    ("strategy", "strategy", "text"), ("prefill_tokens", "prefill tokens", "int"),
    ("hit_rate", "hit rate", "percent"), ("ttft_mean_s", "TTFT mean", "s"), ("tpot_mean_s", "TPOT mean", "s"),
    ("output_throughput_tokens_per_s", "out tok/s", "round"), ("kv_fits", "fits", "bool"),
    ("usd_per_mtok_blended", "$/M blended", "usd"),
)  # the wall time is in the C - A table below it, keeping this one within 120 columns
SERVED_DELTA_KEYS = ("wall_time_s", "output_throughput_tokens_per_s", "ttft_p99_s", "tpot_mean_s")


def notes(inp, rows: list[dict], infos: list[dict]) -> list[str]:
    """What the run was and where its figures come from [text lines]."""
    from kvcalc.serve import strategies

    i0 = infos[0]
    pool, sch = i0["pool"], i0["sch"]
    if i0["pd"] is not None:
        from kvcalc.serve.served_pd import split_text

        replica = f"disaggregated: {split_text(inp)}"
    else:
        replica = f"one {inp.gpus}-way TP replica"
    out = [f"seconds and dollars from the serving model, not a stated rate: {i0['engine']}'s scheduler on "
           f"{inp.gpus} x {inp.hardware_name} ({replica}), calibration {i0['cal_name']} "
           "(docs/serving-model.md shows its error on measured runs); "
           + ("every request sent at its trace time" if i0.get("given") else "every request sent at t = 0"),
           f"KV pool {pool.num_blocks:,} blocks of {pool.block_size} tokens" + (" per engine "
                                                                            if i0["pd"] is not None else " ")
           + ("(the ideal KV budget per GPU / the KV bytes of 16 tokens)" if inp.engine == "ideal" else
              f"(the {inp.engine} pool)")
           + f"; limits {sch.max_num_batched_tokens:,} batched tokens and {sch.max_num_seqs:,} sequences per step"]
    if i0["note"]:
        out.append(i0["note"])
    if i0["pd"] is not None:
        from kvcalc.serve.served_pd import notes as pd_notes

        out += pd_notes(inp, rows)
    for r in rows:
        label = strategies.STRATEGIES[r["strategy"]]
        waited = "" if r["peak_running"] >= r["requests"] else f"; at most {r['peak_running']:,} of " \
                 f"{r['requests']:,} requests ran at once, the rest queued"
        out.append(f"{label}: {r['steps']:,} steps, {r['preemptions']:,} preemptions{waited}")
        if r["strategy"] == "prefix-tree" and r["cached_tokens"] != r["reused_tokens"]:
            out.append(f"{label}: the run read {r['cached_tokens']:,} prompt tokens from the prefix cache, the "
                       f"tree's count is {r['reused_tokens']:,} (hit rate, prefill tokens): requests admitted before "
                       "the first of their group finished its prefill, and partial "
                       f"{i0['spec'].trace.key_tokens}-token blocks, miss")
    if inp.kv_compression:
        out.append(f"--kv-compression {inp.kv_compression:g}: the article's unproven hypothesis (its section 11, "
                   "delta encoding): KV stored, read and moved / FACTOR")
    return out


def explain(inp, rows: list[dict], infos: list[dict]) -> list[str]:
    """The run and its step-time terms with the numbers substituted [text lines]."""
    from kvcalc.out.units import fmt_seconds, fmt_usd
    from kvcalc.serve.bench_report import explain_lines
    from kvcalc.serve import strategies

    out = []
    for r, info in zip(rows, infos):
        run = info["run"]
        label = dict(strategies.LABELS)[r["strategy"]]
        jumped = f", {run.jumps:,} run(s) of pure decode steps jumped (one numpy call each)" if run.jumps else ""
        out += [f"{label}: {r['requests']:,} requests simulated one by one (none sampled), {run.steps:,} steps"
                + jumped,
                f"  wall = {fmt_seconds(r['wall_time_s'])}; GPU time = {fmt_seconds(r['wall_time_s'])} x "
                f"{inp.gpus} GPUs = {r['gpu_seconds']:,.1f} GPU-s" + ("" if info["pd"] is not None else
                f"; step time split by tokens: prefill {fmt_seconds(run.prefill_time_s)}, decode "
                f"{fmt_seconds(run.decode_time_s)}"),
                f"  $/M in = {fmt_usd(r['prefill_usd'])} / {r['input_tokens']:,} input tokens x 1e6 = "
                f"{fmt_usd(r['usd_per_mtok_input'])}; $/M out = {fmt_usd(r['decode_usd'])} / "
                f"{r['output_tokens']:,} output tokens x 1e6 = {fmt_usd(r['usd_per_mtok_output'])}"]
        if info["pd"] is not None:
            from kvcalc.serve.served_pd import explain as pd_explain

            out += pd_explain(inp, r)
    i0 = infos[0]
    return out + explain_lines(i0["sm"], i0["metrics"], i0["spec"], i0["sch"])


def assumptions(inp, info: dict) -> list[dict]:
    """The serving model's assumptions (replacing the stated MFU, decode rate and TTFT model)."""
    sch = info["sch"]
    return [
        {"assumption": "serving_model", "value": f"{info['engine']} scheduler, calibration {info['cal_name']}",
         "source": "kvcalc bench's scheduler and step time (serve/scheduler.py, serve/step_time.py, "
                   "presets/calibration)"},
        {"assumption": "arrivals", "value": "the trace's times" if info.get("given") else "all at t = 0",
         "source": "the trace's timestamps (as kvcalc bench --trace)" if info.get("given") else
         "a workload has no arrival times"},
        {"assumption": "max_num_batched_tokens", "value": sch.max_num_batched_tokens, "kind": "int",
         "source": "the calibration's vLLM default for the GPU"},
        {"assumption": "max_num_seqs", "value": sch.max_num_seqs, "kind": "int",
         "source": "the calibration's vLLM default for the GPU"},
    ] + ([{"assumption": "kv_compression", "value": inp.kv_compression, "kind": "float",
           "source": "--kv-compression: the article's section-11 delta-encoding what-if, an unproven hypothesis"}]
         if inp.kv_compression else []) + (_pd_assumption(inp) if info["pd"] is not None else [])


def _pd_assumption(inp) -> list[dict]:
    from kvcalc.serve.served_pd import assumption

    return [assumption(inp)]
