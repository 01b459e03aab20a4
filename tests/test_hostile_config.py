"""Issue 21 item 1: a config.json field of the wrong type, range or length is refused before any arithmetic, with
one line naming the file and the field, and every command that takes a config.json (``import``, ``kv``,
``capacity``, ``sweep``) accepts and refuses the same files (one reader, one set of rules). Each case below is one
the issue's hostile run found as an internal error (exit 3); the configs are the real fixtures with one field
changed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import assert_bad_input, run_cli

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
BIG = 10**4400  # over Python's 4,300-digit int-string limit

# (case, fixture, field named in the error, {field: value} or a function of the config)
CASES = [
    ("model_type-object", "qwen3-32b", "model_type", {"model_type": {}}),
    ("torch_dtype-list", "qwen3-32b", "torch_dtype", {"torch_dtype": ["bfloat16"]}),
    ("hybrid_override_pattern-int", "nemotron-3-nano-30b-a3b", "hybrid_override_pattern",
     {"hybrid_override_pattern": 5}),
    ("layer_types-lists", "gpt-oss-120b", "layer_types", lambda c: {"layer_types": [[t] for t in c["layer_types"]]}),
    ("mamba_ssm_dtype-object", "nemotron-3-nano-30b-a3b", "mamba_ssm_dtype", {"mamba_ssm_dtype": {"a": 1}}),
    ("moe_layer_freq-x", "glm-5", "moe_layer_freq", {"moe_layer_freq": "x"}),
    ("moe_layer_freq-0", "glm-5", "moe_layer_freq", {"moe_layer_freq": 0}),
    ("moe_layer_freq-short", "glm-5", "moe_layer_freq", {"moe_layer_freq": [1, 1]}),
    ("mlp_only_layers-int", "qwen3-30b-a3b", "mlp_only_layers", {"mlp_only_layers": 5}),
    ("mlp_only_layers-out-of-range", "qwen3-30b-a3b", "mlp_only_layers", {"mlp_only_layers": [10**6]}),
    ("weight_block_size-zero", "qwen3-32b", "weight_block_size",
     {"quantization_config": {"quant_method": "fp8", "weight_block_size": [0, 0]}}),
    ("weight_block_size-text", "qwen3-32b", "weight_block_size",
     {"quantization_config": {"quant_method": "fp8", "weight_block_size": "ab"}}),
    ("weight_block_size-short", "qwen3-32b", "weight_block_size",
     {"quantization_config": {"quant_method": "fp8", "weight_block_size": [128]}}),
    ("group_size-text", "qwen3-32b", "group_size", {"quantization_config": {"quant_method": "nvfp4", "group_size": "x"}}),
    ("group_size-tiny", "qwen3-32b", "group_size",
     {"quantization_config": {"quant_method": "nvfp4", "group_size": 1e-300}}),
    ("modules_to_not_convert-int", "qwen3-32b", "modules_to_not_convert",
     {"quantization_config": {"quant_method": "fp8", "modules_to_not_convert": 5}}),
    ("modules_to_not_convert-nested", "qwen3-32b", "modules_to_not_convert",
     {"quantization_config": {"quant_method": "fp8", "modules_to_not_convert": [["lm_head"]]}}),
    ("quantization_config-list", "qwen3-32b", "quantization_config", {"quantization_config": [1]}),
    ("quant_method-object", "qwen3-32b", "quant_method", {"quantization_config": {"quant_method": {}}}),
    ("int-4400-digits", "qwen3-32b", "", {"intermediate_size": BIG}),
    ("dims-2^24", "qwen3-32b", "params", {k: 2**24 for k in ("hidden_size", "intermediate_size", "vocab_size",
                                                              "num_attention_heads", "head_dim",
                                                              "num_key_value_heads")}),
    ("experts_per_tok-over-experts", "qwen3-30b-a3b", "num_experts_per_tok", {"num_experts_per_tok": 1000}),
    ("tie_word_embeddings-text", "qwen3-32b", "tie_word_embeddings", {"tie_word_embeddings": "false"}),
    ("attention_bias-list", "qwen3-32b", "attention_bias", {"attention_bias": [True]}),
    ("name_or_path-object", "qwen3-32b", "_name_or_path", {"_name_or_path": {"a": 1}}),
    ("no_rope_layers-text", "llama-4-scout", "no_rope_layers", lambda c: {"text_config": c["text_config"] | {
        "no_rope_layers": ["x"] * c["text_config"]["num_hidden_layers"]}}),
    ("compress_ratios-huge", "deepseek-v4-flash", "compress_ratios",
     lambda c: {"compress_ratios": [10**9] * len(c["compress_ratios"])}),
    ("v4-rope-over-head_dim", "deepseek-v4-flash", "qk_rope_head_dim", lambda c: {"qk_rope_head_dim": c["head_dim"] * 2}),
    ("expert_dtype-list", "deepseek-v4-flash", "expert_dtype", {"expert_dtype": ["fp4"]}),
    ("kv_cache_quant_algo-object", "qwen3-32b", "kv_cache_quant_algo",
     {"quantization_config": {"quant_method": "fp8", "kv_cache_quant_algo": {"x": 1}}}),
]


def _write(tmp_path: Path, fixture: str, patch) -> Path:
    sys.set_int_max_str_digits(0)  # to write the 4,400-digit case; the reader must refuse it by itself
    try:
        cfg = json.loads((CONFIGS / fixture / "config.json").read_text())
        cfg |= patch(cfg) if callable(patch) else patch
        folder = tmp_path / fixture
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps(cfg))
    finally:
        sys.set_int_max_str_digits(4300)
    return folder


@pytest.mark.parametrize("case,fixture,field,patch", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("command", [["import"], ["kv"], ["capacity", "--model"]])
def test_hostile_config_field_is_named(tmp_path, case, fixture, field, patch, command):
    folder = _write(tmp_path, fixture, patch)
    assert_bad_input(run_cli(*command, str(folder)), "config.json", field)


def test_int_over_4300_digits_named(tmp_path):
    folder = _write(tmp_path, "qwen3-32b", {"intermediate_size": BIG})
    assert_bad_input(run_cli("import", str(folder)), "config.json", "4,300 digits")


def test_safetensors_index_metadata_not_an_object(tmp_path):
    folder = _write(tmp_path, "qwen3-32b", {})
    (folder / "model.safetensors.index.json").write_text('{"metadata": 5, "weight_map": {}}')
    for command in (["import"], ["kv"], ["capacity", "--model"]):
        assert_bad_input(run_cli(*command, str(folder)), "model.safetensors.index.json", "metadata")


def test_same_rules_for_import_and_kv(tmp_path):
    # a config refused by one command is refused by the others with the same line (one reader)
    folder = _write(tmp_path, "qwen3-30b-a3b", {"num_experts_per_tok": 1000})
    errs = {run_cli(*c, str(folder)).err for c in (["import"], ["kv"], ["capacity", "--model"])}
    assert len(errs) == 1, errs


@pytest.mark.parametrize("fixture", sorted(p.name for p in CONFIGS.iterdir() if p.is_dir()))
def test_every_real_fixture_still_imports(fixture):
    # the stricter reader refuses none of the released configs
    r = run_cli("import", str(CONFIGS / fixture), "--format", "json")
    assert r.code == 0, r.err
