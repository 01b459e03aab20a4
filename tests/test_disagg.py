"""Prefill/decode disaggregation in compare: hand-off bytes and times by hand, prefetch exposure."""

import pytest
from conftest import assert_bad_input, run_cli
from hypothesis import given
from hypothesis import strategies as st

from kvcalc.model import catalog
from kvcalc.move.handoff import handoff_fields


def test_article_handoff_over_10gbe_by_hand():
    env = run_cli("compare", "--pd-link", "eth-10g", "--format", "json").json()
    a, c = env["results"]
    # A: 320,000 tokens x 6.3 B = 2,016,000 B for 100 requests -> 20,160 B per request
    assert a["kv_handoff_bytes"] == pytest.approx(2_016_000)
    assert a["pd_handoff_bytes_per_request"] == pytest.approx(20_160)
    # 10 GbE: 1.25 GB/s (not the article's 10 GB/s), 50 us TCP latency
    assert a["pd_handoff_s_per_request"] == pytest.approx(50e-6 + 20_160 / 1.25e9)     # 66.13 us
    assert a["pd_handoff_batch_s"] == pytest.approx(50e-6 + 2_016_000 / 1.25e9)        # 1.663 ms
    # C keeps the 196,000 reused tokens' KV on the decode side: (320,000 - 196,000) x 6.3 = 781,200 B
    assert c["kv_handoff_bytes"] == pytest.approx(781_200)
    # overlap: one decode step at 60 tok/s = 16.67 ms hides a 66 us copy completely
    assert a["pd_overlap_s"] == pytest.approx(1 / 60) and a["pd_exposed_s_per_request"] == 0
    assert "disaggregation" in env["tables"]


def test_scenario_preset_and_given_overlap():
    env = run_cli("compare", "--scenario", "v4-flash-pd-ib", "--pd-overlap-us", "100", "--format", "json").json()
    a = env["results"][0]
    # A hands off every request's KV: 20 x 27,528,576 + 80 x 22,441,616 B (entries + 12,206,080 B state)
    per_req = (20 * (3_214_336 + 27_384_000 + 724_160 + 12_206_080)
               + 80 * (3_214_336 + 6_846_000 + 175_200 + 12_206_080)) / 100
    assert a["pd_handoff_bytes_per_request"] == pytest.approx(per_req)
    # NDR 400: 50 GB/s (no measured figure), 3.5 us; exposed = transfer - 100 us
    t = 3.5e-6 + per_req / 50e9
    assert a["pd_handoff_s_per_request"] == pytest.approx(t)
    assert a["pd_exposed_s_per_request"] == pytest.approx(t - 100e-6)


def test_no_link_no_table():
    env = run_cli("compare", "--format", "json").json()
    assert "disaggregation" not in env["tables"] and "pd_link" not in env["results"][0]


@given(nbytes=st.floats(1, 1e12), overlap=st.floats(0, 1), n=st.integers(1, 1000))
def test_property_exposed_within_zero_and_transfer(nbytes, overlap, n):
    row = {"requests": n, "kv_handoff_bytes": nbytes, "decode_tokens_per_s": 50.0, "prefill_time_s": 1.0}
    f = handoff_fields(row, "pcie", catalog.load_link("pcie-gen5-x16"), overlap)
    assert 0 <= f["pd_exposed_s_per_request"] <= f["pd_handoff_s_per_request"]


def test_bad_pd_options():
    assert_bad_input(run_cli("compare", "--pd-link", "ib-ndr"), "ib-ndr400")
    assert_bad_input(run_cli("compare", "--pd-link", "eth-10g", "--pd-overlap-us", "-5"), "--pd-overlap-us")


def test_nothing_decodes_so_nothing_hides_the_handoff():
    # --output-tokens 0: no decode step follows the prefill, so the default overlap window (one decode step) is
    # empty and the whole transfer is exposed: exposed = max(0, transfer - 0) (found by bench/hostile_run.py:
    # it used to divide by the missing decode rate and exit 3)
    r = run_cli("compare", "--model", "llama-3-8b", "--hardware", "h200-sxm", "--gpus", "1", "--pd-link",
                "pcie-gen5-x16", "--requests", "100", "--context", "1k", "--output-tokens", "0", "--format", "json")
    assert r.code == 0, r.err
    for row in r.json()["results"]:
        assert row["pd_overlap_s"] == 0
        assert row["pd_exposed_s_per_request"] == row["pd_handoff_s_per_request"] > 0
