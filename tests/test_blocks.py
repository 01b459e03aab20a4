"""Paged block bytes, page padding, block-table overhead, validity and last-block waste, by hand."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvcalc.memory import blocks
from kvcalc.memory.blocks import paged_bytes_per_token
from kvcalc.model import attention as att
from kvcalc.model import catalog


def groups(name):
    return att.resolve_groups(catalog.load_model(name))


def row(name, block_tokens, **kw):
    return blocks.block_row(name, catalog.load_model(name), block_tokens, blocks.BlockInputs(**kw))


def test_v4_flash_256_token_block_unpadded():
    # paged per token: csa 21 x (584 + 68 fp4 indexer) / 4 = 3,423 + hca 20 x 584 / 128 = 91.25 -> 3,514.25 B;
    # the 2 sliding-window layers (and every layer's 128-token window) live in a separate ring: excluded.
    # x 256 tokens = 899,648 B
    assert blocks.block_bytes_unpadded(groups("deepseek-v4-flash"), 256) == 899_648


def test_v4_flash_256_token_block_padded_to_576():
    # csa page per layer: 256 / 4 = 64 entries x 584 = 37,376 B -> ceil(37,376 / 576) = 65 x 576 = 37,440
    #   + 64 indexer keys x 68 = 4,352 (unpadded) -> 41,792 B per layer x 21 = 877,632
    # hca page per layer: 256 / 128 = 2 entries x 584 = 1,168 B -> ceil(1,168 / 576) = 3 x 576 = 1,728 x 20 = 34,560
    # block = 877,632 + 34,560 = 912,192 B; padding = 912,192 - 899,648 = 12,544 B
    r = row("deepseek-v4-flash", 256)
    assert r["block_bytes"] == 912_192
    assert r["block_bytes_unpadded"] == 899_648
    assert r["padding_bytes"] == 12_544
    assert r["page_align_bytes"] == 576


def test_vllm_c128_page_padding():
    # kv-formulas.md: vLLM pads a C128 page of 2 x 584 = 1,168 B to 1,728 B (3 x 576)
    assert blocks.padded_page_bytes(1_168, 576) == 1_728
    assert blocks.padded_page_bytes(1_152, 576) == 1_152     # already a multiple: unchanged
    assert blocks.padded_page_bytes(1_168, None) == 1_168    # no alignment: unchanged


def test_v4_flash_256_overhead_4_bytes():
    # int32 entry: 4 / 912,192 = 4.3851e-6 (0.00044%); on the unpadded bytes 4 / 899,648 = 4.4462e-6
    r = row("deepseek-v4-flash", 256)
    assert r["metadata_bytes_per_block"] == 4
    assert r["metadata_overhead"] == pytest.approx(4 / 912_192)
    assert r["metadata_overhead"] == pytest.approx(4.3851e-6, rel=1e-4)


def test_llama_70b_16_token_block():
    # 16 x 327,680 = 5,242,880 B (the article's "5.1 MB" block); no padding; 4 / 5,242,880 = 7.629e-7
    r = row("llama-3-70b", 16)
    assert r["block_bytes"] == 5_242_880 and r["padding_bytes"] == 0 and r["page_align_bytes"] is None
    assert r["metadata_overhead"] == pytest.approx(7.629e-7, rel=1e-3)
    assert r["valid"] is True


def test_v32_dsa_block_includes_indexer_keys():
    # 61 x (1,152 bf16 + 132 indexer) = 78,324 B/token (the preset: its config.json, the engines' default); x 64
    assert row("deepseek-v3.2", 64)["block_bytes"] == 64 * 78_324 == 5_012_736
    # DeepSeek's FP8 FlashMLA layout: 61 x (656 + 132) = 48,068 B/token; x 64 = 3,076,352 B
    model = catalog.load_model("deepseek-v3.2")
    fp8 = blocks.block_row("deepseek-v3.2", model, 64, blocks.BlockInputs(), att.KvOptions(mla_layout="fp8-flashmla"))
    assert fp8["block_bytes"] == 3_076_352


def test_article_assumptions_reproduce_its_overhead_and_recommendation():
    # the article: 6.3 B/token, 16-24 B entries. 16 tokens: 100.8 B -> 16 / 100.8 = 15.9%, 24 / 100.8 = 23.8%
    assert row("deepseek-v4-flash-article", 16, entry_bytes=16)["metadata_overhead"] == pytest.approx(16 / 100.8)
    assert row("deepseek-v4-flash-article", 16, entry_bytes=24)["metadata_overhead"] == pytest.approx(0.2381, rel=1e-3)
    # 256 tokens: 1,612.8 B -> 20 B / 1,612.8 = 1.24% (the article's "~1.2%")
    assert row("deepseek-v4-flash-article", 256, entry_bytes=20)["metadata_overhead"] == pytest.approx(0.0124, rel=1e-2)
    # the smallest size under 1% with 16 B entries: 128 -> 16 / 806.4 = 1.98%; 256 -> 16 / 1,612.8 = 0.992%
    m = catalog.load_model("deepseek-v4-flash-article")
    res = blocks.blocks_result([("a", m)], blocks.BlockInputs(entry_bytes=16, max_overhead=0.01))
    assert res.extra[0].rows[0]["recommended_block_tokens"] == 256


def test_validity_v4_needs_multiples_of_128():
    assert [row("deepseek-v4-flash", b)["valid"] for b in (16, 64, 100, 128, 256, 384)] == [
        False, False, False, True, True, True]
    assert all(row("llama-3-70b", b)["valid"] for b in (1, 16, 100))


def test_recommended_is_smallest_valid_under_target():
    m = catalog.load_model("deepseek-v4-flash")
    # 1%: every valid size passes; 16-64 are invalid -> 128
    r = blocks.blocks_result([("f", m)], blocks.BlockInputs())
    assert r.extra[0].rows[0]["recommended_block_tokens"] == 128
    assert [x["block_tokens"] for x in r.rows if x["recommended"]] == [128]
    # 5e-6: 128 gives 4 / 467,904 = 8.55e-6 (too much); 256 gives 4 / 912,192 = 4.39e-6 -> 256
    r = blocks.blocks_result([("f", m)], blocks.BlockInputs(max_overhead=5e-6))
    assert r.extra[0].rows[0]["recommended_block_tokens"] == 256
    # invalid sizes are never recommended, even when they meet the target
    r = blocks.blocks_result([("f", m)], blocks.BlockInputs(block_tokens=(16, 100)))
    assert r.extra[0].rows[0]["recommended_block_tokens"] is None
    assert any("not valid" in n for n in r.notes)


def test_last_block_waste():
    # 3,200 tokens in 256-token blocks: ceil(3,200 / 256) = 13 blocks = 3,328 slots -> 128 unused = 3.85%
    r = row("deepseek-v4-flash", 256, context_tokens=3200)
    assert r["blocks_per_request"] == 13
    assert r["last_block_waste_tokens"] == 128
    assert r["fragmentation"] == pytest.approx(128 / 3328)
    assert r["fragmentation_bytes"] == pytest.approx(128 / 256 * 912_192)    # 456,096 B
    assert r["metadata_bytes_per_request"] == 13 * 4
    # 1,024-token blocks: 4 blocks = 4,096 slots -> 896 unused
    assert blocks.last_block_waste_tokens(3200, 1024) == 896
    assert blocks.last_block_waste_tokens(4096, 256) == 0


def test_tables_multiply_entries():
    # two block tables (e.g. vLLM with two KV-cache groups): 2 x 4 B per block
    r = row("deepseek-v4-flash", 256, tables=2)
    assert r["metadata_bytes_per_block"] == 8
    assert r["metadata_overhead"] == pytest.approx(8 / 912_192)


@pytest.mark.parametrize("name", catalog.names("models"))
@pytest.mark.parametrize("b", [16, 128, 256, 1000])
def test_unaligned_pages_sum_to_paged_bytes_per_token(name, b):
    # the per-group page computation agrees with blocks.paged_bytes_per_token when nothing is padded
    gs = groups(name)
    assert sum(blocks.group_block_bytes(g, b) for g in gs) == pytest.approx(
        b * sum(paged_bytes_per_token(g) for g in gs))


@given(b=st.integers(1, 4096), extra=st.integers(1, 4096))
def test_block_bytes_monotone_and_padding_never_shrinks(b, extra):
    gs = groups("deepseek-v4-flash")
    assert blocks.block_bytes(gs, b, 576) >= blocks.block_bytes_unpadded(gs, b)
    assert blocks.block_bytes(gs, b + extra, 576) >= blocks.block_bytes(gs, b, 576)
    assert blocks.block_bytes_unpadded(gs, b + extra) > blocks.block_bytes_unpadded(gs, b)


@given(t=st.integers(1, 2**20), b=st.integers(1, 4096))
def test_waste_within_one_block(t, b):
    w = blocks.last_block_waste_tokens(t, b)
    assert 0 <= w < b
    assert (t + w) % b == 0
    assert 0 <= blocks.fragmentation(t, b) < 1
