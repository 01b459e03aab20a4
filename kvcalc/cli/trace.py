"""``kvcalc trace``: replay a Mooncake-format request trace; prefix-cache hit rate per capacity, or a curve."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from kvcalc.cli.common import CheckOpt, ExplainOpt, FormatOpt, IndexerDtypeOpt, KvDtypeOpt, MlaLayoutOpt, MtpOpt
from kvcalc.out.units import MAX_BLOCK_TOKENS, MAX_CURVE_POINTS, MAX_GPUS

R = "Replay"
TI = "Tiers (HBM -> DRAM -> SSD)"


POLICY_NAMES = {"lru": "LRU", "fifo": "FIFO", "lfu": "LFU", "s3fifo": "S3-FIFO"}  # as the progress bar names them


def trace(
    ctx: typer.Context,
    file: Annotated[Path, typer.Argument(help="trace file, read as a stream (.gz and .zst too, told by their magic bytes): Mooncake JSONL (one "
                                         "{timestamp (ms), input_length, output_length, hash_ids} per line), "
                                         "full-block hash JSONL, kv-cache-tester JSON; see --trace-format",
                                         show_default=False)],
    block_tokens: Annotated[Optional[int], typer.Option(
        "--block-tokens", "-b", help="tokens per hash id in the trace (default: the trace's own block_size "
        f"(kv-cache-tester), else 512 as Mooncake; Qwen Bailian: 16; at most {MAX_BLOCK_TOKENS:,})",
        show_default=False, rich_help_panel=R)] = None,
    trace_format: Annotated[str, typer.Option(
        "--trace-format", help="auto (by content) | mooncake (ceil(input / B) ids: the partial last block has one) "
        "| full-blocks (floor(input / B) ids: only full blocks are hashed, so the partial last block is always a "
        "miss) | kv-cache-tester (per-conversation JSON, floor ids, its block_size) | azure-csv | burstgpt-csv "
        "(lengths only: for kvcalc bench --trace, nothing to replay). auto reads hash-id JSONL under the rule its "
        "first partial block follows and holds every line to it", rich_help_panel=R)] = "auto",
    capacity: Annotated[Optional[str], typer.Option(
        "--capacity", help="cache capacities, comma-separated: tokens, decimal (3m = 3,000,000), bytes with a unit "
        "(80GB = 80e9 B, 80GiB; needs --model) or inf (default: 3m,10m,20m,inf; with --curve: only the curve)",
        show_default=False, rich_help_panel=R)] = None,
    policy: Annotated[str, typer.Option("--policy", help="lru (the LRU prefix cache: a hit refreshes a block) | fifo (never refresh) | lfu (SGLang's radix "
                                        "cache: fewest hits, then least recent) | s3fifo (small + main + ghost FIFOs)",
                                        rich_help_panel=R)] = "lru",
    curve: Annotated[bool, typer.Option("--curve", help="hit rate vs capacity: a geometric grid of capacities up to "
                                        "the trace's working set, all from one LRU pass (lru only)",
                                        rich_help_panel=R)] = False,
    curve_points: Annotated[Optional[int], typer.Option(
        "--curve-points", help=f"points of the --curve grid (implies --curve; default 20; 1 to {MAX_CURVE_POINTS:,}); "
        "with --tiers: of the --tier-curve grid",
        show_default=False, rich_help_panel=R)] = None,
    replicas: Annotated[Optional[int], typer.Option(
        "--replicas", help="replay over N replicas behind --router, each with its own cache of each --capacity: "
        "hit rate per replica and in total, load imbalance (1 to 1,024)", show_default=False,
        rich_help_panel="Replicas")] = None,
    router: Annotated[str, typer.Option(
        "--router", help="round-robin | least-loaded (fewest input tokens so far) | session (by the request's "
        "first block) | prefix (the replica caching the longest prefix now; ties by load)",
        rich_help_panel="Replicas")] = "round-robin",
    sample_rate: Annotated[Optional[float], typer.Option(
        "--sample-rate", help="with --curve: estimate the curve from a stratified sample: the ids at a request's "
        "first two blocks and the hot ids exactly, the others whose hashed id falls in this fraction, at most 1 "
        "(e.g. 0.01; docs/traces.md: its error and memory); the trace statistics stay exact",
        show_default=False, rich_help_panel=R)] = None,
    skip_bad: Annotated[bool, typer.Option("--skip-bad", help="skip and count bad lines instead of stopping at the "
                                           "first one", rich_help_panel=R)] = False,
    exact_stats: Annotated[bool, typer.Option(
        "--exact-stats", help="ids too sparse for a bit table (64-bit hashes): keep every id (~100 B each; 8 B "
        "when one large LRU capacity runs in numpy, docs/traces.md) so that the distinct blocks and the infinite "
        "cache's hit rate are exact, instead of estimates from a bounded hashed sample (the default, shown with "
        "standard errors)", rich_help_panel=R)] = False,
    model: Annotated[Optional[str], typer.Option(
        "--model", "-m", help="model preset or TOML path: converts byte capacities to tokens via its KV bytes per "
        "block, and shows the bytes each capacity holds", show_default=False, rich_help_panel="KV layout")] = None,
    hardware: Annotated[Optional[str], typer.Option(
        "--hardware", help="with --model: add the node's KV budget (after the weights) as a capacity, marked on "
        "the --plot chart; with --tiers: the node the tiers live on", show_default=False, rich_help_panel=R)] = None,
    gpus: Annotated[int, typer.Option("--gpus", help=f"GPUs in that node (1 to {MAX_GPUS:,})",
                                      rich_help_panel=R)] = 8,
    plot: Annotated[Optional[str], typer.Option(
        "--plot", help="with --curve: write the hit-rate curve to FILE.png | .svg | .html, the given capacities "
        "marked (needs the extra: pip install 'kvcalc[plot]')", show_default=False, rich_help_panel="Output")] = None,
    kv_dtype: KvDtypeOpt = None, mla_layout: MlaLayoutOpt = None, indexer_dtype: IndexerDtypeOpt = None,
    mtp: MtpOpt = False, fmt: FormatOpt = "table", check: CheckOpt = None, explain: ExplainOpt = False,
    tiers: Annotated[Optional[str], typer.Option(
        "--tiers", help="replay through exclusive LRU tiers, fastest first: hbm,dram,ssd (demotion on eviction, "
        "promotion on a hit); per-tier hits, load time vs prefill avoided", show_default=False,
        rich_help_panel=TI)] = None,
    tier_capacity: Annotated[Optional[list[str]], typer.Option(
        "--tier-capacity", help="tier=VALUE, bytes (dram=1TB) or tokens (ssd=200m); repeatable or comma-separated "
        "(default: hbm = KV budget after weights; dram/ssd from the hardware preset)", show_default=False,
        rich_help_panel=TI)] = None,
    tier_link: Annotated[Optional[list[str]], typer.Option(
        "--tier-link", help="tier=LINK preset a lower tier loads over (default: dram = the hardware's host_link, "
        "ssd = nvme-gen5)", show_default=False, rich_help_panel=TI)] = None,
    tier_copies: Annotated[str, typer.Option(
        "--tier-copies", help="coalesced (one copy per request per tier) | per-block (one copy per block)",
        rich_help_panel=TI)] = "coalesced",
    tier_curve: Annotated[Optional[str], typer.Option(
        "--tier-curve", help="with --tiers: every tier's hits as one tier's capacity varies, the others fixed, "
        "from one pass: TIER (0, then --curve-points sizes geometric from one block to 4 x its capacity) or "
        "TIER=0,1TB,4TB (bytes or tokens); the configured size is always a point", show_default=False,
        rich_help_panel=TI)] = None,
    scenario: Annotated[str, typer.Option(
        "--scenario", "-s", help="scenario giving model, hardware, peak and MFU for --tiers (--model, --hardware, "
        "--gpus override it)", rich_help_panel=TI)] = "v4-flash-8xh100",
    engine: Annotated[Optional[str], typer.Option(
        "--engine", help="the node's KV budget (--hardware capacity, --tiers hbm tier): ideal (HBM x utilisation minus "
        "weights) | vllm | sglang (the KV pool the engine allocates, inputs estimated; see kvcalc capacity "
        "--engine)", show_default=False, rich_help_panel=R)] = None,
    engine_input: Annotated[Optional[list[str]], typer.Option(
        "--engine-input", help="with --engine: a value the engine's start-up log printed, NAME=VALUE (repeatable), "
        "NAME one of capacity's engine flags without dashes, e.g. weights-memory=14.08GiB; the rest estimated",
        show_default=False, rich_help_panel=R)] = None,
):
    """Replay a request trace through a prefix cache (LRU, FIFO, LFU or S3-FIFO): hit rate per capacity, or a curve.

    The LRU prefix cache keeps the blocks of earlier requests and evicts the least recently used (--policy fifo:
    the oldest inserted); this is the cache compare --trace gives strategy C, not compare's "A lru (no prefix
    reuse)", which reuses nothing.

    Token and block hit rates per capacity, plus the trace's own figures: requests, duration, input and output
    lengths (mean, percentiles) and its maximum hit rate (infinite cache).

    Semantics (B = --block-tokens): requests replay in file order; a request reuses the longest run of its
    leading hash ids already cached when it arrives, reused tokens = min(hit blocks x B, input length); then
    its blocks are inserted or refreshed (lru) in order, evicting beyond floor(capacity / B) whole blocks.
    A bad line stops with FILE:LINE (or is counted with --skip-bad); an empty trace is an error.

    Examples:

    \b
      kvcalc trace ../shared/traces/mooncake_synthetic_trace.jsonl  # if you have the shared folder
      kvcalc trace trace_0002.json --policy s3fifo --capacity 200k,1m  # kv-cache-tester, 64-token blocks
      kvcalc trace trace.jsonl.gz --trace-format full-blocks -b 64
      kvcalc trace trace.jsonl --replicas 4 --router prefix --capacity 3m
      kvcalc trace big.jsonl.gz --curve --sample-rate 0.01
      kvcalc trace hashed-ids.jsonl --capacity 3m,inf --exact-stats  # 64-bit ids: every id kept, exact
      kvcalc trace trace.jsonl --capacity 3m,10m,inf --format json --check 'token_hit_rate >= 0.3'
      kvcalc trace trace.jsonl --curve --curve-points 30 --model deepseek-v4-flash
      kvcalc trace trace.jsonl --capacity 80GB,160GB --model llama-3-70b --explain

    \b
      kvcalc trace trace.jsonl --curve --model deepseek-v4-flash --hardware h100-sxm --gpus 8 --plot curve.png
      kvcalc trace trace.jsonl --model llama-3-70b --hardware h100-sxm --gpus 8 --tiers hbm,dram,ssd
      kvcalc trace trace.jsonl --tiers hbm,dram --tier-capacity dram=1TB --tier-link dram=pcie-gen4-x16
      kvcalc trace trace.jsonl --model llama-3-70b --hardware h100-sxm --gpus 8 --engine vllm
      kvcalc trace trace.jsonl --model llama-3-70b --tiers hbm,dram,ssd --tier-curve dram --curve-points 10
      kvcalc trace trace.jsonl --tiers hbm,dram,ssd --tier-curve hbm=10m,20m,40m --format csv
    """
    from kvcalc.cli.common import check_format, emit, kv_options, refuse_unless
    from kvcalc.model import catalog
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import check_positive
    from kvcalc.trace.report import (DEFAULT_CAPACITIES, DEFAULT_CURVE_POINTS, TraceInputs, parse_capacity_list,
                                     trace_result)

    check_format(fmt)
    opts = kv_options(kv_dtype, mla_layout, indexer_dtype, mtp)
    if block_tokens is not None:
        check_positive(block_tokens, "--block-tokens", limit=MAX_BLOCK_TOKENS)
    check_positive(gpus, "--gpus", limit=MAX_GPUS)
    refuse_unless(ctx, tiers is not None, ["tier_copies", "scenario"], "--tiers")
    refuse_unless(ctx, tiers is not None or hardware is not None, ["gpus"], "--hardware (or --tiers)")
    from kvcalc.trace.formats import resolve_format, trace_block_tokens

    kind = resolve_format(file, trace_format)
    block_tokens = trace_block_tokens(file, kind, block_tokens)
    check_positive(block_tokens, "--block-tokens", limit=MAX_BLOCK_TOKENS)
    if engine is not None:
        from kvcalc.memory.engine_common import ENGINES

        if engine not in ENGINES:
            raise InputError(f"--engine: {engine!r} is not one of {', '.join(ENGINES)}")
        if tiers is None and hardware is None:
            raise InputError("--engine: sizes the node's KV budget; give --model and --hardware (or --tiers)")
    from kvcalc.cli.engine_opts import engine_input_sets

    logged = engine_input_sets(engine, engine_input)
    if tiers is not None:
        from kvcalc.cli.scenario_opts import overrides
        from kvcalc.serve.scenario import resolve
        from kvcalc.trace.tier_report import parse_request, tier_trace_result

        for flag, given in (("--capacity", capacity), ("--curve", curve),
                            ("--plot", plot), ("--policy", policy != "lru")):
            if given:
                raise InputError(f"{flag}: not with --tiers (tiers are LRU; give their sizes with --tier-capacity)")
        req = parse_request(str(file), tiers, tier_capacity, tier_link, block_tokens, tier_copies, skip_bad,
                            curve=tier_curve, curve_points=curve_points, trace_format=kind)
        cost_inputs = resolve(scenario, overrides(model=model, hardware=hardware, gpus=gpus, kv_options=opts,
                                                  engine=engine, engine_sets=engine_input))
        from kvcalc.out import progress

        with progress.shown("tiered replay"):
            if req.curve_tier is None:
                result = tier_trace_result(req, cost_inputs)
            else:
                from kvcalc.trace.tier_report import tier_curve_result

                result = tier_curve_result(req, cost_inputs)
        emit(result, fmt, check, explain)
        return
    for flag, given in (("--tier-capacity", tier_capacity), ("--tier-link", tier_link), ("--tier-curve", tier_curve)):
        if given:
            raise InputError(f"{flag}: only with --tiers")
    if replicas is not None:
        from kvcalc.trace.replicas import MAX_REPLICAS

        check_positive(replicas, "--replicas", limit=MAX_REPLICAS)
    if sample_rate is not None:
        from kvcalc.trace.sampled import SAMPLE_SPACE

        check_positive(sample_rate, "--sample-rate", limit=1.0, minimum=1 / SAMPLE_SPACE)
    if router != "round-robin" and replicas is None:
        raise InputError("--router: only with --replicas")
    if sample_rate is not None and not (curve or curve_points is not None):
        raise InputError("--sample-rate: samples the hit-rate curve; add --curve")
    if curve_points is not None:
        check_positive(curve_points, "--curve-points", limit=MAX_CURVE_POINTS)
    use_curve = curve or curve_points is not None
    specs = parse_capacity_list(capacity, "--capacity") if capacity is not None else (
        [] if use_curve else parse_capacity_list(DEFAULT_CAPACITIES))
    path = None
    if plot is not None:
        from kvcalc.out.plot import check_plot_path

        if not use_curve:
            raise InputError("--plot: draws the hit-rate curve; add --curve")
        path = check_plot_path(plot)
    if hardware is not None:
        if model is None:
            raise InputError("--hardware: needs --model (the node's KV budget depends on the weights and KV layout)")
        from kvcalc.trace.node_cache import node_cache_tokens
        from kvcalc.trace.report import CapacitySpec

        pool = "" if engine in (None, "ideal") else f" {engine} pool"
        specs = [*specs, CapacitySpec(f"{gpus} x {catalog.name_of(hardware)}{pool}", tokens=node_cache_tokens(
            catalog.load_model(model), catalog.load_hardware(hardware), gpus, block_tokens, opts,
            engine=engine or "ideal", engine_inputs=logged))]
    inp = TraceInputs(path=str(file), capacities=tuple(specs), block_tokens=block_tokens, policy=policy,
                      curve=use_curve, curve_points=curve_points or DEFAULT_CURVE_POINTS, skip_bad=skip_bad,
                      trace_format=kind, replicas=1 if replicas is None else replicas, router=router,
                      sample_rate=sample_rate, exact_stats=exact_stats)
    loaded = (catalog.name_of(model), catalog.load_model(model)) if model else None
    from kvcalc.out import progress

    if replicas is not None:
        from kvcalc.trace.replica_report import replica_result

        if plot is not None:
            raise InputError("--plot: not with --replicas")
        with progress.shown("replay over replicas"):
            result = replica_result(inp, loaded, opts)
        emit(result, fmt, check, explain)
        return
    with progress.shown(f"{POLICY_NAMES.get(policy, policy)} replay"):
        result = trace_result(inp, loaded, opts)
    if path is not None:
        from kvcalc.out.plot import write_curve

        write_curve(path, result.rows, "capacity_tokens", "token_hit_rate", "capacity",
                    result.main.title + (f"; {loaded[0]}" if loaded else ""))
    emit(result, fmt, check, explain)
