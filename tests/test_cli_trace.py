"""``kvcalc trace`` and ``kvcalc compare --trace``: hit rates of tiny traces by hand, output formats, the curve,
byte capacities, bad input, and the Mooncake reference figures (skipped when the shared folder is absent)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from conftest import assert_bad_input, run_cli

MOONCAKE = Path(__file__).resolve().parents[2] / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
MAIN_FIELDS = ("capacity_tokens", "capacity_blocks", "token_hit_rate", "block_hit_rate", "requests",
               "input_tokens", "reused_tokens", "peak_cached_blocks")


def rec(timestamp: float, input_length: int, output_length: int, hash_ids: list) -> dict:
    return {"timestamp": timestamp, "input_length": input_length, "output_length": output_length,
            "hash_ids": hash_ids}


def write(path: Path, records: list) -> str:
    """One JSON object (or raw text) per line."""
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return str(path)


# Four requests, 4-token blocks: ceil(8/4) = 2, ceil(10/4) = 3, ceil(9/4) = 3, ceil(6/4) = 2 ids.
# 33 input tokens, 10 blocks, 5 distinct ids; outputs 1 + 2 + 3 + 4 = 10 tokens; 6.5 s from first to last.
FOUR = [rec(0, 8, 1, [1, 2]), rec(1500, 10, 2, [1, 2, 3]), rec(4000, 9, 3, [1, 2, 3]), rec(6500, 6, 4, [4, 5])]


@pytest.fixture
def four(tmp_path: Path) -> str:
    return write(tmp_path / "four.jsonl", FOUR)


def trace_json(*args: str) -> dict:
    r = run_cli("trace", *args, "--format", "json")
    assert r.code == 0, r.err
    return r.json()


# ---------------------------------------------------------------- hit rates by hand


def test_hit_rates_by_hand(four: str) -> None:
    rows = trace_json(four, "--block-tokens", "4", "--capacity", "8,12,inf")["results"]
    eight, twelve, inf = rows
    # 8 tokens = 2 blocks, LRU (oldest -> newest):
    #   r1 [1,2]   0 hits;                         cache [1,2]
    #   r2 [1,2,3] 1, 2 hit, 3 miss: 2 blocks = 8 tokens; insert 3, evict 1 -> [2,3]
    #   r3 [1,2,3] 1 missing: 0 hits;  1 -> [3,1], 2 -> [1,2], 3 -> [2,3]
    #   r4 [4,5]   0 hits
    # reused 8 of 33 tokens, 2 of 10 blocks; the cache never holds more than 2 blocks.
    assert (eight["capacity_tokens"], eight["capacity_blocks"]) == (8, 2)
    assert (eight["reused_tokens"], eight["hit_blocks"], eight["peak_cached_blocks"]) == (8, 2, 2)
    assert eight["token_hit_rate"] == pytest.approx(8 / 33) and eight["block_hit_rate"] == pytest.approx(0.2)
    # 12 tokens = 3 blocks: r2 reuses 2 blocks (8 tokens), r3 all 3: min(3 x 4, 9) = 9 tokens; r4 evicts 1 and 2.
    assert (twelve["reused_tokens"], twelve["hit_blocks"], twelve["peak_cached_blocks"]) == (17, 5, 3)
    assert twelve["token_hit_rate"] == pytest.approx(17 / 33) and twelve["block_hit_rate"] == pytest.approx(0.5)
    # infinite: the same 17 tokens; capacity null; the cache ends with all 5 distinct blocks.
    assert inf["capacity_tokens"] is None and inf["capacity_blocks"] is None
    assert (inf["reused_tokens"], inf["peak_cached_blocks"]) == (17, 5)
    for r in rows:
        assert (r["requests"], r["input_tokens"], r["total_blocks"], r["block_tokens"]) == (4, 33, 10, 4)
        assert r["policy"] == "lru" and all(f in r for f in MAIN_FIELDS)
    assert [r["capacity"] for r in rows] == ["8", "12", "inf"]


def test_trace_statistics_by_hand(four: str) -> None:
    t = trace_json(four, "--block-tokens", "4")["tables"]["trace"][0]
    assert (t["requests"], t["skipped_lines"], t["duration_s"]) == (4, 0, 6.5)  # (6500 - 0) ms
    assert (t["input_tokens"], t["output_tokens"]) == (33, 10)
    assert t["input_mean_tokens"] == pytest.approx(8.25)  # 33 / 4
    assert t["input_p50_tokens"] == pytest.approx(8.5)  # lengths 6, 8, 9, 10: between 8 and 9
    assert (t["input_max_tokens"], t["output_max_tokens"]) == (10, 4)
    assert (t["total_blocks"], t["distinct_blocks"], t["working_set_tokens"]) == (10, 5, 20)
    assert t["max_reused_tokens"] == 17 and t["max_token_hit_rate"] == pytest.approx(17 / 33)
    assert t["max_block_hit_rate"] == pytest.approx(0.5)


def test_fifo_never_refreshes(tmp_path: Path) -> None:
    # one block each, 4 tokens, cache of 2 blocks:
    #   [1] [2] [1]: hit (both policies); LRU moves 1 to the end -> [2,1], FIFO keeps [1,2]
    #   [3]: LRU evicts 2 -> [1,3]; FIFO evicts 1 -> [2,3]
    #   [1]: LRU hit, FIFO miss.  LRU 2 x 4 = 8 of 20 tokens = 40%, FIFO 4 of 20 = 20%
    path = write(tmp_path / "t.jsonl", [rec(i, 4, 1, [h]) for i, h in enumerate([1, 2, 1, 3, 1])])
    lru = trace_json(path, "-b", "4", "--capacity", "8")["results"][0]
    fifo = trace_json(path, "-b", "4", "--capacity", "8", "--policy", "fifo")["results"][0]
    assert (lru["token_hit_rate"], fifo["token_hit_rate"]) == (pytest.approx(0.4), pytest.approx(0.2))
    assert fifo["policy"] == "fifo"


def test_default_capacities_are_decimal(four: str) -> None:
    rows = trace_json(four, "-b", "4")["results"]
    assert [r["capacity_tokens"] for r in rows] == [3_000_000, 10_000_000, 20_000_000, None]
    assert [r["capacity_blocks"] for r in rows] == [750_000, 2_500_000, 5_000_000, None]
    assert all(r["reused_tokens"] == 17 for r in rows)  # every cache holds this tiny trace whole


def test_json_envelope_and_inputs(four: str) -> None:
    out = trace_json(four, "-b", "4", "--capacity", "8,inf")
    assert out["command"] == "trace" and set(out["tables"]) == {"trace"}
    assert out["inputs"]["file"] == four and out["inputs"]["capacities"] == ["8", "inf"]
    assert out["inputs"]["policy"] == "lru" and out["inputs"]["block_tokens"] == 4
    assert any("leading blocks" in n for n in out["notes"])


def test_cli_json_equals_python_api(four: str) -> None:
    from kvcalc.trace.analysis import analyze_trace

    rows = trace_json(four, "-b", "4", "--capacity", "8,12,inf")["results"]
    api = analyze_trace(four, [8, 12, None], block_tokens=4)
    for row, r in zip(rows, api.results):
        assert (row["reused_tokens"], row["hit_blocks"], row["peak_cached_blocks"]) == (
            r.reused_tokens, r.hit_blocks, r.peak_cached_blocks)
        assert row["token_hit_rate"] == pytest.approx(r.token_hit_rate)


def test_csv_rows(four: str) -> None:
    r = run_cli("trace", four, "-b", "4", "--capacity", "8,inf", "--format", "csv")
    assert r.code == 0, r.err
    lines = r.out.strip().splitlines()
    header = lines[0].split(",")
    assert all(f in header for f in MAIN_FIELDS) and len(lines) == 3
    eight = dict(zip(header, lines[1].split(",")))
    inf = dict(zip(header, lines[2].split(",")))
    assert eight["capacity_tokens"] == "8" and eight["reused_tokens"] == "8"
    assert inf["capacity_tokens"] == "" and inf["reused_tokens"] == "17"  # infinite -> empty (null)


def test_table_shows_tokens_blocks_and_percent(four: str) -> None:
    r = run_cli("trace", four, "-b", "4", "--capacity", "8,inf")
    assert r.code == 0, r.err
    assert "24.2%" in r.out and "51.5%" in r.out  # 8 / 33, 17 / 33
    assert "tokens" in r.out and "blocks" in r.out and "inf" in r.out and "6.5 s" in r.out


def test_markdown_and_explain(four: str) -> None:
    r = run_cli("trace", four, "-b", "4", "--capacity", "8", "--format", "markdown", "--explain")
    assert r.code == 0, r.err
    assert "| 8 |" in r.out and "token hit = 8 / 33 = 24.2%" in r.out and "longest run" in r.out


def test_check_gates(four: str) -> None:
    r = run_cli("trace", four, "-b", "4", "--capacity", "8,inf", "--check", "token_hit_rate >= 0.5")
    assert r.code == 1 and "check failed" in r.err  # the 8-token row: 24.2%


# ---------------------------------------------------------------- the curve


def nested_trace(tmp_path: Path, n: int = 120) -> str:
    """Requests sharing prefixes at several depths (deterministic), 4-token blocks, partial last blocks."""
    records = []
    for i in range(n):
        family, depth = i % 7, 1 + (i * 5) % 6
        ids = [1000 * family + k for k in range(depth)] + [100_000 + i]
        records.append(rec(i * 10, 4 * len(ids) - (i % 3), 1 + i % 5, ids))
    return write(tmp_path / "nested.jsonl", records)


def test_curve_equals_separate_runs(tmp_path: Path) -> None:
    path = nested_trace(tmp_path)
    curve = trace_json(path, "-b", "4", "--curve", "--curve-points", "8")["results"]
    assert 2 <= len(curve) <= 8 and all(r["capacity"] == "curve" for r in curve)
    tokens = [r["capacity_tokens"] for r in curve]
    assert tokens == sorted(tokens) and all(t % 4 == 0 for t in tokens)
    from kvcalc.trace.reader import read_trace
    from kvcalc.trace.replay import CacheSimulator

    requests = list(read_trace(path, block_tokens=4))
    for row in curve:  # one capacity per run, and the direct OrderedDict simulation of that capacity
        alone = trace_json(path, "-b", "4", "--capacity", str(row["capacity_tokens"]))["results"][0]
        sim = CacheSimulator(row["capacity_tokens"], 4, "lru")
        for r in requests:
            sim.add(r.hash_ids, r.input_length)
        direct = sim.finish()
        for f in ("reused_tokens", "hit_blocks", "token_hit_rate", "block_hit_rate", "peak_cached_blocks",
                  "capacity_blocks", "input_tokens", "requests"):
            assert row[f] == alone[f] == getattr(direct, f), (row["capacity_tokens"], f)


def test_curve_default_grid_reaches_the_working_set(tmp_path: Path) -> None:
    path = nested_trace(tmp_path)
    out = trace_json(path, "-b", "4", "--curve")
    rows, stats = out["results"], out["tables"]["trace"][0]
    assert 2 <= len(rows) <= 20 and out["inputs"]["curve_points"] == 20
    assert rows[0]["capacity_tokens"] == 4  # one block
    assert rows[-1]["capacity_tokens"] == stats["working_set_tokens"]
    assert rows[-1]["token_hit_rate"] == pytest.approx(stats["max_token_hit_rate"])
    rates = [r["token_hit_rate"] for r in rows]
    assert rates == sorted(rates)  # LRU: a bigger cache never hits less


def test_curve_merges_given_capacities(four: str) -> None:
    rows = trace_json(four, "-b", "4", "--curve", "--capacity", "8,inf")["results"]
    assert rows[-1]["capacity"] == "inf" and rows[-1]["capacity_tokens"] is None
    assert [r["capacity"] for r in rows if r["capacity_tokens"] == 8] == ["8"]  # given, not duplicated by the grid


def test_curve_is_lru_only(four: str) -> None:
    assert_bad_input(run_cli("trace", four, "--curve", "--policy", "fifo"), "--curve", "lru")
    assert_bad_input(run_cli("trace", four, "--curve-points", "0"), "--curve-points")


# ---------------------------------------------------------------- capacities in bytes


def test_byte_capacity_with_model_by_hand(four: str) -> None:
    # llama-3-70b: 80 layers x 8 KV heads x 128 x (K + V) x 2 B = 327,680 B/token; 4-token block = 1,310,720 B.
    # 2.7MB = 2,700,000 B -> floor(2,700,000 / 1,310,720) = 2 blocks -> 8 tokens (the 8-token row above);
    # 1MiB = 1,048,576 B -> 0 blocks: nothing cached.
    out = trace_json(four, "-b", "4", "--capacity", "2.7MB,1MiB", "--model", "llama-3-70b")
    mb, mib = out["results"]
    assert out["inputs"]["kv_bytes_per_block"] == 1_310_720 and out["inputs"]["model"] == "llama-3-70b"
    assert (mb["capacity"], mb["capacity_tokens"], mb["capacity_blocks"]) == ("2.7MB", 8, 2)
    assert mb["reused_tokens"] == 8 and mb["capacity_bytes"] == 2 * 1_310_720
    assert (mib["capacity_tokens"], mib["reused_tokens"], mib["peak_cached_blocks"]) == (0, 0, 0)
    assert any("holds no whole 4-token block" in n for n in out["notes"])
    r = run_cli("trace", four, "-b", "4", "--capacity", "2.7MB", "-m", "llama-3-70b", "--explain")
    assert "floor(2,700,000 B / 1,310,720 B per block) = 2 blocks x 4 = 8 tokens" in r.out


def test_model_adds_bytes_held_to_token_capacities(four: str) -> None:
    # 3 blocks x 1,310,720 B = 3,932,160 B held by a 12-token cache; infinite holds infinite (null)
    rows = trace_json(four, "-b", "4", "--capacity", "12,inf", "-m", "llama-3-70b")["results"]
    assert rows[0]["capacity_bytes"] == 3_932_160 and rows[1]["capacity_bytes"] is None


def test_v4_flash_block_is_the_compressed_cache(tmp_path: Path) -> None:
    from kvcalc.memory.blocks import block_bytes
    from kvcalc.model import catalog
    from kvcalc.model.attention import resolve_groups

    path = write(tmp_path / "v4.jsonl", [rec(0, 256, 1, [1, 2]), rec(1, 200, 1, [1, 3])])
    out = trace_json(path, "-b", "128", "--capacity", "80GB", "-m", "deepseek-v4-flash")
    assert any("compressed cache" in n for n in out["notes"])
    model = catalog.load_model("deepseek-v4-flash")  # the paged block as `kvcalc blocks` pads it
    per_block = block_bytes(resolve_groups(model), 128, model.page_align_bytes)
    assert out["inputs"]["kv_bytes_per_block"] == pytest.approx(per_block)
    assert out["results"][0]["capacity_tokens"] == 80_000_000_000 // int(per_block) * 128
    assert out["results"][0]["reused_tokens"] == 128  # r2 reuses block 1


def test_byte_capacity_needs_a_model(four: str) -> None:
    assert_bad_input(run_cli("trace", four, "--capacity", "80GB"), "--capacity", "--model")


@pytest.mark.parametrize("bad", ["abc", "0", "1.5", ",", "-3m", "80XB", "3m,zz"])
def test_bad_capacity_strings(four: str, bad: str) -> None:
    assert_bad_input(run_cli("trace", four, "-b", "4", "--capacity", bad), "--capacity")


def test_unknown_model_and_policy(four: str) -> None:
    assert_bad_input(run_cli("trace", four, "--capacity", "80GB", "-m", "no-such-model"))
    assert_bad_input(run_cli("trace", four, "--policy", "arc"), "--policy")
    assert_bad_input(run_cli("trace", four, "--policy", "s3-fifo"), "--policy", "did you mean s3fifo")
    assert_bad_input(run_cli("trace", four, "--block-tokens", "0"), "--block-tokens")


# ---------------------------------------------------------------- bad traces


@pytest.mark.parametrize("line, words", [
    ('{"timestamp": 1, "input_length": 4, ', ["truncated JSON"]),
    ("not json", ["malformed JSON"]),
    ('{"timestamp": 1, "input_length": 4, "output_length": 1}', ["missing field", "hash_ids"]),
    ('{"timestamp": 1, "input_length": -4, "output_length": 1, "hash_ids": []}', ["input_length", ">= 0"]),
    ('{"timestamp": 1, "input_length": 12, "output_length": 1, "hash_ids": [1]}', ["hash_ids", "block size"]),
])
def test_bad_line_names_its_line(tmp_path: Path, line: str, words: list[str]) -> None:
    path = write(tmp_path / "bad.jsonl", [FOUR[0], "", line, FOUR[1]])  # the bad line is line 3
    assert_bad_input(run_cli("trace", path, "-b", "4"), "bad.jsonl:3:", *words)


def test_skip_bad_counts_and_reports(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.jsonl", [FOUR[0], "oops", FOUR[1], '{"timestamp": 1}', FOUR[2], FOUR[3]])
    out = trace_json(path, "-b", "4", "--capacity", "inf", "--skip-bad")
    assert out["tables"]["trace"][0]["skipped_lines"] == 2
    assert out["results"][0]["reused_tokens"] == 17 and out["results"][0]["requests"] == 4  # the good lines
    assert any("skipped 2 bad line(s); first:" in n and "bad.jsonl:2:" in n for n in out["notes"])


def test_empty_trace_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert_bad_input(run_cli("trace", str(empty)), "empty.jsonl", "no requests")
    blank = write(tmp_path / "blank.jsonl", ["", "   "])
    assert_bad_input(run_cli("trace", blank), "no requests")
    all_bad = write(tmp_path / "allbad.jsonl", ["x", "y"])
    assert_bad_input(run_cli("trace", all_bad, "--skip-bad"), "no requests", "2 bad lines skipped")


def test_missing_file(tmp_path: Path) -> None:
    assert_bad_input(run_cli("trace", str(tmp_path / "nope.jsonl")), "nope.jsonl")


def test_help_has_example_and_semantics() -> None:
    r = run_cli("trace", "--help")
    assert r.code == 0 and "Example" in r.out and "longest run" in r.out and "--curve" in r.out
    r = run_cli("compare", "--help")
    assert r.code == 0 and "--trace" in r.out


# ---------------------------------------------------------------- compare --trace


def compare_json(*args: str) -> tuple[dict, dict, dict]:
    r = run_cli("compare", *args, "--format", "json")
    assert r.code == 0, r.err
    out = r.json()
    a, c = out["results"]
    return out, a, c


def test_compare_trace_prefill_by_hand(four: str) -> None:
    # the article scenario: 13e9 active params, attention FLOPs off, 6.3 B/token (flat)
    # A prefills every input token: 33; C (infinite cache) reuses 17 (see test_hit_rates_by_hand): 33 - 17 = 16
    out, a, c = compare_json("--trace", four, "--block-tokens", "4")
    assert (a["strategy"], c["strategy"]) == ("lru", "prefix-tree")
    assert (a["requests"], a["input_tokens"], a["output_tokens"]) == (4, 33, 10)
    assert (a["prefill_tokens"], a["reused_tokens"]) == (33, 0)
    assert (c["prefill_tokens"], c["reused_tokens"]) == (16, 17)
    assert a["prefill_flops"] == pytest.approx(2 * 13e9 * 33) and c["prefill_flops"] == pytest.approx(2 * 13e9 * 16)
    assert c["hit_rate"] == pytest.approx(17 / 33)
    # C's prefix cache: the cache's peak, 5 blocks x 4 tokens = 20 tokens x 6.3 B = 126 B, held beside the requests:
    # KV held A = 33 x 6.3 = 207.9 B; C = 207.9 - 17 x 6.3 + 20 x 6.3 = 226.8 B
    assert c["prefix_cache_bytes"] == pytest.approx(126.0)
    assert a["kv_stored_bytes"] == pytest.approx(207.9) and c["kv_stored_bytes"] == pytest.approx(226.8)
    assert a["workload"] == c["workload"] == "four.jsonl"
    assert out["inputs"]["trace"] == four and out["inputs"]["capacity_tokens"] is None
    assert any("replaced the scenario's workload" in n and "not simulated" in n for n in out["notes"])
    classes = out["tables"]["classes"]
    assert {r["class"] for r in classes} == {"input <= 4K"} and sum(r["requests"] for r in classes) == 8
    sources = {r["assumption"]: r["source"] for r in out["tables"]["assumptions"]}
    assert "request trace" in sources["workload"] and "LRU replay" in sources["prefix_cache"]


def test_compare_trace_capacity_in_tokens_and_bytes(four: str) -> None:
    # 8 tokens = 2 blocks: C reuses 8 (test_hit_rates_by_hand) -> prefills 33 - 8 = 25
    _, a, c = compare_json("--trace", four, "--block-tokens", "4", "--capacity", "8")
    assert (a["prefill_tokens"], c["prefill_tokens"]) == (33, 25)
    # bytes via the scenario's model: a 4-token block of 6.3 B/token = 25.2 B; 101B -> floor(101 / 25.2) = 4 blocks
    # = 16 tokens; 4 blocks hold r1..r3's 3 blocks, so C reuses 17 -> prefills 16
    out, _, c = compare_json("--trace", four, "--block-tokens", "4", "--capacity", "101B")
    assert out["inputs"]["capacity_tokens"] == 16 and c["prefill_tokens"] == 16


def test_compare_trace_flags_conflict(four: str) -> None:
    assert_bad_input(run_cli("compare", "--capacity", "3m"), "--capacity", "--trace")
    assert_bad_input(run_cli("compare", "--skip-bad"), "--skip-bad", "--trace")
    assert_bad_input(run_cli("compare", "--trace", four, "--workload", "article-100"), "--trace")
    assert_bad_input(run_cli("compare", "--trace", four, "--requests", "5", "--context", "4k"), "--trace")
    assert_bad_input(run_cli("compare", "--trace", four, "--warm"), "--warm")
    assert_bad_input(run_cli("compare", "--trace", four, "--capacity", "lots"), "--capacity")


def test_compare_trace_bad_lines(tmp_path: Path) -> None:
    path = write(tmp_path / "bad.jsonl", [FOUR[0], "oops", FOUR[1]])
    assert_bad_input(run_cli("compare", "--trace", path, "--block-tokens", "4"), "bad.jsonl:2:")
    out, a, _ = compare_json("--trace", path, "--block-tokens", "4", "--skip-bad")
    assert a["requests"] == 2 and any("skipped 1 bad line(s)" in n for n in out["notes"])


def test_compare_trace_without_input_tokens(tmp_path: Path) -> None:
    path = write(tmp_path / "zero.jsonl", [rec(0, 0, 5, [])])
    assert trace_json(path)["results"][0]["token_hit_rate"] == 0  # the trace itself is fine
    assert_bad_input(run_cli("compare", "--trace", path), "no input tokens")


# ---------------------------------------------------------------- the shared Mooncake trace


@pytest.mark.skipif(not MOONCAKE.is_file(), reason=f"shared trace not present: {MOONCAKE}")
def test_mooncake_reference_figures_via_cli() -> None:
    out = trace_json(str(MOONCAKE), "--block-tokens", "512", "--capacity", "inf,3m,10m", "--policy", "lru")
    inf, three, ten = out["results"]
    assert inf["capacity_tokens"] is None and three["capacity_tokens"] == 3_000_000
    assert round(100 * inf["token_hit_rate"], 1) == 65.1
    assert round(100 * three["token_hit_rate"], 1) == 31.5
    assert round(100 * ten["token_hit_rate"], 1) == 57.7
    stats = out["tables"]["trace"][0]
    assert stats["requests"] == 3993 and stats["max_token_hit_rate"] == inf["token_hit_rate"]
    assert not math.isnan(stats["duration_s"]) and stats["duration_s"] > 0
