"""``bench --trace --dp N --router least-loaded|prefix`` routes each request at its send time from the replicas'
simulated state (serve/cluster.py, serve/scheduler_live.py; issue 22, item 4): hand-built traces where the clock
decides, the lockstep driver changing no figure of a fixed assignment, and round-robin / session / dp 1 as before."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_serving_fast import LinearSteps, drawn_limits
from test_trace_formats import MOONCAKE_HEAD

from kvcalc.model import catalog
from kvcalc.serve.bench import BenchSpec, simulate_spec
from kvcalc.serve.bench_report import replica_rows
from kvcalc.serve.calibration import calibration_for
from kvcalc.serve.cluster import simulate_cluster
from kvcalc.serve.scheduler import Pool, Requests, Scheduling, simulate
from kvcalc.trace.replicas import ReplicaEngine

POOL = Pool(num_blocks=1000, block_size=16)


def test_least_loaded_counts_requests_in_flight_at_the_arrival():
    # LinearSteps: a step takes 10 ms + 1 ms per token; two replicas, no front end
    # r0 at 0: 100 tokens, 1 out -> replica 0 (a tie: the lowest index); its prefill step [0, 0.110) ends it
    # r1 at 0: 50 tokens, 100 out -> replica 1 (replica 0 has r0 in flight); prefill [0, 0.060), then 99 decode
    #   steps of 11 ms: done at 0.060 + 1.089 = 1.149
    # r2 at 0.5: 10 tokens, 1 out: in flight [0, 1] -> replica 0; its prefill [0.5, 0.520): TTFT 20 ms
    # the clockless rule (prompt tokens routed so far: [100, 50]) sends r2 to replica 1
    req = Requests(np.array([0.0, 0.0, 0.5]), np.array([100, 50, 10]), np.array([1, 100, 1]))
    runs, chosen = simulate_cluster(LinearSteps(), POOL, req, Scheduling(8192, 16), 2, "least-loaded")
    assert chosen == [0, 1, 0]
    assert runs[0].first_s == pytest.approx([0.110, 0.520]) and runs[1].done_s == pytest.approx([1.149])
    clockless = ReplicaEngine(2, None, 16, "lru", "least-loaded")
    assert clockless.assignments([((), 100), ((), 50), ((), 10)]) == [0, 1, 1]


def test_least_loaded_ties_by_prompt_tokens_in_flight_then_index():
    # r0 at 0: 300 tokens, 200 out -> 0; r1 at 0: 100 tokens, 200 out -> 1 (0 has one in flight); both still
    # decoding at 0.1 s (r0's prefill alone takes 0.310 s): r2 at 0.1 sees one request in flight on each, 300 vs
    # 100 prompt tokens -> replica 1; r3 at 0.1: in flight [1, 2] -> replica 0
    req = Requests(np.array([0.0, 0.0, 0.1, 0.1]), np.array([300, 100, 20, 20]), np.array([200, 200, 5, 5]))
    _, chosen = simulate_cluster(LinearSteps(), POOL, req, Scheduling(8192, 16), 2, "least-loaded")
    assert chosen == [0, 1, 1, 0]


def _prefix_case(second_at: float):
    # 16-token blocks, a token budget of 32 a step (chunked prefill), prefix caching on
    # r0 at 0: blocks (1, 2, 3, 4), 64 tokens, 1 out -> replica 0; its prefill takes two steps of 32 tokens:
    #   [0, 0.042) and [0.042, 0.084); its blocks are in replica 0's cache from the end of the second
    # r1 at second_at: blocks (1, 2, 3, 4, 5), 80 tokens, 1 out
    # r2 at 1.0: blocks (1, 2, 3, 4, 5, 7), 96 tokens, 1 out: replica 0 caches 4 of its blocks, r1's replica 5
    keys = [(1, 2, 3, 4), (1, 2, 3, 4, 5), (1, 2, 3, 4, 5, 7)]
    req = Requests(np.array([0.0, second_at, 1.0]), np.array([64, 80, 96]), np.array([1, 1, 1]), keys, 16)
    return simulate_cluster(LinearSteps(), POOL, req, Scheduling(32, 16, prefix_caching=True), 2, "prefix")


def test_prefix_routing_sees_only_blocks_already_prefilled():
    # r1 at 0.01: only r0's first step [0, 0.042) started before it, r0's blocks are not prefilled: no replica
    # caches any of r1's blocks; by load, replica 0 has r0 in flight -> replica 1 (the clockless prefix router,
    # whose cache has everything routed so far, sends it to replica 0). r2 then follows its longer run, 5 blocks
    # on replica 1: 80 tokens read from the cache there
    runs, chosen = _prefix_case(0.01)
    assert chosen == [0, 1, 1]
    assert [r.cached_tokens for r in runs] == [0, 80]
    clockless = ReplicaEngine(2, None, 16, "lru", "prefix")
    assert clockless.assignments([((1, 2, 3, 4), 64), ((1, 2, 3, 4, 5), 80)]) == [0, 0]


def test_prefix_routing_counts_the_step_running_at_the_arrival():
    # r1 at 0.05: r0's second step started at 0.042, before it, so its prefill counts (it ends before r1 can be
    # admitted): replica 0 holds 4 of r1's blocks -> replica 0, which reads 64 tokens of r1 from its cache;
    # admitted at 0.084 (the first step at or after 0.05), it prefills 16 tokens in 26 ms; then r2 goes where
    # 5 of its blocks are, replica 0 again: 80 tokens cached
    runs, chosen = _prefix_case(0.05)
    assert chosen == [0, 0, 0]
    assert runs[0].cached_tokens == 64 + 80
    assert runs[0].first_s[1] == pytest.approx(0.084 + 0.026)


def test_prefix_routing_without_prefix_caching_is_least_loaded():
    # _prefix_case(0.01) without caching: no replica caches anything, so r1 at 0.01 goes by load (replica 0 has
    # r0 in flight, its prefill's second step not yet started) -> 1; r2 at 1.0: both idle, a tie -> 0
    keys = [(1, 2, 3, 4), (1, 2, 3, 4, 5), (1, 2, 3, 4, 5, 7)]
    req = Requests(np.array([0.0, 0.01, 1.0]), np.array([64, 80, 96]), np.array([1, 1, 1]), keys, 16)
    for router in ("prefix", "least-loaded"):
        runs, chosen = simulate_cluster(LinearSteps(), POOL, req, Scheduling(32, 16), 2, router)
        assert chosen == [0, 1, 0] and sum(r.cached_tokens for r in runs) == 0


# ---------------------------------------------------------------- the lockstep driver changes no figure

def _fields(run):
    return (run.steps, run.preemptions, run.cached_tokens, run.prefill_tokens, run.peak_running,
            run.prefill_time_s, run.decode_time_s, run.send_s.tolist(), run.first_s.tolist(), run.done_s.tolist(),
            run.prompt.tolist(), run.output.tolist(), run.gap_s.tolist(), run.gap_n.tolist())


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_lockstep_with_a_fixed_assignment_equals_each_replica_alone(data):
    n = data.draw(st.integers(1, 40), "n")
    dp = data.draw(st.integers(1, 4), "dp")
    rng = np.random.default_rng(data.draw(st.integers(0, 999), "seed"))
    prompt = rng.integers(1, 1200, n)
    keys = [[int(k) for k in rng.integers(0, 4, -(-int(p) // 16))] for p in prompt]
    send = np.sort(rng.choice([0.0, 0.5, 1.0], n)) if data.draw(st.booleans(), "bursts") else np.sort(
        rng.uniform(0, data.draw(st.sampled_from([0.1, 2.0, 20.0]), "span"), n))
    req = Requests(send, prompt, rng.integers(1, 80, n), keys=keys,
                   handed=rng.integers(0, 1200, n) if data.draw(st.booleans(), "handed") else None,
                   warm_keys=frozenset(range(2)) if data.draw(st.booleans(), "warm") else None,
                   load_s=rng.uniform(0, 0.05, n) if data.draw(st.booleans(), "loads") else None)
    _, sm, pool, sch = drawn_limits(data, n)
    sch = dataclasses.replace(sch, max_concurrency=data.draw(st.sampled_from([None, 1, 3]), "concurrency"),
                              reserve_output=data.draw(st.booleans(), "reserve"),
                              frontend_s_per_request=data.draw(st.sampled_from([0.0, 0.003]), "front end"))
    if sch.reserve_output:  # the pool must hold the largest prompt + output at once
        pool = dataclasses.replace(pool, num_blocks=pool.need_one(1300 + 80) + 50)
    fixed = rng.integers(0, dp, n).tolist()
    runs, chosen = simulate_cluster(sm, pool, req, sch, dp, fixed)
    assert chosen == fixed
    for r in range(dp):
        at = np.flatnonzero(np.asarray(fixed) == r)
        alone = simulate(sm, pool, req.take(at), sch)
        if len(at):
            assert _fields(runs[r]) == _fields(alone), r
        else:
            assert runs[r].steps == 0 and len(runs[r].prompt) == 0


def _trace_spec(router: str, dp: int, replica_of=None) -> BenchSpec:
    from kvcalc.trace.bench_input import trace_requests

    model, hw = catalog.load_model("qwen3-14b"), catalog.load_hardware("h100-sxm")
    return BenchSpec("qwen3-14b", model, "h100-sxm", hw, None, calibration_for("h100-sxm")[0], "h100-sxm", dp=dp,
                     max_model_len=131072, prefix_caching=True, trace=trace_requests(str(MOONCAKE_HEAD)),
                     router=router, replica_of=replica_of)


def test_round_robin_session_and_one_replica_are_as_before_on_the_fixture_trace():
    from kvcalc.trace.bench_input import route_requests

    spec = _trace_spec("round-robin", 4)
    cases = [spec, dataclasses.replace(spec, router="session", replica_of=route_requests(spec.trace, 4, "session"))]
    for case in cases:  # each replica alone on its share (the old path) = the lockstep driver (the new one)
        row, runs, *_ = simulate_spec(case)
        row_lockstep, runs_lockstep, *_ = simulate_spec(case, lockstep=True)
        assert row == row_lockstep and replica_rows(runs) == replica_rows(runs_lockstep), case.router
    one = simulate_spec(_trace_spec("round-robin", 1))[0]
    for router in ("least-loaded", "prefix"):  # one replica: nothing to choose, the clock changes nothing
        assert simulate_spec(_trace_spec(router, 1))[0] == one


def test_the_fixture_trace_on_four_replicas_by_the_clock():
    # the docs' example (docs/traces.md "Replicas"): 399 of the 400 requests served (one exceeds 131,072
    # tokens); the clock's routers differ from the clockless replay's
    from kvcalc.trace.bench_input import route_requests

    for router in ("least-loaded", "prefix"):
        row, runs, *_ = simulate_spec(_trace_spec(router, 4))
        old = simulate_spec(_trace_spec(router, 4, route_requests(_trace_spec(router, 4).trace, 4, router)))[0]
        reps = replica_rows(runs)
        assert reps[-1]["requests"] == row["completed"] == 399
        assert sum(r["cached_tokens"] for r in reps[:-1]) == row["cached_tokens"]
        assert row != old, router


def test_the_cli_routes_least_loaded_and_prefix_on_the_clock(tmp_path):
    import json

    from conftest import run_cli

    # Mooncake lines (ms, 512-token blocks), qwen3-14b on two H100 replicas, prefix caching on:
    # r0 at 0: 1,000 tokens, 1 out -> replica 0, done after one prefill step (tens of ms)
    # r1 at 0: 600 tokens (blocks 7, 8), 2,000 out -> replica 1 (replica 0 has r0 in flight); in flight to 32.6 s
    #   (its E2EL served alone)
    # r2 at 5 s: 100 tokens, 1 out: in flight [0, 1] -> replica 0 (by prompt tokens routed so far, [1000, 600],
    #   the clockless rule sends it to replica 1)
    # r3 at 6 s: blocks 7, 8, 9 (1,100 tokens), 1 out: replica 1 has 7 and 8 prefilled -> replica 1 by prefix
    lines = [{"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]},
             {"timestamp": 0, "input_length": 600, "output_length": 2000, "hash_ids": [7, 8]},
             {"timestamp": 5000, "input_length": 100, "output_length": 1, "hash_ids": [3]},
             {"timestamp": 6000, "input_length": 1100, "output_length": 1, "hash_ids": [7, 8, 9]}]
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    base = ("bench", "--model", "qwen3-14b", "--gpus", "2", "--dp", "2", "--enable-prefix-caching", "--trace",
            str(path), "--format", "json")
    for router in ("least-loaded", "prefix"):
        r = run_cli(*base, "--router", router)
        assert r.code == 0, r.err
        reps = json.loads(r.out)["tables"]["replicas"]
        # prefix: r3 reads blocks 7 and 8 (2 x 512 tokens) on replica 1; least-loaded sends it by load (in flight
        # [0, 1]) to replica 0, where nothing of it is cached
        want = ([2, 2], [0, 1024]) if router == "prefix" else ([3, 1], [0, 0])
        assert ([x["requests"] for x in reps[:-1]], [x["cached_tokens"] for x in reps[:-1]]) == want, router
    clockless = ReplicaEngine(2, None, 512, "lru", "least-loaded")
    assert clockless.assignments([((1, 2), 1000), ((7, 8), 600), ((3,), 100)]) == [0, 1, 1]


def test_a_model_without_the_fast_loop_is_refused_with_the_reason():
    # chunked attention with a KIVI residual has no integer decode form (serve/decode_forms.py), so the lockstep
    # replicas cannot run it: one line naming the routers that can, not "the run cannot be served"
    from conftest import assert_bad_input, run_cli

    args = ("bench", "--model", "llama-4-scout", "--hardware", "h200-sxm", "--gpus", "4", "--dp", "2",
            "--kv-dtype", "kivi", "--trace", "tests/fixtures/traces/mooncake_synthetic_head400.jsonl",
            "--num-prompts", "20", "--max-model-len", "131072", "--format", "csv")
    assert_bad_input(run_cli(*args, "--router", "prefix"), "chunked attention with a KIVI residual", "round-robin")
    assert run_cli(*args, "--router", "round-robin").code == 0
