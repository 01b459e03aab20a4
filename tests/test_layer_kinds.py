"""Layer kinds beyond full/MLA/compressed: chunked local attention, linear attention (Gated DeltaNet), Mamba-2
state, K = V stored once, per-group KV dtype and shapes; their FLOPs and their tensor-parallel sharding.
Every expected value is hand-computed in the comment next to it."""

import numpy as np
import pytest
from conftest import validate_model

from kvcalc.memory.blocks import block_bytes
from kvcalc.memory.capacity import per_gpu_request_bytes
from kvcalc.model import attention as att
from kvcalc.model.kv import kv_profile, request_bytes
from kvcalc.serve import compute


def _model(groups: list[dict], **kw):
    base = dict(schema_version=1, source="test", display_name="t", params_total_b=1, params_active_b=1,
                weight_bytes_per_param=2)
    return validate_model(base | kw | {"layer_groups": groups})


CHUNKED = {"kind": "full", "name": "chunked", "layers": 36, "kv_heads": 8, "head_dim": 128, "chunk_tokens": 8192}
GDN = {"kind": "linear", "layers": 36, "key_heads": 16, "value_heads": 32, "key_head_dim": 128,
       "value_head_dim": 128, "conv_kernel": 4}
MAMBA = {"kind": "mamba", "layers": 24, "heads": 128, "head_dim": 64, "state_size": 128, "groups": 8,
         "conv_kernel": 4}


@pytest.mark.parametrize("tokens,entries", [
    (1, 1), (4096, 4096),            # inside the first chunk: every token
    (8192, 8192),                     # exactly one full chunk
    (8193, 1),                        # the next chunk starts empty but for the new token
    (10_000, 1808),                   # (9,999 mod 8,192) + 1 = 1,808
    (1_048_576, 8192),                # 128 full chunks: the last one is full
])
def test_chunked_holds_only_the_current_chunk(tokens, entries):
    m = _model([CHUNKED])
    (g,) = att.resolve_groups(m)
    assert att.dense_entries(g, tokens) == entries
    # 36 layers x entries x 8 heads x (128 + 128) x 2 B = 36 x entries x 4,096
    assert request_bytes([g], tokens) == 36 * entries * 4096
    assert att.long_context_bytes_per_token(g) == 0  # bounded: nothing grows past a chunk


def test_chunked_arrays_equal_scalars():
    (g,) = att.resolve_groups(_model([CHUNKED]))
    xs = np.array([0, 1, 8191, 8192, 8193, 20_000])
    assert list(att.dense_entries(g, xs)) == [att.dense_entries(g, int(x)) for x in xs]


def test_chunked_attended_sum_is_closed_form():
    # sum over t of ((t - 1) mod C) + 1, checked against a loop, C = 7
    for n in (0, 1, 6, 7, 8, 20, 49):
        assert compute.sum_chunk(n, 7) == sum((t - 1) % 7 + 1 for t in range(1, n + 1))


def test_linear_attention_state_qwen3_next():
    # Qwen3-Next-80B-A3B linear layers: conv (4 - 1) x (2 x 16 x 128 + 32 x 128) = 24,576 el x 2 B = 49,152 B;
    # recurrent 32 x 128 x 128 = 524,288 el x 2 B (bf16) = 1,048,576 B -> 1,097,728 B per layer; x 36 layers
    m = _model([GDN])
    (g,) = att.resolve_groups(m)
    assert g.state_bytes_per_layer == 1_097_728
    p = kv_profile("q", m, 4096)
    assert p.kv_fixed_bytes_per_request == 36 * 1_097_728 == 39_518_208
    assert p.kv_bytes_per_request_excl_state == 0
    assert kv_profile("q", m, 1_000_000).kv_bytes_per_request == p.kv_bytes_per_request  # does not grow
    # fp32 recurrent state: 49,152 + 524,288 x 4 = 2,146,304 B per layer
    (g32,) = att.resolve_groups(m, att.KvOptions(state_dtype="fp32"))
    assert g32.state_bytes_per_layer == 2_146_304
    assert att.resolve_groups(_model([GDN], state_dtype="fp32"))[0].state_bytes_per_layer == 2_146_304


def test_mamba2_state_nemotron_h():
    # Nemotron-H 8B Mamba-2 layers: conv (4 - 1) x (128 x 64 + 2 x 8 x 128) = 3 x 10,240 = 30,720 el x 2 B = 61,440 B;
    # SSM 128 x 64 x 128 = 1,048,576 el x 2 B = 2,097,152 B -> 2,158,592 B per layer
    (g,) = att.resolve_groups(_model([MAMBA]))
    assert g.state_bytes_per_layer == 2_158_592
    assert att.state_bytes(g) == 24 * 2_158_592


def test_hybrid_grows_only_by_its_attention_layers():
    # 12 full layers x 2 KV heads x (256 + 256) x 2 B = 24,576 B/token; 36 linear layers add a fixed state only
    full = {"kind": "full", "layers": 12, "kv_heads": 2, "head_dim": 256}
    m = _model([full, GDN])
    a, b = kv_profile("h", m, 4096), kv_profile("h", m, 8192)
    assert b.kv_bytes_per_request - a.kv_bytes_per_request == 4096 * 24_576
    assert a.kv_long_context_bytes_per_token == 24_576
    assert a.kv_fixed_bytes_per_request == 39_518_208
    # a decode step reads every full-attention entry and the whole recurrent state (it is read and rewritten
    # each step): 4,096 x 24,576 + 39,518,208 = 100,663,296 + 39,518,208 = 140,181,504 B
    assert a.kv_read_bytes_per_step == 140_181_504


def test_state_shards_by_head_under_tp():
    # 32 value heads over 8 ranks: each holds 4 heads = 1/8 of the state; not replicated
    (g,) = att.resolve_groups(_model([GDN]))
    assert att.per_gpu_share(g, 8) == 4 / 32
    assert per_gpu_request_bytes([g], 4096, 8) == 36 * 1_097_728 / 8
    # more ranks than heads: each rank keeps one whole head (ceil(32 / 64) = 1 of 32)
    assert att.per_gpu_share(g, 64) == 1 / 32


def test_state_groups_page_no_blocks():
    (g,) = att.resolve_groups(_model([GDN]))
    assert block_bytes([g], 16) == 0
    assert block_bytes([g], 16, 576) == 0


def test_k_eq_v_stores_one_tensor():
    # Gemma 4 global layers: 4 KV heads x 512 x 2 B = 4,096 B per layer per token (K = V), not 8,192
    shared = {"kind": "full", "layers": 1, "kv_heads": 4, "head_dim": 512, "k_eq_v": True}
    (g,) = att.resolve_groups(_model([shared]))
    assert g.entry_bytes == 4096
    (g2,) = att.resolve_groups(_model([shared | {"k_eq_v": False}]))
    assert g2.entry_bytes == 8192


def test_separate_k_and_v_dims_and_group_dtype():
    # MiMo-style: 4 KV heads x (192 + 128) x 2 B = 2,560 B; the same group in fp8: 1,280 B
    g = {"kind": "full", "layers": 1, "kv_heads": 4, "head_dim": 192, "head_dim_v": 128}
    assert att.resolve_groups(_model([g]))[0].entry_bytes == 2560
    assert att.resolve_groups(_model([g | {"kv_dtype": "fp8"}]))[0].entry_bytes == 1280
    # --kv-dtype overrides the group's dtype
    assert att.resolve_groups(_model([g | {"kv_dtype": "fp8"}]), att.KvOptions(kv_dtype="fp32"))[0].entry_bytes == 5120


def test_bad_group_fields():
    from kvcalc.out.errors import InputError

    with pytest.raises(InputError, match="chunk_tokens"):
        _model([CHUNKED | {"window_tokens": 128}])
    with pytest.raises(InputError, match="k_eq_v"):
        _model([{"kind": "full", "layers": 1, "kv_heads": 1, "head_dim": 8, "head_dim_v": 4, "k_eq_v": True}])
    with pytest.raises(InputError, match="value_heads"):
        _model([GDN | {"value_heads": 0}])


def test_flops_per_kind():
    m = _model([CHUNKED], q_heads=40, qk_head_dim=128, v_head_dim=128)
    gs = att.resolve_groups(m)
    # chunked, prefill 10,000 tokens: sum = 1 x 8192 x 8193 / 2 + 1808 x 1809 / 2 = 33,558,528 + 1,635,336
    pairs = 33_558_528 + 1_635_336
    assert compute.attention_flops(m, gs, 0, 10_000) == 2 * 40 * 256 * 36 * pairs
    # linear attention: 7 x 32 x 128 x 128 + 2 x 4 x 8,192 = 3,670,016 + 65,536 = 3,735,552 FLOP per layer-token
    lin = _model([GDN], q_heads=16, qk_head_dim=256, v_head_dim=256)
    lg = att.resolve_groups(lin)
    assert lg[0].recurrent_flops_per_token == 3_735_552
    assert compute.attention_flops(lin, lg, 100, 1000) == 36 * 3_735_552 * 1000  # linear in tokens, no pairs
    # mamba: 5 x 128 x 64 x 128 + 2 x 4 x 10,240 = 5,242,880 + 81,920 = 5,324,800
    assert att.resolve_groups(_model([MAMBA]))[0].recurrent_flops_per_token == 5_324_800


def test_group_q_heads_override_the_models():
    # a sliding group with its own 64 q heads x (192 + 128) next to the model's 32 x (128 + 128)
    g = {"kind": "full", "layers": 2, "kv_heads": 8, "head_dim": 192, "head_dim_v": 128, "window_tokens": 128,
         "q_heads": 64}
    m = _model([g], q_heads=32, qk_head_dim=128, v_head_dim=128)
    # 10 tokens inside the window: sum t = 55 pairs; 2 x 64 x 320 x 2 layers x 55
    assert compute.attention_flops(m, att.resolve_groups(m), 0, 10) == 2 * 64 * 320 * 2 * 55
