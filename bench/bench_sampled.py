"""The sampled LRU curve's error against the exact one (issue 22: within 0.5 pp at a 1% sample), side by side.

Run by hand (not by pytest), from anywhere:

    python bench/bench_sampled.py [TRACE ...] [--rates 0.1,0.01,0.001] [--salts 5] [--points 20]

Default traces: ../shared/traces/mooncake_synthetic_trace.jsonl and ../shared-extra/mooncake_conversation_trace.jsonl
relative to the repository root (the Mooncake FAST'25 release's synthetic and conversation traces,
kvcache-ai/Mooncake FAST25-release/traces/, Apache-2.0); a missing one is reported and skipped. For each trace:
the exact curve (the stack-depth engine), then at each rate and hash salt, in the same pass, one SHARDS-sampled
engine, read plain (sampled hits / sampled references) and adjusted (SHARDS_adj), and one stratified engine
(kvcalc.trace.stratified), read as it is and anchored to the exact infinite cache (what ``kvcalc trace
--sample-rate`` shows: the infinite cache of its own pass); the error is |estimate - exact| of the token hit
rate in percentage points over the default curve grid (``--points`` capacities, geometric up to the working
set). Prints, per rate and reading, the ids the sample holds (median salt), the worst and mean error over the
grid, worst and median over salts.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kvcalc.trace.engine import Tee, run_pass  # noqa: E402
from kvcalc.trace.lru_curve import LruStackEngine  # noqa: E402
from kvcalc.trace.reader import read_trace  # noqa: E402
from kvcalc.trace.result import capacity_grid  # noqa: E402
from kvcalc.trace.sampled import SampledLruEngine  # noqa: E402
from kvcalc.trace.stratified import StratifiedLruEngine  # noqa: E402

DEFAULT_TRACES = (REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl",
                  REPO.parent / "shared-extra" / "mooncake_conversation_trace.jsonl")
SALTS = (0, 0x5EED, 0xC0FFEE, 0xBADC0DE, 0xFACADE, 0x22, 0xDEC2026, 0xABCDEF)


def errors_pp(profile, exact, grid) -> list[float]:
    return [100 * abs(profile.at(c).token_hit_rate - exact.at(c).token_hit_rate) for c in grid]


def bench(path: Path, rates: list[float], salts: int, points: int, block_tokens: int) -> None:
    t0 = time.perf_counter()
    engines = {(kind, r, s): make(r, block_tokens, salt=s) for r in rates for s in SALTS[:salts]
               for kind, make in (("shards", SampledLruEngine), ("stratified", StratifiedLruEngine))}
    exact_engine = LruStackEngine(block_tokens)
    _, (exact, *sampled) = run_pass(read_trace(path, block_tokens), Tee(exact_engine, *engines.values()),
                                    block_tokens)
    grid = capacity_grid(exact.distinct_blocks * block_tokens, points, block_tokens)
    print(f"\n== {path.name}: {exact.requests:,} requests, {exact.total_blocks:,} block accesses, "
          f"{exact.distinct_blocks:,} distinct blocks; {len(grid)}-point grid; {salts} salts "
          f"({time.perf_counter() - t0:.1f} s)")
    print(f"  {'rate':>6s} {'reading':20s} {'ids held':>9s} {'max pp (worst salt)':>20s} "
          f"{'max pp (median salt)':>21s} {'mean pp (median)':>17s}")
    answers = dict(zip(engines, sampled))
    infinite = exact.at(None)
    for rate in rates:
        shards = [answers[("shards", rate, s)] for s in SALTS[:salts]]
        strat = [answers[("stratified", rate, s)] for s in SALTS[:salts]]
        readings = (("plain", [dataclasses.replace(p, adjust=False) for p in shards]),
                    ("SHARDS_adj", [dataclasses.replace(p, adjust=True) for p in shards]),
                    ("stratified", strat),
                    ("stratified, anchored", [p.anchored(infinite) for p in strat]))
        for reading, profiles in readings:
            ids = statistics.median(p.sampled.distinct_blocks if reading in ("plain", "SHARDS_adj")
                                    else p.head_ids + p.sampled_tail_ids for p in profiles)
            errs = [errors_pp(p, exact, grid) for p in profiles]
            worst = [max(e) for e in errs]
            mean = [statistics.fmean(e) for e in errs]
            print(f"  {rate:6g} {reading:20s} {ids:9,.0f} {max(worst):20.2f} {statistics.median(worst):21.2f} "
                  f"{statistics.median(mean):17.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path, default=list(DEFAULT_TRACES))
    parser.add_argument("--rates", default="0.1,0.01,0.001")
    parser.add_argument("--salts", type=int, default=5, help=f"hash salts per rate (at most {len(SALTS)})")
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--block-tokens", type=int, default=512)
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    for path in args.traces:
        if not path.is_file():
            print(f"trace not found: {path}; skipped")
            continue
        bench(path, rates, min(args.salts, len(SALTS)), args.points, args.block_tokens)
    return 0


if __name__ == "__main__":
    sys.exit(main())
