"""Trace formats (issue 22): Mooncake JSONL, full-block hash JSONL, kv-cache-tester JSON, Azure and BurstGPT CSV,
detection by content, gzip streaming, the bound on hash ids per line (issue 21), the progress callback. Real
excerpts: tests/fixtures/traces (sources and licences in its README.md)."""

from __future__ import annotations

import gzip
import json
from collections import OrderedDict
from pathlib import Path

import pytest
from conftest import assert_bad_input, run_cli

import kvcalc.trace.reader as reader
from kvcalc.out.errors import InputError
from kvcalc.trace.analysis import analyze_trace
from kvcalc.trace.formats import detect_format, open_trace, read_requests, trace_block_tokens
from kvcalc.trace.policies import make_cache
from kvcalc.trace.result import POLICIES

FIXTURES = Path(__file__).parent / "fixtures" / "traces"
KVT = [FIXTURES / "kv_cache_tester_trace_0002.json", FIXTURES / "kv_cache_tester_trace_0291.json"]
AZURE = FIXTURES / "azure_llm_inference_conv_2023_head500.csv"
MOONCAKE_HEAD = FIXTURES / "mooncake_synthetic_head400.jsonl"
BURST1 = FIXTURES / "burstgpt_1_head400.csv"
BURST3 = FIXTURES / "burstgpt_3_head118.csv"


def brute_lru(requests, capacity_blocks, block_tokens):
    """(reused tokens, hit blocks) of a plain OrderedDict LRU over (input length, ids) pairs."""
    cache, reused, hits = OrderedDict(), 0, 0
    for n, ids in requests:
        run = 0
        while run < len(ids) and ids[run] in cache:
            run += 1
        reused += min(run * block_tokens, n)
        hits += run
        for h in ids:
            cache[h] = None
            cache.move_to_end(h)
            if capacity_blocks is not None and len(cache) > capacity_blocks:
                cache.popitem(last=False)
    return reused, hits


def kvt_requests(path):
    """Every request of a kv-cache-tester file, sub-agents' in their place, read with json by hand."""
    out = []

    def walk(items):
        for r in items:
            if r.get("type") == "subagent":
                walk(r["requests"])
            else:
                out.append((r["in"], r["hash_ids"]))

    walk(json.loads(path.read_text())["requests"])
    return out


@pytest.mark.parametrize("path", KVT, ids=lambda p: p.stem)
def test_kv_cache_tester_replays_every_request_exactly(path):
    requests = kvt_requests(path)
    assert detect_format(path) == "kv-cache-tester" and trace_block_tokens(path) == 64
    assert all(len(ids) == n // 64 for n, ids in requests)  # full blocks only: floor(in / 64)
    for capacity_blocks in (1, 50, 400, 1_000, None):
        capacity = None if capacity_blocks is None else capacity_blocks * 64
        a = analyze_trace(path, [capacity], 64, trace_format="auto")
        r = a.results[0]
        assert r.requests == len(requests) and a.stats.skipped_lines == 0  # no request skipped
        assert (r.reused_tokens, r.hit_blocks) == brute_lru(requests, capacity_blocks, 64)
        assert r.input_tokens == sum(n for n, _ in requests)
        assert r.reused_tokens < r.input_tokens  # the partial last blocks are never reused
    for policy in POLICIES:  # and every policy equals its cache replayed by hand
        cache = make_cache(policy, 300 * 64, 64)
        for n, ids in requests:
            cache.add(ids, n)
        assert analyze_trace(path, [300 * 64], 64, policy, trace_format="kv-cache-tester").results[0] == cache.finish()


def test_kv_cache_tester_counts_by_hand():
    # trace_0291: 20 requests of its own and two sub-agents of 5 and 7 -> 32; its first request has in = 17,869
    # tokens -> floor(17869 / 64) = 279 ids, and output 426
    rows = list(read_requests(KVT[1]))
    assert len(rows) == 32 and rows[0][1:3] == (17_869, 426) and len(rows[0].hash_ids) == 279
    # a sub-agent's first request sits at the entry's t (1,148.013 s) plus its own (0.0)
    assert 1_148_013.0 in [r.timestamp_ms for r in rows]


def test_kv_cache_tester_block_size_and_bad_requests(tmp_path):
    assert_bad_input(run_cli("trace", str(KVT[0]), "-b", "512"), "block_size 64")
    doc = json.loads(KVT[0].read_text())
    doc["requests"][3]["hash_ids"].append(7)  # now ceil-like: one id too many
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    assert_bad_input(run_cli("trace", str(bad)), "requests[3]", "floor")
    r = run_cli("trace", str(bad), "--skip-bad", "--capacity", "inf", "--format", "json")
    assert r.code == 0 and json.loads(r.out)["results"][0]["requests"] == 32


def test_azure_csv_lengths_and_arrivals():
    rows = list(read_requests(AZURE))
    assert len(rows) == 500 and detect_format(AZURE) == "azure-csv"
    # first row: 2023-11-16 18:15:46.6805900, 374 in, 44 out; second 18:15:50.9951690, 396, 109: 4,314.579 ms
    assert rows[0][:3] == (0.0, 374, 44) and rows[0].hash_ids == ()
    assert rows[1][1:3] == (396, 109) and rows[1].timestamp_ms == pytest.approx(4314.579)
    last = AZURE.read_text().splitlines()[-1].split(",")
    assert (rows[-1].input_length, rows[-1].output_length) == (int(last[1]), int(last[2]))
    assert_bad_input(run_cli("trace", str(AZURE)), "lengths-only", "bench --trace")


def test_burstgpt_csv(tmp_path):
    # the real excerpt: the first 400 rows of BurstGPT_1 (fixtures/traces/README.md)
    assert detect_format(BURST1) == "burstgpt-csv"
    # row 1 is "5,ChatGPT,472,18,...", row 2 "45,ChatGPT,1087,230,...": 40 s = 40,000 ms apart
    rows = list(read_requests(BURST1, skip_bad=True))
    assert [r[:3] for r in rows[:2]] == [(0.0, 472, 18), (40_000.0, 1087, 230)]
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens\n5,ChatGPT,-3,18\n")
    with pytest.raises(InputError, match=r"burst.csv:2: input tokens"):
        list(read_requests(path))


def test_burstgpt_failed_requests_are_bad_lines():
    # BurstGPT logs a failed request as 0 request and 0 response tokens: 17 of the excerpt's 400 rows, the first
    # at line 22 ("1106,ChatGPT,0,0,0,Conversation log"). Refused with the line, or left out with skip_bad.
    with pytest.raises(InputError, match=r"burstgpt_1_head400.csv:22: a request of 0 input and 0 output tokens"):
        list(read_requests(BURST1))
    reader = open_trace(BURST1, trace_format="auto", skip_bad=True)
    rows = list(reader)
    # hand count (awk -F, 'NR>1 && $3>0 && $4>0'): 383 rows, 208,189 request and 110,612 response tokens
    assert (len(rows), reader.skipped_lines) == (383, 17)
    assert sum(r.input_length for r in rows) == 208_189 and sum(r.output_length for r in rows) == 110_612
    assert rows[-1].timestamp_ms == (37274 - 5) * 1000.0  # the last row, 37,274 s, after the first, 5 s
    assert "burstgpt_1_head400.csv:22:" in reader.first_problem


def test_burstgpt_3_schema_with_inserted_columns():
    # BurstGPT_3 inserts Session ID and Elapsed time after Timestamp (the real excerpt: its first 118 rows, three
    # API logs without a session id among them, and one failed request at line 117)
    assert detect_format(BURST3) == "burstgpt-csv"
    reader = open_trace(BURST3, trace_format="auto", skip_bad=True)
    rows = list(reader)
    # row 1 "19440110.0,...,GPT-4,906,446", row 2 "19440161.0,...,ChatGPT,36,29": 51 s apart
    assert [r[:3] for r in rows[:2]] == [(0.0, 906, 446), (51_000.0, 36, 29)]
    # hand count (awk -F, 'NR>1 && $5>0 && $6>0'): 117 rows, 125,737 request and 22,747 response tokens
    assert (len(rows), reader.skipped_lines, sum(r.input_length for r in rows)) == (117, 1, 125_737)
    assert sum(r.output_length for r in rows) == 22_747
    with pytest.raises(InputError, match=r"burstgpt_3_head118.csv:117: a request of 0 input"):
        list(read_requests(BURST3))


def test_the_burstgpt_excerpts_are_the_cited_bytes():
    import hashlib

    # BurstGPT_1's excerpt is byte for byte the cited slice (its sha256 in fixtures/traces/README.md)
    assert hashlib.sha256(BURST1.read_bytes()).hexdigest() == (
        "7865fda5dac50938a84dfccb06c405e2f5202969ecfbd671c8399de00f4335f0")
    text = BURST3.read_text()
    assert text.count("\n") == 119 and hashlib.sha256(BURST3.read_bytes()).hexdigest() in (
        (FIXTURES / "README.md").read_text())
    for line in text.splitlines()[1:]:  # every row's total = request + response tokens, as BurstGPT writes it
        f = line.split(",")
        assert int(f[4]) + int(f[5]) == int(f[6])


def test_gzip_streams_and_equals_the_plain_file(tmp_path):
    gz = tmp_path / "head.jsonl.gz"
    gz.write_bytes(gzip.compress(MOONCAKE_HEAD.read_bytes()))
    plain = analyze_trace(MOONCAKE_HEAD, [3_000_000, None], 512)
    assert analyze_trace(gz, [3_000_000, None], 512, trace_format="auto") == plain
    kvt = tmp_path / "k.json.gz"
    kvt.write_bytes(gzip.compress(KVT[0].read_bytes()))
    assert analyze_trace(kvt, [None], 64, trace_format="auto").results == analyze_trace(
        KVT[0], [None], 64, trace_format="auto").results
    seen = []
    list(open_trace(gz, 512, trace_format="auto", progress=seen.append))
    assert seen == sorted(seen) and seen[-1] == gz.stat().st_size  # compressed bytes read, to the end


def full_block_copy(tmp_path):
    """The Mooncake excerpt with only full blocks hashed: the last id of every partial request dropped."""
    lines = []
    for line in MOONCAKE_HEAD.read_text().splitlines():
        obj = json.loads(line)
        if obj["input_length"] % 512:
            obj["hash_ids"] = obj["hash_ids"][:-1]
        lines.append(json.dumps(obj))
    path = tmp_path / "full.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path, [(json.loads(x)["input_length"], json.loads(x)["hash_ids"]) for x in lines]


def test_full_block_hash_jsonl(tmp_path):
    path, requests = full_block_copy(tmp_path)
    assert_bad_input(run_cli("trace", str(path), "--trace-format", "mooncake"), "ceil(")  # the strict rule refuses
    for fmt in ("auto", "full-blocks"):
        r = analyze_trace(path, [1_000_000], 512, trace_format=fmt).results[0]
        assert r.requests == 400
        assert (r.reused_tokens, r.hit_blocks) == brute_lru(requests, 1_000_000 // 512, 512)
    # a later line under the other rule is refused with its line number
    lines = path.read_text().splitlines()
    k = next(i for i, x in enumerate(lines) if i > 5 and json.loads(x)["input_length"] % 512)
    obj = json.loads(lines[k])
    obj["hash_ids"].append(123456789)
    lines[k] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")
    assert_bad_input(run_cli("trace", str(path)), f"full.jsonl:{k + 1}:", "floor(")


def test_mooncake_auto_equals_strict():
    assert detect_format(MOONCAKE_HEAD) == "jsonl"
    assert analyze_trace(MOONCAKE_HEAD, [3_000_000], 512, trace_format="auto") == analyze_trace(
        MOONCAKE_HEAD, [3_000_000], 512, trace_format="mooncake")


def test_hash_ids_per_line_bound(tmp_path, monkeypatch):
    path = tmp_path / "big.jsonl"
    good = json.dumps({"timestamp": 0, "input_length": 2, "output_length": 1, "hash_ids": [1, 2]})
    n = reader.MAX_IDS_PER_LINE + 1
    huge = '{"timestamp": 1, "input_length": %d, "output_length": 1, "hash_ids": [%s]}' % (n, ",".join(["1"] * n))
    path.write_text(good + "\n" + huge + "\n" + good + "\n")
    assert_bad_input(run_cli("trace", str(path), "-b", "1"), "big.jsonl:2:", "1,000,000")
    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 1_000)  # a line longer than the byte bound: never read whole
    for extra in ((), ("--skip-bad",)):
        assert_bad_input(run_cli("trace", str(path), "-b", "1", *extra), "big.jsonl:2:", "longer than 1,000 bytes")


def test_unknown_content_and_format_name(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text("hello\n")
    assert_bad_input(run_cli("trace", str(path)), "x.txt:1:", "malformed JSON")  # unknown: read as JSONL
    assert_bad_input(run_cli("trace", str(MOONCAKE_HEAD), "--trace-format", "kv-cache"), "--trace-format",
                     "did you mean kv-cache-tester")
    bad = tmp_path / "bad.gz"
    bad.write_bytes(b"\x1f\x8b" + b"not gzip at all")
    assert_bad_input(run_cli("trace", str(bad)), "bad.gz")


DOCS = Path(__file__).parents[1] / "docs" / "traces.md"


def _doc_examples():
    from test_readme import examples

    return examples(DOCS.read_text()) if DOCS.is_file() else []


@pytest.mark.parametrize("line,command,shown", _doc_examples(), ids=lambda x: str(x)[:40])
def test_docs_traces_examples(monkeypatch, line, command, shown):
    # docs/traces.md's `$ kvcalc trace ...` blocks show their real output (run as the README's are)
    from test_readme import test_readme_example

    test_readme_example(monkeypatch, line, command, shown)
