"""``kvcalc sweep``: spec parsing, every point equal to the single-point command, row order, vectorised = scalar,
bad specs exit 2 naming them, --check on every row, terminal chart snapshot, PNG/SVG/HTML files."""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_bad_input, run_cli
from hypothesis import given
from hypothesis import strategies as st

from kvcalc.model import catalog
from kvcalc.out.errors import InputError
from kvcalc.serve import sweep as sw

GOLDEN = Path(__file__).parent / "golden"
# every shipped model: each layer kind (GQA, sliding, chunked, MLA, DSA, CSA/HCA, linear, Mamba) goes through the grid
MODELS = catalog.names("models")


@pytest.fixture(autouse=True)
def fixed_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")
    monkeypatch.setenv("NO_COLOR", "1")


def axes(target, *specs, max_points=10**7):
    return sw.parse_axes(target, list(specs), max_points)


def values(target, spec):
    a = axes(target, spec)[0]
    return a.values.tolist() if a.numeric else a.values


# ------------------------------------------------------------------ specs

def test_list_and_ranges_expand_as_documented():
    assert values("kv", "context=4k,32k,128k") == [4096, 32768, 131072]
    # log3 from 1k to 1m: 1,024 x 32 = 32,768 x 32 = 1,048,576 (2^10, 2^15, 2^20)
    assert values("kv", "context=1k..1m:log3") == [1024, 32768, 1048576]
    # step4k: 4,096 tokens per step from 4k to 16k
    assert values("kv", "context=4k..16k:step4k") == [4096, 8192, 12288, 16384]
    # an integer axis without a mode steps by 1
    assert values("capacity", "gpus=1..4") == [1, 2, 3, 4]
    # lin5 over a fraction: 0.5, 0.6, ..., 0.9
    assert values("capacity", "hbm-utilization=0.5..0.9:lin5") == pytest.approx([0.5, 0.6, 0.7, 0.8, 0.9])
    assert values("capacity", "hardware=h200-sxm,h100-sxm") == ["h200-sxm", "h100-sxm"]
    # a float step never steps past the end (0.1 x 10 would be 1.0000000000000002, outside (0, 1])
    assert values("capacity", "hbm-utilization=0.1..1:step0.1")[-1] == 1.0
    # log points on an integer axis are rounded and repeats dropped: geomspace(1, 4, 5) = 1, 1.41, 2, 2.83, 4
    assert values("capacity", "gpus=1..4:log5") == [1, 2, 3, 4]


@pytest.mark.parametrize("spec,words", [
    ("context=4k..1k", ["--vary context", "empty range"]),
    ("context=1k..4k:step0", ["--vary context", "step of zero"]),
    ("context=1..1g:step1", ["--vary context", "1,073,741,824 points", "--max-points"]),
    ("context=1k..4k:cube3", ["--vary context", "range mode"]),
    ("context=1k..4k:log0", ["--vary context", ">= 1"]),
    ("model=a..b", ["--vary model", "numeric axis"]),
    ("contxt=4k", ["--vary contxt", "did you mean context"]),
    ("context=", ["--vary", "NAME=SPEC"]),
    ("context=4k,,8k", ["--vary context", "empty item"]),
    ("context=4q", ["--vary context", "4q"]),
    ("kv-dtype=fp7", ["--vary kv-dtype", "fp7"]),
    ("model=llama-3-7b", ["llama-3-70b"]),
])
def test_bad_specs_exit_2_naming_them(spec, words):
    assert_bad_input(run_cli("sweep", "kv", "--vary", spec), *words)


def test_grid_past_the_limit_needs_max_points():
    # 10,000 x 1,001 = 10,010,000 points > 10^7
    r = run_cli("sweep", "capacity", "--vary", "context=1..10000", "--vary", "gpus=1..1001")
    assert_bad_input(r, "--vary", "10,010,000 points", "--max-points")
    assert_bad_input(run_cli("sweep", "kv", "--vary", "context=1k..4k:step1k", "--max-points", "3"), "--max-points")
    r = run_cli("sweep", "kv", "--vary", "context=1k..4k:step1k", "--max-points", "4", "--format", "csv")
    assert r.code == 0 and len(r.out.splitlines()) == 5


def test_other_bad_input():
    assert_bad_input(run_cli("sweep", "blocks", "--vary", "context=4k"), "blocks", "kv, capacity")
    assert_bad_input(run_cli("sweep", "kv"), "--vary")
    assert_bad_input(run_cli("sweep", "kv", "--vary", "context=4k", "--set", "context=8k"), "--set context")
    assert_bad_input(run_cli("sweep", "kv", "--vary", "context=4k", "--vary", "context=8k"), "given twice")
    assert_bad_input(run_cli("sweep", "capacity", "--vary", "gpus=0,8"), "--vary gpus", "> 0")
    assert_bad_input(run_cli("sweep", "kv", "--vary", "context=4k", "--chart", "--format", "csv"), "--chart")
    assert_bad_input(run_cli("sweep", "kv", "--vary", "context=4k", "--plot", "x.gif"), "--plot", ".png")


def test_chart_field_errors_name_the_flag():
    base = ("sweep", "kv", "--vary", "model=llama-3-70b,deepseek-v3", "--vary", "context=4k,8k", "--chart")
    assert_bad_input(run_cli(*base, "--y", "kv_bytes_per_requst"), "--y kv_bytes_per_requst",
                     "did you mean kv_bytes_per_request")
    assert_bad_input(run_cli(*base, "--y", "model"), "--y model", "not a numeric field")
    assert_bad_input(run_cli(*base, "--x", "model"), "--x model", "not a numeric axis")
    r = run_cli("sweep", "kv", "--vary", "model=llama-3-70b,deepseek-v3", "--chart")
    assert_bad_input(r, "numeric --vary axis")


# ------------------------------------------------------------------ every point = the single-point command

def test_capacity_by_hand():
    # Llama-3-70B at 4,096 tokens on 8 x H100 (79.19 GiB = 85,029,615,042.56 B as CUDA reports it, 90% usable):
    # budget per GPU = 76,526,653,538.3 - 70,553,706,496 x 2 / 8 = 58,888,226,914.3 B; KV per request = 80 layers
    # x 8 heads x 256 x 2 B x 4,096 = 1,342,177,280 B, 1/8 per GPU (8 KV heads over TP 8) = 167,772,160 B
    # -> floor(351.0) = 351; at 8,192 tokens floor(175.5) = 175.
    rows = sw.sweep_rows("capacity", axes("capacity", "context=4k,8k"), {"model": "llama-3-70b"})
    assert [r["max_requests"] for r in rows] == [351, 175]
    assert rows[0]["kv_bytes_per_request"] == 1_342_177_280


def _capacity_single(model, ctx, gpus, util, hw="h100-sxm"):
    from kvcalc.memory.capacity import CapacityInputs, capacity_result

    h = catalog.load_hardware(hw)
    inp = CapacityInputs(gpus=gpus, context_tokens=ctx, hbm_utilization=util)
    return capacity_result([(model, catalog.load_model(model))], hw, h, h.host_link,
                           catalog.load_link(h.host_link), inp).rows[0]


@given(models=st.lists(st.sampled_from(MODELS), min_size=1, max_size=3, unique=True),
       contexts=st.lists(st.integers(1, 2**21), min_size=1, max_size=4),
       gpus=st.lists(st.integers(1, 64), min_size=1, max_size=3),
       utils=st.lists(st.sampled_from([0.5, 0.8, 0.9, 0.95, 1.0]), min_size=1, max_size=2, unique=True),
       hw=st.sampled_from(["h100-sxm", "h200-sxm"]))
def test_capacity_sweep_points_equal_single_points(models, contexts, gpus, utils, hw):
    ax = axes("capacity", "model=" + ",".join(models), "context=" + ",".join(map(str, contexts)),
              "gpus=" + ",".join(map(str, gpus)), "hbm-utilization=" + ",".join(map(str, utils)))
    rows = sw.sweep_rows("capacity", ax, {"hardware": hw})
    it = iter(rows)
    for m in models:
        for c in contexts:
            for g in gpus:
                for u in utils:
                    r = next(it)
                    assert (r["model"], r["context"], r["gpus"], r["hbm_utilization"]) == (m, c, g, u)
                    single = _capacity_single(m, c, g, u, hw)
                    assert {k: r[k] for k in single} == single


@given(models=st.lists(st.sampled_from(MODELS), min_size=1, max_size=3, unique=True),
       contexts=st.lists(st.integers(1, 2**22), min_size=1, max_size=5),
       dtype=st.sampled_from([None, "fp8", "bf16"]))
def test_kv_sweep_points_equal_single_points(models, contexts, dtype):
    from kvcalc.model.attention import KvOptions
    from kvcalc.model.kv import kv_result

    fixed = {"kv-dtype": dtype} if dtype else {}
    rows = sw.sweep_rows("kv", axes("kv", "model=" + ",".join(models), "context=" + ",".join(map(str, contexts))),
                         fixed)
    single = kv_result([(m, catalog.load_model(m)) for m in models], contexts, KvOptions(kv_dtype=dtype)).rows
    assert len(rows) == len(single)
    for r, s in zip(rows, single):
        assert {k: r[k] for k in s} == s


@given(shared=st.lists(st.sampled_from([0, 512, 1000, 2048, 4096]), min_size=1, max_size=3),
       gpus=st.lists(st.sampled_from([4, 8, 16]), min_size=1, max_size=2, unique=True))
def test_compare_sweep_points_equal_single_points(shared, gpus):
    from kvcalc.serve.cost import compare_result
    from kvcalc.serve.scenario import Overrides, resolve
    from kvcalc.serve.workload import inline_workload

    ax = axes("compare", "gpus=" + ",".join(map(str, gpus)), "shared-prefix=" + ",".join(map(str, shared)))
    rows = sw.sweep_rows("compare", ax, {"requests": 100, "context": 8192})
    it = iter(rows)
    for g in gpus:
        for s in shared:
            w = inline_workload(100, 8192, 500, [(s, 1)] if s else [])
            for single in compare_result(resolve("article", Overrides(gpus=g, inline_workload=w))).rows:
                r = next(it)
                assert (r["gpus"], r["shared_prefix"]) == (g, s)
                assert {k: r[k] for k in single} == single
    assert next(it, None) is None


@pytest.mark.parametrize("sweep_args,plain_args", [
    (["kv", "--vary", "context=32k", "--set", "model=llama-3-70b"], ["kv", "llama-3-70b", "--context", "32k"]),
    (["capacity", "--vary", "model=deepseek-v4-pro", "--set", "hardware=h200-sxm", "--set", "context=128k"],
     ["capacity", "-m", "deepseek-v4-pro", "--hardware", "h200-sxm", "--context", "128k"]),
    (["cost", "--vary", "gpus=8", "--set", "strategy=lru"], ["cost", "--strategy", "lru", "--gpus", "8"]),
    (["compare", "--vary", "scenario=v4-flash-8xh100"], ["compare", "--scenario", "v4-flash-8xh100"]),
])
def test_one_value_sweep_equals_the_plain_command(sweep_args, plain_args):
    s = run_cli("sweep", *sweep_args, "--format", "json")
    p = run_cli(*plain_args, "--format", "json")
    assert s.code == p.code == 0, (s.err, p.err)
    srows, prows = s.json()["results"], p.json()["results"]
    assert len(srows) == len(prows) >= 1
    for a, b in zip(srows, prows):
        assert {k: a[k] for k in b} == b


def test_rows_follow_the_axes_as_given():
    r = run_cli("sweep", "kv", "--vary", "context=32k,4k", "--vary", "model=llama-3-70b,deepseek-v3", "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(r.out)))
    assert [(x["context"], x["model"]) for x in rows] == [
        ("32768", "llama-3-70b"), ("32768", "deepseek-v3"), ("4096", "llama-3-70b"), ("4096", "deepseek-v3")]


def test_vectorised_kv_and_capacity_equal_a_scalar_loop():
    from kvcalc.memory.capacity import capacity_arrays
    from kvcalc.model import attention as att
    from kvcalc.model.kv import kv_arrays

    tokens = np.array([1, 127, 128, 129, 4096, 65537, 1_048_576], dtype=np.int64)
    gpus = np.array([1, 2, 3, 8, 8, 16, 64], dtype=np.int64)
    for m in MODELS:
        model = catalog.load_model(m)
        g = att.resolve_groups(model)
        vec = kv_arrays(g, tokens)
        cap = capacity_arrays(g, model.weight_bytes, 141e9, tokens, gpus, 0.9, 0.0)
        for i, t in enumerate(tokens.tolist()):
            one = kv_arrays(g, t)
            assert {k: np.asarray(v).tolist() if np.ndim(v) == 0 else v[i].item() for k, v in vec.items()} == one
            c1 = capacity_arrays(g, model.weight_bytes, 141e9, t, gpus[i].item(), 0.9, 0.0)
            assert {k: (v[i].item() if np.ndim(v) else v) for k, v in cap.items()} == c1


def test_check_applies_to_every_row():
    # Llama-3-70B: 323 requests fit at 4k, 161 at 8k (test_capacity_by_hand); >= 200 fails on the 8k row only
    r = run_cli("sweep", "capacity", "--vary", "context=4k,8k", "--set", "model=llama-3-70b",
                "--check", "max_requests >= 200", "--format", "json")
    assert r.code == 1
    assert [c["passed"] for c in r.json()["checks"]] == [True, False]


def test_every_format_has_the_varied_columns():
    args = ("sweep", "kv", "--vary", "kv-dtype=bf16,fp8", "--set", "model=llama-3-70b")
    # fp8 halves Llama-3-70B's 327,680 B/token to 163,840 B
    assert [x["kv_bytes_per_token"] for x in run_cli(*args, "--format", "json").json()["results"]] == [327680, 163840]
    assert run_cli(*args, "--format", "csv").out.splitlines()[0].startswith("kv_dtype,model,")
    assert "| kv-dtype |" in run_cli(*args, "--format", "markdown").out
    assert "kv-dtype" in run_cli(*args).out


# ------------------------------------------------------------------ charts

def test_terminal_chart_snapshot():
    from kvcalc.out.chart_text import line_chart, plan_chart, series

    ax = axes("capacity", "model=llama-3-70b,deepseek-v4-flash", "context=4k..1m:log9")
    res = sw.sweep_result("capacity", ax, {"hardware": "h200-sxm"})
    plan = plan_chart(res.main.columns, res.rows, [("model", False), ("context", True)], None, [], "max_requests")
    text = line_chart(series(res.rows, plan, "max_requests"), plan.x, plan.ys[0], width=72, height=12)
    path = GOLDEN / "sweep_chart.txt"
    if os.environ.get("KVCALC_UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text()


def test_cli_chart_follows_the_table():
    r = run_cli("sweep", "kv", "--vary", "context=1k..1m:log5", "--chart", "--y", "kv_bytes_per_request",
                "--y", "kv_bytes_per_token")
    assert r.code == 0, r.err
    # KV/request spans 19 MB..3.7 GB (log); per token 18.6 kB..3.5 kB spans less than two decades (linear)
    assert "KV/request [B] (log)" in r.out and "per token [B]\n" in r.out and "context [tokens] (log)" in r.out
    assert "  * " not in r.out  # one series per chart: no legend
    assert "\x1b[" not in r.out  # NO_COLOR, not a terminal


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    import sys

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = run_cli("sweep", "kv", "--vary", "context=4k,8k", "--plot", str(tmp_path / "c.png"))
    assert_bad_input(r, "--plot", "kvcalc[plot]")


@pytest.mark.parametrize("name,magic", [("c.png", b"\x89PNG\r\n\x1a\n"), ("c.svg", b"<svg"), ("c.html", b"<svg")])
def test_plot_writes_a_real_file(tmp_path, name, magic):
    pytest.importorskip("matplotlib")
    out = tmp_path / name
    r = run_cli("sweep", "capacity", "--vary", "model=llama-3-70b,deepseek-v4-flash", "--vary",
                "context=4k..1m:log8", "--plot", str(out), "--format", "csv")
    assert r.code == 0, r.err
    data = out.read_bytes()
    assert magic in data[:2000] and len(data) > 10_000
    if name != "c.png":
        assert b"llama-3-70b" in data and b"context" in data  # legend and axis label as text


def test_heat_map_for_two_numeric_axes(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "heat.png"
    r = run_cli("sweep", "capacity", "--vary", "gpus=1..8", "--vary", "context=4k..64k:log5",
                "--set", "model=llama-3-70b", "--plot", str(out), "--format", "csv")
    assert r.code == 0, r.err
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_parse_value_bounds():
    with pytest.raises(InputError, match="--set gpus"):
        sw.parse_fixed("capacity", ["gpus=2000000"], [])
    assert sw.parse_fixed("capacity", ["reserve=4GiB"], []) == {"reserve": 4 * 2**30}
    assert values("capacity", "reserve=0GB,0,2GB") == [0.0, 0.0, 2e9]
    with pytest.raises(InputError, match="--vary reserve"):
        axes("capacity", "reserve=4")  # bytes need a unit


# ------------------------------------------------------------------ trace curve with the node marked

def test_node_cache_tokens_by_hand():
    from kvcalc.trace.node_cache import node_cache_tokens

    h100 = catalog.load_hardware("h100-sxm")
    # V4 Flash on 8 x H100: per-GPU budget = the 79.19 GiB CUDA reports x 0.9 = 76,526,653,538.3 B
    # - 155,926,583,096 / 8 (the release's FP4-expert weights) = 57,035,830,651 B; its 512-token block is
    # 1,812,864 B with page padding (the trace's note) and the latent cache is replicated on every GPU:
    # floor(57,035,830,651 / 1,812,864) = floor(31,461.7) = 31,461 blocks x 512 = 16,108,032 tokens
    assert node_cache_tokens(catalog.load_model("deepseek-v4-flash"), h100, 8, 512) == 16_108_032
    # Llama-3-70B: 76,526,653,538.3 - 70,553,706,496 x 2 / 8 = 58,888,226,914 B per GPU; a 512-token block =
    # 512 x 327,680 = 167,772,160 B, 1/8 per GPU (8 KV heads over TP 8) = 20,971,520 B -> floor(2,808.01) = 2,808
    # blocks x 512 = 1,437,696 tokens
    assert node_cache_tokens(catalog.load_model("llama-3-70b"), h100, 8, 512) == 1_437_696
    with pytest.raises(InputError, match="no KV budget"):
        node_cache_tokens(catalog.load_model("deepseek-v3"), h100, 8, 512)  # 83.9 GB of weights per GPU > 76.5 GB


def _trace(tmp_path):
    import json

    lines = []
    for i in range(200):  # seven families of shared prefixes, 16-token blocks
        ids = [1000 * (i % 7) + k for k in range(1 + (i * 5) % 6)] + [100_000 + i]
        lines.append(json.dumps({"timestamp": i, "input_length": 16 * len(ids), "output_length": 4,
                                 "hash_ids": ids}))
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_trace_node_capacity_row(tmp_path):
    from kvcalc.trace.node_cache import node_cache_tokens

    path = _trace(tmp_path)
    r = run_cli("trace", path, "-b", "16", "--model", "deepseek-v4-flash", "--hardware", "h200-sxm", "--gpus", "4",
                "--format", "json")
    assert r.code == 0, r.err
    row = r.json()["results"][-1]
    want = node_cache_tokens(catalog.load_model("deepseek-v4-flash"), catalog.load_hardware("h200-sxm"), 4, 16)
    assert row["capacity"] == "4 x h200-sxm" and row["capacity_tokens"] == want
    # the same capacity given in tokens replays identically
    same = run_cli("trace", path, "-b", "16", "--capacity", str(want), "--format", "json").json()["results"][0]
    assert same["token_hit_rate"] == row["token_hit_rate"]


def test_trace_curve_plot(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "curve.svg"
    r = run_cli("trace", _trace(tmp_path), "-b", "16", "--curve", "--model", "llama-3-70b", "--hardware",
                "h100-sxm", "--plot", str(out), "--format", "csv")
    assert r.code == 0, r.err
    data = out.read_text()
    assert "<svg" in data and "8 x h100-sxm" in data and "token hit rate" in data and len(data) > 10_000


def test_trace_plot_errors(tmp_path):
    path = _trace(tmp_path)
    assert_bad_input(run_cli("trace", path, "--plot", str(tmp_path / "c.png")), "--plot", "--curve")
    assert_bad_input(run_cli("trace", path, "--hardware", "h100-sxm"), "--hardware", "--model")
    assert_bad_input(run_cli("trace", path, "--curve", "--model", "deepseek-v3", "--hardware", "h100-sxm"),
                     "--hardware", "no KV budget")


def _run_on_tty(*args):
    from contextlib import redirect_stderr, redirect_stdout

    from kvcalc.cli.app import main

    class Tty(io.StringIO):
        def isatty(self):
            return True

    out = Tty()
    with redirect_stdout(out), redirect_stderr(io.StringIO()):
        with pytest.raises(SystemExit) as e:
            main(list(args))
    return e.value.code, out.getvalue()


def test_terminal_chart_by_default_on_a_tty_with_one_numeric_axis():
    code, out = _run_on_tty("sweep", "capacity", "--vary", "model=llama-3-70b,deepseek-v4-flash",
                            "--vary", "context=1k..1m:log5")
    assert code == 0 and "requests" in out and "context [tokens] (log)" in out and "  o deepseek-v4-flash" in out
    # two numeric axes: no line chart unless asked for; --no-chart turns it off
    code, out = _run_on_tty("sweep", "capacity", "--vary", "gpus=4,8", "--vary", "context=1k..1m:log5")
    assert code == 0 and "(log)" not in out
    code, out = _run_on_tty("sweep", "capacity", "--vary", "context=1k..1m:log5", "--no-chart")
    assert code == 0 and "(log)" not in out


# ------------------------------------------------------------------ sweep trace

def test_trace_sweep_points_equal_single_runs(tmp_path):
    path = _trace(tmp_path)
    r = run_cli("sweep", "trace", "--set", f"file={path}", "--set", "block-tokens=16", "--vary", "policy=lru,fifo",
                "--vary", "capacity=32,160,1k", "--format", "json")
    assert r.code == 0, r.err
    rows = r.json()["results"]
    it = iter(rows)
    for policy in ("lru", "fifo"):
        for cap in (32, 160, 1000):  # capacities are decimal: 1k = 1,000 tokens
            single = run_cli("trace", path, "-b", "16", "--policy", policy, "--capacity", str(cap),
                             "--format", "json").json()["results"][0]
            row = next(it)
            assert (row["policy"], row["capacity"]) == (policy, str(cap))
            assert {k: row[k] for k in single} == single
    # the node's KV budget as the capacity, as `kvcalc trace --model M --hardware H --gpus N` adds it
    r = run_cli("sweep", "trace", "--set", f"file={path}", "--set", "block-tokens=16", "--set", "model=llama-3-70b",
                "--vary", "gpus=2,8", "--set", "hardware=h100-sxm", "--format", "json")
    for row, gpus in zip(r.json()["results"], (2, 8)):
        single = run_cli("trace", path, "-b", "16", "--model", "llama-3-70b", "--hardware", "h100-sxm", "--gpus",
                         str(gpus), "--format", "json").json()["results"][-1]
        assert {k: row[k] for k in single} == single


def test_trace_sweep_bad_input(tmp_path):
    path = _trace(tmp_path)
    assert_bad_input(run_cli("sweep", "trace", "--vary", "capacity=1k,2k"), "sweep trace", "file")
    assert_bad_input(run_cli("sweep", "trace", "--set", f"file={path}", "--vary", "policy=lru,fifo"), "capacity")
    assert_bad_input(run_cli("sweep", "trace", "--set", "file=nope.jsonl", "--vary", "capacity=1k"),
                     "--set file", "no such file")
    assert_bad_input(run_cli("sweep", "trace", "--set", f"file={path}", "--set", "hardware=h100-sxm",
                             "--vary", "capacity=1k"), "hardware", "model")


def test_chart_follows_the_table_when_a_check_fails_and_not_on_bad_input():
    # V4 Flash: 29,814,784 B at 4,096 tokens passes < 3e7; 44,209,152 B at 8,192 fails
    r = run_cli("sweep", "kv", "--vary", "context=4k,8k", "--chart", "--check", "kv_bytes_per_request < 3e7")
    assert r.code == 1 and "context [tokens]" in r.out and "44209152" in r.err
    r = run_cli("sweep", "kv", "--vary", "context=4k,8k", "--chart", "--check", "bogus")
    assert_bad_input(r, "--check")
    assert r.out == ""
