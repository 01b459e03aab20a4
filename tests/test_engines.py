"""--engine vllm|sglang: the engines' own sizing, pinned to their start-up logs by hand.

Logs used (sources): vLLM "total_gpu_memory (79.19GiB) x gpu_memory_utilization (0.90) = 71.27GiB; model weights
take 14.08GiB; non_torch_memory takes 0.07GiB; PyTorch activation peak memory takes 1.97GiB; the rest of the
memory reserved for KV Cache is 55.15GiB", "GPU KV cache size: 451,744 tokens", "Maximum concurrency for 4,096
tokens per request: 110.29x" (reference/engines.md); vLLM PR #10511 (github.com/vllm-project/vllm/pull/10511),
Meta-Llama-3-8B on one 80 GB GPU: total_gpu_memory 79.22GiB, weights 14.96GiB, non_torch 1.79GiB, activation
1.26GiB, available_kv_cache_memory 53.29GiB; SGLang Qwen2.5-7B "KV Cache is allocated. #tokens: 105531"
with free 22.76 GiB at start, 14.39 GiB weights, mem_fraction_static 0.88 (reference/engines.md).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvcalc.memory import engine_common as ec
from kvcalc.memory.engine_sglang import default_mem_fraction, sglang_sizing
from kvcalc.memory.engine_vllm import blocks_per_request, kv_groups, vllm_sizing
from kvcalc.model import attention as att
from kvcalc.model import catalog
from kvcalc.model.schema import FullGroup, ModelPreset

GiB = 2**30


def llama():
    m = catalog.load_model("llama-3-8b")
    return m, att.resolve_groups(m)


def vllm(**kw):
    m, groups = llama()
    return vllm_sizing(m, groups, catalog.load_hardware("h100-sxm"), ec.EngineInputs(engine="vllm", **kw))


LOG = dict(total_memory_bytes=79.19 * GiB, weights_bytes=14.08 * GiB, activation_bytes=1.97 * GiB,
           non_torch_bytes=0.07 * GiB)


def test_vllm_llama_3_8b_from_the_logged_inputs():
    s = vllm(**LOG)
    # 79.19 x 0.9 - 14.08 - 1.97 - 0.07 = 55.151 GiB
    assert s["kv_cache_memory_bytes"] == pytest.approx(55.151 * GiB)
    assert s["kv_bytes_per_token_per_gpu"] == 131_072          # 2 x 32 x 8 x 128 x 2 B
    assert s["block_bytes"] == 2_097_152                      # 16 tokens x 131,072 B
    # floor(55.151 x 2^30 / 2^21) = floor(55.151 x 512) = floor(28,237.3) = 28,237 blocks
    assert s["num_gpu_blocks"] == 28_237
    assert s["kv_cache_tokens"] == 451_792                    # 28,237 x 16
    assert s["blocks_per_request"] == 256                     # 4,096 / 16
    assert s["max_concurrency"] == pytest.approx(110.30, abs=0.005)  # 28,237 / 256
    # the log's 451,744 is 3 blocks = 48 tokens (0.011%) lower: its figures are rounded to 0.01 GiB
    assert s["kv_cache_tokens"] - 451_744 == 48


def test_vllm_logged_count_within_the_rounding_of_its_inputs():
    # each printed figure is rounded to 0.01 GiB: +-0.005 GiB; the budget moves by at most
    # 0.9 x 0.005 + 3 x 0.005 = 0.0195 GiB = 9.98 blocks of 2 MiB
    lo = vllm(total_memory_bytes=79.185 * GiB, weights_bytes=14.085 * GiB, activation_bytes=1.975 * GiB,
              non_torch_bytes=0.075 * GiB)["num_gpu_blocks"]
    hi = vllm(total_memory_bytes=79.195 * GiB, weights_bytes=14.075 * GiB, activation_bytes=1.965 * GiB,
              non_torch_bytes=0.065 * GiB)["num_gpu_blocks"]
    assert (lo, hi) == (28_227, 28_247)   # floor(55.1315 x 512), floor(55.1705 x 512)
    assert lo <= 28_234 <= hi
    # inputs that print as the log does (14.0849 -> 14.08, 1.9706 -> 1.97 GiB) reproduce it exactly:
    # 71.271 - 14.0849 - 1.9706 - 0.07 = 55.1455 GiB -> floor(28,234.5) = 28,234 blocks
    s = vllm(total_memory_bytes=79.19 * GiB, weights_bytes=14.0849 * GiB, activation_bytes=1.9706 * GiB,
             non_torch_bytes=0.07 * GiB)
    assert (s["num_gpu_blocks"], s["kv_cache_tokens"]) == (28_234, 451_744)
    assert round(s["max_concurrency"], 2) == 110.29            # 28,234 / 256 = 110.289


def test_vllm_cuda_graphs_and_utilisation_enter_the_budget():
    base = vllm(**LOG)
    cg = vllm(**LOG, cuda_graph_bytes=0.5 * GiB)
    assert base["kv_cache_memory_bytes"] - cg["kv_cache_memory_bytes"] == pytest.approx(0.5 * GiB)
    low = vllm(**LOG, gpu_memory_utilization=0.8)
    # 0.1 x 79.19 GiB less
    assert base["kv_cache_memory_bytes"] - low["kv_cache_memory_bytes"] == pytest.approx(7.919 * GiB)


def test_vllm_estimated_defaults_within_10_percent_of_an_80gb_log():
    # PR #10511: Meta-Llama-3-8B, 80 GB card, vLLM's default 0.9: available_kv_cache_memory 53.29 GiB.
    # Our defaults: CUDA total 79.19 GiB (preset), weights 8,030,261,248 x 2 B = 16,060,522,496 B (14.96 GiB),
    # activation = max(forward at 8,192 batched tokens, sampler warm-up at 1,024 seqs), non-torch 0.07 GiB.
    s = vllm()
    assert s["terms"]["weights"].value == 16_060_522_496
    assert s["max_num_batched_tokens"] == 8192 and s["block_size"] == 16 and s["max_num_seqs"] == 1024
    # forward: (8,030,261,248 - 2 x 128,256 x 4,096) / 32 layers = 218,112,128 per layer; / 4,096 hidden
    # + 2 x 4,096 = 61,442.03125 elements x 2 B = 122,884.0625 B/token; x 8,192 = 1,006,666,240 B (0.94 GiB)
    assert ec.activation_bytes_per_token(catalog.load_model("llama-3-8b")) == pytest.approx(122_884.0625)
    # sampler warm-up: 1,024 seqs x 128,256 vocab x 24 B = 3,152,019,456 B (2.94 GiB) > the forward pass
    assert s["terms"]["activation"].value == 1024 * 128_256 * 24 == 3_152_019_456
    # 79.19 x 0.9 - 14.9574 - 2.9355 - 0.07 GiB = 53.308 GiB (log: 53.29 GiB, +0.03%; the log's own split is
    # 1.26 GiB activation + 1.79 GiB non-torch = 3.05 GiB against our 2.94 + 0.07 = 3.01 GiB)
    assert s["kv_cache_memory_bytes"] / GiB == pytest.approx(53.3079, abs=1e-4)
    assert abs(s["kv_cache_memory_bytes"] / GiB - 53.29) / 53.29 < 0.10
    # and the activation estimate is within the 0.2-3 GiB logs show
    assert 0.2 * GiB < s["terms"]["activation"].value < 3 * GiB


def test_sglang_qwen2_5_7b_from_the_logged_inputs():
    m = catalog.load_model("qwen2.5-7b")
    s = sglang_sizing(m, att.resolve_groups(m), catalog.load_hardware("h100-sxm"),
                      ec.EngineInputs(engine="sglang", total_memory_bytes=22.76 * GiB, weights_bytes=14.39 * GiB,
                                      mem_fraction_static=0.88))
    # rest = (22.76 - 14.39) - 22.76 x 0.12 = 5.6388 GiB; / 57,344 B = 105,584.9 -> 105,584 tokens
    assert s["kv_bytes_per_token_per_gpu"] == 57_344           # 2 x 28 x 4 x 128 x 2 B
    assert s["kv_cache_memory_bytes"] == pytest.approx(5.6388 * GiB)
    assert s["kv_cache_tokens"] == 105_584
    assert abs(s["kv_cache_tokens"] - 105_531) / 105_531 < 0.001   # the log: within 0.1%


def test_sglang_default_mem_fraction_by_tp():
    # sglang server_args.py (v0.4.x): 0.88 at TP 1, 0.87 >= 2, 0.85 >= 4, 0.81 >= 8, 0.79 >= 16
    assert [default_mem_fraction(t) for t in (1, 2, 3, 4, 8, 16, 32)] == [0.88, 0.87, 0.87, 0.85, 0.81, 0.79, 0.79]


def hybrid(sliding: int, full: int) -> ModelPreset:
    # Gemma-3-1B-shaped: 1 KV head, head_dim 256, 512-token window (google/gemma-3-1b-it config.json)
    return ModelPreset(schema_version=1, source="test", display_name="hybrid", params_total_b=1.0,
                       params_active_b=1.0, weight_bytes_per_param=2.0, layer_groups=[
                           FullGroup(kind="full", name="swa", layers=sliding, kv_heads=1, head_dim=256,
                                     window_tokens=512),
                           FullGroup(kind="full", name="global", layers=full, kv_heads=1, head_dim=256)])


def test_vllm_hybrid_grouping_22_sliding_4_full():
    groups = att.resolve_groups(hybrid(22, 4))
    size, kg = kv_groups(groups)
    # group size = min(22, 4) = 4 (22 >= 1.5 x 4); sliding: ceil(22/4) = 6 groups, the last of 2 real + 2 padding;
    # full: 1 group: 7 groups of 4 with 2 padding layers ("may waste at most 2/22 = 9.09%")
    assert size == 4 and len(kg) == 7
    assert sum(g.padding for g in kg) == 2
    assert [g.kind for g in kg].count("sliding") == 6
    # 12 sliding + 13 full: 13 < 1.5 x 12 -> group size 13, one padding layer (vLLM's gpt-oss + eagle example)
    size, kg = kv_groups(att.resolve_groups(hybrid(12, 13)))
    assert (size, len(kg), sum(g.padding for g in kg)) == (13, 2, 1)


def test_vllm_hybrid_pool_and_logged_count():
    # vLLM 0.20's rules (what kvcalc followed before; --engine-version 0.20): logged = blocks // groups x 16 and
    # a sliding layer keeps W - 1 + 1 x max_num_batched_tokens
    m = hybrid(22, 4)
    inputs = dict(engine="vllm", total_memory_bytes=10 * GiB, gpu_memory_utilization=1.0, weights_bytes=2 * GiB,
                  activation_bytes=0.0, non_torch_bytes=0.0)
    s = vllm_sizing(m, att.resolve_groups(m), catalog.load_hardware("h100-sxm"),
                    ec.EngineInputs(**inputs, engine_version="0.20"))
    # page per layer = 16 tokens x 1 head x (256 + 256) x 2 B = 16,384 B; block = 4 layers x 16,384 = 65,536 B
    assert s["block_bytes"] == 65_536
    assert s["num_gpu_blocks"] == 8 * GiB // 65_536               # 131,072 blocks
    assert s["kv_cache_tokens"] == 131_072 // 7 * 16               # logged: blocks // groups x 16 = 299,584
    # a 4,096-token request (10 GiB < 70 GiB: 2,048 batched tokens): full group 4,096 / 16 = 256 blocks;
    # each sliding group ceil(min(511 + 2,048, 4,096) / 16) + 1 = ceil(159.9) + 1 = 161
    assert s["max_num_batched_tokens"] == 2048 and s["max_in_flight_tokens"] == 2048
    assert s["blocks_per_request"] == 256 + 6 * 161
    assert blocks_per_request(s["kgroups"], 100_000, 16, 8192) == 6250 + 6 * (544 + 1)  # ceil(8,703/16) = 544
    # vLLM 0.33 (the default): in flight 2 x 2,048 = 4,096 tokens (async scheduling, VllmConfig.max_in_flight_tokens)
    # -> each sliding group ceil(min(511 + 4,096, 4,096) / 16) + 1 = 257; 256 + 6 x 257 = 1,798 blocks per request;
    # logged int(131,072 / 1,798 x 4,096) = int(298,593.6) = 298,593 (get_kv_cache_capacity)
    s = vllm_sizing(m, att.resolve_groups(m), catalog.load_hardware("h100-sxm"), ec.EngineInputs(**inputs))
    assert (s["num_gpu_blocks"], s["max_in_flight_tokens"], s["blocks_per_request"]) == (131_072, 4096, 1798)
    assert s["kv_cache_tokens"] == 298_593


def test_tp_shards_gqa_and_replicates_mla():
    m, groups = llama()
    s = vllm_sizing(m, groups, catalog.load_hardware("h100-sxm"), ec.EngineInputs(engine="vllm", tp=2))
    assert s["kv_bytes_per_token_per_gpu"] == 65_536               # 8 KV heads -> 4 per rank
    v3 = catalog.load_model("deepseek-v3")
    s = vllm_sizing(v3, att.resolve_groups(v3), catalog.load_hardware("h200-sxm"),
                    ec.EngineInputs(engine="vllm", tp=8))
    # MLA latent replicated on every rank: 61 layers x (512 + 64) x 2 B = 70,272 B per token per GPU
    assert s["kv_bytes_per_token_per_gpu"] == 70_272


def run(*args):
    out = subprocess.run([sys.executable, "-m", "kvcalc", "capacity", *args], capture_output=True, text=True)
    return out.returncode, out.stdout, out.stderr


LOG_FLAGS = ("-m", "llama-3-8b", "--gpus", "1", "--total-memory", "79.19GiB", "--weights-memory", "14.08GiB",
             "--activation-memory", "1.97GiB", "--non-torch-memory", "0.07GiB")


def test_cli_engine_json_and_walk():
    rc, out, err = run(*LOG_FLAGS, "--engine", "vllm", "--format", "json")
    assert rc == 0, err
    env = json.loads(out)
    row = env["results"][0]
    assert (row["num_gpu_blocks"], row["kv_cache_tokens"]) == (28_237, 451_792)
    walk = {r["step"]: r for r in env["tables"]["walk"]} if isinstance(env["tables"], dict) else {
        r["step"]: r for t in env["tables"] for r in t["rows"] if t["name"] == "walk"}
    # the walk ends where the engine does
    assert walk["block rounding"]["tokens"] == 451_792
    assert walk["activation peak"]["delta_bytes"] == pytest.approx(-1.97 * GiB)


def test_cli_solve_vllm_and_sglang():
    rc, out, err = run(*LOG_FLAGS, "--engine", "vllm", "--solve", "max-model-len", "--format", "json")
    assert rc == 0, err
    assert json.loads(out)["results"][0]["value"] == 451_792      # all 28,237 blocks x 16 for one request
    rc, out, _ = run(*LOG_FLAGS, "--engine", "vllm", "--solve", "gpu-memory-utilization", "--concurrency", "110",
                     "--format", "json")
    # 110 x 256 blocks x 2 MiB = 55 GiB; + 14.08 + 1.97 + 0.07 = 71.12 GiB; / 79.19 GiB = 0.898093
    assert json.loads(out)["results"][0]["value"] == pytest.approx(71.12 / 79.19)
    rc, out, _ = run(*LOG_FLAGS, "--engine", "vllm", "--solve", "max-concurrency", "--format", "json")
    assert json.loads(out)["results"][0]["value"] == pytest.approx(28_237 / 256)
    rc, out, _ = run("-m", "qwen2.5-7b", "--gpus", "1", "--engine", "sglang", "--total-memory", "22.76GiB",
                     "--weights-memory", "14.39GiB", "--mem-fraction-static", "0.88", "--solve",
                     "gpu-memory-utilization", "--concurrency", "25", "--format", "json")
    # mem_fraction_static = (25 x 4,096 x 57,344 B + 14.39 GiB) / 22.76 GiB = (5.46875 + 14.39) / 22.76
    assert json.loads(out)["results"][0]["value"] == pytest.approx((25 * 4096 * 57344 / GiB + 14.39) / 22.76)


def test_cli_solve_ideal():
    rc, out, err = run("-m", "llama-3-8b", "--gpus", "1", "--solve", "max-model-len", "--format", "json")
    assert rc == 0, err
    # (79.19 GiB as CUDA reports an H100 x 0.9 - 8,030,261,248 x 2) / 131,072 B = 461,319.97 -> 461,319 tokens
    assert json.loads(out)["results"][0]["value"] == 461_319


def test_cli_ideal_unchanged_by_the_engine_flag():
    a = run("-m", "llama-3-8b", "--format", "json")[1]
    b = run("-m", "llama-3-8b", "--engine", "ideal", "--format", "json")[1]
    assert a == b


@pytest.mark.parametrize("args,flag", [
    (("--engine", "trt"), "--engine"), (("--engine", "vllm", "--total-memory", "79"), "--total-memory"),
    (("--solve", "everything"), "--solve"), (("--engine", "vllm", "--gpu-memory-utilization", "1.5"),
                                             "--gpu-memory-utilization"),
    (("--engine", "vllm", "-m", "deepseek-v4-flash", "--block-size", "16"), "--block-size"),
    (("--engine", "sglang", "-m", "deepseek-v4-flash", "--mem-fraction-static", "1.5"), "--mem-fraction-static"),
    (("--engine", "vllm", "--attention", "dp"), "--attention dp"),
    (("--engine", "vllm", "--weights-memory", "-3GiB"), "--weights-memory"),
    (("--engine", "vllm", "--solve", "max-concurrency", "--concurrency", "0"), "--concurrency"),
    # the hostile run's seed 73: non-torch memory = the whole H100 (79.19 GiB) leaves SGLang 0 B free at start,
    # so no mem_fraction_static exists (was a ZeroDivisionError, exit 3)
    (("--engine", "sglang", "--non-torch-memory", "79.19GiB", "--solve", "gpu-memory-utilization"),
     "--non-torch-memory"),
])
def test_cli_bad_engine_input(args, flag):
    rc, out, err = run(*args)
    assert rc == 2 and flag in err and err.count("\n") == 1 and "Traceback" not in err


def test_vllm_page_enlargement_for_a_linear_attention_hybrid():
    # Qwen3-Next-80B-A3B at TP 1: 12 full layers (2 KV heads x 256, bf16) + 36 Gated DeltaNet layers
    m = catalog.load_model("qwen3-next-80b-a3b")
    s = vllm_sizing(m, att.resolve_groups(m), catalog.load_hardware("h200-sxm"),
                    ec.EngineInputs(engine="vllm", tp=1))
    # attention: 2 x 2 heads x 256 x 2 B = 2,048 B per token per layer; state 1,097,728 B per layer
    # (3 x 8,192 x 2 B conv + 32 x 128 x 128 x 2 B recurrent). Prefix caching on -> mamba_cache_mode 'align':
    # the kernel block 16 is lcm'ed with Gated DeltaNet's checkpoint alignment 64 (_align_hybrid_block_size);
    # block = 64 x ceil(1,097,728 / (64 x 2,048)) = 64 x ceil(8.375) = 576 tokens; page = 576 x 2,048 =
    # 1,179,648 B (state padded by 7.46%). vLLM 0.33's own code gives the same (tests/test_engine_pins.py).
    assert s["state_page_bytes"] == 1_097_728
    assert s["block_size"] == 576 and s["page_bytes"] == 1_179_648
    # groups: min(12, 36) = 12 (36 >= 1.5 x 12): full 1 group + linear 3 groups, no padding
    assert (s["group_size"], s["kv_groups"], s["padding_layers"]) == (12, 4, 0)
    assert s["block_bytes"] == 12 * 1_179_648
    # a 4,096-token request: ceil(4,096 / 576) = 8 attention blocks + 3 blocks (2 + 1 prefill checkpoint, align
    # mode) in each of 3 state groups
    assert s["blocks_per_request"] == 8 + 3 * 3
    # the log's count: int(blocks / 17 x 4,096) (vLLM 0.21+ get_kv_cache_capacity)
    assert s["kv_cache_tokens"] == int(s["num_gpu_blocks"] / 17 * 4096)


def test_api_engine_result_equals_the_cli_json():
    import kvcalc
    from kvcalc.memory.capacity import CapacityInputs

    m = kvcalc.load_model("llama-3-8b")
    hw = kvcalc.load_hardware("h100-sxm")
    einp = kvcalc.EngineInputs(engine="vllm", tp=1, **LOG)
    res = kvcalc.engine_result([("llama-3-8b", m)], "h100-sxm", hw, "pcie-gen5-x16",
                               kvcalc.load_link("pcie-gen5-x16"), CapacityInputs(gpus=1), einp)
    api = json.loads(kvcalc.to_json(res))["results"]
    cli = json.loads(run(*LOG_FLAGS, "--engine", "vllm", "--format", "json")[1])["results"]
    assert api == cli


def test_compare_with_an_engine_budget_uses_the_engine_pool():
    args = ("-m", "llama-3-70b", "--hardware", "h100-sxm", "--gpus", "4", "--requests", "64", "--context", "32k",
            "--format", "json")
    out = subprocess.run([sys.executable, "-m", "kvcalc", "compare", *args, "--engine", "vllm"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    budget = json.loads(out.stdout)["results"][0]["kv_budget_bytes_per_gpu"]
    cap = json.loads(run("-m", "llama-3-70b", "--gpus", "4", "--engine", "vllm", "--format", "json")[1])["results"][0]
    # the same pool capacity --engine vllm reports: blocks x (16 tokens x 2 x 80 layers x 2 heads x 128 x 2 B)
    assert budget == cap["num_gpu_blocks"] * 1_310_720
    ideal = subprocess.run([sys.executable, "-m", "kvcalc", "compare", *args], capture_output=True, text=True)
    # ideal: the 79.19 GiB CUDA reports (85,029,615,042.56 B) x 0.9 = 76,526,653,538.3 B
    # - 70,553,706,496 x 2 B / 4 GPUs (35,276,853,248) = 41,249,800,290.304 B
    assert json.loads(ideal.stdout)["results"][0]["kv_budget_bytes_per_gpu"] == pytest.approx(41_249_800_290.304)


def test_vllm_estimated_defaults_within_10_percent_of_a_24gb_log():
    # vLLM issue #10517 (github.com/vllm-project/vllm/issues/10517), RTX 3090, Llama-3.1-8B (Llama-3-8B's shape),
    # max_model_len 20,000 (v0: max_num_batched_tokens = max_model_len): "total_gpu_memory=23.58GiB ...
    # kv_cache_size=3.81GiB gpu_memory_utilization=0.90", "# GPU blocks: 1952", "Maximum concurrency for 20000
    # tokens per request: 1.56x". Only the CUDA total and the two token counts are given; the rest is estimated.
    s = vllm(total_memory_bytes=23.58 * GiB, max_num_batched_tokens=20_000, max_model_len=20_000)
    # 23.58 x 0.9 - 14.9574 - 20,000 x 122,884.0625 B (2.2889 GiB) - 0.07 = 3.9058 GiB -> floor(3.9058 x 512)
    # = 1,999 blocks (log: 1,952, +2.4%)
    assert s["num_gpu_blocks"] == 1999
    assert abs(s["kv_cache_memory_bytes"] / GiB - 3.81) / 3.81 < 0.10
    assert abs(s["num_gpu_blocks"] - 1952) / 1952 < 0.10
    assert abs(s["max_concurrency"] - 1.56) / 1.56 < 0.10       # 1,999 / ceil(20,000 / 16) = 1,999 / 1,250 = 1.599


def test_vllm_max_concurrency_matches_a_v1_log():
    # vLLM PR #12569 log: "# GPU blocks: 1381", "Maximum concurrency for 2048 tokens per request: 10.79x":
    # 1,381 / (2,048 / 16 = 128 blocks per request) = 10.789
    from kvcalc.memory.engine_vllm import KvGroup

    assert blocks_per_request([KvGroup("full", None, 80, 0)], 2048, 16, 8192) == 128
    assert round(1381 / 128, 2) == 10.79


def test_max_num_seqs_caps_the_running_requests_not_the_logged_concurrency():
    rc, out, err = run(*LOG_FLAGS, "--engine", "vllm", "--max-num-seqs", "64", "--format", "json")
    row = json.loads(out)["results"][0]
    # the pool holds floor(28,237 / 256) = 110 requests of 4,096 tokens; the scheduler runs at most 64
    assert (row["max_running_requests"], row["max_num_seqs"]) == (64, 64)
    assert row["max_concurrency"] == pytest.approx(28_237 / 256)
    row = json.loads(run(*LOG_FLAGS, "--engine", "vllm", "--format", "json")[1])["results"][0]
    assert (row["max_running_requests"], row["max_num_seqs"]) == (110, 1024)  # 79.19 GiB >= 70: default 1,024


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(util=st.floats(0.5, 1.0), act=st.floats(0, 4), n=st.integers(1, 200), L=st.integers(1, 65_536))
def test_vllm_solve_round_trips(util, act, n, L):
    from kvcalc.memory.engine_report import max_model_len_fit
    from kvcalc.memory.engine_vllm import vllm_fits, vllm_required_kv_bytes

    kw = dict(LOG, activation_bytes=act * GiB, max_model_len=L)
    s = vllm(**kw, gpu_memory_utilization=util)
    # the longest request that fits once fits, one token more does not
    top = max_model_len_fit("vllm", s, None)
    if top:
        assert vllm_fits(s, top) >= 1 and vllm_fits(s, top + 1) == 0
    # the utilisation solved for n requests of L tokens serves them (when it is a utilisation at all)
    fixed = 14.08 * GiB + act * GiB + 0.07 * GiB
    need = (vllm_required_kv_bytes(s, L, n) + fixed) / (79.19 * GiB)
    if need <= 1:
        assert vllm_fits(vllm(**kw, gpu_memory_utilization=need * (1 + 1e-12)), L) >= n
    # more utilisation never gives fewer blocks; more activation never more
    assert vllm(**kw, gpu_memory_utilization=min(1.0, util + 0.05))["num_gpu_blocks"] >= s["num_gpu_blocks"]
    assert vllm(**dict(kw, activation_bytes=(act + 0.5) * GiB), gpu_memory_utilization=util)["num_gpu_blocks"] \
        <= s["num_gpu_blocks"]


def test_blocks_engine_note():
    out = subprocess.run([sys.executable, "-m", "kvcalc", "blocks", "-m", "gemma-3-27b", "-m", "llama-3-8b",
                          "--engine", "vllm", "--format", "json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    notes = " ".join(json.loads(out.stdout)["notes"])
    # Gemma 3 27B: 10 full + 52 sliding layers: group size 10; sliding ceil(52/10) = 6 groups, 52 % 10 = 2 real
    # layers in the last -> 8 padding; 6 + 1 = 7 groups
    assert "7 KV-cache groups of 10 layers (8 padding)" in notes
    # Llama-3-8B: one group; 16 tokens x 131,072 B = 2,097,152 B
    assert "one block of the pool = 2,097,152 B" in notes


def test_engine_counts_the_kv_format_scale_bytes():
    m = catalog.load_model("llama-3-8b")
    hw = catalog.load_hardware("h100-sxm")
    einp = ec.EngineInputs(engine="vllm", **LOG)
    s = vllm_sizing(m, att.resolve_groups(m, att.KvOptions(kv_dtype="fp8-per-token-head")), hw, einp)
    # 512 rows x 132 B = 67,584 B/token; block 16 x 67,584 = 1,081,344 B; floor(55.151 GiB / 1,081,344 B) = 54,763
    assert s["kv_bytes_per_token_per_gpu"] == 67_584 and s["block_bytes"] == 1_081_344
    assert s["num_gpu_blocks"] == int(55.151 * GiB // 1_081_344) == 54_763


def test_hardware_cuda_total_needs_a_source(tmp_path):
    from pathlib import Path

    text = (Path(__file__).parents[1] / "presets" / "hardware" / "h100-sxm.toml").read_text()
    bad = tmp_path / "gpu.toml"
    bad.write_text("\n".join(line for line in text.splitlines() if not line.startswith("cuda_total_source")))
    rc, out, err = run("-m", "llama-3-8b", "--hardware", str(bad), "--engine", "vllm")
    assert rc == 2 and "cuda_total_source" in err and err.count("\n") == 1
    assert catalog.load_hardware("h100-sxm").cuda_total_bytes == pytest.approx(79.19 * GiB)
    assert catalog.load_hardware("l40s").cuda_total_bytes == pytest.approx(44.42 * GiB)


def test_gemma4_k_eq_v_layers_store_k_and_v_under_the_engines(tmp_path):
    # a Gemma-4-shaped config (the shapes of tests/test_config_import.py's k_eq_v case): 5 sliding layers of 16 KV
    # heads x (256 + 256) x 2 B = 16,384 B/token, 1 global layer of 4 KV heads x 512 with attention_k_eq_v: the
    # ideal stores one tensor (4 x 512 x 2 = 4,096 B), both engines load K into K and V slots (vLLM
    # models/gemma4.py, SGLang models/gemma4_causal.py): 8,192 B
    from test_config_import import GEMMA4_STYLE as cfg

    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = catalog.load_model(str(path))
    from kvcalc.memory.engine_report import engine_groups

    ideal = {g.name: g.entry_bytes for g in att.resolve_groups(m)}
    engine = {g.name: g.entry_bytes for g in engine_groups("vllm", m, att.KvOptions())}
    assert (ideal["full"], engine["full"], engine["sliding"]) == (4096, 8192, 16_384)
    # vLLM's layout: sliding page 16 x 16,384 = 262,144 B, full page 16 x 8,192 = 131,072 B -> the full layer's
    # block becomes 32 tokens (unify_kv_cache_spec_page_size); 6 groups of 1 layer; a 4,096-token request with
    # 2 x 8,192 in flight: 5 x (ceil(min(1,023 + 16,384, 4,096) / 16) + 1) + ceil(4,096 / 32) = 5 x 257 + 128
    s = vllm_sizing(m, engine_groups("vllm", m, att.KvOptions()), catalog.load_hardware("h100-sxm"),
                    ec.EngineInputs(engine="vllm", total_memory_bytes=10 * GiB, gpu_memory_utilization=1.0,
                                    weights_bytes=GiB, activation_bytes=0.0, non_torch_bytes=0.0,
                                    max_num_batched_tokens=8192))
    assert (s["block_sizes"], s["kv_groups"], s["block_bytes"]) == ([16, 32], 6, 262_144)
    assert s["blocks_per_request"] == 5 * 257 + 128
