"""The preset files (TOML) as frozen dataclasses, validated strictly by pydantic when read from a user's file.

Unknown keys are rejected (``extra: forbid``); numbers carry bounds (``Bounds``) and NaN/infinity are refused.
pydantic validates these stdlib dataclasses through a ``TypeAdapter`` (:mod:`kvcalc.model.catalog`), so this
module imports no pydantic and the CLI starts fast: the shipped presets, validated by the test suite, are built
directly with :func:`build`. A string right after a field is its description (in ``kvcalc presets schema``).

Readable units appear only where the field name says which (``hbm_gb``, ``bandwidth_gb_per_s``,
``params_total_b`` in billions); :mod:`kvcalc.out.units` converts them once, in the accessors below.
"""

# No ``from __future__ import annotations``: build() reads the field types as objects.
import dataclasses
import functools
import types
import typing
from dataclasses import dataclass, field
from typing import Annotated, Literal, Optional, Union

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
KvDtype = Literal["fp32", "bf16", "fp16", "fp8", "int8", "int4"]
# MLA latent cache layouts [B per layer per token] for kv_lora_rank 512 + rope 64 (DeepSeek V3):
#   bf16: (512 + 64) x 2 = 1,152; fp8: (512 + 64) x 1 = 576;
#   fp8-flashmla: 512 fp8 + 4 fp32 scales (16 B) + 64 bf16 rope (128 B) = 656 (FlashMLA FP8 KV layout).
MlaLayout = Literal["bf16", "fp8", "fp8-flashmla"]
# Sparse-attention indexer key per entry [B]: fp8 = head_dim 128 x 1 B + fp32 scale = 132;
# fp4 = 64 B packed + 4 B scales = 68 (DeepSeek V4 paper's setting).
IndexerDtype = Literal["fp4", "fp8"]


@dataclass(frozen=True)
class Indexer:
    """A sparse-attention lightning indexer (DSA in V3.2, CSA in V4): one key per stored entry."""

    __pydantic_config__ = STRICT
    top_k: TokenCount
    """entries the main attention reads per decode step per layer"""
    head_dim: Dim = 128
    heads: Dim = 64


@dataclass(frozen=True)
class FullGroup:
    """Full attention (MHA/GQA/MQA), optionally a sliding window: K and V per KV head per layer."""

    __pydantic_config__ = STRICT
    kind: Literal["full"]
    layers: Dim
    kv_heads: Dim
    head_dim: Dim
    name: str = "full"
    head_dim_v: Optional[Dim] = None
    """V head dim when it differs from K's"""
    window_tokens: Optional[TokenCount] = None
    """sliding window: stores min(L, W) tokens; absent = full attention"""
    mtp: bool = False
    """a multi-token-prediction layer, counted only with --mtp"""
    chunk_tokens: Optional[TokenCount] = None
    """chunked local attention (Llama 4): a token attends only to its own chunk of C tokens, so a request
    holds the current chunk's ((L - 1) mod C) + 1 entries (vLLM ChunkedLocalAttentionSpec: "we hold KV for at
    most one chunk window", its pool reserving min(C + max_num_batched_tokens, max_model_len)); absent = none"""
    k_eq_v: bool = False
    """K and V are one tensor, stored once (Gemma 4 attention_k_eq_v): kv_heads x head_dim per token"""
    kv_dtype: Optional[KvDtype] = None
    """this group's KV dtype when it differs from the model's kv_dtype (--kv-dtype still overrides)"""
    q_heads: Optional[Dim] = None
    """query heads of this group's layers (attention FLOPs); absent = the model's q_heads and head dims"""

    def __post_init__(self):
        if self.chunk_tokens is not None and self.window_tokens is not None:
            raise ValueError("give window_tokens or chunk_tokens, not both")
        if self.k_eq_v and self.head_dim_v not in (None, self.head_dim):
            raise ValueError("k_eq_v needs head_dim_v equal to head_dim (K and V are one tensor)")


# Recurrent state dtypes [B/element]: engines keep the state in the model dtype by default (vLLM
# mamba_cache_dtype / mamba_ssm_cache_dtype "auto"), fp32 on request.
StateDtype = Literal["bf16", "fp16", "fp32"]


@dataclass(frozen=True)
class LinearGroup:
    """Linear attention (Gated DeltaNet, Qwen3-Next/Qwen3.5): a fixed per-request state, no per-token KV.

    conv state = (conv_kernel - 1) x (2 x key_heads x key_head_dim + value_heads x value_head_dim) elements;
    recurrent state = value_heads x key_head_dim x value_head_dim elements (vLLM mamba_utils.py
    gated_delta_net_state_shape). Both shard by head under tensor parallelism.
    """

    __pydantic_config__ = STRICT
    kind: Literal["linear"]
    layers: Dim
    key_heads: Dim
    value_heads: Dim
    key_head_dim: Dim
    value_head_dim: Dim
    conv_kernel: Dim = 4
    name: str = "linear"
    mtp: bool = False


@dataclass(frozen=True)
class MambaGroup:
    """Mamba-2 (SSD) layers (Nemotron-H): a fixed per-request state, no per-token KV.

    conv state = (conv_kernel - 1) x (heads x head_dim + 2 x groups x state_size) elements;
    SSM state = heads x head_dim x state_size elements (vLLM mamba_utils.py mamba2_state_shape).
    """

    __pydantic_config__ = STRICT
    kind: Literal["mamba"]
    layers: Dim
    heads: Dim
    head_dim: Dim
    state_size: Dim
    groups: Dim = 1
    conv_kernel: Dim = 4
    name: str = "mamba"
    mtp: bool = False


@dataclass(frozen=True)
class MlaGroup:
    """Multi-head latent attention (DeepSeek V2/V3): one latent + rope key per token per layer."""

    __pydantic_config__ = STRICT
    kind: Literal["mla"]
    layers: Dim
    name: str = "mla"
    kv_lora_rank: Dim = 512
    rope_head_dim: Dim = 64
    indexer: Optional[Indexer] = None
    """DSA lightning indexer (V3.2)"""
    mtp: bool = False


@dataclass(frozen=True)
class CompressedGroup:
    """DeepSeek V4 attention: a sliding window of raw entries plus entries compressed ``ratio``:1.

    ratio absent = sliding-window only; ratio 4 with an indexer = CSA (sparse top-k); ratio 128 = HCA.
    """

    __pydantic_config__ = STRICT
    kind: Literal["compressed"]
    name: str
    layers: Dim
    window_tokens: WindowTokens = 128
    """raw entries kept per layer: min(L, W); 0 = none"""
    ratio: Optional[TokenCount] = None
    entry_bytes: EntryBytes = 584
    """448 fp8 + 64 bf16 rope + 7 UE8M0 scales + 1 pad [B]"""
    indexer: Optional[Indexer] = None
    state_bytes_per_layer: StateBytes = 0
    """fp32 compressor tail state, fixed per request [B]"""
    mtp: bool = False

    def __post_init__(self):
        if self.indexer is not None and self.ratio is None:
            raise ValueError("an indexer needs a compression ratio")


LayerGroup = Annotated[Union[FullGroup, MlaGroup, CompressedGroup, LinearGroup, MambaGroup], Tagged("kind")]


@dataclass(frozen=True)
class ModelPreset:
    """An LLM: parameters, weights, and its attention as layer groups (or an as-stated flat figure)."""

    __pydantic_config__ = STRICT
    schema_version: Literal[1]
    source: str
    """where the numbers come from"""
    display_name: str
    params_total_b: Billions
    """total parameters [billions]"""
    params_active_b: Billions
    """parameters active per token [billions]"""
    weight_bytes_per_param: BytesPerParam
    """[B/param], e.g. 2 for BF16, 1 for FP8"""
    weights_gb: Optional[WeightsGb] = None
    """all weights [GB = 1e9 B], summed per component (e.g. FP4 experts next to BF16 attention); absent =
    params_total x weight_bytes_per_param"""
    q_heads: Optional[Dim] = None
    """query heads (attention FLOPs)"""
    qk_head_dim: Optional[Dim] = None
    """q.k dim per head (attention FLOPs)"""
    v_head_dim: Optional[Dim] = None
    """v dim per head (attention FLOPs)"""
    vocab_size: Optional[VocabSize] = None
    """vocabulary [tokens]; with hidden_size gives the input embedding and LM head (vocab x hidden each)"""
    hidden_size: Optional[HiddenSize] = None
    """model width [elements]"""
    tie_word_embeddings: bool = False
    """the LM head shares the input embedding's matrix (counted once in params_total_b)"""
    kv_dtype: KvDtype = "bf16"
    state_dtype: StateDtype = "bf16"
    """recurrent state of linear-attention and Mamba layers (conv state stays bf16); bf16 = vLLM's default
    (the model dtype), fp32 = what some engines keep for accuracy"""
    mla_layout: MlaLayout = "bf16"
    indexer_dtype: IndexerDtype = "fp8"
    max_context_tokens: Optional[TokenCount] = None
    block_tokens_multiple: BlockMultiple = 1
    """engines accept only blocks of a multiple of this many tokens"""
    page_align_bytes: Optional[EntryBytes] = None
    """the kernel pads each layer's page of KV entries in a block up to a multiple of this [B] (FlashMLA: 576);
    indexer keys are not padded; absent = no padding"""
    layer_groups: list[LayerGroup] = field(default_factory=list)
    as_stated_kv_bytes_per_token: Optional[KvBytesPerToken] = None
    """a flat per-token figure as some source states it (no architecture)"""

    def __post_init__(self):
        if not self.source.strip():
            raise ValueError("source: say where the numbers come from")
        if not self.layer_groups and self.as_stated_kv_bytes_per_token is None:
            raise ValueError("give layer_groups or as_stated_kv_bytes_per_token")
        if self.layer_groups and self.as_stated_kv_bytes_per_token is not None:
            raise ValueError("give layer_groups or as_stated_kv_bytes_per_token, not both")
        if self.params_active_b > self.params_total_b:
            raise ValueError("params_active_b is larger than params_total_b")
        if self.params_total_b > 1e5:
            raise ValueError("params_total_b is absurd (> 100,000 billion)")
        if self.vocab_size and self.hidden_size:
            matrices = (1 if self.tie_word_embeddings else 2) * self.vocab_size * self.hidden_size
            if matrices >= units.billions_to_count(self.params_active_b):
                raise ValueError(f"vocab_size x hidden_size: the input embedding and LM head ({matrices:,} params) "
                                 "leave nothing of params_active_b for the layers")

    @property
    def params_total(self) -> float:
        """Total parameters [count]."""
        return units.billions_to_count(self.params_total_b)

    @property
    def params_active(self) -> float:
        """Active parameters per token [count]."""
        return units.billions_to_count(self.params_active_b)

    @property
    def weight_bytes(self) -> float:
        """All weights [B]: weights_gb where given, else params_total x weight_bytes_per_param."""
        if self.weights_gb is not None:
            return units.gb_to_bytes(self.weights_gb)
        return self.params_total * self.weight_bytes_per_param

    @property
    def mean_weight_bytes_per_param(self) -> float:
        """Weight bytes per parameter averaged over the model [B/param]: weights_gb / params where given."""
        if self.weights_gb is None:
            return self.weight_bytes_per_param
        return self.weight_bytes / self.params_total


@dataclass(frozen=True)
class HardwarePreset:
    """One accelerator: memory, bandwidth, dense peak compute, links and price."""

    __pydantic_config__ = STRICT
    schema_version: Literal[1]
    source: str
    display_name: str
    hbm_gb: MemoryGb
    """HBM capacity [GB = 1e9 B]"""
    hbm_bandwidth_tb_per_s: HbmTbPerS
    """HBM bandwidth [TB/s = 1e12 B/s]"""
    bf16_dense_tflops: Tflops
    host_link: str
    """link preset from HBM to host DRAM"""
    usd_per_gpu_hour: UsdPerGpuHour
    usd_per_gpu_hour_source: str
    fp8_dense_tflops: Optional[Tflops] = None
    fp4_dense_tflops: Optional[Tflops] = None
    scaleup_link: Optional[str] = None
    """link preset between GPUs of one node"""
    cuda_total_gib: Optional[MemoryGb] = None  # same range as hbm_gb (GiB here, ~7% more bytes: still far inside)
    """device memory as CUDA reports it (torch.cuda.mem_get_info total) [GiB = 2^30 B]: what vLLM multiplies by
    gpu_memory_utilization (e.g. 79.19-79.25 GiB on an 80 GB H100, 44.42 GiB on a 48 GB L40S)"""
    cuda_total_source: Optional[str] = None
    """where cuda_total_gib comes from (a start-up log)"""
    host_dram_gb_per_gpu: Optional[MemoryGb] = None
    """host DRAM of the reference node per GPU [GB = 1e9 B] (a KV tier below HBM)"""
    local_ssd_gb_per_gpu: Optional[MemoryGb] = None
    """local NVMe data storage of the reference node per GPU [GB = 1e9 B] (a KV tier below DRAM)"""

    def __post_init__(self):
        if not self.source.strip() or not self.usd_per_gpu_hour_source.strip():
            raise ValueError("source and usd_per_gpu_hour_source: say where the numbers come from")
        if self.cuda_total_gib is not None and not (self.cuda_total_source or "").strip():
            raise ValueError("cuda_total_source: say where cuda_total_gib comes from")

    @property
    def hbm_bytes(self) -> float:
        """HBM capacity per GPU [B]."""
        return units.gb_to_bytes(self.hbm_gb)

    @property
    def cuda_total_bytes(self) -> Optional[float]:
        """Device memory as CUDA reports it [B]; None when the preset does not say."""
        return None if self.cuda_total_gib is None else units.gib_to_bytes(self.cuda_total_gib)

    @property
    def host_dram_bytes_per_gpu(self) -> Optional[float]:
        """Host DRAM per GPU [B]; None when the preset does not say."""
        return None if self.host_dram_gb_per_gpu is None else units.gb_to_bytes(self.host_dram_gb_per_gpu)

    @property
    def local_ssd_bytes_per_gpu(self) -> Optional[float]:
        """Local NVMe storage per GPU [B]; None when the preset does not say."""
        return None if self.local_ssd_gb_per_gpu is None else units.gb_to_bytes(self.local_ssd_gb_per_gpu)

    @property
    def hbm_bandwidth_bytes_per_s(self) -> float:
        """HBM bandwidth per GPU [B/s]."""
        return units.tb_per_s_to_bytes_per_s(self.hbm_bandwidth_tb_per_s)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak per GPU for ``dtype`` in bf16/fp8/fp4 [FLOP/s]; falls back to the next wider type."""
        table = {"fp4": self.fp4_dense_tflops, "fp8": self.fp8_dense_tflops, "bf16": self.bf16_dense_tflops}
        for d in ("fp4", "fp8", "bf16")[("fp4", "fp8", "bf16").index(dtype):]:
            if table[d] is not None:
                return units.tflops_to_flops(table[d])
        raise AssertionError("bf16 is always set")


@dataclass(frozen=True)
class LinkPreset:
    """A link between memory tiers or nodes (one direction): alpha-beta model."""

    __pydantic_config__ = STRICT
    schema_version: Literal[1]
    source: str
    display_name: str
    bandwidth_gb_per_s: LinkGbPerS
    """theoretical, one direction [GB/s = 1e9 B/s]"""
    latency_us: LatencyUs
    """fixed cost per transfer [us]"""
    measured_bandwidth_gb_per_s: Optional[LinkGbPerS] = None
    """measured [GB/s]"""

    def __post_init__(self):
        if not self.source.strip():
            raise ValueError("source: say where the numbers come from")
        m = self.measured_bandwidth_gb_per_s
        if m is not None and m > self.bandwidth_gb_per_s * 1.0001:
            raise ValueError("measured_bandwidth_gb_per_s exceeds the theoretical bandwidth_gb_per_s")

    def bandwidth_bytes_per_s(self, which: str = "measured") -> float:
        """Bandwidth [B/s]; ``measured`` falls back to theoretical where nothing was measured."""
        if which == "measured" and self.measured_bandwidth_gb_per_s is not None:
            return units.gb_per_s_to_bytes_per_s(self.measured_bandwidth_gb_per_s)
        return units.gb_per_s_to_bytes_per_s(self.bandwidth_gb_per_s)

    @property
    def latency_s(self) -> float:
        """Fixed per-transfer latency [s]."""
        return units.us_to_s(self.latency_us)


PRESET_KINDS = {"models": ModelPreset, "hardware": HardwarePreset, "links": LinkPreset}


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
