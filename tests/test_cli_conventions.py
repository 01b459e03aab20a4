"""CLI conventions (issue 19, item 4): sweep takes its target's own options, options that only apply with another
are refused naming it, -h / -V, completion, help at the terminal's width with whole example commands."""

import pytest
from conftest import assert_bad_input, run_cli


@pytest.fixture(autouse=True)
def fixed_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")
    monkeypatch.setenv("NO_COLOR", "1")


def rows(*args):
    r = run_cli(*args, "--format", "json")
    assert r.code == 0, r.err
    return r.json()["results"]


# --- sweep TARGET with the target's own options -------------------------------------------------------------

@pytest.mark.parametrize("target,own,via_set", [
    ("kv", ["--model", "llama-3-70b"], ["--set", "model=llama-3-70b"]),
    ("kv", ["-m", "llama-3-70b", "--kv-dtype", "fp8", "--mtp"],
     ["--set", "model=llama-3-70b", "--set", "kv-dtype=fp8", "--set", "mtp=on"]),
    ("capacity", ["--model", "llama-3-70b", "--hardware", "h200-sxm", "--gpus", "4", "--hbm-utilization", "80%"],
     ["--set", "model=llama-3-70b", "--set", "hardware=h200-sxm", "--set", "gpus=4", "--set", "hbm-utilization=0.8"]),
    ("compare", ["--requests", "20", "--warm", "--shared-prefix", "1k"],
     ["--set", "requests=20", "--set", "warm=warm", "--set", "shared-prefix=1k"]),
    ("cost", ["--strategy", "lru", "--requests", "20", "--no-attention-flops"],
     ["--set", "strategy=lru", "--set", "requests=20", "--set", "attention-flops=off"]),
])
def test_sweep_takes_the_targets_own_options_as_set_does(target, own, via_set):
    """`sweep kv --model X` is `sweep kv --set model=X`: the same rows and the same fixed inputs."""
    vary = ["--vary", "context=4k,32k"]
    assert rows("sweep", target, *own, *vary) == rows("sweep", target, *via_set, *vary)


def test_sweep_kv_model_from_the_issue():
    # issue 19's failing example: the rows equal `kvcalc kv llama-3-70b -c 4k,32k`
    got = rows("sweep", "kv", "--model", "llama-3-70b", "--vary", "context=4k,32k")
    single = rows("kv", "llama-3-70b", "--context", "4k,32k")
    assert [r["kv_bytes_per_request"] for r in got] == [r["kv_bytes_per_request"] for r in single]
    # 80 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 327,680 B/token; x 4,096 = 1,342,177,280 B
    assert got[0]["kv_bytes_per_request"] == 327_680 * 4096


def test_sweep_target_options_in_its_help():
    out = run_cli("sweep", "kv", "--help").out
    assert "Fixed inputs of kv" in out and "--model" in out and "--kv-dtype" in out
    cap = run_cli("sweep", "capacity", "-h").out
    assert "--hbm-utilization" in cap and "--gpus" in cap


@pytest.mark.parametrize("args,words", [
    (["sweep", "kv", "--vary", "context=4k", "--context", "8k"], ["--context", "--vary context"]),
    (["sweep", "kv", "--vary", "model=llama-3-8b", "--context", "8k,16k"], ["--context"]),
    (["sweep", "capacity", "--vary", "context=4k", "-m", "llama-3-8b", "-m", "qwen3-8b"], ["--model", "--vary"]),
    (["sweep", "kv", "--set", "model=llama-3-8b", "--model", "llama-3-8b", "--vary", "context=4k"], ["--model"]),
    (["sweep", "capacity", "--vary", "context=4k", "--gpus", "0"], ["--gpus"]),
    (["sweep", "kv", "--vary", "context=4k", "--hardware", "h100-sxm"], ["--hardware"]),  # not a kv input
])
def test_sweep_target_option_errors_name_the_option(args, words):
    assert_bad_input(run_cli(*args), *words)


# --- options that only apply with another -------------------------------------------------------------------

ENGINE_FLAGS = [("--gpu-memory-utilization", "0.5"), ("--total-memory", "70GiB"), ("--weights-memory", "14GiB"),
                ("--mem-fraction-static", "0.8"), ("--max-num-batched-tokens", "8k"), ("--max-num-seqs", "256"),
                ("--block-size", "32"), ("--activation-memory", "1GiB"), ("--non-torch-memory", "0"),
                ("--cuda-graph-memory", "0"), ("--swa-full-tokens-ratio", "0.5"),
                ("--mamba-full-memory-ratio", "0.5"), ("--max-mamba-cache-size", "10")]


@pytest.mark.parametrize("flag,value", ENGINE_FLAGS)
def test_capacity_engine_flags_need_engine(flag, value):
    """Silently ignored before (issue 19): the same table as without them."""
    assert_bad_input(run_cli("capacity", flag, value), flag, "--engine")
    assert_bad_input(run_cli("capacity", "--engine", "ideal", flag, value), flag, "--engine")


def test_capacity_engine_flags_with_engine_still_work():
    assert run_cli("capacity", "--gpu-memory-utilization", "0.5", "--engine", "vllm", "-m", "llama-3-8b",
                   "--gpus", "1").code == 0
    # the value typed equals the default (0.9): still refused without --engine, still accepted with it
    assert_bad_input(run_cli("capacity", "--gpu-memory-utilization", "0.9"), "--engine")
    assert run_cli("capacity", "-m", "llama-3-8b", "--solve", "max-model-len", "--max-model-len", "8k").code == 0


@pytest.mark.parametrize("args,words", [
    (["capacity", "--max-model-len", "8k"], ["--max-model-len", "--engine", "--solve"]),
    (["capacity", "--concurrency", "4"], ["--concurrency", "--solve gpu-memory-utilization"]),
    (["capacity", "--engine", "vllm", "--solve", "max-model-len", "--concurrency", "4"], ["--concurrency"]),
    (["compare", "--tier-copies", "per-block"], ["--tier-copies", "--tiers"]),
    (["compare", "--pd-overlap-us", "5"], ["--pd-overlap-us", "--pd-link"]),
    (["cost", "--pd-overlap-us", "5"], ["--pd-overlap-us", "--pd-link"]),
    (["trace", "t.jsonl", "--tier-copies", "per-block"], ["--tier-copies", "--tiers"]),
    (["trace", "t.jsonl", "--scenario", "article"], ["--scenario", "--tiers"]),
    (["trace", "t.jsonl", "--gpus", "4"], ["--gpus", "--hardware"]),
])
def test_options_that_need_another_name_it(args, words):
    assert_bad_input(run_cli(*args), *words)


def test_pd_overlap_with_a_scenario_that_has_a_pd_link():
    assert run_cli("compare", "--scenario", "v4-flash-pd-ib", "--pd-overlap-us", "5").code == 0
