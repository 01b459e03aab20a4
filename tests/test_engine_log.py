"""``kvcalc capacity --engine-log FILE``: real start-up logs (tests/fixtures/logs, sources in its README) read into
the engine inputs, the walk from them, and the log's own KV figures beside kvcalc's."""

from __future__ import annotations

import json
import math

import pytest
from conftest import REPO, assert_bad_input, run_cli

from kvcalc.memory.engine_log import read_engine_log

LOGS = REPO / "tests" / "fixtures" / "logs"


def capacity_json(model, log, *extra):
    r = run_cli("capacity", "-m", model, "--gpus", "1", "--engine-log", str(LOGS / log), *extra, "--format", "json")
    assert r.code == 0, r.err
    return json.loads(r.out)


def test_vllm_v1_log_reproduced_exactly():
    # LMCache issue #1739, Qwen3-14B on one GPU: "Available KV cache memory: 6.51 GiB", "GPU KV cache size: 42,656
    # tokens", "Maximum concurrency for 32,768 tokens per request: 1.30x". Qwen3-14B: 40 layers x 8 KV heads x
    # (128 + 128) x 2 B = 163,840 B/token; a 16-token block 2,621,440 B; floor(6.51 x 2^30 / 2,621,440) =
    # floor(2,666.5) = 2,666 blocks = 42,656 tokens; 2,666 / 2,048 blocks per 32,768-token request = 1.30x
    env = capacity_json("qwen3-14b", "vllm-qwen3-14b-lmcache-1739.log")
    row = env["results"][0]
    assert (row["engine"], row["num_gpu_blocks"], row["kv_cache_tokens"], row["max_model_len"]) == \
        ("vllm", 2_666, 42_656, 32_768)
    assert round(row["max_concurrency"], 2) == 1.30
    assert row["kv_cache_memory_bytes"] == pytest.approx(6.51 * 2**30)


def test_vllm_v0_log_within_its_rounding():
    # vLLM issue #10517, Llama-3.1-8B on an RTX 3090, max_model_len 20,000: kv_cache_size=3.81GiB, "GPU blocks:
    # 1952". 3.81 GiB / 2 MiB blocks (131,072 B/token x 16) = 1,950.7 -> 1,950: the log's 3.81 is rounded to
    # 0.01 GiB (+-0.005 GiB = +-2.56 blocks: floor(3.805 x 512) = 1,948 ... floor(3.815 x 512) = 1,953)
    r = run_cli("capacity", "-m", "llama-3-8b", "--gpus", "1", "--engine-log",
                str(LOGS / "vllm-llama-3.1-8b-3090-issue-10517.log"))
    assert r.code == 0, r.err
    assert "the log's blocks 1,952, kvcalc's 1,950 (kvcalc -2, -0.102%)" in r.out + r.err
    # kvcalc sizes the log at both ends of its printed 3.81 GiB and says where the log's figure lies
    assert "allow 1,948 ... 1,953: within the log's rounding" in " ".join((r.out + r.err).split())
    row = capacity_json("llama-3-8b", "vllm-llama-3.1-8b-3090-issue-10517.log")["results"][0]
    assert row["num_gpu_blocks"] == 1_950 and 1_948 <= 1_952 <= 1_953
    assert row["max_model_len"] == 20_000 and round(row["max_concurrency"], 2) == 1.56  # 1,950 / 1,250


def test_flags_win_over_the_log():
    row = capacity_json("qwen3-14b", "vllm-qwen3-14b-lmcache-1739.log", "--max-model-len", "4096")["results"][0]
    assert (row["max_model_len"], row["num_gpu_blocks"]) == (4096, 2_666)


def test_the_v1_memory_line_and_an_sglang_line_parse():
    line = ("INFO the current vLLM instance can use total_gpu_memory (79.19GiB) x gpu_memory_utilization (0.90) = "
            "71.27GiB; model weights take 14.08GiB; non_torch_memory takes 0.07GiB; PyTorch activation peak memory "
            "takes 1.97GiB; the rest of the memory reserved for KV Cache is 55.15GiB.\nGPU KV cache size: 451,744 "
            "tokens\nMaximum concurrency for 4,096 tokens per request: 110.29x")
    log = read_engine_log(line, "x.log")
    f = log.figures
    assert log.engine == "vllm" and f["kv_memory_bytes"] == pytest.approx(55.15 * 2**30)
    assert (f["kv_cache_tokens"], f["max_model_len"], f["max_concurrency"]) == (451_744, 4096, 110.29)
    assert f["weights_bytes"] == pytest.approx(14.08 * 2**30) and f["gpu_memory_utilization"] == 0.9
    # vLLM issue #21348's SGLang line (Qwen3-235B-A22B-FP8 on 4 x H100)
    sg = read_engine_log("KV Cache is allocated. #tokens: 367404, K size: 8.23 GB, V size: 8.23 GB", "y.log")
    assert (sg.engine, sg.figures["kv_cache_tokens"]) == ("sglang", 367_404)


@pytest.mark.parametrize("text,words", [
    ("", ["not a vLLM or SGLang start-up log", "Available KV cache memory"]),
    ("hello world\n", ["not a vLLM or SGLang start-up log"]),
    ("GPU KV cache size: 42,656 tokens\n", ["vLLM log without its KV memory", "Available KV cache memory"]),
    ("Available KV cache memory: 6.51 GiB\nMaximum concurrency for 0 tokens per request: 1x",
     ["max_model_len must be positive"]),
])
def test_a_log_it_cannot_read_names_the_line_it_needed(tmp_path, text, words):
    path = tmp_path / "bad.log"
    path.write_text(text)
    assert_bad_input(run_cli("capacity", "-m", "qwen3-14b", "--engine-log", str(path)), str(path), *words)


def test_a_huge_figure_in_a_log_is_refused(tmp_path):
    # a 400-digit GiB figure parses to inf: one line naming the file and the figure, exit 2 (was an internal error)
    path = tmp_path / "huge.log"
    path.write_text("Available KV cache memory: " + "9" * 400 + ".5 GiB\nGPU KV cache size: 1 tokens\n")
    assert_bad_input(run_cli("capacity", "-m", "llama-3-8b", "--engine-log", str(path)), str(path),
                     "kv_memory GiB is not a plausible figure")
    path.write_text("Available KV cache memory: 6.51 GiB\nGPU KV cache size: " + "9" * 30 + " tokens\n")
    assert_bad_input(run_cli("capacity", "-m", "qwen3-14b", "--engine-log", str(path)), "kv_cache_tokens")


def test_hostile_log_files(tmp_path):
    latin = tmp_path / "latin1.log"
    latin.write_bytes("Available KV cache memory: 6.51 GiB \xe9".encode("latin-1"))
    assert_bad_input(run_cli("capacity", "-m", "qwen3-14b", "--engine-log", str(latin)), "not UTF-8")
    assert_bad_input(run_cli("capacity", "-m", "qwen3-14b", "--engine-log", str(tmp_path)), "is a directory")
    assert_bad_input(run_cli("capacity", "-m", "qwen3-14b", "--engine-log", str(tmp_path / "no.log")),
                     "no such file")
    assert_bad_input(run_cli("capacity", "-m", "qwen3-14b", "--engine", "sglang", "--engine-log",
                             str(LOGS / "vllm-qwen3-14b-lmcache-1739.log")), "--engine-log", "vllm log")


SGLANG_LOG = "sglang-llama-3.1-8b-80gb-docs-send-request.log"


def test_sglang_v041_log_within_its_rounding():
    # SGLang docs' "Quick Start: Sending Requests" notebook run of 2025-01-23 (v0.4.1 line format), Llama-3.1-8B
    # on one 80 GB GPU, mem_fraction_static=0.88: "Load weight begin. avail mem=78.81 GB", "Load weight end. ...
    # avail mem=63.72 GB", "max_total_num_tokens=444500" (its KV line prints no #tokens). SGLang (GB = GiB):
    # rest = 63.72 - 78.81 x (1 - 0.88) = 54.2628 GiB; cell 32 layers x 8 heads x 128 x 2 x 2 B = 131,072 B =
    # 2^17, so tokens = floor(54.2628 x 2^30 / 2^17) = floor(54.2628 x 8,192) = floor(444,520.86) = 444,520.
    # The log's 444,500 is 20 tokens (2.6 MB) below: its two figures are rounded to 0.01 GiB, so rest lies in
    # [63.715 - 0.12 x 78.815, 63.725 - 0.12 x 78.805] = [54.2572, 54.2684] GiB -> floor(x 8,192) = 444,474 ...
    # 444,566 tokens; 444,500 is inside, and no SGLang rule is missing (its K size 444,500 x 65,536 B = 27.13 GiB
    # as logged; kvcalc's 444,520 would print 27.13 too). Weights: 78.81 - 63.72 = 15.09 GiB,
    # SGLang's own weight_load_mem_usage (before - after loading), as v0.4.1 prints no "mem usage".
    r = run_cli("capacity", "-m", "llama-3-8b", "--gpus", "1", "--engine-log", str(LOGS / SGLANG_LOG))
    assert r.code == 0, r.err
    assert "the log's KV tokens 444,500, kvcalc's 444,520 (kvcalc +20, +0.004%)" in r.out + r.err
    # the window below, computed by kvcalc at the corners of the two printed figures (78.81 and 63.72 +- 0.005)
    assert "allow 444,474 ... 444,566: within the log's rounding" in " ".join((r.out + r.err).split())
    env = capacity_json("llama-3-8b", SGLANG_LOG)
    row, inputs = env["results"][0], env["inputs"]
    assert (row["engine"], row["kv_cache_tokens"], row["kv_bytes_per_token_per_gpu"]) == ("sglang", 444_520, 2**17)
    lo, hi = (math.floor((63.715 - 0.12 * 78.815) * 8192), math.floor((63.725 - 0.12 * 78.805) * 8192))
    assert (lo, hi) == (444_474, 444_566) and lo <= 444_500 <= hi and lo <= row["kv_cache_tokens"] <= hi
    assert inputs["mem_fraction_static"] == 0.88 and inputs["max_model_len"] == 131_072  # context_len=131072
    assert inputs["total_memory_bytes"] == pytest.approx(78.81 * 2**30)
    assert inputs["weights_bytes"] == pytest.approx((78.81 - 63.72) * 2**30)
    assert round(row["max_concurrency"], 2) == 3.39  # 444,520 / 131,072


def test_sglang_v041_lines_parse():
    log = read_engine_log(
        "[TP0] Load weight begin. avail mem=78.81 GB\n[TP0] Load weight end. type=LlamaForCausalLM, "
        "dtype=torch.bfloat16, avail mem=63.72 GB\n[TP0] KV Cache is allocated. K size: 27.13 GB, V size: 27.13 GB.\n"
        "[TP0] max_total_num_tokens=444500, max_prefill_tokens=16384, max_running_requests=2049, context_len=131072",
        "z.log")
    f = log.figures
    assert (log.engine, f["kv_cache_tokens"], f["max_model_len"]) == ("sglang", 444_500, 131_072)
    assert f["weights_bytes"] == pytest.approx(15.09 * 2**30) and "after_load_bytes" not in f
    # a later format's "mem usage" wins over begin - end (v0.5: "avail mem=34.93 GB, mem usage=15.76 GB")
    later = read_engine_log("Load weight begin. avail mem=50.69 GB\nLoad weight end. elapsed=3.48 s, avail mem=34.93"
                            " GB, mem usage=15.76 GB.\nKV Cache is allocated. #tokens: 20480, K size: 1.25 GB", "w.log")
    assert later.figures["weights_bytes"] == pytest.approx(15.76 * 2**30)
    assert later.figures["kv_cache_tokens"] == 20_480


def test_an_sglang_log_without_its_pool_names_the_line(tmp_path):
    path = tmp_path / "nopool.log"
    path.write_text("[TP0] KV Cache is allocated. K size: 27.13 GB, V size: 27.13 GB.\n")
    assert_bad_input(run_cli("capacity", "-m", "llama-3-8b", "--engine-log", str(path)), str(path),
                     "SGLang log without its pool", "KV Cache is allocated. #tokens: N", "max_total_num_tokens=N")


def test_rounding_window_of_the_v1_log():
    # 6.51 GiB printed: 6.505 ... 6.515 GiB / 2,621,440 B blocks = floor(2,664.45) ... floor(2,668.55) = 2,664 ...
    # 2,668 blocks = 42,624 ... 42,688 tokens; the log's 42,656 inside (and equal to kvcalc's own figure)
    from kvcalc.memory.engine_log import log_comparison, rounding_corners, rounding_windows

    log = read_engine_log("Available KV cache memory: 6.51 GiB\nGPU KV cache size: 42,656 tokens", "x.log")
    corners = list(rounding_corners(log))
    assert sorted(c.figures["kv_memory_bytes"] for c in corners) == [6.505 * 2**30, 6.515 * 2**30]
    block = 163_840 * 16

    def rows_of(c):
        blocks = int(c.figures["kv_memory_bytes"] // block)
        return [{"model": "qwen3-14b", "kv_cache_tokens": blocks * 16}]
    windows = rounding_windows(log, rows_of)
    assert windows[(0, "kv_cache_tokens")] == (42_624, 42_688)
    note = log_comparison(log, [{"model": "qwen3-14b", "kv_cache_tokens": 42_656}], windows)[0]
    assert note.endswith("(equal); its GiB figures, rounded as printed, allow 42,624 ... 42,688: within the log's "
                         "rounding")
    outside = log_comparison(log, [{"model": "m", "kv_cache_tokens": 40_000}],
                             {(0, "kv_cache_tokens"): (39_000, 41_000)})[0]
    assert outside.endswith("OUTSIDE the log's rounding")
