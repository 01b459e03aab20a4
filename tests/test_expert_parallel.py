"""Expert parallelism with DP attention (issue 23, part 1): the all-to-all time by hand, the experts' share of
the weights per GPU, and the property that EP never reads more weight bytes per GPU than TP alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import run_cli

MOE = ["qwen3-235b-a22b", "qwen3-30b-a3b", "gpt-oss-120b", "gpt-oss-20b", "kimi-k2"]


def _sm(model_name, hw_name="h200-sxm", tp=1, dp=1, ep=False):
    from kvcalc.model import catalog
    from kvcalc.serve.calibration import calibration_for
    from kvcalc.serve.expert_parallel import with_expert_parallel
    from kvcalc.serve.step_time import step_model

    m, hw = catalog.load_model(model_name), catalog.load_hardware(hw_name)
    cal = calibration_for(hw_name)[0]
    link = catalog.load_link(hw.scaleup_link) if tp > 1 else None
    sm = step_model(m, hw, link, cal, tp)
    return with_expert_parallel(sm, m, hw, cal, tp, dp) if ep else sm


def test_the_all_to_all_is_two_per_moe_layer_of_latency_plus_the_routed_tokens_over_the_link():
    from kvcalc.serve.expert_parallel import all_to_all_s

    # Qwen3-235B-A22B (hidden 4,096, top-8, 94 layers), a step of 256 tokens on one of 8 EP ranks over NVLink4
    # (measured 397 GB/s, 2.65 us: presets/links/nvlink4.toml): each all-to-all moves
    # 256 x 8 x 4,096 x 2 B x 7/8 = 14,680,064 B -> 2.65 us + 14,680,064 / 397e9 s = 39.6275 us;
    # x 2 (dispatch + combine) x 94 layers = 7.44997 ms
    t = all_to_all_s(256.0, 8, 4096, 8, 94, 2.65e-6, 397e9)
    assert t == pytest.approx(2 * 94 * (2.65e-6 + 14_680_064 / 397e9), rel=1e-12)
    assert t == pytest.approx(7.44997e-3, rel=1e-5)
    assert all_to_all_s(256.0, 8, 4096, 1, 94, 2.65e-6, 397e9) == 0.0


def test_the_step_model_pays_the_all_to_all_only_across_dp_ranks():
    sm = _sm("qwen3-235b-a22b", tp=1, dp=8, ep=True)
    assert sm.a2a_ranks == 8 and sm.a2a_bytes_per_s == pytest.approx(397e9)  # h200-sxm's scale-up: NVLink4
    assert sm.ep_comm_s(256.0) == pytest.approx(7.44997e-3, rel=1e-5)
    one = _sm("qwen3-235b-a22b", tp=8, dp=1, ep=True)  # EP over the TP ranks: the all-reduce sums the experts
    assert one.a2a_ranks == 1 and one.ep_comm_s(256.0) == 0.0
    # 16 GPUs span two nodes: the all-to-all crosses InfiniBand NDR400 (50 GB/s, 3.5 us)
    far = _sm("qwen3-235b-a22b", tp=2, dp=8, ep=True)
    assert far.a2a_bytes_per_s == pytest.approx(50e9) and far.a2a_latency_s == pytest.approx(3.5e-6)


def test_an_ep_gpu_holds_the_experts_share_and_a_whole_experts_gemm_width():
    from kvcalc.model import catalog
    from kvcalc.serve.expert_parallel import expert_weight_bytes, weights_per_gpu

    m = catalog.load_model("qwen3-235b-a22b")
    experts = expert_weight_bytes(m)
    # 227.096395776e9 expert params x 2 B (BF16) = 454.19 GB of the 470.19 GB; 8 GPUs with EP: 16.0 GB of
    # attention/dense/embeddings each + 454.19 / 8 = 56.77 GB of experts = 72.77 GB, vs 470.19 / 8 = 58.77 GB at TP 8
    # (EP with TP 1 x DP 8 replicates the 16 GB per rank)
    assert experts == pytest.approx(227.096395776e9 * 2, rel=1e-9)
    assert weights_per_gpu(m, 1, 8) == pytest.approx(m.weight_bytes - experts + experts / 8, rel=1e-12)
    assert weights_per_gpu(m, 8, 1) == pytest.approx(m.weight_bytes / 8, rel=1e-12)
    sm = _sm("qwen3-235b-a22b", tp=1, dp=8, ep=True)
    # a whole expert: 227.096e9 / (128 experts x 94 layers x 3 x 4,096) = 1,536 columns (config moe_intermediate)
    n = 1536.0
    from kvcalc.serve.calibration import calibration_for

    h = calibration_for("h200-sxm")[0].matmul_half_width
    assert sm.expert_width == pytest.approx(n / (n + h), rel=1e-6)


@settings(max_examples=40)
@given(model=st.sampled_from(MOE), tp=st.sampled_from([1, 2, 4, 8]), dp=st.sampled_from([1, 2, 4, 8]),
       tokens=st.integers(1, 16384))
def test_ep_never_reads_more_weight_bytes_per_gpu_than_tp_alone(model, tp, dp, tokens):
    # TP alone: dp replicas of tp GPUs, each reading its own step's experts; EP: the same GPUs with the experts
    # sharded over all of them, the MoE layers seeing the dp ranks' tokens together
    ep, alone = _sm(model, tp=tp, dp=dp, ep=True), _sm(model, tp=tp)
    t = float(tokens)
    assert ep.memory_s(t, 0.0) <= alone.memory_s(t, 0.0) * (1 + 1e-12)
    if dp == 1:
        assert ep.memory_s(t, 0.0) == pytest.approx(alone.memory_s(t, 0.0), rel=1e-12)


def test_bench_with_expert_parallel_over_dp_ranks():
    r = run_cli("bench", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--tp", "1", "--dp", "4",
                "--enable-expert-parallel", "--num-prompts", "40", "--random-input-len", "500",
                "--random-output-len", "20", "--format", "json")
    assert r.code == 0, r.err
    env = r.json()
    assert env["inputs"]["ep"] == 4 and env["inputs"]["attention"] == "dp" and env["inputs"]["gpus"] == 4
    plain = run_cli("bench", "--model", "qwen3-30b-a3b", "--hardware", "h100-sxm", "--tp", "1", "--dp", "4",
                    "--num-prompts", "40", "--random-input-len", "500", "--random-output-len", "20", "--format",
                    "json").json()
    # each GPU holds a quarter of the experts: a larger KV pool per rank than a whole replica on one GPU
    assert env["inputs"]["kv_pool_blocks"] > plain["inputs"]["kv_pool_blocks"]


@pytest.mark.parametrize("args,needle", [
    (["--model", "qwen3-14b", "--ep"], "no routed experts"),
    (["--model", "qwen3-30b-a3b", "--attention", "dp", "--dp", "2"], "--attention dp"),
    (["--model", "qwen3-30b-a3b", "--attention", "tp", "--dp", "2", "--ep"], "--attention tp"),
])
def test_bench_ep_bad_combinations_exit_2(args, needle):
    r = run_cli("bench", *args, "--num-prompts", "4")
    assert r.code == 2, r.err
    assert needle in r.err and len(r.err.strip().splitlines()) == 1
