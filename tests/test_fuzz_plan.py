"""Randomised hostile-input test of ``kvcalc plan`` (the pattern of tests/test_fuzz_bench.py, whose helpers it
reuses): valid options mixed with hostile values, presets, workload and trace files. Every run exits 0, 1 (only
with --check) or 2 with one line, no traceback, no inf/nan where a number goes. Searches are kept small (at most
4 GPUs, 40 prompts, one or two hardware presets) so the cases take seconds. KVCALC_FUZZ_CASES / KVCALC_FUZZ_SEED
as there."""

from __future__ import annotations

import os

import test_fuzz_cli as base
from test_fuzz_cli import BAD_NUMBERS, BAD_TOKENS, CONFIGS, Gen, files, hostile_files, trace_files  # noqa: F401

FIELDS = ["usd_per_hour", "gpus", "p99_ttft_ms", "p99_tpot_ms", "usd_per_mtok_blended", "output_throughput_per_gpu"]
BAD_DURATIONS = ["", "2", "-1s", "0ms", "1e400s", "nan s", "inf ms", "2 parsecs", "1e-9s", "1e9h", "é"]
CASES = int(os.environ.get("KVCALC_FUZZ_PLAN_CASES", "60"))  # each case is a small search: fewer than bench's


def gen_plan(g: Gen):
    g.args = ["plan"]
    if g.r.random() < 0.95:
        g.args += ["--model", g.pick(["qwen3-14b", "gpt-oss-20b", "llama-3-8b", "qwen3-30b-a3b",
                                      str(CONFIGS / "qwen3-32b")],
                                     ["nosuch", "", "é", "qwen3-14"] + hostile_files(g.files))]
    g.args += ["--hardware", g.pick(["h100-sxm", "a100-80g", "h100-sxm,b200", "h200-sxm"],
                                    ["", ",", "h100", "h100-sxm,h100-sxm", "nosuch,b200"] + hostile_files(g.files))]
    g.args += ["--max-gpus", g.pick(["1", "2", "4"], ["0", "-1", "1e400", "99999999999", "x", "", "4097"])]
    g.opt("--ttft-p99", ["2s", "500ms", "30s", "1min"], BAD_DURATIONS, p=0.6)
    g.opt("--tpot-p99", ["50ms", "20ms", "200ms", "1s"], BAD_DURATIONS, p=0.6)
    g.opt("--disagg", ["off", "on", "auto"], ["", "x", "ON"], p=0.15)
    g.opt("--pd-link", ["nvlink4", "ib-ndr400"], ["nosuch", ""] + hostile_files(g.files), p=0.05)
    g.opt("--strategy", ["lru", "prefix-tree"], ["", "A", "LRU"], p=0.3)
    g.opt("--top", ["1", "3", "5"], ["0", "-1", "x", "1e400", "100000"], p=0.2)
    g.opt("--price-per-gpu-hour", ["1", "2.5"], p=0.1)
    g.opt("--kv-dtype", ["bf16", "fp8"], ["fp7", ""], p=0.1)
    g.opt("--weights-dtype", ["bf16", "fp8", "int4"], ["fp7", ""], p=0.1)
    n = g.pick(["1", "10", "40"], ["0", "-1", "1e400", "99999999999", "x", ""])
    g.args += ["--num-prompts", n]
    source = g.r.random()
    if source < 0.15:
        g.args += ["--trace", g.pick([g.files["trace.jsonl"]] + trace_files(g.files, lengths_only=True),
                                     hostile_files(g.files, trace=True))]
        g.opt("--block-tokens", ["16"], ["0", "-1", "x", "512"], p=0.8)
        g.flag("--skip-bad", 0.3)
        g.opt("--rate-scale", ["0.5", "2"], BAD_NUMBERS, p=0.4)
        g.opt("--router", ["round-robin", "prefix", "session", "least-loaded"], ["", "x"], p=0.4)
        g.opt("--tiers", ["hbm", "hbm,dram", "hbm,dram,ssd"], ["", "dram", "hbm,hbm", "ssd,hbm", "x"], p=0.3)
        g.opt("--tier-capacity", ["hbm=100k", "dram=1TB", "ssd=0"], ["dram=-1GB", "x", "hbm=1e400", "nvme=1TB",
                                                                     "dram=1e30TB"], p=0.15)
        g.opt("--tier-link", ["dram=pcie-gen4-x16", "ssd=nvme-gen4"], ["hbm=nvlink4", "dram=nosuch", "dram="],
              p=0.1)
    elif source < 0.25:
        g.args += ["--workload", g.pick(["article-100"], ["nosuch", ""] + hostile_files(g.files))]
        g.opt("--router", ["round-robin", "prefix"], ["", "x"], p=0.3)
        g.opt("--request-rate", ["inf", "5"], BAD_NUMBERS, p=0.3)
    else:
        g.opt("--random-input-len", ["1", "128", "1k", "2000"], BAD_TOKENS, p=0.5)
        g.opt("--random-output-len", ["1", "4", "50"], BAD_TOKENS, p=0.5)
        g.opt("--request-rate", ["inf", "1", "10.5"], BAD_NUMBERS + ["INF", "-inf"], p=0.4)
        g.opt("--max-concurrency", ["1", "8"], p=0.15)
        g.opt("--shared-prefix", ["512", "1k:2"], ["", ":", "4k:0", "x:2"], p=0.15)
        g.opt("--seed", ["0", "3"], ["-1", "x", ""], p=0.1)
        if g.r.random() < 0.05:
            g.opt("--rate-scale", ["2"], p=1.0)  # only with --trace: refused
        if g.r.random() < 0.03:
            g.opt("--tiers", ["hbm,dram"], p=1.0)  # only with --trace: refused
    g.output(FIELDS)


def test_fuzz_plan(files, monkeypatch):
    # test_fuzz_cli's loop and checks, with this generator
    monkeypatch.setitem(base.GENERATORS, "plan", gen_plan)
    monkeypatch.setattr(base, "CASES", CASES)
    base.test_fuzz_command("plan", files, monkeypatch)
