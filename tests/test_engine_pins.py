"""--engine vllm pinned to vLLM 0.33.0's own sizing code, run for real configs on a CPU-only machine.

The figures below were produced by the shared engine-sizing tool (tools/engine-sizing/vllm_kv.py, the real vLLM
0.33.0 wheel; only the GPU faked as an SM 9.0 H100), one call per (config, TP):

    vllm_kv.py tests/fixtures/configs/NAME --tp TP --avail $((60 * 2**30)) --max-model-len 32768 --batched 8192

i.e. EngineArgs(max_model_len=32768, max_num_batched_tokens=8192, max_num_seqs=1024, kv_cache_dtype='auto',
everything else vLLM's default: prefix caching on, async scheduling on, the hybrid KV cache manager on) and
60 GiB of available KV memory per GPU. kvcalc is given the same budget the way its README shows:
80 GiB x 1.0 - 18 - 1 - 1 GiB = 60 GiB. The engine is never a test dependency: its output is pinned here.
Row: (num_blocks, logged "GPU KV cache size" tokens, KV-cache groups, blocks per request of max_model_len,
max concurrency, the groups' block sizes, bytes of one block of the pool).
The configs are tests/fixtures/configs (their sources in that folder's README).
"""

from __future__ import annotations

import pytest
from conftest import REPO

from kvcalc.memory import engine_common as ec
from kvcalc.memory.engine_vllm import vllm_sizing
from kvcalc.model import attention as att
from kvcalc.model import catalog

GiB = 2**30
CONFIGS = REPO / "tests" / "fixtures" / "configs"

VLLM_0_33 = {  # (config, TP): vLLM 0.33.0's figures (the command in the module docstring)
    ("gemma-3-27b", 1): (49_152, 187_673, 7, 8_582, 5.727336285248194, [16], 1_310_720),
    ("gemma-3-27b", 8): (393_216, 1_501_386, 7, 8_582, 45.81869028198555, [16], 163_840),
    ("glm-5", 1): (10_051, 643_264, 1, 512, 19.630859375, [64], 6_409_728),
    ("glm-5", 8): (10_051, 643_264, 1, 512, 19.630859375, [64], 6_409_728),
    ("gpt-oss-120b", 1): (109_226, 1_161_673, 2, 3_081, 35.45147679324894, [16], 589_824),
    ("gpt-oss-120b", 8): (873_813, 9_293_445, 2, 3_081, 283.6134371957157, [16], 73_728),
    ("kimi-k2", 1): (57_299, 916_784, 1, 2_048, 27.97802734375, [16], 1_124_352),
    ("kimi-k2", 8): (57_299, 916_784, 1, 2_048, 27.97802734375, [16], 1_124_352),
    ("llama-4-scout", 1): (81_920, 403_298, 4, 6_656, 12.307692307692308, [16], 786_432),
    ("nemotron-3-nano-30b-a3b", 1): (5_002, 5_853_769, 5, 28, 178.64285714285714, [2096], 12_877_824),
    ("nemotron-3-nano-30b-a3b", 8): (39_718, 17_353_058, 5, 75, 529.5733333333334, [528], 1_622_016),
    ("qwen3-32b", 1): (15_360, 245_760, 1, 2_048, 7.5, [16], 4_194_304),
    ("qwen3-32b", 8): (122_880, 1_966_080, 1, 2_048, 60.0, [16], 524_288),
    ("qwen3-next-80b-a3b", 1): (4_551, 2_259_502, 4, 66, 68.95454545454545, [576], 14_155_776),
    ("qwen3-next-80b-a3b", 8): (27_306, 4_970_905, 4, 180, 151.7, [192], 2_359_296),
}


def kvcalc_vllm(name: str, tp: int, **kw) -> dict:
    model = catalog.load_model(str(CONFIGS / name / "config.json"))
    inp = ec.EngineInputs(engine="vllm", tp=tp, total_memory_bytes=80 * GiB, gpu_memory_utilization=1.0,
                          weights_bytes=18 * GiB, activation_bytes=GiB, non_torch_bytes=GiB, max_model_len=32768,
                          max_num_batched_tokens=8192, **kw)
    return vllm_sizing(model, att.resolve_groups(model), catalog.load_hardware("h100-sxm"), inp)


@pytest.mark.parametrize("name,tp", sorted(VLLM_0_33))
def test_vllm_0_33_figures_equal_the_engines_own_code(name, tp):
    blocks, tokens, groups, per_request, concurrency, block_sizes, block_bytes = VLLM_0_33[(name, tp)]
    s = kvcalc_vllm(name, tp)
    assert s["kv_cache_memory_bytes"] == 60 * GiB
    assert (s["num_gpu_blocks"], s["kv_cache_tokens"], s["kv_groups"], s["blocks_per_request"]) == \
        (blocks, tokens, groups, per_request)
    assert s["max_concurrency"] == pytest.approx(concurrency, rel=1e-12)
    assert (s["block_sizes"], s["block_bytes"]) == (block_sizes, block_bytes)


def test_gpt_oss_by_hand_and_the_older_rules():
    # gpt-oss-120b, TP 1: 18 sliding (window 128) + 18 full layers, 8 KV heads x (64 + 64) x 2 B = 2,048 B per token
    # per layer; page 16 x 2,048 = 32,768 B; 2 groups of 18 -> one block = 18 x 32,768 = 589,824 B;
    # 60 GiB // 589,824 = 109,226 blocks. Per 32,768-token request: full 32,768 / 16 = 2,048 blocks; sliding
    # (in flight 2 x 8,192 under async scheduling) ceil(min(127 + 16,384, 32,768) / 16) + 1 = 1,033: 3,081 blocks;
    # concurrency 109,226 / 3,081 = 35.4515; logged int(35.4515 x 32,768) = 1,161,673 (the engine's figures above)
    s = kvcalc_vllm("gpt-oss-120b", 1)
    assert (s["max_in_flight_tokens"], s["blocks_per_request"], s["kv_cache_tokens"]) == (16_384, 3_081, 1_161_673)
    # --engine-version 0.20: 1 x 8,192 in flight -> ceil(8,319 / 16) + 1 = 521; 2,048 + 521 = 2,569 blocks;
    # logged 109,226 // 2 groups x 16 = 873,808 (what kvcalc reported before, from vLLM 0.20's rules)
    old = kvcalc_vllm("gpt-oss-120b", 1, engine_version="0.20")
    assert (old["max_in_flight_tokens"], old["blocks_per_request"], old["kv_cache_tokens"]) == (8192, 2569, 873_808)
    assert old["max_concurrency"] == pytest.approx(109_226 / 2_569)
    # 0.25: the 1x in-flight rule (async scheduling's 2x came with 0.26), the group-aware log (0.21+)
    mid = kvcalc_vllm("gpt-oss-120b", 1, engine_version="0.25.1")
    assert (mid["blocks_per_request"], mid["kv_cache_tokens"]) == (2569, int(109_226 / 2_569 * 32_768))
