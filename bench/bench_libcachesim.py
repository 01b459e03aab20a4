"""kvcalc's LRU and FIFO replays against libCacheSim's on the same block accesses (issue 22), side by side.

Run by hand (not by pytest), from anywhere:

    pip install libcachesim        # 0.3.5 measured; NOT a kvcalc dependency
    python bench/bench_libcachesim.py [--trace PATH] [--capacities 1m,3m,10m] [--runs 3]

The default trace is ../shared/traces/mooncake_synthetic_trace.jsonl relative to the repository root; when it
(or libcachesim) is absent the script says so and exits 0. Every block access of the trace, in order, becomes
one libCacheSim request (the id taken mod 2^64, size 1; a cache of C tokens holds floor(C / B) objects), so the
two simulators hold the same cache after every access. For each policy and capacity:

- hits: kvcalc's hit blocks (``analyze_trace``: a request's leading blocks cached when it arrives) against the
  same rule driven through libCacheSim's cache (``find(update_cache=False)`` on the leading ids, then ``get`` of
  every id in order); they must be equal;
- the object miss ratio of that driven run equals libCacheSim's ``process_trace`` over a binary oracleGeneral
  file of the accesses (the same stream, C speed);
- speed: kvcalc end to end in one process (msgspec decode of the JSONL, statistics, the replay) against
  ``process_trace`` (C, from the binary file; the conversion is not timed), both in M block accesses/s, medians
  of ``--runs``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
POLICIES = {"lru": "LRU", "fifo": "FIFO"}


def driven_hits(lcs, policy: str, capacity_blocks: int, requests) -> tuple[int, int]:
    """(leading-run hit blocks, object hits) of the kvcalc rule run through libCacheSim's cache."""
    cache = getattr(lcs, POLICIES[policy])(cache_size=capacity_blocks)
    req = lcs.Request()
    req.obj_size = 1
    hits = objects = 0
    for ids in requests:
        run = 0
        for h in ids:
            req.obj_id = h
            if cache.find(req, False) is None:
                break
            run += 1
        hits += run
        for h in ids:
            req.obj_id = h
            objects += cache.get(req)
    return hits, objects


def write_oracle_general(requests, path: Path) -> int:
    """The accesses as libCacheSim's oracleGeneral binary records (uint32 time, uint64 id, uint32 size, int64
    next access = -1): returns their number."""
    import numpy as np

    ids = np.fromiter((h for r in requests for h in r), np.uint64)
    rec = np.zeros(len(ids), dtype=[("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
    rec["t"] = np.arange(len(ids)) // 1000
    rec["id"], rec["size"], rec["next"] = ids, 1, -1
    rec.tofile(path)
    return len(ids)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--capacities", default="1m,3m,10m")
    parser.add_argument("--block-tokens", type=int, default=512)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        import libcachesim as lcs
    except ImportError:
        print("libcachesim is not installed (pip install libcachesim; not a kvcalc dependency): nothing to compare")
        return 0
    if not args.trace.is_file():
        print(f"trace not found: {args.trace}; nothing to benchmark")
        return 0
    from kvcalc.out.units import parse_token_capacity
    from kvcalc.trace.analysis import analyze_trace
    from kvcalc.trace.reader import read_trace

    b = args.block_tokens
    requests = [[h & 0xFFFF_FFFF_FFFF_FFFF for h in r.hash_ids] for r in read_trace(args.trace, b)]
    caps = [parse_token_capacity(c, "--capacities") for c in args.capacities.split(",")]
    print(f"libcachesim {getattr(lcs, '__version__', '?')}; {args.trace.name}: {len(requests):,} requests; "
          f"medians of {args.runs} runs")
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        binary = Path(tmp) / "accesses.oracleGeneral.bin"
        n = write_oracle_general(requests, binary)
        print(f"{n:,} block accesses\n")
        print(f"{'policy':6s} {'capacity':>9s} {'blocks':>7s} {'kvcalc hits':>12s} {'lcs hits':>9s} {'equal':>5s} "
              f"{'lcs miss ratio':>14s} {'same':>4s} {'kvcalc M/s':>10s} {'lcs M/s':>8s} {'lcs / kvcalc':>12s}")
        for policy in POLICIES:
            for cap in caps:
                blocks = cap // b
                kv_times, lcs_times = [], []
                for _ in range(args.runs):
                    t0 = time.perf_counter()
                    result = analyze_trace(args.trace, [cap], b, policy).results[0]
                    kv_times.append(time.perf_counter() - t0)
                    cache = getattr(lcs, POLICIES[policy])(cache_size=blocks)
                    reader = lcs.TraceReader(str(binary), lcs.TraceType.ORACLE_GENERAL_TRACE)
                    t0 = time.perf_counter()
                    miss_ratio, _ = cache.process_trace(reader)
                    lcs_times.append(time.perf_counter() - t0)
                hits, objects = driven_hits(lcs, policy, blocks, requests)
                equal = hits == result.hit_blocks
                same = abs(miss_ratio - (1 - objects / n)) < 1e-9
                ok &= equal and same
                kv, lc = n / statistics.median(kv_times) / 1e6, n / statistics.median(lcs_times) / 1e6
                print(f"{policy:6s} {cap:>9,} {blocks:>7,} {result.hit_blocks:>12,} {hits:>9,} "
                      f"{'yes' if equal else 'NO':>5s} {miss_ratio:>14.4f} {'yes' if same else 'NO':>4s} "
                      f"{kv:>10.2f} {lc:>8.2f} {lc / kv:>11.1f}x")
    print("\nall hit counts equal" if ok else "\nMISMATCH: see the rows marked NO")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
