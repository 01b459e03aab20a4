"""The CLI: output contract (table/JSON/CSV/Markdown), --check, exit codes, bad input, golden outputs."""

import csv
import io
import json
import math
import os
from pathlib import Path

import pytest
from conftest import assert_bad_input, run_cli

GOLDEN = Path(__file__).parent / "golden"


@pytest.fixture(autouse=True)
def fixed_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")
    monkeypatch.setenv("NO_COLOR", "1")


def golden(name: str, text: str):
    """Compare with tests/golden/NAME; KVCALC_UPDATE_GOLDEN=1 rewrites it."""
    path = GOLDEN / name
    if os.environ.get("KVCALC_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def close(a, b, rel=1e-9):
    """Compare parsed JSON with a relative tolerance on numbers."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k], rel) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(close(x, y, rel) for x, y in zip(a, b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return math.isclose(a, b, rel_tol=rel)
    return a == b


def test_capacity_default_is_the_articles_table():
    r = run_cli("capacity", "--format", "json")
    assert r.code == 0, r.err
    env = r.json()
    assert env["command"] == "capacity" and env["schema"] == 1 and "kvcalc" in env
    assert [x["model"] for x in env["results"]] == ["mha-96l-64h", "deepseek-v3", "deepseek-v3.2",
                                                     "deepseek-v4-flash", "deepseek-v4-pro"]
    for key in ("model", "hardware", "gpus", "context_tokens", "weight_bytes", "kv_budget_bytes",
                "kv_bytes_per_request", "max_requests", "block_tokens", "block_bytes", "block_page_in_s"):
        assert all(key in x for x in env["results"]), key
    flash = env["results"][3]
    assert flash["max_requests"] == 1761 and flash["gpus"] == 8 and flash["context_tokens"] == 4096


def test_capacity_golden_table():
    r = run_cli("capacity")
    assert r.code == 0
    golden("capacity.txt", r.out)


def test_kv_golden_formats():
    for fmt in ("json", "csv", "markdown"):
        r = run_cli("kv", "llama-3-70b", "deepseek-v4-flash", "-c", "4k,1m", "--format", fmt)
        assert r.code == 0, r.err
        golden(f"kv.{fmt}" if fmt != "markdown" else "kv.md", r.out)
    parsed = json.loads((GOLDEN / "kv.json").read_text())
    now = run_cli("kv", "llama-3-70b", "deepseek-v4-flash", "-c", "4k,1m", "--format", "json").json()
    now["kvcalc"] = parsed["kvcalc"]
    assert close(now, parsed)


def test_kv_json_fields_and_values():
    env = run_cli("kv", "deepseek-v4-flash", "-c", "4k", "--format", "json").json()
    row = env["results"][0]
    assert row["kv_bytes_per_request"] == 17_608_704 + 12_206_080
    assert row["kv_fixed_bytes_per_request"] == 12_206_080
    assert row["kv_bytes_per_token"] == pytest.approx(29_814_784 / 4096)
    assert row["kv_read_bytes_per_step"] > 0
    assert {g["group"] for g in env["tables"]["groups"]} == {"swa", "csa", "hca"}


def test_csv_is_flat_and_numeric():
    r = run_cli("capacity", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.out)))
    assert len(rows) == 5
    assert float(rows[3]["kv_bytes_per_request"]) == 29_814_784
    assert rows[1]["weights_fit"] == "false"


def test_cli_json_equals_python_api():
    from kvcalc.model import catalog
    from kvcalc.model.attention import KvOptions
    from kvcalc.model.kv import kv_result
    from kvcalc.out import render

    api = kv_result([("deepseek-v3", catalog.load_model("deepseek-v3"))], [4096, 131072],
                    KvOptions(mla_layout="fp8-flashmla"))
    cli = run_cli("kv", "deepseek-v3", "-c", "4k,128k", "--mla-layout", "fp8-flashmla", "--format", "json").json()
    assert cli == render.envelope(api, [])
    assert cli["results"][0]["kv_bytes_per_token"] == 40_016


def test_check_passes_and_fails():
    ok = run_cli("capacity", "-m", "deepseek-v4-flash", "--check", "max_requests >= 1000", "--format", "json")
    assert ok.code == 0 and ok.json()["checks"][0]["passed"] is True
    bad = run_cli("capacity", "-m", "deepseek-v4-flash", "--check", "max_requests>2000", "--check",
                  "block_page_in_s < 1e-3")
    assert bad.code == 1
    assert "check failed: max_requests>2000" in bad.err and "block_page_in_s" not in bad.err


@pytest.mark.parametrize("expr", ["max_requests >>= 3", "__import__('os') > 1", "max_requests >= abc", ""])
def test_bad_check_expressions(expr):
    assert_bad_input(run_cli("capacity", "--check", expr), "--check")


def test_check_unknown_field_suggests():
    assert_bad_input(run_cli("capacity", "--check", "max_request > 3"), "max_requests")


def test_own_model_file(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text('schema_version = 1\nsource = "test"\ndisplay_name = "mine"\nparams_total_b = 1\n'
                 'params_active_b = 1\nweight_bytes_per_param = 2\n'
                 '[[layer_groups]]\nkind = "full"\nlayers = 10\nkv_heads = 2\nhead_dim = 64\n')
    env = run_cli("kv", str(f), "-c", "1000", "--format", "json").json()
    # 2 x 10 x 2 x 64 x 2 B = 5,120 B/token x 1,000 tokens
    assert env["results"][0]["kv_bytes_per_request"] == 5_120_000
    assert env["results"][0]["model"] == "mine"


@pytest.mark.parametrize("args,words", [
    (["kv", "deepseek-v4-flsh"], ["deepseek-v4-flash"]),
    (["capacity", "--hardware", "h100"], ["h100-sxm"]),
    (["kv", "-c", "-4k"], ["--context"]),
    (["kv", "-c", "nan"], ["--context"]),
    (["kv", "-c", "0"], ["--context"]),
    (["capacity", "--gpus", "0"], ["--gpus"]),
    (["capacity", "--gpus", "-3"], ["--gpus"]),
    (["capacity", "--hbm-utilization", "1.5"], ["--hbm-utilization"]),
    (["capacity", "--hbm-utilization", "nan"], ["--hbm-utilization"]),
    (["capacity", "--reserve", "4"], ["--reserve"]),
    (["capacity", "--format", "xml"], ["--format"]),
    (["kv", "--kv-dtype", "fp7"], ["--kv-dtype"]),
    (["capacity", "--attention", "pp"], ["--attention"]),
    (["capacity", "--gpus", "many"], ["gpus"]),
    (["capacity", "--no-such-option"], ["no-such-option"]),
    (["kv", "no/such/file.toml"], ["no/such/file.toml"]),
])
def test_bad_input_exits_2_with_one_line(args, words):
    assert_bad_input(run_cli(*args), *words)


@pytest.mark.parametrize("content,words", [
    ('schema_version = 1\nsource = "x"\ndisplay_name = "x"\nparams_total_b = 1\nparams_active_b = 1\n'
     'weight_bytes_per_param = 2\nbogus = 3\nas_stated_kv_bytes_per_token = 1\n', ["bad.toml", "bogus", "unknown key"]),
    ('schema_version = 1\nsource = "x"\ndisplay_name = "x"\nparams_total_b = "many"\nparams_active_b = 1\n'
     'weight_bytes_per_param = 2\nas_stated_kv_bytes_per_token = 1\n', ["bad.toml", "params_total_b"]),
    ('schema_version = 1\nsource = "x"\ndisplay_name = "x"\nparams_total_b = 1\nparams_active_b = 1\n'
     'weight_bytes_per_param = 2\n[[layer_groups]]\nkind = "full"\nlayers = -3\nkv_heads = 1\nhead_dim = 8\n',
     ["bad.toml", "layer_groups.0.layers", "greater than 0"]),
    ('schema_version = 1\nsource = "x"\ndisplay_name = "x"\nparams_total_b = nan\nparams_active_b = 1\n'
     'weight_bytes_per_param = 2\nas_stated_kv_bytes_per_token = 1\n', ["bad.toml", "params_total_b"]),
    ('schema_version = 1\nsource = [unclosed\n', ["bad.toml", "malformed TOML"]),
])
def test_bad_model_files(tmp_path, content, words):
    f = tmp_path / "bad.toml"
    f.write_text(content)
    assert_bad_input(run_cli("kv", str(f)), *words)
    assert_bad_input(run_cli("presets", "validate", str(f), "--kind", "models"), *words)


def test_presets_list_show_validate_schema(tmp_path):
    lst = run_cli("presets", "list", "--format", "json").json()
    names = {(r["kind"], r["name"]) for r in lst["results"]}
    assert ("models", "deepseek-v4-flash") in names and ("links", "pcie-gen5-x16") in names
    show = run_cli("presets", "show", "deepseek-v4-flash")
    assert show.code == 0 and "584" in show.out
    shown = run_cli("presets", "show", "h100-sxm", "--format", "json").json()
    assert shown["kind"] == "hardware" and shown["preset"]["hbm_gb"] == 80
    schema = json.loads(run_cli("presets", "schema", "models").out)
    assert "layer_groups" in schema["properties"]
    from kvcalc.model.catalog import presets_root

    ok = run_cli("presets", "validate", str(presets_root() / "models" / "deepseek-v4-pro.toml"))
    assert ok.code == 0 and "ok (models)" in ok.out
    assert_bad_input(run_cli("presets", "show", "deepseek-v5"), "deepseek")


@pytest.mark.parametrize("cmd", [["kv"], ["capacity"], ["presets", "list"], ["presets", "show"],
                                 ["presets", "validate"], ["presets", "schema"]])
def test_every_command_has_help_with_an_example(cmd):
    r = run_cli(*cmd, "--help")
    assert r.code == 0 and "Example" in r.out, r.out


def test_every_shipped_preset_validates():
    from kvcalc.model import catalog
    for kind in catalog.KINDS:
        for name in catalog.names(kind):
            assert catalog.load(kind, name) is not None
    hw_links = {catalog.load_hardware(n).host_link for n in catalog.names("hardware")}
    assert hw_links <= set(catalog.names("links"))


@pytest.mark.parametrize("args,words", [
    (["capacity", "--gpus", "100000000"], ["--gpus", "absurdly large"]),
    (["compare", "--gpus", "100000000"], ["--gpus", "absurdly large"]),
    (["capacity", "--block-tokens", "1000000000"], ["--block-tokens", "absurdly large"]),
    (["compare", "--requests", "10000000000000", "--context", "4k"], ["--requests", "absurdly large"]),
    (["kv", "-c", "2000000000000"], ["--context", "absurdly large"]),
])
def test_absurd_values_exit_2(args, words):
    assert_bad_input(run_cli(*args), *words)


HEAD = ('schema_version = 1\nsource = "test"\ndisplay_name = "mine"\nparams_total_b = 10\nparams_active_b = 1\n'
        'weight_bytes_per_param = 1\n')


def test_own_mla_file(tmp_path):
    f = tmp_path / "mla.toml"
    f.write_text(HEAD + 'mla_layout = "fp8-flashmla"\n[[layer_groups]]\nkind = "mla"\nlayers = 10\n'
                 'kv_lora_rank = 256\nrope_head_dim = 32\nindexer = { head_dim = 64, top_k = 100 }\n')
    row = run_cli("kv", str(f), "-c", "1000", "--format", "json").json()["results"][0]
    # per layer: 256 fp8 + 256/128 x 4 B scales + 32 x 2 B rope = 328 B; indexer fp8 64 + 4 = 68 B
    assert row["kv_bytes_per_request"] == 10 * 1000 * (328 + 68)
    # decode reads top-100 entries + every indexer key: 10 x (100 x 328 + 1,000 x 68)
    assert row["kv_read_bytes_per_step"] == 10 * (100 * 328 + 1000 * 68)


def test_own_compressed_file(tmp_path):
    f = tmp_path / "v4like.toml"
    f.write_text(HEAD + 'indexer_dtype = "fp4"\n[[layer_groups]]\nkind = "compressed"\nname = "c"\nlayers = 3\n'
                 'window_tokens = 64\nratio = 8\nentry_bytes = 100\nindexer = { head_dim = 128, top_k = 10 }\n'
                 'state_bytes_per_layer = 1000\n')
    row = run_cli("kv", str(f), "-c", "1000", "--format", "json").json()["results"][0]
    # 3 x [min(1,000, 64) x 100 + floor(1,000 / 8) = 125 x (100 + 68)] + 3 x 1,000 state = 3 x 27,400 + 3,000
    assert row["kv_bytes_per_request"] == 3 * (64 * 100 + 125 * 168) + 3000
    assert row["kv_fixed_bytes_per_request"] == 3000


@pytest.mark.parametrize("width", [60, 100, 250])
def test_top_level_help_lists_commands_without_building_them(width, monkeypatch):
    """`kvcalc --help` and bare `kvcalc` list summaries only (app.SUMMARIES, no command module imported, no
    parameter built: ~60 ms of the help's ~190 ms); the text equals the help of the app with every command."""
    import typer

    from kvcalc.cli import app as cli_app

    def help_of(app) -> str:
        cmd = typer.main.get_command(app)
        return cmd.get_help(cmd.context_class(cmd, info_name="kvcalc", terminal_width=width,
                                              max_content_width=width))

    full = help_of(cli_app.build_app())
    assert help_of(cli_app.build_app(listing=True)) == full
    assert all(f"\n  {name} " in full for name in cli_app.COMMANDS)
    monkeypatch.setenv("COLUMNS", str(width))
    for args in ([], ["--help"]):
        r = run_cli(*args)
        assert r.code == 0 and all(f"\n  {name} " in r.out for name in cli_app.COMMANDS), args
