"""vLLM's and SGLang's start-up defaults that depend on the GPU, as their own code computes them."""

from __future__ import annotations

import pytest

from kvcalc.memory import engine_common as ec
from kvcalc.memory.engine_sglang import sglang_sizing
from kvcalc.memory.engine_vllm import server_tier, vllm_sizing
from kvcalc.model import attention as att
from kvcalc.model import catalog

GiB = 2**30


@pytest.mark.parametrize("hw,batched,seqs", [
    # vLLM 0.33.0 engine/arg_utils.py EngineArgs.get_batch_defaults, UsageContext.OPENAI_API_SERVER column:
    # >= 160 GiB -> 16,384 / 1,024; >= 70 GiB and "a100" not in the device name -> 8,192 / 1,024; else 2,048 / 256
    ("h100-sxm", 8192, 1024),    # 79.19 GiB
    ("a100-80g", 2048, 256),     # 79.15 GiB, but an A100 (PR #17885)
    ("l40s", 2048, 256),         # 44.42 GiB
    ("b200", 16384, 1024),       # 180 GB: well above 160 GiB
])
def test_vllm_server_defaults_follow_the_gpu_class(hw, batched, seqs):
    model = catalog.load_model("qwen3-32b")
    s = vllm_sizing(model, att.resolve_groups(model), catalog.load_hardware(hw),
                    ec.EngineInputs(engine="vllm", max_model_len=4096))
    assert (s["max_num_batched_tokens"], s["max_num_seqs"]) == (batched, seqs)


def test_vllm_server_tier_edges():
    assert server_tier(160 * GiB) == (16384, 1024)
    assert server_tier(160 * GiB - 1) == (8192, 1024)
    assert server_tier(70 * GiB) == (8192, 1024)
    assert server_tier(70 * GiB, "NVIDIA A100-SXM4-80GB") == (2048, 256)
    assert server_tier(200 * GiB, "NVIDIA A100") == (16384, 1024)   # the A100 check is on the middle tier only
    assert server_tier(70 * GiB - 1) == (2048, 256)


# SGLang 0.5.23's default mem_fraction_static, as its own ServerArgs resolved it (tools/engine-sizing/sglang_kv.py:
# the "default_mem_fraction_static" it reports, ServerArgs without mem_fraction_static, for the same configs and TP
# as tests/test_engine_pins.py's SGLang rows; the GPU an H100 of 85,029,158,912 B as CUDA reports it, sg_fake.TOTAL)
SGLANG_0_5_23_MEM_FRACTION = {
    "qwen3-32b": (0.829, 0.811), "qwen3-30b-a3b": (0.829, 0.811), "gpt-oss-120b": (0.829, 0.811),
    "gemma-3-27b": (0.829, 0.811),           # multimodal, but SGLang serves Gemma3ForConditionalGeneration text-only
    "llama-4-scout": (0.829, 0.811), "mimo-v2-flash": (0.829, 0.811), "nemotron-3-nano-30b-a3b": (0.829, 0.811),
    "qwen3-next-80b-a3b": (0.829, 0.811),
    "kimi-k2": (0.815, 0.798), "glm-5": (0.815, 0.798),    # MLA / DSA: 1.5 GiB for the prefill graph
    "deepseek-v4-flash": (0.834, 0.817),     # V4: no prefill CUDA graph
    # multimodal, x adjust_mem_fraction_for_vlm (not rounded again): Qwen3.5's tower names its layers "depth", so
    # SGLang takes 24 layers x 1,152: 0.829 x 0.95 x (1 - 0.1 x (24 x 1,152^2 / (24 x 1,024^2) - 1)) = 0.76663
    "qwen3.5-27b": (0.7666307031249999, 0.749984921875),
    # Gemma 4 is multimodal and not on SGLang's breakable-prefill-graph allowlist: no prefill graph (13,440 MiB
    # reserved -> 0.834), then 27 x 1,152^2 / (24 x 1,024^2) = 1.4238: 0.834 x 0.95 x 0.95762 = 0.75872
    "gemma-4-26b-a4b": (0.7587200976562499, 0.743254580078125),
}
SG_FAKE_H100_BYTES = 85_029_158_912


@pytest.mark.parametrize("name", sorted(SGLANG_0_5_23_MEM_FRACTION))
def test_sglang_default_mem_fraction_equals_the_engines(name):
    from conftest import REPO

    from kvcalc.memory.engine_report import engine_groups
    from kvcalc.memory.engine_sglang import multimodal_reserve
    from kvcalc.memory.engine_sglang_args import default_mem_fraction_static

    model = catalog.load_model(str(REPO / "tests" / "fixtures" / "configs" / name / "config.json"))
    groups = engine_groups("sglang", model, att.KvOptions())
    got = tuple(default_mem_fraction_static(model, groups, SG_FAKE_H100_BYTES, tp,
                                            vlm=multimodal_reserve(model) > 0)[0] for tp in (1, 8))
    assert got == SGLANG_0_5_23_MEM_FRACTION[name]


def test_sglang_reserved_memory_by_hand():
    from kvcalc.memory.engine_sglang_args import gpu_defaults, prefill_graph_sizes, reserved_mib

    # 8 + 14 + 8 + 8 + 12 + 8 prefill graph sizes up to 8,192 tokens
    assert len(prefill_graph_sizes(8192)) == 58
    assert gpu_defaults(81_089.75, 1) == (8192, 256) and gpu_defaults(81_089.75, 8) == (8192, 512)
    assert gpu_defaults(45_486, 1) == (4096, 32) and gpu_defaults(184_320, 8) == (16384, 512)
    model = catalog.load_model("qwen3-32b")
    # dense on one H100: 512 + 1.5 x 8,192 + 1 / 8 x 1,024 + 2 x 256 + 58 x 8 = 13,904 MiB
    assert reserved_mib(att.resolve_groups(model), 81_089.75, 1, 8192, 256) == 13_904
    # a 24 GiB card: 512 + 1.5 x 4,096 + 128 + 2 x 48 + 8 x 50 sizes (8 + 14 + 8 + 8 + 12) = 7,280 MiB, no 10 GiB floor
    assert reserved_mib(att.resolve_groups(model), 24_000, 1, 4096, 48) == 7_280


def test_sglang_sizing_uses_the_reserved_memory_default_and_the_old_table_for_0_4():
    model = catalog.load_model("qwen3-32b")
    hw = catalog.load_hardware("h100-sxm")
    s = sglang_sizing(model, att.resolve_groups(model), hw, ec.EngineInputs(engine="sglang", max_model_len=4096))
    assert s["mem_fraction_static"] == 0.829 and "reserved" in s["mem_fraction_origin"]
    old = sglang_sizing(model, att.resolve_groups(model), hw,
                        ec.EngineInputs(engine="sglang", max_model_len=4096, engine_version="0.4.6"))
    assert old["mem_fraction_static"] == 0.88
