"""``kvcalc import`` and config.json models: layer groups, exact KV bytes, parameters and weight bytes read from
real configs (tests/fixtures/configs, sources in its README), identical results from a config and the preset
written from it, and one-line errors naming the field or file of a bad config."""

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from conftest import run_cli

from kvcalc.model import attention as att
from kvcalc.model import catalog
from kvcalc.model.config_import import import_config
from kvcalc.model.kv import kv_profile

CONFIGS = Path(__file__).parent / "fixtures" / "configs"


def model(name):
    return catalog.load_model(str(CONFIGS / name))


def kv_bytes(name, tokens, **opts):
    return kv_profile(name, model(name), tokens, att.KvOptions(**opts)).kv_bytes_per_request


# ---------------------------------------------------------------- exact bytes from the config's numbers

def test_qwen3_32b_bytes_per_token():
    # 64 layers x 8 KV heads x (128 + 128) x 2 B = 262,144 B/token (the figure)
    assert kv_bytes("qwen3-32b", 1) == 262_144
    assert kv_bytes("qwen3-32b", 32_768) == 32_768 * 262_144


def test_qwen3_30b_a3b_bytes_per_token():
    # 48 layers x 4 KV heads x 256 x 2 B = 98,304 B/token
    assert kv_bytes("qwen3-30b-a3b", 4096) == 4096 * 98_304


def test_gpt_oss_120b_sliding_and_full():
    # per layer per token: 8 KV heads x (64 + 64) x 2 B = 2,048 B; 18 sliding (window 128) + 18 full layers.
    # The arithmetic checks out against the config: at 4,096 tokens
    # 18 x 2,048 x 128 + 18 x 2,048 x 4,096 = 4,718,592 + 150,994,944 = 155,713,536 B
    assert kv_bytes("gpt-oss-120b", 4096) == 18 * 2048 * 128 + 18 * 2048 * 4096 == 155_713_536
    # inside the window every layer stores every token: 36 x 2,048 x 100
    assert kv_bytes("gpt-oss-120b", 100) == 36 * 2048 * 100


def test_gemma3_27b_window_pattern_from_text_config():
    # text_config: 62 layers, every 6th global -> 10 full + 52 sliding (window 1,024); 16 KV heads x 256 x 2 = 8,192 B.
    # The released config has no sliding_window_pattern (nor vocab_size, max_position_embeddings): transformers'
    # Gemma3TextConfig supplies 6 (262,208; 131,072). Read as a bare sliding_window it would put all 62 layers in
    # the window: 62 x 1,024 x 8,192 at 4K instead of the 10 x 4,096 x 8,192 + 52 x 1,024 x 8,192 below.
    notes = import_config(str(CONFIGS / "gemma-3-27b")).notes
    assert "text_config.sliding_window_pattern absent: assumed 6 (transformers' Gemma3TextConfig default)" in notes
    assert "text_config.vocab_size absent: assumed 262208 (transformers' Gemma3TextConfig default)" in notes
    gs = {g.name: g for g in att.resolve_groups(model("gemma-3-27b"))}
    assert (gs["full"].layers, gs["sliding"].layers, gs["sliding"].window_tokens) == (10, 52, 1024)
    assert kv_bytes("gemma-3-27b", 512) == 62 * 512 * 8192
    assert kv_bytes("gemma-3-27b", 4096) == 10 * 4096 * 8192 + 52 * 1024 * 8192


def test_llama_31_405b_head_dim_from_hidden():
    # head_dim absent: 16,384 / 128 = 128; 126 layers x 8 x 256 x 2 B = 516,096 B/token
    assert kv_bytes("llama-3.1-405b", 1) == 516_096
    notes = import_config(str(CONFIGS / "llama-3.1-405b")).notes
    assert any("head_dim absent: assumed 128" in n for n in notes)


def test_llama4_scout_chunked():
    # 48 layers: every 4th global (12), 36 chunked (8,192); 8 KV heads x 256 x 2 B = 4,096 B per layer-token
    assert kv_bytes("llama-4-scout", 4096) == 48 * 4096 * 4096             # inside the first chunk
    # 10,000 tokens: globals hold all; chunked layers hold (9,999 mod 8,192) + 1 = 1,808
    assert kv_bytes("llama-4-scout", 10_000) == 12 * 10_000 * 4096 + 36 * 1808 * 4096


def test_qwen3_next_linear_hybrid_grows_only_by_full_layers():
    # 12 full layers x 2 KV heads x 512 x 2 B = 24,576 B/token; 36 Gated DeltaNet layers: fixed
    # 3 x (2 x 16 x 128 + 32 x 128) x 2 B + 32 x 128 x 128 x 2 B = 1,097,728 B each = 39,518,208 B
    m = model("qwen3-next-80b-a3b")
    a, b = kv_profile("q", m, 4096), kv_profile("q", m, 65_536)
    assert a.kv_fixed_bytes_per_request == b.kv_fixed_bytes_per_request == 39_518_208
    assert a.kv_bytes_per_request == 4096 * 24_576 + 39_518_208
    assert b.kv_bytes_per_request - a.kv_bytes_per_request == (65_536 - 4096) * 24_576


def test_nemotron_h_mamba_hybrid():
    # pattern: 23 M, 6 *, 23 E. Attention: 6 x 2 KV heads x 256 x 2 B = 6,144 B/token.
    # Mamba-2: conv 3 x (64 x 64 + 2 x 8 x 128) x 2 B = 36,864 + SSM 64 x 64 x 128 x 2 B = 1,048,576 -> 1,085,440
    gs = {g.name: g for g in att.resolve_groups(model("nemotron-3-nano-30b-a3b"))}
    assert (gs["full"].layers, gs["mamba"].layers) == (6, 23)
    # the config names no mamba_ssm_cache_dtype: fp32, NemotronH's default in vLLM
    # (NemotronHForCausalLMConfig.update_mamba_ssm_cache_dtype; vLLM 0.33.0 resolved float32 for this config,
    # tests/test_engine_pins.py): SSM 64 x 64 x 128 x 4 B = 2,097,152 + conv 36,864 = 2,134,016 B
    assert gs["mamba"].state_bytes_per_layer == 2_134_016
    bf16 = {g.name: g for g in att.resolve_groups(model("nemotron-3-nano-30b-a3b"), att.KvOptions(state_dtype="bf16"))}
    assert bf16["mamba"].state_bytes_per_layer == 1_085_440
    assert kv_bytes("nemotron-3-nano-30b-a3b", 8192) == 8192 * 6144 + 23 * 2_134_016


def test_kimi_k2_mla():
    # MLA latent 512 + rope 64 in bf16 = 1,152 B per layer; 61 layers = 70,272 B/token
    assert kv_bytes("kimi-k2", 1) == 70_272


def test_glm5_dsa_and_mtp_only_with_flag():
    # MLA + DSA indexer: (1,152 + 132 fp8 indexer key) x 78 layers = 100,152 B/token; the MTP layer only with --mtp
    assert kv_bytes("glm-5", 1) == 78 * 1284 == 100_152
    assert kv_bytes("glm-5", 1, mtp=True) == 79 * 1284
    (g,) = att.resolve_groups(model("glm-5"))
    assert g.top_k == 2048


# ---------------------------------------------------------------- parameters and weight bytes

def test_qwen3_32b_params_hand_computed():
    # embedding and LM head 151,936 x 5,120 = 777,912,320 each (untied);
    # per layer q 5,120 x 8,192 + k, v 2 x 5,120 x 1,024 + o 8,192 x 5,120 = 94,371,840; MLP 3 x 5,120 x 25,600 =
    # 393,216,000; norms 2 x 5,120 -> 487,598,080 x 64 = 31,206,277,120; final norm 5,120
    total = 2 * 777_912_320 + 31_206_277_120 + 5120
    m = model("qwen3-32b")
    assert m.params_total == pytest.approx(total, rel=1e-15) and total == 32_762_106_880  # published: 32.8 B
    assert m.weight_bytes == pytest.approx(2 * total, rel=1e-15)


def test_moe_active_params():
    # Qwen3-30B-A3B: 128 experts, 8 active, 48 layers of 3 x 2,048 x 768 = 4,718,592 per expert:
    # inactive = 48 x 120 x 4,718,592 = 27,179,089,920
    m = model("qwen3-30b-a3b")
    assert m.params_total - m.params_active == pytest.approx(48 * 120 * 4_718_592, rel=1e-12)
    assert m.params_total / 1e9 == pytest.approx(30.5, abs=0.05)   # published 30.5 B total, 3.3 B active
    assert m.params_active / 1e9 == pytest.approx(3.3, abs=0.1)


def test_gpt_oss_mxfp4_weight_bytes():
    # routed experts 36 x 128 x 3 x 2,880 x 2,880 = 114,661,785,600 params at 0.5 + 1/32 = 0.53125 B (MXFP4 +
    # E8M0 scale per 32); everything else in bf16. Published: 116.83 B total (the experts' biases, ~40 M, are not
    # in the config and not counted)
    r = import_config(str(CONFIGS / "gpt-oss-120b"))
    n, b = r.components["routed_experts"]
    assert n == 36 * 128 * 3 * 2880 * 2880 == 114_661_785_600
    assert b == n * 0.53125
    rest = sum(x for k, (x, _) in r.components.items() if k != "routed_experts")
    assert r.preset["weights_gb"] * 1e9 == pytest.approx(b + 2 * rest, rel=1e-12)
    assert r.preset["params_total_b"] == pytest.approx(116.83, rel=1e-3)
    assert "torch_dtype absent: assumed 2 (bf16 weights)" in r.notes   # the released config has no torch_dtype


def test_fp8_block_scales():
    # Kimi K2: fp8 with 128 x 128 blocks = 1 + 4 / 16,384 B per quantized param; embedding and LM head bf16
    r = import_config(str(CONFIGS / "kimi-k2"))
    n, b = r.components["routed_experts"]
    assert b == pytest.approx(n * (1 + 4 / 16384), rel=1e-15)
    assert r.components["embedding"][1] == 2 * 163_840 * 7168
    assert r.preset["params_total_b"] == pytest.approx(1026.4, abs=0.5)  # published ~1 T total, 32 B active
    assert r.preset["params_active_b"] == pytest.approx(32.9, abs=0.1)


def test_safetensors_index_is_shown_beside_the_computed_figure(tmp_path):
    d = tmp_path / "qwen3-32b"
    shutil.copytree(CONFIGS / "qwen3-32b", d)
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 65_524_246_528}}))
    r = run_cli("import", str(d), "--format", "json")
    assert r.code == 0, r.err
    rows = {row["component"]: row for row in r.json()["results"]}
    assert rows["checkpoint (safetensors index total_size)"]["weight_bytes"] == 65_524_246_528
    assert rows["total (computed)"]["weight_bytes"] == 2 * 32_762_106_880


# ---------------------------------------------------------------- a config and its preset agree everywhere

COMMANDS = (
    ("kv", "{m}", "--context", "4k,100k", "--mtp"),
    ("capacity", "--model", "{m}", "--context", "32k", "--gpus", "8"),
    ("blocks", "--model", "{m}"),
    ("transfer", "--model", "{m}"),
    ("cost", "--model", "{m}"),
    ("compare", "--model", "{m}"),
)


@pytest.mark.parametrize("name", ["gpt-oss-120b", "qwen3-next-80b-a3b", "glm-5", "llama-4-scout",
                                  "nemotron-3-nano-30b-a3b"])
def test_config_and_imported_preset_agree_in_every_command(tmp_path, name):
    out = tmp_path / f"{name}.toml"  # the same stem as the config's folder, so the model names agree too
    r = run_cli("import", str(CONFIGS / name), "--output", str(out))
    assert r.code == 0, r.err
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps({"timestamp": t, "input_length": n, "output_length": 1, "hash_ids": h}) + "\n"
                             for t, n, h in ((0, 8, [1, 2]), (1500, 10, [1, 2, 3]), (4000, 6, [4, 5]))))
    for cmd in COMMANDS + (("trace", str(trace), "-b", "4", "--capacity", "2.7GB", "--model", "{m}"),):
        a = run_cli(*[c.format(m=CONFIGS / name) for c in cmd], "--format", "json")
        b = run_cli(*[c.format(m=out) for c in cmd], "--format", "json")
        assert a.code == b.code == 0, (cmd, a.err, b.err)
        ja, jb = a.json(), b.json()
        ja.pop("inputs"), jb.pop("inputs")  # the inputs echo the two paths
        assert ja == jb, cmd


# ---------------------------------------------------------------- bad configs: exit 2, one line, naming it

BASE = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "vocab_size": 100, "intermediate_size": 128, "tie_word_embeddings": False}


@pytest.mark.parametrize("change,expect", [
    ({"num_hidden_layers": None}, "'num_hidden_layers': missing"),
    ({"num_attention_heads": 0}, "'num_attention_heads': 0 must be > 0"),
    ({"sliding_window": -4}, "'sliding_window': -4 must be > 0"),
    ({"layer_types": ["full_attention"] * 3}, "'layer_types': has 3 entries but num_hidden_layers is 2"),
    ({"layer_types": ["full_attention", "banana"]}, "'layer_types': unknown layer type(s) banana"),
    ({"num_key_value_heads": 3}, "'num_key_value_heads': 3 does not divide num_attention_heads 4"),
    ({"hybrid_override_pattern": "M*X"}, "'hybrid_override_pattern'"),
    ({"compress_ratios": [0, 4, 128]}, "'compress_ratios': has 3 entries but num_hidden_layers is 2"),
])
def test_bad_config_fields(tmp_path, change, expect):
    cfg = {k: v for k, v in (BASE | change).items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    for args in (("kv", str(path)), ("import", str(path))):
        r = run_cli(*args)
        assert r.code == 2, r.out
        assert expect in r.err and str(path) in r.err
        assert r.err.count("\n") == 1 and "Traceback" not in r.err


def test_text_config_fields_are_named_as_nested(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"text_config": BASE | {"num_attention_heads": 0}}))
    r = run_cli("kv", str(path))
    assert r.code == 2 and "'text_config.num_attention_heads'" in r.err


def test_not_json_and_missing_files(tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text("{ not json")
    r = run_cli("kv", str(bad))
    assert r.code == 2 and str(bad) in r.err and "not JSON" in r.err
    empty = tmp_path / "empty-model"
    empty.mkdir()
    r = run_cli("import", str(empty))
    assert r.code == 2 and "no config.json in this folder" in r.err and str(empty) in r.err
    r = run_cli("capacity", "--model", str(tmp_path / "nope.json"))
    assert r.code == 2 and "no such file" in r.err


def test_import_writes_a_preset_that_validates(tmp_path):
    out = tmp_path / "gemma.toml"
    r = run_cli("import", str(CONFIGS / "gemma-3-27b"), "--output", str(out))
    assert r.code == 0, r.err
    assert run_cli("presets", "validate", str(out)).code == 0
    assert "# tie_word_embeddings absent: assumed true" in out.read_text()


# the shipped deepseek-v4-* presets are written by hand from the paper (test_v4_import_gives_the_shipped_kv_bytes),
# deepseek-v3.2 from DeepSeek's inference code; tests/test_preset_layouts.py holds their KV bytes to the config's
HAND_WRITTEN = {"deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v3.2"}


@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.iterdir() if p.is_dir() and p.name not in HAND_WRITTEN))
def test_shipped_imports_match_a_fresh_import(name):
    # presets/models/<name>.toml were written by `kvcalc import tests/fixtures/configs/<name> --source ... --output`
    shipped = catalog.read_toml(catalog.presets_root() / "models" / f"{name}.toml")
    origin = shipped["source"].split("; kvcalc import of ")[0]
    fresh = import_config(str(CONFIGS / name), origin=origin, name=shipped["display_name"]).preset
    assert shipped == fresh
    assert catalog.load_model(name) == dataclasses.replace(model(name), source=shipped["source"],
                                                           display_name=shipped["display_name"])


# ---------------------------------------------------------------- mappings shown on small configs (shapes, not a model)

def _imported(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return catalog.load_model(str(path))


# 5 sliding layers (16 KV heads x (256 + 256)) + 1 global layer (4 KV heads x 512, K = V stored once)
GEMMA4_STYLE = {"text_config": {"num_hidden_layers": 6, "hidden_size": 1024, "num_attention_heads": 32,
                                "num_key_value_heads": 16, "head_dim": 256, "global_head_dim": 512,
                                "num_global_key_value_heads": 4, "attention_k_eq_v": True, "sliding_window": 1024,
                                "layer_types": ["sliding_attention"] * 5 + ["full_attention"], "vocab_size": 10,
                                "intermediate_size": 64, "tie_word_embeddings": True}}


def test_gemma4_style_global_layers_k_eq_v(tmp_path):
    gs = {g.name: g for g in att.resolve_groups(_imported(tmp_path, GEMMA4_STYLE))}
    assert gs["full"].entry_bytes == 4 * 512 * 2 == 4096          # one tensor, not K and V
    assert gs["sliding"].entry_bytes == 16 * 512 * 2 == 16_384
    assert gs["full"].q_heads == 32 and gs["full"].qk_head_dim == 512  # its own attention FLOPs shape


def test_mimo_style_hybrid_layer_pattern(tmp_path):
    # pattern 1 = sliding layer with swa_* shapes: 8 KV heads x (192 + 128); full layers 4 x (192 + 128)
    cfg = {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 64, "num_key_value_heads": 4,
           "head_dim": 192, "v_head_dim": 128, "hybrid_layer_pattern": [0, 1, 1, 1],
           "swa_num_attention_heads": 64, "swa_num_key_value_heads": 8, "swa_head_dim": 192, "swa_v_head_dim": 128,
           "sliding_window": 128, "vocab_size": 10, "intermediate_size": 64, "tie_word_embeddings": False}
    m = _imported(tmp_path, cfg)
    gs = {g.name: g for g in att.resolve_groups(m)}
    assert gs["full"].entry_bytes == 4 * 320 * 2 and gs["full"].layers == 1
    assert gs["sliding"].entry_bytes == 8 * 320 * 2 and gs["sliding"].window_tokens == 128
    # at 1,000 tokens: 1 x 1,000 x 2,560 + 3 x 128 x 5,120
    assert kv_profile("m", m, 1000).kv_bytes_per_request == 1000 * 2560 + 3 * 128 * 5120


def test_qwen2_max_window_layers_and_ssm_dtype(tmp_path):
    cfg = BASE | {"num_hidden_layers": 4, "use_sliding_window": True, "max_window_layers": 3, "sliding_window": 64}
    gs = {g.name: g.layers for g in att.resolve_groups(_imported(tmp_path, cfg))}
    assert gs == {"full": 3, "sliding": 1}  # layers from max_window_layers on use the window
    # Qwen3.5 configs say mamba_ssm_dtype float32: the recurrent state is kept in fp32
    lin = BASE | {"num_hidden_layers": 4, "full_attention_interval": 4, "linear_num_key_heads": 2,
                  "linear_num_value_heads": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
                  "mamba_ssm_dtype": "float32"}
    (tmp_path / "q").mkdir()
    m = _imported(tmp_path / "q", lin)
    assert m.state_dtype == "fp32"
    g = [g for g in att.resolve_groups(m) if g.kind == "linear"][0]
    # conv 3 x (2 x 2 x 8 + 4 x 8) x 2 B = 384 + recurrent 4 x 8 x 8 x 4 B = 1,024
    assert g.state_bytes_per_layer == 384 + 1024


def test_nvfp4_from_hf_quant_config():
    # hf_quant_config.json next to the config: NVFP4 (0.5 B + one FP8 scale per 16 = 0.5625 B/param) on the decoder's
    # linear layers, lm_head excluded (bf16), embedding bf16; kv_cache_quant_algo FP8 -> 64 x 8 x 256 x 1 B per token
    r = import_config(str(CONFIGS / "qwen3-32b-nvfp4"))
    c = r.components
    assert c["attention"][1] == c["attention"][0] * 0.5625 and c["dense_mlp"][1] == c["dense_mlp"][0] * 0.5625
    assert c["lm_head"][1] == 2 * 151_936 * 5120
    # 31,206,277,120 - 64 x 10,240 norms = 31,205,621,760 linear params x 0.5625 + (2 x 777,912,320 + 660,480) x 2
    assert r.preset["weights_gb"] * 1e9 == pytest.approx(31_205_621_760 * 0.5625 + 2 * (1_555_824_640 + 660_480))
    assert kv_bytes("qwen3-32b-nvfp4", 1) == 131_072


def test_scenario_file_may_name_a_config(tmp_path):
    sc = tmp_path / "mine.toml"
    text = (catalog.presets_root() / "scenarios" / "article.toml").read_text()
    import re

    text = re.sub(r'(?m)^model = ".*"$', f'model = "{CONFIGS / "qwen3-32b" / "config.json"}"', text)
    sc.write_text(text)
    r = run_cli("cost", "--scenario", str(sc), "--format", "json")
    assert r.code == 0, r.err
    assert r.json()["inputs"]["model"] == "qwen3-32b"


def test_glm5_reads_top_k_inside_and_beyond():
    # decode step reads min(L, top_k = 2,048) latents (1,152 B) + every indexer key (132 B), 78 layers
    from kvcalc.model.kv import read_bytes

    gs = att.resolve_groups(model("glm-5"))
    assert read_bytes(gs, 1000) == 78 * (1000 * 1152 + 1000 * 132)
    assert read_bytes(gs, 10_000) == 78 * (2048 * 1152 + 10_000 * 132)


def test_attn_output_gate_doubles_q_proj():
    # BASE: 2 layers, q 64 x (4 x 16) = 4,096 more params per layer with the gate
    a = import_config("a/config.json", data=dict(BASE)).components["attention"][0]
    b = import_config("b/config.json", data=BASE | {"attn_output_gate": True}).components["attention"][0]
    assert b - a == 2 * 64 * 4 * 16
