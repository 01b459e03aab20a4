"""``kvcalc compare``: strategies A (lru) and C (prefix-tree) side by side on one scenario, with deltas."""

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import (CheckOpt, ExplainOpt, FormatOpt, IndexerDtypeOpt, KvDtypeOpt, MlaLayoutOpt, MtpOpt,
                               WeightsDtypeOpt)
from kvcalc.cli.scenario_opts import (AttnOpt, KvCompressionOpt, ContextOpt, DecodeOpt, EngineInputOpt, EngineOpt, GpusOpt, HardwareOpt, MfuOpt, ModelOpt,
                                      OutputOpt, PdLinkOpt, PdOverlapOpt, PdSplitOpt, PriceOpt, RequestsOpt, ScenarioOpt, SharedOpt,
                                      SinkOpt, SkipBadOpt, TierCapacityOpt, TierCopiesOpt, TierLinkOpt, TiersOpt,
                                      TraceBlockOpt, TraceCapacityOpt, TraceFormatOpt, TraceOpt, TtftOpt, WarmOpt, WindowOpt, WorkloadOpt)


def compare(
    ctx: typer.Context,
    scenario: ScenarioOpt = None, model: ModelOpt = None, hardware: HardwareOpt = None, gpus: GpusOpt = None,
    workload: WorkloadOpt = None, price_per_gpu_hour: PriceOpt = None, mfu_prefill: MfuOpt = None,
    decode_tokens_per_s: DecodeOpt = None, warm: WarmOpt = None, attention_flops: AttnOpt = None, ttft_model: TtftOpt = None,
    pd_link: PdLinkOpt = None, pd_overlap_us: PdOverlapOpt = None, pd_split: PdSplitOpt = None, requests: RequestsOpt = None, context: ContextOpt = None, output_tokens: OutputOpt = None,
    shared_prefix: SharedOpt = None, trace: TraceOpt = None, capacity: TraceCapacityOpt = None,
    block_tokens: TraceBlockOpt = None, trace_format: TraceFormatOpt = "auto", skip_bad: SkipBadOpt = False, kv_dtype: KvDtypeOpt = None,
    mla_layout: MlaLayoutOpt = None, indexer_dtype: IndexerDtypeOpt = None, mtp: MtpOpt = False, weights_dtype: WeightsDtypeOpt = None,
    engine: EngineOpt = None, engine_input: EngineInputOpt = None, kv_compression: KvCompressionOpt = None, fmt: FormatOpt = "table",
    check: CheckOpt = None, explain: ExplainOpt = False,
    tiers: TiersOpt = None, tier_capacity: TierCapacityOpt = None, tier_link: TierLinkOpt = None,
    tier_copies: TierCopiesOpt = "coalesced", sink_tokens: SinkOpt = 0, window_tokens: WindowOpt = 0,
    replicas: Annotated[Optional[int], typer.Option(
        "--replicas", help="with --trace: C's reuse measured on N replicas behind --router, each with the "
        "--capacity cache (1 to 1,024)", show_default=False)] = None,
    router: Annotated[str, typer.Option(
        "--router", help="with --replicas: round-robin | least-loaded | session | prefix (see kvcalc trace)")]
    = "round-robin",
):
    """Strategy A lru (no prefix reuse) vs C prefix-tree on one workload: absolute and relative deltas, TTFT per
    request class, and every assumption with its source.

    A lru (no prefix reuse) prefills every request's whole context; "lru" is how it evicts to DRAM/SSD when the KV
    outgrows HBM, not a prefix cache (unlike trace's LRU prefix cache). C prefix-tree (a radix tree with reference
    counts) prefills each shared prefix once. JSON and CSV name them lru and prefix-tree.

    With no options: the article's case under the article's own assumptions (its stated 60 tok/s decode). Every
    other scenario runs the workload through kvcalc bench's scheduler and calibrated step time: TTFT, TPOT,
    throughput, wall and GPU time, and $/M from that run.

    Examples:

    \b
      kvcalc compare
      kvcalc compare --scenario v4-flash-8xh100 --explain
      kvcalc compare --model llama-3-70b --hardware h200-sxm --requests 100 --context 8k --shared-prefix 2k
      kvcalc compare --scenario v4-flash-8xh100 --trace trace.jsonl --capacity 3m
      kvcalc compare --trace trace.jsonl --capacity 3m --replicas 4 --router prefix
      kvcalc compare --scenario v4-flash-8xh100 --pd-link ib-ndr400
      kvcalc compare --model qwen3-14b --hardware h100-sxm --gpus 4 --pd-link ib-ndr400 --pd-split 1:3
      kvcalc compare --model qwen3-32b --hardware a100-80g --gpus 1 --requests 200 --context 4k --kv-compression 4

    With --trace FILE the trace's requests replace the workload: A prefills every input token; C reuses each
    request's measured prefix hits in an LRU cache of --capacity (default inf) with --block-tokens blocks.

    With --trace FILE --tiers hbm,dram,ssd both strategies replay the trace through the same tiers: A a tiered LRU,
    C pins the blocks of requests in flight; per-tier hits, load time, TTFT mean/p50/p90/p99 under a FIFO
    prefill queue in arrival order, and $/M from the measured reuse:

    \b
      kvcalc compare --scenario v4-flash-8xh100 --trace trace.jsonl --tiers hbm,dram,ssd
    """
    from kvcalc.cli.common import check_format, emit, kv_options, refuse_unless
    from kvcalc.cli.scenario_opts import overrides, trace_flags
    from kvcalc.serve.cost import compare_result
    from kvcalc.serve.scenario import resolve

    check_format(fmt)
    refuse_unless(ctx, tiers is not None, ["tier_copies"], "--trace FILE --tiers")
    from kvcalc.out.units import MAX_TOKENS, check_positive

    for flag, value in (("--sink-tokens", sink_tokens), ("--window-tokens", window_tokens)):
        if value:
            check_positive(value, flag, allow_zero=True, limit=MAX_TOKENS)
    traced = trace_flags(trace, capacity, block_tokens, skip_bad, workload, requests, context, output_tokens,
                         shared_prefix, warm, trace_format)
    if replicas is not None or router != "round-robin":
        from kvcalc.out.errors import InputError
        from kvcalc.trace.replicas import MAX_REPLICAS, check_replicas

        if replicas is not None:
            check_positive(replicas, "--replicas", limit=MAX_REPLICAS)
        if traced is None or tiers is not None or replicas is None:
            raise InputError(f"{'--replicas' if replicas is not None else '--router'}: only with --trace FILE "
                             "(without --tiers)" + ("" if replicas is not None else " and --replicas"))
        check_replicas(replicas, router)
    o = overrides(model=model, hardware=hardware, gpus=gpus, workload=workload, price=price_per_gpu_hour,
                  mfu=mfu_prefill, decode=decode_tokens_per_s, warm=warm, attention=attention_flops,
                  requests=requests, context=context, output=output_tokens, shared=shared_prefix,
                  pd_link=pd_link, pd_overlap_us=pd_overlap_us, pd_split=pd_split, ttft_model=ttft_model, engine=engine, engine_sets=engine_input,
                  kv_options=kv_options(kv_dtype, mla_layout, indexer_dtype, mtp), weights_dtype=weights_dtype,
                  kv_compression=kv_compression)
    if tiers is not None:
        from kvcalc.trace.tier_compare import tier_compare_result
        from kvcalc.trace.tier_report import parse_request

        if trace is None or capacity is not None:
            from kvcalc.out.errors import InputError

            raise InputError("--tiers: needs --trace FILE, and takes --tier-capacity instead of --capacity")
        if pd_split is not None:  # the tiered replay prices the hand-off beside it, on no engines
            from kvcalc.out.errors import InputError

            raise InputError("--pd-split: not with --tiers (the tiered replay runs no prefill or decode engines)")
        req = parse_request(trace, tiers, tier_capacity, tier_link, traced[1], tier_copies, skip_bad, sink_tokens,
                            window_tokens, trace_format=traced[2])
        from kvcalc.out import progress

        inp = resolve(scenario, o)
        with progress.shown("A and C tiered replay"):
            result = tier_compare_result(inp, req)
        emit(result, fmt, check, explain)
        return
    for flag, given in (("--tier-capacity", tier_capacity), ("--tier-link", tier_link), ("--sink-tokens", sink_tokens),
                        ("--window-tokens", window_tokens)):
        if given:
            from kvcalc.out.errors import InputError

            raise InputError(f"{flag}: only with --trace FILE --tiers")
    if traced is None:
        emit(compare_result(resolve(scenario, o)), fmt, check, explain)
        return
    from kvcalc.trace.cost import trace_compare_result

    from kvcalc.out import progress

    spec, block, kind = traced
    inp = resolve(scenario, o)
    with progress.shown("C's LRU replay"):
        result = trace_compare_result(inp, trace, spec, block, skip_bad, replicas, router, kind)
    emit(result, fmt, check, explain)
