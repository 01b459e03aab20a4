"""vLLM's and SGLang's start-up defaults that depend on the GPU, as their own code computes them."""

from __future__ import annotations

import pytest

from kvcalc.memory import engine_common as ec
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
