"""No traceback, ever (issue 9 item 1): every hostile input seen exits 2 with one line naming the flag, file or
field; anything unexpected exits 3 with one ``internal error`` line; Ctrl-C exits 130 quietly."""

from __future__ import annotations

import dataclasses
import math
import os
import re
import subprocess
import sys
import tracemalloc
import typing

import pytest
from conftest import REPO, assert_bad_input, run_cli

HUGE_INT = "1" + "0" * 400  # beyond float range (1e400): float() of it overflows
COMMANDS = ("kv", "capacity", "cost", "compare", "blocks", "transfer", "trace", "sweep", "import")


def preset_text(kind: str, name: str, **replace: str) -> str:
    """A shipped preset's TOML with some ``key = value`` lines replaced."""
    from kvcalc.model.catalog import preset_path

    text = preset_path(kind, name).read_text()
    for key, value in replace.items():
        text, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        assert n >= 1, key
    return text


# ---------------------------------------------------------------- the entry point's last line of defence

def test_unexpected_exception_is_one_line_exit_3(monkeypatch):
    import kvcalc.model.kv

    def boom(*a, **k):
        raise ValueError("boom\nsecond line")

    monkeypatch.setattr(kvcalc.model.kv, "kv_result", boom)
    r = run_cli("kv", "llama-3-8b")
    assert r.code == 3  # EXIT_INTERNAL: never 1 (a --check failed), never a traceback
    assert r.err == "kvcalc: internal error: ValueError: boom\\nsecond line; please report\n"
    assert r.out == ""


def test_keyboard_interrupt_exits_130_quietly(monkeypatch):
    import kvcalc.model.kv

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(kvcalc.model.kv, "kv_result", interrupted)
    r = run_cli("kv", "llama-3-8b")
    assert r.code == 130  # 128 + SIGINT, as shells report it
    assert "Traceback" not in r.err and "error" not in r.err


def test_exit_codes_in_one_place():
    from kvcalc.out import errors

    assert (errors.EXIT_CHECK_FAILED, errors.EXIT_BAD_INPUT, errors.EXIT_INTERNAL) == (1, 2, 3)


# ---------------------------------------------------------------- preset files

def test_model_file_not_utf8(tmp_path):
    f = tmp_path / "latin1.toml"
    f.write_bytes(b'schema_version = 1\nsource = "caf\xe9"\n')  # 0xE9 is Latin-1 e-acute, invalid UTF-8
    assert_bad_input(run_cli("kv", str(f)), "latin1.toml", "not UTF-8", "byte 32")
    assert_bad_input(run_cli("presets", "validate", str(f)), "latin1.toml", "not UTF-8")


@pytest.mark.parametrize("nest", ["[" * 5000 + "]" * 5000, "{a = " * 5000 + "1" + "}" * 5000])
def test_toml_nested_5000_deep(tmp_path, nest):
    f = tmp_path / "deep.toml"
    f.write_text(f"x = {nest}\n")
    assert_bad_input(run_cli("kv", str(f)), "deep.toml", "nested too deeply")


def test_preset_name_300_characters():
    r = run_cli("kv", "a" * 300)  # the OS refuses the file name ("File name too long")
    assert_bad_input(r, "unknown model preset", "(300 characters)")
    assert "a" * 81 not in r.err  # the name is cut to 80 characters, not echoed in full


def test_home_of_unknown_user():
    assert_bad_input(run_cli("kv", "~nosuchuser/m.toml"), "~nosuchuser", "no such user")


def test_directory_given_as_a_file(tmp_path):
    d = tmp_path / "dir.toml"
    d.mkdir()
    assert_bad_input(run_cli("kv", str(d)), "dir.toml", "is a directory")
    assert_bad_input(run_cli("capacity", "--hardware", str(d)), "dir.toml", "is a directory")
    assert_bad_input(run_cli("presets", "validate", str(d)), "dir.toml", "is a directory")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_given_as_a_file_does_not_block(tmp_path):
    fifo = tmp_path / "m.toml"
    os.mkfifo(fifo)
    # a subprocess, so that a regression blocks only it (opening a FIFO for reading waits for a writer)
    p = subprocess.run([sys.executable, "-m", "kvcalc", "kv", str(fifo)], capture_output=True, text=True,
                       timeout=60, cwd=REPO)
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert "m.toml" in p.stderr and "not a regular file" in p.stderr


def test_huge_preset_refused_in_bounded_memory(tmp_path):
    from kvcalc.model.catalog import MAX_PRESET_BYTES, read_toml
    from kvcalc.out.errors import InputError

    f = tmp_path / "huge.toml"
    line = b"unknown_key_0000001 = 1\n"  # 24 B a line: 2,184,534 lines ("millions of unknown keys")
    f.write_bytes(line * (50 * 2**20 // len(line)))  # 24 x 2,184,533 lines = 52,428,792 B (~50 MB)
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"huge.toml: 52,428,792 bytes is too large .*1,048,576 B = 1 MiB"):
            read_toml(f)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MAX_PRESET_BYTES  # refused from its size: never read, let alone parsed
    assert_bad_input(run_cli("kv", str(f)), "huge.toml", "too large", "1 MiB")


def test_preset_at_the_size_limit_is_read(tmp_path):
    from kvcalc.model.catalog import MAX_PRESET_BYTES

    text = preset_text("models", "llama-3-8b")
    f = tmp_path / "padded.toml"
    f.write_text(text + "#" * (MAX_PRESET_BYTES - len(text.encode()) - 1) + "\n")  # exactly 1 MiB: allowed
    assert f.stat().st_size == MAX_PRESET_BYTES
    assert run_cli("kv", str(f), "-c", "4k", "-f", "json").code == 0
    g = tmp_path / "padded-more.toml"  # another name: loaded presets are cached by path
    g.write_text(text + "#" * (MAX_PRESET_BYTES - len(text.encode())) + "\n")  # one byte more: refused
    assert_bad_input(run_cli("kv", str(g)), "padded-more.toml", "1,048,577 bytes is too large")


# ---------------------------------------------------------------- integers beyond float range, bounds of counts

def _numeric_options():
    """(command, flag, kind) for every int or float option of every command."""
    import typer

    from kvcalc.cli.app import build_app

    for name in COMMANDS:
        cmd = typer.main.get_command(build_app(name)).commands[name]
        for p in cmd.params:  # typer vendors click: the types are matched by name
            kind = type(p.type).__name__
            if p.param_type_name == "option" and kind in ("IntParamType", "FloatParamType"):
                yield name, max(p.opts, key=len), kind


NUMERIC_OPTIONS = list(_numeric_options())


def test_numeric_options_found():
    # a guard for the parametrised test below: the introspection sees the options it should
    assert ("capacity", "--gpus", "IntParamType") in NUMERIC_OPTIONS
    assert ("cost", "--output-tokens", "IntParamType") in NUMERIC_OPTIONS
    assert ("trace", "--curve-points", "IntParamType") in NUMERIC_OPTIONS
    assert ("compare", "--price-per-gpu-hour", "FloatParamType") in NUMERIC_OPTIONS
    assert len(NUMERIC_OPTIONS) >= 20


# what each command needs besides the option under test (a trace file, or the inline workload)
NEEDS = {"trace": ["{trace}"], "sweep": ["kv"]}
TRACE_ONLY = {"--capacity", "--block-tokens"}


def _args(command: str, flag: str, value: str, trace_file: str) -> list[str]:
    args = [command] + [a.format(trace=trace_file) for a in NEEDS.get(command, [])]
    if command in ("cost", "compare"):
        if flag == "--block-tokens":
            args += ["--trace", trace_file]
        elif flag in ("--requests", "--output-tokens"):
            args += ["--context", "4k"] + (["--requests", "10"] if flag == "--output-tokens" else [])
    return args + [flag, value]


@pytest.fixture
def trace_file(tmp_path):
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [1, 2]}\n')
    return str(f)


@pytest.mark.parametrize("command,flag,kind", NUMERIC_OPTIONS)
def test_every_numeric_option_refuses_400_digits(command, flag, kind, trace_file):
    r = run_cli(*_args(command, flag, HUGE_INT, trace_file))
    assert_bad_input(r, flag)
    assert "absurdly large" in r.err or "not a finite number" in r.err, r.err


@pytest.mark.parametrize("command,flag,kind", NUMERIC_OPTIONS)
def test_every_numeric_option_states_its_bound_in_help(command, flag, kind):
    from kvcalc.cli.app import build_app
    import typer

    cmd = typer.main.get_command(build_app(command)).commands[command]
    (opt,) = [p for p in cmd.params if flag in p.opts]
    assert re.search(r"at most|at least|\bto\b|\[[0-9.e-]+, 1\]", opt.help), (flag, opt.help)


@pytest.mark.parametrize("args,words", [
    (["capacity", "--gpus", HUGE_INT], ["--gpus", "a 401-digit number is absurdly large (limit 1,000,000)"]),
    (["compare", "--gpus", HUGE_INT], ["--gpus", "absurdly large"]),
    (["cost", "--requests", "10", "--context", "4k", "--output-tokens", "9" * 400],
     ["--output-tokens", "a 400-digit number is absurdly large (limit 1,099,511,627,776)"]),
    (["compare", "--requests", HUGE_INT, "--context", "4k"], ["--requests", "absurdly large"]),
    (["compare", "--requests", "10", "--context", "9" * 400], ["--context", "absurdly large"]),
    (["transfer", "--requests", HUGE_INT], ["--requests", "absurdly large"]),
    (["kv", "--context", "9" * 400], ["--context", "absurdly large"]),
    (["blocks", "--tables", HUGE_INT], ["--tables", "absurdly large (limit 1,024)"]),
    (["compare", "--shared-prefix", "9" * 400, "--requests", "10", "--context", "4k"],
     ["--shared-prefix", "absurdly large"]),
])
def test_huge_integers_in_options(args, words):
    assert_bad_input(run_cli(*args), *words)


def test_curve_points_bounded(trace_file):
    # 1e12 points was a 7 TiB allocation; the grid takes at most MAX_CURVE_POINTS = 10,000
    assert_bad_input(run_cli("trace", trace_file, "--curve-points", "1000000000000"),
                     "--curve-points", "absurdly large (limit 10,000)")
    assert run_cli("trace", trace_file, "--curve-points", "10000", "-b", "4", "-f", "json").code == 0


# ---------------------------------------------------------------- absurd but finite options

@pytest.mark.parametrize("args,words", [
    (["compare", "--decode-tokens-per-s", "1e-308"], ["--decode-tokens-per-s", "absurdly small (minimum 0.001)"]),
    (["cost", "--decode-tokens-per-s", "1e308"], ["--decode-tokens-per-s", "absurdly large"]),
    (["compare", "--mfu-prefill", "5e-324"], ["--mfu-prefill", "absurdly small (minimum 0.001)"]),
    (["transfer", "--mfu", "5e-324"], ["--mfu", "absurdly small"]),
    (["compare", "--price-per-gpu-hour", "1e308"], ["--price-per-gpu-hour", "absurdly large (limit 10000)"]),
    (["cost", "--pd-overlap-us", "1e308"], ["--pd-overlap-us", "absurdly large"]),
    (["transfer", "--overlap-us", "1e308"], ["--overlap-us", "absurdly large"]),
    (["blocks", "--entry-bytes", "1e308"], ["--entry-bytes", "absurdly large"]),
    (["compare", "--price-per-gpu-hour", "nan"], ["--price-per-gpu-hour", "not a finite number"]),
])
def test_absurd_finite_options(args, words):
    assert_bad_input(run_cli(*args), *words)


def test_bounds_are_inclusive():
    # the bounds themselves are accepted (a bound is a limit, not an error): 0.001 MFU and tok/s, $10,000/h
    r = run_cli("compare", "--mfu-prefill", "0.001", "--decode-tokens-per-s", "0.001",
                "--price-per-gpu-hour", "10000", "-f", "json")
    assert r.code == 0, r.err
    for row in r.json()["results"]:
        assert all(v is None or not isinstance(v, float) or math.isfinite(v) for v in row.values())


# ---------------------------------------------------------------- preset values that validate but overflow later

@pytest.mark.parametrize("kind,name,field,value", [
    ("hardware", "h100-sxm", "hbm_gb", "1e308"),
    ("hardware", "h100-sxm", "fp8_dense_tflops", "1e308"),
    ("hardware", "h100-sxm", "bf16_dense_tflops", "5e-324"),
    ("hardware", "h100-sxm", "usd_per_gpu_hour", "1e308"),
    ("hardware", "h100-sxm", "hbm_bandwidth_tb_per_s", "1e308"),
    ("links", "pcie-gen5-x16", "bandwidth_gb_per_s", "5e-324"),
    ("links", "pcie-gen5-x16", "latency_us", "1e308"),
    ("models", "deepseek-v4-flash-article", "as_stated_kv_bytes_per_token", "1e308"),
    ("models", "deepseek-v4-flash-article", "as_stated_kv_bytes_per_token", "5e-324"),
    ("models", "llama-3-8b", "q_heads", HUGE_INT),
    ("models", "llama-3-8b", "layers", "1" + "0" * 30),
    ("scenarios", "article", "gpus", HUGE_INT),
    ("scenarios", "article", "mfu_prefill", "5e-324"),
    ("scenarios", "article", "peak_tflops_per_gpu", "1e308"),
    ("workloads", "article-100", "count", "1" + "0" * 30),
])
def test_preset_values_bounded_at_validation(tmp_path, kind, name, field, value):
    f = tmp_path / f"bad-{kind}.toml"
    f.write_text(preset_text(kind, name, **{field: value}))
    assert_bad_input(run_cli("presets", "validate", str(f), "--kind", kind), f.name, field)


def test_user_link_of_5e_324_gb_per_s(tmp_path):
    f = tmp_path / "slow.toml"
    f.write_text(preset_text("links", "pcie-gen5-x16", bandwidth_gb_per_s="5e-324",
                             measured_bandwidth_gb_per_s="5e-324"))
    assert_bad_input(run_cli("transfer", "--link", str(f)), "slow.toml", "bandwidth_gb_per_s")
    assert_bad_input(run_cli("compare", "--pd-link", str(f)), "slow.toml", "bandwidth_gb_per_s")


def _number_fields(cls, seen=None):
    """(class, field, bounds) of every int/float field reachable from a preset dataclass."""
    from kvcalc.model.schema import Bounds, Tagged

    seen = set() if seen is None else seen
    if cls in seen:
        return
    seen.add(cls)
    hints = typing.get_type_hints(cls, include_extras=True)
    for f in dataclasses.fields(cls):
        stack = [hints[f.name]]
        while stack:
            tp = stack.pop()
            meta = ()
            if typing.get_origin(tp) is typing.Annotated:
                tp, *meta = typing.get_args(tp)
            if tp in (int, float):
                limits = {k: v for m in meta if isinstance(m, Bounds) for k, v in m.limits.items()}
                yield cls.__name__, f.name, limits
            elif dataclasses.is_dataclass(tp):
                yield from _number_fields(tp, seen)
            elif not any(isinstance(m, Tagged) for m in meta):
                stack.extend(a for a in typing.get_args(tp) if a is not type(None))
            else:
                stack.extend(typing.get_args(tp))


def test_every_numeric_preset_field_is_bounded():
    from kvcalc.model.schema import PRESET_KINDS
    from kvcalc.model.calibration_schema import PRESET_KINDS as CALIBRATION
    from kvcalc.model.workload_schema import PRESET_KINDS as MORE

    found = [x for cls in (*PRESET_KINDS.values(), *MORE.values(), *CALIBRATION.values()) for x in _number_fields(cls)]
    assert ("HardwarePreset", "hbm_gb", {"ge": 1e-3, "le": 1e5}) in found  # the walk sees what it should
    assert any(c == "FullGroup" and f == "window_tokens" for c, f, _ in found)
    assert len(found) >= 50
    unbounded = [(c, f) for c, f, lim in found if "le" not in lim or not ({"gt", "ge"} & lim.keys())]
    assert unbounded == []


# ---------------------------------------------------------------- the renderer never prints inf/nan as a number

def test_renderer_shows_n_a_for_non_finite():
    from kvcalc.out.render import format_value
    from kvcalc.out.results import Column

    for kind in ("usd", "s", "bytes", "count", "flops", "ratio", "float", "percent", "tokens", "round"):
        for v in (math.inf, -math.inf, math.nan):
            assert format_value(Column("x", "x", kind), {"x": v}) == "n/a", (kind, v)
    # an unlimited cache is a real value and keeps its name
    assert format_value(Column("x", "x", "int", unbounded=True), {"x": math.inf}) == "inf"
    assert format_value(Column("x", "x", "int", unbounded=True), {"x": math.nan}) == "n/a"


# ---------------------------------------------------------------- a model given as a config.json (or its folder)

def test_config_json_not_utf8_deep_or_not_an_object(tmp_path):
    bad = {"latin1.json": b'{"model_type": "caf\xe9"}', "deep.json": b"[" * 100_000 + b"]" * 100_000,
           "list.json": b"[1, 2]"}
    words = {"latin1.json": "not UTF-8", "deep.json": "nested too deeply", "list.json": "a JSON object was expected"}
    for name, data in bad.items():
        f = tmp_path / name
        f.write_bytes(data)
        assert_bad_input(run_cli("kv", str(f)), name, words[name])
        assert_bad_input(run_cli("import", str(f)), name, words[name])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_config_json_fifo_does_not_block(tmp_path):
    (tmp_path / "model").mkdir()
    os.mkfifo(tmp_path / "model" / "config.json")
    p = subprocess.run([sys.executable, "-m", "kvcalc", "import", str(tmp_path / "model")], capture_output=True,
                       text=True, timeout=60, cwd=REPO)
    assert p.returncode == 2 and "not a regular file" in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_config_json_over_64_mib_refused_unread(tmp_path):
    from kvcalc.model.config_import import MAX_JSON_BYTES, read_json
    from kvcalc.out.errors import InputError

    f = tmp_path / "config.json"
    with open(f, "wb") as out:  # sparse: 64 MiB + 1 B without writing them
        out.truncate(MAX_JSON_BYTES + 1)
    with pytest.raises(InputError, match=r"67,108,865 bytes is too large for a JSON config \(limit 67,108,864 B"):
        read_json(f)


def test_long_or_unexpandable_names_as_models():
    # name_of and the config.json check stat the name: the OS refusing it is not an internal error
    assert_bad_input(run_cli("capacity", "-m", "b" * 300), "unknown model preset")
    assert_bad_input(run_cli("import", "b" * 300), "b" * 10)
    assert_bad_input(run_cli("import", "~nosuchuser/config.json"), "no such user")


@pytest.mark.parametrize("field,value,words", [
    ("num_hidden_layers", 10**30, "a 31-digit number is absurdly large (limit 65,536)"),
    ("hidden_size", 10**30, "absurdly large (limit 16,777,216)"),
    ("max_position_embeddings", 2**41, "absurdly large (limit 1,099,511,627,776)"),
    ("head_dim", 100_000, "field 'qk_head_dim': 100,000 is out of range (must be at most 65,536)"),
])
def test_config_json_values_bounded(tmp_path, field, value, words):
    import json

    data = json.loads((REPO / "tests" / "fixtures" / "configs" / "qwen3-32b" / "config.json").read_text())
    data[field] = value
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert_bad_input(run_cli("kv", str(tmp_path / "config.json")), "config.json", words)


def test_check_bounds_accepts_every_shipped_model():
    from kvcalc.model import catalog, schema

    for name in catalog.names("models"):
        schema.check_bounds(catalog.load_model(name))  # raises on the first field out of range
