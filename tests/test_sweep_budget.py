"""Issue 21 items 2 and 3: sweeps are bounded by what they cost, and every sweep axis has its single option's bound.

A grid is priced before it starts (points x the target's bytes and seconds per point, plus what its inputs add:
a trace's passes) and refused, naming the axis or the grid and the option that raises the budget, before any
point is made. Each case is one the issue's hostile run found (out of memory, a hang, an overflow, null dollars)."""

from __future__ import annotations

import tracemalloc

import pytest
from conftest import assert_bad_input, run_cli

from kvcalc.out import units
from kvcalc.out.sweep_spec import DEFAULT_MAX_BYTES, DEFAULT_MAX_SECONDS, Budget
from kvcalc.serve import sweep as sw


@pytest.fixture
def no_evaluation(monkeypatch):
    """Any grid point evaluated fails the test: refusals must come first (and allocate nothing: see
    test_refusing_a_billion_points_allocates_nothing)."""
    def never(*a, **k):
        raise AssertionError("a point was evaluated before the budget refused the grid")

    monkeypatch.setattr(sw, "sweep_rows", never)
    monkeypatch.setattr(sw, "row_chunks", never)  # the streamed formats' points


@pytest.mark.parametrize("args,words", [
    # out of memory under the default --max-points: 10^7 points x 3,000 B = 30 GB
    (["kv", "--vary", "context=1..10000000:step1"], ["--vary context", "10,000,000 points", "30 GB", "--max-memory"]),
    # hung (10^6 points of a looped target)
    (["cost", "--vary", "gpus=1..1000000:step1"], ["--vary gpus", "1,000,000 points", "--max-memory"]),
    (["compare", "--vary", "gpus=1..1000000:step1"], ["--vary gpus", "--max-memory"]),
    (["capacity", "--vary", "gpus=1..1000000:step1"], ["--vary gpus", "--max-memory"]),
    # 10^9 lin points allocated 7-23 GB with --max-points 10^9
    (["kv", "--vary", "context=1..1m:lin1000000000", "--max-points", "1000000000"], ["--vary context", "--max-memory"]),
    # a time budget: 5,000 cost points x 2.5 ms = 12.5 s > 10 s (memory: 40 MB, fine)
    (["cost", "--vary", "gpus=1..5000"], ["--vary gpus", "12.5 s", "10 s", "--max-seconds"]),
    (["capacity", "--vary", "gpus=1..1000", "--vary", "context=1..1000"],
     ["the grid of 1,000 gpus x 1,000 context", "--max-memory"]),
])
def test_oversize_grids_refused_before_any_point(no_evaluation, args, words):
    assert_bad_input(run_cli("sweep", *args), *words)


def test_trace_capacity_grid_refused(tmp_path, no_evaluation):
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [0]}\n')
    assert_bad_input(run_cli("sweep", "trace", "--set", f"file={f}", "--vary", "capacity=1..1000000:step1"),
                     "--vary capacity", "--max-memory")


def test_refusing_a_billion_points_allocates_nothing():
    tracemalloc.start()
    try:
        r = run_cli("sweep", "kv", "--vary", "context=1..1m:lin1000000000", "--max-points", "1000000000")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert r.code == 2
    assert peak < 50 * 2**20, peak   # the 10^9 float64 points alone would be 7.45 GiB


def test_step_too_small_to_count():
    # (1e4 - 1) / 1e-300 is finite but no grid; 1..1e308 would be inf: either way exit 2 naming the axis
    assert_bad_input(run_cli("sweep", "cost", "--vary", "price-per-gpu-hour=1..10000:step1e-300"),
                     "--vary price-per-gpu-hour", "--max-points")
    assert_bad_input(run_cli("sweep", "kv", "--vary", "kv-group-size=1..1000:step1e-300"), "--vary kv-group-size")


def test_budget_options_raise_and_lower_the_limit():
    base = ("sweep", "kv", "--vary", "context=1..2000", "--format", "csv")
    assert run_cli(*base).code == 0
    # CSV is streamed: 2,000 points (under one chunk) x 1,200 B + 2,000 axis values x 200 B = 2.8 MB > 1 MB;
    # 2,000 x 35 us = 70 ms > 50 ms (the budget per format: kvcalc.serve.sweep_cost.POINT_COST)
    assert_bad_input(run_cli(*base, "--max-memory", "1MB"), "2,000 points", "2.8 MB", "1 MB", "--max-memory")
    assert_bad_input(run_cli(*base, "--max-seconds", "0.05"), "2,000 points", "70 ms", "--max-seconds")
    assert_bad_input(run_cli(*base, "--max-memory", "1e400GB"), "--max-memory")
    assert_bad_input(run_cli(*base, "--max-memory", "1e14B"), "--max-memory", "absurdly large")
    assert_bad_input(run_cli(*base, "--max-seconds", "0"), "--max-seconds")
    assert_bad_input(run_cli(*base, "--max-seconds", "nan"), "--max-seconds")


def test_budget_arithmetic():
    b = sw.budget_for("compare")
    assert (b.max_bytes, b.max_seconds) == (DEFAULT_MAX_BYTES, DEFAULT_MAX_SECONDS) == (2e9, 10.0)
    # compare: 16,000 B and 4 ms a point -> 2,500 points fit 10 s exactly; 2,501 do not
    b.check(2_500, "x")
    with pytest.raises(units.InputError, match="--max-seconds"):
        b.check(2_501, "x")
    with pytest.raises(units.InputError, match="--max-points"):
        Budget(max_points=10).check(11, "x")


def test_trace_estimate_prices_fifo_by_file_size(tmp_path):
    import kvcalc.trace.sweep as ts

    f = tmp_path / "t.jsonl"
    f.write_bytes(b"x" * 1_000_000)
    axes = sw.parse_axes("trace", ["capacity=1000,2000,3000,4000", "policy=lru,fifo"])
    per_point, fixed = ts.replay_cost(axes, {"file": str(f)})
    # half the points FIFO: 1e6 B x (0.5 x 1.5e-7 + 0.5 x 3e-8) = 0.09 s a point; 2 set-ups (policies) x 1e6 x 5e-7
    assert per_point == pytest.approx(1e6 * (0.5 * 1.5e-7 + 0.5 * 3e-8))
    assert fixed == pytest.approx(2 * 1e6 * 5e-7)
    # 8 points x (0.09 + 150e-6) + 1 s = 1.7212 s: refused under a 1 s budget, naming the grid
    r = run_cli("sweep", "trace", "--set", f"file={f}", "--vary", "capacity=1000,2000,3000,4000",
                "--vary", "policy=lru,fifo", "--max-seconds", "1")
    assert_bad_input(r, "the grid of 4 capacity x 2 policy", "1.721 s", "--max-seconds")


# ---------------------------------------------------------------- item 3: one bound per option

SHARED = [(target, name) for target, axes in sw.AXES.items() for name, d in axes.items() if d.bound in
          units.OPTION_BOUNDS]


def test_every_bounded_axis_is_the_option_of_its_name():
    assert len(SHARED) >= 10
    for target, name in SHARED:
        assert sw.AXES[target][name].bound == name, (target, name)


def _outside(name):
    lo, hi, zero = units.OPTION_BOUNDS[name]
    values = [hi * 10]
    if lo is not None:
        values.append(lo / 2)
    if not zero:
        values.append(0)
    return values


@pytest.mark.parametrize("target,name", SHARED, ids=[f"{t}-{n}" for t, n in SHARED])
def test_sweep_axis_refuses_what_the_option_refuses(target, name):
    for v in _outside(name):
        text = f"{v:g}" if isinstance(v, float) and v != int(v) else str(int(v))
        if sw.AXES[target][name].kind == "fraction" and v > 1:
            text = str(v)
        r = run_cli("sweep", target, "--vary", f"{name}={text}")
        assert_bad_input(r, f"--vary {name}")


@pytest.mark.parametrize("single,sweep", [
    (["cost", "--mfu-prefill", "5e-324"], ["cost", "--vary", "mfu-prefill=5e-324"]),
    (["cost", "--decode-tokens-per-s", "1e308"], ["cost", "--vary", "decode-tokens-per-s=1e308"]),
    (["compare", "--price-per-gpu-hour", "1e308"], ["compare", "--vary", "price-per-gpu-hour=1e308"]),
    (["cost", "--requests", "1", "--context", "4k", "--output-tokens", str(2**41)],
     ["cost", "--set", "requests=1", "--set", "context=4k", "--vary", f"output-tokens={2**41}"]),
])
def test_single_command_and_sweep_agree(single, sweep):
    a, b = run_cli(*single), run_cli("sweep", *sweep)
    assert a.code == b.code == 2, (a.err, b.err)
    # the same bound in both lines: "absurdly small (minimum 0.001)" / "absurdly large (limit 1e+07)"
    assert a.err.split(": ", 2)[-1].split(" is ")[-1] == b.err.split(": ", 2)[-1].split(" is ")[-1]


def test_solve_with_a_tiny_total_memory_is_refused():
    r = run_cli("capacity", "--model", "llama-3-8b", "--engine", "vllm", "--solve", "gpu-memory-utilization",
                "--total-memory", "5e-324B")
    assert_bad_input(r, "--total-memory", "absurdly small")


def test_tier_capacity_past_the_token_bound(tmp_path):
    # 1e20 TB of 131,072-B blocks (Llama-3-8B, 16 tokens) is ~1.2e31 tokens, past MAX_CAPACITY_TOKENS (2^50): it
    # reached numpy as a Python int (log10 of an object array); now exit 2 as --tier-capacity ssd=2^51 tokens is
    f = tmp_path / "t.jsonl"
    f.write_text('{"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [0]}\n')
    base = ("trace", str(f), "--block-tokens", "16", "--tiers", "hbm,dram,ssd", "--model", "llama-3-8b")
    assert_bad_input(run_cli(*base, "--tier-capacity", "ssd=1e20TB", "--tier-curve", "ssd"),
                     "--tier-capacity ssd", "absurdly large", f"{units.MAX_CAPACITY_TOKENS:,} tokens")
    assert_bad_input(run_cli(*base, "--tier-capacity", f"ssd={2**51}"), "--tier-capacity ssd", "absurdly large")
    assert run_cli(*base, "--tier-capacity", "ssd=8TB", "--tier-curve", "ssd", "--format", "json").code == 0


# ---------------------------------------------------------------- the estimate per format, chart, check, workload


def test_streamed_formats_are_priced_by_a_chunk_not_the_grid(no_evaluation):
    from kvcalc.serve.sweep_cost import Output, check_cost

    wide = Budget(max_seconds=1e5)
    axes = sw.parse_axes("kv", ["context=1..1000000:step1"], limits=wide, output=Output("csv", streamed=True))
    # held as a table: 10^6 x 3,000 B = 3 GB > 2 GB
    with pytest.raises(units.InputError, match="3 GB.*--max-memory"):
        check_cost("kv", axes, {}, wide, Output("table"))
    # CSV held for a --plot: 10^6 x (1,200 B a row + 1,000 B a point drawn) = 2.2 GB
    with pytest.raises(units.InputError, match=r"2.2 GB \(2,200 B per point.*--max-memory"):
        check_cost("kv", axes, {}, wide, Output("csv", plot=".png"))
    # streamed: 65,536 x 1,200 B + 10^6 axis values x 200 B = 278.6 MB, under 2 GB
    check_cost("kv", axes, {}, wide, Output("csv", streamed=True))
    with pytest.raises(units.InputError, match=r"278.6 MB \(65,536 points at a time x 1,200 B \+ 1,000,000 axis"):
        check_cost("kv", axes, {}, Budget(max_bytes=2e8, max_seconds=1e5), Output("csv", streamed=True))
    # JSON keeps every --check outcome: + 10^6 x 2 checks x 600 B = 1.2 GB
    # (65,536 x 3,000 + 10^6 x 200 + 1.2e9 = 1.597 GB)
    with pytest.raises(units.InputError, match="1.597 GB.*1,200 B per point kept"):
        check_cost("kv", axes, {}, Budget(max_bytes=1.5e9, max_seconds=1e5), Output("json", streamed=True, checks=2))
    # time per format: 10^6 x 35 us = 35 s as CSV, 10^6 x 100 us = 100 s as a table
    with pytest.raises(units.InputError, match="35 s"):
        check_cost("kv", axes, {}, Budget(max_seconds=30), Output("csv", streamed=True))
    check_cost("kv", axes, {}, Budget(max_seconds=36), Output("csv", streamed=True))


def test_format_decides_the_refusal(no_evaluation):
    # 100,000 points: 3.5 s as CSV (35 us) fits 5 s; 10 s as a table (100 us) and 18 s as Markdown (180 us) do not
    base = ("sweep", "kv", "--vary", "context=1..100000", "--max-seconds", "5")
    assert_bad_input(run_cli(*base), "100,000 points", "10 s", "--max-seconds")
    assert_bad_input(run_cli(*base, "--format", "markdown"), "18 s", "--max-seconds")
    import kvcalc.serve.sweep_cost as cost

    b = cost.budget_for("kv", Budget(max_seconds=5), cost.Output("csv", streamed=True))
    b.check(100_000, "x")
    assert (b.seconds_per_point, b.held_points) == (35e-6, cost.CHUNK_POINTS)


def test_plot_and_chart_are_priced(tmp_path, no_evaluation):
    # 1,000 points x (100 + 50) us + 2 s for matplotlib = 2.15 s > 2 s; without the plot 0.1 s
    r = run_cli("sweep", "kv", "--vary", "context=1..1000", "--plot", str(tmp_path / "p.png"), "--max-seconds", "2")
    assert_bad_input(r, "1,000 points", "2.15 s", "--max-seconds")
    import kvcalc.serve.sweep_cost as cost

    chart = cost.budget_for("kv", output=cost.Output("table", chart=True))
    assert chart.seconds_per_point == pytest.approx(100e-6 + 5e-6)


def test_many_prefix_levels_are_priced(tmp_path, no_evaluation):
    from kvcalc.serve.sweep_cost import workload_cost

    f = tmp_path / "levels.toml"
    f.write_text('schema_version = 1\nsource = "test"\ndisplay_name = "1,000 levels"\n'
                 '[[classes]]\nname = "a"\ncount = 1000\ncontext_tokens = 16000\noutput_tokens = 100\n'
                 + "".join(f'[[shared]]\nname = "l{i}"\ntokens = 8\ngroups = 1\n' for i in range(1000)))
    axes = sw.parse_axes("compare", ["gpus=1..200"])
    per_point, fixed = workload_cost(axes, {"workload": str(f)})
    # 998 levels beyond the article's 2 x 50 us = 49.9 ms; one group each: no group-start tests
    assert per_point == pytest.approx(998 * 50e-6) and fixed == 0
    assert workload_cost(axes, {}) == (0.0, 0.0)  # the article's own workload: within the 4 ms a point
    assert workload_cost(axes, {"requests": 10}) == (0.0, 0.0)  # an inline workload: one level
    # 200 points x (4 ms + 49.9 ms) = 10.78 s > 10 s, refused; the article's 200 points (0.8 s) are not
    assert_bad_input(run_cli("sweep", "compare", "--set", f"workload={f}", "--vary", "gpus=1..200"),
                     "200 points", "10.78 s", "--max-seconds")
