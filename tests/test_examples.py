"""The files under examples/ that the README and the docs run on: the Mooncake slice and the workload file."""

from __future__ import annotations

import json

import pytest
from conftest import REPO, SHARED, run_cli

SLICE = REPO / "examples" / "traces" / "mooncake-last500.jsonl"
FULL = SHARED / "traces" / "mooncake_synthetic_trace.jsonl"


def test_the_slice_ships_with_its_licence_and_source():
    here = SLICE.parent
    assert "Apache License" in (here / "LICENSE").read_text() and "Version 2.0" in (here / "LICENSE").read_text()
    readme = (here / "README.md").read_text()
    assert "kvcache-ai/Mooncake" in readme and "FAST25-release/traces/synthetic_trace.jsonl" in readme


@pytest.mark.skipif(not FULL.is_file(), reason="the shared folder's full Mooncake trace is absent")
def test_the_slice_is_the_last_500_lines_of_the_trace_verbatim():
    lines = FULL.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3993 and SLICE.read_bytes() == b"".join(lines[-500:])


def test_the_slice_replays_to_an_independent_count():
    # The infinite cache by hand: a request reuses the run of its leading ids seen before (an id names the whole
    # prefix up to its block), min(blocks x 512, input) tokens; then all its ids are seen.
    seen: set[int] = set()
    requests = inputs = reused = 0
    for line in SLICE.read_text().splitlines():
        r = json.loads(line)
        assert len(r["hash_ids"]) == -(-r["input_length"] // 512)  # one id per 512-token block
        run = 0
        while run < len(r["hash_ids"]) and r["hash_ids"][run] in seen:
            run += 1
        requests, inputs, reused = requests + 1, inputs + r["input_length"], reused + min(512 * run, r["input_length"])
        seen.update(r["hash_ids"])
    assert (requests, inputs) == (500, 10_498_071)
    out = run_cli("trace", str(SLICE), "--capacity", "inf", "--format", "json")
    assert out.code == 0, out.err
    row = out.json()["results"][0]
    assert (row["requests"], row["input_tokens"], row["reused_tokens"]) == (requests, inputs, reused)
    assert round(100 * row["token_hit_rate"], 1) == 68.6  # as examples/traces/README.md says


def test_the_example_workload_is_the_article_case():
    # examples/workloads/article-100.toml is the preset with comments for a user to edit: the same results.
    mine = run_cli("compare", "--workload", str(REPO / "examples" / "workloads" / "article-100.toml"), "--format", "json")
    preset = run_cli("compare", "--workload", "article-100", "--format", "json")
    assert mine.code == preset.code == 0, (mine.err, preset.err)
    assert mine.json()["results"] == preset.json()["results"]
