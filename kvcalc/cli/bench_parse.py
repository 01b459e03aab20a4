"""``kvcalc bench``'s options -> a BenchSpec (validation and loading only; the arithmetic is in serve/)."""

import math

DEFAULT_INPUT, DEFAULT_OUTPUT, DEFAULT_PROMPTS = "1024", "128", 1000  # vllm bench serve's --random-input-len,
# --random-output-len and --num-prompts defaults


def _rate(text: str) -> float:
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import MAX_REQUEST_RATE, MIN_REQUEST_RATE, check_positive

    t = str(text).strip().lower()
    if t == "inf":
        return math.inf
    try:
        value = float(t)
    except ValueError:
        raise InputError(f"--request-rate: cannot read {str(text)[:40]!r}: give inf or requests per second") from None
    return check_positive(value, "--request-rate", limit=MAX_REQUEST_RATE, minimum=MIN_REQUEST_RATE)


def _shared(text, input_len: int):
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import MAX_TOKENS, check_positive, parse_tokens

    if text is None:
        return 0, 1
    tokens, sep, groups = str(text).partition(":")
    n = parse_tokens(tokens, "--shared-prefix")
    g = 1
    if sep:
        try:
            g = int(groups.strip())
        except ValueError:
            raise InputError(f"--shared-prefix: groups {groups[:40]!r} is not a whole number") from None
        check_positive(g, "--shared-prefix groups", limit=10**9)
    if n + input_len > MAX_TOKENS:
        raise InputError(f"--shared-prefix: {n:,} + --random-input-len {input_len:,} tokens is absurdly large")
    return n, g


def _measured(a: dict, n, rate, burst, conc):
    """``--measured FILE``: the run, and the options it fills where no flag is given -> (run, n, rate, burst,
    conc, input_lens, output_lens, trace of its send times or None, what was taken from it)."""
    from kvcalc.out import units
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import (MAX_BENCH_PROMPTS, MAX_BURSTINESS, MAX_REQUEST_RATE, MAX_REQUESTS, MAX_TOKENS,
                                  MIN_BURSTINESS, MIN_REQUEST_RATE, check_positive)
    from kvcalc.serve import bench_measured as bm
    from kvcalc.trace.measured import read_measured

    run = read_measured(a["measured"])
    if run.ramp_up is not None:
        raise InputError(f"--measured: {a['measured']} ramped its request rate up ({run.ramp_up}); kvcalc bench "
                         "models a constant rate")
    count, ins, outs = bm.measured_requests(run, n, a["input_len"] is not None, a["output_len"] is not None,
                                            MAX_BENCH_PROMPTS, MAX_TOKENS)
    took, trace = [], None
    if n is None:
        n = count
        took.append(f"{units.fmt_count(count)} requests")
    if ins is not None:
        took.append("each request's prompt length" if run.detailed else "the prompt tokens")
    if outs is not None:
        took.append("each request's output length" if run.detailed else "the generated tokens")
    if a["request_rate"] is None:
        rate = bm.rate_of(run)
        if not math.isinf(rate):
            check_positive(rate, f"--measured {a['measured']}: request rate", limit=MAX_REQUEST_RATE,
                           minimum=MIN_REQUEST_RATE)
        took.append(f"request rate {'inf' if math.isinf(rate) else units.fmt_rate(rate, 'req/s')}")
        if a["burstiness"] is None and run.burstiness is not None and not math.isinf(rate):
            burst = check_positive(run.burstiness, f"--measured {a['measured']}: burstiness", limit=MAX_BURSTINESS,
                                   minimum=MIN_BURSTINESS)
            took.append(f"burstiness {units.fmt_count(burst)}")
        if a["trace"] is None and ins is not None and outs is not None:
            trace = bm.send_times(run, ins, outs)
            if trace is not None:
                took.append("each request's send time")
    if conc is None and run.max_concurrency is not None:
        conc = int(check_positive(run.max_concurrency, f"--measured {a['measured']}: max concurrency",
                                  limit=MAX_REQUESTS))
        took.append(f"max concurrency {units.fmt_count(conc)}")
    return run, n, rate, burst, conc, ins, outs, trace, took


def parse_and_run(a: dict) -> None:
    """Validate ``bench``'s options (``a``: its parameters by name), run the model, render."""
    from kvcalc.out.units import MAX_BENCH_PROMPTS, MAX_KV_COMPRESSION
    from kvcalc.cli.common import check_format, emit, kv_options, weights_dtype
    from kvcalc.model import catalog
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import (MAX_BURSTINESS, MAX_GPUS, MAX_REQUESTS, MAX_TOKENS, MAX_USD_PER_GPU_HOUR,
                                  MIN_BURSTINESS, check_positive, parse_tokens)
    from kvcalc.serve.bench import ENGINES, BenchSpec
    from kvcalc.serve.calibration import calibration_for

    check_format(a["fmt"])
    for flag, value, allowed in (("--engine", a["engine"], ENGINES), ("--dataset", a["dataset"], ("random",)),
                                 ("--attention", a["attention"], ("tp", "dp"))):
        if value is not None and value not in allowed:
            raise InputError(f"--{flag.lstrip('-')}: {str(value)[:40]!r} is not one of {', '.join(allowed)}")
    dp = int(check_positive(a["dp"], "--dp", limit=MAX_GPUS))
    ep = bool(a["expert_parallel"])
    if a["attention"] == "dp" and not (ep and dp > 1):
        raise InputError("--attention dp: data-parallel attention is vLLM's layout under --enable-expert-parallel "
                         "with --dp > 1 (without it the --dp ranks are independent replicas)")
    if a["attention"] == "tp" and ep and dp > 1:
        raise InputError("--attention tp: with --enable-expert-parallel and --dp > 1 vLLM runs attention "
                         "data-parallel (each rank its own batch); give --dp 1 for expert parallelism over TP ranks")
    if a["tp"] is not None:
        tp = int(check_positive(a["tp"], "--tp", limit=MAX_GPUS))
    else:
        gpus = int(check_positive(a["gpus"], "--gpus", limit=MAX_GPUS)) if a["gpus"] is not None else dp
        if gpus % dp:
            raise InputError(f"--gpus {gpus} is not a multiple of --dp {dp}")
        tp = gpus // dp
    if a["gpus"] is not None and check_positive(a["gpus"], "--gpus", limit=MAX_GPUS) != tp * dp:
        raise InputError(f"--gpus {a['gpus']} is not --tp {tp} x --dp {dp}")
    if tp * dp > MAX_GPUS:
        raise InputError(f"--tp x --dp: {tp * dp:,} GPUs is absurdly large")
    input_len = parse_tokens(DEFAULT_INPUT if a["input_len"] is None else a["input_len"], "--random-input-len")
    output_len = parse_tokens(DEFAULT_OUTPUT if a["output_len"] is None else a["output_len"], "--random-output-len")
    n = None if a["num_prompts"] is None else int(check_positive(a["num_prompts"], "--num-prompts",
                                                                 limit=MAX_BENCH_PROMPTS))
    rate = _rate("inf" if a["request_rate"] is None else a["request_rate"])
    burst = 1.0 if a["burstiness"] is None else check_positive(a["burstiness"], "--burstiness", limit=MAX_BURSTINESS,
                                                                      minimum=MIN_BURSTINESS)
    conc = None if a["max_concurrency"] is None else int(check_positive(a["max_concurrency"], "--max-concurrency",
                                                                        limit=MAX_REQUESTS))
    measured, input_lens, output_lens, took, measured_trace = None, None, None, [], None
    if a["measured"] is not None:
        measured, n, rate, burst, conc, input_lens, output_lens, measured_trace, took = _measured(a, n, rate, burst,
                                                                                                 conc)
        from kvcalc.serve.bench_measured import mean_length

        input_len = mean_length(input_lens, input_len)
        output_len = mean_length(output_lens, output_len)
    n = DEFAULT_PROMPTS if n is None else n
    seqs = None if a["max_num_seqs"] is None else int(check_positive(a["max_num_seqs"], "--max-num-seqs",
                                                                     limit=MAX_REQUESTS))
    batched = None if a["max_num_batched_tokens"] is None else parse_tokens(a["max_num_batched_tokens"],
                                                                            "--max-num-batched-tokens")
    max_len = None if a["max_model_len"] is None else parse_tokens(a["max_model_len"], "--max-model-len")
    comp = None if a["kv_compression"] is None else check_positive(a["kv_compression"], "--kv-compression",
                                                                   limit=MAX_KV_COMPRESSION, minimum=1)
    price = None if a["price_per_gpu_hour"] is None else check_positive(a["price_per_gpu_hour"],
                                                                        "--price-per-gpu-hour", limit=MAX_USD_PER_GPU_HOUR)
    seed = int(check_positive(a["seed"], "--seed", allow_zero=True, limit=2**63 - 1))
    shared_tokens, groups = _shared(a["shared_prefix"], input_len)
    if input_len + output_len + shared_tokens > MAX_TOKENS:
        raise InputError("--random-input-len + --random-output-len: absurdly large")
    model = weights_dtype(catalog.load_model(a["model"]), a["weights_dtype"])
    hw = catalog.load_hardware(a["hardware"])
    if ep:
        from kvcalc.serve.expert_parallel import check_ep

        check_ep(model, catalog.name_of(a["model"]))
    link = catalog.load_link(hw.scaleup_link) if hw.scaleup_link and tp > 1 else None
    cal, cal_name, note = calibration_for(a["hardware"])
    opts = kv_options(a["kv_dtype"], None, None, False)
    trace = None
    if a["trace"] is not None:
        from kvcalc.trace.bench_input import read_trace_requests, skipped_note

        from kvcalc.out.units import MAX_BLOCK_TOKENS

        from kvcalc.trace.formats import resolve_format

        if a["block_tokens"] is not None:
            check_positive(a["block_tokens"], "--block-tokens", limit=MAX_BLOCK_TOKENS)
        kind = resolve_format(a["trace"], a["trace_format"])
        trace, skipped, first = read_trace_requests(a["trace"], limit=n, block_tokens=a["block_tokens"],
                                                    trace_format=kind, skip_bad=a["skip_bad"])
        skipped = skipped_note(skipped, first)
        check_positive(trace.key_tokens, "--block-tokens", limit=MAX_BLOCK_TOKENS)
    else:
        skipped = None
        for flag, given in (("--trace-format", a["trace_format"] != "auto"), ("--block-tokens", a["block_tokens"]),
                            ("--router", a["router"] != "round-robin"), ("--skip-bad", a["skip_bad"])):
            if given:
                raise InputError(f"{flag}: only with --trace FILE")
        trace = measured_trace
    from kvcalc.trace.replicas import check_replicas

    check_replicas(1, a["router"])  # the name (the replica count is --dp, checked above)
    replica_of = None
    if trace is not None and a["router"] == "session" and dp > 1:  # least-loaded, prefix: on the clock (serve/)
        from kvcalc.trace.bench_input import route_requests

        replica_of = route_requests(trace, dp, a["router"])
    spec = BenchSpec(model_name=catalog.name_of(a["model"]), model=model, hw_name=catalog.name_of(a["hardware"]),
                     hw=hw, link=link, cal=cal, cal_name=cal_name, tp=tp, dp=dp, engine=a["engine"],
                     async_scheduling=a["async_scheduling"], input_len=input_len, output_len=output_len,
                     num_prompts=n if trace is None else len(trace.prompt), request_rate=rate, max_concurrency=conc,
                     max_num_seqs=seqs, max_num_batched_tokens=batched, max_model_len=max_len,
                     prefix_caching=a["prefix_caching"], shared_prefix_tokens=shared_tokens,
                     shared_prefix_groups=groups, seed=seed, opts=opts, trace=trace, usd_per_gpu_hour=price,
                     kv_compression=comp, router=a["router"], replica_of=replica_of, ep=ep, input_lens=input_lens,
                     output_lens=output_lens, burstiness=burst, started=measured is not None)
    from kvcalc.serve.bench_report import bench_result

    from kvcalc.out import progress

    try:
        with progress.shown("bench"):
            result = bench_result(spec, notes=tuple(n for n in (note, skipped) if n))
    except ValueError as e:  # the run cannot be served (a request larger than the pool)
        raise InputError(f"bench: {e}") from None
    if measured is not None:
        from kvcalc.serve.bench_measured import with_measured

        result = with_measured(result, measured, took, a["trace"] is not None)
    emit(result, a["fmt"], a["check"], a["explain"], block(result, conc, rate, measured))


def block(result, conc, rate, measured=None):
    from kvcalc.out.bench_block import vllm_block

    shown = None if measured is None else dict(measured.figures, max_concurrency=measured.max_concurrency,
                                               request_rate=measured.request_rate)
    return vllm_block(result.rows[0], conc, rate, shown)
