"""The sampled LRU curve's error against the exact one (issue 22: within 0.5 pp at a 1% sample), side by side.

Run by hand (not by pytest), from anywhere:

    python bench/bench_sampled.py [TRACE ...] [--rates 0.1,0.01,0.001] [--salts 5] [--points 20] [--stratified-only]
    python bench/bench_sampled.py [TRACE ...] --cost [--rates 0.01]

Default traces: ../shared/traces/mooncake_synthetic_trace.jsonl and ../shared-extra/mooncake_conversation_trace.jsonl
relative to the repository root (the Mooncake FAST'25 release's synthetic and conversation traces,
kvcache-ai/Mooncake FAST25-release/traces/, Apache-2.0); a missing one is reported and skipped. For each trace:
the exact curve (the stack-depth engine), then at each rate and hash salt, in the same pass, one SHARDS-sampled
engine, read plain (sampled hits / sampled references) and adjusted (SHARDS_adj), and one stratified engine
(kvcalc.trace.stratified), read as it is and anchored to the exact infinite cache (what ``kvcalc trace
--sample-rate`` shows: the infinite cache of its own pass); the error is |estimate - exact| of the token hit
rate in percentage points over the default curve grid (``--points`` capacities, geometric up to the working
set). Prints, per rate and reading, the ids the sample holds (median salt), the worst and mean error over the
grid, worst and median over the first 5 salts and over all of them (``--salts 20``: the 8 fixed salts, then
salts drawn by SplitMix64, the same every run), so a change is judged on more salts than it was tuned on.
``--stratified-only`` skips the plain and SHARDS_adj readings (half the time). ``--cost``: each engine alone
(the exact one, then the stratified one per rate; records in memory, the faster of two runs) with its seconds
and tracemalloc's peak [MB], and the ids and marks the sample holds.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kvcalc.trace.engine import Tee, run_pass  # noqa: E402
from kvcalc.trace.lru_curve import LruStackEngine  # noqa: E402
from kvcalc.trace.reader import read_trace  # noqa: E402
from kvcalc.trace.replicas import splitmix64  # noqa: E402
from kvcalc.trace.result import capacity_grid  # noqa: E402
from kvcalc.trace.sampled import SampledLruEngine  # noqa: E402
from kvcalc.trace.stratified import StratifiedLruEngine  # noqa: E402

DEFAULT_TRACES = (REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl",
                  REPO.parent / "shared-extra" / "mooncake_conversation_trace.jsonl")
SALTS = (0, 0x5EED, 0xC0FFEE, 0xBADC0DE, 0xFACADE, 0x22, 0xDEC2026, 0xABCDEF)
TUNED = 5  # the salts the estimator was tuned on: reported apart from all of them


def salts_for(count: int) -> list[int]:
    """The first ``count`` salts: SALTS, then SplitMix64 of 0x22B0, 0x22B1, ... (32 bits), the same every run."""
    return list(SALTS[:count]) + [splitmix64(0x22B0 + i) & 0xFFFFFFFF for i in range(max(0, count - len(SALTS)))]


def errors_pp(profile, exact, grid) -> list[float]:
    return [100 * abs(profile.at(c).token_hit_rate - exact.at(c).token_hit_rate) for c in grid]


def bench(path: Path, rates: list[float], salts: int, points: int, block_tokens: int,
          stratified_only: bool = False) -> None:
    t0 = time.perf_counter()
    kinds = (("stratified", StratifiedLruEngine),) if stratified_only else \
        (("shards", SampledLruEngine), ("stratified", StratifiedLruEngine))
    drawn = salts_for(salts)
    engines = {(kind, r, s): make(r, block_tokens, salt=s) for r in rates for s in drawn for kind, make in kinds}
    exact_engine = LruStackEngine(block_tokens)
    _, (exact, *sampled) = run_pass(read_trace(path, block_tokens), Tee(exact_engine, *engines.values()),
                                    block_tokens)
    grid = capacity_grid(exact.distinct_blocks * block_tokens, points, block_tokens)
    tuned = min(TUNED, salts)
    print(f"\n== {path.name}: {exact.requests:,} requests, {exact.total_blocks:,} block accesses, "
          f"{exact.distinct_blocks:,} distinct blocks; {len(grid)}-point grid; {salts} salts "
          f"({time.perf_counter() - t0:.1f} s)")
    print(f"  {'rate':>6s} {'reading':20s} {'ids held':>9s} {'marks':>7s} {'worst / median pp, ' + str(tuned):>22s} "
          f"{'worst / median pp, ' + str(salts):>22s} {'mean pp (median)':>17s}  worst at [blocks]")
    answers = dict(zip(engines, sampled))
    infinite = exact.at(None)
    for rate in rates:
        strat = [answers[("stratified", rate, s)] for s in drawn]
        readings = [("stratified", strat), ("stratified, anchored", [p.anchored(infinite) for p in strat])]
        if not stratified_only:
            shards = [answers[("shards", rate, s)] for s in drawn]
            readings[:0] = [("plain", [dataclasses.replace(p, adjust=False) for p in shards]),
                            ("SHARDS_adj", [dataclasses.replace(p, adjust=True) for p in shards])]
        for reading, profiles in readings:
            plain = reading in ("plain", "SHARDS_adj")
            ids = statistics.median(p.sampled.distinct_blocks if plain else p.head_ids + p.sampled_tail_ids
                                    for p in profiles)
            marks = 0 if plain else statistics.median(p.marks for p in profiles)
            errs = [errors_pp(p, exact, grid) for p in profiles]
            worst = [max(e) for e in errs]
            mean = [statistics.fmean(e) for e in errs]
            at = grid[max(range(len(grid)), key=lambda i: max(e[i] for e in errs))] // block_tokens
            print(f"  {rate:6g} {reading:20s} {ids:9,.0f} {marks:7,.0f} "
                  f"{max(worst[:tuned]):11.2f} / {statistics.median(worst[:tuned]):.2f}      "
                  f"{max(worst):11.2f} / {statistics.median(worst):.2f}      {statistics.median(mean):17.2f}  {at:,}")


def cost(path: Path, rates: list[float], block_tokens: int) -> None:
    """Each engine alone over the records in memory: the faster of two runs [s], then tracemalloc's peak."""
    batches = [list(batch) for batch, _, _ in read_trace(path, block_tokens).signed_batches()]
    print(f"\n== {path.name}: cost of one engine alone ({sum(map(len, batches)):,} requests in memory, "
          f"fed in the reader's {len(batches)} batches)")
    makers = [("exact (stack depth)", lambda: LruStackEngine(block_tokens))]
    makers += [(f"stratified {r:g}", lambda r=r: StratifiedLruEngine(r, block_tokens)) for r in rates]
    makers += [(f"plain SHARDS {r:g}", lambda r=r: SampledLruEngine(r, block_tokens)) for r in rates]
    for name, make in makers:
        seconds = []
        for _ in range(2):
            t = time.perf_counter()
            engine = make()
            for batch in batches:
                engine.add_records(batch)
            engine.finish()
            seconds.append(time.perf_counter() - t)
        tracemalloc.start()
        engine = make()
        for batch in batches:
            engine.add_records(batch)
        answers = engine.finish()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        held = ""
        if isinstance(engine, StratifiedLruEngine):
            held = (f"  head {answers.head_ids:,} + sampled tail {answers.sampled_tail_ids:,} ids, "
                    f"{answers.marks:,} marks")
        print(f"  {name:22s} {min(seconds):6.2f} s  {peak / 1e6:6.1f} MB{held}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path, default=list(DEFAULT_TRACES))
    parser.add_argument("--rates", default="0.1,0.01,0.001")
    parser.add_argument("--salts", type=int, default=5, help="hash salts per rate")
    parser.add_argument("--stratified-only", action="store_true", help="skip the plain and SHARDS_adj readings")
    parser.add_argument("--cost", action="store_true", help="time and memory of each engine alone")
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--block-tokens", type=int, default=512)
    args = parser.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    for path in args.traces:
        if not path.is_file():
            print(f"trace not found: {path}; skipped")
            continue
        if args.cost:
            cost(path, rates, args.block_tokens)
        else:
            bench(path, rates, max(1, args.salts), args.points, args.block_tokens, args.stratified_only)
    return 0


if __name__ == "__main__":
    sys.exit(main())
