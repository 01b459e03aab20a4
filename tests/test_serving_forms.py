"""The O(1)-per-step scheduler's pieces (serve/decode_forms.py, serve/scheduler_fast.py) against the formulas they
stand for: decode forms = StepModel.decode_sums, block terms = Pool.need, step parts = StepModel.step_s, and the
DecodeSet's incremental sums = the forms evaluated afresh, on random contexts, for every model preset."""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.model import attention as att
from kvcalc.model import catalog
from kvcalc.serve.calibration import calibration_for
from kvcalc.serve.decode_forms import atom_value, block_terms
from kvcalc.serve.scheduler import Pool
from kvcalc.serve.scheduler_fast import DecodeSet
from kvcalc.serve.step_time import step_model

MODELS = catalog.names("models")
HW = catalog.load_hardware("h100-sxm")
CAL = calibration_for("h100-sxm")[0]
KINDS = {"dense": "llama-2-7b", "gqa": "qwen3-8b", "sliding": "gpt-oss-120b", "sliding 5:1": "gemma-3-27b",
         "mla": "deepseek-v3", "sparse mla + indexer": "deepseek-v3.2", "v4 compressed": "deepseek-v4-flash",
         "linear hybrid": "qwen3-next-80b-a3b", "mamba hybrid": "nemotron-3-nano-30b-a3b",
         "chunked": "llama-4-scout", "flat (as stated)": "deepseek-v4-flash-article"}


def _sm(name: str, tp: int = 1, kv_dtype=None, kv_scale: float = 1.0):
    sm = step_model(catalog.load_model(name), HW, catalog.load_link(HW.scaleup_link), CAL, tp,
                    opts=att.KvOptions(kv_dtype=kv_dtype))
    return dataclasses.replace(sm, kv_scale=kv_scale)


def _evaluate(form: dict, contexts) -> float:
    return sum(c * sum(atom_value(a, int(x)) for x in contexts) for a, c in form.items())


def test_the_kinds_named_cover_what_the_presets_use():
    kinds = {g.kind for m in MODELS for g in att.resolve_groups(catalog.load_model(m), att.KvOptions())}
    named = {g.kind for m in KINDS.values() for g in att.resolve_groups(catalog.load_model(m), att.KvOptions())}
    assert kinds <= named, kinds - named
    for kind, m in KINDS.items():
        assert m in MODELS, kind


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("tp,kv_dtype,kv_scale", [(1, None, 1.0), (8, "fp8", 1.0), (2, "kivi", 0.5)])
def test_decode_forms_equal_decode_sums_on_random_contexts(name, tp, kv_dtype, kv_scale):
    try:
        sm = _sm(name, tp, kv_dtype, kv_scale)
    except Exception as e:  # a layout the model cannot take (e.g. KIVI on a latent)
        pytest.skip(f"{name} {kv_dtype}: {e}")
    forms = sm.decode_forms()
    if any(g.chunk_tokens and g.residual_tokens for g in sm.groups):
        # min(chunk, R) has no form here: such a run takes scheduler.simulate's own loop
        assert forms is None
        return
    assert forms is not None, name
    rng = random.Random(hash((name, tp)) & 0xFFFF)
    for n in (1, 3, 40):
        # contexts around every window, top-k x ratio and block edge the presets have, and far past them
        ctx = np.array([rng.choice([rng.randint(1, 300), rng.randint(1, 5000), rng.randint(1, 300_000)])
                        for _ in range(n)], dtype=np.int64)
        attn, kv = sm.decode_sums(ctx)
        assert _evaluate(forms[0], ctx) == pytest.approx(float(attn), rel=1e-12, abs=1e-6), name
        assert _evaluate(forms[1], ctx) == pytest.approx(float(kv), rel=1e-12, abs=1e-6), name


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([1, 16, 64, 256]), st.integers(0, 3), st.lists(st.integers(1, 5000), max_size=3),
       st.integers(0, 2), st.lists(st.integers(1, 20_000), min_size=1, max_size=30))
def test_block_terms_count_the_blocks_pool_need_adds(block, full, windows, states, contexts):
    # a decode at context x holds need(x - 1) blocks and needs need(x) - need(x - 1) more for its token
    pool = Pool(num_blocks=10**9, block_size=block, full_groups=full, sliding_windows=tuple(windows),
                state_groups=states)
    want = sum(pool.need_one(x) - pool.need_one(x - 1) for x in contexts if x >= 2)
    got = sum(mult for x in contexts if x >= 2 for (p, lim), res, mult in block_terms(pool)
              if x % p == res and x < lim)
    assert got == want


@pytest.mark.parametrize("name,ep_dp", [(m, 0) for m in MODELS] + [("qwen3-30b-a3b", 4), ("deepseek-v3", 2)])
def test_step_parts_equal_step_s(name, ep_dp):
    sm = _sm(name, 2)
    if ep_dp:  # --enable-expert-parallel over dp ranks: the all-to-alls and the experts' shards enter the step
        from kvcalc.serve.expert_parallel import with_expert_parallel

        sm = with_expert_parallel(sm, catalog.load_model(name), HW, CAL, 2, ep_dp)
        assert sm.a2a_ranks > 1
    rng = random.Random(7)
    for _ in range(20):
        tokens = rng.choice([1, 7, 64, 300, 8192])
        seqs = rng.randint(1, tokens)
        sampled = rng.randint(0, seqs)
        attn, kv = rng.choice([0.0, 1e9, 1e13, 3e15]), rng.choice([0.0, 1e6, 1e10, 2e11])
        c0, c1, m0, m1, rest = sm.step_parts(float(tokens), float(seqs), float(sampled))
        want = float(sm.step_s(float(tokens), float(seqs), float(sampled), attn, kv))
        assert max(c0 + c1 * attn, m0 + m1 * kv) + rest == pytest.approx(want, rel=1e-12), name


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(sorted(KINDS.values())), st.sampled_from([1, 16]), st.integers(0, 2**32 - 1))
def test_the_decode_sets_incremental_sums_equal_the_forms_afresh(name, block, seed):
    # random joins, leaves and ticks; after each, the integer sums and the block count are recomputed from the
    # contexts themselves (atom by atom, and Pool.need), and the totals from StepModel.decode_sums
    sm = _sm(name)
    forms = sm.decode_forms()
    windows = tuple(sorted({g.window_tokens for g in sm.groups if g.kind == "sliding" and g.window_tokens}))
    pool = Pool(num_blocks=10**9, block_size=block, full_groups=1, sliding_windows=windows)
    rng = random.Random(seed)
    n = 30
    d = DecodeSet(n, forms, block_terms(pool))
    ctx: dict = {}    # request -> context
    left: dict = {}   # request -> tokens to go
    for _ in range(300):
        r = rng.random()
        free = [i for i in range(n) if i not in ctx]
        if r < 0.2 and free:
            i = rng.choice(free)
            ctx[i] = rng.choice([2, rng.randint(2, 200), rng.randint(2, 9000), rng.randint(100_000, 140_000)])
            left[i] = rng.randint(1, 40)
            d.add(i, ctx[i], left[i])
        elif r < 0.3 and ctx:
            i = rng.choice(sorted(ctx))
            assert d.remove(i) == (ctx.pop(i), left.pop(i))
        else:
            done = d.tick()
            for i in ctx:
                ctx[i] += 1
                left[i] -= 1
            assert sorted(done) == sorted(i for i in ctx if left[i] == 0)
            for i in done:
                assert d.remove(i) == (ctx.pop(i), 0)
                left.pop(i)
        assert d.n == len(ctx)
        assert d.sums == [sum(atom_value(a, x) for x in ctx.values()) for a in d.atoms]
        assert d.block_need() == sum(pool.need_one(x) - pool.need_one(x - 1) for x in ctx.values())
        if ctx:
            attn, kv = sm.decode_sums(np.array(list(ctx.values()), dtype=np.int64))
            got = d.totals()
            assert got[0] == pytest.approx(float(attn), rel=1e-12) and got[1] == pytest.approx(float(kv), rel=1e-12)
