"""``kvcalc compare --trace --tiers``: A vs C through the same tiers: the fifo-node TTFT queue by hand, D's hidden
hand-off by hand, C never recomputes more than A, bad flags exit 2, the Mooncake run (skipped when absent)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_bad_input, run_cli
from test_cli_trace import MOONCAKE, four, write  # noqa: F401 (four is a fixture)

from kvcalc.trace.tier_compare import hidden_handoff


def compare_json(*args: str) -> dict:
    r = run_cli("compare", *args, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)


def prefill_s(cached: int, new: int) -> float:
    """Llama-3-70B on 8 x H100 (FP8 dense 1,978.9 TFLOP/s, MFU 0.2): the cost model's closed form / node rate."""
    from kvcalc.model import attention as att
    from kvcalc.model import catalog
    from kvcalc.serve.compute import prefill_flops

    m = catalog.load_model("llama-3-70b")
    return prefill_flops(m, att.resolve_groups(m), cached, new, True) / (8 * 1978.9e12 * 0.2)


def test_fifo_node_queue_by_hand(tmp_path: Path) -> None:
    # 4-token blocks, HBM only (100 tokens = 25 blocks). r0 and r1 arrive together at 0 with distinct blocks:
    # r1 waits for r0's prefill. r2 at 10 s repeats r0's 3 blocks (12 tokens, all in HBM): nothing prefilled.
    path = write(tmp_path / "q.jsonl", [
        {"timestamp": 0, "input_length": 12, "output_length": 60, "hash_ids": [1, 2, 3]},
        {"timestamp": 0, "input_length": 8, "output_length": 60, "hash_ids": [4, 5]},
        {"timestamp": 10000, "input_length": 12, "output_length": 60, "hash_ids": [1, 2, 3]}])
    out = compare_json("--scenario", "v4-flash-8xh100", "--model", "llama-3-70b", "--trace", path, "--block-tokens",
                       "4", "--tiers", "hbm", "--tier-capacity", "hbm=100")
    a, c = out["results"]
    p0, p1 = prefill_s(0, 12), prefill_s(0, 8)
    ttfts = [p0, p0 + p1, 0.0]  # r1: waits p0 then its own p1; r2: 12 reused tokens, prefill of 0 new = 0 s
    assert a["ttft_mean_s"] == pytest.approx(sum(ttfts) / 3)
    assert a["ttft_max_s"] == pytest.approx(p0 + p1)
    assert a["ttft_p50_s"] == pytest.approx(p0)  # sorted [0, p0, p0 + p1]: the middle one
    assert (a["used_tokens"], a["recomputed_tokens"]) == (12, 20)
    assert a["prefill_flops_saved"] == pytest.approx(prefill_s(0, 12) * 8 * 1978.9e12 * 0.2)
    assert c["ttft_mean_s"] == pytest.approx(a["ttft_mean_s"]) and a["queue_model"] == "fifo-node"


def test_hidden_handoff_by_hand() -> None:
    # step 1/60 s; gaps: first request -> a whole step; 10 ms gap -> 10 ms; 490 ms gap -> a whole step
    d = hidden_handoff([0.0, 0.01, 0.5], [0.02, 0.02, 0.005], 1 / 60)
    hidden = 1 / 60 + 0.01 + 0.005  # the third transfer (5 ms) fits in its window entirely
    assert d["pd_hidden_s"] == pytest.approx(hidden)
    assert d["pd_hidden_share"] == pytest.approx(hidden / 0.045)
    assert d["pd_exposed_s"] == pytest.approx(0.045 - hidden)


def test_pd_link_adds_d(four: str) -> None:
    out = compare_json("--scenario", "v4-flash-pd-ib", "--trace", four, "--block-tokens", "4", "--tiers", "hbm",
                       "--tier-capacity", "hbm=8")
    assert out["inputs"]["pd_link"] and all(0 <= r["pd_hidden_share"] <= 1 for r in out["results"])
    assert "prefetch" in out["tables"]


@pytest.mark.parametrize("args, words", [
    (("--tiers", "hbm"), ("--tiers", "--trace")),
    (("--tier-capacity", "dram=1TB"), ("--tier-capacity", "--tiers")),
    (("--trace", "X", "--tiers", "hbm,flash"), ("--tiers", "flash")),
    (("--trace", "X", "--tiers", "hbm", "--capacity", "3m"), ("--tiers", "--tier-capacity")),
])
def test_bad_compare_tier_flags(four: str, args, words) -> None:
    args = tuple(four if a == "X" else a for a in args)
    assert_bad_input(run_cli("compare", *args), *words)


@pytest.mark.skipif(not MOONCAKE.exists(), reason="shared Mooncake trace not present")
@pytest.mark.parametrize("caps", ["hbm=2m,dram=3m,ssd=5m", "hbm=500k,dram=1m"])
def test_mooncake_c_never_recomputes_more_than_a(caps: str) -> None:
    tiers = ",".join(c.split("=")[0] for c in caps.split(","))
    out = compare_json("--scenario", "v4-flash-8xh100", "--model", "llama-3-70b", "--trace", str(MOONCAKE),
                       "--tiers", tiers, "--tier-capacity", caps)
    a, c = out["results"]
    assert c["recomputed_tokens"] <= a["recomputed_tokens"]
    if caps == "hbm=500k,dram=1m":  # Llama-3-70B's 167.8 MB blocks: the queue keeps many requests in flight
        assert c["recomputed_tokens"] < a["recomputed_tokens"]
        assert c["peak_pinned_bytes"] > 163e9 and any("overloads" in n for n in out["notes"])
    assert c["prefill_flops"] <= a["prefill_flops"] * (1 + 1e-12)
    rows = {(r["strategy"], r["tier"]): r for r in out["tables"]["tiers"]}
    assert sum(rows[("lru", t)]["hit_tokens"] for t in tiers.split(",")) == a["hit_tokens"]


@pytest.mark.skipif(not MOONCAKE.exists(), reason="shared Mooncake trace not present")
def test_progress_callbacks_every_1000_requests() -> None:
    import kvcalc

    seen: list[int] = []
    req = kvcalc.TierRequest(str(MOONCAKE), ("hbm",))
    kvcalc.tier_trace_result(req, kvcalc.resolve_scenario("v4-flash-8xh100"), seen.append)
    assert seen == [1000, 2000, 3000]  # 3,993 requests


def test_progress_bar_only_on_a_terminal(monkeypatch, tmp_path: Path) -> None:
    """The tiered replay's bar (kvcalc.out.progress, fed by the trace reader) on a terminal only, never with
    --quiet; the bar is erased when the replay ends (the pty test in test_progress.py sees it live)."""
    import io

    from kvcalc.out import progress
    from kvcalc.trace.reader import read_trace

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    path = write(tmp_path / "p.jsonl", [{"timestamp": i, "input_length": 8, "output_length": 1,
                                          "hash_ids": [i, i + 1]} for i in range(50)])
    for stream, quiet, shown in ((Tty(), False, True), (io.StringIO(), False, False), (Tty(), True, False)):
        monkeypatch.setattr(progress, "QUIET", quiet)
        with progress.shown("tiered replay", stream):
            rows = list(read_trace(path, 4))
        assert len(rows) == 50
        assert ("tiered replay: p.jsonl" in stream.getvalue()) is shown, stream.getvalue()


def test_sink_and_window_pins_for_a(tmp_path: Path) -> None:
    # HBM 1 block (4 tokens); [1,2], [3,4], [1,5]: plain A misses r2's block 1; with a 4-token sink A pins 1 and 3
    # for good and r2 reuses 4 tokens; C (its blocks released when done, arrivals 10 s apart) misses like plain A
    path = write(tmp_path / "s.jsonl", [
        {"timestamp": 0, "input_length": 8, "output_length": 1, "hash_ids": [1, 2]},
        {"timestamp": 10000, "input_length": 8, "output_length": 1, "hash_ids": [3, 4]},
        {"timestamp": 20000, "input_length": 8, "output_length": 1, "hash_ids": [1, 5]}])
    base = ("--scenario", "v4-flash-8xh100", "--trace", path, "--block-tokens", "4", "--tiers", "hbm",
            "--tier-capacity", "hbm=4")
    plain = compare_json(*base)["results"]
    pinned = compare_json(*base, "--sink-tokens", "4")
    a, c = pinned["results"]
    assert (plain[0]["used_tokens"], a["used_tokens"], c["used_tokens"]) == (0, 4, 0)
    assert a["peak_pinned_blocks"] == 3 and any("attention sinks" in n for n in pinned["notes"])
    assert_bad_input(run_cli("compare", *base, "--sink-tokens", "-1"), "--sink-tokens")
    assert_bad_input(run_cli("compare", "--window-tokens", "128"), "--window-tokens", "--tiers")


def test_compare_api_equals_cli(four: str) -> None:
    import kvcalc
    from kvcalc.out.render import to_json

    req = kvcalc.TierRequest(four, ("hbm", "dram"), (("hbm", "4"), ("dram", "8")), block_tokens=4)
    api = json.loads(to_json(kvcalc.tier_compare_result(kvcalc.resolve_scenario("v4-flash-8xh100"), req)))
    cli = compare_json("--scenario", "v4-flash-8xh100", "--trace", four, "--block-tokens", "4", "--tiers", "hbm,dram",
                       "--tier-capacity", "hbm=4,dram=8")
    assert api["results"] == cli["results"] and api["tables"] == cli["tables"]
