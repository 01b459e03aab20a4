"""CUDA-graph decode steps (issue 18, held-out rows): SGLang and TensorRT-LLM replay a captured CUDA graph for a
decode-only batch of a size they captured, so such a step pays none of the engine's fixed per-step cost (the
calibration's sglang_step_us / trtllm_step_us); prefill and mixed steps and larger batches do. vLLM's per-step
cost is fitted on every step, graph or not, and applies to all. The kernel floor and the per-sequence cost stay
on every step."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from kvcalc.model import catalog
from kvcalc.serve import bench
from kvcalc.serve.calibration import calibration_for
from kvcalc.serve.step_time import TRTLLM_GRAPH_SIZES, cuda_graph_batches, step_model

STEP_US = 4000.0  # a round engine cost, so the difference a graph makes is that exactly


def _sm(engine: str, hw: str = "h100-sxm", tp: int = 1, model: str = "qwen3-8b"):
    h = catalog.load_hardware(hw)
    cal = dataclasses.replace(calibration_for(hw)[0], sglang_step_us=STEP_US, trtllm_step_us=STEP_US,
                              vllm_step_us=STEP_US)
    return step_model(catalog.load_model(model), h, catalog.load_link(h.scaleup_link), cal, tp, engine)


def _overhead_ms(sm, tokens, sequences) -> float:
    return 1e3 * float(sm.overhead_s(np.float64(tokens), np.float64(sequences)))


def test_sglang_graph_batch_limit_is_its_gpu_default():
    # SGLang's _handle_gpu_memory_settings (kvcalc/memory/engine_sglang_args.py): an H100 (79.19 GiB) or an H200
    # (139.8 GiB) is in the < 160 GiB tier: cuda_graph_max_bs 256 below TP 4, 512 at TP >= 4; an L40S (48 GB,
    # under 60 GiB) in the < 60 GiB tier: 32 below TP 4, 160 at TP >= 4
    assert cuda_graph_batches("sglang", catalog.load_hardware("h100-sxm"), 1) == {"graph_max_bs": 256}
    assert cuda_graph_batches("sglang", catalog.load_hardware("h200-sxm"), 8) == {"graph_max_bs": 512}
    assert cuda_graph_batches("sglang", catalog.load_hardware("l40s"), 1) == {"graph_max_bs": 32}
    assert cuda_graph_batches("sglang", catalog.load_hardware("l40s"), 4) == {"graph_max_bs": 160}
    assert cuda_graph_batches("vllm", catalog.load_hardware("h100-sxm"), 1) == {}


def test_trtllm_graph_sizes_are_its_default_config():
    # CudaGraphConfig with neither batch_sizes nor max_batch_size: max 128, no padding, sizes 1..31, 32, 64, 128
    assert TRTLLM_GRAPH_SIZES == tuple(range(1, 33)) + (64, 128)
    assert cuda_graph_batches("trtllm", catalog.load_hardware("a100-80g"), 1)["graph_max_bs"] == 128


@pytest.mark.parametrize("engine, tokens, sequences, pays", [
    # SGLang pads a decode batch up to the next captured size: every decode batch up to 256 replays a graph
    ("sglang", 4, 4, False), ("sglang", 256, 256, False), ("sglang", 257, 257, True),
    # a prefill (more tokens than sequences) runs eagerly, whatever its size
    ("sglang", 233, 1, True), ("sglang", 8192, 1, True),
    # TensorRT-LLM without padding replays only the exact sizes it captured
    ("trtllm", 32, 32, False), ("trtllm", 33, 33, True), ("trtllm", 64, 64, False), ("trtllm", 65, 65, True),
    ("trtllm", 128, 128, False), ("trtllm", 129, 129, True), ("trtllm", 40, 4, True),
    # vLLM pays its fitted cost on every step
    ("vllm", 4, 4, True), ("vllm", 8192, 1, True),
])
def test_which_steps_pay_the_engine_step_cost(engine, tokens, sequences, pays):
    sm = _sm(engine)
    # Qwen3-8B on one H100: kernel floor 36 layers x 9 kernels x kernel_us, per sequence per_sequence_us
    floor_ms = 1e3 * sm.kernel_floor_s
    per_seq_ms = 1e3 * sm.per_sequence_s * sequences
    assert _overhead_ms(sm, tokens, sequences) == pytest.approx(floor_ms + per_seq_ms + (4.0 if pays else 0.0))


def test_vectorised_steps_agree_with_single_ones():
    sm = _sm("trtllm")
    tokens = np.array([1.0, 32.0, 33.0, 64.0, 500.0])
    seqs = np.array([1.0, 32.0, 33.0, 64.0, 2.0])
    many = sm.overhead_s(tokens, seqs)
    assert [float(x) for x in many] == pytest.approx([float(sm.overhead_s(t, s)) for t, s in zip(tokens, seqs)])


def test_a_low_concurrency_sglang_decode_costs_no_engine_step():
    # Qwen3-8B, 4 requests at a time of 233 in / 221 out on one H100 (the held-out row 5 shape): almost every step
    # is a 4-request decode under SGLang's graph, so its TPOT is the weights' read + the kernel floor, not + the
    # 4 ms step cost; vLLM (the same 4 ms, paid on every step) is ~4 ms slower per token. SGLang's prefill-only
    # steps (one per admitted request, eager) still pay it: 4 ms x ~1 / 221 tokens
    hw = catalog.load_hardware("h100-sxm")
    cal = dataclasses.replace(calibration_for("h100-sxm")[0], sglang_step_us=STEP_US, vllm_step_us=STEP_US)

    def run(engine):
        return bench.simulate_spec(bench.BenchSpec(
            "qwen3-8b", catalog.load_model("qwen3-8b"), "h100-sxm", hw, catalog.load_link(hw.scaleup_link), cal,
            "h100-sxm", engine=engine, input_len=233, output_len=221, num_prompts=40, max_concurrency=4))[0]

    sg, vl = run("sglang"), run("vllm")
    assert vl["mean_tpot_ms"] - sg["mean_tpot_ms"] == pytest.approx(4.0, abs=0.5)
