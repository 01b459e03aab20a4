"""Benchmark reading a trace plain, gzip- and Zstandard-compressed, side by side in one run (issue 22).

Run by hand (not by pytest), from the repository root:

    python bench/bench_trace_compression.py [--trace PATH] [--copies 8] [--runs 5] [--capacity 3000000]

The default trace is ../shared/traces/mooncake_synthetic_trace.jsonl; when it is absent the script says so and
exits 0. It writes a trace ``--copies`` times larger in a temporary directory (copy k's hash ids offset by k x
(largest id + 1), timestamps after the previous copy's), compresses it with the standard library's gzip (level
6) and with zstandard (level 3, the zstd command's default; needs ``pip install 'kvcalc[zstd]'``), and times,
in this process, in rounds that take every file once (paired: drift hits all alike):

- ``read``: the decompressed stream cut into whole-line pieces (:func:`kvcalc.trace.reader._pieces`), the
  reader's input before any JSON is decoded;
- ``replay``: :func:`kvcalc.trace.analysis.analyze_trace` at one capacity (decode + statistics + LRU).

A figure is the median over ``--runs`` rounds; a ratio is the median of the per-round ratios to the plain file.
Also checked: every file gives the same replay result. Also shown: zstandard's own stream reader on the ``read``
step, beside kvcalc's (which feeds 2 KiB of compressed input per call so a truncated file is an error and one
call's output stays bounded).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def build(src: Path, copies: int, out: Path) -> None:
    """``copies`` copies of ``src`` one after another, ids offset per copy so that no block is shared."""
    lines = [json.loads(x) for x in src.read_text().splitlines() if x.strip()]
    top = max(max(o["hash_ids"], default=0) for o in lines) + 1
    span = max(o["timestamp"] for o in lines) + 1
    with out.open("w") as f:
        for k in range(copies):
            for o in lines:
                f.write(json.dumps({"timestamp": o["timestamp"] + k * span, "input_length": o["input_length"],
                                    "output_length": o["output_length"],
                                    "hash_ids": [h + k * top for h in o["hash_ids"]]}) + "\n")


def read_bytes(path: Path) -> int:
    from kvcalc.trace.reader import _pieces, open_stream

    stream, raw = open_stream(path, watched=False)
    with raw, stream:
        return sum(len(p) for p in _pieces(stream))


def read_native(path: Path) -> int:
    import zstandard

    from kvcalc.trace.reader import _pieces

    with path.open("rb") as f:
        return sum(len(p) for p in _pieces(zstandard.ZstdDecompressor().stream_reader(f, read_across_frames=True)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=str(REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"))
    ap.add_argument("--copies", type=int, default=8)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--capacity", type=int, default=3_000_000)
    a = ap.parse_args()
    src = Path(a.trace)
    if not src.is_file():
        print(f"no trace at {src}: nothing to measure")
        return 0
    try:
        import zstandard
    except ImportError:
        print("zstandard is not installed (pip install 'kvcalc[zstd]'): nothing to compare")
        return 0
    from kvcalc.trace.analysis import analyze_trace

    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "t.jsonl"
        build(src, a.copies, plain)
        data = plain.read_bytes()
        files = {"plain": plain, "gzip": Path(tmp) / "t.jsonl.gz", "zstd": Path(tmp) / "t.jsonl.zst"}
        files["gzip"].write_bytes(gzip.compress(data, compresslevel=6))
        files["zstd"].write_bytes(zstandard.ZstdCompressor(level=3).compress(data))
        steps = {"read": read_bytes, "replay": lambda p: analyze_trace(p, [a.capacity], 512, trace_format="auto")}
        times = {(s, f): [] for s in steps for f in files} | {("read", "zstd (zstandard's reader)"): []}
        results = {}
        for _ in range(a.runs):
            for s, fn in steps.items():
                for f, path in files.items():
                    t = time.perf_counter()
                    results[(s, f)] = fn(path)
                    times[(s, f)].append(time.perf_counter() - t)
            t = time.perf_counter()
            read_native(files["zstd"])
            times[("read", "zstd (zstandard's reader)")].append(time.perf_counter() - t)
        assert results[("replay", "gzip")] == results[("replay", "zstd")] == results[("replay", "plain")]
        r = results[("replay", "plain")].results[0]
        print(f"trace: {a.copies} x {src.name}: {len(data):,} B plain, {files['gzip'].stat().st_size:,} B gzip, "
              f"{files['zstd'].stat().st_size:,} B zstd; {r.requests:,} requests, hit rate {r.token_hit_rate:.4f} "
              f"at {a.capacity:,} tokens (equal for all three)")
        print(f"{'step':7} {'file':27} {'median':>10} {'MB/s':>8} {'x plain':>8}")
        for (s, f), ts in times.items():
            base = times[(s, "plain")]
            ratio = statistics.median(t / b for t, b in zip(ts, base))
            med = statistics.median(ts)
            print(f"{s:7} {f:27} {med * 1e3:8.1f} ms {len(data) / med / 1e6:8.0f} {ratio:8.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
