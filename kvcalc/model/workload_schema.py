"""Workload and scenario presets: request classes + shared prefix segments, and a scenario (model + hardware +
workload + assumptions), as preset dataclasses (validated like :mod:`kvcalc.model.schema`'s), plus the checks
that tie a workload together.

Shared segments are nested prefixes, in file order (e.g. a system prompt shared by all requests, then a
few-shot block shared within each group). Requests are numbered class by class in file order; segment s with
g groups puts request i (of N) in group floor(i x g / N): contiguous groups of N/g requests.
"""

# No ``from __future__ import annotations``: schema.build() reads the field types as objects.
from dataclasses import dataclass, field
from typing import Annotated, Literal, Optional

from kvcalc.model.schema import STRICT, Bounds, TokenCount, Tflops, UsdPerGpuHour
from kvcalc.out import units

# Bounds as for the command-line options (kvcalc.out.units), so a scenario file cannot do what a flag may not.
RequestCount = Annotated[int, Bounds(gt=0, le=units.MAX_REQUESTS)]
GpuCount = Annotated[int, Bounds(gt=0, le=units.MAX_GPUS)]
Utilization = Annotated[float, Bounds(ge=units.MIN_MFU, le=1)]  # a share of a peak: below 0.1% is a typo
DecodeRate = Annotated[float, Bounds(ge=units.MIN_DECODE_TOKENS_PER_S, le=units.MAX_DECODE_TOKENS_PER_S)]
OverlapUs = Annotated[float, Bounds(ge=0, le=units.MAX_OVERLAP_US)]


@dataclass(frozen=True)
class RequestClass:
    """``count`` requests of ``context_tokens`` input tokens each, generating ``output_tokens`` each."""

    __pydantic_config__ = STRICT
    count: RequestCount
    context_tokens: TokenCount
    output_tokens: Annotated[int, Bounds(ge=0, le=units.MAX_TOKENS)] = 500
    name: str = "requests"


@dataclass(frozen=True)
class SharedSegment:
    """A prefix of ``tokens`` tokens shared within each of ``groups`` groups of requests (1 = all)."""

    __pydantic_config__ = STRICT
    tokens: TokenCount
    groups: RequestCount = 1
    name: str = "shared"


@dataclass(frozen=True)
class WorkloadPreset:
    """Request classes and the shared prefix segments they are built from."""

    __pydantic_config__ = STRICT
    schema_version: Literal[1]
    source: str
    display_name: str
    classes: list[RequestClass]
    shared: list[SharedSegment] = field(default_factory=list)

    def __post_init__(self):
        if not self.classes:
            raise ValueError("classes: give at least one request class")
        check_workload(self)

    @property
    def requests(self) -> int:
        """All requests [count]."""
        return sum(c.count for c in self.classes)


def check_workload(w: WorkloadPreset) -> None:
    """Raise ValueError (pydantic) naming the field when segments do not fit the requests."""
    n = sum(c.count for c in w.classes)
    prefix = 0
    for i, s in enumerate(w.shared):
        if s.groups > n:
            raise ValueError(f"shared.{i}.groups: {s.groups} groups but only {n} requests")
        prefix += s.tokens
    shortest = min(c.context_tokens for c in w.classes)
    if prefix > shortest:
        raise ValueError(f"shared: the shared prefix ({prefix:,} tokens) is longer than the shortest "
                         f"request's context ({shortest:,} tokens)")


@dataclass(frozen=True)
class ScenarioPreset:
    """One case to cost: model, hardware, GPUs, workload, price and the assumptions that differ."""

    __pydantic_config__ = STRICT
    schema_version: Literal[1]
    source: str
    display_name: str
    model: str
    hardware: str
    workload: str
    gpus: GpuCount = 8
    usd_per_gpu_hour: Optional[UsdPerGpuHour] = None
    """default: the hardware preset's"""
    price_source: Optional[str] = None
    compute_dtype: Literal["bf16", "fp8", "fp4"] = "fp8"
    peak_tflops_per_gpu: Optional[Tflops] = None
    """overrides the datasheet's dense peak"""
    peak_source: Optional[str] = None
    mfu_prefill: Utilization = 0.2
    mfu_source: str = ""
    attention_flops: bool = True
    decode_tokens_per_s: Optional[DecodeRate] = None
    """per request [tok/s]; absent = the roofline estimate"""
    decode_source: str = ""
    mfu_decode: Utilization = 0.5
    hbm_bandwidth_utilization: Utilization = 0.9
    hbm_utilization: Utilization = 0.9
    warm: bool = False
    pd_link: Optional[str] = None
    """link preset from prefill to decode nodes (disaggregated serving); absent = prefill and decode share GPUs"""
    pd_overlap_us: Optional[OverlapUs] = None
    """window a speculative prefetch hides the hand-off behind [us]; absent = one decode step"""
    ttft_model: Literal["processor-sharing", "fcfs", "even-split"] = "processor-sharing"
    """how concurrent requests arriving together share the node's prefill compute (even-split = the article's)"""
    pd_split: Optional[str] = None
    """with a pd_link, on the serving model: prefill engines : decode engines, "P:D" (each engine gpus / (P + D)
    GPUs); absent = half and half (1:1)"""
    pd_split_source: Optional[str] = None
    """why this split"""

    def __post_init__(self):
        if self.pd_split is None:
            return
        if self.pd_link is None:
            raise ValueError("pd_split: only with a pd_link (prefill and decode on separate engines)")
        from kvcalc.out.errors import InputError

        try:
            units.parse_pd_split(self.pd_split, "pd_split")
        except InputError as e:
            raise ValueError(str(e)) from None


PRESET_KINDS = {"workloads": WorkloadPreset, "scenarios": ScenarioPreset}
