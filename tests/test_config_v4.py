"""DeepSeek V4 configs: ``compress_ratios`` mapped into compressed layer groups that give exactly the shipped
deepseek-v4-flash / -pro presets' bytes, and the release's real weight bytes (FP4 routed experts).

Fixtures (tests/fixtures/configs/README.md): deepseek-v4-flash is the released config.json as quoted verbatim in
public code; deepseek-v4-pro is assembled from the release's published config values.
"""

import json
from pathlib import Path

import pytest
from conftest import run_cli

from kvcalc.model import attention as att
from kvcalc.model import catalog
from kvcalc.model.config_import import import_config
from kvcalc.model.kv import kv_profile

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
V4 = ("deepseek-v4-flash", "deepseek-v4-pro")


def profile(model, tokens, mtp=False):
    return kv_profile("m", model, tokens, att.KvOptions(mtp=mtp))


@pytest.mark.parametrize("name", V4)
@pytest.mark.parametrize("tokens", [1, 100, 4096, 1_048_576])
@pytest.mark.parametrize("mtp", [False, True])
def test_v4_import_gives_the_shipped_kv_bytes(name, tokens, mtp):
    shipped, imported = catalog.load_model(name), catalog.load_model(str(CONFIGS / name))
    a, b = profile(shipped, tokens, mtp), profile(imported, tokens, mtp)
    assert a.kv_bytes_per_request == b.kv_bytes_per_request
    assert a.kv_fixed_bytes_per_request == b.kv_fixed_bytes_per_request
    assert a.kv_read_bytes_per_step == b.kv_read_bytes_per_step


def test_v4_flash_bytes_by_hand():
    # bytes(L) = 43 x min(L, 128) x 584 + 21 CSA x floor(L / 4) x (584 + 68 fp4 indexer) + 20 HCA x floor(L / 128)
    # x 584 + state (21 x (65,536 + 16,384) + 20 x 524,288 = 12,206,080) (reference/kv-formulas.md section 4)
    m = catalog.load_model(str(CONFIGS / "deepseek-v4-flash"))
    # 4K: 3,214,336 + 14,020,608 + 373,760 + 12,206,080
    assert profile(m, 4096).kv_bytes_per_request == 43 * 128 * 584 + 21 * 1024 * 652 + 20 * 32 * 584 + 12_206_080 \
        == 29_814_784
    # 1M: 3,214,336 + 3,589,275,648 + 95,682,560 + 12,206,080
    assert profile(m, 1_048_576).kv_bytes_per_request == 3_700_378_624
    # the MTP layer (44th compress_ratios entry, 0) keeps only the window: + min(L, 128) x 584, only with --mtp
    assert profile(m, 4096, mtp=True).kv_bytes_per_request - 29_814_784 == 128 * 584


def test_v4_pro_bytes_by_hand():
    # 61 layers: 0-1 and odd 3-59 HCA (31), even 2-60 CSA (30); state 30 x 81,920 + 31 x 524,288 = 18,710,528
    m = catalog.load_model(str(CONFIGS / "deepseek-v4-pro"))
    gs = {g.name: g for g in att.resolve_groups(m)}
    assert (gs["csa"].layers, gs["hca"].layers, gs["csa"].top_k) == (30, 31, 1024)
    # 4K: 61 x 128 x 584 + 30 x 1,024 x 652 + 31 x 32 x 584 + 18,710,528 = 4,559,872 + 20,029,440 + 579,328 + ...
    assert profile(m, 4096).kv_bytes_per_request == 43_879_168
    # 1M: 4,559,872 + 30 x 262,144 x 652 + 31 x 8,192 x 584 + 18,710,528
    assert profile(m, 1_048_576).kv_bytes_per_request == 4_559_872 + 5_127_536_640 + 148_307_968 + 18_710_528


def test_v4_groups_and_model_fields_from_the_config():
    p = import_config(str(CONFIGS / "deepseek-v4-flash")).preset
    groups = {g["name"]: g for g in p["layer_groups"]}
    assert [(g["name"], g["layers"], g.get("ratio")) for g in p["layer_groups"]] == \
        [("swa", 2, None), ("csa", 21, 4), ("hca", 20, 128), ("mtp", 1, None)]
    # entry: 448 nope fp8 + 64 rope x 2 B + 7 UE8M0 scales = 583 -> 584 (8-byte aligned, FlashMLA MODEL1)
    assert {g["entry_bytes"] for g in groups.values()} == {584}
    # compressor state fp32: CSA overlaps (coff 2): 2 x 8 x 1,024 x 4 = 65,536 + indexer 2 x 8 x 256 x 4 = 16,384;
    # HCA 2 x 128 x 512 x 4 = 524,288
    assert groups["csa"]["state_bytes_per_layer"] == 81_920 and groups["hca"]["state_bytes_per_layer"] == 524_288
    assert groups["csa"]["indexer"] == {"head_dim": 128, "heads": 64, "top_k": 512}
    assert groups["mtp"]["mtp"] is True and p["indexer_dtype"] == "fp4"
    assert (p["q_heads"], p["qk_head_dim"], p["block_tokens_multiple"], p["max_context_tokens"]) == \
        (64, 512, 128, 1_048_576)


def test_v4_flash_real_weight_bytes():
    # routed experts 43 x 256 x 3 x 4,096 x 2,048 = 277,025,390,592 params in FP4 + one UE8M0 scale per 32
    # (0.53125 B) = 147,169,738,752 B; attention (wq_a, wq_b, wkv, wo_a, wo_b: 106,954,752 per layer x 43, + the
    # indexer's wq_b 1,024 x 64 x 128 on 21 layers) 4,775,215,104 and shared experts 43 x 3 x 4,096 x 2,048 =
    # 1,082,130,432 in FP8 with one UE8M0 scale per 128 x 128 block; embedding and head 2 x 129,280 x 4,096 in BF16;
    # norms, routers, compressors, hyper-connections 390,508,892 in BF16
    r = import_config(str(CONFIGS / "deepseek-v4-flash"))
    c = r.components
    assert c["routed_experts"] == (277_025_390_592, 277_025_390_592 * 0.53125)
    assert c["attention"][0] == 4_775_215_104 and c["shared_experts"][0] == 1_082_130_432
    assert c["attention"][1] == pytest.approx(4_775_215_104 * (1 + 1 / 16384), rel=1e-15)
    assert c["embedding"] == c["lm_head"] == (529_530_880, 2 * 529_530_880)
    total = 147_169_738_752 + 4_775_506_560 + 1_082_196_480 + 2_118_123_520 + 781_017_784
    assert r.preset["weights_gb"] * 1e9 == pytest.approx(total, rel=1e-12) and total == 155_926_583_096
    # the issue's ~154 GB; the checkpoint's safetensors index says 159,609,485,896 B with its MTP block (~3.7 GB)
    assert 0.97 < total / 159_609_485_896 < 0.98
    # published 284 B total / 13 B active
    assert r.preset["params_total_b"] == pytest.approx(284.3, abs=0.05)
    assert r.preset["params_active_b"] == pytest.approx(13.8, abs=0.05)
    # the shipped preset carries the same figure; the article's model keeps 284 GB at 1 B/param
    assert catalog.load_model("deepseek-v4-flash").weight_bytes == pytest.approx(total, rel=1e-12)
    assert catalog.load_model("deepseek-v4-flash-article").weight_bytes == pytest.approx(284e9)


def test_v4_pro_weight_bytes_and_params():
    r = import_config(str(CONFIGS / "deepseek-v4-pro"))
    # routed experts 61 x 384 x 3 x 7,168 x 3,072 = 1,547,396,186,112 x 0.53125 B
    assert r.components["routed_experts"] == (1_547_396_186_112, 1_547_396_186_112 * 0.53125)
    assert r.preset["params_total_b"] == pytest.approx(1573.0, abs=0.5)   # published 1.6 T total / 49 B active
    assert r.preset["params_active_b"] == pytest.approx(49.8, abs=0.1)
    assert catalog.load_model("deepseek-v4-pro").weights_gb == pytest.approx(r.preset["weights_gb"], rel=1e-12)


def test_scenarios_use_real_bytes_and_the_article_keeps_its_own():
    assert catalog.load("scenarios", "v4-flash-8xh100").model == "deepseek-v4-flash"
    assert catalog.load("scenarios", "article").model == "deepseek-v4-flash-article"
    env = run_cli("capacity", "--model", "deepseek-v4-flash", "--format", "json").json()
    assert env["results"][0]["weight_bytes"] == pytest.approx(155_926_583_096)


@pytest.mark.parametrize("change,expect", [
    ({"compress_ratios": [0, 4]}, "'compress_ratios': has 2 entries but num_hidden_layers is 43 (+ 1 MTP)"),
    ({"compress_ratios": "4"}, "'compress_ratios': needs a list of non-negative integers"),
    ({"compress_ratios": [0, -4] + [4] * 41}, "'compress_ratios': needs a list of non-negative integers"),
    ({"num_key_value_heads": 8}, "'num_key_value_heads': 8: DeepSeek V4 stores one shared K = V latent"),
    ({"sliding_window": None}, "'sliding_window': missing"),
    ({"expert_dtype": "int3"}, "'expert_dtype': 'int3' is not mapped"),
])
def test_bad_v4_configs(tmp_path, change, expect):
    cfg = json.loads((CONFIGS / "deepseek-v4-flash" / "config.json").read_text())
    cfg = {k: v for k, v in (cfg | change).items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = run_cli("import", str(path))
    assert r.code == 2 and expect in r.err and str(path) in r.err, r.err
    assert r.err.count("\n") == 1 and "Traceback" not in r.err
