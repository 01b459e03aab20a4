"""What an inference engine is given at start-up: the inputs its sizing reads, and their estimated defaults.

Every input can be set from a server's log (``--total-memory 79.19GiB`` ...); when it is not, it is estimated:

- total memory: the hardware preset's ``cuda_total_gib`` (what CUDA reports, e.g. 79.19 GiB on an H100 80GB);
  without one, the datasheet figure read as GiB x 0.99 (an 80 GB card reports 79.1-79.25 GiB), said in a note.
- weights per GPU: the model's weight bytes / TP ranks.
- peak activation (vLLM's profiling run): max_num_batched_tokens x 2 B x (per-layer active parameters / hidden
  + 2 x hidden) elements per token: the widest live tensors of one layer (the MLP's gate/up output, about
  per-layer parameters / hidden wide, for a dense layer whose MLP holds most of its parameters) plus the residual
  stream and its normed copy, in BF16. Llama-3-8B: (8.03e9 - 2 x 128,256 x 4,096) / 32 / 4,096 + 8,192 =
  61,440 elements = 122,880 B/token (vLLM PR #10511 log: 1.26 GiB at 8,192 tokens; estimate 0.94 GiB).
  Without hidden size and q_heads the preset cannot say: 1 GiB is assumed (logs show 0.2-3 GiB) and noted.
  The profiling run then warms the sampler up on max_num_seqs dummy requests (vLLM gpu_model_runner
  ``_dummy_sampler_run``: one row of logits per request, top_p 0.9 and top_k vocab - 1, so the PyTorch-native
  path sorts the whole vocabulary; v0's profile_run likewise samples max_num_seqs rows with top_p 0.99 and top_k
  vocab - 1). Live at its peak, per (request, vocabulary entry): the BF16 logits (2 B), their FP32 copy (4 B), the
  sorted values (4 B) and their int64 indices (8 B), the top-k mask (1 B), the softmax of the sorted values (4 B,
  cumsum in place) and the top-p mask (1 B): 24 B (``apply_top_k_top_p``, vllm/v1/sample/ops/topk_topp_sampler.py).
  The logits are gathered whole on every TP rank. The forward pass's tensors are freed before the sampler runs, so
  the peak is the larger of the two: Llama-3-8B with 1,024 sequences, 1,024 x 128,256 x 24 B = 2.94 GiB; an OOM
  there is logged "Tried to allocate 1.16 GiB" for 1,024 x 152,064 int64 indices (Qwen2-VL-72B), the largest of
  these tensors.
- non-torch memory (CUDA context, NCCL): 0.07 GiB on one GPU (the reference log), 0.4 GiB with TP > 1
  (top of the 0.05-0.4 GiB range in reference/engines.md).
- CUDA graphs: 0 inside the budget (outside it in vLLM up to v0.20; profiled inside by default since v0.21.0);
  give ``--cuda-graph-memory`` to subtract a logged figure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from kvcalc.model import attention as att
from kvcalc.model.schema import HardwarePreset, ModelPreset
from kvcalc.out import units

ENGINES = ("ideal", "vllm", "sglang")
SOLVES = ("max-model-len", "max-concurrency", "gpu-memory-utilization")
DEFAULT_NON_TORCH_GIB_TP1 = 0.07
DEFAULT_NON_TORCH_GIB_TP = 0.4
FALLBACK_ACTIVATION_GIB = 1.0
CUDA_REPORTED_SHARE = 0.99      # without a preset figure: datasheet GB read as GiB x 0.99
ACTIVATION_BYTES = 2            # BF16 activations
SAMPLER_BYTES_PER_LOGIT = 2 + 4 + 4 + 8 + 1 + 4 + 1  # sampler warm-up, per request per vocab entry (docstring)


@dataclass(frozen=True)
class EngineInputs:
    """What an engine reads at start-up; None = estimate from the presets (see the module docstring)."""

    engine: str = "ideal"
    tp: int = 1
    max_model_len: int = 4096
    gpu_memory_utilization: float = 0.9
    mem_fraction_static: Optional[float] = None
    max_num_batched_tokens: Optional[int] = None
    max_num_seqs: Optional[int] = None
    block_size: Optional[int] = None
    total_memory_bytes: Optional[float] = None
    weights_bytes: Optional[float] = None
    activation_bytes: Optional[float] = None
    non_torch_bytes: Optional[float] = None
    cuda_graph_bytes: Optional[float] = None
    swa_full_tokens_ratio: Optional[float] = None   # SGLang: sliding pool tokens / full pool tokens (0.8)
    mamba_full_memory_ratio: Optional[float] = None  # SGLang: state pool / attention pool memory (0.9)
    max_mamba_cache_size: Optional[int] = None       # SGLang: state slots, instead of the ratio
    engine_version: Optional[str] = None             # whose rules: e.g. "0.20" (default vLLM 0.33, SGLang 0.5.23)


@dataclass(frozen=True)
class Resolved:
    """One input's value and where it came from ('log' = given by a flag, else how it was estimated)."""

    value: float
    origin: str


def total_memory(hw: HardwarePreset, inp: EngineInputs) -> Resolved:
    """Device memory as CUDA reports it [B]."""
    if inp.total_memory_bytes is not None:
        return Resolved(inp.total_memory_bytes, "given")
    if hw.cuda_total_bytes is not None:
        return Resolved(hw.cuda_total_bytes, f"preset cuda_total_gib {hw.cuda_total_gib:g}")
    return Resolved(units.gib_to_bytes(hw.hbm_gb * CUDA_REPORTED_SHARE),
                    f"no cuda_total_gib in the preset: {hw.hbm_gb:g} GB read as GiB x {CUDA_REPORTED_SHARE}")


def weights(model: ModelPreset, inp: EngineInputs) -> Resolved:
    """Weights held by one GPU [B]."""
    if inp.weights_bytes is not None:
        return Resolved(inp.weights_bytes, "given")
    return Resolved(model.weight_bytes / inp.tp, f"model weights / {inp.tp} TP ranks")


def non_torch(inp: EngineInputs) -> Resolved:
    """CUDA context and NCCL buffers per GPU [B]."""
    if inp.non_torch_bytes is not None:
        return Resolved(inp.non_torch_bytes, "given")
    gib = DEFAULT_NON_TORCH_GIB_TP1 if inp.tp == 1 else DEFAULT_NON_TORCH_GIB_TP
    return Resolved(units.gib_to_bytes(gib), f"estimate {gib} GiB at TP {inp.tp}")


def cuda_graphs(inp: EngineInputs) -> Resolved:
    """CUDA-graph memory subtracted from the budget [B]: 0 unless given (outside the budget up to v0.20)."""
    if inp.cuda_graph_bytes is not None:
        return Resolved(inp.cuda_graph_bytes, "given")
    return Resolved(0.0, "outside the budget up to vLLM 0.20; v0.21+: --cuda-graph-memory")


def model_layers(model: ModelPreset) -> int:
    """Layers that hold KV (MTP layers excluded) [count]."""
    return sum(g.layers for g in model.layer_groups if not g.mtp)


def activation_bytes_per_token(model: ModelPreset, tp: int = 1) -> Optional[float]:
    """Peak activation of one batched token in vLLM's profiling run [B/token]; None when shapes are missing.

    2 B x (per-layer active parameters / hidden + 2 x hidden) / TP (the MLP's width shards over TP ranks;
    the residual stream does not, kept whole here for simplicity of the bound).
    """
    hidden = model.hidden_size or (model.q_heads * model.qk_head_dim if model.q_heads and model.qk_head_dim
                                   else None)
    layers = model_layers(model)
    if hidden is None or layers == 0:
        return None
    embed = (model.vocab_size or 0) * hidden * (1 if model.tie_word_embeddings else 2)
    per_layer = (model.params_active - embed) / layers
    return ACTIVATION_BYTES * (per_layer / hidden / tp + 2 * hidden)


def sampler_warmup_bytes(model: ModelPreset, max_seqs: int) -> float:
    """Peak memory of vLLM's sampler warm-up on ``max_seqs`` dummy requests [B]: max_seqs x vocab x 24 B (the
    module docstring); 0 without a vocabulary size."""
    return max_seqs * (model.vocab_size or 0) * SAMPLER_BYTES_PER_LOGIT


def activation(model: ModelPreset, inp: EngineInputs, batched_tokens: int, max_seqs: int = 0) -> Resolved:
    """Peak activation of the profiling run [B]: the larger of the forward pass over ``batched_tokens`` and the
    sampler warm-up over ``max_seqs`` requests."""
    if inp.activation_bytes is not None:
        return Resolved(inp.activation_bytes, "given")
    per_token = activation_bytes_per_token(model, inp.tp)
    sampler = sampler_warmup_bytes(model, max_seqs)
    sampler_note = (f"sampler warm-up {max_seqs:,} seqs x {model.vocab_size:,} vocab x {SAMPLER_BYTES_PER_LOGIT} B"
                    if sampler else "")
    if per_token is None:
        forward, note = units.gib_to_bytes(FALLBACK_ACTIVATION_GIB), \
            f"no hidden size in the preset: {FALLBACK_ACTIVATION_GIB} GiB assumed"
    else:
        forward, note = per_token * batched_tokens, f"{batched_tokens:,} batched tokens x {per_token:,.0f} B"
    if sampler > forward:
        return Resolved(sampler, f"{sampler_note} (> forward {units.fmt_gib(forward)}; estimate)")
    return Resolved(forward, note + (f" (> {sampler_note}); estimate" if sampler else " (estimate from shapes)"))


def page_bytes_per_token(g: att.GroupLayout, tp: int) -> float:
    """One layer's KV bytes per token on one TP rank [B]: the entry (+ indexer key) x this rank's head share.

    GQA shards over ranks (ceil(kv_heads / tp) heads each); a single latent (MLA) is replicated on every rank.
    """
    idx = g.indexer_bytes if g.indexed == "dense" else 0
    return (g.entry_bytes + idx) * att.per_gpu_share(g, tp)


ATTENTION_KINDS = ("full", "sliding", "chunked", "mla", "dsa")  # layers whose heads QKVParallelLinear splits


def check_tp(model: ModelPreset, groups: list[att.GroupLayout], tp: int, engine: str) -> None:
    """Refuse a tensor-parallel size the engine refuses at start-up (InputError naming --gpus), per attention group:

    - the query heads must divide by TP: vLLM's ModelConfig.verify_with_parallel_config ("Total number of
      attention heads (64) must be divisible by tensor parallel size (3)", vllm/config.py), and in both engines
      QKVParallelLinear's ``num_heads = divide(total_num_heads, tp_size)`` (vllm/model_executor/layers/linear.py;
      sgl-project/sglang python/sglang/srt/layers/linear.py, the same class), ``divide`` asserting divisibility;
    - KV heads: ``divide(total_num_kv_heads, tp_size)`` when TP < KV heads, else ``divide(tp_size,
      total_num_kv_heads)`` (replicas): KV heads divisible by TP, or TP by KV heads. A single latent (MLA, DSA)
      is replicated and has no such rule; linear-attention and Mamba layers are not checked here.
    """
    from kvcalc.out.errors import InputError

    who = {"vllm": "vLLM", "sglang": "SGLang"}.get(engine, engine)
    for g in groups:
        if g.kind not in ATTENTION_KINDS:
            continue
        heads = g.q_heads or model.q_heads
        if heads and heads % tp:
            raise InputError(f"--gpus {tp}: {who} refuses tensor parallel size {tp}: the {heads} attention heads "
                             f"({g.name}) are not divisible by {tp}; use a TP that divides {heads}")
        kv = g.kv_heads
        if kv and kv % tp and tp % kv:
            raise InputError(f"--gpus {tp}: {who} refuses tensor parallel size {tp}: the {kv} KV heads ({g.name}) "
                             f"are not divisible by {tp}, nor is {tp} by {kv}")


def check_engine_groups(groups: list[att.GroupLayout], engine: str) -> None:
    """Engine sizing covers full, sliding, MLA and DSA layers (and as-stated figures), and linear-attention and
    Mamba layers next to attention; raise on the others."""
    from kvcalc.out.errors import InputError

    known = ("full", "sliding", "chunked", "mla", "dsa", "flat") + att.RECURRENT_KINDS
    known += ("swa", "csa", "hca")  # DeepSeek V4's compressed layers: engine_vllm_v4, engine_sglang_v4
    for g in groups:
        if g.kind not in known:
            raise InputError(f"--engine {engine}: {g.kind} layers ({g.name}) are not modelled by the engine "
                             "sizing yet; use --engine ideal")
    if all(g.kind in att.RECURRENT_KINDS for g in groups):
        raise InputError(f"--engine {engine}: a model without attention layers is not modelled; use --engine ideal")


# The engine versions whose rules kvcalc follows by default (tools/engine-sizing runs these)
DEFAULT_VERSIONS = {"vllm": (0, 33, 0), "sglang": (0, 5, 23)}


def parse_version(text: str, flag: str = "--engine-version") -> tuple:
    """'0.33', 'v0.20.1' -> (0, 33), (0, 20, 1); anything else is one-line bad input naming ``flag``."""
    import re

    from kvcalc.out.errors import InputError

    t = str(text).strip()
    m = re.fullmatch(r"v?(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4}))?", t)
    if not m:
        raise InputError(f"{flag}: {t[:40]!r} is not a version like 0.33 or 0.20.1")
    return tuple(int(p) for p in m.groups() if p is not None)


def engine_version(inp: EngineInputs) -> tuple:
    """The engine version whose rules apply: given, else the default for the engine."""
    if inp.engine_version:
        return parse_version(inp.engine_version)
    return DEFAULT_VERSIONS.get(inp.engine, (0, 33, 0))
