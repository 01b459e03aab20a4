"""``kvcalc cost``: one strategy's prefill, TTFT, KV held, decode and $/M tokens on a scenario."""

from __future__ import annotations

from typing import Annotated

import typer

from kvcalc.cli.common import CheckOpt, ExplainOpt, FormatOpt
from kvcalc.cli.scenario_opts import (AttnOpt, ContextOpt, DecodeOpt, GpusOpt, HardwareOpt, MfuOpt, ModelOpt,
                                      OutputOpt, PriceOpt, RequestsOpt, ScenarioOpt, SharedOpt, WarmOpt,
                                      WorkloadOpt)


def cost(
    strategy: Annotated[str, typer.Option("--strategy", help="lru (A: no prefix reuse) | prefix-tree (C: radix tree + ref counts)")] = "prefix-tree",
    scenario: ScenarioOpt = "article", model: ModelOpt = None, hardware: HardwareOpt = None, gpus: GpusOpt = None,
    workload: WorkloadOpt = None, price_per_gpu_hour: PriceOpt = None, mfu_prefill: MfuOpt = None,
    decode_tokens_per_s: DecodeOpt = None, warm: WarmOpt = None, attention_flops: AttnOpt = None,
    requests: RequestsOpt = None, context: ContextOpt = None, output_tokens: OutputOpt = None,
    shared_prefix: SharedOpt = None, fmt: FormatOpt = "table", check: CheckOpt = None, explain: ExplainOpt = False,
):
    """One strategy on one scenario: prefill tokens and FLOPs, TTFT, KV held, decode speed, $ per M tokens.

    Examples:

      kvcalc cost --strategy prefix-tree

      kvcalc cost --strategy lru --scenario v4-flash-8xh100 --explain

      kvcalc cost --requests 64 --context 16k --shared-prefix 4k --shared-prefix 1k:8 --format json
    """
    from kvcalc.cli.common import check_format, emit
    from kvcalc.cli.scenario_opts import overrides
    from kvcalc.cost import cost_result
    from kvcalc.errors import InputError
    from kvcalc.scenario import resolve
    from kvcalc.strategies import STRATEGIES

    check_format(fmt)
    if strategy not in STRATEGIES:
        raise InputError(f"--strategy: {strategy!r} is not one of {', '.join(STRATEGIES)}")
    o = overrides(model, hardware, gpus, workload, price_per_gpu_hour, mfu_prefill, decode_tokens_per_s, warm,
                  attention_flops, requests, context, output_tokens, shared_prefix)
    emit(cost_result(resolve(scenario, o), strategy), fmt, check, explain)
