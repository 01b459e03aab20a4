"""No silent wrong numbers: prefix levels and groups in closed form, KV held per layer group under sharing,
TTFT models, derived scenarios for a user's model (issue 9 items 2-5, issue 14 item 4)."""

from collections import Counter

import pytest
from conftest import run_cli
from hypothesis import given, settings
from hypothesis import strategies as st

from kvcalc.model import attention as att
from kvcalc.model import catalog
from kvcalc.model.workload_schema import RequestClass, SharedSegment, WorkloadPreset
from kvcalc.out.errors import InputError
from kvcalc.serve.cost import CostInputs, strategy_row
from kvcalc.serve.scenario import Overrides, resolve
from kvcalc.serve.strategies import cached_prefixes, prefix_nodes
from kvcalc.serve.ttft import ttft_by_slice


def workload(classes, shared):
    return WorkloadPreset(schema_version=1, source="t", display_name="t",
                          classes=[RequestClass(count=n, context_tokens=L, output_tokens=10, name=f"c{i}")
                                   for i, (n, L) in enumerate(classes)],
                          shared=[SharedSegment(tokens=t, groups=g) for t, g in shared])


def request_walk(w):
    """Reference: walk every request; it reuses the longest run of leading segments whose exact group path an
    earlier request built (request i is in group floor(i g / n) at each level)."""
    n = w.requests
    offsets = [0]
    for s in w.shared:
        offsets.append(offsets[-1] + s.tokens)
    classes = [ci for ci, c in enumerate(w.classes) for _ in range(c.count)]
    seen, out, cached = set(), Counter(), []
    for i, ci in enumerate(classes):
        path = tuple(i * s.groups // n for s in w.shared)
        depth = 0
        while depth < len(path) and path[: depth + 1] in seen:
            depth += 1
        seen.update(path[: k + 1] for k in range(len(path)))
        out[(ci, offsets[depth])] += 1
        cached.append((ci, offsets[depth]))
    nodes = [len({tuple(i * s.groups // n for s in w.shared[: lv + 1]) for i in range(n)})
             for lv in range(len(w.shared))]
    return out, nodes, cached


# ---------------------------------------------------------------- prefix levels and groups (9.2, 14.4)

@settings(max_examples=200, deadline=None)
@given(counts=st.lists(st.integers(1, 40), min_size=1, max_size=3),
       groups=st.lists(st.integers(1, 12), max_size=6))
def test_property_one_pass_levels_equal_the_request_walk(counts, groups):
    # group counts up to 12 over up to 6 levels: dividing (2, 4), equal (3, 3) and coprime (5, 7) mixtures
    n = sum(counts)
    w = workload([(c, 5000) for c in counts], [(10, min(g, n)) for g in groups])
    ref, nodes, _ = request_walk(w)
    assert cached_prefixes(w, "prefix-tree") == ref
    assert prefix_nodes(w) == nodes


def test_thirty_million_groups_are_one_term():
    # every request is its own group, so none reuses anything (reused = 0); was 62 s and 4.4 GB, now one term
    env = run_cli("compare", "--requests", "30000000", "--context", "4k", "--shared-prefix", "1:30000000",
                  "--format", "json").json()
    c = env["results"][1]
    assert c["reused_tokens"] == 0 and c["prefill_tokens"] == 30_000_000 * 4096


def test_a_billion_groups_closed_form():
    # 1e9 requests, a 1k system prompt and 1e9 one-request groups of 512 tokens: each request reuses only the
    # system prompt (all but request 0): reused = 1,024 x (1e9 - 1)
    w = workload([(10**9, 4096)], [(1024, 1), (512, 10**9)])
    assert cached_prefixes(w, "prefix-tree") == Counter({(0, 0): 1, (0, 1024): 10**9 - 1})
    assert prefix_nodes(w) == [1, 10**9]


def test_coprime_groups_by_hand():
    # 12 requests; level 0: 3 groups start at 0, 4, 8; level 1: 4 groups start at 0, 3, 6, 9.
    # Firsts: 0 (level 0), 4, 8 (level 0), 3, 6, 9 (level 1); the other 6 reuse both segments.
    w = workload([(12, 1000)], [(100, 3), (50, 4)])
    assert cached_prefixes(w, "prefix-tree") == Counter({(0, 0): 3, (0, 100): 3, (0, 150): 6})
    assert prefix_nodes(w) == [3, 6]


def test_many_small_coprime_levels_list_each_start_once():
    # 40 levels with groups 1..40 over 1,000 requests: testing each level's starts against every kept count would
    # cost more than listing the 820 starts once, so the union fallback answers; it must equal the request walk
    w = workload([(600, 5000), (400, 6000)], [(10, g) for g in range(1, 41)])
    ref, nodes, _ = request_walk(w)
    assert cached_prefixes(w, "prefix-tree") == ref and prefix_nodes(w) == nodes


def test_a_thousand_levels():
    # 1,000 nested levels, level s with (s mod 7) + 1 groups over 5,040 requests (= 7!, every count divides it)
    w = workload([(5040, 100_000)], [(50, s % 7 + 1) for s in range(1000)])
    ref, nodes, _ = request_walk(workload([(5040, 100_000)], [(50, s % 7 + 1) for s in range(20)]))
    assert prefix_nodes(w)[:20] == nodes
    # from level 6 on every count 1..7 has appeared, so no later level adds a group start
    assert len(set(prefix_nodes(w)[6:])) == 1


# ---------------------------------------------------------------- KV held per layer group (9.2)

def test_mistral_kv_held_by_hand():
    # Mistral 7B v0.1: 32 layers x 8 KV heads x (128 + 128) x 2 B = 131,072 B/token; window 4,096.
    # Each 8,192-token request stores its last 4,096 tokens: 4,096 x 131,072 = 536,870,912 B.
    # A 6,144-token shared prefix: the window (4,096, 8,192] overlaps it in 2,048 tokens, so each of the
    # 9 later requests saves 2,048 x 131,072 = 268,435,456 B. Held = 10 x 536,870,912 - 9 x 268,435,456.
    # (the closed forms: --decode-tokens-per-s; one GPU cannot be split into a prefill and a decode engine, and a
    # simulated hand-off moves what the decode side does not yet hold: tests/test_cost_disagg.py)
    env = run_cli("compare", "--model", "mistral-7b-v0.1", "--gpus", "1", "--requests", "10", "--context", "8k",
                  "--shared-prefix", "6k", "--pd-link", "ib-ndr400", "--decode-tokens-per-s", "60",
                  "--format", "json").json()
    a, c = env["results"][:2]
    assert a["kv_stored_bytes"] == 10 * 536_870_912
    assert c["kv_stored_bytes"] == 10 * 536_870_912 - 9 * 268_435_456 == 2_952_790_016
    assert c["kv_handoff_bytes"] == 2_952_790_016
    assert c["pd_handoff_s_per_request"] > 0 and c["pd_exposed_s_per_request"] >= 0


def entries_by_hand(g, L, c):
    """Per layer, (dense entries kept, compressed entries kept, of which built from the first c tokens): token
    t is kept densely when t > L - W; compressed entry k covers tokens (k-1) r + 1 .. k r."""
    dense = [t for t in range(1, L + 1) if g.window_tokens is None or t > L - g.window_tokens]
    comp = list(range(1, L // g.ratio + 1)) if g.ratio else []
    return len(dense), len(comp), sum(t <= c for t in dense), sum(k * g.ratio <= c for k in comp)


def held_by_hand(groups, cached, contexts):
    total = 0.0
    for (ci, c), L in zip(cached, contexts):
        for g in groups:
            d, k, ds, ks = entries_by_hand(g, L, c)
            idx = {"dense": d - ds, "compressed": k - ks}.get(g.indexed, 0)
            total += g.layers * ((d - ds + k - ks) * g.entry_bytes + idx * g.indexer_bytes + g.state_bytes_per_layer)
    return total


WINDOWED = [name for name in catalog.names("models")
            if any(g.window_tokens for g in att.resolve_groups(catalog.load_model(name)))]


def test_windowed_models_are_the_ones_expected():
    assert {"mistral-7b-v0.1", "deepseek-v4-flash", "deepseek-v4-pro"} <= set(WINDOWED)


@pytest.mark.parametrize("name", WINDOWED)
@pytest.mark.parametrize("shape", [([(6, 1000)], [(700, 1)]), ([(4, 300), (5, 900)], [(200, 1), (90, 3)]),
                                   ([(7, 5000)], [(4500, 2)])])
def test_windowed_kv_held_equals_per_group_hand_count(name, shape):
    model = catalog.load_model(name)
    groups = att.resolve_groups(model)
    w = workload(*shape)
    _, _, cached = request_walk(w)
    contexts = [c.context_tokens for c in w.classes for _ in range(c.count)]
    inp = CostInputs(name, model, "h", catalog.load_hardware("h100-sxm"), 8, "w", w, 10.0, 1e15, 0.5, True, 50.0)
    row = strategy_row(inp, "prefix-tree")[0]
    assert row["kv_stored_bytes"] >= 0 and row["kv_handoff_bytes"] >= 0
    assert row["kv_stored_bytes"] == pytest.approx(held_by_hand(groups, cached, contexts), rel=1e-12)


# ---------------------------------------------------------------- TTFT models (9.4)

def test_ttft_models_by_hand():
    # works 1, 2, 3 FLOP at 1 FLOP/s. Processor sharing: 1+1+1 = 3; 1+2+2 = 5; 1+2+3 = 6.
    # FCFS in order: 1, 3, 6. Even split (3 requests share): 3, 6, 9.
    works, counts = [2.0, 1.0, 3.0], [1, 1, 1]
    assert ttft_by_slice(works, counts, [1, 0, 2], 1.0, "processor-sharing") == [(5, 5), (3, 3), (6, 6)]
    assert ttft_by_slice(works, counts, [1, 0, 2], 1.0, "fcfs") == [(3, 3), (1, 1), (6, 6)]
    assert ttft_by_slice(works, counts, [1, 0, 2], 1.0, "even-split") == [(6, 6), (3, 3), (9, 9)]
    # a slice of 3 requests of 2 FLOP served FCFS after 1 FLOP: 3, 5, 7 -> sum 15, max 7
    assert ttft_by_slice([1.0, 2.0], [1, 3], [0, 1], 1.0, "fcfs")[1] == (15, 7)


@pytest.mark.parametrize("scenario", catalog.names("scenarios"))
@pytest.mark.parametrize("model", [None, "processor-sharing", "fcfs"])
def test_ttft_max_never_exceeds_the_batch(scenario, model):
    # the stated TTFT models (every scenario with a stated decode rate): no request waits beyond the batch's prefill
    for row in (rows := [strategy_row(resolve(scenario, Overrides(ttft_model=model, decode_tokens_per_s=60.0)), s)[0]
                         for s in ("lru", "prefix-tree")]):
        assert row["ttft_max_s"] <= row["prefill_time_s"] * (1 + 1e-12)
    assert rows
    # the serving model (issue 18): a request's first token comes within the run, and at the earliest after its
    # own prefill; prefill_time_s there is the prefill tokens' share of the steps, which also carry decodes
    inp = resolve(scenario, Overrides(ttft_model=model))
    if inp.decode_model == "serving":
        for s in ("lru", "prefix-tree"):
            row = strategy_row(inp, s)[0]
            assert row["ttft_max_s"] <= row["wall_time_s"] and row["ttft_mean_s"] <= row["ttft_max_s"]


def test_article_short_request_ttft_reproduced_by_even_split_and_processor_sharing():
    # 2,000 x 26 GFLOP / (16 PFLOP/s / 100 requests) = 0.325 s: under processor sharing the 80 short requests
    # finish while all 100 share the node, so both models give the article's figure
    for model in ("even-split", "processor-sharing"):
        _, classes = strategy_row(resolve("article", Overrides(ttft_model=model)), "lru")
        assert {r["class"]: r["ttft_mean_s"] for r in classes}["short (2K)"] == pytest.approx(0.325)
    # even split lets an 8K request "wait" 8,000 x 26e9 x 100 / 16e15 = 1.3 s, 2.5 x the 0.52 s batch
    a = strategy_row(resolve("article", Overrides(ttft_model="even-split")), "lru")[0]
    assert a["ttft_max_s"] == pytest.approx(1.3) and a["prefill_time_s"] == pytest.approx(0.52)


def test_bad_ttft_model_exits_2():
    r = run_cli("compare", "--ttft-model", "round-robin")
    assert r.code == 2 and "--ttft-model" in r.err


# ---------------------------------------------------------------- derived scenario (9.5)

def test_user_model_gets_derived_physics():
    env = run_cli("compare", "--model", "llama-3-70b", "--hardware", "h200-sxm", "--format", "json").json()
    i = env["inputs"]
    assert i["scenario"].startswith("derived")
    # H200 SXM dense BF16 989.4 TFLOP/s for a 2 B/param model; its preset's $6.31/h; v4-flash-8xh100's MFU 0.2
    assert i["peak_flops_per_gpu"] == pytest.approx(989.4e12)
    assert i["usd_per_gpu_hour"] == pytest.approx(6.31)
    assert i["mfu_prefill"] == 0.2 and i["attention_flops"] is True and i["decode_tokens_per_s"] == 60
    table = run_cli("compare", "--model", "llama-3-70b", "--hardware", "h200-sxm").out
    assert "derived" in table


def test_fp8_model_gets_fp8_peak_and_no_options_stay_the_article():
    i = run_cli("cost", "--model", "deepseek-v3", "--format", "json").json()["inputs"]
    # 1 B/param weights -> H100 SXM dense FP8 1,978.9 TFLOP/s
    assert i["peak_flops_per_gpu"] == pytest.approx(1978.9e12) and i["scenario"].startswith("derived")
    i = run_cli("cost", "--format", "json").json()["inputs"]
    assert i["scenario"] == "article" and i["peak_flops_per_gpu"] == 2e15 and i["mfu_prefill"] == 1


# ---------------------------------------------------------------- prefill FLOPs as engines spend them (9.3)

def test_qwen_prefill_flops_32k_by_hand():
    # matmuls: 2 x (7,615,616,512 - 2 x 152,064 x 3,584) per token x 32,768 + 2 x 152,064 x 3,584 once (logits
    # of the last token); attention: 2 x 28 q heads x (128 + 128) x 28 layers x (32,768 x 32,769 / 2) pairs
    env = run_cli("cost", "--model", "qwen2.5-7b", "--strategy", "lru", "--requests", "1", "--context", "32k",
                  "--format", "json").json()
    head = 152_064 * 3_584
    attention = 2 * 28 * (128 + 128) * 28 * (32_768 * 32_769 // 2)
    expected = 2 * (7_615_616_512 - 2 * head) * 32_768 + 2 * head + attention
    assert env["results"][0]["prefill_flops"] == pytest.approx(expected, rel=1e-6)
    assert catalog.load_model("qwen2.5-7b").params_total == 7_615_616_512


def test_tied_embedding_counted_once():
    from dataclasses import replace

    from kvcalc.serve import compute

    m = replace(catalog.load_model("qwen2.5-7b"), tie_word_embeddings=True)
    # tied: params_total holds the matrix once, so the per-token part is total - 152,064 x 3,584
    assert compute.per_token_matmul_params(m) == pytest.approx(7_615_616_512 - 152_064 * 3_584)
    assert compute.matmul_flops(m, 10) == pytest.approx(2 * (7_615_616_512 - 152_064 * 3_584) * 10
                                                        + 2 * 152_064 * 3_584)
    assert compute.matmul_flops(m, 0) == 0


def test_article_keeps_its_26_gflop_per_token():
    # the article's model has no vocab/hidden: 2 x 13e9 x 320,000 = 8.32e15 (matmuls only, MFU 1)
    a = strategy_row(resolve("article"), "lru")[0]
    assert a["prefill_flops"] == pytest.approx(8.32e15)


MODEL_WITHOUT_ATTENTION = """schema_version = 1
source = "test: a GQA model file without q_heads / head dims"
display_name = "t"
params_total_b = 8.0
params_active_b = 8.0
weight_bytes_per_param = 2
[[layer_groups]]
kind = "full"
layers = 32
kv_heads = 8
head_dim = 128
"""


def test_model_without_attention_dims_says_so(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text(MODEL_WITHOUT_ATTENTION)
    r = run_cli("cost", "--model", str(f))
    assert r.code == 0
    assert "attention FLOPs are left out" in r.err + r.out and "vocab_size/hidden_size" in r.err + r.out


def test_embedding_larger_than_the_model_is_refused(tmp_path):
    f = tmp_path / "m.toml"
    f.write_text(MODEL_WITHOUT_ATTENTION.replace("weight_bytes_per_param = 2\n", "weight_bytes_per_param = 2\n"
                                                 "vocab_size = 1000000\nhidden_size = 8192\n"))
    r = run_cli("cost", "--model", str(f))
    # 2 x 1e6 x 8,192 = 16.4e9 params > 8e9 active
    assert r.code == 2 and "vocab_size" in r.err


def test_transfer_prefill_uses_the_models_dtype_peak():
    # Llama 3 70B (BF16) on 8 x H100: 2 x 68,452,360,192 / (8 x 989.4e12 BF16 dense x 0.2) = 8.64822e-5 s/token
    i = run_cli("transfer", "--model", "llama-3-70b", "--format", "json").json()["inputs"]
    assert i["prefill_s_per_token"] == pytest.approx(2 * 68_452_360_192 / (8 * 989.4e12 * 0.2), rel=1e-12)
    # V4 Flash (FP8 weights): 2 x 11,940,938,240 / (8 x 1,978.9e12 x 0.2) = 7.54266e-6 s/token
    i = run_cli("transfer", "--model", "deepseek-v4-flash", "--format", "json").json()["inputs"]
    assert i["prefill_s_per_token"] == pytest.approx(7.54266e-6, rel=1e-5)


# ---------------------------------------------------------------- presets that match their sources (9.7)

def test_b200_and_h800_presets_match_their_sources():
    # HGX B200: 62 TB/s aggregate HBM3e over 8 GPUs = 7.75 TB/s each (not the chip's "up to 8 TB/s")
    assert catalog.load_hardware("b200").hbm_bandwidth_bytes_per_s == 62e12 / 8
    # H800 NVLink: datasheet 400 GB/s bidirectional = 200 GB/s a direction; 160 GB/s is DeepEP's measured maximum
    link = catalog.load_link("nvlink-h800")
    assert link.bandwidth_bytes_per_s("theoretical") == 200e9 and link.bandwidth_bytes_per_s("measured") == 160e9
    assert "DeepEP" in link.source and "measured" in link.source


def test_page_in_moves_each_gpus_share_under_tp():
    # Llama 3 70B, 16-token block: 16 x 327,680 = 5,242,880 B; 8 KV heads over 8 ranks -> 655,360 B per GPU;
    # over PCIe Gen5 (measured 55.5 GB/s, 6 us): 6e-6 + 655,360 / 55.5e9 = 17.81 us. With --attention dp each
    # GPU holds whole requests and pages in the whole block: 6e-6 + 5,242,880 / 55.5e9 = 100.5 us.
    tp = run_cli("capacity", "--model", "llama-3-70b", "--format", "json").json()["results"][0]
    assert tp["block_bytes"] == 5_242_880 and tp["block_bytes_per_gpu"] == 655_360
    assert tp["block_page_in_s"] == pytest.approx(6e-6 + 655_360 / 55.5e9)
    dp = run_cli("capacity", "--model", "llama-3-70b", "--attention", "dp", "--format", "json").json()["results"][0]
    assert dp["block_page_in_s"] == pytest.approx(6e-6 + 5_242_880 / 55.5e9)


@pytest.mark.parametrize("wide", [False, True])
def test_numpy_walk_of_group_starts_equals_the_request_walk(monkeypatch, wide):
    # force the chunked numpy walk (and its Python-integer variant) on small workloads
    from kvcalc.serve import strategies

    monkeypatch.setattr(strategies, "_PYTHON_WALK", 0)
    monkeypatch.setattr(strategies, "_CHUNK", 7)
    if wide:
        monkeypatch.setattr(strategies, "_INT64_SAFE", 1)
    cases = [([30, 17], [5, 7, 3, 11]), ([101], [2, 3, 5, 7, 13, 101]), ([9, 9, 9], [4, 6, 9, 10]),
             ([600, 401], [2, 3, 5, 7])]    # few starts over many requests: windows wider than 4 x 7 (sorted path)
    for counts, groups in cases:
        w = workload([(c, 5000) for c in counts], [(10, g) for g in groups])
        ref, nodes, _ = request_walk(w)
        assert cached_prefixes(w, "prefix-tree") == ref and prefix_nodes(w) == nodes
        # and the other fallback, every level's starts listed once (windows of 7 starts)
        bounds = [0, *[sum(counts[: j + 1]) for j in range(len(counts))]]
        assert strategies._union_counts(w, bounds) == strategies.first_counts(w)


def test_group_counts_too_costly_to_walk_are_refused_naming_them():
    from kvcalc.out.units import MAX_GROUP_START_TESTS
    from kvcalc.serve import strategies

    # 10^12 requests, 499,999,999,991 and 499,999,999,973 groups (neither divides the other): the closed-form
    # pass would test each start of the second level against the first (~5e11 tests), a listing 3 x 1e12:
    # hours. Refused at once, exit 2, naming both counts.
    n = 10**12
    r = run_cli("compare", "--requests", str(n), "--context", "1000", "--shared-prefix", f"100:{n // 2 - 9}",
                "--shared-prefix", f"100:{n // 2 - 27}")
    assert r.code == 2 and "499,999,999,991 and 499,999,999,973 do not divide" in r.err
    # 10^8 requests, 9,999,991 and 19,999,999 groups: 19,999,999 tests, just under the 2 x 10^7 limit: answered
    w = workload([(10**8, 1000)], [(100, 9_999_991), (100, 19_999_999)])
    assert strategies.start_tests(w) == (19_999_999, 29_999_990) and 19_999_999 <= MAX_GROUP_START_TESTS
    # dividing counts cost nothing whatever their size (closed form): 10^9 and 5 x 10^8 groups
    w = workload([(10**9, 1000)], [(100, 5 * 10**8), (100, 10**9)])
    assert strategies.start_tests(w) == (0, 15 * 10**8)
    # many small mutually prime counts: 1,000 levels of the primes above 19,000 (sum ~2.3e7 starts) would be
    # listed at ~3 tests a start, and walking them costs far more: refused
    primes, x = [], 19_000
    while len(primes) < 1000:
        x += 1
        if all(x % p for p in range(2, int(x**0.5) + 1)):
            primes.append(x)
    w = workload([(10**8, 1000)], [(1, p) for p in primes])
    with pytest.raises(InputError, match="do not divide each other"):
        strategies.start_tests(w)


@settings(max_examples=60, deadline=None)
@given(counts=st.lists(st.integers(1, 30), min_size=1, max_size=3),
       contexts=st.lists(st.integers(3000, 9000), min_size=3, max_size=3),
       shared=st.lists(st.tuples(st.integers(1, 900), st.integers(1, 6)), max_size=3),
       model=st.sampled_from(["processor-sharing", "fcfs"]), warm=st.booleans(),
       name=st.sampled_from(["mistral-7b-v0.1", "deepseek-v4-flash", "llama-3-8b"]))
def test_property_ttft_within_batch_and_kv_held_not_negative(counts, contexts, shared, model, warm, name):
    n = sum(counts)
    w = workload(list(zip(counts, contexts)), [(t, min(g, n)) for t, g in shared])
    inp = CostInputs(name, catalog.load_model(name), "h", catalog.load_hardware("h100-sxm"), 8, "w", w, 10.0, 1e15,
                     0.5, True, 50.0, warm=warm, ttft_model=model)
    for strategy in ("lru", "prefix-tree"):
        row, classes = strategy_row(inp, strategy)
        assert row["ttft_max_s"] <= row["prefill_time_s"] * (1 + 1e-12)
        assert all(c["ttft_mean_s"] <= row["ttft_max_s"] * (1 + 1e-12) for c in classes)
        assert row["kv_stored_bytes"] >= 0 and row["kv_handoff_bytes"] >= 0


def test_sweep_over_models_uses_the_same_derived_scenario_as_the_command():
    # `kvcalc sweep cost --vary model=...` must equal `kvcalc cost --model ...` point by point (derived physics)
    rows = run_cli("sweep", "cost", "--vary", "model=llama-3-8b,qwen2.5-7b", "--format", "json").json()["results"]
    for row, model in zip(rows, ("llama-3-8b", "qwen2.5-7b")):
        single = run_cli("cost", "--model", model, "--format", "json").json()["results"][0]
        assert row["prefill_time_s"] == single["prefill_time_s"] and row["usd_per_mtok_blended"] == single[
            "usd_per_mtok_blended"]


@given(st.lists(st.one_of(st.integers(1, 60), st.sampled_from([64, 128, 96, 7 * 11 * 13, 2**40, 3**25, 2**61])),
                min_size=1, max_size=200))
def test_walk_dry_run_in_numpy_equals_the_python_one(groups):
    """start_tests' dry run over many levels keeps its counts in a numpy array: the same tests and the same first
    pair of non-dividing counts as the plain loop (divisor chains, repeats, primes, counts up to 2^61)."""
    from kvcalc.serve import strategies

    assert strategies._walk_tests_numpy(groups) == strategies._walk_tests(groups)
    plain = strategies._walk_tests
    try:  # and the plain loop all the way (it hands over to numpy past _NUMPY_KEPT kept counts)
        strategies._NUMPY_KEPT = 10**9
        assert plain(groups) == strategies._walk_tests_numpy(groups)
    finally:
        strategies._NUMPY_KEPT = 64


def test_walk_dry_run_by_hand():
    from kvcalc.serve import strategies

    # kept [4]; 6: 4 does not divide 6 -> 6 x 1 tests, kept [4, 6]; 12: both divide it -> closed form, kept [12];
    # 12 again divides 12 -> nothing; 5: 12 does not divide 5 -> 5 x 1 tests, kept [12, 5]: 6 + 5 = 11 tests,
    # the first pair (4, 6)
    for walk in (strategies._walk_tests, strategies._walk_tests_numpy):
        assert walk([4, 6, 12, 12, 5]) == (11, (4, 6))
        assert walk([1, 2, 4, 8]) == (0, None)
    # 200 primes from 2 on: level j tests its p against the j primes kept before it (past 64 kept: numpy)
    primes = [p for p in range(2, 1300) if all(p % q for q in range(2, int(p**0.5) + 1))][:200]
    assert strategies._walk_tests(primes) == (sum(j * p for j, p in enumerate(primes)), (2, 3))
