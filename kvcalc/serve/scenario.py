"""Resolve a scenario preset plus command-line overrides into CostInputs (loading every preset it names).

No scenario named: with neither --model nor --hardware, the article's case (``article``); with either, a
*derived* scenario, so a user's model is not costed with the article's MFU 1 and 2,000 TFLOP/s: attention FLOPs
on, the hardware's datasheet dense peak for the model's compute dtype (BF16 for a 2-byte model, FP8 for 1 byte,
FP4 below), the hardware preset's price, and the measured prefill MFU, decode rate and utilisations of
``v4-flash-8xh100`` (``DERIVED_BASE``), whose workload and GPU count it also keeps unless overridden.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from kvcalc.model import catalog
from kvcalc.model.attention import KvOptions
from kvcalc.out import units
from kvcalc.out.errors import InputError
from kvcalc.serve.compute import compute_dtype
from kvcalc.serve.cost import CostInputs
from kvcalc.serve.ttft import TTFT_MODELS


@dataclass(frozen=True)
class Overrides:
    """What the user changed on the command line; None = keep the scenario's value."""

    model: Optional[str] = None
    hardware: Optional[str] = None
    gpus: Optional[int] = None
    workload: Optional[str] = None
    inline_workload: Optional[object] = None   # a WorkloadPreset built from --requests/--context/...
    usd_per_gpu_hour: Optional[float] = None
    mfu_prefill: Optional[float] = None
    decode_tokens_per_s: Optional[float] = None
    warm: Optional[bool] = None
    attention_flops: Optional[bool] = None
    kv_options: KvOptions = KvOptions()
    pd_link: Optional[str] = None
    pd_overlap_s: Optional[float] = None
    engine: Optional[str] = None   # ideal | vllm | sglang: the KV budget
    engine_inputs: Optional[object] = None  # an EngineInputs (--engine-input), None: estimated
    ttft_model: Optional[str] = None
    weights_dtype: Optional[str] = None   # --weights-dtype: the linear layers' format (model/weights_dtype.py)
    kv_compression: Optional[float] = None  # --kv-compression: the article's section-11 what-if
    pd_split: Optional[tuple] = None   # --pd-split P:D, parsed: (prefill engines, decode engines)


DERIVED_BASE = "v4-flash-8xh100"


def resolve(scenario_ref: Optional[str], o: Overrides = Overrides()) -> CostInputs:
    """Load the scenario and what it names, apply overrides -> CostInputs (InputError on anything bad).
    ``scenario_ref`` None: the article's case, or a derived scenario when --model or --hardware is given."""
    derived = scenario_ref is None and (o.model is not None or o.hardware is not None)
    name = DERIVED_BASE if derived else (scenario_ref or "article")
    sc = catalog.load("scenarios", name)
    model_ref = o.model or sc.model
    from kvcalc.model.weights_dtype import with_weights_dtype

    model = with_weights_dtype(catalog.load_model(model_ref), o.weights_dtype)
    hw_ref = o.hardware or sc.hardware
    hw = catalog.load_hardware(hw_ref)
    if o.inline_workload is not None:
        w_name, w = "command line", o.inline_workload
    else:
        w_ref = o.workload or sc.workload
        w_name, w = catalog.name_of(w_ref), catalog.load("workloads", w_ref)
    same_hw = hw_ref == sc.hardware and not derived
    if name == "article" and same_hw:  # the article's stated 80 GB per H100 (datasheet GB), as capacity's article view
        from dataclasses import replace

        hw = replace(hw, cuda_total_gib=None, cuda_total_source=None)
    pd_ref = o.pd_link or sc.pd_link
    if o.pd_overlap_s is not None and not pd_ref:  # else silently ignored: no hand-off to hide
        raise InputError("--pd-overlap-us: only applies with --pd-link (or a scenario with a pd_link)")
    split, split_src = _pd_split(o, sc, pd_ref, name)
    dtype = compute_dtype(model.weight_bytes_per_param) if derived else sc.compute_dtype
    if sc.peak_tflops_per_gpu is not None and same_hw:
        peak, peak_src = units.tflops_to_flops(sc.peak_tflops_per_gpu), sc.peak_source or sc.source
    else:
        peak, peak_src = hw.peak_flops(dtype), f"{hw.display_name} dense {dtype} datasheet" + (
            f" ({model.weight_bytes_per_param:g} B/param weights)" if derived else "")
    if o.usd_per_gpu_hour is not None:
        price, price_src = o.usd_per_gpu_hour, "--price-per-gpu-hour"
    elif sc.usd_per_gpu_hour is not None and same_hw:
        price, price_src = sc.usd_per_gpu_hour, sc.price_source or sc.source
    else:
        price, price_src = hw.usd_per_gpu_hour, hw.usd_per_gpu_hour_source
    from kvcalc.serve.served import serving_reason

    stated = serving_reason(name if not derived else "derived", model, o.decode_tokens_per_s is not None,
                            o.mfu_prefill is not None)
    if stated and o.pd_split is not None:  # else silently unused
        raise InputError(f"--pd-split: the prefill/decode engines are simulated on the serving model only, and "
                         f"this run keeps {stated}")
    return CostInputs(
        decode_model="stated" if stated else "serving", kv_compression=o.kv_compression,
        pd_split=split if pd_ref and not stated else None,
        model_name=catalog.name_of(model_ref), model=model, scenario_name=f"derived ({name}'s MFU and decode)"
        if derived else catalog.name_of(name), ttft_model=o.ttft_model or sc.ttft_model,
        hardware_name=catalog.name_of(hw_ref), hardware=hw, gpus=o.gpus or sc.gpus,
        workload_name=w_name, workload=w, usd_per_gpu_hour=price, peak_flops_per_gpu=peak,
        mfu_prefill=o.mfu_prefill if o.mfu_prefill is not None else sc.mfu_prefill,
        attention_flops=o.attention_flops if o.attention_flops is not None else (derived or sc.attention_flops),
        decode_tokens_per_s=o.decode_tokens_per_s if o.decode_tokens_per_s is not None else sc.decode_tokens_per_s,
        mfu_decode=sc.mfu_decode, hbm_bandwidth_utilization=sc.hbm_bandwidth_utilization,
        hbm_utilization=sc.hbm_utilization, warm=o.warm if o.warm is not None else sc.warm,
        kv_options=o.kv_options, engine=o.engine or "ideal", engine_inputs=o.engine_inputs,
        pd_link_name=catalog.name_of(pd_ref) if pd_ref else None,
        pd_link=catalog.load_link(pd_ref) if pd_ref else None,
        pd_overlap_s=o.pd_overlap_s if o.pd_overlap_s is not None else
        (units.us_to_s(sc.pd_overlap_us) if sc.pd_overlap_us is not None else None),
        sources={"peak": peak_src, "price": price_src,
                 "scenario": ("no --scenario with --model/--hardware: attention FLOPs on, the hardware's dense "
                              f"{dtype} peak for the model's weights, its own price, {name}'s measured MFU, decode "
                              "and utilisations" if derived else sc.source),
                 "ttft": ("--ttft-model: " if o.ttft_model else "") + TTFT_MODELS[o.ttft_model or sc.ttft_model],
                 "decode_model": stated or "", "mfu": "--mfu-prefill" if o.mfu_prefill is not None else sc.mfu_source,
                 "decode": "--decode-tokens-per-s" if o.decode_tokens_per_s is not None else
                 (sc.decode_source or "roofline")} | ({} if not pd_ref else {
                     "pd": ("--pd-link" if o.pd_link else "the scenario") + ": prefill and decode on separate nodes; "
                           "overlap " + ("given" if (o.pd_overlap_s is not None or sc.pd_overlap_us is not None)
                                         else "= one decode step"), "pd_split": split_src}))


def _pd_split(o: Overrides, sc, pd_ref, name: str) -> tuple[tuple[int, int], str]:
    """The prefill : decode engines of a disaggregated run and where they come from: --pd-split, the scenario's
    pd_split, or half and half (1:1) -> ((P, D), source)."""
    if o.pd_split is not None:
        if not pd_ref:
            raise InputError("--pd-split: only applies with --pd-link (or a scenario with a pd_link)")
        return o.pd_split, "--pd-split"
    if sc.pd_split is not None:
        return units.parse_pd_split(sc.pd_split, f"scenario {name}: pd_split"), (
            f"the scenario's pd_split: {sc.pd_split_source}" if sc.pd_split_source else "the scenario's pd_split")
    return (1, 1), "half and half (the default: one prefill and one decode engine, each gpus / 2 GPUs)"
