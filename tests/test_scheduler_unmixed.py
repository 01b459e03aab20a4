"""SGLang's default steps (Scheduling.mixed_batches=False): each step is prefill-only or decode-only, never both
(sglang server_args ``enable_mixed_chunk: bool = False``; scheduler.py ``get_next_batch_to_run`` builds a
prefill batch whenever a request can be admitted, and only when none is built does the running batch decode).
Small runs worked by hand on a step model of 10 ms + 1 ms per token, in every loop of the scheduler; and the
CLI's sglang figures on a burst."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from conftest import run_cli
from test_serving_fast import LinearSteps

from kvcalc.model import catalog
from kvcalc.serve.bench import BenchSpec, metrics, pool_and_limits, requests_of, spec_step_model
from kvcalc.serve.calibration import calibration_for
from kvcalc.serve.scheduler import Pool, Requests, Scheduling, simulate

POOL = Pool(num_blocks=1000, block_size=16)
LOOPS = ((False, False), (True, False), (True, True))   # (jump, fast): the plain loop, numpy decode runs, O(1)


def _runs(req: Requests, budget: int, mixed: bool):
    """The run of ``req`` in every loop, each checked against the plain loop's -> the plain loop's Run."""
    sch = Scheduling(budget, 16, mixed_batches=mixed)
    runs = [simulate(LinearSteps(), POOL, req, sch, jump, fast) for jump, fast in LOOPS]
    for r in runs[1:]:
        assert r.steps == runs[0].steps and r.prefill_tokens == runs[0].prefill_tokens
        assert r.first_s == pytest.approx(runs[0].first_s, rel=1e-12)
        assert r.done_s == pytest.approx(runs[0].done_s, rel=1e-12)
        assert sorted(np.repeat(r.gap_s, r.gap_n)) == pytest.approx(sorted(np.repeat(runs[0].gap_s, runs[0].gap_n)))
    return runs


def _gaps(run) -> list:
    return sorted(np.repeat(run.gap_s, run.gap_n).tolist())


def test_a_burst_prefills_everyone_before_any_decode():
    # A, B, C sent at 0: prompts 30, 20, 10 tokens, 3 output tokens each; a 32-token budget
    req = Requests(np.zeros(3), np.array([30, 20, 10]), np.array([3, 3, 3]))
    # mixed (vLLM):  step 1: A 30 + B's first 2 = 32 tokens: 0.042 s -> A's 1st token at 0.042
    #                step 2: A's decode + B's last 18 + C 10 = 29 tokens: 0.039 -> 0.081: A's 2nd; B's, C's 1st
    #                step 3: 3 decodes, 0.013 -> 0.094: A done; step 4: 2 decodes, 0.012 -> 0.106: B, C done
    mixed = _runs(req, 32, True)[0]
    assert mixed.steps == 4
    assert mixed.first_s == pytest.approx([0.042, 0.081, 0.081])
    assert mixed.done_s == pytest.approx([0.094, 0.106, 0.106])
    assert _gaps(mixed) == pytest.approx([0.012, 0.012, 0.013, 0.013, 0.013, 0.039])
    # unmixed (SGLang): step 1 as above (prefill only): 0.042 -> A's 1st token
    #                step 2: B still prefilling and C admissible: a prefill-only step, B 18 + C 10 = 28 tokens,
    #                        A waits: 0.038 -> 0.080: B's, C's 1st
    #                steps 3, 4: 3 decodes each, 0.013 -> 0.093, 0.106: everyone done at 0.106
    unmixed = _runs(req, 32, False)[0]
    assert unmixed.steps == 4
    assert unmixed.first_s == pytest.approx([0.042, 0.080, 0.080])
    assert unmixed.done_s == pytest.approx([0.106, 0.106, 0.106])
    assert _gaps(unmixed) == pytest.approx([0.013] * 5 + [0.051])   # A's 2nd token 0.093 - 0.042 after its 1st
    # A's TPOT: (0.106 - 0.042) / 2 = 32 ms unmixed vs (0.094 - 0.042) / 2 = 26 ms mixed; B's, C's TTFT 1 ms less
    tpot = [(r.done_s[0] - r.first_s[0]) / 2 for r in (unmixed, mixed)]
    assert tpot == pytest.approx([0.032, 0.026])


def test_an_arrival_stops_the_decodes_for_its_prefill():
    # A sent at 0: 10 prompt tokens, 16 out; B sent at 0.05 s: 20 prompt tokens, 2 out; a 32-token budget
    req = Requests(np.array([0.0, 0.05]), np.array([10, 20]), np.array([16, 2]))
    # unmixed: A's prefill 0.020 (1st token); A's decodes 0.011 each: 0.031, 0.042, 0.053 (4 tokens; B arrives in
    #          the third); B's prefill alone, 20 tokens: 0.030 -> 0.083 (B's 1st, A none); A + B: 0.012 -> 0.095
    #          (A's 5th, B done); A's 11 left: 0.095 + 11 x 0.011 = 0.216
    runs = _runs(req, 32, False)
    unmixed = runs[0]
    assert runs[1].jumps > 0   # scheduler.py's decode runs (A's first one stops at B's arrival)
    assert unmixed.first_s == pytest.approx([0.020, 0.083])
    assert unmixed.done_s == pytest.approx([0.216, 0.095])
    assert unmixed.steps == 1 + 3 + 1 + 1 + 11
    # mixed: the same to 0.053; then A's decode + B's 20 = 21 tokens: 0.031 -> 0.084 (A's 5th, B's 1st); A + B:
    #        0.012 -> 0.096 (A's 6th, B done); A's 10 left: 0.096 + 0.110 = 0.206
    mixed = _runs(req, 32, True)[0]
    assert mixed.first_s == pytest.approx([0.020, 0.084])
    assert mixed.done_s == pytest.approx([0.206, 0.096])
    # A's gap over B's prefill: 0.095 - 0.053 = 0.042 (two steps) unmixed, 0.031 mixed (one step with B in it)
    assert max(_gaps(unmixed)) == pytest.approx(0.042) and max(_gaps(mixed)) == pytest.approx(0.031)
    # B's TTFT 0.033 vs 0.034 s: it no longer shares its step; A's TPOT (E2EL - TTFT) / 15 rises 0.186 -> 0.196 s
    assert unmixed.first_s[1] - 0.05 < mixed.first_s[1] - 0.05
    assert unmixed.done_s[0] - unmixed.first_s[0] == pytest.approx(0.196)
    assert mixed.done_s[0] - mixed.first_s[0] == pytest.approx(0.186)


def test_a_chunked_prefill_in_progress_holds_the_decodes_until_it_ends():
    # A sent at 0: 10 prompt tokens, 4 out; B sent at 0.015 s (during A's prefill): 70 prompt tokens, 2 out;
    # a 32-token budget: B prefills in chunks of 32, 32, 6
    req = Requests(np.array([0.0, 0.015]), np.array([10, 70]), np.array([4, 2]))
    # unmixed: A 0.020 (1st); B 32: 0.042 -> 0.062; B 32: -> 0.104; B 6: 0.016 -> 0.120 (B's 1st); A + B: 0.012
    #          -> 0.132 (A's 2nd, B done); A: 0.011 -> 0.143, 0.154 (A done)
    unmixed = _runs(req, 32, False)[0]
    assert unmixed.steps == 7
    assert unmixed.first_s == pytest.approx([0.020, 0.120])
    assert unmixed.done_s == pytest.approx([0.154, 0.132])
    assert _gaps(unmixed) == pytest.approx([0.011, 0.011, 0.012, 0.112])
    # mixed: A 0.020; A's decode + B 31: 32 tokens -> 0.062 (A's 2nd); again -> 0.104 (A's 3rd); A + B's last 8:
    #        9 tokens, 0.019 -> 0.123 (A done, B's 1st); B: 0.011 -> 0.134 (B done)
    mixed = _runs(req, 32, True)[0]
    assert mixed.steps == 5
    assert mixed.first_s == pytest.approx([0.020, 0.123])
    assert mixed.done_s == pytest.approx([0.123, 0.134])


def test_a_waiting_request_the_sequence_cap_holds_back_does_not_stop_the_decodes():
    # max_num_seqs 1: B (sent at 0 with A) cannot be admitted while A runs, so A's decodes are not prefill work's
    # to hold: A 10 tokens 0.020, 2 decodes 0.011 each -> 0.042; then B 10 tokens 0.020 -> 0.062, 2 decodes -> 0.084
    req = Requests(np.zeros(2), np.array([10, 10]), np.array([3, 3]))
    for mixed in (True, False):
        runs = [simulate(LinearSteps(), POOL, req, Scheduling(32, 1, mixed_batches=mixed), j, f) for j, f in LOOPS]
        for r in runs:
            assert r.first_s == pytest.approx([0.020, 0.062]) and r.done_s == pytest.approx([0.042, 0.084])


def _spec(**kw) -> BenchSpec:
    hw = catalog.load_hardware("h100-sxm")
    return BenchSpec("qwen3-14b", catalog.load_model("qwen3-14b"), "h100-sxm", hw, catalog.load_link(hw.scaleup_link),
                     calibration_for("h100-sxm")[0], "h100-sxm", **kw)


def test_only_sglang_steps_unmixed():
    for engine in ("vllm", "sglang", "trtllm"):
        assert pool_and_limits(_spec(engine=engine))[1].mixed_batches == (engine != "sglang"), engine


def test_the_cli_on_a_burst_of_short_prompts_for_sglang():
    # 40 prompts of 100 tokens sent at once, 50 out each, Qwen3-14B on one H100
    args = ["bench", "--model", "qwen3-14b", "--engine", "sglang", "--random-input-len", "100",
            "--random-output-len", "50", "--num-prompts", "40", "--format", "json"]
    r = run_cli(*args)
    assert r.code == 0, r.err
    row = json.loads(r.out)["results"][0]
    assert row["completed"] == 40 and row["total_output_tokens"] == 2000
    # the same run with mixed steps (the scheduler before: vLLM's rule)
    s = _spec(engine="sglang", input_len=100, output_len=50, num_prompts=40)
    sm, (pool, sch) = spec_step_model(s), pool_and_limits(s)
    assert metrics([simulate(sm, pool, requests_of(s), sch)], s)["mean_tpot_ms"] == pytest.approx(row["mean_tpot_ms"])
    was = metrics([simulate(sm, pool, requests_of(s), dataclasses.replace(sch, mixed_batches=True))], s)
    # the decodes wait for every prefill step: the mean TPOT rises
    assert row["mean_tpot_ms"] > was["mean_tpot_ms"]
    # by hand: the serial front end hands the engine a request every 3.1 ms (+ 21 ns per prompt token), less than
    # any step, which reads the 14B weights (~29.5 GB at 3.35 TB/s: ~8.8 ms), so a request is waiting at the end
    # of every step until the last has arrived: no decode step runs before then, and every request then decodes
    # in the same steps; with 50 tokens each they all finish on the last step: mean E2EL = duration (all sent at 0)
    hand_off_s = s.cal.frontend_us_per_request * 1e-6 + s.cal.frontend_ns_per_input_token * 1e-9 * 100
    assert hand_off_s < sm.dense_weight_bytes / s.hw.hbm_bandwidth_bytes_per_s
    assert row["mean_e2el_ms"] == pytest.approx(row["duration"] * 1e3, rel=1e-9)
    assert was["mean_e2el_ms"] < was["duration"] * 1e3 * 0.999   # mixed, the first requests finish earlier
