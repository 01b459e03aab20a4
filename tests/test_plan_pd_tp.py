"""kvcalc plan --disagg with prefill and decode engines of different TP (issue 23, part 3): the shapes searched,
the GPUs counted, each side simulated on its own TP, and the bounds still below what the simulation gives."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli


def _search(max_gpus=8, ttft=10.0, tpot=0.06):
    from kvcalc.model import catalog
    from kvcalc.serve import plan_search, plan_space
    from kvcalc.serve.bench import BenchSpec

    m = catalog.load_model("qwen3-14b")
    tmpl = BenchSpec("qwen3-14b", m, "", None, None, None, "", input_len=4000, output_len=100, num_prompts=60,
                     request_rate=2.0, max_model_len=4100)
    traffic = plan_space.Traffic(base=tmpl)
    fams = plan_space.families(m, plan_space.hardware_choices(["h100-sxm"]), tmpl, max_gpus, "on")
    return plan_search.search(fams, traffic, plan_space.Targets(ttft, tpot), max_gpus, 4), fams, traffic


def test_the_shapes_are_every_tp_pair_within_a_node_with_no_more_prefill_gpus_than_decode():
    from kvcalc.serve.plan_disagg import pd_shapes

    shapes = pd_shapes([1, 2, 4, 8], 8)
    assert (2, 2, 4, 1) in shapes          # 2 x TP2 prefill : 1 x TP4 decode, 8 GPUs
    assert (1, 1, 1, 1) in shapes and (4, 1, 4, 1) in shapes
    assert (4, 1, 2, 1) not in shapes      # 4 prefill GPUs for 2 decode GPUs
    assert (2, 2, 4, 2) not in shapes      # 12 GPUs: more than a node
    assert all(tp * p + tq * d <= 8 and tp * p <= tq * d for tp, p, tq, d in shapes)
    # with one TP the shapes are the 1 <= P <= D pairs
    same = sorted((p, d) for tp, p, tq, d in shapes if tp == tq == 2)
    assert same == [(1, 1), (1, 2), (1, 3), (2, 2)]


def test_a_mixed_tp_replica_runs_each_side_on_its_own_tp_and_counts_every_gpu():
    from kvcalc.serve.plan_search import row_key
    from kvcalc.serve.plan_space import family_bounds

    plan, fams, traffic = _search()
    mixed = [r for r in plan.simulated if r["disagg"] and r["decode_tp"] != r["tp"]]
    assert mixed, "the search should simulate some prefill/decode pairs of different TP"
    by_key = {f.key(): f for f in fams}
    for row in mixed:
        p, d = (int(x) for x in row["disagg"].rstrip("D").split("P:"))
        assert row["gpus_per_replica"] == row["tp"] * p + row["decode_tp"] * d
        assert row["prefill_tp"] == row["tp"]
        specs = plan.specs[row_key(row)]
        assert specs[0].tp == row["tp"] and specs[0].dp == p                 # the prefill engines
        assert {s.tp for s in specs[1:]} == {row["decode_tp"]} and len(specs) == 1 + d  # each decode engine
        b = family_bounds(by_key[row_key(row)[0]], traffic)
        assert b.tpot_floor_s * 1e3 <= row["p99_tpot_ms"] and b.ttft_floor_s * 1e3 <= row["p99_ttft_ms"]


def test_the_hand_off_between_different_tps_moves_the_larger_per_gpu_share(monkeypatch):
    from dataclasses import replace

    import numpy as np

    from kvcalc.model import catalog
    from kvcalc.serve.bench import BenchSpec, pool_and_limits, requests_of
    from kvcalc.serve.calibration import calibration_for
    from kvcalc.serve.plan_disagg import simulate_pd

    m, hw = catalog.load_model("qwen3-14b"), catalog.load_hardware("h100-sxm")
    link = catalog.load_link("nvlink4")
    cal = calibration_for("h100-sxm")[0]
    one = BenchSpec("qwen3-14b", m, "h100-sxm", hw, None, cal, "h100-sxm", tp=1, input_len=1000, output_len=20,
                    num_prompts=1, max_model_len=1020)
    two = replace(one, tp=2, link=link)
    req = requests_of(one)
    from kvcalc.serve import plan_disagg

    seen = []
    real = plan_disagg.handoff_s
    monkeypatch.setattr(plan_disagg, "handoff_s", lambda spec, lk, prompt: seen.append(real(spec, lk, prompt)) or
                        seen[-1])
    # TP1 prefill -> TP2 decode, and TP2 -> TP1: either way one side's GPU holds all 163.84 MB (Qwen3-14B,
    # 1,000 tokens x 163,840 B): 2.65 us + 163.84e6 / 397e9 = 415.35 us over NVLink4
    run, *_ = simulate_pd(one, req, 1, 1, link, two)
    back, *_ = simulate_pd(two, req, 1, 1, link, one)
    by_hand = 2.65e-6 + 163.84e6 / 397e9
    assert float(seen[0][0]) == pytest.approx(by_hand, rel=1e-6) and float(seen[1][0]) == pytest.approx(by_hand,
                                                                                                     rel=1e-6)
    assert pool_and_limits(two)[0].num_blocks > pool_and_limits(one)[0].num_blocks  # the decode side's own pool
    assert np.isfinite(run.first_s).all() and np.isfinite(back.first_s).all()


def test_cli_json_keeps_the_pd_string_and_adds_the_tps():
    r = run_cli("plan", "--model", "qwen3-14b", "--hardware", "h100-sxm", "--max-gpus", "8", "--num-prompts", "40",
                "--request-rate", "2", "--random-input-len", "4000", "--random-output-len", "100", "--disagg", "on",
                "--ttft-p99", "10s", "--tpot-p99", "60ms", "--top", "6", "--format", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)["results"]
    assert rows
    for row in rows:
        assert row["disagg"].endswith("D") and "P:" in row["disagg"]
        assert row["prefill_tp"] == row["tp"] and row["decode_tp"] >= 1
    agg = run_cli("plan", "--model", "qwen3-14b", "--hardware", "h100-sxm", "--max-gpus", "2", "--num-prompts", "20",
                  "--format", "json")
    assert agg.code == 0, agg.err
    row = json.loads(agg.out)["results"][0]
    assert row["disagg"] is None and row["prefill_tp"] is None and row["decode_tp"] is None
