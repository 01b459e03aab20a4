"""Requests that fit after the weights, block bytes and page-in time, by hand."""

import math

import pytest
from conftest import validate_model
from hypothesis import given
from hypothesis import strategies as st

from kvcalc.memory.capacity import CapacityInputs, capacity_row
from kvcalc.model import catalog
from kvcalc.model.schema import ModelPreset


def row(model, hw="h100-sxm", link="pcie-gen5-x16", **kw):
    m = catalog.load_model(model) if isinstance(model, str) else model
    return capacity_row("m", m, hw, catalog.load_hardware(hw), link, catalog.load_link(link),
                        CapacityInputs(**kw))


def test_v4_flash_on_8xh100():
    r = row("deepseek-v4-flash")
    # per GPU: 79.19 GiB as CUDA reports an H100 (85,029,615,042.56 B) x 0.9 - 155,926,583,096 B (the release's
    # FP4-expert weights) / 8 = 76,526,653,538.3 - 19,490,822,887 = 57,035,830,651.3 B; latent replicated
    assert r["kv_budget_bytes_per_gpu"] == pytest.approx(57_035_830_651.3)
    assert r["kv_budget_bytes"] == pytest.approx(8 * 57_035_830_651.3)
    # one 4K request: 17,608,704 + 12,206,080 state = 29,814,784 B -> floor(57,035,830,651 / 29,814,784) = 1,913
    assert r["kv_bytes_per_request"] == 29_814_784
    assert r["max_requests"] == 1913
    # 16-token block of the paged compressed cache, each layer's page padded to 576 B (FlashMLA):
    # CSA: 16/4 = 4 entries x 584 = 2,336 -> 5 x 576 = 2,880, + 4 x 68 indexer = 3,152 B, x 21 = 66,192
    # HCA: 16/128 of an entry x 584 = 73 -> 576 B, x 20 = 11,520; total 77,712 B (unpadded 56,228)
    assert r["block_bytes"] == pytest.approx(77_712)
    assert r["block_valid"] is False          # V4 engines need multiples of 128 tokens
    # page-in over PCIe Gen5 (measured 55.5 GB/s, 6 us per copy): 6e-6 + 77,712 / 55.5e9 = 7.400 us
    assert r["block_page_in_s"] == pytest.approx(6e-6 + 77_712 / 55.5e9)


def test_mha_example_shards_by_head():
    r = row("mha-96l-64h")
    # weights 100e9 x 2 B / 8 = 25e9 per GPU; budget 79.19 GiB x 0.9 - 25e9 = 51,526,653,538 B per GPU
    # per GPU per request: 3,145,728 x 4,096 / 8 (64 heads over 8 ranks) = 1,610,612,736 -> floor(31.99) = 31
    assert r["kv_bytes_per_request_per_gpu"] == 3_145_728 * 4096 / 8
    assert r["max_requests"] == 31
    # 16-token block: 16 x 3,145,728 = 50,331,648 B; each of the 8 ranks holds 8 of the 64 heads and pages in
    # its own eighth over its own PCIe link: 6 us + 6,291,456 / 55.5e9 = 119.4 us (was the whole block: 912.9 us)
    assert r["block_bytes"] == 50_331_648 and r["block_bytes_per_gpu"] == 6_291_456
    assert r["block_page_in_s"] == pytest.approx(6e-6 + 6_291_456 / 55.5e9)


def test_llama_70b_tp8_one_head_per_gpu():
    r = row("llama-3-70b")
    budget = 79.19 * 2**30 * 0.9 - 70_553_706_496 * 2 / 8  # 58,888,226,914 B per GPU (exact params, config)
    per_gpu = 327_680 * 4096 / 8                         # 167,772,160 B: 1 of 8 KV heads per rank
    assert r["max_requests"] == math.floor(budget / per_gpu) == 351


def test_the_ideal_budget_is_the_memory_cuda_reports_and_the_article_table_keeps_80_gb():
    # the ideal view budgets what CUDA reports (h100-sxm: 79.19 GiB), where the preset says; else the datasheet GB
    assert row("llama-3-70b")["hbm_bytes_per_gpu"] == 79.19 * 2**30
    assert row("llama-3-70b", hw="h800-sxm")["hbm_bytes_per_gpu"] == 80e9      # no cuda_total_gib: datasheet
    from conftest import run_cli
    import json

    r = run_cli("capacity", "--format", "json")   # the article's table: its stated 80 GB per H100
    assert {x["hbm_bytes_per_gpu"] for x in json.loads(r.out)["results"]} == {80e9}


def test_tp_beyond_kv_heads_replicates():
    # 16 GPUs, 8 KV heads: each rank still holds one whole head (ceil(8/16) = 1), i.e. 1/8 of the KV
    r = row("llama-3-70b", gpus=16)
    assert r["kv_bytes_per_request_per_gpu"] == 327_680 * 4096 / 8


def test_weights_that_do_not_fit_are_flagged_not_negative():
    r = row("deepseek-v3")   # 671e9 B / 8 = 83.9e9 > 76.5e9 usable (79.19 GiB x 0.9)
    assert r["weights_fit"] is False and r["max_requests"] == 0 and r["kv_budget_bytes"] == 0


def test_dp_attention_multiplies_by_gpus():
    r = row("deepseek-v4-flash", attention="dp")
    assert r["max_requests"] == 8 * 1913


def test_reserve_and_utilisation():
    r = row("deepseek-v4-flash", hbm_utilization=0.95, reserve_bytes_per_gpu=4e9)
    # 79.19 GiB x 0.95 - 19,490,822,887 - 4e9 = 57,287,311,403 B -> floor(/ 29,814,784) = 1,921
    assert r["max_requests"] == 1921


def _scaled(layers: int, params: float) -> ModelPreset:
    return validate_model(dict(
        schema_version=1, source="t", display_name="t", params_total_b=params, params_active_b=params,
        weight_bytes_per_param=2, layer_groups=[{"kind": "full", "layers": layers, "kv_heads": 8, "head_dim": 128}]))


@given(l1=st.integers(1, 200), l2=st.integers(1, 200), p1=st.floats(1, 300), p2=st.floats(1, 300),
       ctx=st.integers(1, 200_000))
def test_property_capacity_never_rises_with_a_bigger_model(l1, l2, p1, p2, ctx):
    small = row(_scaled(min(l1, l2), min(p1, p2)), context_tokens=ctx)
    big = row(_scaled(max(l1, l2), max(p1, p2)), context_tokens=ctx)
    assert big["max_requests"] <= small["max_requests"]
