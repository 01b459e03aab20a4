"""KV bytes per token and per request, pinned to the hand-computed values of reference/kv-formulas.md."""

import numpy as np
import pytest
from conftest import validate_model
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.model import attention as att
from kvcalc.model import catalog
from kvcalc.model.kv import kv_profile, long_context_bytes_per_token, read_bytes, request_bytes
from kvcalc.model.schema import ModelPreset


def groups(name, **opts):
    return att.resolve_groups(catalog.load_model(name), att.KvOptions(**opts))


def per_token(name, **opts):
    # bytes of a 1-token request, no state: the per-token figure of a dense model
    return request_bytes(groups(name, **opts), 1, include_state=False)


# 2 (K,V) x layers x kv_heads x head_dim x 2 B (BF16)
@pytest.mark.parametrize("name,expected", [
    ("llama-3-8b", 2 * 32 * 8 * 128 * 2),      # 131,072
    ("llama-3-70b", 2 * 80 * 8 * 128 * 2),     # 327,680 (the article's "~320 KB")
    ("qwen2.5-7b", 2 * 28 * 4 * 128 * 2),      # 57,344
    ("mistral-7b-v0.1", 2 * 32 * 8 * 128 * 2),  # 131,072
    ("mha-96l-64h", 2 * 96 * 64 * 128 * 2),    # 3,145,728 (the article says ~320 KB)
])
def test_full_attention_bytes_per_token(name, expected):
    assert per_token(name) == expected


def test_published_gqa_values():
    assert per_token("llama-3-70b") == 327_680
    assert per_token("mha-96l-64h") == 3_145_728
    assert per_token("llama-3-70b", kv_dtype="fp8") == 163_840   # FP8 halves it
    assert per_token("llama-3-70b", kv_dtype="int4") == 81_920


def test_mla_layouts_deepseek_v3():
    assert per_token("deepseek-v3") == 70_272                          # (512 + 64) x 2 x 61
    assert per_token("deepseek-v3", mla_layout="fp8") == 35_136        # 576 x 61
    assert per_token("deepseek-v3", mla_layout="fp8-flashmla") == 40_016  # 656 x 61
    assert per_token("deepseek-v3", mtp=True) == 70_272 + 1_152        # MTP adds one layer


def test_v32_mla_plus_indexer():
    # the preset follows its config.json and the engines' default KV dtype (auto = bf16): (1,152 + 132) x 61
    assert per_token("deepseek-v3.2") == 78_324
    assert per_token("deepseek-v3.2", mla_layout="fp8-flashmla") == 48_068  # DeepSeek's FP8 layout: (656 + 132) x 61


def test_v4_flash_reference_values():
    g = groups("deepseek-v4-flash")
    # 43 x 128 x 584 + 21 x 1,024 x (584 + 68) + 20 x 32 x 584 = 3,214,336 + 14,020,608 + 373,760
    assert request_bytes(g, 4096, include_state=False) == 17_608_704
    # 43 x 128 x 584 + 21 x 262,144 x 652 + 20 x 8,192 x 584
    assert request_bytes(g, 1_048_576, include_state=False) == 3_688_172_544
    # state: 21 x (65,536 + 16,384) + 20 x 524,288 = 12,206,080 B (12.2 MB)
    assert request_bytes(g, 4096) - request_bytes(g, 4096, include_state=False) == 12_206_080
    # growth at long context: 21 x 652 / 4 + 20 x 584 / 128 = 3,514.25 B/token (FP4 indexer)
    assert long_context_bytes_per_token(g) == pytest.approx(3514.25)
    # FP8 indexer: 21 x 716 / 4 + 91.25 = 3,850.25
    assert long_context_bytes_per_token(groups("deepseek-v4-flash", indexer_dtype="fp8")) == pytest.approx(3850.25)


def test_v4_pro_reference_values():
    g = groups("deepseek-v4-pro")
    # 61 x 128 x 584 + 30 x 1,024 x 652 + 31 x 32 x 584 = 4,559,872 + 20,029,440 + 579,328
    assert request_bytes(g, 4096, include_state=False) == 25_168_640
    # state: 30 x 81,920 + 31 x 524,288 = 18,710,528 (18.7 MB)
    assert request_bytes(g, 4096) - request_bytes(g, 4096, include_state=False) == 18_710_528
    assert long_context_bytes_per_token(g) == pytest.approx(5031.4375)


def test_v4_to_v32_ratios_at_1m():
    L = 1_048_576
    v32 = request_bytes(groups("deepseek-v3.2", mla_layout="fp8-flashmla"), L)  # the paper's V3.2: its FP8 layout
    flash = request_bytes(groups("deepseek-v4-flash"), L, include_state=False)
    pro = request_bytes(groups("deepseek-v4-pro"), L, include_state=False)
    assert round(100 * flash / v32, 1) == 7.3    # the paper's "7%"
    assert round(100 * pro / v32, 1) == 10.5     # the paper's "10%"
    # Pro is ~2% of a BF16 GQA-8 head_dim-128 model at 1M: 5,031 / 249,856
    assert long_context_bytes_per_token(groups("deepseek-v4-pro")) / 249_856 == pytest.approx(0.0201, abs=1e-4)


def test_article_flat_figure():
    g = groups("deepseek-v4-flash-article")
    assert request_bytes(g, 4096) == pytest.approx(6.3 * 4096)   # 25,804.8 B: the article's "~25 KB"


def test_sliding_window_caps_at_window():
    g = groups("mistral-7b-v0.1")
    assert request_bytes(g, 4096) == 131_072 * 4096
    assert request_bytes(g, 100_000) == 131_072 * 4096


def test_decode_reads_top_k_only_for_sparse_layers():
    # V3.2 at 8,192 tokens: main cache top-2048 x 656 + every indexer key 8,192 x 132, x 61 layers
    assert read_bytes(groups("deepseek-v3.2", mla_layout="fp8-flashmla"), 8192) == 61 * (2048 * 656 + 8192 * 132)
    # V4 Flash CSA at 4,096: window 128 + top-512 of 1,024 compressed entries x 584 + 1,024 x 68 indexer
    g = [x for x in groups("deepseek-v4-flash") if x.kind == "csa"][0]
    assert att.read_bytes_per_step(g, 4096) == 21 * ((128 + 512) * 584 + 1024 * 68)


def _model(groups_toml: list[dict], **kw) -> ModelPreset:
    base = dict(schema_version=1, source="test", display_name="t", params_total_b=1, params_active_b=1,
                weight_bytes_per_param=2)
    return validate_model(base | kw | {"layer_groups": groups_toml})


def test_limit_mqa_is_gqa_with_one_kv_head():
    mqa = _model([{"kind": "full", "layers": 10, "kv_heads": 1, "head_dim": 128}])
    # 2 x 10 x 1 x 128 x 2 = 5,120
    assert request_bytes(att.resolve_groups(mqa), 1) == 5_120


@given(L=st.integers(1, 200_000), W=st.integers(1, 300_000))
def test_limit_window_at_least_L_equals_full(L, W):
    full = _model([{"kind": "full", "layers": 4, "kv_heads": 2, "head_dim": 64}])
    swa = _model([{"kind": "full", "layers": 4, "kv_heads": 2, "head_dim": 64, "window_tokens": W}])
    a, b = request_bytes(att.resolve_groups(full), L), request_bytes(att.resolve_groups(swa), L)
    assert (a == b) if W >= L else (b < a)


@given(L=st.integers(1, 200_000))
def test_limit_ratio_one_equals_full(L):
    comp = _model([{"kind": "compressed", "name": "c", "layers": 3, "window_tokens": 0, "ratio": 1,
                    "entry_bytes": 512}])
    # full attention with 1 KV head of (128 + 128) x 2 B = 512 B per layer per token
    full = _model([{"kind": "full", "layers": 3, "kv_heads": 1, "head_dim": 128}])
    assert request_bytes(att.resolve_groups(comp), L) == request_bytes(att.resolve_groups(full), L)


MODELS = catalog.names("models")


@settings(max_examples=60)
@given(name=st.sampled_from(MODELS), a=st.integers(1, 2_000_000), b=st.integers(1, 2_000_000))
def test_property_bytes_monotone_and_stored_at_least_read(name, a, b):
    g = att.resolve_groups(catalog.load_model(name))
    lo, hi = min(a, b), max(a, b)
    # chunked local attention holds only the current chunk, ((L - 1) mod C) + 1 entries: a saw-tooth, not monotone
    # (llama-4-scout: 2,050 tokens hold more than 8,193); every other group grows with L
    growing = [x for x in g if x.chunk_tokens is None]
    assert request_bytes(growing, lo) <= request_bytes(growing, hi)
    for x in g:  # a chunked group never holds more than one full chunk
        if x.chunk_tokens is not None:
            assert request_bytes([x], hi) <= request_bytes([x], x.chunk_tokens)
    # a step reads at most what is stored; a recurrent group (linear attention, Mamba) also reads its whole state
    recurrent_state = sum(att.state_bytes(x) for x in g if x.kind in att.RECURRENT_KINDS)
    assert read_bytes(g, hi) <= request_bytes(g, hi, include_state=False) + recurrent_state


@given(L=st.integers(1, 100_000))
def test_property_monotone_in_dtype_bits(L):
    g = {d: att.resolve_groups(catalog.load_model("llama-3-8b"), att.KvOptions(kv_dtype=d))
         for d in ("int4", "fp8", "bf16", "fp32")}
    sizes = [request_bytes(g[d], L) for d in ("int4", "fp8", "bf16", "fp32")]
    assert sizes == sorted(sizes) and len(set(sizes)) == 4


@pytest.mark.parametrize("name", MODELS)
def test_vectorised_equals_scalar_loop(name):
    g = att.resolve_groups(catalog.load_model(name))
    Ls = np.array([1, 127, 128, 129, 4096, 131_072, 1_048_576], dtype=np.int64)
    vec = request_bytes(g, Ls)
    assert list(np.asarray(vec, dtype=float)) == [float(request_bytes(g, int(x))) for x in Ls]
    assert list(np.asarray(read_bytes(g, Ls), dtype=float)) == [float(read_bytes(g, int(x))) for x in Ls]


def test_profile_fields():
    p = kv_profile("deepseek-v4-flash", catalog.load_model("deepseek-v4-flash"), 4096)
    assert p.kv_bytes_per_request == 17_608_704 + 12_206_080
    assert p.kv_bytes_per_request_excl_state == 17_608_704
    assert p.kv_fixed_bytes_per_request == 12_206_080
    assert p.kv_bytes_per_token == pytest.approx((17_608_704 + 12_206_080) / 4096)
