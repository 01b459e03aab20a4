"""``kvcalc compare --trace`` on the serving model: a scenario other than the article's runs the trace's own
requests through bench's scheduler (A without prefix caching, C with the hash ids as prefix-cache keys)."""

from __future__ import annotations

import json

import pytest
from conftest import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

SCENARIO = ("--scenario", "v4-flash-8xh100", "--model", "qwen3-8b", "--gpus", "1")


def _trace(path, lines) -> str:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def _compare(*args: str):
    r = run_cli("compare", *SCENARIO, *args, "--format", "json")
    assert r.code == 0, r.err
    out = r.json()
    return out, out["results"][0], out["results"][1]


def test_two_requests_by_hand(tmp_path):
    # Mooncake blocks of 512 tokens. Request 1 at t = 0: 1,024 tokens, ids [1, 2]; request 2 at t = 20 s (request
    # 1 is long done): ids [1, 3], so C reads block 1 (512 tokens) from the cache and prefills 512, A all 1,024.
    # Each request runs alone: TTFT = the front end (a fixed cost + a cost per prompt token) + one prefill step.
    from kvcalc.model import catalog
    from kvcalc.serve.calibration import calibration_for
    from kvcalc.serve.step_time import step_model

    path = _trace(tmp_path / "two.jsonl", [
        {"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [1, 2]},
        {"timestamp": 20_000, "input_length": 1024, "output_length": 4, "hash_ids": [1, 3]}])
    out, a, c = _compare("--trace", path)
    assert (a["cached_tokens"], c["cached_tokens"]) == (0, 512) and c["reused_tokens"] == 512
    assert any("at their trace times" in n for n in out["notes"])
    hw = catalog.load_hardware("h100-sxm")
    cal = calibration_for("h100-sxm")[0]
    sm = step_model(catalog.load_model("qwen3-8b"), hw, None, cal, 1, "vllm")
    front_s = cal.frontend_us_per_request * 1e-6 + cal.frontend_ns_per_input_token * 1e-9 * 1024

    def prefill_s(start: int, tokens: int) -> float:  # one step: a chunk of `tokens` after `start`, sampling once
        return float(sm.step_s(float(tokens), 1.0, 1.0, sm.prefill_attention_flops(start, tokens),
                               float(sm.kv_read_bytes(start + tokens))))

    assert a["ttft_mean_s"] == pytest.approx(front_s + prefill_s(0, 1024), rel=1e-9)
    assert c["ttft_mean_s"] == pytest.approx(front_s + (prefill_s(0, 1024) + prefill_s(512, 512)) / 2, rel=1e-9)
    assert c["ttft_mean_s"] < a["ttft_mean_s"]
    # the run spans the trace: request 2 is sent at 20 s
    assert a["wall_time_s"] > 20 and c["wall_time_s"] > 20


def test_a_finite_capacity_keeps_the_stated_path_and_says_why(tmp_path):
    path = _trace(tmp_path / "t.jsonl", [{"timestamp": 0, "input_length": 600, "output_length": 2,
                                          "hash_ids": [1, 2]}])
    out, a, _ = _compare("--trace", path, "--capacity", "1k")
    assert "cached_tokens" not in a and any("never evicts" in n and "not simulated" in n for n in out["notes"])


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3000), st.integers(1, 3000), st.integers(1, 30), st.integers(0, 2)),
                min_size=1, max_size=12))
def test_c_never_has_a_higher_mean_ttft_than_a(tmp_path_factory, reqs):
    # each request: (gap to the previous [ms], input tokens, output tokens, prefix group); blocks of 512 tokens,
    # block b of group g has id g x 100 + b, so requests of one group share their leading blocks
    t, lines = 0, []
    for gap, n, out, g in reqs:
        t += gap
        lines.append({"timestamp": t, "input_length": n, "output_length": out,
                      "hash_ids": [g * 100 + b for b in range(-(-n // 512))]})
    path = _trace(tmp_path_factory.mktemp("t") / "t.jsonl", lines)
    _, a, c = _compare("--trace", path)
    assert c["ttft_mean_s"] <= a["ttft_mean_s"] * (1 + 1e-12)
    assert c["prefill_tokens"] <= a["prefill_tokens"]


def test_a_trace_too_big_to_simulate_keeps_the_stated_path(tmp_path, monkeypatch):
    from kvcalc.serve import served

    monkeypatch.setattr(served, "MAX_SIMULATED_REQUESTS", 2)  # the real limit is 100,000 requests
    path = _trace(tmp_path / "t.jsonl", [{"timestamp": i, "input_length": 600, "output_length": 2,
                                          "hash_ids": [1, 2]} for i in range(3)])
    out, a, _ = _compare("--trace", path)
    assert "cached_tokens" not in a
    assert any("more than 2 requests, more than the serving model simulates" in n for n in out["notes"])
