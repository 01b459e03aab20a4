"""kvcalc plan with expert parallelism (issue 23, part 1): MoE models get EP families (the experts over tp x dp
GPUs, DP attention), dense ones do not; an EP answer re-run through the bench core (and the bench CLI line the
plan prints) meets its targets; the hint carries vLLM's flags; JSON rows carry ``ep``."""

from __future__ import annotations

import json

import pytest

from conftest import run_cli


def _search(model="qwen3-30b-a3b", max_gpus=4, ttft=2.0, tpot=0.05, top=3):
    from kvcalc.model import catalog
    from kvcalc.serve import plan_search, plan_space
    from kvcalc.serve.bench import BenchSpec

    m = catalog.load_model(model)
    hws = plan_space.hardware_choices(["h100-sxm"])
    tmpl = BenchSpec(model, m, "", None, None, None, "", input_len=1000, output_len=60, num_prompts=80,
                     request_rate=6.0, max_model_len=1060)
    fams = plan_space.families(m, hws, tmpl, max_gpus)
    return plan_search.search(fams, plan_space.Traffic(base=tmpl), plan_space.Targets(ttft, tpot), max_gpus, top), fams


def test_moe_models_get_expert_parallel_families_and_dense_ones_do_not():
    from kvcalc.model import catalog
    from kvcalc.serve import plan_space
    from kvcalc.serve.bench import BenchSpec

    hws = plan_space.hardware_choices(["h100-sxm"])
    for name, has_ep in (("qwen3-30b-a3b", True), ("gpt-oss-20b", True), ("qwen3-14b", False)):
        m = catalog.load_model(name)
        fams = plan_space.families(m, hws, BenchSpec(name, m, "", None, None, None, ""), 8)
        ep = [f for f in fams if f.ep]
        assert bool(ep) == has_ep, name
        # every TP x DP of more than one GPU once with EP (one GPU has nothing to shard the experts over)
        if has_ep:
            assert {(f.tp, f.dp) for f in ep} == {(f.tp, f.dp) for f in fams if not f.ep and f.tp * f.dp > 1}
        assert all(f.spec.ep and f.ep_size == f.tp * f.dp for f in ep)


def test_an_expert_parallel_answer_re_run_through_bench_meets_its_targets():
    from kvcalc.serve.bench import simulate_spec
    from kvcalc.serve.plan_search import row_key

    plan, _ = _search()
    ep_rows = [r for r in plan.simulated if r["ep"] > 1 and r["meets"]]
    assert ep_rows, "the case should find an EP configuration that meets the targets"
    for row in ep_rows:
        spec = plan.specs[row_key(row)][0]
        assert spec.ep and spec.tp * spec.dp == row["ep"]
        again = simulate_spec(spec)[0]
        assert again["p99_ttft_ms"] == row["p99_ttft_ms"] and again["p99_tpot_ms"] == row["p99_tpot_ms"]
        assert again["p99_ttft_ms"] <= 2000 and again["p99_tpot_ms"] <= 50


def test_more_gpus_never_dearer_and_tighter_never_cheaper_with_ep_families():
    def cheapest(**kw):
        plan, _ = _search(top=1, **kw)
        return plan.rows[0]["usd_per_hour"] if plan.rows else float("inf")

    base = cheapest(max_gpus=2)
    assert cheapest(max_gpus=4) <= base
    assert cheapest(max_gpus=2, tpot=0.03) >= base


def test_cli_ep_row_hint_and_check_line():
    r = run_cli("plan", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--max-gpus", "4", "--num-prompts",
                "80", "--request-rate", "6", "--random-input-len", "1000", "--random-output-len", "60", "--top", "5",
                "--format", "json")
    assert r.code == 0, r.err
    env = json.loads(r.out)
    assert all("ep" in row for row in env["results"])
    r = run_cli("plan", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--max-gpus", "4", "--num-prompts",
                "80", "--request-rate", "6", "--random-input-len", "1000", "--random-output-len", "60", "--top", "5")
    assert r.code == 0, r.err
    text = " ".join(r.out.split())
    if any(row["ep"] > 1 for row in env["results"]):
        assert "--enable-expert-parallel" in text
    # the check line of an EP row re-runs through `kvcalc bench` with the same p99s
    for i, row in enumerate(env["results"], 1):
        if row["ep"] > 1:
            line = text.split(f"check #{i} (one replica): kvcalc ")[1].split(" note:")[0].split()
            again = run_cli(*line, "--format", "json")
            assert again.code == 0, again.err
            got = again.json()["results"][0]
            assert got["p99_ttft_ms"] == pytest.approx(row["p99_ttft_ms"], rel=1e-9)
            assert got["p99_tpot_ms"] == pytest.approx(row["p99_tpot_ms"], rel=1e-9)
            break
    else:
        pytest.fail("no EP row among the top 5")
