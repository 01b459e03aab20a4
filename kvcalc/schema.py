"""Pydantic models of the preset files (TOML). Unknown keys are rejected (``extra="forbid"``).

Readable units appear only where the field name says which (``hbm_gb``, ``bandwidth_gb_per_s``,
``params_total_b`` in billions); :mod:`kvcalc.units` converts them once, in the accessors below.
"""

from __future__ import annotations

from typing import Annotated, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from kvcalc import units

SCHEMA_VERSION = 1

PositiveFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
NonNegFloat = Annotated[float, Field(ge=0, allow_inf_nan=False)]
PositiveInt = Annotated[int, Field(gt=0)]
NonNegInt = Annotated[int, Field(ge=0)]
Fraction = Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)]

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


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Indexer(_Strict):
    """A sparse-attention lightning indexer (DSA in V3.2, CSA in V4): one key per stored entry."""

    head_dim: PositiveInt = 128
    heads: PositiveInt = 64
    top_k: PositiveInt = Field(description="entries the main attention reads per decode step per layer")


class FullGroup(_Strict):
    """Full attention (MHA/GQA/MQA), optionally a sliding window: K and V per KV head per layer."""

    kind: Literal["full"]
    name: str = "full"
    layers: PositiveInt
    kv_heads: PositiveInt
    head_dim: PositiveInt
    head_dim_v: Optional[PositiveInt] = Field(None, description="V head dim when it differs from K's")
    window_tokens: Optional[PositiveInt] = Field(None, description="sliding window; None = full attention")
    mtp: bool = Field(False, description="a multi-token-prediction layer, counted only with --mtp")


class MlaGroup(_Strict):
    """Multi-head latent attention (DeepSeek V2/V3): one latent + rope key per token per layer."""

    kind: Literal["mla"]
    name: str = "mla"
    layers: PositiveInt
    kv_lora_rank: PositiveInt = 512
    rope_head_dim: PositiveInt = 64
    indexer: Optional[Indexer] = Field(None, description="DSA lightning indexer (V3.2)")
    mtp: bool = False


class CompressedGroup(_Strict):
    """DeepSeek V4 attention: a sliding window of raw entries plus entries compressed ``ratio``:1.

    ratio absent = sliding-window only; ratio 4 with an indexer = CSA (sparse top-k); ratio 128 = HCA.
    """

    kind: Literal["compressed"]
    name: str
    layers: PositiveInt
    window_tokens: NonNegInt = Field(128, description="raw entries kept per layer: min(L, W); 0 = none")
    ratio: Optional[PositiveInt] = None
    entry_bytes: PositiveInt = Field(584, description="448 fp8 + 64 bf16 rope + 7 UE8M0 scales + 1 pad [B]")
    indexer: Optional[Indexer] = None
    state_bytes_per_layer: NonNegInt = Field(0, description="fp32 compressor tail state, fixed per request [B]")
    mtp: bool = False

    @model_validator(mode="after")
    def _indexer_needs_ratio(self):
        if self.indexer is not None and self.ratio is None:
            raise ValueError("an indexer needs a compression ratio")
        return self


LayerGroup = Annotated[FullGroup | MlaGroup | CompressedGroup, Field(discriminator="kind")]


class ModelPreset(_Strict):
    """An LLM: parameters, weights, and its attention as layer groups (or an as-stated flat figure)."""

    schema_version: Literal[1]
    source: str = Field(min_length=1)
    display_name: str
    params_total_b: PositiveFloat = Field(description="total parameters [billions]")
    params_active_b: PositiveFloat = Field(description="parameters active per token [billions]")
    weight_bytes_per_param: PositiveFloat = Field(description="[B/param], e.g. 2 for BF16, 1 for FP8")
    q_heads: Optional[PositiveInt] = Field(None, description="query heads (attention FLOPs)")
    qk_head_dim: Optional[PositiveInt] = Field(None, description="q.k dim per head (attention FLOPs)")
    v_head_dim: Optional[PositiveInt] = Field(None, description="v dim per head (attention FLOPs)")
    kv_dtype: KvDtype = "bf16"
    mla_layout: MlaLayout = "bf16"
    indexer_dtype: IndexerDtype = "fp8"
    max_context_tokens: Optional[PositiveInt] = None
    block_tokens_multiple: PositiveInt = Field(1, description="engines accept only blocks of a multiple of this")
    page_align_bytes: Optional[PositiveInt] = Field(
        None, description="the kernel pads each layer's page of KV entries in a block up to a multiple of this "
        "[B] (FlashMLA: 576); indexer keys are not padded; None = no padding")
    layer_groups: list[LayerGroup] = Field(default_factory=list)
    as_stated_kv_bytes_per_token: Optional[PositiveFloat] = Field(
        None, description="a flat per-token figure as some source states it (no architecture)")

    @model_validator(mode="after")
    def _groups_or_flat(self):
        if not self.layer_groups and self.as_stated_kv_bytes_per_token is None:
            raise ValueError("give layer_groups or as_stated_kv_bytes_per_token")
        if self.layer_groups and self.as_stated_kv_bytes_per_token is not None:
            raise ValueError("give layer_groups or as_stated_kv_bytes_per_token, not both")
        if self.params_active_b > self.params_total_b:
            raise ValueError("params_active_b is larger than params_total_b")
        if self.params_total_b > 1e5:
            raise ValueError("params_total_b is absurd (> 100,000 billion)")
        return self

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
        """All weights [B]."""
        return self.params_total * self.weight_bytes_per_param


class HardwarePreset(_Strict):
    """One accelerator: memory, bandwidth, dense peak compute, links and price."""

    schema_version: Literal[1]
    source: str = Field(min_length=1)
    display_name: str
    hbm_gb: PositiveFloat = Field(description="HBM capacity [GB = 1e9 B]")
    hbm_bandwidth_tb_per_s: PositiveFloat = Field(description="HBM bandwidth [TB/s = 1e12 B/s]")
    bf16_dense_tflops: PositiveFloat
    fp8_dense_tflops: Optional[PositiveFloat] = None
    fp4_dense_tflops: Optional[PositiveFloat] = None
    host_link: str = Field(description="link preset from HBM to host DRAM")
    scaleup_link: Optional[str] = Field(None, description="link preset between GPUs of one node")
    usd_per_gpu_hour: PositiveFloat
    usd_per_gpu_hour_source: str = Field(min_length=1)

    @property
    def hbm_bytes(self) -> float:
        """HBM capacity per GPU [B]."""
        return units.gb_to_bytes(self.hbm_gb)

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


class LinkPreset(_Strict):
    """A link between memory tiers or nodes (one direction): alpha-beta model."""

    schema_version: Literal[1]
    source: str = Field(min_length=1)
    display_name: str
    bandwidth_gb_per_s: PositiveFloat = Field(description="theoretical, one direction [GB/s = 1e9 B/s]")
    measured_bandwidth_gb_per_s: Optional[PositiveFloat] = Field(None, description="measured [GB/s]")
    latency_us: NonNegFloat = Field(description="fixed cost per transfer [us]")

    @model_validator(mode="after")
    def _measured_le_theoretical(self):
        m = self.measured_bandwidth_gb_per_s
        if m is not None and m > self.bandwidth_gb_per_s * 1.0001:
            raise ValueError("measured_bandwidth_gb_per_s exceeds the theoretical bandwidth_gb_per_s")
        return self

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
