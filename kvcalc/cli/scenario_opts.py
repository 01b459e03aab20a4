"""Options shared by ``cost`` and ``compare``: the scenario and its overrides (parsed here, no arithmetic)."""

from typing import Annotated, Optional

import typer

from kvcalc.out.units import (MAX_BLOCK_TOKENS, MAX_DECODE_TOKENS_PER_S, MAX_GPUS, MAX_OVERLAP_US, MAX_REPLICAS,
                              MAX_REQUESTS, MAX_TOKENS, MAX_USD_PER_GPU_HOUR, MIN_DECODE_TOKENS_PER_S, MIN_MFU)

P = "Scenario overrides"
ScenarioOpt = Annotated[Optional[str], typer.Option("--scenario", "-s", help="scenario preset or TOML path "
                                                    "(article = the article's own assumptions; default: article, or "
                                                    "a scenario derived from the hardware with --model/--hardware)",
                                                    show_default=False)]
ModelOpt = Annotated[Optional[str], typer.Option("--model", "-m", help="model preset or TOML path", rich_help_panel=P)]
HardwareOpt = Annotated[Optional[str], typer.Option("--hardware", help="hardware preset or TOML path", rich_help_panel=P)]
GpusOpt = Annotated[Optional[int], typer.Option("--gpus", help=f"GPUs in the node (1 to {MAX_GPUS:,})", rich_help_panel=P)]
WorkloadOpt = Annotated[Optional[str], typer.Option("--workload", "-w", help="workload preset or TOML path", rich_help_panel=P)]
PriceOpt = Annotated[Optional[float], typer.Option("--price-per-gpu-hour", help=f"USD per GPU-hour (at most {MAX_USD_PER_GPU_HOUR:,.0f})", rich_help_panel=P)]
MfuOpt = Annotated[Optional[str], typer.Option("--mfu-prefill", help=f"prefill MFU in [{MIN_MFU:g}, 1], e.g. 0.2 or 20%", rich_help_panel=P)]
DecodeOpt = Annotated[Optional[float], typer.Option("--decode-tokens-per-s", help=f"decode speed per request [tok/s] ({MIN_DECODE_TOKENS_PER_S:g} to {MAX_DECODE_TOKENS_PER_S:,.0f})", rich_help_panel=P)]
WarmOpt = Annotated[Optional[bool], typer.Option("--warm/--cold", help="shared segments already cached (warm) or not", show_default=False, rich_help_panel=P)]
PdLinkOpt = Annotated[Optional[str], typer.Option("--pd-link", help="prefill -> decode link preset or TOML path: disaggregated serving, shows the KV hand-off", rich_help_panel=P)]
PdSplitOpt = Annotated[Optional[str], typer.Option("--pd-split", help=f"with --pd-link, on the serving model: prefill engines : decode engines (each 1 to {MAX_REPLICAS:,}), each engine --gpus / (P + D) GPUs (e.g. 1:3 or plan's 1P:3D; default: the scenario's pd_split, else 1:1, half and half)", show_default=False, rich_help_panel=P)]
PdOverlapOpt = Annotated[Optional[float], typer.Option("--pd-overlap-us", help=f"window a speculative prefetch hides the hand-off behind [us] (default: one decode step; at most {MAX_OVERLAP_US:,.0f})", rich_help_panel=P)]
TtftOpt = Annotated[Optional[str], typer.Option("--ttft-model", help="processor-sharing | fcfs | even-split (the article's): how requests arriving together share prefill compute", show_default=False, rich_help_panel=P)]
AttnOpt = Annotated[Optional[bool], typer.Option("--attention-flops/--no-attention-flops", help="count attention FLOPs in prefill", show_default=False, rich_help_panel=P)]
EngineOpt = Annotated[Optional[str], typer.Option("--engine", help="KV budget: ideal (HBM x utilisation minus weights) | vllm | "
                     "sglang (the engine's KV pool, inputs estimated; see kvcalc capacity --engine)", rich_help_panel=P)]
EngineInputOpt = Annotated[Optional[list[str]], typer.Option("--engine-input", help="with --engine: a value the engine's start-up log printed, NAME=VALUE (repeatable), NAME one of capacity's engine flags without dashes, e.g. weights-memory=14.08GiB, gpu-memory-utilization=0.9, total-memory=79.19GiB; the rest estimated", show_default=False, rich_help_panel=P)]
KvCompressionOpt = Annotated[Optional[float], typer.Option("--kv-compression", help="what-if (the article's section 11, an unproven hypothesis): KV stored, read and moved / FACTOR (1 to 10,000)", show_default=False, rich_help_panel=P)]
W = "Inline workload (instead of --workload)"
RequestsOpt = Annotated[Optional[int], typer.Option("--requests", help=f"number of requests (1 to {MAX_REQUESTS:,})", rich_help_panel=W)]
ContextOpt = Annotated[Optional[str], typer.Option("--context", "-c", help=f"context tokens per request (4k = 4,096; at most {MAX_TOKENS:,})", rich_help_panel=W)]
OutputOpt = Annotated[Optional[int], typer.Option("--output-tokens", help=f"output tokens per request (default 500; at most {MAX_TOKENS:,})", rich_help_panel=W)]
SharedOpt = Annotated[Optional[list[str]], typer.Option("--shared-prefix", help="TOKENS[:GROUPS] shared prefix segment (repeatable, nested in order; GROUPS at most --requests)", rich_help_panel=W)]
T = "Request trace (instead of the workload)"
TraceOpt = Annotated[Optional[str], typer.Option("--trace", help="request trace with hash ids (Mooncake JSONL, full-block JSONL, kv-cache-tester JSON; .gz/.zst too; see --trace-format): its requests replace the workload; C prefix-tree reuses what an LRU prefix cache held for each request, A lru (no prefix reuse) nothing", show_default=False, rich_help_panel=T)]
TraceCapacityOpt = Annotated[Optional[str], typer.Option("--capacity", help="the LRU prefix cache for C: tokens (3m = 3,000,000), bytes (80GB, via the model's KV block) or inf (default: inf)", show_default=False, rich_help_panel=T)]
TraceBlockOpt = Annotated[Optional[int], typer.Option("--block-tokens", help=f"tokens per hash id in the trace (default: the trace's own block_size (kv-cache-tester), else 512; at most {MAX_BLOCK_TOKENS:,})", show_default=False, rich_help_panel=T)]
TraceFormatOpt = Annotated[str, typer.Option("--trace-format", help="auto (by content) | mooncake | full-blocks | kv-cache-tester (see kvcalc trace --trace-format; the lengths-only CSVs have no hash ids to replay: kvcalc bench --trace reads them)", rich_help_panel=T)]
SkipBadOpt = Annotated[bool, typer.Option("--skip-bad", help="skip and count bad trace lines instead of stopping", rich_help_panel=T)]
TiersOpt = Annotated[Optional[str], typer.Option("--tiers", help="with --trace: replay A and C through exclusive tiers, fastest first: hbm,dram,ssd", show_default=False, rich_help_panel=T)]
TierCapacityOpt = Annotated[Optional[list[str]], typer.Option("--tier-capacity", help="tier=VALUE, bytes (dram=1TB) or tokens (ssd=200m); default: hbm = KV budget after weights, dram/ssd from the hardware preset", show_default=False, rich_help_panel=T)]
TierLinkOpt = Annotated[Optional[list[str]], typer.Option("--tier-link", help="tier=LINK a lower tier loads over (default: dram = the hardware's host_link, ssd = nvme-gen5)", show_default=False, rich_help_panel=T)]
SinkOpt = Annotated[int, typer.Option("--sink-tokens", help=f"with --tiers: A never evicts the blocks of each request's first N tokens (the article's attention sinks, ~64; at most {MAX_TOKENS:,})", rich_help_panel=T)]
WindowOpt = Annotated[int, typer.Option("--window-tokens", help=f"with --tiers: A never evicts the blocks of each request's last N tokens (the article's recent window, ~128; at most {MAX_TOKENS:,})", rich_help_panel=T)]
TierCopiesOpt = Annotated[str, typer.Option("--tier-copies", help="coalesced (one copy per request per tier) | per-block", rich_help_panel=T)]


def overrides(*, model=None, hardware=None, gpus=None, workload=None, price=None, mfu=None, decode=None, warm=None,
              attention=None, requests=None, context=None, output=None, shared=None, pd_link=None,
              pd_overlap_us=None, kv_options=None, ttft_model=None, engine=None, engine_sets=None,
              weights_dtype=None, kv_compression=None, pd_split=None):
    """Validate the flags -> scenario.Overrides (InputError naming the flag)."""
    from kvcalc.cli.common import check_weights_dtype
    from kvcalc.cli.engine_opts import engine_input_sets
    from kvcalc.model.attention import KvOptions
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import check_option, option_minimum, parse_fraction, parse_pd_split, parse_tokens, us_to_s
    from kvcalc.serve.scenario import Overrides
    from kvcalc.serve.ttft import TTFT_MODELS
    from kvcalc.serve.workload import inline_workload, parse_shared_prefix

    # the bounds a sweep axis of the same name shares (units.OPTION_BOUNDS)
    for name, v in (("gpus", gpus), ("price-per-gpu-hour", price), ("decode-tokens-per-s", decode),
                    ("pd-overlap-us", pd_overlap_us), ("output-tokens", output), ("kv-compression", kv_compression)):
        if v is not None:
            check_option(name, v)
    if ttft_model is not None and ttft_model not in TTFT_MODELS:
        raise InputError(f"--ttft-model: {ttft_model!r} is not one of {', '.join(TTFT_MODELS)}")
    if engine is not None:
        from kvcalc.memory.engine_common import ENGINES

        if engine not in ENGINES:
            raise InputError(f"--engine: {engine!r} is not one of {', '.join(ENGINES)}")
    inline = None
    if requests is not None or context is not None or shared:
        if workload:
            raise InputError("--workload: give a workload preset or the inline flags (--requests, --context, "
                             "--shared-prefix), not both")
        if requests is None or context is None:
            raise InputError("--requests and --context are both needed for an inline workload")
        check_option("requests", requests)
        inline = inline_workload(requests, parse_tokens(context, "--context"), 500 if output is None else output,
                                 [parse_shared_prefix(s) for s in (shared or [])])
    return Overrides(model=model, hardware=hardware, gpus=gpus, workload=workload, inline_workload=inline,
                     usd_per_gpu_hour=price, mfu_prefill=parse_fraction(mfu, "--mfu-prefill", option_minimum("mfu-prefill")) if mfu else None,
                     decode_tokens_per_s=decode, warm=warm, attention_flops=attention,
                     kv_options=kv_options or KvOptions(), pd_link=pd_link,
                     pd_overlap_s=us_to_s(pd_overlap_us) if pd_overlap_us is not None else None,
                     ttft_model=ttft_model, engine=engine, engine_inputs=engine_input_sets(engine, engine_sets),
                     weights_dtype=check_weights_dtype(weights_dtype), kv_compression=kv_compression,
                     pd_split=parse_pd_split(pd_split) if pd_split is not None else None)


def trace_flags(trace, capacity, block_tokens, skip_bad, workload, requests, context, output, shared, warm,
                trace_format="auto"):
    """Validate the --trace flags -> (capacity spec, block tokens, format) or None without --trace (InputError
    naming the flag); the block size defaults to the trace's own (kv-cache-tester), else 512."""
    from kvcalc.out.errors import InputError
    from kvcalc.out.units import check_positive

    if trace is None:
        for flag, value in (("--capacity", capacity), ("--block-tokens", block_tokens),
                            ("--skip-bad", skip_bad or None), ("--trace-format", None if trace_format == "auto" else 1)):
            if value is not None:
                raise InputError(f"{flag}: only with --trace FILE")
        return None
    if workload or requests is not None or context is not None or output is not None or shared:
        raise InputError("--trace: the trace replaces the workload; drop --workload and the inline workload flags")
    if warm is not None:
        raise InputError("--warm/--cold: not used with --trace (the replayed cache starts empty and fills "
                         "as the trace runs)")
    if block_tokens is not None:
        check_positive(block_tokens, "--block-tokens", limit=MAX_BLOCK_TOKENS)
    from kvcalc.trace.formats import resolve_format, trace_block_tokens
    from kvcalc.trace.report import parse_capacity

    spec = parse_capacity(capacity if capacity is not None else "inf", "--capacity")
    kind = resolve_format(trace, trace_format)
    block = trace_block_tokens(trace, kind, block_tokens)
    check_positive(block, "--block-tokens", limit=MAX_BLOCK_TOKENS)
    return spec, block, kind
