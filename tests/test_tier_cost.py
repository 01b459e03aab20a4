"""``kvcalc trace --tiers``: per-tier hits, load vs recompute and capacities by hand; bad tier specs exit 2;
the Mooncake tiers add up to the single cache at the summed capacity (skipped without the shared folder)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REAL_TRACES, assert_bad_input, run_cli
from test_cli_trace import four, write  # noqa: F401 (four is a fixture)


def tiers_json(*args: str) -> dict:
    r = run_cli("trace", *args, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)


LLAMA_TOKEN_BYTES = 327_680  # 80 layers x 2 (K, V) x 8 KV heads x 128 x 2 B (BF16)
# 2 x (active params - input embedding - LM head) / (8 x H100 FP8 dense x MFU 0.2), the v4-flash-8xh100 scenario's
# peak and MFU: 2 x (70,553,706,496 - 2 x 128,256 x 8,192) = 136,904,720,384 FLOP / 3.16624e15 FLOP/s = 43.24 us
LLAMA_PREFILL_S = 2 * (70_553_706_496 - 2 * 128_256 * 8_192) / (8 * 1978.9e12 * 0.2)


def test_two_tiers_by_hand(four: str) -> None:
    # 4-token blocks; HBM 4 tokens = 1 block, DRAM 8 tokens = 2 blocks; stack listed most recent first.
    # r1 [1,2] 8 tok: no hits; stack 2 1
    # r2 [1,2,3] 10 tok: 1 at depth 2 -> DRAM (4 tok), 2 at depth 1 -> HBM (4 tok); stack 3 2 1
    # r3 [1,2,3] 9 tok: 1 depth 3 -> DRAM (4), 2 depth 2 -> DRAM (4), 3 depth 1 -> HBM (min(4, 9 - 8) = 1)
    # r4 [4,5]: new. HBM: 2 blocks, 5 tokens, 2 requests; DRAM: 3 blocks, 12 tokens, 2 requests; 17 = 3-block LRU
    out = tiers_json(four, "-b", "4", "--model", "llama-3-70b", "--hardware", "h100-sxm", "--gpus", "8",
                     "--tiers", "hbm,dram", "--tier-capacity", "hbm=4,dram=8")
    hbm, dram = out["results"]
    assert (hbm["hit_blocks"], hbm["hit_tokens"], hbm["hit_requests"]) == (2, 5, 2)
    assert (dram["hit_blocks"], dram["hit_tokens"], dram["hit_requests"]) == (3, 12, 2)
    assert hbm["input_share"] == pytest.approx(5 / 33) and dram["input_share"] == pytest.approx(12 / 33)
    block = 4 * LLAMA_TOKEN_BYTES  # 1,310,720 B
    assert dram["bytes_loaded"] == 3 * block and hbm["bytes_loaded"] == 0
    # pcie-gen5-x16 (the H100's host_link): measured 55.5 GB/s, 6 us per copy
    assert dram["load_coalesced_s"] == pytest.approx(2 * 6e-6 + 3 * block / 55.5e9)  # 82.85 us
    assert dram["load_per_block_s"] == pytest.approx(3 * 6e-6 + 3 * block / 55.5e9)  # 88.85 us
    assert dram["load_s"] == dram["load_coalesced_s"]
    assert dram["prefill_avoided_s"] == pytest.approx(12 * LLAMA_PREFILL_S)  # 12 x 43.24 us = 519 us
    assert (hbm["verdict"], dram["verdict"]) == ("in place", "load")
    assert dram["breakeven_bandwidth_bytes_per_s"] == pytest.approx(LLAMA_TOKEN_BYTES / LLAMA_PREFILL_S)  # 7.35 GB/s
    summary = out["tables"]["summary"][0]
    assert (summary["hit_tokens"], summary["single_cache_reused_tokens"], summary["used_tokens"]) == (17, 17, 17)


def test_slow_link_is_recomputed(four: str) -> None:
    # 10 GbE: one block loads in 50 us + 1,310,720 B / 1.25 GB/s = 1.099 ms > 4 tokens x 44.6 us = 178 us of
    # prefill -> recompute; the tier's load: 2 x 50 us + 3,932,160 B / 1.25 GB/s = 3.246 ms
    out = tiers_json(four, "-b", "4", "--model", "llama-3-70b", "--hardware", "h100-sxm", "--gpus", "8",
                     "--tiers", "hbm,dram", "--tier-capacity", "hbm=4", "--tier-capacity", "dram=8",
                     "--tier-link", "dram=eth-10g")
    dram = out["results"][1]
    assert dram["load_s"] == pytest.approx(2 * 50e-6 + 3 * 4 * LLAMA_TOKEN_BYTES / 1.25e9)
    assert dram["verdict"] == "recompute"
    assert (dram["used_tokens"], dram["recomputed_tokens"], dram["time_saved_s"]) == (0, 12, 0.0)


def test_hbm_budget_after_weights(tmp_path: Path) -> None:
    # Llama-3-70B on 8 x H100: per GPU the 79.19 GiB CUDA reports x 0.9 - 70,553,706,496 x 2 B / 8
    # = 76,526,653,538.3 - 17,638,426,624 = 58,888,226,914 B; a GPU holds 1/8 of each 512-token block (8 KV heads
    # over 8 GPUs): 512 x 327,680 / 8 = 20,971,520 B -> floor(2,808.01) = 2,808
    # DRAM: 256 GB x 8 = 2.048 TB / 167,772,160 B = 12,207 blocks; SSD: 3,840 GB x 8 / that = 183,105 blocks
    one = write(tmp_path / "one.jsonl", [{"timestamp": 0, "input_length": 512, "output_length": 1, "hash_ids": [7]}])
    out = tiers_json(one, "--model", "llama-3-70b", "--hardware", "h100-sxm", "--gpus", "8", "--tiers", "hbm,dram,ssd")
    assert [r["capacity_blocks"] for r in out["results"]] == [2808, 12207, 183105]
    assert [r["link"] for r in out["results"]] == ["in place", "pcie-gen5-x16", "nvme-gen5"]


def test_one_tier_equals_the_single_capacity_replay(four: str) -> None:
    single = run_cli("trace", four, "-b", "4", "--capacity", "8", "--format", "json")
    reused = json.loads(single.out)["results"][0]["reused_tokens"]
    out = tiers_json(four, "-b", "4", "--tiers", "hbm", "--tier-capacity", "hbm=8")
    assert out["results"][0]["hit_tokens"] == reused == 8


@pytest.mark.parametrize("args, words", [
    (("--tiers", "hbm,nvram"), ("--tiers", "nvram")),
    (("--tiers", "hbm,ssd,dram"), ("--tiers", "out of order")),
    (("--tiers", "dram,ssd"), ("--tiers", "hbm")),
    (("--tiers", "hbm,hbm"), ("--tiers", "twice")),
    (("--tiers", "hbm,dram", "--tier-capacity", "dram=-1TB"), ("--tier-capacity dram", ">= 0")),
    (("--tiers", "hbm,dram", "--tier-capacity", "flash=1TB"), ("--tier-capacity", "flash")),
    (("--tiers", "hbm,dram", "--tier-capacity", "ssd=1TB"), ("--tier-capacity", "ssd", "not in --tiers")),
    (("--tiers", "hbm,dram", "--tier-capacity", "dram"), ("--tier-capacity", "tier=value")),
    (("--tiers", "hbm,dram", "--tier-link", "dram="), ("--tier-link", "dram", "no link")),
    (("--tiers", "hbm,dram", "--tier-link", "hbm=nvlink4"), ("--tier-link", "hbm")),
    (("--tiers", "hbm,dram", "--tier-link", "dram=pcie-gen9"), ("--tier-link dram", "pcie-gen")),
    (("--tiers", "hbm,dram", "--hardware", "a100-80g"), ("dram", "host_dram_gb_per_gpu")),
    (("--tiers", "hbm", "--tier-copies", "some"), ("--tier-copies",)),
    (("--tier-link", "dram=nvme-gen5"), ("--tier-link", "--tiers")),
])
def test_bad_tier_specs(four: str, args, words) -> None:
    assert_bad_input(run_cli("trace", four, *args), *words)


@pytest.mark.parametrize("path", REAL_TRACES)
@pytest.mark.parametrize("caps", ["dram=3m,ssd=10m", "hbm=300k,dram=1m,ssd=3m"])
def test_mooncake_tiers_add_up_to_the_summed_capacity(path, caps) -> None:
    # V4 Flash on 8 x H100 (the default scenario): HBM 28,964 blocks, or 300k tokens; tokens for DRAM and SSD
    out = tiers_json(str(path), "--tiers", "hbm,dram,ssd", "--tier-capacity", caps)
    rows = out["results"]
    total_blocks = sum(r["capacity_blocks"] for r in rows)
    single = run_cli("trace", str(path), "--capacity", str(total_blocks * 512), "--format", "json")
    assert sum(r["hit_tokens"] for r in rows) == json.loads(single.out)["results"][0]["reused_tokens"]


def test_api_equals_cli(four: str) -> None:
    import kvcalc
    from kvcalc.out.render import to_json

    req = kvcalc.TierRequest(four, ("hbm", "dram"), (("hbm", "4"), ("dram", "8")), block_tokens=4)
    inp = kvcalc.resolve_scenario("v4-flash-8xh100")
    cli = tiers_json(four, "-b", "4", "--tiers", "hbm,dram", "--tier-capacity", "hbm=4,dram=8")
    assert json.loads(to_json(kvcalc.tier_trace_result(req, inp)))["results"] == cli["results"]


def test_block_load_vs_block_prefill(four: str) -> None:
    # one 4-token Llama block (1,310,720 B) over PCIe Gen5: 6 us + 1,310,720 / 55.5e9 = 29.6 us; prefill 4 x 44.6 us
    dram = tiers_json(four, "-b", "4", "--model", "llama-3-70b", "--tiers", "hbm,dram",
                      "--tier-capacity", "hbm=4,dram=8")["results"][1]
    assert dram["block_load_s"] == pytest.approx(6e-6 + 4 * LLAMA_TOKEN_BYTES / 55.5e9)
    assert dram["block_prefill_s"] == pytest.approx(4 * LLAMA_PREFILL_S)


@pytest.mark.parametrize("args, flag", [(("--capacity", "3m"), "--capacity"), (("--curve",), "--curve"),
                                        (("--policy", "fifo"), "--policy")])
def test_replay_flags_are_not_for_tiers(four: str, args, flag) -> None:
    assert_bad_input(run_cli("trace", four, "-b", "4", "--tiers", "hbm", *args), flag, "--tiers")
