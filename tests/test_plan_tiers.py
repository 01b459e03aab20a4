"""kvcalc plan --trace --tiers (issue 23, part 2): each engine's prefix hits from a tiered LRU replay, the lower
tiers' hits skipping prefill after a load over the tier's link; a reported configuration re-run through the bench
core gives the same figures."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli

TRACE = Path(__file__).parent / "fixtures" / "traces" / "mooncake_synthetic_head400.jsonl"


def _spec_pool(tp=1, dp=1):
    from kvcalc.model import catalog
    from kvcalc.serve.bench import BenchSpec, pool_and_limits
    from kvcalc.serve.calibration import calibration_for

    m, hw = catalog.load_model("qwen3-14b"), catalog.load_hardware("h100-sxm")
    spec = BenchSpec("qwen3-14b", m, "h100-sxm", hw, None, calibration_for("h100-sxm")[0], "h100-sxm", tp=tp,
                     dp=dp, max_model_len=4096, prefix_caching=True)
    return spec, pool_and_limits(spec)[0]


def test_a_prefix_demoted_to_dram_is_handed_over_after_its_load():
    from kvcalc.serve.scheduler import Requests
    from kvcalc.trace.plan_tiers import PlanTiers, apply_tiers, per_gpu_block_bytes

    spec, pool = _spec_pool()
    # Qwen3-14B: 40 layers x 8 KV heads x 128 x (K + V) x 2 B = 163,840 B per token; a 512-token block on one GPU
    # = 83,886,080 B
    assert per_gpu_block_bytes(spec, 512) == pytest.approx(83_886_080)
    # HBM holds 2 blocks: A = [1, 2], then B = [3, 4] demotes 1 and 2 to DRAM, then C = [1, 2] finds both there
    req = Requests(np.array([0.0, 1.0, 2.0]), np.array([1024, 1024, 1024]), np.array([8, 8, 8]),
                   [[1, 2], [3, 4], [1, 2]], 512)
    tiers = PlanTiers(("hbm", "dram"), {"hbm": "1024"})
    out, lower = apply_tiers(req, spec, pool, tiers)
    assert out.handed.tolist() == [0, 0, 1024]
    # one coalesced copy over the H100's host link, PCIe Gen5 x16 (measured 55.5 GB/s, 6 us):
    # 6e-6 + 2 x 83,886,080 / 55.5e9 = 3.0289 ms
    assert out.load_s[2] == pytest.approx(6e-6 + 2 * 83_886_080 / 55.5e9, rel=1e-9)
    assert out.load_s[:2].tolist() == [0.0, 0.0]
    assert lower == 1023  # the scheduler computes the last prompt token: 1,023 of the 1,024 come from DRAM
    # without the DRAM tier the same requests find nothing
    alone, lower = apply_tiers(req, spec, pool, PlanTiers(("hbm",), {"hbm": "1024"}))
    assert alone.handed.tolist() == [0, 0, 0] and lower == 0


def test_the_handed_tokens_skip_prefill_and_the_load_delays_the_first_token():
    from kvcalc.serve.bench import simulate_spec
    from kvcalc.serve.scheduler import Requests
    from dataclasses import replace

    spec, pool = _spec_pool()
    base = Requests(np.array([0.0, 10.0]), np.array([1024, 1024]), np.array([8, 8]), [[1, 2], [1, 2]], 512)
    loaded = base.take(slice(None))
    loaded.handed, loaded.load_s = np.array([0, 1024]), np.array([0.0, 0.5])
    cold = base.take(slice(None))
    cold.handed = np.array([0, 0])
    _, r_load, *_ = simulate_spec(replace(spec, trace=loaded, num_prompts=2))
    _, r_cold, *_ = simulate_spec(replace(spec, trace=cold, num_prompts=2))
    ttft_load = r_load[0].first_s[1] - r_load[0].send_s[1]
    ttft_cold = r_cold[0].first_s[1] - r_cold[0].send_s[1]
    assert r_load[0].cached_tokens == 1023 and r_cold[0].cached_tokens == 0
    assert ttft_load >= 0.5  # waits for its load
    # the same request handed over without a load is faster than prefilling it (a one-token step vs 1,024)
    quick = base.take(slice(None))
    quick.handed, quick.load_s = np.array([0, 1024]), np.array([0.0, 0.0])
    _, r_quick, *_ = simulate_spec(replace(spec, trace=quick, num_prompts=2))
    assert r_quick[0].first_s[1] - r_quick[0].send_s[1] == pytest.approx(ttft_load - 0.5, abs=1e-9)
    assert r_quick[0].first_s[1] - r_quick[0].send_s[1] < ttft_cold


def _plan_json(*extra):
    r = run_cli("plan", "--model", "qwen3-14b", "--hardware", "h100-sxm", "--max-gpus", "2", "--trace", str(TRACE),
                "--num-prompts", "120", "--strategy", "prefix-tree", "--router", "prefix", "--ttft-p99", "120s",
                "--tpot-p99", "2s", "--top", "2", "--format", "json", *extra)
    assert r.code == 0, r.err
    return json.loads(r.out)


def test_plan_with_tiers_counts_the_lower_tiers_hits():
    plain = _plan_json("--tiers", "hbm")["results"][0]
    small = _plan_json("--tiers", "hbm", "--tier-capacity", "hbm=100k")["results"][0]
    tiered = _plan_json("--tiers", "hbm,dram,ssd", "--tier-capacity", "hbm=100k")
    row = tiered["results"][0]
    assert tiered["inputs"]["tiers"] == "hbm,dram,ssd"
    assert plain["lower_tier_hit_rate"] == 0 and small["lower_tier_hit_rate"] == 0
    assert small["hit_rate"] < plain["hit_rate"]       # a smaller HBM cache holds fewer prefixes
    assert row["lower_tier_hit_rate"] > 0 and row["hit_rate"] > small["hit_rate"]  # DRAM/SSD give them back
    assert row["hit_rate"] >= row["lower_tier_hit_rate"]


def test_a_tiered_answer_re_run_through_the_bench_core_gives_the_same_figures():
    from kvcalc.model import catalog
    from kvcalc.serve import plan_search, plan_space
    from kvcalc.serve.bench import BenchSpec, simulate_spec
    from kvcalc.trace.plan_input import plan_requests, router_split
    from kvcalc.trace.plan_tiers import PlanTiers, apply_tiers
    from functools import partial

    m = catalog.load_model("qwen3-14b")
    req, skipped = plan_requests(str(TRACE), 80, 512)
    assert skipped is None  # no bad lines: no note
    tmpl = BenchSpec("qwen3-14b", m, "", None, None, None, "", prefix_caching=True,
                     max_model_len=int((req.prompt + req.output).max()))
    tiers = partial(apply_tiers, tiers=PlanTiers(("hbm", "dram"), {"hbm": "100k"}))
    traffic = plan_space.Traffic(base=tmpl, split=router_split(req, "prefix", 512), requests=req, label="trace",
                                 router="prefix", tiers=tiers)
    fams = plan_space.families(m, plan_space.hardware_choices(["h100-sxm"]), tmpl, 2)
    plan = plan_search.search(fams, traffic, plan_space.Targets(120.0, 2.0), 2, 2)
    assert plan.rows
    for row in plan.rows:
        specs = plan.specs[plan_search.row_key(row)]
        assert all(s.trace.load_s is not None for s in specs)
        runs = [r for s in specs for r in simulate_spec(s)[1]]
        ttft = np.concatenate([r.first_s - r.send_s for r in runs])
        assert float(np.percentile(ttft, 99)) * 1e3 == pytest.approx(row["p99_ttft_ms"], rel=1e-12)
        assert row["p99_ttft_ms"] <= 120_000


@pytest.mark.parametrize("args,needle", [
    (["--tiers", "hbm,dram"], "only applies with --trace"),
    (["--trace", str(TRACE), "--tiers", "hbm,dram"], "prefix-tree"),
    (["--trace", str(TRACE), "--strategy", "prefix-tree", "--tier-capacity", "dram=1TB"], "only applies with"),
    (["--trace", str(TRACE), "--strategy", "prefix-tree", "--tiers", "dram"], "first tier must be hbm"),
    (["--trace", str(TRACE), "--strategy", "prefix-tree", "--tiers", "hbm,dram", "--tier-link", "hbm=nvlink4"],
     "hbm takes no link"),
    (["--trace", str(TRACE), "--strategy", "prefix-tree", "--tiers", "hbm,dram", "--tier-link", "dram=nosuch"],
     "--tier-link dram"),
    (["--trace", str(TRACE), "--strategy", "prefix-tree", "--tiers", "hbm,dram", "--tier-capacity", "dram=-1GB"],
     "--tier-capacity dram"),
    (["--trace", str(TRACE), "--strategy", "prefix-tree", "--tiers", "hbm,dram", "--disagg", "on"], "--disagg"),
])
def test_bad_tier_options_exit_2_with_one_line(args, needle):
    r = run_cli("plan", "--model", "qwen3-14b", "--num-prompts", "10", *args)
    assert r.code == 2, (args, r.err)
    assert needle in r.err and len(r.err.strip().splitlines()) == 1, r.err
