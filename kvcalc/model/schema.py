"""The preset files (TOML) as frozen dataclasses, validated strictly by pydantic when read from a user's file.

Unknown keys are rejected (``extra: forbid``); numbers carry bounds (``Bounds``) and NaN/infinity are refused.
pydantic validates these stdlib dataclasses through a ``TypeAdapter`` (:mod:`kvcalc.model.catalog`), so this
module imports no pydantic and the CLI starts fast: the shipped presets, validated by the test suite, are built
directly with :func:`build`. A string right after a field is its description (in ``kvcalc presets schema``).

Readable units appear only where the field name says which (``hbm_gb``, ``bandwidth_gb_per_s``,
``params_total_b`` in billions); :mod:`kvcalc.out.units` converts them once, in the accessors below.
"""

# No ``from __future__ import annotations``: build() reads the field types as objects.
from dataclasses import dataclass, field
from typing import Annotated, Literal, Optional, Union

from kvcalc.model.schema_types import (  # noqa: F401  (re-exported: the schema's names stay importable here)
    STRICT, Bounds, Tagged, PositiveFloat, NonNegFloat, PositiveInt, NonNegInt, Fraction, TokenCount, Dim, ExpertCount,
    HiddenSize, VocabSize, WindowTokens, EntryBytes, StateBytes, BlockMultiple, Billions, BytesPerParam, WeightsGb,
    KvBytesPerToken, MemoryGb, HbmTbPerS, Tflops, UsdPerGpuHour, LinkGbPerS, LatencyUs, KV_DTYPE_BYTES,
    KV_QUANTISED_FORMATS, KV_FORMATS, KvDtype, MlaLayout, IndexerDtype, StateDtype, build, check_bounds)
from kvcalc.out import units


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
    """KV format of full-attention layers: a plain dtype, or a format with its scale bytes (fp8-per-token-head,
    nvfp4, int4-grouped, kivi: KIVI's group 32 and residual 128 unless --kv-group-size/--kv-residual-tokens)"""
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
    architecture: Optional[str] = None
    """the config.json's ``architectures[0]`` (e.g. Gemma3ForConditionalGeneration): engines choose some rules by it"""
    multimodal: bool = False
    """the checkpoint carries a vision (or audio) tower (the config has a vision_config or audio_config)"""
    vision_layers: Optional[Dim] = None
    """the vision tower's ``vision_config.num_hidden_layers`` (SGLang scales its default mem_fraction_static by the
    tower's layers x hidden^2; absent = SGLang's 24, also when the config names them otherwise, e.g. ``depth``)"""
    vision_hidden_size: Optional[Dim] = None
    """the vision tower's ``vision_config.hidden_size`` (absent = SGLang's 1,024)"""
    layer_groups: list[LayerGroup] = field(default_factory=list)
    moe_experts: Optional[Dim] = None
    """routed experts per MoE layer (E); with moe_experts_per_token and moe_expert_params_b a decode step reads
    the experts its tokens touch, E x (1 - (1 - k/E)^T) per layer, not every weight"""
    moe_experts_per_token: Optional[Dim] = None
    """routed experts each token uses per MoE layer (k)"""
    moe_expert_params_b: Optional[Billions] = None
    """parameters of all routed experts, all layers [billions]"""
    moe_shared_experts: Optional[ExpertCount] = None
    """shared experts per MoE layer, run by every token beside its routed ones (DeepSeek's n_shared_experts; one
    for a shared_expert_intermediate_size (Qwen2-MoE, Qwen3-Next) and for Llama 4): their weights are already in
    the dense params; the serving model counts the kernels their MLP launches each step"""
    moe_expert_weight_bytes_per_param: Optional[BytesPerParam] = None
    """the routed experts' weight bytes per parameter (MXFP4 experts beside BF16 attention) [B/param]; absent =
    weight_bytes_per_param"""
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
        moe = (self.moe_experts, self.moe_experts_per_token, self.moe_expert_params_b)
        if any(v is not None for v in moe) and not all(v is not None for v in moe):
            raise ValueError("moe_experts, moe_experts_per_token and moe_expert_params_b: give all three or none")
        if self.moe_shared_experts and self.moe_experts is None:
            raise ValueError("moe_shared_experts: shared experts sit beside routed ones; give moe_experts too")
        if self.moe_experts is not None and self.moe_experts_per_token > self.moe_experts:
            raise ValueError("moe_experts_per_token is larger than moe_experts")
        if self.moe_expert_params_b is not None and self.moe_expert_params_b >= self.params_total_b:
            raise ValueError("moe_expert_params_b leaves nothing of params_total_b outside the experts")
        for g in self.layer_groups:  # NVFP4 stores 16-element blocks: a head row must be whole blocks
            dtype = getattr(g, "kv_dtype", None) or self.kv_dtype
            dims = (g.head_dim, g.head_dim_v or g.head_dim) if g.kind == "full" else ()
            if dtype == "nvfp4" and any(d % 16 for d in dims):
                raise ValueError(f"kv_dtype nvfp4: layer group {g.name!r} has a head dim ({g.head_dim}) that is not "
                                 "a multiple of its 16-element blocks")

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
    def device_memory_bytes(self) -> float:
        """Device memory the ideal capacity view budgets [B]: as CUDA reports it where the preset says
        (``cuda_total_gib``), else the datasheet's HBM."""
        return self.hbm_bytes if self.cuda_total_bytes is None else self.cuda_total_bytes

    @property
    def device_memory_label(self) -> str:
        """How ``device_memory_bytes`` was read, for notes: GiB as CUDA reports it, or the datasheet's GB."""
        if self.cuda_total_gib is None:
            return f"{units.fmt_bytes(self.hbm_bytes)} HBM each (GB = 1e9 B)"
        return (f"{self.cuda_total_gib:g} GiB HBM each as CUDA reports it (GiB = 2^30 B; the datasheet's "
                f"{self.hbm_gb:g} GB)")

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
