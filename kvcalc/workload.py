"""Workloads (request classes + shared prefix segments) and scenarios (model + hardware + workload +
assumptions), as pydantic models of the preset files, plus the checks that tie a workload together.

Shared segments are nested prefixes, in file order (e.g. a system prompt shared by all requests, then a
few-shot block shared within each group). Requests are numbered class by class in file order; segment s with
g groups puts request i (of N) in group floor(i x g / N): contiguous groups of N/g requests.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import Field, model_validator

from kvcalc.errors import InputError
from kvcalc.schema import Fraction, NonNegInt, PositiveFloat, PositiveInt, _Strict


class RequestClass(_Strict):
    """``count`` requests of ``context_tokens`` input tokens each, generating ``output_tokens`` each."""

    name: str = "requests"
    count: PositiveInt
    context_tokens: Annotated[int, Field(gt=0, le=2**40)]
    output_tokens: Annotated[int, Field(ge=0, le=2**40)] = 500


class SharedSegment(_Strict):
    """A prefix of ``tokens`` tokens shared within each of ``groups`` groups of requests (1 = all)."""

    name: str = "shared"
    tokens: PositiveInt
    groups: PositiveInt = 1


class WorkloadPreset(_Strict):
    """Request classes and the shared prefix segments they are built from."""

    schema_version: Literal[1]
    source: str = Field(min_length=1)
    display_name: str
    classes: list[RequestClass] = Field(min_length=1)
    shared: list[SharedSegment] = Field(default_factory=list)

    @model_validator(mode="after")
    def _consistent(self):
        check_workload(self)
        return self

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


DecodeMode = Literal["given", "roofline"]


class ScenarioPreset(_Strict):
    """One case to cost: model, hardware, GPUs, workload, price and the assumptions that differ."""

    schema_version: Literal[1]
    source: str = Field(min_length=1)
    display_name: str
    model: str
    hardware: str
    gpus: PositiveInt = 8
    workload: str
    usd_per_gpu_hour: Optional[PositiveFloat] = Field(None, description="default: the hardware preset's")
    price_source: Optional[str] = None
    compute_dtype: Literal["bf16", "fp8", "fp4"] = "fp8"
    peak_tflops_per_gpu: Optional[PositiveFloat] = Field(None, description="override the datasheet peak")
    peak_source: Optional[str] = None
    mfu_prefill: Fraction = 0.2
    mfu_source: str = ""
    attention_flops: bool = True
    decode_tokens_per_s: Optional[PositiveFloat] = Field(None, description="per request; None = roofline")
    decode_source: str = ""
    mfu_decode: Fraction = 0.5
    hbm_bandwidth_utilization: Fraction = 0.9
    hbm_utilization: Fraction = 0.9
    warm: bool = False
    pd_link: Optional[str] = Field(None, description="link preset from prefill to decode nodes (disaggregated "
                                   "serving); absent = prefill and decode on the same GPUs")
    pd_overlap_us: Optional[Annotated[float, Field(ge=0, allow_inf_nan=False)]] = Field(
        None, description="window a speculative prefetch hides the hand-off behind [us]; default one decode step")


PRESET_KINDS = {"workloads": WorkloadPreset, "scenarios": ScenarioPreset}


def inline_workload(requests: int, context_tokens: int, output_tokens: int,
                    shared: list[tuple[int, int]]) -> WorkloadPreset:
    """A one-class workload from command-line flags; InputError names the flag when it does not hold."""
    from pydantic import ValidationError

    try:
        return WorkloadPreset(
            schema_version=1, source="command line", display_name=f"{requests} x {context_tokens:,} tokens",
            classes=[RequestClass(count=requests, context_tokens=context_tokens, output_tokens=output_tokens)],
            shared=[SharedSegment(name=f"shared {i + 1}", tokens=t, groups=g) for i, (t, g) in enumerate(shared)])
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        flag = {"count": "--requests", "context_tokens": "--context", "output_tokens": "--output-tokens"}
        name = next((f for k, f in flag.items() if k in loc), "--shared-prefix")
        raise InputError(f"{name}: {err['msg'].removeprefix('Value error, ')}") from None


def parse_shared_prefix(text: str) -> tuple[int, int]:
    """``TOKENS[:GROUPS]`` -> (tokens, groups); e.g. ``1500`` (shared by all) or ``500:5``."""
    from kvcalc.units import parse_tokens

    tokens, _, groups = text.partition(":")
    t = parse_tokens(tokens, "--shared-prefix")
    g = parse_tokens(groups, "--shared-prefix groups") if groups else 1
    return t, g
