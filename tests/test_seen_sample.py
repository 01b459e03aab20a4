"""The infinite cache of sparse ids from a bounded sample (issue 22: memory bounded by the cache, not the ids):
exact while the sample holds every id; halving by hand; on random 64-bit ids the estimates fall within their
stated standard errors; the output names them as estimates; --exact-stats keeps them exact."""

from __future__ import annotations

import json
import random
import tempfile
from pathlib import Path
from unittest.mock import patch

from conftest import run_cli
from hypothesis import given, settings
from test_trace_lean import _engine, id_traces

import kvcalc.trace.lean as lean
import kvcalc.trace.seen_sample as seen_sample
from kvcalc.trace.lean import lean_analysis
from kvcalc.trace.seen_sample import KEY_PRIME, SeenSample, sample_key


@settings(max_examples=200, deadline=None)
@given(id_traces())
def test_exact_while_the_sample_holds_every_id(case) -> None:
    # fewer distinct ids than MAX_SAMPLED_IDS: the rate stays 1, every figure equals the exact replay, errors 0
    block_tokens, lines, _ = case
    with tempfile.TemporaryDirectory() as tmp, patch.object(lean, "WIDE_TABLE_BYTES", 0), \
            patch.object(lean, "TABLE_BYTES_PER_BLOCK", 0):
        path = str(Path(tmp) / "t.jsonl")
        Path(path).write_text("".join(line + "\n" for line in lines))
        exact = _engine(path, [block_tokens, None], block_tokens)
        for caps in ([None], [block_tokens, None], [3 * block_tokens]):
            est = lean_analysis(path, caps, block_tokens, exact_stats=False)
            e = est.stats.estimate
            assert e is None  # the sample held every id: exact, and not labelled an estimate
            assert est.stats.distinct_blocks == exact.stats.distinct_blocks
            assert est.stats.max_reused_tokens == exact.stats.max_reused_tokens
            assert est.results == _engine(path, caps, block_tokens).results


def test_halving_by_hand() -> None:
    # keys are id mod 1,048,573: ids 0, 1, 2, 3 have keys 0..3; ids KEY_PRIME + k have key k too
    assert [sample_key(h) for h in (0, 3, KEY_PRIME + 5, -1)] == [0, 3, 5, KEY_PRIME - 1]
    s = SeenSample([0, 1, 2], max_ids=2)  # 3 ids > 2: threshold KEY_PRIME -> 524,286 keeps all three, ... until
    # 2 ids fit: halvings 524286, 262143, ..., 3 (0, 1, 2 kept), 1 (only id 0): 20 halvings
    assert s.ids == {0} and s.threshold == 1 and s.rate == 1 / KEY_PRIME
    s = SeenSample([], max_ids=4)
    # request [0, 1, 2] at block 2 tokens, input 5: all unseen, marked; then [0, 1, 2] again: 3 extra hits,
    # tokens 2 + 2 + 1 (the last block holds 5 - 4 = 1 token)
    s.add([0, 1, 2], 0, 5, 2)
    s.add([0, 1, 2], 0, 5, 2)
    assert s.extra == {0: [1, 2], 1: [1, 2], 2: [1, 1]}
    distinct, blocks, tokens, errors = s.estimate()
    assert (distinct, blocks, tokens, errors.rate) == (3, 3, 5, 1.0)
    # a break in the run: [0, 9, 1]: 0 seen (hit), 9 unseen (the run ends; marked), 1 not counted
    s.add([0, 9, 1], 0, 6, 2)
    assert s.extra[0] == [2, 4] and s.extra[1] == [1, 2] and 9 in s.ids
    # from position 1 on (the LRU run covered block 0): 9 and 1 seen now -> extra hits on both
    s.add([0, 9, 1], 1, 6, 2)
    assert s.extra[9] == [1, 2] and s.extra[1] == [2, 4]
    # a fifth id: 5 > 4, the threshold halves (floor) 1,048,573 -> 524,286 -> ... -> 15 (keys 0, 1, 2, 9, 7 all
    # below it) -> 7, which keeps keys 0..6 (ids 0, 1, 2) only: 9 and 7 go, with 9's counts
    s.add([7], 0, 2, 2)
    assert s.ids == {0, 1, 2} and 9 not in s.extra and s.threshold == 7


def test_horvitz_thompson_by_hand() -> None:
    # rate 1/2 (threshold halved once by hand): estimates are the sampled counts x 2; errors sqrt((1 - R) x
    # sum y^2) / R: ids with extra blocks 1 and 3 -> sqrt(0.5 x 10) / 0.5 = 4.472...; distinct sqrt(2 x 0.5) / 0.5
    s = SeenSample([], max_ids=100)
    s.threshold = KEY_PRIME / 2
    s.ids = {1, 2}
    s.extra = {1: [1, 10], 2: [3, 20]}
    distinct, blocks, tokens, e = s.estimate()
    assert (distinct, blocks, tokens) == (4, 8, 60)
    assert abs(e.hit_blocks_std_error - (0.5 * 10) ** 0.5 / 0.5) < 1e-12
    assert abs(e.distinct_blocks_std_error - 2.0) < 1e-12
    assert abs(e.reused_tokens_std_error - (0.5 * 500) ** 0.5 / 0.5) < 1e-12


def _prefix_trace(path: Path, requests: int, seed: int) -> None:
    """Conversations over random 64-bit ids: a shared system prompt, turns extending their conversation's
    prefix (Mooncake-like reuse), block 16, partial last blocks."""
    rng = random.Random(seed)
    system = [rng.getrandbits(64) - 2**63 for _ in range(4)]
    chats: list[list[int]] = []
    with open(path, "w") as out:
        for i in range(requests):
            if not chats or rng.random() < 0.3:
                chats.append(list(system))
            chat = rng.choice(chats[-40:])
            chat += [rng.getrandbits(64) - 2**63 for _ in range(rng.randint(1, 12))]
            length = 16 * len(chat) - rng.randint(0, 15)
            out.write(json.dumps({"timestamp": i, "input_length": length, "output_length": 1,
                                  "hash_ids": chat}) + "\n")


def test_random_64_bit_ids_within_the_stated_errors(tmp_path: Path) -> None:
    # 3,000 requests, ~19,000 distinct random 64-bit ids, a sample of at most 2,048 ids (patched): over 4 seeds
    # every estimate is within 3 standard errors of the exact figure, and the sample stays within its bound
    with patch.object(seen_sample, "MAX_SAMPLED_IDS", 2048):
        for seed in range(4):
            path = tmp_path / f"r{seed}.jsonl"
            _prefix_trace(path, 3000, seed)
            exact = lean_analysis(path, [2000, None], 16, exact_stats=True)
            est = lean_analysis(path, [2000, None], 16, exact_stats=False)
            e, s, x = est.stats.estimate, est.stats, exact.stats
            assert e is not None and e.rate < 1 and e.sampled_ids <= 2048
            assert est.results[0] == exact.results[0]  # the finite capacity: exact either way
            assert abs(s.distinct_blocks - x.distinct_blocks) <= 3 * e.distinct_blocks_std_error
            assert abs(s.max_reused_tokens - x.max_reused_tokens) <= 3 * e.reused_tokens_std_error
            assert abs(est.results[1].hit_blocks - exact.results[1].hit_blocks) <= 3 * e.hit_blocks_std_error
            assert e.distinct_blocks_std_error < 0.05 * x.distinct_blocks  # and the errors are useful


def test_cli_names_the_estimates(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _prefix_trace(path, 3000, 7)
    # ~19,000 distinct ids: beyond the default bound (8,192 sampled ids), so the rate falls below 1
    r = run_cli("trace", str(path), "--block-tokens", "16", "--capacity", "2000,inf", "--format", "json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    trace = out["tables"]["trace"][0]
    assert "distinct_blocks" not in trace and trace["distinct_blocks_estimate"] > 0
    assert trace["distinct_blocks_std_error"] > 0 and 0 < trace["estimate_sample_rate"] < 1
    assert 0 < trace["max_token_hit_rate_std_error"] < 0.05
    finite, infinite = out["results"]
    assert (finite["estimated"], infinite["estimated"]) == (False, True)
    assert finite["token_hit_rate_std_error"] == 0 and infinite["token_hit_rate_std_error"] > 0
    exact = json.loads(run_cli("trace", str(path), "--block-tokens", "16", "--capacity", "2000,inf",
                               "--exact-stats", "--format", "json").out)
    assert exact["inputs"]["exact_stats"] and "estimated" not in exact["results"][1]
    expected = lean_analysis(path, [None], 16, exact_stats=True).stats
    assert exact["tables"]["trace"][0]["distinct_blocks"] == expected.distinct_blocks
    table = run_cli("trace", str(path), "--block-tokens", "16", "--capacity", "inf")
    assert "(est.)" in table.out and "± s.e." in table.out and "--exact-stats" in table.out
