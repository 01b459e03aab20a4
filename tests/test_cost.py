"""Strategies A (lru) and C (prefix-tree): the article's case by hand, properties, bad workloads."""

import pytest
from conftest import assert_bad_input, run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.model.workload_schema import RequestClass, SharedSegment, WorkloadPreset
from kvcalc.serve import compute
from kvcalc.serve.cost import strategy_row
from kvcalc.serve.scenario import Overrides, resolve


def rows(scenario="article", **o):
    inp = resolve(scenario, Overrides(**o))
    return strategy_row(inp, "lru")[0], strategy_row(inp, "prefix-tree")[0]


def test_article_reproduced_where_its_arithmetic_holds():
    a, c = rows()
    # A: 20 x 8,000 + 80 x 2,000 = 320,000; C: 320,000 - (1,500 x 99 + 500 x 19 x 5 = 196,000) = 124,000
    assert (a["prefill_tokens"], c["prefill_tokens"]) == (320_000, 124_000)
    assert c["reused_tokens"] == 196_000 and c["hit_rate"] == pytest.approx(196_000 / 320_000)
    # 2 x 13e9 x 320,000 = 8.32e15; x 124,000 = 3.224e15
    assert a["prefill_flops"] == pytest.approx(8.32e15) and c["prefill_flops"] == pytest.approx(3.224e15)
    # at 16 PFLOP/s: 0.52 s and 0.2015 s
    assert a["prefill_time_s"] == pytest.approx(0.52) and c["prefill_time_s"] == pytest.approx(0.2015)
    # decode 60 tok/s x 100 = 6,000 tok/s = 21.6 M tok/h; $96/h / 21.6 M = $4.444 per M output tokens
    assert a["decode_tokens_per_s_total"] == 6000
    assert a["usd_per_mtok_output"] == pytest.approx(96 / 21.6)
    # KV for 100 requests at 6.3 B/token: 320,000 x 6.3 = 2.016 MB (the article's 2.02 MB)
    assert a["kv_stored_bytes"] == pytest.approx(2_016_000)
    # prefix cache: (1,500 x 1 + 500 x 5) x 6.3 = 25,200 B (the article's "25.3 KB")
    assert c["prefix_cache_bytes"] == pytest.approx(25_200)


def test_article_ttft_is_seconds_not_milliseconds():
    _, classes = strategy_row(resolve("article"), "lru")
    short = [r for r in classes if r["class"] == "short (2K)"][0]
    # 2,000 x 26e9 / (16e15 / 100) = 0.325 s (the article prints 3.25 ms)
    assert short["ttft_mean_s"] == pytest.approx(0.325)


def test_article_costs_by_hand():
    a, c = rows()
    node_usd_per_s = 96 / 3600
    # A prefill $ = 0.52 s x $96/h; per M input tokens: / 0.32 M
    assert a["usd_per_mtok_input"] == pytest.approx(0.52 * node_usd_per_s / 0.32)
    # decode of 100 x 500 tokens at 6,000 tok/s = 8.333 s
    assert a["decode_time_s"] == pytest.approx(50_000 / 6000)
    blended = (0.52 + 50_000 / 6000) * node_usd_per_s / (320_000 + 50_000) * 1e6
    assert a["usd_per_mtok_blended"] == pytest.approx(blended)
    # break-even: 6.3 B / (26e9 FLOP / 16e15 FLOP/s = 1.625 us) = 3.877 MB/s
    assert a["breakeven_bandwidth_bytes_per_s"] == pytest.approx(6.3 / 1.625e-6)


def test_warm_article_prefills_120000():
    _, c = rows(warm=True)
    # 320,000 - (1,500 + 500) x 100 = 120,000
    assert c["prefill_tokens"] == 120_000


def test_real_v4_flash_scenario():
    a, c = rows("v4-flash-8xh100")
    assert (a["prefill_tokens"], c["prefill_tokens"]) == (320_000, 124_000)
    # KV held by A: 20 x kv(8,000) + 80 x kv(2,000), each with 12,206,080 B state
    # kv(8,000) = 43 x 128 x 584 + 21 x 2,000 x 652 + 20 x 62 x 584 = 3,214,336 + 27,384,000 + 724,160
    # kv(2,000) = 3,214,336 + 21 x 500 x 652 + 20 x 15 x 584 = 3,214,336 + 6,846,000 + 175,200
    kv8 = 3_214_336 + 27_384_000 + 724_160 + 12_206_080
    kv2 = 3_214_336 + 6_846_000 + 175_200 + 12_206_080
    assert a["kv_stored_bytes"] == pytest.approx(20 * kv8 + 80 * kv2)
    # matmuls: 2 x (13e9 - 2 x 129,280 x 4,096 = 11,940,938,240) x 320,000 + 2 x 529,530,880 LM head x 100
    # = 7.642306e15; attention FLOPs come on top
    assert a["prefill_flops"] > 2 * 11_940_938_240 * 320_000 + 2 * 529_530_880 * 100
    assert a["decode_tokens_per_s_roofline"] > 0


def test_attention_flops_closed_forms_equal_loops():
    for n in (0, 1, 5, 127, 128, 129, 1000, 4097):
        assert compute.sum_t(n) == sum(range(1, n + 1))
        assert compute.sum_min(n, 128) == sum(min(t, 128) for t in range(1, n + 1))
        assert compute.sum_floor(n, 4) == sum(t // 4 for t in range(1, n + 1))
        assert compute.sum_floor_cap(n, 4, 100) == sum(min(t // 4, 100) for t in range(1, n + 1))


def test_attention_flops_by_hand_llama():
    from kvcalc.model import attention as att
    from kvcalc.model import catalog
    m = catalog.load_model("llama-3-8b")
    g = att.resolve_groups(m)
    # 1,000 tokens from scratch: 2 x 32 heads x (128 + 128) x 32 layers x sum_{1..1000} t (= 500,500)
    assert compute.attention_flops(m, g, 0, 1000) == 2 * 32 * 256 * 32 * 500_500


def test_costs_scale_linearly_in_price_and_inversely_in_gpus():
    a1, _ = rows(usd_per_gpu_hour=10.0)
    a2, _ = rows(usd_per_gpu_hour=20.0)
    assert a2["usd_per_mtok_input"] == pytest.approx(2 * a1["usd_per_mtok_input"])
    assert a2["usd_per_mtok_blended"] == pytest.approx(2 * a1["usd_per_mtok_blended"])
    # the stated model (a given MFU) is linear in GPUs: FLOPs / (gpus x peak x MFU)
    s8 = rows("v4-flash-8xh100", gpus=8, mfu_prefill=0.2)[0]
    s16 = rows("v4-flash-8xh100", gpus=16, mfu_prefill=0.2)[0]
    assert s16["prefill_time_s"] == pytest.approx(s8["prefill_time_s"] / 2)
    # the serving model is not: 16-way TP pays more all-reduce and per-step overhead, so faster but not 2x
    s8, s16 = rows("v4-flash-8xh100", gpus=8)[0], rows("v4-flash-8xh100", gpus=16)[0]
    assert s8["prefill_time_s"] / 2 < s16["prefill_time_s"] < s8["prefill_time_s"]


def workloads():
    cls = st.builds(RequestClass, count=st.integers(3, 30), context_tokens=st.integers(600, 20_000),
                    output_tokens=st.integers(0, 1000))
    seg = st.builds(SharedSegment, tokens=st.integers(1, 200), groups=st.integers(1, 3))
    return st.builds(lambda c, s: WorkloadPreset(schema_version=1, source="t", display_name="t", classes=c,
                                                 shared=s),
                     st.lists(cls, min_size=1, max_size=3), st.lists(seg, max_size=3))


@settings(max_examples=40, deadline=None)
@given(w=workloads(), warm=st.booleans())
def test_property_c_never_prefills_more_than_a(w, warm):
    from kvcalc.model import catalog
    from kvcalc.serve.cost import CostInputs

    inp = CostInputs("m", catalog.load_model("llama-3-8b"), "h", catalog.load_hardware("h100-sxm"), 8, "w", w,
                     10.0, 1e15, 0.5, True, 50.0, warm=warm)
    a, c = strategy_row(inp, "lru")[0], strategy_row(inp, "prefix-tree")[0]
    assert c["prefill_tokens"] <= a["prefill_tokens"]
    assert c["prefill_flops"] <= a["prefill_flops"] * (1 + 1e-12)
    if not w.shared:
        assert c["prefill_tokens"] == a["prefill_tokens"] and c["prefill_flops"] == a["prefill_flops"]


def test_cli_compare_and_cost_json():
    env = run_cli("compare", "--format", "json").json()
    a, c = env["results"]
    assert a["strategy"] == "lru" and c["strategy"] == "prefix-tree"
    for k in ("prefill_tokens", "reused_tokens", "hit_rate", "prefill_flops", "prefill_time_s",
              "usd_per_mtok_input", "usd_per_mtok_output", "usd_per_mtok_blended"):
        assert k in a and k in c
    assert {d["field"] for d in env["tables"]["deltas"]} >= {"prefill_tokens", "usd_per_mtok_blended"}
    one = run_cli("cost", "--strategy", "lru", "--format", "json").json()["results"][0]
    assert one == a
    warm = run_cli("cost", "--warm", "--format", "json").json()["results"][0]
    assert warm["prefill_tokens"] == 120_000


def test_cli_inline_workload():
    env = run_cli("compare", "--requests", "10", "--context", "1000", "--shared-prefix", "100",
                  "--shared-prefix", "50:2", "--format", "json").json()
    a, c = env["results"]
    # 10 x 1,000 = 10,000; reused 100 x 9 + 50 x (5 - 1) x 2 = 900 + 400 = 1,300
    assert a["prefill_tokens"] == 10_000 and c["prefill_tokens"] == 8_700


@pytest.mark.parametrize("args,words", [
    (["compare", "--requests", "10", "--context", "100", "--shared-prefix", "200"], ["--shared-prefix", "longer"]),
    (["compare", "--requests", "3", "--context", "1000", "--shared-prefix", "10:5"], ["groups"]),
    (["compare", "--requests", "0", "--context", "1000"], ["--requests"]),
    (["compare", "--requests", "-5", "--context", "1000"], ["--requests"]),
    (["compare", "--mfu-prefill", "1.5"], ["--mfu-prefill"]),
    (["compare", "--mfu-prefill", "0"], ["--mfu-prefill"]),
    (["compare", "--price-per-gpu-hour", "-1"], ["--price-per-gpu-hour"]),
    (["cost", "--strategy", "fifo"], ["--strategy"]),
    (["compare", "--scenario", "artcle"], ["article"]),
    (["compare", "--requests", "10"], ["--context"]),
])
def test_bad_workloads_exit_2(args, words):
    assert_bad_input(run_cli(*args), *words)


def test_bad_workload_file(tmp_path):
    f = tmp_path / "w.toml"
    f.write_text('schema_version = 1\nsource = "t"\ndisplay_name = "t"\n[[classes]]\ncount = 0\n'
                 'context_tokens = 100\n')
    assert_bad_input(run_cli("compare", "--workload", str(f)), "w.toml", "classes.0.count")
    f.write_text('schema_version = 1\nsource = "t"\ndisplay_name = "t"\n[[classes]]\ncount = 4\n'
                 'context_tokens = 100\n[[shared]]\ntokens = 10\ngroups = 9\n')
    assert_bad_input(run_cli("compare", "--workload", str(f)), "w.toml", "shared.0.groups")


def _brute_force_cached(w):
    """Reference: walk every request, remember every group path prefix seen (the radix tree)."""
    from collections import Counter

    def group_path(w, i, n):  # request i's group at every level: floor(i x groups / n)
        return tuple(i * s.groups // n for s in w.shared)

    n = w.requests
    offsets = [0]
    for s in w.shared:
        offsets.append(offsets[-1] + s.tokens)
    classes = [ci for ci, c in enumerate(w.classes) for _ in range(c.count)]
    seen, out = set(), Counter()
    for i, ci in enumerate(classes):
        path = group_path(w, i, n)
        depth = 0
        while depth < len(path) and path[: depth + 1] in seen:
            depth += 1
        seen.update(path[: k + 1] for k in range(len(path)))
        out[(ci, offsets[depth])] += 1
    nodes = [len({group_path(w, i, n)[: s + 1] for i in range(n)}) for s in range(len(w.shared))]
    return out, nodes


@settings(max_examples=150)
@given(w=workloads())
def test_property_closed_form_prefix_tree_equals_request_walk(w):
    from kvcalc.serve.strategies import cached_prefixes, prefix_nodes

    ref, nodes = _brute_force_cached(w)
    assert cached_prefixes(w, "prefix-tree") == ref
    assert prefix_nodes(w) == nodes


def test_a_billion_requests_cost_no_loop():
    # 1e9 requests with a system prompt and 1,000 few-shot groups: the closed form touches ~1,000 requests
    env = run_cli("compare", "--requests", "1000000000", "--context", "4k", "--shared-prefix", "1k",
                  "--shared-prefix", "512:1000", "--format", "json").json()
    c = env["results"][1]
    # reused = 1,024 x (1e9 - 1) + 512 x (1e9 - 1,000)
    assert c["reused_tokens"] == 1024 * (10**9 - 1) + 512 * (10**9 - 1000)


def test_roofline_decode_by_hand_v4_flash():
    a, _ = rows("v4-flash-8xh100")
    # batch of 100 at mid-generation (8,000 + 250 and 2,000 + 250 tokens); KV read per step per request:
    # 8,250: swa 2 x 128 x 584 = 149,504; csa 21 x ((128 + min(2,062, 512)) x 584 + 2,062 x 68) = 10,793,496;
    #        hca 20 x (128 + 64) x 584 = 2,242,560 -> 13,185,560 B
    # 2,250: 149,504 + 21 x (640 x 584 + 562 x 68) = 8,651,496 + 20 x (128 + 17) x 584 = 1,693,600 -> 10,494,600 B
    kv_read = 20 * 13_185_560 + 80 * 10_494_600
    # weights read: a batch of 100 x 13 B active params touches every parameter, so the whole checkpoint:
    # min(params_total, 100 x params_active) x (weights_gb / params_total) = 155,926,583,096 B (FP4 experts, not
    # 1 B/param); HBM 8 x 3.35e12 B/s x 0.9
    t_memory = (155_926_583_096 + kv_read) / (8 * 3.35e12 * 0.9)
    t_compute = 100 * 2 * 13e9 / (8 * 1978.9e12 * 0.5)      # 0.33 ms: decode is memory-bound
    assert t_memory > t_compute
    assert a["decode_tokens_per_s_roofline"] == pytest.approx(1 / t_memory)     # 153.6 tok/s


def test_spill_is_reported_not_hidden():
    # Llama-3-70B on 8 x H100: 1,000 requests of 32,768 tokens hold 1,000 x 327,680 x 32,768 B = 10.7 TB of KV;
    # one eighth per GPU (8 KV heads over 8 ranks) = 1.342 TB against the 79.19 GiB CUDA reports x 0.9
    # - 70,553,706,496 x 2 / 8 = 76,526,653,538.3 - 17,638,426,624 = 58,888,226,914.3 B
    env = run_cli("compare", "--model", "llama-3-70b", "--scenario", "v4-flash-8xh100", "--requests", "1000",
                  "--context", "32k", "--format", "json").json()
    a = env["results"][0]
    per_gpu = 1000 * 327_680 * 32_768 / 8
    assert a["kv_stored_bytes_per_gpu"] == pytest.approx(per_gpu)
    assert a["kv_fits"] is False
    assert a["kv_spill_bytes_per_gpu"] == pytest.approx(per_gpu - 58_888_226_914.304)
    # the serving model (issue 18): KV that does not fit means queueing in the scheduler, not every request
    # decoding at once: the pool of floor(58,888,226,914 / (16 x 40,960 B)) = 89,856 blocks holds 89,856 / 2,048
    # = 43.9 prompts of 32,768 tokens (16-token blocks), so a few dozen run at once and the rest wait
    assert any("the scheduler queues and preempts" in n for n in env["notes"])
    assert 0 < a["peak_running"] < 1000
    # the stated path keeps its spill note
    env = run_cli("compare", "--model", "llama-3-70b", "--scenario", "v4-flash-8xh100", "--requests", "1000",
                  "--context", "32k", "--decode-tokens-per-s", "60", "--format", "json").json()
    assert any("spills to DRAM/SSD" in n for n in env["notes"])
