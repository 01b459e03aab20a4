"""Replicas behind a router (issue 22): N = 1 is the single node; prefix routing never loses to round-robin on the
Mooncake traces; each replica replays exactly the requests routed to it; the CLI's options and errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import SHARED, assert_bad_input, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.trace.analysis import analyze_trace
from kvcalc.trace.formats import open_trace
from kvcalc.trace.policies import make_cache
from kvcalc.trace.replicas import ROUTERS, ReplicaEngine, splitmix64
from kvcalc.trace.result import POLICIES

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
MOONCAKE_HEAD = FIXTURES / "mooncake_synthetic_head400.jsonl"
KVT = FIXTURES / "kv_cache_tester_trace_0291.json"
MOONCAKE_FULL = SHARED / "traces" / "mooncake_synthetic_trace.jsonl"


def cluster(path, replicas, capacity, block_tokens, policy="lru", router="round-robin", fmt="auto"):
    engine = ReplicaEngine(replicas, capacity, block_tokens, policy, router)
    for records, _ in open_trace(path, block_tokens, trace_format=fmt).batches():
        engine.add_records(records)
    return engine.finish()


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("policy", POLICIES)
def test_one_replica_is_the_single_node(router, policy):
    for path, b, capacity in ((MOONCAKE_HEAD, 512, 1_000_000), (KVT, 64, 20_000)):
        single = analyze_trace(path, [capacity], b, policy, trace_format="auto").results[0]
        res = cluster(path, 1, capacity, b, policy, router)
        assert res.total == single and res.replicas == (single,) and res.load_imbalance == 1.0


def test_prefix_routing_never_loses_to_round_robin_on_the_mooncake_slice():
    for replicas in (2, 4, 8):
        for capacity in (200_000, 1_000_000, 3_000_000, None):
            rr = cluster(MOONCAKE_HEAD, replicas, capacity, 512).total
            prefix = cluster(MOONCAKE_HEAD, replicas, capacity, 512, router="prefix").total
            assert prefix.reused_tokens >= rr.reused_tokens, (replicas, capacity)


@pytest.mark.skipif(not MOONCAKE_FULL.exists(), reason="needs ../shared/traces (the Mooncake trace)")
def test_prefix_routing_never_loses_to_round_robin_on_the_mooncake_trace():
    for replicas, capacity in ((4, 3_000_000), (8, 1_000_000)):
        rr = cluster(MOONCAKE_FULL, replicas, capacity, 512).total
        prefix = cluster(MOONCAKE_FULL, replicas, capacity, 512, router="prefix").total
        assert prefix.token_hit_rate >= rr.token_hit_rate


traces = st.lists(st.lists(st.integers(0, 15), max_size=6), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(traces, st.integers(1, 4), st.integers(0, 12), st.sampled_from(ROUTERS), st.sampled_from(POLICIES))
def test_each_replica_replays_what_was_routed_to_it(requests, replicas, cap, router, policy):
    # the router's choices replayed by hand: each replica's cache sees exactly its requests, in order
    engine = ReplicaEngine(replicas, cap, 1, policy, router)
    by_hand = [make_cache(policy, cap, 1) for _ in range(replicas)]
    load = [0] * replicas
    for k, ids in enumerate(requests):
        runs = [c.hit_run(ids) for c in by_hand]
        expect = {"round-robin": k % replicas,
                  "least-loaded": min(range(replicas), key=lambda i: (load[i], i)),
                  "session": splitmix64(ids[0]) % replicas if ids else k % replicas,
                  "prefix": min(range(replicas), key=lambda i: (-runs[i], load[i], i))}[router]
        if replicas == 1:
            expect = 0
        got = engine.route(ids)
        engine._count -= 1  # route() counted it: add_records below counts it again
        assert got == expect
        engine.add_records([type("R", (), {"hash_ids": ids, "input_length": len(ids)})])
        by_hand[expect].add(ids, len(ids))
        load[expect] += len(ids)
    res = engine.finish()
    assert res.replicas == tuple(c.finish() for c in by_hand)
    assert res.total.hit_blocks == sum(c.hit_blocks for c in by_hand)


def test_round_robin_and_imbalance_by_hand():
    # 2 replicas, requests [1,2] (2 tok), [1,2], [1,2], [9] (1 tok): round-robin sends 1st and 3rd to replica 0
    # (the 3rd hits 2 blocks there), 2nd and 4th to replica 1; loads 4 and 3 tokens: imbalance 4 / 3.5
    engine = ReplicaEngine(2, None, 1, "lru", "round-robin")
    engine.add_records([type("R", (), {"hash_ids": ids, "input_length": len(ids)}) for ids in
                        ([1, 2], [1, 2], [1, 2], [9])])
    res = engine.finish()
    assert [r.hit_blocks for r in res.replicas] == [2, 0] and res.total.hit_blocks == 2
    assert res.load_imbalance == pytest.approx(4 / 3.5)


def test_cli_replicas(tmp_path):
    r = run_cli("trace", str(MOONCAKE_HEAD), "--replicas", "3", "--router", "prefix", "--capacity", "1m,inf",
                "--format", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)["results"]
    assert [row["replica"] for row in rows] == ["0", "1", "2", "all"] * 2
    total = rows[3]
    assert total["requests"] == 400 and sum(row["requests"] for row in rows[:3]) == 400
    assert_bad_input(run_cli("trace", str(MOONCAKE_HEAD), "--replicas", "0"), "--replicas")
    assert_bad_input(run_cli("trace", str(MOONCAKE_HEAD), "--replicas", "2", "--router", "prefx"), "--router",
                     "did you mean prefix")
    assert_bad_input(run_cli("trace", str(MOONCAKE_HEAD), "--router", "prefix"), "--router", "--replicas")
    assert_bad_input(run_cli("trace", str(MOONCAKE_HEAD), "--replicas", "2", "--curve"), "--curve")


def test_sweep_over_replicas_and_routers():
    r = run_cli("sweep", "trace", "--set", f"file={MOONCAKE_HEAD}", "--set", "capacity=1m", "--vary",
                "replicas=1,4", "--vary", "router=round-robin,prefix", "--vary", "policy=lru,s3fifo",
                "--format", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)["results"]
    assert len(rows) == 8
    for row in rows:  # each point is the `kvcalc trace` answer for it: the cluster's row, or the single node's
        args = ["trace", str(MOONCAKE_HEAD), "--capacity", "1m", "--policy", row["policy"], "--format", "json"]
        if row["replicas"] > 1:
            args += ["--replicas", str(row["replicas"]), "--router", row["router"]]
        one = json.loads(run_cli(*args).out)["results"]
        assert row["reused_tokens"] == one[-1]["reused_tokens"]
    assert_bad_input(run_cli("sweep", "trace", "--set", f"file={MOONCAKE_HEAD}", "--set", "capacity=1m",
                             "--vary", "router=prefx"), "router")


def test_compare_trace_on_replicas():
    base = ["compare", "--trace", str(MOONCAKE_HEAD), "--capacity", "1m", "--format", "json"]
    single = json.loads(run_cli(*base).out)["results"]
    one = json.loads(run_cli(*base, "--replicas", "1").out)["results"]
    assert one == single  # one replica is the single node, in cost too
    four = json.loads(run_cli(*base, "--replicas", "4", "--router", "prefix").out)
    cluster = json.loads(run_cli("trace", str(MOONCAKE_HEAD), "--replicas", "4", "--router", "prefix",
                                 "--capacity", "1m", "--format", "json").out)["results"][-1]
    tree = next(r for r in four["results"] if r["strategy"] == "prefix-tree")
    assert tree["reused_tokens"] == cluster["reused_tokens"]  # C reuses what the cluster's caches held
    assert four["inputs"]["replicas"] == 4 and four["inputs"]["router"] == "prefix"
    assert_bad_input(run_cli("compare", "--replicas", "2"), "--replicas", "--trace")
    assert_bad_input(run_cli("compare", "--trace", str(MOONCAKE_HEAD), "--router", "prefix"), "--router")
    assert_bad_input(run_cli(*base, "--replicas", "2", "--router", "nope"), "--router")
