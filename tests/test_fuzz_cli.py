"""Randomised CLI fuzz test (issue 9, Must hold): a few hundred command lines per command, seeded, mixing valid
options with hostile values (negative, zero, NaN, inf, 400 digits, empty, unicode, unknown presets) and hostile
files (not UTF-8, nested 5,000 deep, a FIFO, a directory, over the size limit, empty, missing).

Every run must: exit 0, 1 (only with --check) or 2 (one line on stderr); print no traceback; print no inf or nan
where a number goes (JSON must be strict: no Infinity/NaN). The CLI runs in-process (conftest.run_cli).
KVCALC_FUZZ_CASES=N runs N cases per command (default 300) and KVCALC_FUZZ_SEED=S another seed, for a longer
local hunt; the suite's run is deterministic.
"""

from __future__ import annotations

import json
import math
import os
import random
import re

import pytest
from conftest import REPO, run_cli

CASES = int(os.environ.get("KVCALC_FUZZ_CASES", "300"))
SEED = int(os.environ.get("KVCALC_FUZZ_SEED", "20261130"))

HUGE = "1" + "0" * 400
BAD_NUMBERS = ["-1", "0", "-0", "nan", "NaN", "inf", "-inf", "1e308", "-1e308", "5e-324", "1e-308", "1e400", HUGE,
               "-" + HUGE, "9" * 400, "99999999999999999999", "", " ", "é", "\u0663", "\u00bd", "0x10", "1_000",
               "1,000", "1.5", "4k", "\U0001f4a5", "--", "-", "1e", ".", "+1", "0.0000001", "18446744073709551617"]
BAD_TOKENS = BAD_NUMBERS + ["4K", "1M", "1g", "1.5k", "4kk", "0k", "-4k", "4k,", ",", "4k,,1m", "1t", "2^20",
                            "4k,1m,9" + "9" * 400]
BAD_FRACTIONS = BAD_NUMBERS + ["90%", "100%", "101%", "0%", "%", "1.0000001", "0.5%%"]
BAD_BYTES = BAD_NUMBERS + ["80GB", "80 GiB", "1e308GB", "5e-324B", "80XB", "GB", "-4GB", "0B", "1e400TiB"]
BAD_NAMES = ["nosuch", "llama-3-70", "LLAMA-3-70B", "", " ", "a" * 300, "é", "../x", "nosuch.toml",
             "~nosuchuser/m.toml", "/", ".", "-", "\U0001f4a5", "x" * 5000 + ".toml"]

MODELS = ["llama-3-8b", "llama-3-70b", "mistral-7b-v0.1", "deepseek-v3", "deepseek-v3.2", "deepseek-v4-flash",
          "deepseek-v4-flash-article", "mha-96l-64h", "qwen2.5-7b"]
HARDWARE = ["h100-sxm", "h200-sxm", "b200"]
LINKS = ["pcie-gen5-x16", "nvlink4", "ib-ndr400"]
CONFIGS = REPO / "tests" / "fixtures" / "configs"
CONTEXTS = ["1", "16", "2000", "4k", "32k", "128k", "1m", "4096"]


# ---------------------------------------------------------------- hostile files (written once per module)

@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("fuzz")
    f = {}

    def write(name, data):
        p = d / name
        p.write_bytes(data if isinstance(data, bytes) else data.encode())
        f[name] = str(p)

    write("latin1.toml", b'schema_version = 1\nsource = "caf\xe9"\n')
    write("deep.toml", "x = " + "[" * 5000 + "]" * 5000 + "\n")
    write("deeptable.toml", "x = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n")
    write("huge.toml", b"k = 1\n" * (2**20 // 6 + 10))  # just over 1 MiB
    write("empty.toml", b"")
    write("bom.toml", b"\xef\xbb\xbfschema_version = 1\n")
    write("malformed.toml", "source = [unclosed\n")
    write("wrongkind.toml", 'schema_version = 1\nsource = "s"\ndisplay_name = "l"\nbandwidth_gb_per_s = 1.0\n'
          'latency_us = 1.0\n')  # a link where a model or a scenario is expected
    write("absurd-model.toml", 'schema_version = 1\nsource = "s"\ndisplay_name = "m"\nparams_total_b = 1e308\n'
          'params_active_b = 1\nweight_bytes_per_param = 2\nas_stated_kv_bytes_per_token = 1e308\n')
    write("tiny-model.toml", 'schema_version = 1\nsource = "s"\ndisplay_name = "m"\nparams_total_b = 0.001\n'
          'params_active_b = 0.001\nweight_bytes_per_param = 0.001\nas_stated_kv_bytes_per_token = 0.001\n')
    write("edge-link.toml", 'schema_version = 1\nsource = "s"\ndisplay_name = "l"\nbandwidth_gb_per_s = 1e-6\n'
          'latency_us = 1e9\n')  # the slowest link the schema allows: times are huge but finite
    write("tiny-link.toml", 'schema_version = 1\nsource = "s"\ndisplay_name = "l"\nbandwidth_gb_per_s = 5e-324\n'
          'latency_us = 0\n')
    write("edge-hw.toml", 'schema_version = 1\nsource = "s"\ndisplay_name = "h"\nhbm_gb = 1e5\n'
          'hbm_bandwidth_tb_per_s = 1e-3\nbf16_dense_tflops = 1e-3\nhost_link = "pcie-gen5-x16"\n'
          'usd_per_gpu_hour = 10000\nusd_per_gpu_hour_source = "s"\nfp8_dense_tflops = 1e6\n')
    write("big-hw.toml", 'schema_version = 1\nsource = "s"\ndisplay_name = "h"\nhbm_gb = 1e308\n'
          'hbm_bandwidth_tb_per_s = 3\nbf16_dense_tflops = 1e308\nhost_link = "pcie-gen5-x16"\n'
          'usd_per_gpu_hour = 1e308\nusd_per_gpu_hour_source = "s"\n')
    rng = random.Random(7)
    lines, ids = [], 0
    for i in range(40):  # a valid trace, 16 tokens per hash id, with shared prefixes
        n = rng.randint(1, 300)
        blocks = math.ceil(n / 16)
        shared = rng.randint(0, min(blocks, 4))
        lines.append(json.dumps({"timestamp": i * 250, "input_length": n, "output_length": rng.randint(0, 50),
                                 "hash_ids": list(range(shared)) + list(range(ids, ids + blocks - shared))}))
        ids += blocks
    write("trace.jsonl", "\n".join(lines) + "\n")
    compressed_traces(write, "\n".join(lines) + "\n", [json.loads(x) for x in lines])
    write("latin1.json", b'{"model_type": "caf\xe9"}')
    write("deep.json", "[" * 100_000 + "]" * 100_000)
    write("list.json", "[1, 2]")
    write("absurd.json", '{"model_type": "llama", "hidden_size": 1e400, "num_hidden_layers": ' + HUGE + ', '
          '"num_attention_heads": -1, "num_key_value_heads": 0, "vocab_size": 1e308, "intermediate_size": "x"}')
    cfg = json.loads((REPO / "tests" / "fixtures" / "configs" / "qwen3-32b" / "config.json").read_text())
    for key, value in (("num_hidden_layers", 10**30), ("hidden_size", 2**24), ("head_dim", 0), ("vocab_size", 1e308),
                       ("max_position_embeddings", -1), ("num_key_value_heads", 7)):
        write(f"cfg-{key}.json", json.dumps(cfg | {key: value}))
    (d / "empty-folder").mkdir()
    f["empty-folder"] = str(d / "empty-folder")
    write("trace-latin1.jsonl", b'{"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [\xe9]}\n')
    write("trace-empty.jsonl", b"")
    write("trace-blank.jsonl", b"\n\n  \n")
    (d / "out").mkdir()
    f["out"] = str(d / "out")
    (d / "dir.toml").mkdir()
    f["dir.toml"] = str(d / "dir.toml")
    f["missing.toml"] = str(d / "missing.toml")
    if hasattr(os, "mkfifo"):
        os.mkfifo(d / "fifo.toml")
        f["fifo.toml"] = str(d / "fifo.toml")
    return f


def compressed_traces(write, text: str, objs: list) -> None:
    """The fuzz trace in the other formats (issue 22): gzip, zstd (with the extra), kv-cache-tester JSON (16-token
    blocks, full blocks only), lengths-only CSVs; and hostile compressed files (truncated, garbage after the
    magic, a .gz name on plain text)."""
    import gzip

    write("trace.jsonl.gz", gzip.compress(text.encode()))
    try:
        import zstandard

        blob = zstandard.ZstdCompressor().compress(text.encode())
        write("trace.jsonl.zst", blob)
        write("trace-cut-zst.jsonl", blob[: len(blob) // 2])  # told by its magic: truncated zstd
    except ImportError:
        pass
    write("trace-kvt.json", json.dumps({"id": "fuzz", "block_size": 16, "requests": [
        {"t": o["timestamp"] / 1000, "in": o["input_length"], "out": o["output_length"],
         "hash_ids": o["hash_ids"][: o["input_length"] // 16]} for o in objs]}))
    write("trace-azure.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "".join(
        f"2023-11-16 18:{15 + i // 60:02d}:{i % 60:02d}.6805900,{o['input_length']},{o['output_length']}\n"
        for i, o in enumerate(objs)))
    write("trace-burst.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" + "".join(
        f"{5 + 3 * i},ChatGPT,{o['input_length']},{o['output_length']},0,API log\n" for i, o in enumerate(objs)))
    write("trace-burst-failed.csv", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
          "5,ChatGPT,472,18,490,Conversation log\n1106,ChatGPT,0,0,0,Conversation log\n"  # BurstGPT_1's rows 1, 21
          "1129,ChatGPT,1305,477,1782,Conversation log\n")  # a failed request between two served ones
    write("trace-badgz.jsonl", b"\x1f\x8b" + b"\x00" * 40)  # gzip's magic, then garbage
    write("trace-plain.jsonl.gz", text)  # a .gz name on plain text
    measured_files(write)


def measured_files(write) -> None:
    """Hostile measured runs for ``bench --measured`` (issue 18): a block cut short, two blocks, a NaN and a huge
    count in a block, a million requests, a saved result of wrong types, and a detailed one of absurd lengths."""
    head = "============ Serving Benchmark Result ============\n"
    body = ("Successful requests:                     20\nBenchmark duration (s):                  3.5\n"
            "Total input tokens:                      2000\nTotal generated tokens:                  400\n"
            "Mean TTFT (ms):                          50.0\n")
    write("measured-ok.txt", head + body + "=" * 50 + "\n")
    write("measured-cut.txt", head + body)
    write("measured-two.txt", (head + body + "=" * 50 + "\n") * 2)
    write("measured-nan.txt", head + body.replace("50.0", "nan") + "=" * 50 + "\n")
    write("measured-huge.txt", head + body.replace(" 20\n", " " + HUGE + "\n", 1) + "=" * 50 + "\n")
    write("measured-million.txt", head + body.replace(" 20\n", " 999999999999999\n", 1) + "=" * 50 + "\n")
    write("measured-types.json", json.dumps({"completed": "20", "total_input_tokens": [1], "request_rate": {}}))
    write("measured-detailed.json", json.dumps({"completed": 2, "total_input_tokens": 5, "total_output_tokens": 2,
                                                "input_lens": [2**45, 1], "output_lens": [1, 1], "errors": ["", ""],
                                                "start_times": [0, 1e300]}))


def trace_files(files, lengths_only=False):
    """The valid traces of every format (the lengths-only CSVs too when the command reads them)."""
    names = ["trace.jsonl", "trace.jsonl.gz", "trace.jsonl.zst", "trace-kvt.json"]
    names += ["trace-azure.csv", "trace-burst.csv", "trace-burst-failed.csv"] if lengths_only else []
    return [files[n] for n in names if n in files]


def hostile_files(files, trace=False):
    """The hostile preset files, or (trace=True) the hostile trace files. A trace is read as a stream, and a FIFO
    is a legitimate trace (``kvcalc trace <(zcat t.jsonl.gz)``): opening one without a writer waits, as ``cat``
    does, so the FIFO is fuzzed as a preset file only."""
    if not trace:
        return [v for k, v in files.items() if not k.endswith((".jsonl", ".json"))]
    either = ("dir.toml", "missing.toml", "latin1.toml", "huge.toml", "trace-plain.jsonl.gz")
    return [v for k, v in files.items() if (k.endswith(".jsonl") or k in either) and k != "trace.jsonl"]


# ---------------------------------------------------------------- per-command generators

class Gen:
    """Builds one command line: each option is valid most of the time, hostile otherwise."""

    def __init__(self, rng: random.Random, files: dict, hostile: float):
        self.r, self.files, self.hostile = rng, files, hostile
        self.args: list[str] = []

    def pick(self, valid, bad):
        bad = list(bad)
        return self.r.choice(bad) if bad and self.r.random() < self.hostile else self.r.choice(list(valid))

    def opt(self, flag, valid, bad=BAD_NUMBERS, p=0.35):
        if self.r.random() < p:
            self.args += [flag, str(self.pick(valid, bad))]

    def flag(self, flag, p=0.2):
        if self.r.random() < p:
            self.args.append(flag)

    def preset(self, flag, names, kind_files=(), p=0.35):
        bad = BAD_NAMES + hostile_files(self.files) + [self.files[k] for k in kind_files]
        self.opt(flag, names, bad, p)

    def output(self, check_fields):
        self.opt("--format", ["table", "json", "json", "csv", "markdown"], ["", "xml", "JSON", "é", "table "], p=0.9)
        if self.r.random() < 0.25:
            field = self.pick(check_fields, ["nosuch", "", "1x", "model"])
            op = self.r.choice(["<", "<=", ">", ">=", "==", "!="])
            num = self.pick(["0", "1", "0.5", "1e12", "-3"], ["nan", "inf", HUGE, "", "1e999", "x"])
            self.args += ["--check", f"{field} {op} {num}" if self.r.random() > 0.05 else self.pick([""], BAD_NAMES)]
        self.flag("--explain", 0.15)

    def kv_layout(self):
        self.opt("--kv-dtype", ["bf16", "fp8", "int4", "fp16"], ["fp7", "", "BF16", "é"], p=0.15)
        self.opt("--mla-layout", ["bf16", "fp8", "fp8-flashmla"], ["fp4", "", "é"], p=0.15)
        self.opt("--indexer-dtype", ["fp4", "fp8"], ["bf16", ""], p=0.15)
        self.flag("--mtp", 0.1)


def json_files(files):
    """Hostile config.json models (and the folder of a valid one)."""
    return [v for k, v in files.items() if k.endswith(".json")] + [files["empty-folder"], str(CONFIGS / "qwen3-32b")]


def gen_kv(g: Gen):
    g.args.append("kv")
    for _ in range(g.r.choice([1, 1, 2, 3])):
        g.args.append(g.pick(MODELS, BAD_NAMES + hostile_files(g.files) + json_files(g.files) + [
            g.files["absurd-model.toml"], g.files["tiny-model.toml"]]))
    g.opt("--context", CONTEXTS + ["4k,32k", "1,1m"], BAD_TOKENS, p=0.6)
    g.kv_layout()
    g.output(["kv_bytes_per_token", "kv_bytes_per_request"])


def gen_capacity(g: Gen):
    g.args.append("capacity")
    for _ in range(g.r.choice([1, 1, 2])):
        g.preset("--model", MODELS, ["tiny-model.toml", "absurd-model.toml", "cfg-num_hidden_layers.json",
                                     "cfg-hidden_size.json", "cfg-head_dim.json", "latin1.json"], p=0.8)
    g.preset("--hardware", HARDWARE, ["edge-hw.toml", "big-hw.toml"])
    g.opt("--gpus", ["1", "8", "64", "1000000"])
    g.opt("--context", CONTEXTS, BAD_TOKENS)
    g.opt("--hbm-utilization", ["0.9", "90%", "0.001", "1"], BAD_FRACTIONS)
    g.opt("--reserve", ["4GB", "4GiB", "0.5GB", "79GB"], BAD_BYTES, p=0.2)
    g.opt("--attention", ["tp", "dp"], ["", "TP", "pp"], p=0.2)
    g.opt("--weights-dtype", ["bf16", "fp8", "nvfp4"], ["fp7", "", "BF16"], p=0.1)
    g.opt("--kv-compression", ["1", "4", "10000"], ["0.5", "10001"], p=0.1)
    g.opt("--block-tokens", ["16", "64", "256", str(2**24)])
    g.preset("--link", LINKS, ["edge-link.toml", "tiny-link.toml"], p=0.2)
    g.opt("--bandwidth", ["measured", "theoretical"], ["", "x"], p=0.2)
    if g.r.random() < 0.4:
        engine_options(g)
    g.kv_layout()
    g.output(["max_requests", "kv_bytes_per_token", "kv_cache_tokens"])


ENGINE_MODELS = ["llama-3-8b", "qwen3-8b", "qwen2.5-7b", "gemma-3-27b", "gpt-oss-120b", "qwen3-next-80b-a3b",
                 "deepseek-v3", "llama-4-scout", "nemotron-3-nano-30b-a3b", "deepseek-v4-flash"]


ENGINE_LOGS = [str(REPO / "tests" / "fixtures" / "logs" / n) for n in
               ("vllm-qwen3-14b-lmcache-1739.log", "vllm-llama-3.1-8b-3090-issue-10517.log")]


def engine_options(g: Gen):
    """capacity --engine (issue 11): the engine, its log inputs as sizes, the hybrid pools, --solve."""
    g.opt("--engine", ["vllm", "sglang", "ideal"], ["", "VLLM", "trt", "é"], p=1)
    g.preset("--model", ENGINE_MODELS, ["tiny-model.toml"], p=0.5)
    g.opt("--gpu-memory-utilization", ["0.9", "90%", "0.5", "1"], BAD_FRACTIONS, p=0.3)
    g.opt("--mem-fraction-static", ["0.88", "0.7", "85%"], BAD_FRACTIONS, p=0.2)
    g.opt("--max-model-len", CONTEXTS, BAD_TOKENS, p=0.3)
    g.opt("--max-num-batched-tokens", ["2048", "8k", "128k"], BAD_TOKENS, p=0.2)
    g.opt("--max-num-seqs", ["1", "256", "1024"], p=0.2)
    g.opt("--block-size", ["16", "32", "1568"], p=0.2)
    for flag in ("--total-memory", "--weights-memory", "--activation-memory", "--non-torch-memory",
                 "--cuda-graph-memory"):
        g.opt(flag, ["79.19GiB", "14.08GiB", "1GB", "0.07GiB", "0"], BAD_BYTES, p=0.15)
    g.opt("--swa-full-tokens-ratio", ["0.8", "1", "0.1"], p=0.1)
    g.opt("--mamba-full-memory-ratio", ["0.9", "0.5"], p=0.1)
    g.opt("--max-mamba-cache-size", ["0", "100", "4096"], p=0.1)
    g.opt("--solve", ["max-model-len", "max-concurrency", "gpu-memory-utilization", "mem-fraction-static"],
          ["", "x", "max_model_len "], p=0.3)
    g.opt("--concurrency", ["1", "64", "1000"], p=0.2)
    g.opt("--engine-version", ["0.33", "0.20", "0.25.1", "v0.5.23"], ["", "x", "0", "1.2.3.4", "0.33.0rc1", "é"],
          p=0.15)
    g.opt("--engine-log", ENGINE_LOGS, hostile_files(g.files) + ["", "nosuch.log"], p=0.1)


def gen_blocks(g: Gen):
    g.args.append("blocks")
    g.preset("--model", MODELS, ["tiny-model.toml"], p=0.8)
    g.opt("--block-tokens", ["16", "16,256", "128,1024", "1"], BAD_TOKENS)
    g.opt("--entry-bytes", ["4", "16", "24", "1024"])
    g.opt("--tables", ["1", "3", "1024"])
    g.opt("--max-overhead", ["1%", "0.01", "0.0001"], BAD_FRACTIONS)
    g.opt("--context", CONTEXTS, BAD_TOKENS)
    g.kv_layout()
    g.output(["metadata_overhead", "block_bytes"])


def gen_transfer(g: Gen):
    g.args.append("transfer")
    g.preset("--model", MODELS, ["tiny-model.toml"], p=0.6)
    g.opt("--context", CONTEXTS, BAD_TOKENS)
    g.opt("--requests", ["1", "100", "1000000", str(10**12)])
    g.opt("--block-tokens", ["16", "128", "256"])
    for _ in range(g.r.choice([0, 0, 1, 2])):
        g.preset("--link", LINKS, ["edge-link.toml", "tiny-link.toml"], p=1)
    g.opt("--bandwidth", ["measured", "theoretical"], ["", "x"], p=0.2)
    g.opt("--overlap-us", ["0", "10", "1000", "3.6e9"])
    g.preset("--hardware", HARDWARE, ["edge-hw.toml", "big-hw.toml"], p=0.25)
    g.opt("--gpus", ["1", "8", "1000000"])
    g.opt("--mfu", ["0.2", "20%", "0.001", "1"], BAD_FRACTIONS)
    g.flag("--tiers", 0.3)
    g.opt("--dram", ["1TB", "512GiB"], BAD_BYTES, p=0.2)
    g.opt("--ssd", ["8TB", "1TB"], BAD_BYTES, p=0.2)
    g.preset("--ssd-link", ["nvme-gen5"], ["edge-link.toml"], p=0.15)
    g.kv_layout()
    g.output(["latency_share", "time_s"])


def _scenario(g: Gen, strategy: bool, trace: bool):
    if strategy:
        g.opt("--strategy", ["lru", "prefix-tree"], ["", "fifo", "LRU"], p=0.5)
    g.preset("--scenario", ["article", "v4-flash-8xh100", "v4-flash-pd-ib"], ["wrongkind.toml"], p=0.3)
    g.preset("--model", MODELS, ["tiny-model.toml", "absurd-model.toml"], p=0.3)
    g.preset("--hardware", HARDWARE, ["edge-hw.toml", "big-hw.toml"], p=0.25)
    g.opt("--gpus", ["1", "8", "64", "1000000"], p=0.25)
    g.opt("--engine", ["vllm", "sglang", "ideal"], ["", "trt"], p=0.15)
    g.opt("--weights-dtype", ["bf16", "fp8", "int4"], ["fp7", ""], p=0.1)
    g.opt("--kv-compression", ["1", "4", "10000"], ["0.5", "10001"], p=0.1)
    # --engine-input needs --engine (refused without it): given without it only now and then
    for _ in range(g.r.choice([0, 0, 0, 1, 2]) if "--engine" in g.args or g.r.random() < 0.05 else 0):
        g.args += ["--engine-input", g.pick(["weights-memory=14.08GiB", "total-memory=79.19GiB", "block-size=32",
                                             "gpu-memory-utilization=0.8", "max-num-seqs=256", "non-torch-memory=0"],
                                            ["", "=", "x=1", "weights-memory=", "block-size=" + HUGE, "max-num-seqs=-1",
                                             "total-memory=nan", "gpu-memory-utilization=5", "weight-memory=1GB",
                                             "cuda-graph-memory=1e400TiB"])]
    g.opt("--price-per-gpu-hour", ["2", "12.5", "0.01", "10000"], p=0.25)
    g.opt("--mfu-prefill", ["0.2", "20%", "0.001", "1"], BAD_FRACTIONS, p=0.25)
    g.opt("--decode-tokens-per-s", ["60", "0.001", "1e7"], p=0.25)
    g.flag(g.r.choice(["--warm", "--cold"]), 0.15)
    g.flag(g.r.choice(["--attention-flops", "--no-attention-flops"]), 0.15)
    g.preset("--pd-link", LINKS, ["edge-link.toml", "tiny-link.toml"], p=0.2)
    g.opt("--pd-overlap-us", ["0", "100", "3.6e9"], p=0.15)
    # the prefill/decode split (issue 18): refused without a pd link, on the stated path and when it does not fit
    g.opt("--pd-split", ["1:1", "1:3", "1P:1D", "3:5"], ["0:1", "1:0", "", "x", "1:2:3", "-1:1", HUGE + ":1",
                                                         "\u0663:1", "1:1e3", "1:9999999"], p=0.1)
    if trace and g.r.random() < 0.3:
        g.args += ["--trace", g.pick(trace_files(g.files), hostile_files(g.files, trace=True))]
        tiers = g.r.random() < 0.4  # A and C through tiers (issue 12), the pins A may keep
        g.opt("--capacity", ["inf", "3m", "1000", "80GB"], BAD_TOKENS + ["80XB"], p=0.05 if tiers else 0.5)
        g.opt("--block-tokens", ["16", "16", "512"], p=1 if tiers else 0.7)
        g.opt("--trace-format", ["auto", "kv-cache-tester", "full-blocks"], ["", "azure-csv", "x"], p=0.15)
        g.flag("--skip-bad", 0.3)
        if tiers:
            tier_options(g, curve=False)
            g.opt("--sink-tokens", ["0", "16", "4096"], p=0.2)
            g.opt("--window-tokens", ["0", "512", "65536"], p=0.2)
    elif g.r.random() < 0.6:
        requests = g.pick(["1", "10", "100", "1000", str(10**12)], BAD_NUMBERS)
        g.args += ["--requests", requests, "--context", g.pick(CONTEXTS, BAD_TOKENS)]
        g.opt("--output-tokens", ["0", "1", "500", str(2**40)])
        for _ in range(g.r.choice([0, 1, 2])):  # a few groups: many groups is item 2's (performance) business
            g.args += ["--shared-prefix", g.pick(["1", "500", "1k", "1k:5", "100:10", "16:1"],
                                                 BAD_TOKENS + ["1k:0", "1k:-1", "1k:" + HUGE, "1k:", ":5", "1:2:3"])]
    else:
        g.preset("--workload", ["article-100"], ["wrongkind.toml"], p=0.3)
    g.kv_layout()


def gen_cost(g: Gen):
    g.args.append("cost")
    _scenario(g, strategy=True, trace=False)
    g.output(["usd_per_mtok_blended", "ttft_max_s", "hit_rate"])


def gen_compare(g: Gen):
    g.args.append("compare")
    _scenario(g, strategy=False, trace=True)
    # --replicas / --router need --trace without --tiers (refused otherwise): elsewhere only now and then
    single_trace = "--trace" in g.args and "--tiers" not in g.args
    g.opt("--replicas", ["1", "3"], ["0", "1025", "x"], p=0.3 if single_trace else 0.02)
    g.opt("--router", ["prefix", "session"], ["", "prefx"], p=0.3 if single_trace else 0.02)
    g.output(["usd_per_mtok_blended", "ttft_max_s", "hit_rate"])


def gen_trace(g: Gen):
    # trace-line hostility (nesting, huge numbers in lines) belongs to the trace reader's own tests; here: options
    # and file-level hostility (directory, FIFO, missing, not UTF-8, empty)
    g.args += ["trace", g.pick(trace_files(g.files), hostile_files(g.files, trace=True))]
    tiers = g.r.random() < 0.4
    g.opt("--block-tokens", ["16", "16", "16", "512"], p=1 if tiers else 0.8)  # the fixture's blocks: 16
    single = 0.05 if tiers else 1  # with --tiers, the single-cache options are refused: now and then only
    g.opt("--capacity", ["inf", "3m", "1000", "100,inf", "80GB"], BAD_TOKENS + ["80XB", "inf,inf"], p=0.5 * single)
    g.opt("--policy", ["lru", "fifo", "lfu", "s3fifo"], ["", "LRU", "random", "s3-fifo"], p=0.3 * single)
    g.opt("--trace-format", ["auto", "mooncake", "full-blocks"], ["", "csv", "kv-cache", "azure-csv",
                                                                  "kv-cache-tester"], p=0.2)
    g.flag("--curve", 0.2 * single)
    g.opt("--replicas", ["1", "2", "4"], ["0", "-1", "1025", "x", "1e3", ""], p=0.15 * single)
    g.opt("--router", ["round-robin", "least-loaded", "session", "prefix"], ["", "prefx", "random"], p=0.15)
    g.opt("--sample-rate", ["1", "0.5", "0.01"], p=0.1)
    g.flag("--exact-stats", 0.1 * single)
    g.opt("--curve-points", ["1", "5", "20", "10000"], p=0.2 * (0.5 if tiers else 1))
    g.flag("--skip-bad", 0.2)
    g.preset("--model", MODELS, ["tiny-model.toml"], p=0.6 if tiers else 0.25)
    if tiers:
        tier_options(g)
    g.kv_layout()
    g.output(["token_hit_rate", "block_hit_rate", "hit_tokens", "effective_hit_rate"])


BAD_TIERS = ["", "hbm,hbm", "ssd,hbm", "dram,hbm", "hbm,nosuch", "é", ",", "hbm,,ssd", "HBM"]
BAD_TIER_SIZES = ["dram=" + b for b in BAD_BYTES[:20]] + ["nosuch=1TB", "dram", "=1TB", "dram=1TB=2", "ssd=-8TB"]


def tier_options(g: Gen, curve: bool = True):
    """trace --tiers (issue 12): tiers, their sizes, links, copies, the node and the engine, the tier curve (valid
    values name tiers in --tiers)."""
    tiers = g.pick(["hbm,dram,ssd", "hbm,dram", "hbm", "hbm,ssd"], BAD_TIERS)
    g.args += ["--tiers", tiers]
    names = [t for t in tiers.split(",") if t in ("hbm", "dram", "ssd")] or ["hbm"]
    lower = [t for t in names if t != "hbm"] or names
    sizes = {"hbm": ["1m", "20000", "80GB"], "dram": ["1TB", "512GiB", "2m"], "ssd": ["10m", "8TB"]}
    g.opt("--tier-capacity", [f"{t}={g.r.choice(sizes[t])}" for t in names], BAD_TIER_SIZES, p=0.5)
    links = {"dram": "pcie-gen5-x16", "ssd": "nvme-gen4", "hbm": "nvlink4"}
    g.opt("--tier-link", [f"{t}={links[t]}" for t in lower], ["dram=nosuch", "ssd=", "nosuch=nvme-gen4", "ssd"],
          p=0.3)
    g.opt("--tier-copies", ["coalesced", "per-block"], ["", "x"], p=0.2)
    if not curve:  # compare: the node comes from the scenario options
        return
    g.preset("--hardware", HARDWARE, ["edge-hw.toml", "big-hw.toml"], p=0.3)
    g.opt("--gpus", ["1", "8", "1000000"], p=0.2)
    g.opt("--engine", ["vllm", "sglang", "ideal"], ["", "trt"], p=0.2)
    g.opt("--tier-curve", [*names, *(f"{t}=0,1m,2TB" for t in names), *(f"{t}=1,10m" for t in names)],
          ["", "nosuch", "dram=", "dram=-1", "dram=" + HUGE, "dram=" + ",".join(["1m"] * 2000), "dram=nan"], p=0.3)


def gen_presets(g: Gen):
    sub = g.pick(["list", "show", "validate", "schema"], ["", "nosuch", "LIST"])
    g.args += ["presets", sub]
    kinds = ["models", "hardware", "links", "workloads", "scenarios"]
    bad_kinds = ["", "model", "é", "nosuch"]
    if sub == "list":
        if g.r.random() < 0.5:
            g.args.append(g.pick(kinds, bad_kinds))
        g.opt("--format", ["table", "json", "csv", "markdown"], ["", "xml"], p=0.5)
    elif sub == "show":
        g.args.append(g.pick(MODELS + HARDWARE + LINKS + ["article"], BAD_NAMES + hostile_files(g.files)))
        g.opt("--kind", kinds, bad_kinds, p=0.3)
        g.opt("--format", ["table", "json"], ["", "csv", "xml"], p=0.4)
    elif sub == "validate":
        good = [g.files[k] for k in ("tiny-model.toml", "edge-link.toml", "edge-hw.toml")]
        for _ in range(g.r.choice([1, 1, 2])):
            g.args.append(g.pick(good, BAD_NAMES + hostile_files(g.files) + [g.files["absurd-model.toml"],
                                                                             g.files["big-hw.toml"]]))
        g.opt("--kind", kinds, bad_kinds, p=0.3)
    elif sub == "schema":
        if g.r.random() < 0.7:
            g.args.append(g.pick(kinds, bad_kinds))


def gen_import(g: Gen):
    valid = [str(CONFIGS / n) for n in ("qwen3-32b", "gpt-oss-120b", "qwen3-next-80b-a3b", "deepseek-v4-flash")]
    valid.append(str(CONFIGS / "llama-4-scout" / "config.json"))
    bad = [g.files[k] for k in ("latin1.json", "deep.json", "list.json", "absurd.json", "empty-folder", "dir.toml",
                                "missing.toml", "latin1.toml", "fifo.toml") if k in g.files] + BAD_NAMES
    g.args += ["import", g.pick(valid, bad)]
    if g.r.random() < 0.2:
        out = g.pick([g.files["out"] + f"/{g.r.randint(0, 9)}.toml"],
                     [g.files["dir.toml"], g.files["empty-folder"], "", g.files["missing.toml"] + "/x/y.toml"])
        g.args += ["--output", out]
    g.opt("--name", ["Qwen", "my model"], ["", "é\n\t|", "a" * 5000, "\x00"], p=0.2)
    g.opt("--source", ["https://huggingface.co/x"], ["", "\n", "é" * 1000], p=0.2)
    g.output(["params_total", "kv_bytes_per_token"])


SWEEP_VARY = {
    "kv": ["model=llama-3-8b,deepseek-v3", "context=1k..1m:log5", "kv-dtype=bf16,fp8"],
    "capacity": ["gpus=1..8:step1", "context=4k..128k:log4", "hardware=h100-sxm,h200-sxm",
                 "hbm-utilization=0.5..0.9:lin3"],
    "cost": ["mfu-prefill=0.1..0.5:lin3", "price-per-gpu-hour=1,10", "strategy=lru,prefix-tree"],
    "compare": ["decode-tokens-per-s=10,60", "gpus=8,16", "output-tokens=0,500"],
    "trace": ["capacity=1000,3m", "policy=lru,fifo", "policy=lfu,s3fifo", "replicas=1,2", "router=prefix,session"],
}
SWEEP_BAD = ["context=1..1e400:log5", "context=1k..1m:log1000000000", "gpus=1.." + HUGE + ":step1", "model=", "=", "",
             "context=4k..1k:log3", "context=1k..1m:lin0", "context=1k..1m:logx", "nosuch=1", "context=nan..inf:log3",
             "gpus=0..8:step1", "mfu-prefill=5e-324..1:lin3", "price-per-gpu-hour=1e308", "decode-tokens-per-s=1e-308",
             "context=" + ",".join(["4k"] * 50), "context=1k..1m:step0", "context=1k..1m:step-1k", "model=nosuch,é",
             "requests=" + HUGE, "context=1k..1m:log" + HUGE, "gpus=8,8,8", "context==4k", "context=4k..", "..:"]
SWEEP_SET = {"kv": ["context=4k", "model=qwen2.5-7b"], "capacity": ["gpus=8", "hardware=h200-sxm"],
             "cost": ["requests=100", "context=8k", "gpus=8"], "compare": ["requests=100", "context=8k"],
             "trace": ["block-tokens=16"]}
SWEEP_Y = {"kv": "kv_bytes_per_token", "capacity": "max_requests", "cost": "usd_per_mtok_blended",
           "compare": "usd_per_mtok_blended", "trace": "token_hit_rate"}


def gen_sweep(g: Gen):
    target = g.pick(list(SWEEP_VARY), ["", "nosuch", "blocks", "KV"])
    g.args += ["sweep", target]
    vary, fixed = SWEEP_VARY.get(target, ["context=4k"]), SWEEP_SET.get(target, [])
    for name in g.r.sample(vary, min(len(vary), g.r.choice([1, 1, 2]))):
        g.args += ["--vary", g.pick([name], SWEEP_BAD)]
    if target == "trace":
        g.args += ["--set", "file=" + g.pick([g.files["trace.jsonl"]], hostile_files(g.files, trace=True))]
    for text in fixed:  # cost and compare need both requests and context
        if target in ("cost", "compare") or g.r.random() < 0.5:
            name = text.split("=")[0]
            g.args += ["--set", g.pick([text], [f"{name}={b}" for b in BAD_NUMBERS[:14]] + SWEEP_BAD[:6])]
    g.args += ["--max-points", g.pick(["1000"], ["0", "-1", "1", HUGE, "nan", ""])]
    g.opt("--format", ["table", "json", "csv", "markdown"], ["", "xml"], p=0.9)
    if "--format" not in g.args or g.args[g.args.index("--format") + 1] == "table":
        g.flag(g.r.choice(["--chart", "--no-chart"]), 0.3)
    g.opt("--y", [SWEEP_Y.get(target, "x")], ["nosuch", ""], p=0.2)
    g.opt("--x", [vary[0].split("=")[0]], ["nosuch", ""], p=0.1)
    if g.r.random() < 0.15:
        g.args += ["--check", g.pick([f"{SWEEP_Y.get(target, 'x')} >= 0"], ["nosuch > 1", "x"])]


GENERATORS = {"kv": gen_kv, "capacity": gen_capacity, "blocks": gen_blocks, "transfer": gen_transfer,
              "cost": gen_cost, "compare": gen_compare, "trace": gen_trace, "presets": gen_presets,
              "sweep": gen_sweep, "import": gen_import}


# ---------------------------------------------------------------- the properties

_NON_FINITE = re.compile(r"(?<![\w.])[-+]?\$?(?:inf|nan)(?![\w])", re.IGNORECASE)  # as Python prints them


def _no_infinity_in_json(text: str):
    def refuse(name):
        raise AssertionError(f"non-finite number {name} in JSON")

    return json.loads(text, parse_constant=refuse)


def _non_finite_in_text(out: str, command: str) -> list[str]:
    """Places where inf/nan stands as a number. The trace's unlimited cache ('--capacity inf') is a value the user
    asked for and is shown as 'inf' in its capacity columns: allowed there, in the trace command only."""
    hits = _NON_FINITE.findall(out)
    if command in ("trace", "compare"):
        hits = [h for h in hits if h.lower() != "inf"]
    return hits


def check_run(args: list[str], r) -> list[str]:
    """The problems of one run (empty = fine)."""
    problems = []
    if r.code not in (0, 1, 2):
        problems.append(f"exit {r.code}")
    if r.code == 1 and "--check" not in args:
        problems.append("exit 1 without --check")
    if "Traceback" in r.out + r.err or 'File "' in r.err:
        problems.append("traceback")
    if r.code == 2 and len(r.err.strip().splitlines()) != 1:
        problems.append(f"{len(r.err.strip().splitlines())} error lines")
    if r.code in (0, 1):
        fmt = args[args.index("--format") + 1] if "--format" in args else "table"
        if fmt == "json" and args[:2] != ["presets", "schema"]:
            try:
                _no_infinity_in_json(r.out)
            except (AssertionError, ValueError) as e:
                problems.append(f"bad JSON: {e}")
        elif _non_finite_in_text(r.out, args[0]):
            problems.append(f"inf/nan printed: {_non_finite_in_text(r.out, args[0])[:3]}")
    return problems


def run_case(args: list[str], codes: dict, failures: list) -> None:
    """Run one command line in-process; count its exit code and note its problems (check_run)."""
    r = run_cli(*args)
    codes[r.code] = codes.get(r.code, 0) + 1
    problems = check_run(args, r)
    if problems:
        failures.append(f"{problems}: kvcalc {' '.join(repr(a)[:80] for a in args)}\n  err: {r.err[:300]}")


@pytest.mark.parametrize("command", list(GENERATORS))
def test_fuzz_command(command, files, monkeypatch):
    rng = random.Random(f"{SEED}-{command}")
    failures, codes = [], {0: 0, 1: 0, 2: 0}
    for i in range(CASES):
        g = Gen(rng, files, hostile=rng.choice([0.0, 0.1, 0.3, 0.6]))
        GENERATORS[command](g)
        # the table's width: wide mostly, sometimes narrow or hostile (0, 1, garbage, thousands of digits)
        monkeypatch.setenv("COLUMNS", g.pick(["200", "200", "120", "80"], ["40", "20", "1", "0", "", "-5", "x",
                                                                             "9" * 5000]))
        run_case(g.args, codes, failures)
    assert not failures, f"{len(failures)} of {CASES} failed:\n" + "\n".join(failures[:10])
    # the mix is useful only if it reaches both the computations and the errors
    assert codes[0] >= CASES // 10 and codes[2] >= CASES // 10, codes


# ---------------------------------------------------------------- issue 19: the CLI conventions (kept apart)

SWEEP_OWN = {  # each sweep target's own options, as fixed inputs: (flag, valid values, hostile values)
    "kv": [("--model", MODELS, BAD_NAMES), ("--context", CONTEXTS, BAD_TOKENS), ("--kv-dtype", ["fp8", "bf16"],
           ["fp7", ""]), ("--mtp", None, None), ("-m", MODELS, BAD_NAMES)],
    "capacity": [("--model", MODELS, BAD_NAMES), ("--gpus", ["1", "8"], BAD_NUMBERS), ("--hardware", HARDWARE,
                 BAD_NAMES), ("--hbm-utilization", ["0.9", "80%"], BAD_FRACTIONS), ("--reserve", ["4GB", "0"],
                 BAD_BYTES), ("--attention", ["tp", "dp"], ["", "xp"])],
    "cost": [("--strategy", ["lru", "prefix-tree"], ["", "A"]), ("--requests", ["100"], BAD_NUMBERS),
             ("--context", ["8k"], BAD_TOKENS), ("--warm", None, None), ("--no-attention-flops", None, None)],
    "compare": [("--requests", ["100"], BAD_NUMBERS), ("--context", ["8k"], BAD_TOKENS),
                ("--shared-prefix", ["1k", "0"], BAD_TOKENS), ("--cold", None, None), ("--gpus", ["8"], BAD_NUMBERS)],
    "trace": [("--policy", ["lru", "fifo"], ["", "lfu"]), ("--block-tokens", ["16"], BAD_NUMBERS),
              ("--model", MODELS, BAD_NAMES)],
}
ENGINE_ONLY = ["--gpu-memory-utilization", "--mem-fraction-static", "--total-memory", "--weights-memory",
               "--max-num-seqs", "--block-size", "--max-model-len", "--concurrency"]


def gen_conventions(g: Gen):
    """-h / -V / --quiet anywhere they may go, sweep with its target's own options (twice, beside --set and
    --vary of the same input), options given without the one they need, TP sizes the engines refuse."""
    kind = g.r.choice(["sweep", "sweep", "engine", "needs", "global"])
    if g.r.random() < 0.2:
        g.args.append(g.r.choice(["--quiet", "-q"]))
    if kind == "global":
        g.args += g.r.choice([["-V"], ["--version"], ["-h"], ["-q", "-V"], ["kv", "-h"], ["sweep", "-h"],
                              ["sweep", g.r.choice(list(SWEEP_OWN) + ["nosuch", ""]), "-h"], ["presets", "list", "-h"],
                              ["-V", "kv"], ["--show-completion", g.pick(["bash", "zsh", "fish"], ["tcsh", "", "é"])]])
        return
    if kind == "sweep":
        target = g.pick(list(SWEEP_OWN), ["nosuch", ""])
        g.args += ["sweep", target]
        axis = SWEEP_VARY.get(target, ["context=4k"])[-1 if target == "trace" else 0]  # trace: capacity is --set
        g.args += ["--vary", g.pick([axis], SWEEP_BAD)]
        if target == "trace":
            g.args += ["--set", "file=" + g.pick([g.files["trace.jsonl"]], hostile_files(g.files, trace=True)),
                       "--set", "capacity=3m"]
        for flag, valid, bad in g.r.sample(SWEEP_OWN.get(target, SWEEP_OWN["kv"]), 2):
            if valid is None:
                g.flag(flag, 0.7)
            else:
                g.opt(flag, valid, bad, p=0.7 if g.r.random() > 0.1 else 1.0)
                if g.r.random() < 0.05:  # twice, or also as --set / --vary
                    g.args += g.r.choice([[flag, valid[0]], ["--set", f"{flag.lstrip('-')}={valid[0]}"]])
        if target in ("cost", "compare") and "--requests" not in g.args:
            g.args += ["--set", "requests=10", "--set", "context=4k"] if "--context" not in g.args else \
                ["--set", "requests=10"]
        g.opt("--format", ["csv", "json"], ["", "xml"], p=0.9)
        return
    if kind == "engine":
        cmd = g.r.choice(["capacity", "cost", "compare"])
        g.args += [cmd, "--model", g.pick(["llama-3-70b", "qwen2.5-7b", "deepseek-v3", "llama-3-8b"], BAD_NAMES)]
        g.args += ["--gpus", g.pick([str(n) for n in (1, 2, 3, 4, 6, 7, 8, 16, 32, 64)], BAD_NUMBERS)]
        if cmd != "capacity":
            g.args += ["--hardware", "h100-sxm"]
        g.opt("--engine", ["vllm", "sglang", "ideal"], ["", "trt"], p=0.9)
        g.opt("--format", ["json", "table"], [""], p=0.9)
        return
    g.args.append("capacity")  # "needs": options without the option they need
    for flag in g.r.sample(ENGINE_ONLY, g.r.choice([1, 2])):
        g.args += [flag, g.pick(["0.9", "8k", "70GiB", "1"], BAD_NUMBERS)]
    g.opt("--engine", ["ideal", "vllm", "sglang"], ["", "x"], p=0.5)
    g.opt("--solve", ["max-model-len", "gpu-memory-utilization"], ["", "x"], p=0.3)
    g.opt("--kv-group-size", ["32", "64"], BAD_NUMBERS, p=0.2)
    g.opt("--kv-dtype", ["kivi", "int4-grouped", "fp8"], [""], p=0.2)
    g.opt("--format", ["json"], [""], p=0.9)


def test_fuzz_cli_conventions(files, monkeypatch):
    """The properties of test_fuzz_command, on issue 19's options; -h / -V / --show-completion runs print their
    text and exit 0."""
    rng = random.Random(f"{SEED}-conventions")
    failures, codes = [], {0: 0, 1: 0, 2: 0}
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    for _ in range(CASES):
        g = Gen(rng, files, hostile=rng.choice([0.0, 0.1, 0.3]))
        gen_conventions(g)
        monkeypatch.setenv("COLUMNS", g.pick(["200", "100", "60"], ["0", "", "x", "9" * 5000]))
        r = run_cli(*g.args)
        codes[r.code] = codes.get(r.code, 0) + 1
        problems = check_run(g.args, r) if "-h" not in g.args and "-V" not in g.args else (
            [] if r.code in (0, 2) and "Traceback" not in r.out + r.err else [f"exit {r.code}"])
        if problems:
            failures.append(f"{problems}: kvcalc {' '.join(repr(a)[:80] for a in g.args)}\n  err: {r.err[:300]}")
    assert not failures, f"{len(failures)} of {CASES} failed:\n" + "\n".join(failures[:10])
    assert codes[0] >= CASES // 10 and codes[2] >= CASES // 10, codes


# ---------------------------------------------------------------- issue 21: config.json fields, sweep grids, engines
# and tiers. Hostile config.json files are the real fixtures with one field (top level, text_config or
# quantization_config) replaced, dropped, shortened or duplicated; sweeps get every axis of every target with values
# at and past the option's bounds, ranges that overflow or would not fit a budget, and budgets of their own.
# HOSTILE_CASES per kind (default 200); bench/hostile_run.py runs the same generators >= 10,000 times in subprocesses.

HOSTILE_CASES = int(os.environ.get("KVCALC_HOSTILE_CASES", "200"))
HOSTILE_JSON = ["{}", "[]", "[1]", "[[1]]", '"x"', '""', "null", "true", "false", "0", "-1", "1.5", "1e-300",
                "1e400", "-1e400", "NaN", "Infinity", str(2**24), str(2**24 + 1), str(2**63), "1" + "0" * 30,
                "9" * 5000, '["bfloat16"]', '{"a": {"b": 1}}', "[" * 3000 + "]" * 3000, '"' + "é" * 3000 + '"',
                "[0, 0]", '"ab"', "[128]", '[""]', '"float8"', '"fp4"', "[-4]", "[4, 128]"]


def hostile_config_files(d, n: int, seed: int = 21) -> list[str]:
    """``n`` folders, each a real fixture's config.json with one field made hostile (JSON text, so 1e400, NaN
    and a 5,000-digit integer are written as a file would hold them)."""
    rng = random.Random(seed)
    bases = sorted(p for p in CONFIGS.iterdir() if (p / "config.json").is_file())
    out = []
    for i in range(n):
        base = rng.choice(bases)
        cfg = json.loads((base / "config.json").read_text())
        holder, prefix = cfg, ""
        for nested in ("text_config", "quantization_config"):
            if isinstance(cfg.get(nested), dict) and rng.random() < 0.3:
                holder, prefix = cfg[nested], nested
        key = rng.choice(sorted(holder) + ["quantization_config", "moe_layer_freq", "mlp_only_layers",
                                            "layer_types", "hybrid_override_pattern", "weight_block_size",
                                            "group_size", "modules_to_not_convert", "num_experts_per_tok"])
        how = rng.random()
        if how < 0.1:
            holder.pop(key, None)
            text = json.dumps(cfg)
        elif how < 0.2 and isinstance(holder.get(key), (list, str)) and holder[key]:
            holder[key] = holder[key][:-1] if rng.random() < 0.5 else holder[key] * 2  # one short, or doubled
            text = json.dumps(cfg)
        else:
            holder[key] = "\x00HOSTILE\x00"
            text = json.dumps(cfg).replace(json.dumps("\x00HOSTILE\x00"), rng.choice(HOSTILE_JSON))
        folder = d / f"{i:04d}-{base.name}-{prefix + '.' if prefix else ''}{key}"[:120]
        folder.mkdir()
        (folder / "config.json").write_text(text)
        if base.name == "qwen3-32b-nvfp4" and rng.random() < 0.5:
            (folder / "hf_quant_config.json").write_text(rng.choice(
                ['{"quantization": 5}', '{"quantization": {"quant_algo": {}}}', (base / "hf_quant_config.json")
                 .read_text()]))
        if rng.random() < 0.05:
            (folder / "model.safetensors.index.json").write_text(rng.choice(
                ['{"metadata": 5}', '{"metadata": {"total_size": 1e400}}', '{"metadata": {"total_size": "x"}}',
                 '{"metadata": {"total_size": 65536}, "weight_map": {}}']))
        out.append(str(folder))
    return out


@pytest.fixture(scope="module")
def hostile_configs(tmp_path_factory):
    return hostile_config_files(tmp_path_factory.mktemp("configs"), 150)


def gen_config_fields(g: Gen):
    """Every command that takes a model, given a hostile config.json (or its folder)."""
    cfg = g.r.choice(g.configs)
    ref = cfg if g.r.random() < 0.7 else cfg + "/config.json"
    cmd = g.r.choice(["import", "kv", "kv", "capacity", "capacity", "blocks", "transfer", "cost", "compare",
                      "sweep-kv", "sweep-capacity", "trace"])
    if cmd == "import":
        g.args += ["import", ref]
    elif cmd == "kv":
        g.args += ["kv", ref, g.r.choice(MODELS)] if g.r.random() < 0.2 else ["kv", ref]
        g.opt("--context", CONTEXTS + ["4k,1m"], BAD_TOKENS, p=0.4)
        g.kv_layout()
    elif cmd == "capacity":
        g.args += ["capacity", "--model", ref]
        if g.r.random() < 0.4:
            g.opt("--engine", ["vllm", "sglang", "ideal"], p=1)
            g.opt("--solve", ["max-model-len", "max-concurrency", "gpu-memory-utilization"], p=0.3)
        g.kv_layout()
    elif cmd in ("blocks", "transfer"):
        g.args += [cmd, "--model", ref]
    elif cmd in ("cost", "compare"):
        g.args += [cmd, "--model", ref]
        g.opt("--gpus", ["1", "8"], p=0.3)
    elif cmd == "trace":
        g.args += ["trace", g.files["trace.jsonl"], "--block-tokens", "16", "--model", ref]
        g.flag("--tiers", 0)
        if g.r.random() < 0.5:
            g.args += ["--tiers", "hbm,dram"]
    else:
        target = cmd.split("-")[1]
        g.args += ["sweep", target, "--vary", f"model={ref},llama-3-8b", "--vary", "context=1k,4k"]
    g.output(["kv_bytes_per_token", "max_requests", "params_total"])


BOUND_EDGES = {"gpus": ["1", "1000000", "1000001", "0", HUGE], "requests": ["1", str(10**12), str(10**12 + 1)],
               "output-tokens": ["0", str(2**40), str(2**40 + 1)], "block-tokens": ["1", str(2**24), str(2**24 + 1)],
               "price-per-gpu-hour": ["0.01", "10000", "10000.5", "1e308", "5e-324"],
               "decode-tokens-per-s": ["0.001", "0.0005", "1e7", "1e308", "5e-324"],
               "mfu-prefill": ["0.001", "0.0009", "1", "5e-324", "100%", "101%"],
               "kv-group-size": ["1", str(2**20), str(2**20 + 1)],
               "kv-compression": ["1", "0.99", "10000", "10001", "1e400"], "kv-residual-tokens": ["0", str(2**40 + 1)],
               "hbm-utilization": ["0.5", "1", "1.5", "5e-324"], "reserve": ["0", "0GB", "79GB", "1e308GB", "1e400B"],
               "context": ["1", "1m", str(2**40), str(2**40 + 1), "1e400"], "shared-prefix": ["0", "1k", "1e400"],
               "capacity": ["1", "3m", "inf", str(2**50 + 1), "1e400"]}
HOSTILE_RANGES = ["1..1e12:step1", "1..1e308:step1e-300", "1..1m:lin1000000000", "1..1m:log" + HUGE,
                  "1..10000000:step1", "1..1000000:step1", "0.1..0.9:step1e-300", "1..100", "1..5000", "1..2000:lin7",
                  "1k..1m:log30", "5e-324..1:lin3", "1..1e400:log3", "nan..1:lin2"]


def gen_sweep_grids(g: Gen):
    """sweep over every target's axes: bound edges, overflowing or oversize ranges, grids and budgets."""
    import kvcalc.trace.sweep  # noqa: F401  (registers the trace target)
    from kvcalc.serve import sweep as sw

    target = g.r.choice(list(sw.AXES))
    names = list(sw.AXES[target])
    g.args += ["sweep", target]
    for name in g.r.sample(names, g.r.choice([1, 1, 2, 3])):
        d = sw.AXES[target][name]
        if d.kind in ("choice", "preset", "path"):
            values = {"choice": list(d.choices), "path": [g.files["trace.jsonl"]],
                      "preset": {"models": MODELS, "hardware": HARDWARE, "links": LINKS,
                                 "scenarios": ["article"], "workloads": ["article-100"]}.get(
                                     (d.choices or ("models",))[0], MODELS)}[d.kind]
            spec = ",".join(g.r.sample(values, min(len(values), g.r.choice([1, 2]))))
        elif g.r.random() < 0.5:
            spec = ",".join(g.r.sample(BOUND_EDGES.get(name, ["1", "2"]), g.r.choice([1, 2])))
        else:
            spec = g.r.choice(HOSTILE_RANGES)
        g.args += ["--vary", f"{name}={spec}"]
    if target == "trace":
        g.args += ["--set", "file=" + g.files["trace.jsonl"], "--set", "block-tokens=16"]
    if target in ("cost", "compare") and g.r.random() < 0.6:
        g.args += ["--set", "requests=100"] * ("requests" not in g.args[-1]) + ["--set", "context=8k"] * (
            "context" not in " ".join(g.args))
    g.opt("--max-points", ["1000", "10000000", "1000000000"], ["0", HUGE, "1e9"], p=0.3)
    # budgets at or below the defaults (2 GB, 10 s): one raised past them is a user accepting a long run, which
    # a hostile-input run (20 s per case) is not about
    g.opt("--max-memory", ["1MB", "100MB", "2GB"], ["0B", "1e400GB", "1e14B", "x", "-1GB"], p=0.2)
    g.opt("--max-seconds", ["0.01", "1", "10"], ["0", "nan", "inf", "1e9", "-1"], p=0.2)
    g.opt("--format", ["json", "csv", "markdown", "table"], ["", "xml"], p=0.9)


def gen_engine_tiers(g: Gen):
    """capacity --engine with every sizing input hostile more often, and trace --tiers with hostile sizes."""
    if g.r.random() < 0.5:
        g.args += ["capacity"]
        g.hostile = max(g.hostile, 0.25)
        engine_options(g)
        g.opt("--gpus", ["1", "8"], p=0.3)
        g.output(["max_requests", "value"])
    else:
        g.args += ["trace", g.files["trace.jsonl"], "--block-tokens", "16", "--model",
                   g.r.choice(["llama-3-8b", "qwen2.5-7b", "deepseek-v3"])]
        g.hostile = max(g.hostile, 0.25)
        tier_options(g)
        if g.r.random() < 0.3:
            g.args += ["--tier-capacity", g.r.choice(["ssd=1e20TB", "dram=1e308B", "hbm=" + str(2**51),
                                                      "ssd=5e-324B", "dram=1e400TB"])]
        g.output(["hit_rate", "effective_hit_rate"])


HOSTILE_GENERATORS = {"config-fields": gen_config_fields, "sweep-grids": gen_sweep_grids,
                      "engine-tiers": gen_engine_tiers}


@pytest.mark.parametrize("kind", list(HOSTILE_GENERATORS))
def test_fuzz_hostile(kind, files, hostile_configs, monkeypatch):
    """Issue 21 (Must hold): no internal error, no traceback, no inf/nan, one error line, on these either."""
    rng = random.Random(f"{SEED}-hostile-{kind}")
    monkeypatch.setenv("COLUMNS", "200")
    failures, codes = [], {}
    for _ in range(HOSTILE_CASES):
        g = Gen(rng, files, hostile=rng.choice([0.0, 0.2, 0.5]))
        g.configs = hostile_configs
        HOSTILE_GENERATORS[kind](g)
        run_case(g.args, codes, failures)
    assert not failures, f"{len(failures)} of {HOSTILE_CASES} failed:\n" + "\n".join(failures[:10])
    assert codes.get(2, 0) >= HOSTILE_CASES // 10, codes  # the hostile values reach the checks
    assert codes.get(0, 0) + codes.get(1, 0) >= HOSTILE_CASES // 20, codes  # and some runs compute
