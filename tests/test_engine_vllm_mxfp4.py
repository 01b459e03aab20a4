"""vLLM's MXFP4 MoE weights on GPUs without FP4 tensor cores (kvcalc/memory/engine_vllm_mxfp4.py): Marlin's
padding below SM90, Triton's second copy of the expert scales on Hopper, each pinned to a published start-up log."""

from __future__ import annotations

import pytest

from kvcalc.memory import engine_common as ec
from kvcalc.memory import engine_vllm_mxfp4 as mx
from kvcalc.memory.engine_vllm import vllm_sizing
from kvcalc.model import attention as att
from kvcalc.model import catalog
from kvcalc.out import units

GIB = 2 ** 30


def _w(model, hw, tp=1):
    m, h = catalog.load_model(model), catalog.load_hardware(hw)
    return m, h, mx.extra_bytes(m, h, tp)


def test_marlin_pads_gpt_oss_120b_to_its_published_load():
    # Marlin (A100): hidden 2,880 -> round_up(2,880, 256) = 3,072, intermediate 2,880 -> round_up(2,880, 128) =
    # 2,944; 128 experts x 36 layers x 3 GEMMs x 3,072 x 2,944 = 125,023,813,632 weights x 0.53125 B =
    # 66,418,900,992 B, against 114,661,785,600 x 0.53125 = 60,914,073,600 B as stored: 5,504,827,392 B more
    m, _, (extra, how) = _w("gpt-oss-120b", "a100-80g")
    assert extra == 5_504_827_392
    assert "3,072" in how and "2,944" in how
    # the whole load: 65.16917568 GB + 5.5048 GB = 70.674 GB = 65.82 GiB; vLLM 0.10.1 under Marlin on one H100
    # logged "Model loading took 65.9651 GiB" (vllm-project/vllm#23278): 0.2% above
    total = (m.weight_bytes + extra) / GIB
    assert total == pytest.approx(65.820, abs=1e-3)
    assert total == pytest.approx(65.9651, rel=0.003)


def test_marlin_pads_the_tp_share_of_the_intermediate_size():
    # TP 2: intermediate per GPU 1,440 -> round_up(1,440, 128) = 1,536; 4,608 x 3 x 3,072 x 1,536 = 65,229,815,808
    # weights x 0.53125 B = 34,653,339,648 B, against 60,914,073,600 / 2 = 30,457,036,800 B: 4,196,302,848 B more
    _, _, (extra, _) = _w("gpt-oss-120b", "a100-80g", tp=2)
    assert extra == 4_196_302_848


def test_triton_keeps_the_scales_twice_on_hopper():
    # Triton (H100): expert scales 114,661,785,600 / 32 = 3,583,180,800 B kept beside their swizzled copy; biases
    # 128 x 36 x (2 x 2,880 + 2,880) x (4 - 2) B = 79,626,240 B from BF16 to FP32: 3,662,807,040 B = 3.4113 GiB
    m, _, (extra, how) = _w("gpt-oss-120b", "h100-sxm")
    assert extra == 3_583_180_800 + 79_626_240
    assert "scales" in how
    # 60.6935 + 3.4113 = 64.1048 GiB; vLLM 0.14.1 under Triton on one H100 logged "Model loading took 64.38 GiB"
    # (vllm-project/vllm#33155): 0.4% below
    total = (m.weight_bytes + extra) / GIB
    assert total == pytest.approx(64.1048, abs=1e-3)
    assert total == pytest.approx(64.38, rel=0.005)


@pytest.mark.parametrize("model,hw", [("gpt-oss-120b", "b200"),      # FP4 tensor cores: not modelled
                                      ("gpt-oss-120b", "mi300x"),    # ROCm: not modelled
                                      ("qwen3-32b", "a100-80g"),     # BF16 weights
                                      ("deepseek-v4-flash", "h100-sxm")])  # FP4 experts, not Mxfp4MoEMethod
def test_nothing_added_elsewhere(model, hw):
    assert _w(model, hw)[2] is None


def test_the_vllm_pool_shrinks_by_it_and_a_logged_weight_wins():
    m, h = catalog.load_model("gpt-oss-120b"), catalog.load_hardware("h100-sxm")
    groups = att.resolve_groups(m)
    inp = ec.EngineInputs(engine="vllm", tp=1, max_model_len=32768)
    s = vllm_sizing(m, groups, h, inp)
    assert s["terms"]["weights"].value == pytest.approx(m.weight_bytes + 3_662_807_040)
    assert "Triton" in s["terms"]["weights"].origin
    given = vllm_sizing(m, groups, h, ec.EngineInputs(engine="vllm", tp=1, max_model_len=32768,
                                                      weights_bytes=units.gib_to_bytes(60.0)))
    assert given["terms"]["weights"].value == units.gib_to_bytes(60.0)
    # the pool: the given 60 GiB leaves (weight_bytes + 3,662,807,040 B - 60 GiB) / 589,824 B per block more
    # blocks than the modelled load (+-1 for the two floors)
    more = (m.weight_bytes + 3_662_807_040 - units.gib_to_bytes(60.0)) / 589_824
    assert abs((given["num_gpu_blocks"] - s["num_gpu_blocks"]) - more) < 1
