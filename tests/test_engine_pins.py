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

import dataclasses

import pytest
from conftest import REPO

from kvcalc.memory import engine_common as ec
from kvcalc.memory.engine_report import engine_groups
from kvcalc.memory.engine_sglang import sglang_sizing
from kvcalc.memory.engine_vllm import vllm_sizing
from kvcalc.model import attention as att
from kvcalc.model import catalog

GiB = 2**30
CONFIGS = REPO / "tests" / "fixtures" / "configs"

VLLM_0_33 = {  # (config, TP): vLLM 0.33.0's figures (the command in the module docstring)
    ("deepseek-v4-flash", 1): (64_280, 309_299, 5, 6_810, 9.439060205580029, [4, 8, 64, 256], 1_002_240),
    ("deepseek-v4-flash", 8): (64_280, 309_299, 5, 6_810, 9.439060205580029, [4, 8, 64, 256], 1_002_240),
    ("deepseek-v4-pro", 1): (44_864, 215_874, 5, 6_810, 6.587958883994126, [4, 8, 64, 256], 1_435_968),
    ("deepseek-v4-pro", 8): (44_864, 215_874, 5, 6_810, 6.587958883994126, [4, 8, 64, 256], 1_435_968),
    ("gemma-3-27b", 1): (49_152, 187_673, 7, 8_582, 5.727336285248194, [16], 1_310_720),
    ("gemma-3-27b", 8): (393_216, 1_501_386, 7, 8_582, 45.81869028198555, [16], 163_840),
    # Gemma 4 26B-A4B: K and V stored on its attention_k_eq_v layers; unify_kv_cache_spec_page_size raises the full
    # layers' 16-token blocks (2 x 512 x 2 x 2 B x 16 = 65,536 B) to 32 to match the sliding page (131,072 B)
    ("gemma-4-26b-a4b", 1): (98_304, 497_947, 6, 6_469, 15.196166331735972, [16, 32], 655_360),
    ("gemma-4-26b-a4b", 8): (393_216, 2_699_539, 6, 4_773, 82.38340666247643, [16, 32], 163_840),
    ("glm-5", 1): (10_051, 643_264, 1, 512, 19.630859375, [64], 6_409_728),
    ("glm-5", 8): (10_051, 643_264, 1, 512, 19.630859375, [64], 6_409_728),
    ("gpt-oss-120b", 1): (109_226, 1_161_673, 2, 3_081, 35.45147679324894, [16], 589_824),
    ("gpt-oss-120b", 8): (873_813, 9_293_445, 2, 3_081, 283.6134371957157, [16], 73_728),
    ("kimi-k2", 1): (57_299, 916_784, 1, 2_048, 27.97802734375, [16], 1_124_352),
    ("kimi-k2", 8): (57_299, 916_784, 1, 2_048, 27.97802734375, [16], 1_124_352),
    ("llama-4-scout", 1): (81_920, 403_298, 4, 6_656, 12.307692307692308, [16], 786_432),
    ("llama-4-scout", 8): (655_360, 3_226_387, 4, 6_656, 98.46153846153847, [16], 98_304),
    # MiMo-V2-Flash: 9 full layers 4 x (192 + 128) x 2 B x 16 = 40,960 B pages, raised to 32 tokens (81,920 B,
    # unify_kv_cache_spec_page_size) to match the 39 sliding layers' 16 x 8 x 320 x 2 B; 1 full group of 9 + 5
    # sliding groups of 8, 8, 8, 8, 7 layers (the engine's) -> one block 9 x 81,920 = 737,280 B; 60 GiB // 737,280
    # = 87,381
    ("mimo-v2-flash", 1): (87_381, 462_643, 6, 6_189, 14.118759088705769, [16, 32], 737_280),
    # TP 8: 1 KV head per rank on both kinds (the 4 full heads replicated), equal pages, no unification
    ("mimo-v2-flash", 8): (699_050, 3_175_720, 6, 7_213, 96.91529183418827, [16], 92_160),
    ("nemotron-3-nano-30b-a3b", 1): (5_002, 5_853_769, 5, 28, 178.64285714285714, [2096], 12_877_824),
    ("nemotron-3-nano-30b-a3b", 8): (39_718, 17_353_058, 5, 75, 529.5733333333334, [528], 1_622_016),
    ("qwen3-30b-a3b", 1): (40_960, 655_360, 1, 2_048, 20.0, [16], 1_572_864),
    ("qwen3-30b-a3b", 8): (163_840, 2_621_440, 1, 2_048, 80.0, [16], 393_216),
    ("qwen3-32b", 1): (15_360, 245_760, 1, 2_048, 7.5, [16], 4_194_304),
    ("qwen3-32b", 8): (122_880, 1_966_080, 1, 2_048, 60.0, [16], 524_288),
    ("qwen3-next-80b-a3b", 1): (4_551, 2_259_502, 4, 66, 68.95454545454545, [576], 14_155_776),
    ("qwen3-next-80b-a3b", 8): (27_306, 4_970_905, 4, 180, 151.7, [192], 2_359_296),
    # Qwen3.5-27B (48 Gated DeltaNet + 16 full layers), mamba_cache_mode 'align': test_qwen3_5_by_hand
    ("qwen3.5-27b", 1): (1_181, 789_775, 4, 49, 24.102040816326532, [832], 54_525_952),
    ("qwen3.5-27b", 8): (8_777, 3_465_117, 4, 83, 105.74698795180723, [448], 7_340_032),
}


def kvcalc_vllm(name: str, tp: int, **kw) -> dict:
    model = catalog.load_model(str(CONFIGS / name / "config.json"))
    inp = ec.EngineInputs(engine="vllm", tp=tp, total_memory_bytes=80 * GiB, gpu_memory_utilization=1.0,
                          weights_bytes=18 * GiB, activation_bytes=GiB, non_torch_bytes=GiB, max_model_len=32768,
                          max_num_batched_tokens=8192, **kw)
    return vllm_sizing(model, engine_groups("vllm", model, att.KvOptions()), catalog.load_hardware("h100-sxm"), inp)


@pytest.mark.parametrize("name,tp", sorted(VLLM_0_33))
def test_vllm_0_33_figures_equal_the_engines_own_code(name, tp):
    blocks, tokens, groups, per_request, concurrency, block_sizes, block_bytes = VLLM_0_33[(name, tp)]
    s = kvcalc_vllm(name, tp)
    assert s["kv_cache_memory_bytes"] == 60 * GiB
    assert (s["num_gpu_blocks"], s["kv_cache_tokens"], s["kv_groups"], s["blocks_per_request"]) == \
        (blocks, tokens, groups, per_request)
    assert s["max_concurrency"] == pytest.approx(concurrency, rel=1e-12)
    assert (s["block_sizes"], s["block_bytes"]) == (block_sizes, block_bytes)


# vLLM 0.33.0's DeepSeek V4 groups (same command): (layers, block size, window, bytes of one block of the group) and
# the bytes per token it sums over its KV layers (page / block size); TP 8 gives the same: the latent is replicated
VLLM_0_33_V4_GROUPS = {
    "deepseek-v4-flash": ([(22, 64, 128, 823_680), (21, 64, 128, 786_240), (62, 256, None, 1_002_240),
                           (42, 4, 8, 870_912), (20, 8, 128, 656_640)], 328_878.0, 167),
    "deepseek-v4-pro": ([(31, 64, 128, 1_160_640), (30, 64, 128, 1_123_200), (91, 256, None, 1_435_968),
                         (31, 8, 128, 1_017_792), (60, 4, 8, 1_244_160)], 479_558.25, 243),
}


@pytest.mark.parametrize("name", sorted(VLLM_0_33_V4_GROUPS))
@pytest.mark.parametrize("tp", [1, 8])
def test_vllm_0_33_deepseek_v4_groups_equal_the_engines(name, tp):
    groups, per_token, kv_layers = VLLM_0_33_V4_GROUPS[name]
    s = kvcalc_vllm(name, tp)
    mine = sorted((g.layers, g.block_size, g.window_tokens, b) for g, b in zip(s["kgroups"], s["group_bytes"]))
    assert mine == sorted(groups, key=lambda g: (g[0], g[1], g[2] or 0, g[3]))
    assert (s["kv_bytes_per_token_per_gpu"], s["kv_layers"]) == (per_token, kv_layers)


def test_vllm_deepseek_v4_pages_by_hand():
    # V4 Flash, 584 B entries, pages padded to multiples of 576 B: raw window 64 x 584 = 37,376 -> 37,440;
    # CSA 256 / 4 = 64 entries -> 37,440; HCA 256 / 128 = 2 -> 1,168 -> 1,728; indexer 64 x (128 + 4) = 8,448
    # -> 8,640; C4 compressor 4 x 2 x 2 x 512 x 4 B = 32,768 -> 32,832, its indexer's 4 x 2 x 2 x 128 x 4 = 8,192
    # -> 8,640; C128 compressor 8 x 2 x 1 x 512 x 4 = 32,768 -> 32,832
    from kvcalc.memory.engine_vllm_v4 import approximate_gcd, layer_specs

    model = catalog.load_model("deepseek-v4-flash")
    pages = sorted({(key, page) for key, page, _ in layer_specs(model)})
    assert pages == sorted([(("sliding", 64, 128), 37_440), (("full", 256, None), 37_440),
                            (("full", 256, None), 1_728), (("full", 256, None), 8_640),
                            (("sliding", 4, 8), 32_832), (("sliding", 4, 8), 8_640), (("sliding", 8, 128), 32_832)])
    # repeats per group: at least 21 (the C4 states' 21 + 21), least padding over 43, 21, 20: d = 22 pads 1 + 1 + 2
    assert approximate_gcd([43, 21, 20], 21) == 22
    assert approximate_gcd([61, 30, 31], 30) == 31     # V4 Pro: 31 pads 1 + 1 + 0


def test_vllm_deepseek_v4_takes_only_its_backend_block_size():
    with pytest.raises(Exception, match="256-token blocks"):
        kvcalc_vllm("deepseek-v4-flash", 1, block_size=16)


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


def test_qwen3_5_by_hand():
    # Qwen3.5-27B, TP 1: a full layer 4 KV heads x (256 + 256) x 2 B = 4,096 B per token; a Gated DeltaNet state
    # conv (2 x 16 x 128 + 48 x 128) x 3 x 2 B = 61,440 + recurrent 48 x 128 x 128 x 4 B (mamba_ssm_dtype float32)
    # = 3,207,168 B. Prefix caching on -> mamba_cache_mode 'align', blocks aligned to 64 (the GDN checkpoint):
    # 64 x cdiv(3,207,168, 64 x 4,096) = 832 tokens (784 = cdiv(3,207,168, 4,096) rounded to 16, unaligned);
    # page 832 x 4,096 = 3,407,872 B, the state padded to it; 3 state groups + 1 full group of 16 layers ->
    # one block 16 x 3,407,872 = 54,525,952 B; 60 GiB // 54,525,952 = 1,181 blocks. A 32,768-token request:
    # cdiv(32,768, 832) = 40 full blocks + 3 per state group (align mode) x 3 = 49; 1,181 / 49 = 24.10x;
    # logged int(24.102 x 32,768) = 789,775 tokens (the engine's row above)
    s = kvcalc_vllm("qwen3.5-27b", 1)
    assert (s["block_sizes"], s["block_bytes"], s["num_gpu_blocks"]) == ([832], 16 * 832 * 4096, 1181)
    assert 64_424_509_440 // 54_525_952 == 1181 and 40 + 3 * 3 == s["blocks_per_request"]
    assert s["kv_cache_tokens"] == int(1181 / 49 * 32768) == 789_775


def test_gemma_4_k_and_v_and_page_unification_by_hand():
    # Gemma 4 26B-A4B, TP 1: 25 sliding layers 8 KV heads x (256 + 256) x 2 B = 8,192 B per token; 5 full layers with
    # attention_k_eq_v: the ideal stores K once (2 x 512 x 2 B = 2,048 B), both engines K and V (4,096 B):
    # 25 x 8,192 + 5 x 4,096 = 225,280 B/token against the ideal's 215,040
    s = kvcalc_vllm("gemma-4-26b-a4b", 1)
    assert s["kv_bytes_per_token_per_gpu"] == 25 * 8192 + 5 * 4096 == 225_280
    ideal = catalog.load_model(str(CONFIGS / "gemma-4-26b-a4b" / "config.json"))
    assert sum(g.layers * g.entry_bytes for g in att.resolve_groups(ideal)) == 25 * 8192 + 5 * 2048 == 215_040
    # pages: sliding 16 x 8,192 = 131,072 B; full 16 x 4,096 = 65,536 B, raised to 32 tokens (131,072 B); 6 groups of
    # 5 layers -> one block 5 x 131,072 = 655,360 B; 60 GiB // 655,360 = 98,304 blocks
    assert (s["block_sizes"], s["block_bytes"], s["num_gpu_blocks"]) == ([16, 32], 655_360, 60 * 2**30 // 655_360)
    # per request: full cdiv(32,768, 32) = 1,024 blocks; each sliding group cdiv(1,023 + 16,384, 16) + 1 = 1,089:
    # 1,024 + 5 x 1,089 = 6,469; 98,304 / 6,469 = 15.196x
    assert s["blocks_per_request"] == 1024 + 5 * 1089 == 6469


# SGLang 0.5.23's figures, from the shared tool's sglang_kv.py (the real SGLang wheel; torch.cuda faked as 8 x H100):
#     sglang_kv.py tests/fixtures/configs/NAME --tp TP --pre 80 --weights 10 --frac 0.875 --ctx 32768
# i.e. ServerArgs(context_length=32768, mem_fraction_static=0.875, everything else SGLang's default) ->
# KVCacheConfigurator._resolve_memory_pool_config with 80 GiB free at start and 10 GiB of weights: a budget of
# 80 x 0.875 - 10 = 60 GiB. Row: (max_total_num_tokens, full pool tokens, sliding pool tokens (hybrid SWA only),
# max_running_requests, max_mamba_cache_size (Mamba hybrids), page size).
SGLANG_0_5_23 = {
    # DeepSeek V4 (DSV4PoolConfigurator; the same sglang_kv.run call, which also read off its bytes per full token,
    # 7,086.75 Flash / 10,115.25 Pro, and its fixed C128 state, 2,715,811,840 / 4,209,508,352 B)
    ("deepseek-v4-flash", 1): (8707584, 8707584, 870656, 256, None, 256),
    ("deepseek-v4-flash", 8): (8707584, 8707584, 870656, 256, None, 256),
    ("deepseek-v4-pro", 1): (5952768, 5952768, 595200, 256, None, 256),
    ("deepseek-v4-pro", 8): (5952768, 5952768, 595200, 256, None, 256),
    ("gemma-3-27b", 1): (126843, None, None, 2048, None, 1),
    ("gemma-3-27b", 8): (1014750, None, None, 4096, None, 1),
    # Gemma 4: hybrid SWA; K and V on the k_eq_v layers: full 5 x 4,096 B, sliding 25 x 8,192 B per token
    ("gemma-4-26b-a4b", 1): (348956, 348956, 279164, 4096, None, 1),
    ("gemma-4-26b-a4b", 8): (2093738, 2093738, 1674990, 4096, None, 1),
    ("glm-5", 1): (643264, None, None, 4096, None, 64),
    ("glm-5", 8): (643264, None, None, 4096, None, 64),
    ("gpt-oss-120b", 1): (970903, 970903, 776722, 4096, None, 1),
    ("gpt-oss-120b", 8): (7767229, 7767229, 6213783, 4096, None, 1),
    ("kimi-k2", 1): (916787, None, None, 4096, None, 1),
    ("kimi-k2", 8): (916787, None, None, 4096, None, 1),
    # MiMo-V2-Flash: hybrid SWA with its own sliding heads: full 9 x 4 x (192 + 128) x 2 B = 23,040, sliding
    # 39 x 8 x 320 x 2 B = 199,680 B per token; full = floor(60 GiB / (23,040 + 0.8 x 199,680)) = 352,462
    ("mimo-v2-flash", 1): (352462, 352462, 281969, 4096, None, 1),
    ("mimo-v2-flash", 8): (2504062, 2504062, 2003249, 4096, None, 1),
    ("llama-4-scout", 1): (385505, 385505, 308404, 4096, None, 1),
    ("llama-4-scout", 8): (3084047, 3084047, 2467237, 4096, None, 1),
    ("nemotron-3-nano-30b-a3b", 1): (5524798, None, None, 124, 620, 1),
    ("nemotron-3-nano-30b-a3b", 8): (11039610, None, None, 994, 4972, 1),
    ("qwen3-30b-a3b", 1): (655360, None, None, 4096, None, 1),
    ("qwen3-30b-a3b", 8): (2621440, None, None, 4096, None, 1),
    ("qwen3-32b", 1): (245760, None, None, 3840, None, 1),
    ("qwen3-32b", 8): (1966080, None, None, 4096, None, 1),
    ("qwen3-next-80b-a3b", 1): (1382704, None, None, 78, 393, 1),
    ("qwen3-next-80b-a3b", 8): (2759906, None, None, 631, 3158, 1),
    ("qwen3.5-27b", 1): (518687, None, None, 39, 196, 1),
    ("qwen3.5-27b", 8): (2066526, None, None, 316, 1582, 1),
}


@pytest.mark.parametrize("name,tp", sorted(SGLANG_0_5_23))
def test_sglang_0_5_23_figures_equal_the_engines_own_code(name, tp):
    tokens, full, swa, running, mamba, page = SGLANG_0_5_23[(name, tp)]
    model = catalog.load_model(str(CONFIGS / name / "config.json"))
    inp = ec.EngineInputs(engine="sglang", tp=tp, total_memory_bytes=80 * GiB, mem_fraction_static=0.875,
                          weights_bytes=10 * GiB, max_model_len=32768)
    s = sglang_sizing(model, engine_groups("sglang", model, att.KvOptions()), catalog.load_hardware("h100-sxm"), inp)
    split = s["swa_full_tokens_ratio"] is not None
    assert (s["kv_cache_tokens"], s["max_num_seqs"], s["max_mamba_cache_size"], s["block_size"]) == \
        (tokens, running, mamba, page)
    assert (s["full_kv_cache_tokens"] if split else None, s["swa_kv_cache_tokens"] if split else None) == (full, swa)


def test_sglang_deepseek_v4_pool_terms_by_hand():
    from kvcalc.memory.engine_sglang_v4 import dsv4_pools

    model = catalog.load_model(str(CONFIGS / "deepseek-v4-flash" / "config.json"))
    p = dsv4_pools(model, 60 * GiB)
    # per SWA slot: 585 B x 43 layers + 8 / 256 x (2 x 2 x 512 + 2 x 2 x 128) x 4 B x 21 = 25,155 + 6,720
    assert p["bytes_per_swa_token"] == 31_875
    # per full token: 0.1 x 31,875 + 21 x (585 / 4 + 132 / 4) + 20 x 864 / 128 = 3,187.5 + 3,764.25 + 135
    assert p["bytes_per_full_token"] == 7_086.75
    # C128 state: ceil((257 x 128 + 129) / 128) x 128 = 33,152 rows x 2 x 512 x 4 B x 20 layers
    assert p["fixed_bytes"] == 33_152 * 4096 * 20 == 2_715_811_840


def test_sglang_gemma_3_is_not_hybrid_swa_and_the_multimodal_reserve():
    # Gemma3ForConditionalGeneration is not in is_hybrid_swa_model's list: all 62 layers are full,
    # 16 KV heads x (128 + 128) x 2 B x 62 = 507,904 B/token; 60 GiB / 507,904 = 126,843 tokens (the engine's
    # figure above); multimodal is off by default for it (ModelConfig), so no 100 MiB reserve
    model = catalog.load_model(str(CONFIGS / "gemma-3-27b" / "config.json"))
    assert model.multimodal and model.architecture == "Gemma3ForConditionalGeneration"
    inp = ec.EngineInputs(engine="sglang", tp=1, total_memory_bytes=80 * GiB, mem_fraction_static=0.875,
                          weights_bytes=10 * GiB, max_model_len=32768)
    s = sglang_sizing(model, engine_groups("sglang", model, att.KvOptions()), catalog.load_hardware("h100-sxm"), inp)
    assert (s["kv_bytes_per_token_per_gpu"], s["kv_cache_tokens"]) == (507_904, 60 * GiB // 507_904)
    # a multimodal architecture SGLang serves as one reserves 100 MiB: (60 GiB - 100 MiB) / 507,904 = 126,637
    vl = dataclasses.replace(model, architecture="Qwen2_5_VLForConditionalGeneration")
    s = sglang_sizing(vl, engine_groups("sglang", vl, att.KvOptions()), catalog.load_hardware("h100-sxm"), inp)
    assert s["kv_cache_tokens"] == (60 * GiB - 100 * 2**20) // 507_904 == 126_637


# DeepSeek V4 under --kv-dtype, from the same tool runs with the engine's kv_cache_dtype given (--extra
# '{"kv_cache_dtype": ...}', TP 1): SGLang 0.5.23 "bfloat16" sizes the very pools of its default fp8_e4m3
# (8,707,584 tokens, 870,656 sliding, 256 running: DSV4PoolConfigurator's bytes do not depend on it); vLLM 0.33
# "bfloat16" fails at start-up ("DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got bfloat16"), and
# "fp8" is its default fp8_ds_mla layout (64,280 blocks, as the row above)
@pytest.mark.parametrize("engine,dtype,ok", [
    ("sglang", "fp8", True), ("sglang", "bf16", True), ("sglang", "fp16", False), ("sglang", "nvfp4", False),
    ("vllm", "fp8", True), ("vllm", "bf16", False), ("vllm", "fp16", False), ("vllm", "int8", False),
])
def test_deepseek_v4_kv_dtypes_as_the_engines_take_them(engine, dtype, ok):
    from kvcalc.out.errors import InputError

    model = catalog.load_model(str(CONFIGS / "deepseek-v4-flash" / "config.json"))
    opts = att.KvOptions(kv_dtype=dtype)
    if not ok:
        with pytest.raises(InputError, match=f"--kv-dtype {dtype}: .*DeepSeek V4"):
            engine_groups(engine, model, opts)
        return
    groups = engine_groups(engine, model, opts)
    if engine == "vllm":
        inp = ec.EngineInputs(engine="vllm", tp=1, total_memory_bytes=80 * GiB, gpu_memory_utilization=1.0,
                              weights_bytes=18 * GiB, activation_bytes=GiB, non_torch_bytes=GiB,
                              max_model_len=32768, max_num_batched_tokens=8192)
        s = vllm_sizing(model, groups, catalog.load_hardware("h100-sxm"), inp)
        assert (s["num_gpu_blocks"], s["kv_cache_tokens"]) == VLLM_0_33[("deepseek-v4-flash", 1)][:2]
    else:
        inp = ec.EngineInputs(engine="sglang", tp=1, total_memory_bytes=80 * GiB, mem_fraction_static=0.875,
                              weights_bytes=10 * GiB, max_model_len=32768)
        s = sglang_sizing(model, groups, catalog.load_hardware("h100-sxm"), inp)
        assert (s["kv_cache_tokens"], s["swa_kv_cache_tokens"], s["max_num_seqs"]) == (8707584, 870656, 256)


def test_deepseek_v4_refused_kv_dtype_is_one_line_exit_2():
    from conftest import run_cli

    r = run_cli("capacity", "-m", "deepseek-v4-flash", "--engine", "vllm", "--kv-dtype", "bf16", "--gpus", "1")
    assert r.code == 2 and r.err.count("\n") <= 1 and "--kv-dtype bf16" in r.err and "fp8_ds_mla" in r.err
