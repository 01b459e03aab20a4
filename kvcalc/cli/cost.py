"""``kvcalc cost``: one strategy's prefill, TTFT, KV held, decode and $/M tokens on a scenario."""

from typing import Annotated

import typer

from kvcalc.cli.common import WeightsDtypeOpt, CheckOpt, ExplainOpt, FormatOpt, IndexerDtypeOpt, KvDtypeOpt, MlaLayoutOpt, MtpOpt
from kvcalc.cli.scenario_opts import (AttnOpt, KvCompressionOpt, ContextOpt, DecodeOpt, EngineInputOpt, EngineOpt, GpusOpt, HardwareOpt, MfuOpt, ModelOpt, OutputOpt,
                                      PdLinkOpt, PdOverlapOpt, PdSplitOpt, PriceOpt, TtftOpt, RequestsOpt, ScenarioOpt, SharedOpt, WarmOpt,
                                      WorkloadOpt)


def cost(
    strategy: Annotated[str, typer.Option("--strategy", help="lru (shown as \"A lru (no prefix reuse)\": every request prefills its whole context; lru names its eviction to DRAM/SSD, not trace's LRU prefix cache) | prefix-tree (\"C prefix-tree\": radix tree + reference counts)")] = "prefix-tree",
    scenario: ScenarioOpt = None, model: ModelOpt = None, hardware: HardwareOpt = None, gpus: GpusOpt = None,
    workload: WorkloadOpt = None, price_per_gpu_hour: PriceOpt = None, mfu_prefill: MfuOpt = None,
    decode_tokens_per_s: DecodeOpt = None, warm: WarmOpt = None, attention_flops: AttnOpt = None, ttft_model: TtftOpt = None,
    pd_link: PdLinkOpt = None, pd_overlap_us: PdOverlapOpt = None, pd_split: PdSplitOpt = None,
    requests: RequestsOpt = None, context: ContextOpt = None, output_tokens: OutputOpt = None,
    shared_prefix: SharedOpt = None, kv_dtype: KvDtypeOpt = None, mla_layout: MlaLayoutOpt = None,
    indexer_dtype: IndexerDtypeOpt = None, mtp: MtpOpt = False, weights_dtype: WeightsDtypeOpt = None, engine: EngineOpt = None, engine_input: EngineInputOpt = None, kv_compression: KvCompressionOpt = None,
    fmt: FormatOpt = "table", check: CheckOpt = None, explain: ExplainOpt = False,
):
    """One strategy on one scenario: prefill tokens and FLOPs, TTFT, KV held, decode speed, $ per M tokens.

    Strategies: A lru (no prefix reuse): every request prefills its whole context, "lru" being how it evicts to
    DRAM/SSD when the KV outgrows HBM (not a prefix cache); C prefix-tree: a radix tree with reference counts
    prefills each shared prefix once. JSON and CSV name them lru and prefix-tree.

    Examples:

    \b
      kvcalc cost --strategy prefix-tree
      kvcalc cost --strategy lru --scenario v4-flash-8xh100 --explain
      kvcalc cost --requests 64 --context 16k --shared-prefix 4k --shared-prefix 1k:8 --format json
      kvcalc cost --strategy prefix-tree --scenario v4-flash-pd-ib
    """
    from kvcalc.cli.common import check_format, emit, kv_options
    from kvcalc.cli.scenario_opts import overrides
    from kvcalc.out.errors import InputError
    from kvcalc.serve.cost import cost_result
    from kvcalc.serve.scenario import resolve
    from kvcalc.serve.strategies import STRATEGIES

    check_format(fmt)
    if strategy not in STRATEGIES:
        raise InputError(f"--strategy: {strategy!r} is not one of {', '.join(STRATEGIES)}")
    o = overrides(model=model, hardware=hardware, gpus=gpus, workload=workload, price=price_per_gpu_hour,
                  mfu=mfu_prefill, decode=decode_tokens_per_s, warm=warm, attention=attention_flops,
                  requests=requests, context=context, output=output_tokens, shared=shared_prefix,
                  pd_link=pd_link, pd_overlap_us=pd_overlap_us, pd_split=pd_split, ttft_model=ttft_model, engine=engine, engine_sets=engine_input,
                  kv_options=kv_options(kv_dtype, mla_layout, indexer_dtype, mtp), weights_dtype=weights_dtype,
                  kv_compression=kv_compression)
    emit(cost_result(resolve(scenario, o), strategy), fmt, check, explain)
