"""``kvcalc bench --trace`` in every format (issue 22): arrivals and lengths from the lengths-only CSVs (Azure LLM
inference, BurstGPT), arrivals, lengths and prefix blocks from the hash-id formats (Mooncake JSONL, full-block
JSONL, kv-cache-tester JSON), plain or compressed. Real excerpts: tests/fixtures/traces (README.md there)."""

from __future__ import annotations

import gzip
import json
from datetime import datetime

import numpy as np
import pytest
from conftest import assert_bad_input, run_cli
from test_trace_compression import BURST_ROWS
from test_trace_formats import AZURE, KVT, MOONCAKE_HEAD

from kvcalc.trace.bench_input import trace_requests

BENCH = ("bench", "--model", "qwen3-14b", "--hardware", "h100-sxm", "--format", "json")


def bench_json(*args: str) -> dict:
    r = run_cli(*BENCH, *args)
    assert r.code == 0, r.err
    return json.loads(r.out)


def test_azure_csv_arrivals_and_lengths():
    rows = [line.split(",") for line in AZURE.read_text().splitlines()[1:]]
    stamps = [datetime.fromisoformat(r[0]).timestamp() for r in rows]  # naive, all in one zone: differences hold
    req = trace_requests(str(AZURE))
    order = np.argsort(stamps, kind="stable")  # the file is in time order already; bench sorts by send time
    assert np.allclose(req.send_s, np.asarray(stamps)[order] - min(stamps), atol=1e-6)
    assert req.prompt.tolist() == [max(1, int(rows[i][1])) for i in order]
    assert req.output.tolist() == [max(1, int(rows[i][2])) for i in order]
    assert req.keys is None  # lengths only: nothing for the prefix cache to match
    # second row 4.314579 s after the first (18:15:50.9951690 - 18:15:46.6805900)
    assert req.send_s[1] == pytest.approx(4.314579, abs=1e-6)


def test_bench_reads_the_lengths_only_csvs(tmp_path):
    d = bench_json("--trace", str(AZURE), "--enable-prefix-caching")
    row = d["results"][0]
    rows = [line.split(",") for line in AZURE.read_text().splitlines()[1:]]
    assert row["completed"] == 500 and d["inputs"]["dataset"] == "trace"
    assert row["total_input_tokens"] == sum(max(1, int(r[1])) for r in rows)
    assert row["cached_tokens"] == 0  # no hash ids: prefix caching finds nothing
    burst = tmp_path / "burst.csv"
    burst.write_text(BURST_ROWS)
    req = trace_requests(str(burst))
    assert req.send_s.tolist() == [0.0, 40.0, 113.0] and req.prompt.tolist() == [472, 1087, 417]
    assert req.output.tolist() == [18, 230, 276] and req.keys is None
    assert bench_json("--trace", str(burst), "--num-prompts", "2")["results"][0]["completed"] == 2


def test_bench_reads_kv_cache_tester_blocks():
    req = trace_requests(str(KVT[0]))
    assert req.key_tokens == 64  # the file's block_size, without --block-tokens
    assert all(len(k) == p // 64 for k, p in zip(req.keys, req.prompt.tolist()))  # full blocks only
    cold = bench_json("--trace", str(KVT[0]))["results"][0]
    warm = bench_json("--trace", str(KVT[0]), "--enable-prefix-caching")["results"][0]
    assert cold["cached_tokens"] == 0 < warm["cached_tokens"]
    # a hit never covers the partial last block: at most floor(in / 64) x 64 tokens per request
    assert warm["cached_tokens"] <= sum(len(k) * 64 for k in req.keys)
    assert warm["mean_ttft_ms"] < cold["mean_ttft_ms"]
    assert_bad_input(run_cli(*BENCH, "--trace", str(KVT[0]), "--block-tokens", "16"), "block_size 64")


def test_bench_compressed_traces_equal_plain(tmp_path):
    zstandard = pytest.importorskip("zstandard")
    for plain in (MOONCAKE_HEAD, KVT[1], AZURE):
        data = plain.read_bytes()
        want = bench_json("--trace", str(plain), "--enable-prefix-caching", "--num-prompts", "100")["results"]
        for name, blob in (("t.gz", gzip.compress(data)), ("t.zst", zstandard.ZstdCompressor().compress(data))):
            path = tmp_path / name
            path.write_bytes(blob)
            got = bench_json("--trace", str(path), "--enable-prefix-caching", "--num-prompts", "100")["results"]
            assert got == want, (plain.name, name)


def test_bench_trace_format_options():
    assert_bad_input(run_cli(*BENCH, "--trace", str(AZURE), "--trace-format", "burstgpt-csv"),
                     "--trace-format burstgpt-csv needs a header", "request tokens")
    assert_bad_input(run_cli(*BENCH, "--trace", str(AZURE), "--trace-format", "azure"), "--trace-format",
                     "did you mean azure-csv")
    assert_bad_input(run_cli(*BENCH, "--trace-format", "azure-csv"), "--trace-format", "--trace FILE")
    full = bench_json("--trace", str(MOONCAKE_HEAD), "--trace-format", "mooncake", "--num-prompts", "50")
    auto = bench_json("--trace", str(MOONCAKE_HEAD), "--num-prompts", "50")
    assert full["results"] == auto["results"]


# ---------------------------------------------------------------- replicas behind a router (issue 22, item 4)

def test_route_requests_follow_the_trace_routers():
    from kvcalc.trace.bench_input import route_requests
    from kvcalc.trace.replicas import ReplicaEngine

    req = trace_requests(str(MOONCAKE_HEAD))
    assert route_requests(req, 3, "round-robin").tolist() == [k % 3 for k in range(len(req.prompt))]
    for router in ("least-loaded", "session", "prefix"):  # the same decisions as kvcalc trace --router's replay
        engine = ReplicaEngine(4, None, 512, "lru", router)
        want = []
        for ids, n in zip(req.keys, req.prompt.tolist()):
            want.append(engine.route(ids))
            engine.caches[want[-1]].add(ids, n)
            engine.load[want[-1]] += n
        assert route_requests(req, 4, router).tolist() == want, router
    one = trace_requests(str(KVT[0]))  # one conversation: every turn extends the first one's prefix
    assert set(route_requests(one, 4, "prefix").tolist()) == {0}
    assert set(route_requests(one, 4, "session").tolist()) == {int(route_requests(one, 4, "session")[0])}


def test_bench_replicas_rows_add_up_and_one_replica_is_the_node(tmp_path):
    base = ("--trace", str(MOONCAKE_HEAD), "--enable-prefix-caching", "--num-prompts", "200")
    single = bench_json(*base)["results"]
    for router in ("round-robin", "least-loaded", "session", "prefix"):
        assert bench_json(*base, "--router", router)["results"] == single  # --dp 1: the router has one choice
        d = bench_json(*base, "--gpus", "4", "--dp", "4", "--router", router)
        reps = d["tables"]["replicas"]
        parts, whole = reps[:-1], reps[-1]
        assert len(parts) == 4 and whole["replica"] == "all" and d["inputs"]["router"] == router
        row = d["results"][0]
        # 13 of the 200 are longer than qwen3-14b's 40,960-token context: the engine refuses them (HTTP 400)
        assert row["failed"] == 13
        assert sum(r["requests"] for r in parts) == whole["requests"] == row["completed"] == 200 - 13
        assert sum(r["cached_tokens"] for r in parts) == whole["cached_tokens"] == row["cached_tokens"]
        assert sum(r["input_tokens"] for r in parts) == whole["input_tokens"] == row["total_input_tokens"]
        loads = [r["input_tokens"] for r in parts]
        assert whole["load_imbalance"] == pytest.approx(max(loads) / (sum(loads) / 4))
        assert sum(r["load_share"] for r in parts) == pytest.approx(1.0)
    rr = bench_json(*base, "--gpus", "4", "--dp", "4")
    assert rr["results"] == bench_json(*base, "--gpus", "4", "--dp", "4", "--router", "round-robin")["results"]


def test_prefix_routing_keeps_a_conversation_on_one_replica():
    # the conversation grows past qwen3-14b's native 40,960 tokens: serve it at 131,072 (Qwen3's model card: up to
    # 131,072 with YaRN), as `vllm serve --max-model-len 131072` would, so no turn is refused
    base = ("--trace", str(KVT[0]), "--enable-prefix-caching", "--gpus", "4", "--dp", "4", "--max-model-len", "131072")
    rr = bench_json(*base, "--router", "round-robin")
    px = bench_json(*base, "--router", "prefix")
    rows = px["tables"]["replicas"]
    assert [r["requests"] for r in rows[:-1]] == [33, 0, 0, 0]  # every turn where its prefix is cached
    assert rows[1]["mean_ttft_ms"] is None and rows[-1]["load_imbalance"] == pytest.approx(4.0)
    assert px["results"][0]["cached_tokens"] > rr["results"][0]["cached_tokens"]  # round-robin splits the prefix


def test_bench_router_options():
    assert_bad_input(run_cli(*BENCH, "--router", "prefix"), "--router", "--trace FILE")
    assert_bad_input(run_cli(*BENCH, "--trace", str(KVT[0]), "--router", "prefx"), "--router",
                     "did you mean prefix")
    # lengths only: no ids, so session falls back to round-robin and prefix to the least-loaded replica
    ll = bench_json("--trace", str(AZURE), "--gpus", "2", "--dp", "2", "--router", "least-loaded")
    px = bench_json("--trace", str(AZURE), "--gpus", "2", "--dp", "2", "--router", "prefix")
    assert ll["results"] == px["results"]


BURST1 = AZURE.parent / "burstgpt_1_head400.csv"


def test_bench_refuses_or_skips_burstgpt_failed_requests():
    # BurstGPT's failed requests (0 request and 0 response tokens) are bad lines, not 1-token requests: the first
    # is at line 22 of the real excerpt; --skip-bad serves the other 383 rows, whose totals are hand-counted
    # (awk -F, 'NR>1 && $3>0 && $4>0': 208,189 request and 110,612 response tokens)
    assert_bad_input(run_cli(*BENCH, "--trace", str(BURST1)), "burstgpt_1_head400.csv:22:", "0 input", "--skip-bad")
    d = bench_json("--trace", str(BURST1), "--skip-bad")
    row = d["results"][0]
    assert (row["completed"], row["total_input_tokens"], row["total_output_tokens"]) == (383, 208_189, 110_612)
    assert any(n.startswith("--skip-bad: 17 bad trace lines left out (first: ") and ":22: a request of 0" in n
               and not n.endswith("leaves such rows out)") for n in d["notes"])
    assert_bad_input(run_cli(*BENCH, "--skip-bad"), "--skip-bad", "--trace")


def test_plan_reads_the_lengths_only_csvs():
    # before: plan --trace on a lengths-only CSV routed None keys (TypeError, exit 3)
    r = run_cli("plan", "--model", "qwen3-14b", "--trace", str(AZURE), "--num-prompts", "50", "--format", "json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["inputs"]["num_prompts"] == 50
    assert_bad_input(run_cli("plan", "--model", "qwen3-14b", "--trace", str(BURST1)), ":22:", "--skip-bad")
    r = run_cli("plan", "--model", "qwen3-14b", "--trace", str(BURST1), "--skip-bad", "--num-prompts", "100",
                "--router", "least-loaded", "--format", "json")
    assert r.code == 0, r.err
    d = json.loads(r.out)
    # the first 100 good rows of the excerpt come from its first 106 lines: 5 failed rows among them (lines 22,
    # 40, 42, 43 and 83), the count of those read before the 100th good one
    assert d["inputs"]["num_prompts"] == 100
    assert any(n.startswith("--skip-bad: 5 bad trace lines left out") for n in d["notes"])
    assert_bad_input(run_cli("plan", "--model", "qwen3-14b", "--skip-bad"), "--skip-bad")


def test_plan_takes_the_kv_cache_tester_block_size():
    # before: plan's --block-tokens defaulted to 512, so a kv-cache-tester file (block_size 64) was refused with
    # "leave --block-tokens out", which the user had; now the file's own 64-token blocks, as bench and trace take
    r = run_cli("plan", "--model", "qwen3-14b", "--trace", str(KVT[0]), "--num-prompts", "20", "--strategy",
                "prefix-tree", "--router", "prefix", "--format", "json")
    assert r.code == 0, r.err
    seen, reused, total = set(), 0, 0  # one unlimited prefix cache over the 20 requests, full 64-token blocks
    for q in json.loads(KVT[0].read_text())["requests"][:20]:
        run = 0
        while run < len(q["hash_ids"]) and q["hash_ids"][run] in seen:
            run += 1
        reused, total = reused + run * 64, total + q["in"]
        seen.update(q["hash_ids"])
    # each request arrives after the one before it has been prefilled (the conversation's turns are seconds
    # apart), so the serving model's cache holds what this replay holds: 0.8911594624953197
    assert json.loads(r.out)["results"][0]["hit_rate"] == pytest.approx(reused / total, rel=1e-12)
    assert_bad_input(run_cli("plan", "--model", "qwen3-14b", "--trace", str(KVT[0]), "--block-tokens", "512"),
                     "block_size 64")
