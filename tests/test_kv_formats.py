"""KV formats with their scale bytes: every layout hand-computed (Llama-3-8B: 32 layers, 8 KV heads, d = 128)."""

from __future__ import annotations

import pytest

from kvcalc.model import attention as att
from kvcalc.model import catalog, kv_formats
from kvcalc.model.kv import kv_profile
from kvcalc.out.errors import InputError


def per_token(fmt: str, **kw) -> float:
    model = catalog.load_model("llama-3-8b")
    return kv_profile("llama-3-8b", model, 1 << 20, att.KvOptions(kv_dtype=fmt, **kw)).kv_long_context_bytes_per_token


def test_row_bytes_hand_computed():
    assert kv_formats.row_bytes("bf16", 128) == 256          # 128 x 2 B
    assert kv_formats.row_bytes("fp8", 128) == 128           # 128 x 1 B; per-tensor scale 0 B/token
    assert kv_formats.row_bytes("fp8-per-token-head", 128) == 132   # 128 x 1 B + 4 B FP32 scale
    assert kv_formats.row_bytes("nvfp4", 128) == 72          # 128 x 0.5 B + 128/16 = 8 E4M3 scales x 1 B
    assert kv_formats.row_bytes("int4-grouped", 128) == 80   # 64 B + 128/32 = 4 groups x (2 B scale + 2 B zero)
    assert kv_formats.row_bytes("int4-grouped", 128, 128) == 68  # 64 B + 1 group x 4 B
    assert kv_formats.row_bytes("kivi", 128) == 80
    assert kv_formats.residual_extra_bytes("kivi", 128) == 176  # 256 B BF16 - 80 B INT4
    assert kv_formats.residual_extra_bytes("int4-grouped", 128) == 0


def test_per_token_bytes_of_every_format_llama_3_8b():
    # 32 layers x 8 heads x 2 rows (K, V) = 512 rows per token
    assert per_token("bf16") == 131_072               # 512 x 256
    assert per_token("fp8") == 65_536                 # 512 x 128
    assert per_token("fp8-per-token-head") == 67_584  # 512 x 132: +4 B per head per token for K and for V
    assert per_token("nvfp4") == 36_864               # 512 x 72
    assert per_token("int4-grouped") == 40_960        # 512 x 80 (G = 32)
    assert per_token("int4-grouped", kv_group_size=128) == 34_816  # 512 x 68
    assert per_token("int4") == 32_768                # 512 x 64: the plain figure that leaves the scales out


def test_nvfp4_llama_3_70b_matches_the_reference():
    # reference/engines.md: 163,840 elements/token -> 81,920 + 10,240 = 92,160 B/token
    model = catalog.load_model("llama-3-70b")
    p = kv_profile("llama-3-70b", model, 4096, att.KvOptions(kv_dtype="nvfp4"))
    assert p.kv_long_context_bytes_per_token == 92_160


def test_kivi_residual_window_is_kept_in_bf16():
    model = catalog.load_model("llama-3-8b")
    opts = att.KvOptions(kv_dtype="kivi")  # G = 32, R = 128
    # L = 4,096: 4,096 x 40,960 + 128 x 512 rows x 176 B = 167,772,160 + 11,534,336
    assert kv_profile("m", model, 4096, opts).kv_bytes_per_request == 179_306_496
    # L = 100 < R: every token in BF16: 100 x 131,072
    assert kv_profile("m", model, 100, opts).kv_bytes_per_request == 13_107_200
    # R = 0 is plain grouped INT4
    assert (kv_profile("m", model, 4096, att.KvOptions(kv_dtype="kivi", kv_residual_tokens=0)).kv_bytes_per_request
            == 4096 * 40_960)


def test_bad_format_and_group_size_name_the_flag():
    with pytest.raises(InputError, match="--kv-group-size"):
        kv_formats.row_bytes("int4-grouped", 128, 48)
    with pytest.raises(InputError, match="nvfp4"):
        kv_formats.row_bytes("nvfp4", 72)
    with pytest.raises(InputError, match="--kv-dtype"):
        kv_formats.row_bytes("fp6", 128)


def test_explain_shows_each_layout_and_source():
    from kvcalc.model.kv import kv_result

    model = catalog.load_model("llama-3-8b")
    for fmt, text in (("fp8-per-token-head", "128 x 1 B + 4 B FP32 scale = 132 B"),
                      ("nvfp4", "8 blocks of 16 x 1 B E4M3 scale = 72 B"),
                      ("int4-grouped", "4 groups of 32 x (2 B scale + 2 B zero) = 80 B"),
                      ("kivi", "+ 176 B per row"), ("fp8", "one FP32 scale per tensor")):
        lines = kv_result([("m", model)], [4096], att.KvOptions(kv_dtype=fmt)).explain
        assert any(text in line for line in lines), (fmt, lines)


def test_kv_cli_kivi_json():
    import json
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "kvcalc", "kv", "llama-3-8b", "-c", "4k", "--kv-dtype", "kivi",
                          "--format", "json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    env = json.loads(out.stdout)
    assert env["results"][0]["kv_bytes_per_request"] == 179_306_496
    assert env["inputs"]["kv_residual_tokens"] == 128
    bad = subprocess.run([sys.executable, "-m", "kvcalc", "kv", "llama-3-8b", "--kv-dtype", "kivi",
                          "--kv-group-size", "48"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--kv-group-size" in bad.stderr


# ---------------------------------------------------------------- the formats in the sweep and in preset files

def _json_rows(*args):
    import json

    from conftest import run_cli

    r = run_cli(*args, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)["results"]


def test_sweep_varies_every_kv_format():
    # Llama-3-70B: 80 layers x 8 KV heads x 2 rows (K, V) = 1,280 rows per token; 4,096 tokens
    rows = _json_rows("sweep", "kv", "--vary", "kv-dtype=" + ",".join(kv_formats.FORMATS),
                      "--set", "model=llama-3-70b", "--set", "context=4k")
    got = {r["kv_dtype"]: r["kv_bytes_per_request"] for r in rows}
    assert set(got) == set(kv_formats.FORMATS)          # the axis offers every format, scales included
    assert got["bf16"] == 1280 * 256 * 4096                # 1,342,177,280
    assert got["fp8-per-token-head"] == 1280 * 132 * 4096  # 692,060,160
    assert got["nvfp4"] == 1280 * 72 * 4096                # 377,487,360 (92,160 B/token, reference/engines.md)
    assert got["int4-grouped"] == 1280 * 80 * 4096         # 419,430,400
    # kivi: the 128 most recent tokens in BF16: + 128 x 1,280 x (256 - 80) = 28,835,840 B
    assert got["kivi"] == 1280 * 80 * 4096 + 128 * 1280 * 176
    # each equals the single-point kv with --kv-dtype
    for fmt in ("nvfp4", "kivi"):
        assert got[fmt] == _json_rows("kv", "llama-3-70b", "--context", "4k", "--kv-dtype", fmt)[0][
            "kv_bytes_per_request"]


def test_sweep_varies_the_group_size_and_residual_window():
    rows = _json_rows("sweep", "kv", "--vary", "kv-group-size=32,64,128", "--set", "kv-dtype=int4-grouped",
                      "--set", "model=llama-3-70b", "--set", "context=4k")
    # a row: 64 B of INT4 + 128 / G groups x 4 B (FP16 scale + zero): G 32 -> 80, 64 -> 72, 128 -> 68 B
    assert [r["kv_bytes_per_token"] for r in rows] == [1280 * 80, 1280 * 72, 1280 * 68]
    rows = _json_rows("sweep", "kv", "--vary", "kv-residual-tokens=0,128,4096", "--set", "kv-dtype=kivi",
                      "--set", "model=llama-3-70b", "--set", "context=4k")
    # + min(L, R) x 1,280 rows x 176 B
    assert [r["kv_bytes_per_request"] for r in rows] == [419_430_400 + r * 1280 * 176 for r in (0, 128, 4096)]


def test_sweep_rejects_a_group_size_out_of_bounds():
    from conftest import assert_bad_input, run_cli

    assert_bad_input(run_cli("sweep", "kv", "--vary", "kv-group-size=0,32", "--set", "model=llama-3-8b"),
                     "--vary kv-group-size")


def _preset_with(tmp_path, old: str, new: str):
    from conftest import REPO

    text = (REPO / "presets" / "models" / "llama-3-8b.toml").read_text()
    assert old in text
    path = tmp_path / "llama-q.toml"
    path.write_text(text.replace(old, new))
    return str(path)


@pytest.mark.parametrize("fmt,per_token_bytes", [
    ("nvfp4", 36_864),                 # 512 rows x 72 B
    ("fp8-per-token-head", 67_584),    # 512 rows x 132 B
    ("int4-grouped", 40_960),          # 512 rows x 80 B (G = 32)
])
def test_a_preset_file_names_a_quantised_format(tmp_path, fmt, per_token_bytes):
    path = _preset_with(tmp_path, 'kv_dtype = "bf16"', f'kv_dtype = "{fmt}"')
    rows = _json_rows("kv", path, "--context", "4k")
    assert rows[0]["kv_bytes_per_token"] == per_token_bytes
    # strict validation (a user's file goes through pydantic) accepts it, and the group's own field too
    group = _preset_with(tmp_path, 'head_dim = 128', f'head_dim = 128\nkv_dtype = "{fmt}"')
    assert _json_rows("kv", group, "--context", "4k")[0]["kv_bytes_per_token"] == per_token_bytes


def test_a_preset_with_an_unknown_format_or_a_head_dim_nvfp4_cannot_block(tmp_path):
    from conftest import assert_bad_input, run_cli

    path = _preset_with(tmp_path, 'kv_dtype = "bf16"', 'kv_dtype = "fp6"')
    assert_bad_input(run_cli("kv", path), "kv_dtype")
    # head dim 72 is not whole 16-element NVFP4 blocks
    path = _preset_with(tmp_path, 'kv_dtype = "bf16"', 'kv_dtype = "nvfp4"')
    bad = tmp_path / "odd.toml"
    bad.write_text(open(path).read().replace("head_dim = 128", "head_dim = 72"))
    assert_bad_input(run_cli("kv", str(bad)), "nvfp4")
