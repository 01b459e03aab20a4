"""One set of layout defaults: a shipped preset and the config.json it was made from give the same KV bytes in every
command (kv, capacity, blocks, transfer, and both engines' sizing). The presets follow the engines' defaults: KV in
the model dtype (vLLM and SGLang kv_cache_dtype "auto"), Mamba/linear state as each preset's source says.

Each row pair differs only in where the model came from: ``-m NAME`` (presets/models/NAME.toml) against
``-m tests/fixtures/configs/NAME`` (the config.json, tests/fixtures/configs/README.md for its source). Weights are
given (``--weights-memory``) for the engines, so only the KV layout can differ.
"""

from __future__ import annotations

import json

import pytest
from conftest import REPO, run_cli

from kvcalc.model import catalog

CONFIGS = REPO / "tests" / "fixtures" / "configs"
NAMES = sorted(p.name for p in CONFIGS.iterdir()
               if p.is_dir() and (catalog.presets_root() / "models" / f"{p.name}.toml").exists())
ENGINE = {
    "vllm": ("--engine", "vllm", "--gpus", "1", "--total-memory", "80GiB", "--gpu-memory-utilization", "1",
             "--weights-memory", "10GiB", "--activation-memory", "1GiB", "--non-torch-memory", "1GiB",
             "--max-model-len", "32k", "--max-num-batched-tokens", "8k"),
    "sglang": ("--engine", "sglang", "--gpus", "1", "--total-memory", "80GiB", "--mem-fraction-static", "0.875",
               "--weights-memory", "10GiB", "--max-model-len", "32k"),
}
COMMANDS = {  # command line after the model, and the result fields that carry KV bytes (or follow from them)
    "kv": (("kv", "--context", "4k,128k"), ("kv_bytes_per_request", "kv_bytes_per_token",
                                           "kv_long_context_bytes_per_token", "kv_read_bytes_per_step")),
    "capacity": (("capacity",), ("kv_bytes_per_token", "kv_bytes_per_request", "block_bytes")),
    "blocks": (("blocks",), ("block_bytes", "padding_bytes")),
    "transfer": (("transfer",), ("bytes",)),
    "vllm": (("capacity",) + ENGINE["vllm"], ("kv_bytes_per_token_per_gpu", "num_gpu_blocks", "kv_cache_tokens",
                                              "max_concurrency")),
    "sglang": (("capacity",) + ENGINE["sglang"], ("kv_bytes_per_token_per_gpu", "kv_cache_tokens",
                                                  "max_concurrency", "max_mamba_cache_size")),
}


def rows(command: tuple, model: str, fields: tuple) -> list[dict]:
    head, rest = command[0], command[1:]
    args = (head, model, *rest) if head == "kv" else (head, "-m", model, *rest)
    r = run_cli(*args, "--format", "json")
    assert r.code == 0, (args, r.err)
    return [{k: row.get(k) for k in fields} for row in json.loads(r.out)["results"]]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("name", NAMES)
def test_a_preset_and_its_config_give_the_same_kv_bytes(name, command):
    line, fields = COMMANDS[command]
    assert rows(line, name, fields) == rows(line, str(CONFIGS / name), fields)


def test_deepseek_v3_2_follows_its_config_and_the_engines_default():
    # importing the released config.json: 61 x (1,152 bf16 MLA + 132 FP8 indexer key) = 78,324 B/token, the layout
    # vLLM and SGLang allocate with kv_cache_dtype auto (the GLM-5 rows of test_engine_pins: 1,284 B per DSA layer)
    (row,) = rows(("capacity", "--context", "1"), "deepseek-v3.2", ("kv_bytes_per_token",))
    assert row["kv_bytes_per_token"] == 61 * (1152 + 132) == 78_324


def test_the_article_table_keeps_the_articles_fp8_layout_for_v3_2():
    # `kvcalc capacity` with no model is the article's table: V3.2 in DeepSeek's FP8 FlashMLA layout,
    # 61 x (656 + 132) = 48,068 B/token, as the article states it (reference/seed-digest.md)
    r = run_cli("capacity", "--format", "json")
    assert r.code == 0, r.err
    v32 = [x for x in json.loads(r.out)["results"] if x["model"] == "deepseek-v3.2"]
    assert v32[0]["kv_bytes_per_token"] == 48_068
