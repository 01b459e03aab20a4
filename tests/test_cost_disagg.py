"""cost and compare with a prefill -> decode link run disaggregated on the serving model (issue 18 items 2 and 4):
the hand-off and the dollars by hand, TTFT at least prefill + hand-off, the decode side's prefix rule, C's TTFT
never above A's, and the split's hostile inputs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import assert_bad_input, run_cli
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from kvcalc.model import catalog
from kvcalc.model.workload_schema import RequestClass, SharedSegment, WorkloadPreset
from kvcalc.serve.bench import BenchSpec, simulate_spec
from kvcalc.serve.calibration import calibration_for
from kvcalc.serve.cost import _strategy, strategy_row
from kvcalc.serve.scenario import Overrides, resolve

QWEN_BYTES_PER_TOKEN = 163_840  # Qwen3-14B: 40 layers x 8 KV heads x 128 x 2 (K, V) x 2 B, all on one TP1 GPU
NDR = (3.5e-6, 50e9)            # ib-ndr400: 3.5 us RDMA latency, 50 GB/s (400 Gb/s / 8; no measured figure)


def workload(classes, shared=()):
    return WorkloadPreset(schema_version=1, source="test", display_name="test",
                          classes=[RequestClass(count=n, context_tokens=c, output_tokens=o, name=f"c{i}")
                                   for i, (n, c, o) in enumerate(classes)],
                          shared=[SharedSegment(tokens=t, groups=g) for t, g in shared])


def inputs(w, gpus=2, split=None, link="ib-ndr400", **o):
    return resolve(None, Overrides(model="qwen3-14b", hardware="h100-sxm", gpus=gpus, inline_workload=w,
                                   pd_link=link, pd_split=split, **o))


@pytest.mark.parametrize("gpus, split, prefill_gpus, decode_gpus", [(2, None, 1, 1), (4, (1, 3), 1, 3)])
def test_one_request_by_hand(gpus, split, prefill_gpus, decode_gpus):
    # one request of 1,000 tokens + 20 out on TP1 engines: its KV is 1,000 x 163,840 = 163,840,000 B, handed over
    # ib-ndr400 in 3.5 us + 163.84e6 / 50e9 = 3.2803 ms
    inp = inputs(workload([(1, 1000, 20)]), gpus, split)
    row, _, info = _strategy(inp, "lru")
    pd = info["pd"]
    hand = NDR[0] + 1000 * QWEN_BYTES_PER_TOKEN / NDR[1]
    assert row["pd_handoff_bytes_per_request"] == 163_840_000 == row["kv_handoff_bytes"]
    assert row["pd_handoff_s_per_request"] == pytest.approx(hand, rel=1e-12) == pd.handoff_s[0]
    assert row["pd_split"] == f"{prefill_gpus}:{decode_gpus}" and row["pd_engine_tp"] == 1
    # the prefill engine's part is bench's run of the request with one output token on one H100
    alone = BenchSpec("qwen3-14b", inp.model, "h100-sxm", inp.hardware, None, calibration_for("h100-sxm")[0],
                      "h100-sxm", input_len=1000, output_len=1, num_prompts=1, max_model_len=1020)
    prefill_s = simulate_spec(alone)[1][0].first_s[0]
    assert pd.ready_s[0] == pytest.approx(prefill_s)
    # TTFT = prefill + hand-off + the decode side's front end and first step (> 0)
    assert row["ttft_mean_s"] >= prefill_s + hand
    assert 0 < row["ttft_mean_s"] - (prefill_s + hand) < 0.1
    # GPU time: both sides for the whole wall; each side pays its own GPUs (the H100 preset's $/GPU-hour)
    usd_s = inp.usd_per_gpu_hour / 3600
    assert row["gpu_seconds"] == pytest.approx(row["wall_time_s"] * gpus)
    assert row["prefill_usd"] == pytest.approx(row["wall_time_s"] * prefill_gpus * usd_s)
    assert row["decode_usd"] == pytest.approx(row["wall_time_s"] * decode_gpus * usd_s)
    assert row["usd_per_mtok_input"] == pytest.approx(row["prefill_usd"] / 1000 * 1e6)
    assert row["usd_per_mtok_output"] == pytest.approx(row["decode_usd"] / 20 * 1e6)
    assert row["usd_per_mtok_blended"] == pytest.approx((row["prefill_usd"] + row["decode_usd"]) / 1020 * 1e6)


def test_every_request_waits_for_its_prefill_and_hand_off():
    inp = inputs(workload([(30, 3000, 40), (10, 800, 60)], [(512, 1), (256, 3)]), gpus=4, split=(1, 1))
    for strategy in ("lru", "prefix-tree"):
        row, _, info = _strategy(inp, strategy)
        pd, run = info["pd"], info["run"]
        assert np.all(run.first_s - run.send_s >= (pd.ready_s - run.send_s) + pd.handoff_s)
        assert row["gpu_seconds"] == pytest.approx(row["wall_time_s"] * 4)


def _engine():
    m, hw = catalog.load_model("qwen3-14b"), catalog.load_hardware("h100-sxm")
    return BenchSpec("qwen3-14b", m, "h100-sxm", hw, None, calibration_for("h100-sxm")[0], "h100-sxm", tp=1,
                     input_len=1000, output_len=4, num_prompts=2, max_model_len=1004, prefix_caching=True)


def _pd(send, prompt=1000, warm=False, decode_cache=True, link="ib-ndr400"):
    from kvcalc.serve.plan_disagg import run_pd
    from kvcalc.serve.scheduler import Requests

    shared = tuple(("system", b) for b in range(32))           # a 512-token prefix: 32 blocks of 16
    keys = [shared + tuple((i, b) for b in range(32, prompt // 16)) for i in range(2)]
    req = Requests(np.asarray(send, dtype=float), np.full(2, prompt), np.full(2, 4), keys, 16,
                   warm_keys=frozenset(shared) if warm else None)
    return run_pd(dataclasses.replace(_engine(), trace=req), req, 1, 1, catalog.load_link(link),
                  decode_cache=decode_cache)


def test_the_decode_side_holds_what_it_was_handed_and_only_the_rest_moves():
    # request 1 is sent 5 s after request 0, whose KV (and so the shared 512-token prefix) is on the decode
    # engine by then: 512 tokens held, (1,000 - 512) x 163,840 = 79,953,920 B move, in 3.5 us + 1.599 ms
    pd = _pd([0.0, 5.0])
    assert list(pd.held_tokens) == [0, 512]
    assert list(pd.moved_bytes) == [163_840_000, 79_953_920]
    assert pd.handoff_s[1] == pytest.approx(NDR[0] + 79_953_920 / NDR[1], rel=1e-12)
    # sent together, request 1's prefill ends after request 0's (the front end admits them one by one) and its
    # prefix has arrived over NDR (3.3 ms); over 10 GbE request 0's KV takes 50 us + 163.84e6 / 1.25e9 = 131 ms
    # and is still on its way: nothing is held, everything moves
    together = _pd([0.0, 0.0])
    assert together.ready_s[1] - together.ready_s[0] > together.handoff_s[0]
    assert list(together.held_tokens) == [0, 512]
    slow = _pd([0.0, 0.0], link="eth-10g")
    assert slow.handoff_s[0] == pytest.approx(50e-6 + 163_840_000 / 1.25e9, rel=1e-12)
    assert slow.ready_s[1] < slow.ready_s[0] + slow.handoff_s[0] and list(slow.held_tokens) == [0, 0]
    # a warm prefix is held from the start
    assert list(_pd([0.0, 0.0], warm=True).held_tokens) == [512, 512]
    # a prompt that is all cached blocks still computes (and so receives) its last block: 31 of 32 held
    assert list(_pd([0.0, 0.0], prompt=512, warm=True).held_tokens) == [496, 496]
    # plan's path (no decode-side cache): every token moves
    assert list(_pd([0.0, 5.0], decode_cache=False).moved_bytes) == [163_840_000] * 2


def test_c_on_the_article_workload_moves_less_and_waits_less():
    env = run_cli("compare", "--scenario", "v4-flash-pd-ib", "--format", "json").json()
    a, c = env["results"]
    assert a["pd_split"] == c["pd_split"] == "1:1" and a["pd_engine_tp"] == 4
    assert a["pd_decode_held_tokens"] == 0 < c["pd_decode_held_tokens"] <= c["reused_tokens"]
    assert c["kv_handoff_bytes"] < a["kv_handoff_bytes"]
    assert c["ttft_mean_s"] < a["ttft_mean_s"] and c["usd_per_mtok_blended"] < a["usd_per_mtok_blended"]
    assert env["inputs"]["pd_split"].startswith("1:1")
    assert any("disaggregated" in n for n in env["notes"])
    assert env["tables"]["disaggregation"][1]["pd_handoff_max_s"] > 0


@settings(max_examples=12, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 10), st.integers(100, 3000), st.integers(1, 30)), min_size=1, max_size=3),
       st.lists(st.tuples(st.integers(16, 600), st.integers(1, 3)), max_size=2), st.sampled_from([(1, 1), (1, 3)]))
def test_c_never_has_a_higher_mean_ttft_than_a(classes, shared, split):
    total = sum(n for n, _, _ in classes)
    shared = [(t, min(g, total)) for t, g in shared]
    assume(sum(t for t, _ in shared) < min(c for _, c, _ in classes))
    inp = inputs(workload(classes, shared), gpus=4, split=split)
    a, c = strategy_row(inp, "lru")[0], strategy_row(inp, "prefix-tree")[0]
    assert "pd_split" in a and "pd_split" in c
    # within 0.1%: see the next test for the one way C can come out a hair later (hypothesis found 0.011%)
    assert c["ttft_mean_s"] <= a["ttft_mean_s"] * (1 + 1e-3)
    assert c["kv_handoff_bytes"] <= a["kv_handoff_bytes"]


def test_how_c_can_be_a_hair_later_disaggregated():
    # Found by hypothesis: 15 short requests sharing one 16-token block in 3 groups, one output token each, on a
    # TP1 prefill engine and three decode engines. C's prefill skips 64 cached tokens, and the scheduler fills the
    # freed budget with more of the last request's prompt: the shared prefill step grows by 0.1 ms for 13
    # requests, the last one is ready 2.2 ms sooner. Colocated, its first token is that prefill's end, and C's
    # mean TTFT is lower; disaggregated, its decode engine is mid-step when its KV lands, so its first token comes
    # in the same step as A's and the gain is lost: C's mean TTFT is 0.011% above A's, its mean prefill-ready
    # time still below. A bound, not a bug: the decode steps quantise what prefill saves.
    # With the H100 calibration refitted on vLLM's MXFP4 weight layout (per-step cost 31 us, HBM 87%, 106 us per
    # sequence) the same case lands the other side of the hair: the first step ends as in A (request 0 ready at
    # the same time). C's second prefill step holds the same 8,192 tokens and 14 sequences as A's, but with the
    # 64 cached tokens skipped its tokens sit further into the last request's prompt and attend to longer
    # contexts: it ends 75.8 us later, and its last step, 4 tokens instead of A's 68, takes the same time (the
    # step's fixed costs dominate). So the 14 requests are ready later and C's mean TTFT is 0.0064% above A's:
    # still within the 0.1% bound above.
    inp = inputs(workload([(8, 512, 1), (7, 668, 1)], [(16, 3)]), gpus=4, split=(1, 3))
    a, _, ia = _strategy(inp, "lru")
    c, _, ic = _strategy(inp, "prefix-tree", None, ia)
    assert ic["run"].cached_tokens == 64
    later = ic["pd"].ready_s - ia["pd"].ready_s
    assert later[0] == 0 and later[1:] == pytest.approx(np.full(14, 75.75e-6), rel=1e-3)
    assert a["ttft_mean_s"] < c["ttft_mean_s"] < a["ttft_mean_s"] * (1 + 1e-3)


@pytest.mark.parametrize("args, words", [
    (["compare", "--scenario", "v4-flash-pd-ib", "--pd-split", "1:2"], ["--pd-split 1:2", "divides --gpus"]),
    # V4 Flash's 155.9 GB on a TP2 engine: 78 GB per GPU leaves no KV pool on an H100
    (["compare", "--scenario", "v4-flash-pd-ib", "--pd-split", "1:3"], ["--pd-split 1:3", "cannot serve"]),
    (["compare", "--model", "qwen3-14b", "--gpus", "1", "--pd-link", "ib-ndr400"], ["--pd-split (default)"]),
    (["compare", "--pd-split", "1:1"], ["--pd-split", "--pd-link"]),
    (["cost", "--scenario", "v4-flash-8xh100", "--pd-split", "1:1"], ["--pd-split", "--pd-link"]),
    (["compare", "--pd-link", "eth-10g", "--pd-split", "1:1"], ["--pd-split", "serving model"]),
    (["compare", "--scenario", "v4-flash-pd-ib", "--decode-tokens-per-s", "60", "--pd-split", "1:1"],
     ["--pd-split", "stated"]),
    (["compare", "--scenario", "v4-flash-pd-ib", "--pd-split", "0:1"], ["--pd-split prefill engines", "> 0"]),
    (["compare", "--scenario", "v4-flash-pd-ib", "--pd-split", "1:" + "9" * 400], ["--pd-split"]),
    (["compare", "--scenario", "v4-flash-pd-ib", "--pd-split", "1:2000000"], ["--pd-split decode", "absurdly"]),
    (["compare", "--scenario", "v4-flash-pd-ib", "--pd-split", "\u0661:1"], ["--pd-split", "cannot read"]),
    (["compare", "--scenario", "v4-flash-pd-ib", "--pd-split", ""], ["--pd-split", "cannot read"]),
    (["compare", "--scenario", "v4-flash-pd-ib", "--pd-split", "1:1:1"], ["--pd-split", "cannot read"]),
])
def test_bad_splits_are_one_line(args, words):
    assert_bad_input(run_cli(*args), *words)


def test_plan_s_notation_and_the_scenario_s_split(tmp_path):
    r = run_cli("cost", "--model", "qwen3-14b", "--gpus", "4", "--pd-link", "nvlink4", "--pd-split", "1P:3D",
                "--requests", "8", "--context", "1k", "--output-tokens", "8", "--format", "json")
    assert r.code == 0, r.err
    assert r.json()["results"][0]["pd_split"] == "1:3" and r.json()["results"][0]["pd_decode_gpus"] == 3
    bad = tmp_path / "bad.toml"
    bad.write_text('schema_version = 1\nsource = "s"\ndisplay_name = "d"\nmodel = "qwen3-14b"\n'
                   'hardware = "h100-sxm"\nworkload = "article-100"\npd_split = "1:3"\n')
    assert_bad_input(run_cli("presets", "validate", str(bad)), "pd_split")
    bad.write_text('schema_version = 1\nsource = "s"\ndisplay_name = "d"\nmodel = "qwen3-14b"\n'
                   'hardware = "h100-sxm"\nworkload = "article-100"\npd_link = "nvlink4"\npd_split = "3"\n')
    assert_bad_input(run_cli("presets", "validate", str(bad)), "pd_split")


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["mistral-7b-v0.1", "deepseek-v4-flash", "qwen3-14b", "deepseek-v3.2"]),
       st.lists(st.tuples(st.integers(1, 200_000), st.floats(0, 1)), min_size=1, max_size=8))
def test_the_hand_off_s_shared_bytes_over_arrays_equal_the_scalar_loop(model, pairs):
    # the decode side's held prefix is subtracted for every request at once (numpy); each one alone gives the same
    from kvcalc.model import attention as att
    from kvcalc.serve.sharing import shared_bytes

    groups = att.resolve_groups(catalog.load_model(model))
    length = [n for n, _ in pairs]
    held = [int(n * f) for n, f in pairs]
    many = shared_bytes(groups, np.asarray(length), np.asarray(held))
    assert list(many) == [shared_bytes(groups, n, h) for n, h in zip(length, held)]
