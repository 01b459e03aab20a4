"""Benchmark trace replay: one-capacity OrderedDict replay vs the one-pass LRU curve.

Run by hand (not by pytest), from anywhere:

    python bench/bench_trace.py [--trace PATH] [--copies 20] [--repeats 3] [--capacity 10000000] [--points 20]

The default trace is ../shared/traces/mooncake_synthetic_trace.jsonl relative to the repository root; when it
is absent the script says so and exits 0. It also builds a trace ``--copies`` times larger in a temporary
file (each copy's hash ids are offset so copies share no block, and its timestamps are offset to follow the
previous copy).

Every measurement runs in its own subprocess, which times ``--repeats`` runs (median reported) and then
reports its peak resident memory (VmHWM from /proc/self/status on Linux, else ``ru_maxrss``; the whole
process: Python, numpy and the work), the resident memory after imports (baseline), and, from one extra untimed run under
``tracemalloc``, the peak of memory allocated by the run itself (Python objects and numpy arrays).

Timed, per trace: ``single`` = ``replay(path, capacity)`` (read + validate + OrderedDict LRU);
``curve`` = ``lru_curve(path, 20 capacities)`` (read + validate + stack depths). Also ``core``: the requests
are first loaded in memory and only the replay engines are timed (ratio of the engines without the reading).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"

if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def build_scaled_trace(source: Path, copies: int, target: Path) -> None:
    """Write ``copies`` back-to-back copies of ``source`` to ``target`` (ids and timestamps offset)."""
    max_id = -1
    last_ms = 0.0
    with open(source, "rb") as handle:
        for line in handle:
            if line.strip():
                obj = json.loads(line)
                if obj["hash_ids"]:
                    max_id = max(max_id, max(obj["hash_ids"]))
                last_ms = max(last_ms, obj["timestamp"])
    id_step = max_id + 1
    ms_step = last_ms + 1000.0
    with open(target, "w") as out:
        for copy in range(copies):
            with open(source, "rb") as handle:
                for line in handle:
                    if not line.strip():
                        continue
                    obj = json.loads(line)
                    obj["timestamp"] = obj["timestamp"] + copy * ms_step
                    obj["hash_ids"] = [h + copy * id_step for h in obj["hash_ids"]]
                    out.write(json.dumps(obj) + "\n")


def _peak_rss_bytes() -> int:
    """Peak resident memory of this process so far [B].

    Linux: VmHWM of /proc/self/status (reset by exec; ``ru_maxrss`` is not: it keeps the parent's peak
    across fork + exec). Elsewhere: ru_maxrss (KiB on Linux, bytes on macOS).
    """
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss if sys.platform == "darwin" else rss * 1024


def _child(kind: str, path: str, capacity: int, capacities: list[int], repeats: int) -> dict:
    """Run one measurement in this (child) process; returns times [s] and memory [B]."""
    from kvcalc.trace import lru_curve, reader, replay
    baseline = _peak_rss_bytes()
    if kind == "core":
        requests = list(reader.read_trace(path))
        single_times, curve_times = [], []
        for _ in range(repeats):  # interleaved, so drift hits both alike
            t0 = time.perf_counter()
            replay.replay_requests(requests, capacity)
            t1 = time.perf_counter()
            lru_curve.lru_curve_of_requests(requests, capacities)
            t2 = time.perf_counter()
            single_times.append(t1 - t0)
            curve_times.append(t2 - t1)
        return {"single_s": statistics.median(single_times), "curve_s": statistics.median(curve_times)}

    def run():
        if kind == "single":
            return replay.replay(path, capacity)
        return lru_curve.lru_curve(path, capacities)

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - t0)
    peak_rss = _peak_rss_bytes()
    tracemalloc.start()
    run()
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    first = result if kind == "single" else result[-1]
    return {
        "median_s": statistics.median(times), "times_s": times, "peak_rss_bytes": peak_rss,
        "baseline_rss_bytes": baseline, "tracemalloc_peak_bytes": traced_peak,
        "token_hit_rate": first.token_hit_rate,
    }


def _measure(kind: str, path: Path, capacity: int, capacities: list[int], repeats: int) -> dict:
    """Run one measurement in a fresh subprocess."""
    spec = json.dumps({"kind": kind, "path": str(path), "capacity": capacity, "capacities": capacities,
                       "repeats": repeats})
    out = subprocess.run([sys.executable, __file__, "--child", spec], check=True, capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
    return json.loads(out.stdout.strip().splitlines()[-1])


def _mb(n: float) -> str:
    return f"{n / 1e6:7.1f} MB"


def _bench_one(label: str, path: Path, capacity: int, points: int, repeats: int) -> None:
    from kvcalc.trace.replay import capacity_grid
    from kvcalc.trace.stats import trace_stats

    stats = trace_stats(path)
    capacities = capacity_grid(stats.distinct_blocks * stats.block_tokens, points)
    print(f"\n== {label}: {path.name}: {stats.requests:,} requests, {stats.total_blocks:,} block accesses, "
          f"{stats.distinct_blocks:,} distinct blocks; curve of {len(capacities)} capacities up to "
          f"{capacities[-1]:,} tokens; single capacity {capacity:,} tokens")
    single = _measure("single", path, capacity, capacities, repeats)
    curve = _measure("curve", path, capacity, capacities, repeats)
    core = _measure("core", path, capacity, capacities, repeats)
    for name, m in (("single replay (OrderedDict)", single), (f"{len(capacities)}-point LRU curve", curve)):
        print(f"  {name:30s} median {m['median_s']:7.3f} s  (runs: {', '.join(f'{t:.3f}' for t in m['times_s'])})"
              f"  peak RSS {_mb(m['peak_rss_bytes'])} (after imports {_mb(m['baseline_rss_bytes'])})"
              f"  tracemalloc peak {_mb(m['tracemalloc_peak_bytes'])}")
    print(f"  ratio curve / single, from file (read + replay): {curve['median_s'] / single['median_s']:.2f}x")
    print(f"  engines only (requests preloaded in memory): single {core['single_s']:.3f} s, "
          f"curve {core['curve_s']:.3f} s, ratio {core['curve_s'] / core['single_s']:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--copies", type=int, default=20, help="size of the scaled trace, in copies")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per measurement (median)")
    parser.add_argument("--capacity", type=int, default=10_000_000, help="single-replay capacity [tokens]")
    parser.add_argument("--points", type=int, default=20, help="curve capacities")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        spec = json.loads(args.child)
        print(json.dumps(_child(spec["kind"], spec["path"], spec["capacity"], spec["capacities"], spec["repeats"])))
        return 0
    if not args.trace.is_file():
        print(f"trace not found: {args.trace}; nothing to benchmark")
        return 0
    print(f"python {sys.version.split()[0]}; times are wall-clock medians of {args.repeats} runs, "
          "each measurement in its own subprocess")
    _bench_one("1x", args.trace, args.capacity, args.points, args.repeats)
    with tempfile.TemporaryDirectory() as tmp:
        scaled = Path(tmp) / f"trace_x{args.copies}.jsonl"
        t0 = time.perf_counter()
        build_scaled_trace(args.trace, args.copies, scaled)
        print(f"\n(built the {args.copies}x trace in {time.perf_counter() - t0:.1f} s, "
              f"{scaled.stat().st_size / 1e6:.0f} MB)")
        _bench_one(f"{args.copies}x", scaled, args.capacity, args.points, args.repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
