"""SGLang's start-up defaults that depend on the GPU: mem_fraction_static from reserved memory (SGLang 0.5.23).

``_handle_gpu_memory_settings`` (python/sglang/srt/arg_groups/memory_hook.py), with gpu_mem the device's memory in
MiB as CUDA reports it (``get_device_memory_capacity``):

- chunked_prefill_size and the decode CUDA graph's max_bs by gpu_mem: < 20 GiB 2,048 / 8; < 35 GiB 4,096 / 48
  (160 at TP >= 4); < 60 GiB 4,096 / 32 (160); < 160 GiB 8,192 / 256 (512 at TP >= 4); else 16,384 / 512;
- reserved_mem [MiB] = 512 + 1.5 x max(chunked_prefill_size, 2,048) + TP x PP / 8 x 1,024
  + ``reserve_for_graph_mb``: 2 x the decode max_bs, plus the prefill graph's: 1.5 GiB on an MLA backend, else
  8 MiB per captured prefill size (``generate_prefill_cuda_graph_batch_sizes`` up to chunked_prefill_size:
  58 sizes at 8,192) - none where the prefill graph is off: DeepSeek V4, and a model SGLang serves as
  multimodal unless its architecture is on ``multimodal_breakable_cuda_graph_supported_model_archs``
  (configs/model_config.py; cuda_graph_hook.py ``disable_breakable_cudagraph_if_incompatible``: Qwen3.5 is, Gemma 4
  is not);
  at least 10 GiB when gpu_mem > 60 GiB;
- mem_fraction_static = round((gpu_mem - reserved_mem) / gpu_mem, 3), then for a model SGLang serves as
  multimodal x 0.95 x clamp(1 - 0.1 x (ViT layers x ViT hidden^2 / (24 x 1,024^2) - 1), 0.8, 1.05)
  (``adjust_mem_fraction_for_vlm``, not rounded again; the ViT's shape is the preset's vision_layers /
  vision_hidden_size, from ``vision_config.num_hidden_layers`` / ``hidden_size``, SGLang's getattr defaults 24 and
  1,024 where absent: Qwen3.5's tower names its layers ``depth``, so SGLang takes 24).

One H100 (79.19 GiB = 81,089.75 MiB): dense 512 + 12,288 + 128 + 512 + 58 x 8 = 13,904 MiB -> 0.829; MLA
12,928 + 512 + 1,536 -> 0.815; TP 8 dense 512 + 12,288 + 1,024 + 1,024 + 464 -> 0.811 (tests/test_engine_defaults.py).
"""

from __future__ import annotations

from kvcalc.model import attention as att
from kvcalc.model.schema import ModelPreset

MIB = 2**20
# (below this many GiB, chunked_prefill_size, decode max_bs at TP < 4, at TP >= 4)
GPU_TIERS = ((20, 2048, 8, 8), (35, 4096, 48, 160), (60, 4096, 32, 160), (160, 8192, 256, 512))
LARGEST_TIER = (16384, 512, 512)
RESERVE_FLOOR_MIB = 10 * 1024       # when gpu_mem > 60 GiB
MLA_PREFILL_GRAPH_MIB = 1.5 * 1024
PREFILL_GRAPH_MIB_PER_SIZE = 8
VLM_BASE_FACTOR = 0.95
VIT_BASELINE = (24, 1024)   # ViT-L/14: SGLang's baseline and its getattr defaults (layers, hidden size)
VIT_SENSITIVITY = 0.1       # the factor moves 10% per 100% more ViT complexity, clamped to [0.8, 1.05]


def gpu_defaults(gpu_mib: float, tp: int) -> tuple[int, int]:
    """(chunked_prefill_size, decode CUDA graph max_bs) for this GPU [tokens, requests]."""
    for below_gib, chunk, small, large in GPU_TIERS:
        if gpu_mib < below_gib * 1024:
            return chunk, small if tp < 4 else large
    return LARGEST_TIER[0], LARGEST_TIER[1]


def prefill_graph_sizes(max_bs: int) -> list[int]:
    """``generate_prefill_cuda_graph_batch_sizes``: the token counts the prefill CUDA graph captures."""
    sizes = (list(range(4, 33, 4)) + list(range(48, 257, 16)) + list(range(288, 513, 32))
             + list(range(576, 1025, 64)) + list(range(1280, 4097, 256)) + list(range(4608, max_bs + 1, 512)))
    return [s for s in sizes if s <= max_bs]


# multimodal architectures (of those kvcalc describes) that keep the breakable prefill CUDA graph (SGLang 0.5.23)
MM_PREFILL_GRAPH_ARCHS = ("Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration",
                          "KimiK25ForConditionalGeneration")


def reserved_mib(groups: list[att.GroupLayout], gpu_mib: float, tp: int, chunk: int, decode_bs: int,
                 prefill_graph: bool = True) -> float:
    """SGLang's reserved_mem for activations and CUDA graphs [MiB] (the module docstring); ``prefill_graph`` False
    for a multimodal model whose prefill graph SGLang turns off."""
    kinds = {g.kind for g in groups}
    reserved = 512 + 1.5 * max(chunk, 2048) + tp / 8 * 1024 + 2 * decode_bs
    if prefill_graph and not kinds & {"swa", "csa", "hca"}:  # DeepSeek V4 runs its prefill without a CUDA graph
        mla = bool(kinds & {"mla", "dsa"})
        reserved += MLA_PREFILL_GRAPH_MIB if mla else PREFILL_GRAPH_MIB_PER_SIZE * len(prefill_graph_sizes(chunk))
    if gpu_mib > 60 * 1024:
        reserved = max(reserved, RESERVE_FLOOR_MIB)
    return reserved


def default_mem_fraction_static(model: ModelPreset, groups: list[att.GroupLayout], cuda_total_bytes: float,
                                tp: int, chunked_prefill: int | None = None,
                                vlm: bool = False) -> tuple[float, str]:
    """SGLang 0.5.23's mem_fraction_static for this model on a GPU of ``cuda_total_bytes`` at TP ``tp``, and how
    it came about (text)."""
    gpu_mib = cuda_total_bytes / MIB
    chunk, decode_bs = gpu_defaults(gpu_mib, tp)
    chunk = chunked_prefill or chunk
    graph = not vlm or model.architecture in MM_PREFILL_GRAPH_ARCHS
    reserved = reserved_mib(groups, gpu_mib, tp, chunk, decode_bs, prefill_graph=graph)
    frac = round((gpu_mib - reserved) / gpu_mib, 3)
    how = (f"SGLang default: ({gpu_mib:,.0f} - {reserved:,.0f} MiB reserved"
           f"{'' if graph else ', no prefill CUDA graph for this multimodal architecture'}) / {gpu_mib:,.0f} MiB")
    if vlm:
        factor, vit = vlm_factor(model)
        frac *= factor
        how += f" x {factor:.4f} for the vision tower ({vit})"
    return frac, how


def vlm_factor(model: ModelPreset) -> tuple[float, str]:
    """``adjust_mem_fraction_for_vlm``: 0.95 x clamp(1 - 0.1 x (layers x hidden^2 / (24 x 1,024^2) - 1), 0.8, 1.05)
    for the model's vision tower, and its shape (text)."""
    layers = model.vision_layers or VIT_BASELINE[0]
    hidden = model.vision_hidden_size or VIT_BASELINE[1]
    ratio = layers * hidden**2 / (VIT_BASELINE[0] * VIT_BASELINE[1] ** 2)
    factor = VLM_BASE_FACTOR * max(0.8, min(1.05, 1.0 - VIT_SENSITIVITY * (ratio - 1.0)))
    absent = [n for n, v in (("layers", model.vision_layers), ("hidden size", model.vision_hidden_size)) if not v]
    shown = f"ViT {layers} layers x {hidden:,}" + (f"; {' and '.join(absent)} SGLang's default" if absent else "")
    return factor, shown
