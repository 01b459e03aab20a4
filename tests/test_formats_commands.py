"""Every trace format in every command that replays one (issue 22): ``trace --tiers``, ``--tier-curve``,
``compare --trace`` (with and without ``--tiers``, ``--replicas``) read Mooncake JSONL, full-block hash JSONL and
kv-cache-tester JSON, plain or compressed; each answer equals a brute-force replay of the requests read by
hand. Real excerpts: tests/fixtures/traces (sources and licences in its README.md)."""

from __future__ import annotations

import json

import pytest
from conftest import assert_bad_input, run_cli
from test_tiers import brute_force_tiers
from test_trace_formats import AZURE, KVT, MOONCAKE_HEAD, brute_lru, full_block_copy

from kvcalc.trace.formats import read_requests


def run_json(*args: str) -> dict:
    r = run_cli(*args, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)


def traces(tmp_path):
    """(file, block tokens, its requests read independently) of each hash-id format."""
    full, _ = full_block_copy(tmp_path)
    return [(path, b, list(read_requests(path))) for path, b in ((KVT[1], 64), (full, 512), (MOONCAKE_HEAD, 512))]


READ_AS = {"kv_cache_tester_trace_0291.json": "kv-cache-tester", "full.jsonl": "full-blocks",
           "mooncake_synthetic_head400.jsonl": "mooncake"}  # what auto detection reads each as


@pytest.mark.parametrize("caps", [(150, 450), (600, 2_000), (1, 5_000)])
def test_trace_tiers_read_every_format(tmp_path, caps):
    for path, b, requests in traces(tmp_path):
        blocks, tokens, reqs, _, _ = brute_force_tiers(requests, list(caps), b)
        assert sum(blocks) > 0, path.name  # the case exercises the tiers
        d = run_json("trace", str(path), "--tiers", "hbm,dram", "--tier-capacity",
                     f"hbm={caps[0] * b},dram={caps[1] * b}")
        assert d["inputs"]["block_tokens"] == b  # kv-cache-tester: its own block_size, without -b
        assert d["inputs"]["trace_format"] == READ_AS[path.name]
        got = [(r["hit_blocks"], r["hit_tokens"], r["hit_requests"]) for r in d["results"]]
        assert got == list(zip(blocks, tokens, reqs)), path.name


def test_tier_curve_reads_kv_cache_tester():
    path = KVT[1]
    requests = list(read_requests(path))
    d = run_json("trace", str(path), "--tiers", "hbm,dram", "--tier-capacity", "hbm=6400,dram=19200",
                 "--tier-curve", "dram=0,6400,19200")
    got = {r["capacity_blocks"]: (r["hbm_hit_tokens"], r["dram_hit_tokens"]) for r in d["results"]}
    for dram_blocks in (0, 100, 300):  # each point equals its own brute-force tiered replay (64-token blocks)
        _, tokens, _, _, _ = brute_force_tiers(requests, [100, dram_blocks], 64)
        assert got[dram_blocks] == tuple(tokens)
    assert got[300][1] > got[100][1] > 0


def test_compare_trace_reads_every_format(tmp_path):
    for path, b, requests in traces(tmp_path):
        pairs = [(r.input_length, list(r.hash_ids)) for r in requests]
        for cap_blocks in (40, 400):
            d = run_json("compare", "--trace", str(path), "--capacity", str(cap_blocks * b))
            reused = {r["strategy"]: r["reused_tokens"] for r in d["results"]}
            assert reused == {"lru": 0, "prefix-tree": brute_lru(pairs, cap_blocks, b)[0]}, path.name
            assert d["inputs"]["block_tokens"] == b and d["inputs"]["trace_format"] == READ_AS[path.name]
        one = run_json("compare", "--trace", str(path), "--capacity", str(400 * b), "--replicas", "1")
        assert [r["reused_tokens"] for r in one["results"]] == [0, brute_lru(pairs, 400, b)[0]]


def test_compare_trace_tiers_read_kv_cache_tester():
    requests = list(read_requests(KVT[0]))
    _, tokens, _, _, _ = brute_force_tiers(requests, [100, 300], 64)
    d = run_json("compare", "--trace", str(KVT[0]), "--tiers", "hbm,dram", "--tier-capacity", "hbm=6400,dram=19200")
    a = next(r for r in d["results"] if r["strategy"] == "lru")
    assert a["requests"] == len(requests) and a["hit_tokens"] == sum(tokens)  # A is the tiered LRU
    assert d["inputs"]["trace_format"] == "kv-cache-tester"


def test_lengths_only_traces_point_to_bench():
    for args in (("trace", str(AZURE), "--tiers", "hbm"), ("compare", "--trace", str(AZURE)),
                 ("compare", "--trace", str(AZURE), "--tiers", "hbm"),
                 ("compare", "--trace", str(AZURE), "--replicas", "2")):
        assert_bad_input(run_cli(*args), "lengths-only", "bench --trace")
    assert_bad_input(run_cli("compare", "--trace-format", "mooncake"), "--trace-format", "--trace FILE")
    assert_bad_input(run_cli("compare", "--trace", str(KVT[0]), "--trace-format", "full-block"), "--trace-format",
                     "did you mean full-blocks")
    assert_bad_input(run_cli("compare", "--trace", str(KVT[0]), "--block-tokens", "16"), "block_size 64")


def test_sweep_trace_takes_the_trace_block_size():
    requests = [(r.input_length, list(r.hash_ids)) for r in read_requests(KVT[1])]
    r = run_cli("sweep", "trace", "--set", f"file={KVT[1]}", "--vary", "capacity=50k,200k", "--format", "json")
    assert r.code == 0, r.err
    rows = json.loads(r.out)["results"]
    assert [x["block_tokens"] for x in rows] == [64, 64]  # kv-cache-tester's own block_size, without block-tokens
    assert [x["reused_tokens"] for x in rows] == [brute_lru(requests, c // 64, 64)[0] for c in (50_000, 200_000)]
    assert_bad_input(run_cli("sweep", "trace", "--set", f"file={AZURE}", "--vary", "capacity=1m,2m"),
                     "lengths-only")
