"""``kvcalc plan``'s options -> the search's inputs (validation and loading only; the search is serve/plan_*)."""

import sys


def _hardware(text: str):
    """The --hardware list -> [(name, preset, scale-up link or None, (calibration, its name), note)]."""
    from kvcalc.out.errors import InputError
    from kvcalc.serve.plan_space import hardware_choices

    names = [h.strip() for h in str(text).split(",") if h.strip()]
    if not names:
        raise InputError("--hardware: give at least one hardware preset (e.g. h100-sxm,b200)")
    if len(names) != len(set(names)):
        raise InputError(f"--hardware: {text[:80]!r} names a preset twice")
    return hardware_choices(names)


def _tiers(a: dict):
    """--tiers, --tier-capacity, --tier-link -> trace.plan_tiers.apply_tiers bound to them (links checked here)."""
    from functools import partial

    from kvcalc.model import catalog
    from kvcalc.out.errors import InputError
    from kvcalc.trace.plan_tiers import PlanTiers, apply_tiers
    from kvcalc.trace.tier_cost import given_capacity, parse_tier_map, parse_tier_names

    names = parse_tier_names(a["tiers"])
    caps = parse_tier_map(a["tier_capacity"], "--tier-capacity", names)
    links = parse_tier_map(a["tier_link"], "--tier-link", names)
    if "hbm" in links:
        raise InputError("--tier-link: hbm hits are used in place; hbm takes no link")
    for name, link in links.items():
        try:
            catalog.load_link(link)
        except InputError as err:
            raise InputError(f"--tier-link {name}: {err}") from None
    for name, text in caps.items():  # the text's form now (the blocks it holds depend on each engine)
        given_capacity(name, text, int(a["block_tokens"]), 1.0)
    return partial(apply_tiers, tiers=PlanTiers(tuple(names), caps, links))


def parse_and_run(ctx, a: dict) -> None:
    """Validate ``plan``'s options (``a``: its parameters by name), search, render; exit 2 when nothing meets."""
    import math
    from dataclasses import replace

    from kvcalc.cli.bench_parse import _rate, _shared
    from kvcalc.cli.common import check_format, emit, kv_options, refuse_unless, weights_dtype
    from kvcalc.model import catalog
    from kvcalc.out import progress
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import (MAX_BLOCK_TOKENS, MAX_PLAN_PROMPTS, MAX_REQUESTS, MAX_TOKENS,
                                  MAX_USD_PER_GPU_HOUR, check_option, check_positive, parse_duration, parse_tokens)
    from kvcalc.serve.bench import BenchSpec
    from kvcalc.serve.plan_space import Targets, Traffic

    check_format(a["fmt"])
    for flag, value, allowed in (("--disagg", a["disagg"], ("off", "auto", "on")),
                                 ("--strategy", a["strategy"], ("lru", "prefix-tree")),
                                 ("--router", a["router"], ("round-robin", "least-loaded", "session", "prefix"))):
        if value not in allowed:
            raise InputError(f"{flag}: {str(value)[:40]!r} is not one of {', '.join(allowed)}")
    refuse_unless(ctx, a["disagg"] != "off", ["pd_link"], "--disagg on or --disagg auto")
    if a["disagg"] != "off" and a["max_concurrency"] is not None:
        raise InputError("--max-concurrency: a client cap is not modelled with --disagg on/auto (give a --request-rate)")
    ttft = parse_duration(a["ttft_p99"], "--ttft-p99")
    tpot = parse_duration(a["tpot_p99"], "--tpot-p99")
    check_option("ttft-p99", ttft)
    check_option("tpot-p99", tpot)
    max_gpus = int(check_option("max-gpus", a["max_gpus"]))
    top = int(check_option("top", a["top"]))
    price = None if a["price_per_gpu_hour"] is None else check_positive(
        a["price_per_gpu_hour"], "--price-per-gpu-hour", limit=MAX_USD_PER_GPU_HOUR)
    n = int(check_positive(a["num_prompts"], "--num-prompts", limit=MAX_PLAN_PROMPTS))
    rate = _rate(a["request_rate"])
    conc = None if a["max_concurrency"] is None else int(check_positive(a["max_concurrency"], "--max-concurrency",
                                                                        limit=MAX_REQUESTS))
    seed = int(check_positive(a["seed"], "--seed", allow_zero=True, limit=2**63 - 1))
    if a["trace"] is not None and a["workload"] is not None:
        raise InputError("--trace and --workload: give one source of requests")
    listed = a["trace"] is not None or a["workload"] is not None
    refuse_unless(ctx, not listed, ["input_len", "output_len", "shared_prefix"], "the random dataset (no --trace "
                  "or --workload)")
    refuse_unless(ctx, a["trace"] is not None, ["rate_scale", "block_tokens", "tiers", "skip_bad"], "--trace")
    refuse_unless(ctx, a["tiers"] is not None, ["tier_capacity", "tier_link"], "--tiers")
    if a["tiers"] is not None and a["strategy"] != "prefix-tree":
        raise InputError("--tiers: the tiers hold the prefix cache; give --strategy prefix-tree")
    if a["tiers"] is not None and a["disagg"] != "off":
        raise InputError("--tiers: not modelled with --disagg on/auto (the tiers would sit on the prefill side)")
    refuse_unless(ctx, listed, ["router"], "--trace or --workload")
    refuse_unless(ctx, a["trace"] is None, ["request_rate"], "the random dataset or --workload (a trace has its "
                  "own arrivals: --rate-scale)")
    input_len = parse_tokens(a["input_len"], "--random-input-len")
    output_len = parse_tokens(a["output_len"], "--random-output-len")
    shared_tokens, groups = _shared(a["shared_prefix"], input_len)
    if input_len + output_len + shared_tokens > MAX_TOKENS:
        raise InputError("--random-input-len + --random-output-len: absurdly large")
    plot_path = None
    if a["plot"] is not None:
        from kvcalc.out.plot import check_plot_path

        plot_path = check_plot_path(a["plot"])
    model = weights_dtype(catalog.load_model(a["model"]), a["weights_dtype"])
    model_name = catalog.name_of(a["model"])
    hardware = _hardware(a["hardware"])
    opts = kv_options(a["kv_dtype"], None, None, False)
    caching = a["strategy"] == "prefix-tree"
    requests, split, label, tiered = None, None, "random", None
    if a["trace"] is not None:
        from kvcalc.trace.plan_input import plan_requests, router_split

        from kvcalc.trace.formats import trace_block_tokens

        if a["block_tokens"] is not None:
            check_positive(a["block_tokens"], "--block-tokens", limit=MAX_BLOCK_TOKENS)
        block_tokens = a["block_tokens"] = int(trace_block_tokens(a["trace"], "auto", a["block_tokens"]))
        scale = check_option("rate-scale", a["rate_scale"])
        requests, skipped = plan_requests(a["trace"], n, block_tokens, scale, a["skip_bad"])
        split, label = router_split(requests, a["router"], block_tokens), "trace"
        tiered = _tiers(a) if a["tiers"] is not None else None
    elif a["workload"] is not None:
        from kvcalc.serve.plan_traffic import round_robin, workload_requests
        from kvcalc.trace.plan_input import router_split

        w = catalog.load("workloads", a["workload"])
        requests = workload_requests(w, rate, seed)
        split = (round_robin(requests) if a["router"] == "round-robin"
                 else router_split(requests, a["router"], requests.key_tokens))
        label = "workload"
    if requests is not None:
        longest = int((requests.prompt + requests.output).max())
        if longest > MAX_TOKENS:
            raise InputError(f"--{label}: a request of {longest:,} tokens is absurdly large")
        max_len = longest
    else:
        max_len = input_len + shared_tokens + output_len
    context = model.max_context_tokens
    if requests is None and context and max_len > context:  # every random request is this long: none is served
        raise InputError("--random-input-len + --random-output-len" + (" + --shared-prefix" if shared_tokens else "")
                         + f": {max_len:,} tokens exceeds {model_name}'s max_context_tokens ({context:,}); the "
                         "engine refuses such a request")
    template = BenchSpec(model_name=model_name, model=model, hw_name="", hw=None, link=None, cal=None, cal_name="",
                         input_len=input_len, output_len=output_len, num_prompts=n, request_rate=rate,
                         max_concurrency=conc, max_model_len=max_len, prefix_caching=caching,
                         shared_prefix_tokens=shared_tokens, shared_prefix_groups=groups, seed=seed, opts=opts,
                         usd_per_gpu_hour=price)
    traffic = Traffic(base=template, split=split, requests=requests, label=label, router=a["router"], tiers=tiered)
    targets = Targets(ttft, tpot)
    from kvcalc.serve.plan_report import miss_line, plan_result
    from kvcalc.serve.plan_search import search
    from kvcalc.serve.plan_space import families

    pd_link = catalog.load_link(a["pd_link"]) if a["pd_link"] is not None else None
    fams = families(model, hardware, template, max_gpus, a["disagg"], pd_link)
    if not fams:
        raise InputError(f"plan: no TP size of {model_name}'s heads fits in {max_gpus} GPUs")
    with progress.shown("plan"):
        found = search(fams, traffic, targets, max_gpus, top)
    inputs = {"model": model_name, "hardware": [h[0] for h in hardware], "max_gpus": max_gpus,
              "ttft_p99_s": ttft, "tpot_p99_s": tpot, "disagg": a["disagg"],
              "pd_link": (catalog.name_of(a["pd_link"]) if a["pd_link"] else "scale-up") if a["disagg"] != "off" else None, "strategy": a["strategy"],
              "dataset": label, "random_input_len": input_len if not listed else None,
              "random_output_len": output_len if not listed else None, "num_prompts": n if requests is None
              else len(requests.prompt), "request_rate": None if math.isinf(rate) or a["trace"] else rate,
              "max_concurrency": conc, "router": a["router"] if listed else None, "max_model_len": max_len,
              "tiers": ",".join(tiered.keywords["tiers"].names) if tiered else None, "top": top,
              "candidates": found.enumerated, "pruned_by_bounds": found.bound_pruned,
              "simulated": found.simulations}
    notes = tuple(dict.fromkeys(h[4] for h in hardware if h[4])) + ((skipped,) if a["trace"] and skipped else ())
    result = plan_result(found, targets, traffic, inputs, notes)
    if not found.rows:
        closest = found.closest
        if closest is not None:
            shown = replace(result, main=replace(result.main, title="Closest configuration (misses the targets)",
                                                 rows=({k: v for k, v in closest.items()
                                                        if k not in ("meets", "ttft_ratio", "tpot_ratio")},)))
            from kvcalc.out import render

            render.write(shown, a["fmt"], sys.stdout)
        raise InputError(miss_line(found, targets, max_gpus))
    emit(result, a["fmt"], a["check"], a["explain"])
    if a["fmt"] == "table":
        from kvcalc.serve.plan_report import frontier_chart

        sys.stdout.write("\n" + frontier_chart(found))
    if plot_path is not None:
        from kvcalc.out.plot_frontier import write_frontier
        from kvcalc.serve.plan_search import frontier

        write_frontier(plot_path, found.simulated, frontier(found.simulated), found.rows[0], result.main.title)
