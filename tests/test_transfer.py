"""Alpha-beta transfer times, copies, prefetch overlap and reuse vs recompute, by hand."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvcalc.model import catalog
from kvcalc.move import links
from kvcalc.move.links import (breakeven_bandwidth_bytes_per_s, exposed_prefetch_s, separate_copies_time_s,
                               transfer_time_s)
from kvcalc.serve import transfer
from kvcalc.serve.compute import prefill_s_per_token
from kvcalc.serve.transfer import TransferInputs

PCIE5 = catalog.load_link("pcie-gen5-x16")


def test_101_bytes_over_pcie_is_latency_not_bandwidth():
    # the article: 101 B / 64 GB/s = 0.0016 us. With the 6 us per-copy latency:
    # 6e-6 + 101 / 63e9 = 6e-6 + 1.603e-9 = 6.0016e-6 s
    bw = PCIE5.bandwidth_bytes_per_s("theoretical")
    assert bw == 63e9 and PCIE5.latency_s == 6e-6
    t = transfer_time_s(101, PCIE5.latency_s, bw)
    assert t == pytest.approx(6.0016e-6, rel=1e-5)
    assert links.latency_share(PCIE5.latency_s, t) == pytest.approx(0.99973, rel=1e-5)
    assert links.bound(links.latency_share(PCIE5.latency_s, t)) == "latency"


def test_llama_16_token_block_over_pcie():
    # 16 x 327,680 = 5,242,880 B: 6e-6 + 5,242,880 / 63e9 = 6e-6 + 83.22e-6 = 89.22e-6 s
    t = transfer_time_s(5_242_880, 6e-6, 63e9)
    assert t == pytest.approx(89.22e-6, rel=1e-4)
    # latency share 6 / 89.22 = 6.7%: bandwidth-bound
    assert links.bound(6e-6 / t) == "bandwidth"


def test_measured_bandwidth_is_the_default():
    # PCIe Gen5 measured 55.5 GB/s (nvbandwidth): 6e-6 + 5,242,880 / 55.5e9 = 100.47e-6 s
    assert PCIE5.bandwidth_bytes_per_s() == 55.5e9
    assert transfer_time_s(5_242_880, PCIE5.latency_s, PCIE5.bandwidth_bytes_per_s()) == pytest.approx(
        100.466e-6, rel=1e-4)


def test_separate_vs_coalesced():
    # 16 blocks of 5,242,880 B: separate = 16 x 6 us + 83,886,080 / 63e9 = 96e-6 + 1.33153e-3 = 1.42753e-3 s
    # coalesced = 6e-6 + 1.33153e-3 = 1.33753e-3 s
    assert separate_copies_time_s(16 * 5_242_880, 16, 6e-6, 63e9) == pytest.approx(1.42753e-3, rel=1e-5)
    assert transfer_time_s(16 * 5_242_880, 6e-6, 63e9) == pytest.approx(1.33753e-3, rel=1e-5)


def test_effective_bandwidth():
    # 101 B in 6.0016 us = 16.83 MB/s: the link looks 3,700x slower than its 63 GB/s
    assert links.effective_bandwidth_bytes_per_s(101, 6.0016e-6) == pytest.approx(16.829e6, rel=1e-4)


def test_exposed_prefetch():
    assert exposed_prefetch_s(10e-3, 3e-3) == pytest.approx(7e-3)
    assert exposed_prefetch_s(3e-3, 10e-3) == 0.0
    assert exposed_prefetch_s(5e-3, 0.0) == 5e-3
    assert list(exposed_prefetch_s(np.array([1.0, 5.0]), 2.0)) == [0.0, 3.0]


def test_prefill_per_token_v4_flash_8xh100():
    # 2 x (13e9 - 2 x 129,280 x 4,096 embedding + LM head = 11,940,938,240) = 23,881,876,480 FLOP
    # / (8 x 1,978.9e12 x 0.2 = 3.16624e15 FLOP/s) = 7.54266e-6 s/token
    hw = catalog.load_hardware("h100-sxm")
    s = prefill_s_per_token(catalog.load_model("deepseek-v4-flash"), 8, hw.peak_flops("fp8"), 0.2)
    assert s == pytest.approx(7.54266e-6, rel=1e-5)


def test_breakeven_bandwidth_llama_70b():
    # prefill 2 x (70,553,706,496 - 2 x 128,256 x 8,192 = 68,452,360,192) / 3.16624e15 = 4.32389e-5 s/token;
    # KV 327,680 B/token; break-even = 327,680 / 4.32389e-5 = 7.5784e9 B/s: PCIe Gen5 (55.5 GB/s) loads faster
    s = prefill_s_per_token(catalog.load_model("llama-3-70b"), 8, 1978.9e12, 0.2)
    assert breakeven_bandwidth_bytes_per_s(327_680, s) == pytest.approx(7.5784e9, rel=1e-4)


def test_payloads_v4_flash_4k():
    # request: 17,608,704 stored + 12,206,080 fixed state = 29,814,784 B; 4,096 / 256 = 16 blocks
    # block: 912,192 B (padded to 576 B pages, see test_blocks); batch: 100 requests
    pls = {p.name: p for p in transfer.payloads(catalog.load_model("deepseek-v4-flash"), TransferInputs())}
    assert pls["block"].nbytes == 912_192 and pls["block"].copies == 1 and pls["block"].tokens == 256
    assert pls["request"].nbytes == 29_814_784 and pls["request"].copies == 16
    assert pls["batch"].nbytes == 100 * 29_814_784 and pls["batch"].copies == 1600
    assert pls["batch"].tokens == 409_600


def test_transfer_row_v4_block_over_pcie_measured():
    # 6e-6 + 912,192 / 55.5e9 = 6e-6 + 16.436e-6 = 22.436e-6 s; latency share 6 / 22.436 = 26.7%
    # effective 912,192 / 22.436e-6 = 40.66 GB/s; prefill of 256 tokens = 256 x 8.2116e-6 = 2.102e-3 s
    p = links.Payload("block", 256, 912_192, 1)
    r = transfer.transfer_row("f", p, "pcie", PCIE5, TransferInputs(overlap_s=10e-6), 8.2116e-6)
    assert r["time_s"] == pytest.approx(22.436e-6, rel=1e-4)
    assert r["latency_share"] == pytest.approx(0.26743, rel=1e-3)
    assert r["effective_bandwidth_bytes_per_s"] == pytest.approx(40.66e9, rel=1e-3)
    assert r["time_separate_s"] == r["time_coalesced_s"] == r["time_s"]
    assert r["prefill_s"] == pytest.approx(2.1022e-3, rel=1e-4)
    # exposed with a 10 us overlap window: 22.436 - 10 = 12.436 us
    assert r["exposed_s"] == pytest.approx(12.436e-6, rel=1e-3)


def test_tier_row_dram_over_pcie():
    # load: 6e-6 + 29,814,784 / 55.5e9 = 6e-6 + 537.2e-6 = 543.2e-6 s
    # recompute: 4,096 x 8.2116e-6 = 33.635e-3 s; floor(1e12 / 29,814,784) = floor(33,540.1) = 33,540 requests
    # break-even: 29,814,784 / 4,096 = 7,279 B/token / 8.2116e-6 = 886.4e6 B/s
    r = transfer.tier_row("dram", 1e12, "pcie", PCIE5, 29_814_784, TransferInputs(), 8.2116e-6)
    assert r["load_s"] == pytest.approx(543.2e-6, rel=1e-4)
    assert r["recompute_s"] == pytest.approx(33.635e-3, rel=1e-4)
    assert r["requests_fit"] == 33_540
    assert r["breakeven_bandwidth_bytes_per_s"] == pytest.approx(886.4e6, rel=1e-3)
    assert r["load_wins"] is True


def test_result_flags_invalid_block_and_keeps_tiers():
    m = catalog.load_model("deepseek-v4-flash")
    res = transfer.transfer_result("f", m, [("pcie", PCIE5)], "h100", catalog.load_hardware("h100-sxm"),
                                   TransferInputs(block_tokens=16), tiers=[("dram", 1e12, "pcie", PCIE5)])
    assert res.inputs["block_valid"] is False and all(r["block_valid"] is False for r in res.rows)
    assert any("not valid" in n for n in res.notes)
    assert [r["payload"] for r in res.rows] == ["block", "request", "batch"]
    assert res.extra[0].name == "tiers" and res.extra[0].rows[0]["tier"] == "dram"


pos = st.floats(1e-3, 1e13, allow_nan=False)
lat = st.floats(0, 1e-2, allow_nan=False)
bw = st.floats(1e6, 1e13, allow_nan=False)


@given(a=pos, b=pos, latency=lat, bandwidth=bw)
def test_time_monotone_in_bytes(a, b, latency, bandwidth):
    lo, hi = sorted((a, b))
    assert transfer_time_s(lo, latency, bandwidth) <= transfer_time_s(hi, latency, bandwidth)


@given(n=pos, copies=st.integers(1, 10**6), latency=lat, bandwidth=bw)
def test_coalesced_never_slower_than_separate(n, copies, latency, bandwidth):
    assert transfer_time_s(n, latency, bandwidth) <= separate_copies_time_s(n, copies, latency, bandwidth)


@given(t=st.floats(0, 1e4, allow_nan=False), overlap=st.floats(0, 1e4, allow_nan=False))
def test_exposed_within_zero_and_transfer(t, overlap):
    e = exposed_prefetch_s(t, overlap)
    assert 0 <= e <= t


@given(n=pos, latency=st.floats(1e-9, 1e-2), bandwidth=bw)
def test_latency_share_is_a_fraction(n, latency, bandwidth):
    t = transfer_time_s(n, latency, bandwidth)
    assert 0 < links.latency_share(latency, t) <= 1
    assert links.effective_bandwidth_bytes_per_s(n, t) <= bandwidth * (1 + 1e-12)


def test_vectorised_equals_scalar_loop():
    sizes = np.array([1.0, 101.0, 5_242_880.0, 2.98e9])
    vec = transfer_time_s(sizes, 6e-6, 63e9)
    assert np.allclose(vec, [transfer_time_s(float(s), 6e-6, 63e9) for s in sizes], rtol=0, atol=0)
    assert math.isclose(vec[1], 6.0016e-6, rel_tol=1e-5)
