"""Block accesses per second, end to end, for one LRU capacity, and where the time goes (issue 22).

Run by hand (not by pytest), from anywhere:

    python bench/bench_throughput.py [--trace PATH] [--conversation PATH] [--copies 60] [--runs 3] [--capacity 3m,128m]
                                     [--large 600]

Traces: the Mooncake conversation trace (``../shared-extra/mooncake_conversation_trace.jsonl`` beside the
repository; kvcache-ai/Mooncake ``FAST25-release/traces/conversation_trace.jsonl``, Apache-2.0), skipped when
absent; and the Mooncake synthetic trace (``../shared/traces/``) copied ``--copies`` times with each copy's ids
replaced by random signed 64-bit integers (60 copies: 239,580 requests, 7,312,620 accesses; built as
``bench_trace.py --random-ids`` builds it). Nothing to measure (exit 0) when the synthetic trace is absent.

Per trace and capacity (``--capacity 3m,128m``: each one), in one run, medians of ``--runs`` paired rounds:

- whole processes (as a user runs them): ``kvcalc trace FILE --capacity C --format json`` as dispatched, and
  with each one-capacity engine forced (``lean``: the pure-Python replay; ``numpy``:
  :class:`kvcalc.trace.lru_one.OneLruEngine`; ``numba``: :class:`kvcalc.trace.jit_lru.JitLruEngine`, where numba
  is installed, its kernels loaded from the cache ``cache=True`` keeps (compiled by the first run, which is
  not timed apart: the median drops it); by a wrapper that sets the dispatch rules' constants of
  :mod:`kvcalc.trace.analysis`), against the 40-line OrderedDict reference of ``bench_trace.py`` (``json.loads``
  per line), CPU time (user + system) and peak RSS; accesses per CPU-second, the time and memory ratios
  (issue 22: <= 1.0x and <= 2x), results checked equal (the JSON of every kvcalc run byte for byte);
- in this process, the stages of the same pass, each run alone from the file (CPU time; a stage's cost is
  its run minus the run before it): cutting 64 KiB pieces of whole lines; decoding them with msgspec; the
  reader's checks (ids per request, blank lines, signs); the statistics; the replay (one LRU cache and the
  blocks seen), lean and numpy (each after the statistics); numba's own stages (its reader with the compiled
  parse, its statistics, its replay). Each stage's ns per access and the M accesses/s it alone would allow;
  the bare OrderedDict loop
  (no hit runs, no statistics) over decoded ids, to show what the cache's own operations cost;
- ``--large N``: the same whole-process rows (no numpy engine, one round) on N copies (600: 2,395,800 requests,
  73,126,200 accesses, ~1.8 GB of JSONL), where numba's fixed cost (~1 s: interpreter, CLI, numba's import,
  the kernels loaded) amortises;
- libCacheSim's LRU (C, ``process_trace`` over a binary oracleGeneral file of the same accesses; conversion not
  timed) where ``libcachesim`` is installed (not a kvcalc dependency).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections import OrderedDict
from itertools import chain
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))
SYNTHETIC = REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"
CONVERSATION = REPO.parent / "shared-extra" / "mooncake_conversation_trace.jsonl"
BLOCK_TOKENS = 512
jit = False  # numba installed (set by main): the numba rows and stages


def cpu() -> float:
    return time.process_time()


def numba_stages(path: Path, capacity_tokens: int) -> dict[str, float]:
    """CPU seconds of the compiled engine's cumulative stages (kernels compiled or loaded beforehand, not
    counted): the reader with its compiled parse; plus the statistics; plus the replay (the whole pass)."""
    from kvcalc.trace.jit_lru import BatchStats, JitLruEngine, JitTraceReader, jit_pass
    from kvcalc.trace.reader import read_trace

    jit_pass(JitTraceReader(read_trace(SYNTHETIC, BLOCK_TOKENS)), JitLruEngine([capacity_tokens], BLOCK_TOKENS),
             BLOCK_TOKENS)  # the kernels loaded
    out = {}
    t0 = cpu()
    for _ in JitTraceReader(read_trace(path, BLOCK_TOKENS)).signed_batches():
        pass
    out["numba read"] = cpu() - t0
    t0 = cpu()
    stats = BatchStats(BLOCK_TOKENS)
    for batch, _, _ in JitTraceReader(read_trace(path, BLOCK_TOKENS)).signed_batches():
        stats.add_batch(batch)
    out["numba statistics"] = cpu() - t0
    t0 = cpu()
    jit_pass(JitTraceReader(read_trace(path, BLOCK_TOKENS)), JitLruEngine([capacity_tokens], BLOCK_TOKENS),
             BLOCK_TOKENS)
    out["numba replay"] = cpu() - t0
    return out


def stage_runs(path: Path, capacity_tokens: int, numpy_too: bool = True) -> dict[str, float]:
    """CPU seconds of each cumulative stage run alone over ``path`` (see the module doc)."""
    from kvcalc.trace.engine import run_pass
    from kvcalc.trace.lean import LeanEngine
    from kvcalc.trace.reader import _decoder, _pieces, open_stream, read_trace
    from kvcalc.trace.stats import StatsAccumulator

    decoder, _ = _decoder()
    out = {}
    t0 = cpu()
    stream, raw = open_stream(path, watched=False)
    with raw, stream:
        for _ in _pieces(stream):
            pass
    out["cut"] = cpu() - t0
    t0 = cpu()
    stream, raw = open_stream(path, watched=False)
    with raw, stream:
        for piece in _pieces(stream):
            decoder.decode_lines(piece)
    out["decode"] = cpu() - t0
    t0 = cpu()
    for _ in read_trace(path, BLOCK_TOKENS).signed_batches():
        pass
    out["checks"] = cpu() - t0
    t0 = cpu()
    stats = StatsAccumulator(BLOCK_TOKENS)
    for records, _, _ in read_trace(path, BLOCK_TOKENS).signed_batches():
        stats.add_records(records)
    out["statistics"] = cpu() - t0
    t0 = cpu()
    run_pass(read_trace(path, BLOCK_TOKENS), LeanEngine([capacity_tokens], BLOCK_TOKENS, "lru", False), BLOCK_TOKENS)
    out["replay"] = cpu() - t0
    if jit:
        out.update(numba_stages(path, capacity_tokens))
    if not numpy_too:
        return out
    import numpy  # noqa: F401  (its import is not the engine's: paid by the whole-process runs)

    from kvcalc.trace.lru_one import OneLruEngine

    t0 = cpu()
    run_pass(read_trace(path, BLOCK_TOKENS), OneLruEngine([capacity_tokens], BLOCK_TOKENS, False), BLOCK_TOKENS)
    out["numpy replay"] = cpu() - t0
    return out


def bare_lru(path: Path, capacity_tokens: int) -> float:
    """CPU seconds of the plainest OrderedDict LRU loop over every access (ids decoded a piece at a time, the
    decoding not counted)."""
    from kvcalc.trace.reader import _decoder, _pieces, open_stream

    decoder, _ = _decoder()
    cache: OrderedDict = OrderedDict()
    room = capacity_tokens // BLOCK_TOKENS
    move, evict = cache.move_to_end, cache.popitem
    spent = 0.0
    stream, raw = open_stream(path, watched=False)
    with raw, stream:
        for piece in _pieces(stream):
            ids = [r.hash_ids for r in decoder.decode_lines(piece)]
            t0 = cpu()
            for h in chain.from_iterable(ids):
                if h in cache:
                    move(h)
                else:
                    cache[h] = None
                    if room:
                        room -= 1
                    else:
                        evict(False)
            spent += cpu() - t0
    return spent


def libcachesim_rate(path: Path, capacity_tokens: int, runs: int, tmp: Path) -> float | None:
    """libCacheSim's LRU over the same accesses [accesses/s], median of ``runs``; None when not installed."""
    try:
        import libcachesim as lcs
        import numpy as np
    except ImportError:
        return None
    from kvcalc.trace.reader import read_trace

    binary = tmp / f"{path.stem}.oracleGeneral.bin"
    n = 0
    with open(binary, "wb") as out:
        for records, _, _ in read_trace(path, BLOCK_TOKENS).signed_batches():
            ids = np.fromiter(chain.from_iterable(r.hash_ids for r in records), np.int64).view(np.uint64)
            rec = np.zeros(len(ids), dtype=[("t", "<u4"), ("id", "<u8"), ("size", "<u4"), ("next", "<i8")])
            rec["t"] = (n + np.arange(len(ids))) // 1000
            rec["id"], rec["size"], rec["next"] = ids, 1, -1
            rec.tofile(out)
            n += len(ids)
    times = []
    for _ in range(runs):
        cache = lcs.LRU(cache_size=capacity_tokens // BLOCK_TOKENS)
        reader = lcs.TraceReader(str(binary), lcs.TraceType.ORACLE_GENERAL_TRACE)
        t0 = time.perf_counter()
        cache.process_trace(reader)
        times.append(time.perf_counter() - t0)
    return n / statistics.median(times)


# Runs kvcalc's CLI with the one-capacity dispatch forced (``{size}`` and ``{blocks}``: the rule's constants).
FORCED = """\
import sys
import kvcalc.trace.analysis as analysis
analysis.NUMPY_ONE_LRU_BYTES, analysis.MIN_NUMPY_CAPACITY_BLOCKS = {size}, {blocks}
analysis.NUMBA_ONE_LRU_BYTES, analysis.MIN_NUMBA_CAPACITY_BLOCKS = {jit_size}, {jit_blocks}
from kvcalc.cli.app import main
sys.exit(main(sys.argv[1:]))
"""


def bench(label: str, path: Path, capacity: str, runs: int, tmp: Path, stages_too: bool = True,
          skip_numpy: bool = False) -> None:
    from bench_trace import REFERENCE, run

    from kvcalc.out.units import parse_token_capacity

    tokens = parse_token_capacity(capacity, "--capacity")
    reference = tmp / "reference_replay.py"
    reference.write_text(REFERENCE)
    forced = {"lean": tmp / "kvcalc_lean.py", "numpy": tmp / "kvcalc_numpy.py", "numba": tmp / "kvcalc_numba.py"}
    never = "float('inf')"
    forced["lean"].write_text(FORCED.format(size=never, blocks=never, jit_size=never, jit_blocks=never))
    forced["numpy"].write_text(FORCED.format(size=0, blocks=0, jit_size=never, jit_blocks=never))
    forced["numba"].write_text(FORCED.format(size=never, blocks=never, jit_size=0, jit_blocks=0))
    args = ["trace", str(path), "--capacity", capacity, "--format", "json"]
    names = ["kvcalc", "kvcalc lean", "kvcalc numpy", "kvcalc numba", "reference"]
    if not jit or skip_numpy:  # numba not installed (pip install '.[fast]'); or --skip-numpy on a huge trace
        names.remove("kvcalc numba" if not jit else "kvcalc numpy")
    whole: dict[str, list[float]] = {k: [] for k in names}
    peaks: dict[str, list[float]] = {k: [] for k in names}
    texts: dict[str, str] = {}
    stages: list[dict[str, float]] = []
    bare = []
    for _ in range(runs):
        for name in names:
            if name == "kvcalc":
                _, used, peak, texts[name] = run("module", "kvcalc", args)
            elif name == "reference":
                _, used, peak, texts[name] = run("path", str(reference), [str(path), str(tokens)])
            else:
                _, used, peak, texts[name] = run("path", str(forced[name.split()[1]]), args)
            whole[name].append(used)
            peaks[name].append(peak)
        if stages_too:
            stages.append(stage_runs(path, tokens, "kvcalc numpy" in names))
            bare.append(bare_lru(path, tokens))
    envelope = json.loads(texts["kvcalc"])
    result = envelope["results"][0]
    accesses = envelope["tables"]["trace"][0]["total_blocks"]
    same = (result["reused_tokens"], result["input_tokens"]) == tuple(map(int, texts["reference"].split()))
    alike = len({texts[k] for k in names if k != "reference"}) == 1
    med = {k: statistics.median(v) for k, v in whole.items()}
    print(f"\n== {label}: {path.name}: {envelope['tables']['trace'][0]['requests']:,} requests, {accesses:,} block "
          f"accesses; one LRU capacity {capacity} ({tokens // BLOCK_TOKENS:,} blocks); medians of {runs}")
    print("  whole process       cpu s   M accesses/cpu-s   peak RSS MB   / reference: cpu   memory")
    for name in names:
        time_ratio = statistics.median(a / b for a, b in zip(whole[name], whole["reference"]))
        mem_ratio = statistics.median(a / b for a, b in zip(peaks[name], peaks["reference"]))
        print(f"  {name:16s} {med[name]:8.3f} {accesses / med[name] / 1e6:12.2f} "
              f"{statistics.median(peaks[name]) / 1e6:16.1f} {time_ratio:14.2f}x {mem_ratio:7.2f}x")
    print(f"  issue 22: cpu <= 1.0x and memory <= 2x the reference; results identical to the reference: "
          f"{'yes' if same else 'NO'} ({100 * result['token_hit_rate']:.2f}% token hit); the {len(names) - 1} kvcalc JSON "
          f"outputs byte for byte: {'yes' if alike else 'NO'}")
    print(f"  target >= 5 M accesses/s: kvcalc end to end {accesses / med['kvcalc'] / 1e6:.2f} M/s per cpu-second")
    if not stages_too:
        return
    print("  stage (in process, each run alone)   ns/access   M/s alone   share of its pass")
    order = [k for k in ["cut", "decode", "checks", "statistics", "replay", "numpy replay", "numba read",
                         "numba statistics", "numba replay"] if k in stages[0]]
    labels = {"cut": "read + cut whole lines", "decode": "msgspec decode", "checks": "reader checks",
              "statistics": "statistics", "replay": "replay, lean (LRU + seen blocks)",
              "numpy replay": "replay, numpy (instead of lean)",
              "numba read": "numba: read + cut + compiled parse", "numba statistics": "numba: statistics",
              "numba replay": "numba: replay (LRU + seen blocks)"}
    base = {"numpy replay": "statistics", "numba read": None, "numba statistics": "numba read",
            "numba replay": "numba statistics"}
    total = {"lean": "replay", "numpy": "numpy replay", "numba": "numba replay"}
    cumulative = {k: statistics.median(s[k] for s in stages) for k in order}
    before = 0.0
    for k in order:
        start = base.get(k, "same")
        cost = max(cumulative[k] - (before if start == "same" else cumulative.get(start, 0.0)), 0.0)
        before = cumulative[k]
        rate = accesses / cost / 1e6 if cost else float("inf")
        whole = cumulative[total["numba" if k.startswith("numba") else "lean"]]
        print(f"  {labels[k]:36s} {1e9 * cost / accesses:9.0f} {rate:11.2f} {100 * cost / whole:6.1f}%")
    for name, key in total.items():
        if key in cumulative:
            print(f"  {'end to end in process, ' + name:36s} {1e9 * cumulative[key] / accesses:9.0f} "
                  f"{accesses / cumulative[key] / 1e6:11.2f}")
    b = statistics.median(bare)
    print(f"  {'bare OrderedDict loop (no runs)':36s} {1e9 * b / accesses:9.0f} {accesses / b / 1e6:11.2f}")
    rate = libcachesim_rate(path, tokens, runs, tmp)
    if rate is None:
        print("  libcachesim not installed (pip install libcachesim; not a kvcalc dependency): no C comparison")
    else:
        print(f"  libCacheSim LRU (C, process_trace, wall): {rate / 1e6:.2f} M/s = "
              f"{rate * med['kvcalc'] / accesses:.1f}x kvcalc end to end")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=SYNTHETIC, help="the Mooncake synthetic trace")
    parser.add_argument("--conversation", type=Path, default=CONVERSATION, help="the Mooncake conversation trace")
    parser.add_argument("--copies", type=int, default=60, help="copies of the synthetic trace (random 64-bit ids)")
    parser.add_argument("--runs", type=int, default=3, help="paired rounds (medians over them)")
    parser.add_argument("--capacity", default="3m,128m", help="the one capacity [tokens] of each bench, e.g. 3m")
    parser.add_argument("--large", type=int, default=0,
                        help="also a trace of this many copies (e.g. 600: 73M accesses), whole processes only, "
                             "without the numpy engine (its fixed cost is not the question there)")
    args = parser.parse_args(argv)
    global jit
    from importlib.util import find_spec

    jit = find_spec("numba") is not None
    if not args.trace.is_file():
        print(f"trace not found: {args.trace}; nothing to benchmark")
        return 0
    from bench_trace import build_scaled_trace

    os.environ["PYTHONPATH"] = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")  # children: this kvcalc
    print(f"python {sys.version.split()[0]}; CPU time (user + system), medians of {args.runs} paired rounds")
    with tempfile.TemporaryDirectory() as tmp:
        capacities = args.capacity.split(",")
        for capacity in capacities:
            if args.conversation.is_file():
                bench("conversation", args.conversation, capacity, args.runs, Path(tmp))
            else:
                print(f"\n(conversation trace not found: {args.conversation}; skipped)")
        scaled = Path(tmp) / f"synthetic_x{args.copies}_random_ids.jsonl"
        build_scaled_trace(args.trace, args.copies, scaled, random_ids=True)
        for capacity in capacities:
            bench(f"{args.copies}x random 64-bit ids", scaled, capacity, args.runs, Path(tmp))
        if args.large:
            scaled.unlink()
            large = Path(tmp) / f"synthetic_x{args.large}_random_ids.jsonl"
            build_scaled_trace(args.trace, args.large, large, random_ids=True)
            for capacity in capacities:
                bench(f"{args.large}x random 64-bit ids", large, capacity, 1, Path(tmp), stages_too=False,
                      skip_numpy=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
