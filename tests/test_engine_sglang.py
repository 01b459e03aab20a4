"""SGLang's separate pools for hybrids, by hand, following SGLang 0.5.23 (the installed wheel's
mem_cache/kv_cache_configurator.py: _profile_available_bytes, _handle_max_mamba_cache, resolve_max_num_reqs;
model_executor/pool_configurator.py: HybridSWAPoolConfigurator.calculate_pool_sizes) and the defaults
swa_full_tokens_ratio 0.8, mamba_full_memory_ratio 0.9 (PR #15337 docs: "The default is 0.9"), mamba_ssm_dtype
float32. The engine's own figures for real configs are pinned in tests/test_engine_pins.py."""

from __future__ import annotations

import json

import pytest
from conftest import assert_bad_input, run_cli

from kvcalc.memory import engine_common as ec
from kvcalc.memory.engine_report import engine_groups, pool_bytes_per_gpu
from kvcalc.memory.engine_sglang import sglang_fits, sglang_required_fraction, sglang_sizing
from kvcalc.model import attention as att
from kvcalc.model import catalog
from kvcalc.model.schema import FullGroup, ModelPreset

GiB = 2**30
H100 = catalog.load_hardware("h100-sxm")


def swa_model(sliding: int = 22, full: int = 4) -> ModelPreset:
    # Gemma-3-shaped: 1 KV head x 256 dims, 512-token window: 1 x (256 + 256) x 2 B = 1,024 B per layer per token
    return ModelPreset(schema_version=1, source="test", display_name="swa", params_total_b=1.0,
                       params_active_b=1.0, weight_bytes_per_param=2.0, layer_groups=[
                           FullGroup(kind="full", name="swa", layers=sliding, kv_heads=1, head_dim=256,
                                     window_tokens=512),
                           FullGroup(kind="full", name="global", layers=full, kv_heads=1, head_dim=256)])


GIVEN = dict(engine="sglang", total_memory_bytes=10 * GiB, weights_bytes=2 * GiB, mem_fraction_static=0.88)


def test_hybrid_swa_pools_split_by_the_ratio():
    m = swa_model()
    s = sglang_sizing(m, att.resolve_groups(m), H100, ec.EngineInputs(**GIVEN, max_model_len=4096))
    # rest = 10 x 0.88 - 2 = 6.8 GiB = 7,301,444,403.2 B; cell = F n_full + S n_swa = 4 x 1,024 + 22 x 1,024 = 26,624
    assert (s["full_cell_bytes"], s["swa_cell_bytes"]) == (4_096, 22_528)
    assert s["kv_cache_memory_bytes"] == pytest.approx(7_301_444_403.2)
    # one floor (SGLang 0.5.23; kvcalc floored twice before, giving 330,106): full = floor(7,301,444,403.2 /
    # (4,096 + 0.8 x 22,528 = 22,118.4)) = floor(330,107.6) = 330,107; swa = int(330,107 x 0.8) = 264,085;
    # both pools: 330,107 x 4,096 + 264,085 x 22,528 = 7,301,425,152 B
    assert (s["full_kv_cache_tokens"], s["swa_kv_cache_tokens"], s["kv_cache_tokens"]) == (330_107, 264_085, 330_107)
    assert s["pool_bytes"] == 7_301_425_152 <= s["kv_cache_memory_bytes"]
    # 4,096-token requests: full pool 330,107 / 4,096 = 80.59; sliding pool 264,085 / min(4,096, 512) = 515.8
    assert s["max_concurrency"] == pytest.approx(330_107 / 4096)
    assert sglang_fits(s, 4096) == 80
    # the ratio is a flag: r = 0.25 gives full = floor(7,301,444,403.2 / (4,096 + 5,632)) = 750,559
    s = sglang_sizing(m, att.resolve_groups(m), H100, ec.EngineInputs(**GIVEN, swa_full_tokens_ratio=0.25))
    assert (s["full_kv_cache_tokens"], s["swa_kv_cache_tokens"]) == (750_559, 187_639)
    # r = 1: no separate split, every layer sized as full (the profiled 274,242 tokens in both pools)
    s = sglang_sizing(m, att.resolve_groups(m), H100, ec.EngineInputs(**GIVEN, swa_full_tokens_ratio=1.0))
    assert (s["full_kv_cache_tokens"], s["swa_kv_cache_tokens"]) == (274_242, 274_242)


def test_only_sliding_layers_fill_one_pool():
    m = ModelPreset(schema_version=1, source="test", display_name="all-swa", params_total_b=1.0,
                    params_active_b=1.0, weight_bytes_per_param=2.0, layer_groups=[
                        FullGroup(kind="full", name="swa", layers=10, kv_heads=1, head_dim=256, window_tokens=512)])
    s = sglang_sizing(m, att.resolve_groups(m), H100, ec.EngineInputs(**GIVEN))
    # no full pool: the sliding pool gets every token: floor(7,301,444,403.2 / 10,240) = 713,031
    assert (s["full_kv_cache_tokens"], s["swa_kv_cache_tokens"], s["kv_cache_tokens"]) == (0, 713_031, 713_031)


def next_model():
    m = catalog.load_model("qwen3-next-80b-a3b")
    return m, engine_groups("sglang", m, att.KvOptions())


def test_mamba_state_pool_by_the_memory_ratio():
    m, groups = next_model()
    s = sglang_sizing(m, groups, H100, ec.EngineInputs(engine="sglang", tp=4, total_memory_bytes=139 * GiB,
                                                       weights_bytes=37 * GiB, mem_fraction_static=0.85))
    # Gated DeltaNet state per layer, SSM in FP32 (SGLang's default): conv 3 x 8,192 x 2 B = 49,152 + recurrent
    # 32 x 128 x 128 x 4 B = 2,097,152 -> 2,146,304 B; 36 layers / 4 ranks -> 19,316,736 B per request per GPU
    assert s["mamba_state_bytes_per_request"] == 19_316_736
    # rest = 139 x 0.85 - 37 = 81.15 GiB = 87,134,149,017.6 B; the state budget is 0.9 / 1.9 of it,
    # 41,274,070,587.3 B: K = (41,274,070,587.3 - 19,316,736) // 19,316,736 = 2,135 slots (one off the budget), and
    # the pool holds K + 1 (its padding slot) = 2,136 x 19,316,736 = 41,260,548,096 B
    assert (s["max_mamba_cache_size"], s["mamba_pool_bytes"]) == (2_135, 41_260_548_096)
    # attention: 12 layers x 1 KV head per rank x 512 x 2 B = 12,288 B/token; (87,134,149,017.6 - 41,260,548,096)
    # / 12,288 = 3,733,203 tokens
    assert s["kv_bytes_per_token_per_gpu"] == 12_288
    assert s["kv_cache_tokens"] == 3_733_203
    # running requests: min(min(max(int(3,733,203 / 4,096 x 512), 2,048), 4,096), 3,733,203 // 2, 2,135 // 5)
    # = 427 (5 state slots per running request: 3 + 2 of the radix cache's extra buffer)
    assert s["max_num_seqs"] == 427


def test_mamba_state_pool_by_an_explicit_size():
    m, groups = next_model()
    s = sglang_sizing(m, groups, H100, ec.EngineInputs(engine="sglang", tp=4, total_memory_bytes=139 * GiB,
                                                       weights_bytes=37 * GiB, mem_fraction_static=0.85,
                                                       max_mamba_cache_size=1000))
    # (1,000 + 1 padding slot) x 19,316,736 = 19,336,052,736 B; (87,134,149,017.6 - 19,336,052,736) / 12,288
    # = 5,517,423.2 tokens; running requests 1,000 // 5 = 200
    assert (s["mamba_pool_bytes"], s["kv_cache_tokens"], s["max_num_seqs"]) == (19_336_052_736, 5_517_423, 200)
    # --state-dtype bf16 halves the recurrent part: 49,152 + 1,048,576 = 1,097,728 B per layer (vLLM's figure)
    bf16 = engine_groups("sglang", m, att.KvOptions(state_dtype="bf16"))
    s = sglang_sizing(m, bf16, H100, ec.EngineInputs(engine="sglang", tp=4, max_mamba_cache_size=1000))
    assert s["mamba_state_bytes_per_request"] == 36 * 1_097_728 / 4


def test_solve_mem_fraction_inverts_the_pools():
    m = swa_model()
    s = sglang_sizing(m, att.resolve_groups(m), H100, ec.EngineInputs(**GIVEN))
    # 80 requests of 4,096: full pool 327,680 tokens (the sliding pool needs only 80 x 512 / 0.8 = 51,200);
    # floor(kv / 22,118.4) >= 327,680 with kv = 327,680 x 22,118.4 = 7,247,757,312 B, + 2 GiB weights, over 10 GiB
    f = sglang_required_fraction(s, 4096, 80)
    assert f == pytest.approx((327_680 * 22_118.4 + 2 * GiB) / (10 * GiB))
    again = sglang_sizing(m, att.resolve_groups(m), H100, ec.EngineInputs(**{**GIVEN, "mem_fraction_static": f}))
    assert again["full_kv_cache_tokens"] == 327_680 and sglang_fits(again, 4096) == 80
    m, groups = next_model()
    s = sglang_sizing(m, groups, H100, ec.EngineInputs(engine="sglang", tp=4, total_memory_bytes=139 * GiB,
                                                       weights_bytes=37 * GiB, mem_fraction_static=0.85))
    # the ratio pool takes 0.9 of the attention pool's memory besides it (100 x 4,096 x 12,288 B x 1.9 = 9.56 GB),
    # but 100 running requests need K >= 5 x 100 state slots: rest x 0.9 / 1.9 >= 501 x 19,316,736 B -> 20.43 GB
    f = sglang_required_fraction(s, 4096, 100)
    assert f == pytest.approx((501 * 19_316_736 * 1.9 / 0.9 + 37 * GiB) / (139 * GiB))
    again = sglang_sizing(m, groups, H100, ec.EngineInputs(engine="sglang", tp=4, total_memory_bytes=139 * GiB,
                                                           weights_bytes=37 * GiB, mem_fraction_static=f * (1 + 1e-9)))
    assert again["max_num_seqs"] >= 100 and sglang_fits(again, 4096) >= 100


def test_cli_sizes_a_mamba_hybrid_and_names_bad_flags():
    r = run_cli("capacity", "-m", "qwen3-next-80b-a3b", "--hardware", "h200-sxm", "--gpus", "4", "--engine", "sglang",
                "--total-memory", "139GiB", "--weights-memory", "37GiB", "--mem-fraction-static", "0.85",
                "--format", "json")
    assert r.code == 0, r.err
    row = json.loads(r.out)["results"][0]
    assert (row["kv_cache_tokens"], row["max_mamba_cache_size"], row["max_running_requests"]) == (3_733_203, 2_135, 427)
    walk = [w for t in json.loads(r.out)["tables"] for w in t["rows"]] if isinstance(
        json.loads(r.out)["tables"], list) else json.loads(r.out)["tables"]["walk"]
    assert any(w["step"] == "Mamba state pool" for w in walk)
    for flag, value in (("--swa-full-tokens-ratio", "0"), ("--mamba-full-memory-ratio", "1000"),
                        ("--max-mamba-cache-size", "-1")):
        assert_bad_input(run_cli("capacity", "-m", "qwen3-next-80b-a3b", "--engine", "sglang", flag, value), flag)


def test_pool_bytes_for_cost_and_trace():
    m = catalog.load_model("gpt-oss-120b")  # a hybrid SWA architecture (Gemma 3 is not one in SGLang 0.5.23)
    # the attention pools the hybrid SWA split allocates: full tokens x F + sliding tokens x S (Mamba pool apart)
    s = sglang_sizing(m, engine_groups("sglang", m, att.KvOptions()), H100, ec.EngineInputs(engine="sglang", tp=1))
    assert pool_bytes_per_gpu("sglang", m, att.KvOptions(), H100, 1) == \
        s["full_kv_cache_tokens"] * s["full_cell_bytes"] + s["swa_kv_cache_tokens"] * s["swa_cell_bytes"]
    assert s["swa_kv_cache_tokens"] == int(s["full_kv_cache_tokens"] * 0.8)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), L=st.integers(1, 65_536), r=st.floats(0.05, 2.0), mamba=st.booleans())
def test_solved_fraction_serves_the_requests(n, L, r, mamba):
    # whatever the split ratio, the mem_fraction_static solved for n requests of L tokens serves them (when it is
    # a fraction at all), for a sliding/full hybrid and for a Mamba hybrid
    if mamba:
        m, groups = next_model()
        kw = dict(engine="sglang", tp=4, total_memory_bytes=139 * GiB, weights_bytes=37 * GiB, mamba_full_memory_ratio=r)
    else:
        m = swa_model()
        groups = att.resolve_groups(m)
        kw = dict(GIVEN, swa_full_tokens_ratio=r)
    s = sglang_sizing(m, groups, H100, ec.EngineInputs(**kw))
    f = sglang_required_fraction(s, L, n)
    if f <= 1:
        again = sglang_sizing(m, groups, H100, ec.EngineInputs(**{**kw, "mem_fraction_static": min(1.0, f * (1 + 1e-9))}))
        assert sglang_fits(again, L, exact=True) >= n * (1 - 1e-9)
