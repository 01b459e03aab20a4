"""The building blocks of the preset schema: bounded number types, the dtype choices, and how a preset is built
from parsed TOML without pydantic (split out of :mod:`kvcalc.model.schema`, which defines the presets).

A bounded alias carries ``Bounds`` that pydantic applies when it validates a user's file; :func:`build` makes the
same dataclass from a shipped preset without loading pydantic, and :func:`check_bounds` applies the bounds to a
preset built that way (an imported config.json).
"""

# No ``from __future__ import annotations``: build() reads the field types as objects.
import dataclasses
import functools
import types
import typing
from typing import Annotated, Literal, Union

from kvcalc.out import units

STRICT = {"extra": "forbid", "use_attribute_docstrings": True}


class Bounds:
    """Bounds of a number field, applied by pydantic when it validates (gt/ge/le; floats must be finite)."""

    def __init__(self, gt=None, ge=None, le=None):
        self.limits = {k: v for k, v in (("gt", gt), ("ge", ge), ("le", le)) if v is not None}

    def __get_pydantic_core_schema__(self, source, handler):
        schema = dict(handler(source))
        schema.update(self.limits)
        if schema.get("type") == "float":
            schema["allow_inf_nan"] = False
        return schema


class Tagged:
    """Marks a union of dataclasses as tagged by one Literal field (pydantic builds a tagged union)."""

    def __init__(self, tag: str):
        self.tag = tag

    def __get_pydantic_core_schema__(self, source, handler):
        from pydantic_core import core_schema

        choices = {typing.get_args(m.__dataclass_fields__[self.tag].type)[0]: handler.generate_schema(m)
                   for m in typing.get_args(source)}
        return core_schema.tagged_union_schema(choices, discriminator=self.tag)


PositiveFloat = Annotated[float, Bounds(gt=0)]
NonNegFloat = Annotated[float, Bounds(ge=0)]
PositiveInt = Annotated[int, Bounds(gt=0)]
NonNegInt = Annotated[int, Bounds(ge=0)]
Fraction = Annotated[float, Bounds(gt=0, le=1)]
TokenCount = Annotated[int, Bounds(gt=0, le=units.MAX_TOKENS)]

# Sane physical ranges of the preset numbers. A user's file past them is a typo, and would overflow later
# (hbm_gb = 1e308 -> infinite bytes; fp8_dense_tflops = 1e308 or a 5e-324 GB/s link -> a division giving inf or
# 0): refused at validation, where the message can name the field. Each range is wide enough for any real part
# today and several generations on (the shipped presets sit well inside).
Dim = Annotated[int, Bounds(gt=0, le=2**16)]         # layers, heads, head dims, ranks: <= 65,536 (today <= ~200)
ExpertCount = Annotated[int, Bounds(ge=0, le=2**16)]  # shared experts per MoE layer (today 0-2)
HiddenSize = Annotated[int, Bounds(gt=0, le=2**20)]  # model width (today <= ~16k)
VocabSize = Annotated[int, Bounds(gt=0, le=2**24)]   # vocabulary (today <= ~260k)
WindowTokens = Annotated[int, Bounds(ge=0, le=units.MAX_TOKENS)]
EntryBytes = Annotated[int, Bounds(gt=0, le=2**20)]  # one KV entry / a page alignment [B] (V4: 584; FlashMLA: 576)
StateBytes = Annotated[int, Bounds(ge=0, le=2**30)]  # fixed state per layer per request [B]
BlockMultiple = Annotated[int, Bounds(gt=0, le=units.MAX_BLOCK_TOKENS)]
Billions = Annotated[float, Bounds(gt=0, le=1e5)]    # parameters [billions]: 100,000 B (today's largest ~2,000)
BytesPerParam = Annotated[float, Bounds(gt=0, le=8)]  # [B/param]: fp64 = 8 is the widest
WeightsGb = Annotated[float, Bounds(gt=0, le=8e5)]  # all weights [GB]: 100,000 B params x 8 B
KvBytesPerToken = Annotated[float, Bounds(ge=1e-3, le=1e9)]  # [B/token] (MHA 96 x 64 heads: 3.1 MB)
MemoryGb = Annotated[float, Bounds(ge=1e-3, le=1e5)]  # per GPU [GB]: 1 MB to 100 TB (B200: 180)
HbmTbPerS = Annotated[float, Bounds(ge=1e-3, le=1e3)]  # [TB/s]: 1 GB/s to 1 PB/s (H200: 4.8)
Tflops = Annotated[float, Bounds(ge=1e-3, le=1e6)]   # dense peak [TFLOP/s]: 1 GFLOP/s to 1 EFLOP/s (B200 fp4: 9,000)
UsdPerGpuHour = Annotated[float, Bounds(gt=0, le=units.MAX_USD_PER_GPU_HOUR)]
LinkGbPerS = Annotated[float, Bounds(ge=1e-6, le=1e6)]  # [GB/s]: 1 kB/s to 1 PB/s (NVLink4: 900)
LatencyUs = Annotated[float, Bounds(ge=0, le=1e9)]   # per transfer [us]: up to ~17 minutes

# Bytes per element of a full-attention KV cache, by dtype.
KV_DTYPE_BYTES = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}
# Quantised formats with scale bytes (their layouts: kvcalc.model.kv_formats).
KV_QUANTISED_FORMATS = ("fp8-per-token-head", "nvfp4", "int4-grouped", "kivi")
KV_FORMATS = tuple(KV_DTYPE_BYTES) + KV_QUANTISED_FORMATS
KvDtype = Literal[KV_FORMATS]  # every format a preset, --kv-dtype and the sweep's kv-dtype axis accept
# MLA latent cache layouts [B per layer per token] for kv_lora_rank 512 + rope 64 (DeepSeek V3):
#   bf16: (512 + 64) x 2 = 1,152; fp8: (512 + 64) x 1 = 576;
#   fp8-flashmla: 512 fp8 + 4 fp32 scales (16 B) + 64 bf16 rope (128 B) = 656 (FlashMLA FP8 KV layout).
MlaLayout = Literal["bf16", "fp8", "fp8-flashmla"]
# Sparse-attention indexer key per entry [B]: fp8 = head_dim 128 x 1 B + fp32 scale = 132;
# fp4 = 64 B packed + 4 B scales = 68 (DeepSeek V4 paper's setting).
IndexerDtype = Literal["fp4", "fp8"]


# Recurrent state dtypes [B/element]: engines keep the state in the model dtype by default (vLLM
# mamba_cache_dtype / mamba_ssm_cache_dtype "auto"), fp32 on request.
StateDtype = Literal["bf16", "fp16", "fp32"]



# ---------------------------------------------------------------- building without validation

def _strip(tp):
    """(base type, metadata) of a possibly Annotated type."""
    if typing.get_origin(tp) is Annotated:
        args = typing.get_args(tp)
        return args[0], args[1:]
    return tp, ()


def _build_value(tp, value):
    base, meta = _strip(tp)
    origin = typing.get_origin(base)
    if origin in (Union, types.UnionType):
        if value is None:
            return None
        members = [m for m in typing.get_args(base) if m is not type(None)]
        tag = next((m.tag for m in meta if isinstance(m, Tagged)), None)
        if tag is not None:
            member = next(m for m in members
                          if typing.get_args(m.__dataclass_fields__[tag].type)[0] == value[tag])
            return build(member, value)
        return _build_value(members[0], value)
    if origin is list:
        (item,) = typing.get_args(base)
        return [_build_value(item, v) for v in value]
    if dataclasses.is_dataclass(base):
        return build(base, value)
    if base is float and isinstance(value, int):
        return float(value)
    return value


@functools.cache
def _fields(cls):
    return {f.name: f.type for f in dataclasses.fields(cls)}


def check_bounds(obj, where: str = "") -> None:
    """Raise ValueError naming the first int/float field of a built preset (nested groups too) outside its
    ``Bounds``: what pydantic checks for a user's TOML, for presets built without it (an imported config)."""
    hints = typing.get_type_hints(type(obj), include_extras=True)
    for f in dataclasses.fields(obj):
        value, name = getattr(obj, f.name), f"{where}{f.name}"
        items = enumerate(value) if isinstance(value, list) else [(None, value)]
        for i, v in items:
            label = name if i is None else f"{name}.{i}"
            if dataclasses.is_dataclass(v):
                check_bounds(v, label + ".")
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                _check_limits(v, label, next((m.limits for m in _bounds_of(hints[f.name])), {}))


def _bounds_of(tp):
    """The Bounds annotations of a (possibly Optional) field type."""
    base, meta = _strip(tp)
    found = [m for m in meta if isinstance(m, Bounds)]
    for arg in typing.get_args(base) if typing.get_origin(base) in (Union, types.UnionType) else ():
        found += [m for m in _strip(arg)[1] if isinstance(m, Bounds)]
    return found


def _check_limits(v, label: str, limits: dict) -> None:
    ops = {"gt": (lambda a, b: a > b, "greater than"), "ge": (lambda a, b: a >= b, "at least"),
           "le": (lambda a, b: a <= b, "at most")}
    for key, bound in limits.items():
        ok, words = ops[key]
        if not ok(v, bound):
            raise ValueError(f"field {label!r}: {v:,} is out of range (must be {words} {bound:,})")


def build(cls, data: dict):
    """Construct a preset dataclass from parsed TOML that is known to be valid (the shipped presets, which the
    test suite validates): the same object pydantic's validation returns, without loading pydantic."""
    types_ = _fields(cls)
    return cls(**{k: _build_value(types_[k], v) for k, v in data.items()})
