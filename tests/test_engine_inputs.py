"""``--engine-input NAME=VALUE`` on cost, compare and trace: the KV pool from the values a start-up log printed
(the rest estimated), the same pool ``kvcalc capacity --engine`` computes from its flags; by hand.

The log (reference/engines.md): vLLM, Llama-3-8B-shaped model (131,072 B/token) on one 80 GB GPU,
"total_gpu_memory (79.19GiB) x gpu_memory_utilization (0.90) = 71.27GiB; model weights take 14.08GiB;
non_torch_memory takes 0.07GiB; PyTorch activation peak memory takes 1.97GiB".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_bad_input, run_cli

NODE = ("--model", "llama-3-8b", "--hardware", "h100-sxm", "--gpus", "1")
LOG = {"total-memory": "79.19GiB", "weights-memory": "14.08GiB", "activation-memory": "1.97GiB",
       "non-torch-memory": "0.07GiB"}
SETS = tuple(a for k, v in LOG.items() for a in ("--engine-input", f"{k}={v}"))
# 79.19 x 0.9 - 14.08 - 1.97 - 0.07 = 55.151 GiB = 59,218,095,... B; / (16 x 131,072 B) = 28,237.3 -> 28,237 blocks
POOL_BYTES = 28_237 * 16 * 131_072          # 59,217,281,024 B
WORKLOAD = ("--requests", "10", "--context", "4k")


def json_of(*args: str) -> dict:
    r = run_cli(*args, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)


def test_cost_budget_is_the_logged_pool():
    d = json_of("cost", *NODE, *WORKLOAD, "--engine", "vllm", *SETS)
    assert d["results"][0]["kv_budget_bytes_per_gpu"] == POOL_BYTES
    assert any("from --engine-input" in n for n in d["notes"])
    # capacity --engine with the same values as flags: the same blocks
    cap = json_of("capacity", *NODE, "--engine", "vllm", *(a for k, v in LOG.items() for a in (f"--{k}", v)))
    assert cap["results"][0]["num_gpu_blocks"] * 16 * 131_072 == POOL_BYTES
    # without the log's values the estimate differs (weights from the preset, activation from the shapes)
    est = json_of("cost", *NODE, *WORKLOAD, "--engine", "vllm")["results"][0]["kv_budget_bytes_per_gpu"]
    assert est != POOL_BYTES


def test_one_input_moves_the_budget_by_its_bytes():
    """weights 1 GiB heavier -> 512 fewer 2 MiB blocks (1 GiB / 16 x 131,072 B)."""
    heavier = tuple(a.replace("14.08GiB", "15.08GiB") for a in SETS)
    d = json_of("cost", *NODE, *WORKLOAD, "--engine", "vllm", *heavier)
    assert d["results"][0]["kv_budget_bytes_per_gpu"] == (28_237 - 512) * 16 * 131_072


def test_compare_uses_the_same_pool_for_both_strategies():
    rows = json_of("compare", *NODE, *WORKLOAD, "--engine", "vllm", *SETS)["results"]
    assert [r["kv_budget_bytes_per_gpu"] for r in rows] == [POOL_BYTES, POOL_BYTES]


def test_trace_node_capacity_from_the_logged_pool(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    rec = {"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}
    path.write_text(json.dumps(rec) + "\n")
    row = json_of("trace", str(path), *NODE, "--engine", "vllm", *SETS)["results"][-1]
    # a 512-token trace block on one GPU: 512 x 131,072 = 67,108,864 B; 59,217,281,024 / that = 882.4 -> 882
    assert (row["capacity_blocks"], row["capacity_tokens"]) == (882, 882 * 512)


@pytest.mark.parametrize("args, words", [
    (("--engine-input", "weights-memory=1GB"), ["--engine-input", "--engine vllm"]),
    (("--engine", "vllm", "--engine-input", "weight-memory=1GB"), ["unknown input", "weights-memory"]),
    (("--engine", "vllm", "--engine-input", "block-size"), ["NAME=VALUE"]),
    (("--engine", "vllm", "--engine-input", "block-size="), ["NAME=VALUE"]),
    (("--engine", "vllm", "--engine-input", "max-num-seqs=x"), ["max-num-seqs", "whole number"]),
    (("--engine", "vllm", "--engine-input", "total-memory=-5GiB"), ["--engine-input total-memory"]),
    (("--engine", "vllm", "--engine-input", "gpu-memory-utilization=2"), ["--engine-input gpu-memory-utilization"]),
    (("--engine", "vllm", "--engine-input", "block-size=16", "--engine-input", "block-size=32"), ["twice"]),
    (("--engine", "sglang", "--engine-input", "swa-full-tokens-ratio=nan"), ["swa-full-tokens-ratio"]),
])
def test_bad_engine_inputs(args, words):
    for command in ("cost", "compare"):
        assert_bad_input(run_cli(command, *NODE, *WORKLOAD, *args), *words)


def test_trace_hbm_tier_from_the_logged_pool(tmp_path: Path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}) + "\n")
    row = json_of("trace", str(path), "--tiers", "hbm", *NODE, "--engine", "vllm", *SETS)["results"][0]
    assert (row["tier"], row["capacity_blocks"]) == ("hbm", 882)   # as above: 59,217,281,024 B / 67,108,864 B
    assert "from --engine-input" in row["capacity_source"]


def test_every_engine_input_is_a_capacity_flag():
    """--engine-input's names are capacity's engine flags without their dashes (one list, kept in step)."""
    from kvcalc.cli.engine_opts import ENGINE_INPUTS

    r = run_cli("capacity", "--help")
    flags = {w.strip(",") for w in r.out.split() if w.startswith("--")}
    assert [n for n in ENGINE_INPUTS if f"--{n}" not in flags] == []
