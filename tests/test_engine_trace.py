"""``kvcalc trace --engine vllm|sglang``: the node's prefix cache is the KV pool the engine allocates (its inputs
estimated as ``kvcalc capacity --engine`` estimates them), regrouped into the trace's blocks; by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_bad_input, run_cli

GiB = 2**30
NODE = ("--model", "llama-3-70b", "--hardware", "h100-sxm", "--gpus", "8")


@pytest.fixture
def trace(tmp_path: Path) -> str:
    # two requests of two 512-token blocks, the second a repeat of the first: hit rate 1/2 at any capacity >= 2 blocks
    path = tmp_path / "t.jsonl"
    rec = {"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
    path.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, "timestamp": 1}) + "\n")
    return str(path)


def node_row(*args: str) -> dict:
    r = run_cli("trace", *args, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)["results"][-1]   # the node's capacity comes after the given ones


def capacity_row(*args: str) -> dict:
    r = run_cli("capacity", *args, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)["results"][0]


def test_vllm_pool_as_the_node_capacity(trace):
    row = node_row(trace, *NODE, "--engine", "vllm")
    # vLLM on one H100 of 8 (TP 8): 79.19 GiB x 0.9 - 70,553,706,496 x 2 B / 8 (17,638,426,624 B)
    # - sampler warm-up 1,024 x 128,256 x 24 B (3,152,019,456 B) - 0.4 GiB non-torch = 55,306,710,728.7 B
    # block of 16 tokens x 80 layers x 1 KV head x 256 x 2 B = 655,360 B -> 84,391 blocks = 55,306,485,760 B pool;
    # the trace's 512-token block on one GPU: 512 x 40,960 B = 20,971,520 B -> 2,637 blocks = 1,350,144 tokens
    assert row["capacity"] == "8 x h100-sxm vllm pool"
    assert (row["capacity_blocks"], row["capacity_tokens"]) == (2_637, 1_350_144)
    assert row["token_hit_rate"] == 0.5
    cap = capacity_row(*NODE, "--engine", "vllm")
    assert cap["num_gpu_blocks"] == 84_391
    assert row["capacity_tokens"] == cap["num_gpu_blocks"] * 655_360 // 20_971_520 * 512


def test_ideal_and_sglang_budgets_differ_as_capacity_says(trace):
    ideal = node_row(trace, *NODE)
    # ideal: the 79.19 GiB CUDA reports (85,029,615,042.56 B) x 0.9 = 76,526,653,538.3 B
    # - 17,638,426,624 = 58,888,226,914 B per GPU -> floor(/ 20,971,520) = floor(2,808.01) = 2,808 blocks
    assert (ideal["capacity"], ideal["capacity_blocks"]) == ("8 x h100-sxm", 2_808)
    assert node_row(trace, *NODE, "--engine", "ideal")["capacity_blocks"] == 2_808
    sg = node_row(trace, *NODE, "--engine", "sglang")
    # SGLang at TP 8: free at start = 79.19 GiB - 0.4 GiB non-torch = 78.79 GiB; x mem_fraction_static 0.811
    # (SGLang 0.5.23's default from reserved memory on an H100 at TP 8; v0.4's table said 0.81)
    # - 17,638,426,624 B weights = 50,972,269,327.8 B; / 40,960 B = 1,244,440 tokens (page size 1)
    cap = capacity_row(*NODE, "--engine", "sglang")
    assert cap["mem_fraction_static"] == 0.811 and cap["kv_cache_tokens"] == 1_244_440
    # regrouped into 512-token blocks: floor(1,244,440 x 40,960 B / 20,971,520 B) = 2,430 blocks
    assert (sg["capacity"], sg["capacity_blocks"]) == ("8 x h100-sxm sglang pool", 2_430)


def test_tiers_hbm_tier_is_the_engine_pool(trace):
    r = run_cli("trace", trace, *NODE, "--engine", "vllm", "--tiers", "hbm,dram", "--format", "json")
    assert r.code == 0, r.err
    hbm = json.loads(r.out)["results"][0]
    assert hbm["tier"] == "hbm" and hbm["capacity_blocks"] == 2_637      # as above
    assert "vllm KV pool" in hbm["capacity_source"]
    ideal = run_cli("trace", trace, *NODE, "--tiers", "hbm,dram", "--format", "json")
    assert json.loads(ideal.out)["results"][0]["capacity_blocks"] == 2_808  # the ideal budget above


def test_engine_needs_a_node_and_a_known_name(trace):
    assert_bad_input(run_cli("trace", trace, "--model", "llama-3-70b", "--engine", "vllm"), "--engine", "--hardware")
    assert_bad_input(run_cli("trace", trace, *NODE, "--engine", "trt"), "--engine")
    # DeepSeek V4 was refused here until both engines' V4 layouts were modelled: now its pool is the node's capacity
    row = node_row(trace, "--model", "deepseek-v4-flash", "--hardware", "h100-sxm", "--gpus", "8", "--engine", "vllm")
    assert row["capacity"] == "8 x h100-sxm vllm pool"
