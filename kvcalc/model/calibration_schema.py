"""Calibration presets of the serving model (``presets/calibration/<hardware>.toml``): a handful of physical
efficiency figures per GPU type, the same for every model, fitted on measured ``vllm bench serve`` runs by
``bench/fit_calibration.py`` (see docs/serving-model.md). Validated like every preset (strict, bounded)."""

# No ``from __future__ import annotations``: schema.build() reads the field types as objects.
from dataclasses import dataclass
from typing import Annotated, Literal, Optional

from kvcalc.model.schema import STRICT, Bounds, Fraction, TokenCount
from kvcalc.out import units

OverheadUs = Annotated[float, Bounds(ge=0, le=1e6)]      # a fixed CPU/launch cost [us]: at most one second
NsPerToken = Annotated[float, Bounds(ge=0, le=1e6)]      # a per-token CPU cost [ns/token]
SeqCount = Annotated[int, Bounds(gt=0, le=units.MAX_REQUESTS)]


@dataclass(frozen=True)
class CalibrationPreset:
    """The serving model's efficiencies on one GPU type (see kvcalc/serve/step_time.py for where each enters)."""

    __pydantic_config__ = STRICT
    schema_version: Literal[1]
    source: str
    """how the figures were obtained (the fitting script and the measured rows)"""
    matmul_efficiency_max: Fraction
    """share of the dense tensor peak a large matmul reaches"""
    matmul_half_tokens: TokenCount
    """tokens per GEMM (rows of the activation matrix) at which the matmul efficiency is half its maximum"""
    matmul_half_width: TokenCount
    """output columns per GPU (N of a GEMM) at which a matmul's efficiency is halved: TP-split experts (1,536 / 8
    = 192 columns per GPU) run narrow, poorly filled GEMMs"""
    attention_efficiency: Fraction
    """share of the BF16 peak the attention kernels reach in prefill (FlashAttention and its kin)"""
    dequant_matmul_efficiency: Fraction
    """a weight-only quantised GEMM (weights dequantised in the kernel: MXFP4 or FP8 weights on a GPU without
    that math, W4A16/W8A16) relative to a native one"""
    hbm_efficiency: Fraction
    """share of the datasheet HBM bandwidth a step's weight and KV reads reach"""
    per_sequence_us: OverheadUs
    """per-step cost of each running sequence (sampling, block tables, input preparation) [us]"""
    vllm_step_us: OverheadUs
    """vLLM's fixed cost per step without --async-scheduling (scheduler, launch, sync) [us]"""
    vllm_async_step_us: OverheadUs
    """vLLM's fixed cost per step with --async-scheduling [us]"""
    sglang_step_us: OverheadUs
    """SGLang's fixed cost per step [us]"""
    trtllm_step_us: OverheadUs
    """TensorRT-LLM's fixed cost per step [us]"""
    frontend_us_per_request: OverheadUs
    """the API server's serial cost per request before the engine sees it (HTTP, chat template) [us]"""
    frontend_ns_per_input_token: NsPerToken
    """the API server's serial cost per prompt token (tokenising the text prompt) [ns/token]"""
    vllm_default_max_num_batched_tokens: TokenCount
    """vLLM's online-server default on this GPU (arg_utils: 8,192 on >= 70 GiB GPUs except A100, else 2,048)"""
    vllm_default_max_num_seqs: SeqCount
    """vLLM's online-server default on this GPU (1,024 on >= 70 GiB GPUs except A100, else 256)"""
    triton_attention_efficiency: Optional[Fraction] = None
    """share of the BF16 peak vLLM's Triton attention backend reaches in prefill, where it runs instead of
    FlashAttention: attention sinks (gpt-oss) below Hopper, FlashAttention 3 being Hopper-only (vLLM's gpt-oss
    recipe: "GPT-OSS works on Ampere devices by default, using the TRITON_ATTN attention backend"); absent = the
    GPU's attention_efficiency"""
    fp8_matmul_efficiency: Optional[Fraction] = None
    """share of the FP8 tensor peak a large matmul reaches where the GPU computes a model's weights in FP8
    (block-scaled FP8 GEMMs: per-block scales, the activations quantised first), in place of matmul_efficiency_max;
    absent = matmul_efficiency_max"""
    kernel_us: Annotated[float, Bounds(ge=0, le=1e3)] = 0.0
    """the fixed time of one GPU kernel of a step beyond its FLOPs and bytes (launch, ramp, tail, under CUDA
    graphs), paid by each of a layer's kernels every step (kvcalc/serve/kernel_count.py kernels_per_layer) and by
    every TP all-reduce on top of the link's latency [us]"""

    def __post_init__(self):
        if not self.source.strip():
            raise ValueError("source: say where the numbers come from")

    @property
    def display_name(self) -> str:
        """A one-line description for ``kvcalc presets list``: the serving model's efficiencies and how they were
        obtained (the source up to its first parenthesis or semicolon)."""
        import re

        how = self.source.split(" (")[0].split(";")[0].strip()
        fitted = re.search(r"on the (\d+) \S+ rows of (\S+)", how)
        if fitted:
            return f"serving-model efficiencies fitted on {fitted[1]} measured runs ({fitted[2]})"
        return f"serving-model efficiencies: {how}"


PRESET_KINDS = {"calibration": CalibrationPreset}
