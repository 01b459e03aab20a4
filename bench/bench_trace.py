"""Benchmark trace replay against a 40-line OrderedDict replay, whole processes side by side (issue 14).

Run by hand (not by pytest), from anywhere:

    python bench/bench_trace.py [--trace PATH] [--copies 20] [--runs 7] [--capacity 3m] [--versus DIR]

The default trace is ../shared/traces/mooncake_synthetic_trace.jsonl relative to the repository root; when it
is absent the script says so and exits 0. The script builds a trace ``--copies`` times larger in a temporary
directory (copy k's hash ids are offset by k x (largest id + 1), so copies share no block, and its timestamps
follow the previous copy's).

Each round runs every command once, in a fresh process, one after the other (paired: drift hits all alike);
a command's figure is its median over ``--runs`` rounds, and a ratio is the median of the per-round ratios.
Time is wall-clock and CPU (the child's user + system time, from ``wait4``): on a machine shared with other
jobs the wall-clock ratios move with the load, the CPU ratios much less.
Peak memory is the child's own peak resident set (VmHWM, read by the child as it ends, see
:data:`WRAPPER`; whole processes, interpreter and imports included). Commands:

- ``reference``: :data:`REFERENCE`, a 40-line script (json.loads + OrderedDict LRU) at the single capacity;
- ``single``: ``kvcalc trace FILE --capacity C --format json`` (the lean direct replay, statistics too);
- ``curve``: ``kvcalc trace FILE --curve --format json`` (20 capacities up to the working set, one pass);
- ``infinite``: ``kvcalc trace FILE --capacity inf --format json``;
- ``versus`` (with ``--versus DIR``): ``single`` run by the kvcalc of another checkout DIR (e.g. ``git archive
  main | tar -x -C DIR``), in the same rounds: a before/after of a change, side by side.

Also checked: the reference and ``single`` reuse the same tokens (results identical), and on the 1x trace the
README's figures (31.5% at 3m, 57.7% at 10m, 65.1% infinite). JSON output is timed so that table rendering,
which is not the trace engine, does not blur the comparison.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = REPO.parent / "shared" / "traces" / "mooncake_synthetic_trace.jsonl"

# The reference: the simplest correct LRU replay of a Mooncake trace at one capacity (the semantics of
# kvcalc.trace.replay). Prints "reused_tokens input_tokens".
REFERENCE = '''\
import json
import sys
from collections import OrderedDict


def replay(path, capacity_tokens, block_tokens=512):
    capacity_blocks = capacity_tokens // block_tokens
    cache = OrderedDict()
    reused = input_tokens = 0
    with open(path, "rb") as handle:
        for line in handle:
            if not line.strip():
                continue
            request = json.loads(line)
            ids = request["hash_ids"]
            length = request["input_length"]
            hit = 0
            for h in ids:
                if h not in cache:
                    break
                hit += 1
            for h in ids:
                if h in cache:
                    cache.move_to_end(h)
                else:
                    cache[h] = None
                    if len(cache) > capacity_blocks:
                        cache.popitem(last=False)
            input_tokens += length
            reused += min(hit * block_tokens, length)
    return reused, input_tokens


if __name__ == "__main__":
    print(*replay(sys.argv[1], int(sys.argv[2])))
'''


def build_scaled_trace(source: Path, copies: int, target: Path, random_ids: bool = False) -> None:
    """Write ``copies`` back-to-back copies of ``source`` to ``target`` (ids and timestamps offset); with
    ``random_ids`` each copy's id k becomes a random signed 64-bit integer instead (the same for every use of k
    in that copy: the prefix structure is kept, the id range is the whole of int64)."""
    import random

    rng = random.Random(22)
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
            names: dict[int, int] = {}  # this copy's random id of each source id
            with open(source, "rb") as handle:
                for line in handle:
                    if not line.strip():
                        continue
                    obj = json.loads(line)
                    obj["timestamp"] = obj["timestamp"] + copy * ms_step
                    if random_ids:
                        obj["hash_ids"] = [names.setdefault(h, rng.getrandbits(64) - 2**63) for h in obj["hash_ids"]]
                    else:
                        obj["hash_ids"] = [h + copy * id_step for h in obj["hash_ids"]]
                    out.write(json.dumps(obj) + "\n")


# Runs a script or module as __main__, then reports the process's own peak RSS on stderr: VmHWM (Linux) starts
# afresh at exec, where ru_maxrss also counts the parent's resident set copied by fork (the bench's own ~16 MB).
WRAPPER = """\
import runpy, sys
kind, target, *args = sys.argv[1:]
sys.argv = [target, *args]
code = 0
try:
    if kind == "module":
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        runpy.run_path(target, run_name="__main__")
except SystemExit as exc:
    code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
sys.stdout.flush()
peak = 0
try:
    with open("/proc/self/status") as status:
        peak = next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmHWM:"))
except (OSError, StopIteration):
    pass
sys.stderr.write(f"\\nPEAK_RSS {peak}\\n")
sys.exit(code)
"""


def run(kind: str, target: str, args: list[str], path: str | None = None) -> tuple[float, float, int, str]:
    """Run a script (kind "path") or module ("module") in a fresh process (its kvcalc from ``path`` when given)
    -> (wall [s], CPU [s], peak RSS [B], stdout)."""
    argv = [sys.executable, "-c", WRAPPER, kind, target, *args]
    env = None if path is None else {**os.environ, "PYTHONPATH": path}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        # with ``path``, run from there too: ``python -c`` puts the working directory first on sys.path, so a
        # kvcalc checkout as the working directory would shadow PYTHONPATH (a --versus run measuring itself)
        proc = subprocess.Popen(argv, stdout=out, stderr=err, env=env, cwd=path)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(), err.read().decode()
    if proc.returncode != 0:
        raise SystemExit(f"{target} {' '.join(args)} failed ({proc.returncode}): {errors}")
    peak = int(errors.rsplit("PEAK_RSS", 1)[1])
    if not peak:  # no /proc: ru_maxrss (KiB on Linux, bytes on macOS)
        peak = usage.ru_maxrss if sys.platform == "darwin" else usage.ru_maxrss * 1024
    return elapsed, usage.ru_utime + usage.ru_stime, peak, text


def commands(trace: Path, capacity: str, reference: Path, versus: str | None = None) -> dict[str, tuple]:
    kvcalc = ["trace", str(trace)]
    cmds = {
        "reference": ("path", str(reference), [str(trace), str(_tokens(capacity))]),
        "single": ("module", "kvcalc", kvcalc + ["--capacity", capacity, "--format", "json"]),
        "curve": ("module", "kvcalc", kvcalc + ["--curve", "--format", "json"]),
        "infinite": ("module", "kvcalc", kvcalc + ["--capacity", "inf", "--format", "json"]),
    }
    if versus:
        cmds["versus"] = (*cmds["single"], versus)
    return cmds


def _tokens(capacity: str) -> int:
    from kvcalc.out.units import parse_token_capacity

    return parse_token_capacity(capacity, "--capacity")


def bench(label: str, trace: Path, capacity: str, runs: int, reference: Path, versus: str | None = None) -> dict:
    """Paired rounds of every command on one trace; prints and returns medians and ratios."""
    cmds = commands(trace, capacity, reference, versus)
    times: dict[str, list[float]] = {k: [] for k in cmds}
    cpus: dict[str, list[float]] = {k: [] for k in cmds}
    peaks: dict[str, list[int]] = {k: [] for k in cmds}
    outputs: dict[str, str] = {}
    for _ in range(runs):
        for name, (kind, target, args, *path) in cmds.items():
            elapsed, cpu, peak, text = run(kind, target, args, *path)
            times[name].append(elapsed)
            cpus[name].append(cpu)
            peaks[name].append(peak)
            outputs[name] = text
    ref_reused, ref_input = map(int, outputs["reference"].split())
    single = json.loads(outputs["single"])["results"][0]
    curve = json.loads(outputs["curve"])
    infinite = json.loads(outputs["infinite"])["results"][0]
    same = (single["reused_tokens"], single["input_tokens"]) == (ref_reused, ref_input)
    stats = curve["tables"]["trace"][0]
    print(f"\n== {label}: {trace.name}: {stats['requests']:,} requests, {stats['total_blocks']:,} block accesses, "
          f"{stats['distinct_blocks']:,} distinct blocks; single capacity {capacity}; curve of "
          f"{len(curve['results'])} capacities")
    print(f"  {'command':10s} {'median s':>9s} {'cpu s':>7s} {'peak RSS MB':>12s}   runs [s]")
    for name in cmds:
        print(f"  {name:10s} {statistics.median(times[name]):9.3f} {statistics.median(cpus[name]):7.3f} "
              f"{statistics.median(peaks[name]) / 1e6:12.1f}   " + ", ".join(f"{t:.2f}" for t in times[name]))

    def ratio(a: str, b: str, what: dict) -> float:
        return statistics.median(x / y for x, y in zip(what[a], what[b]))

    r = {"single_time": ratio("single", "reference", times), "single_cpu": ratio("single", "reference", cpus),
         "single_memory": ratio("single", "reference", peaks), "curve_time": ratio("curve", "single", times),
         "curve_cpu": ratio("curve", "single", cpus), "infinite_time": ratio("infinite", "reference", times),
         "infinite_memory": ratio("infinite", "reference", peaks)}
    print(f"  single / reference: time {r['single_time']:.2f}x (cpu {r['single_cpu']:.2f}x; target <= 1.0x), peak "
          f"memory {r['single_memory']:.2f}x (target <= 2x)")
    blocks = stats["total_blocks"]
    print(f"  block accesses per second, end to end (wall; cpu): single {blocks / statistics.median(times['single']) / 1e6:.2f}"
          f" M ({blocks / statistics.median(cpus['single']) / 1e6:.2f} M; target >= 5 M), reference "
          f"{blocks / statistics.median(times['reference']) / 1e6:.2f} M ({blocks / statistics.median(cpus['reference']) / 1e6:.2f} M)")
    r["single_accesses_per_s"] = blocks / statistics.median(times["single"])
    print(f"  curve ({len(curve['results'])} capacities) / single: time {r['curve_time']:.2f}x (cpu "
          f"{r['curve_cpu']:.2f}x; target <= 1.1x)")
    print(f"  infinite / reference: time {r['infinite_time']:.2f}x, peak memory {r['infinite_memory']:.2f}x")
    if versus:
        r |= {"versus_time": ratio("single", "versus", times), "versus_cpu": ratio("single", "versus", cpus)}
        print(f"  single / versus ({versus}): time {r['versus_time']:.3f}x, cpu {r['versus_cpu']:.3f}x")
    print(f"  results identical to the reference: {'yes' if same else 'NO'} (reused {single['reused_tokens']:,} of "
          f"{single['input_tokens']:,} input tokens = {100 * single['token_hit_rate']:.1f}%; infinite "
          f"{100 * infinite['token_hit_rate']:.1f}%)")
    return r | {"identical": same}


def readme_figures(trace: Path) -> None:
    """The README's Mooncake figures, from the CLI."""
    _, _, _, text = run("module", "kvcalc", ["trace", str(trace), "--capacity", "3m,10m,inf", "--format", "json"])
    rates = [round(100 * r["token_hit_rate"], 1) for r in json.loads(text)["results"]]
    ok = rates == [31.5, 57.7, 65.1]
    print(f"  README figures 3m / 10m / inf: {rates[0]}% / {rates[1]}% / {rates[2]}% "
          f"({'as the README says' if ok else 'DIFFERENT from the README: 31.5% / 57.7% / 65.1%'})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    parser.add_argument("--copies", type=int, default=20, help="size of the scaled trace, in copies")
    parser.add_argument("--runs", type=int, default=7, help="paired rounds (medians over them)")
    parser.add_argument("--capacity", default="3m", help="the single capacity [tokens], e.g. 3m")
    parser.add_argument("--versus", help="another checkout whose kvcalc also runs `single`, in the same rounds")
    parser.add_argument("--random-ids", action="store_true", help="the scaled trace's ids: random signed 64-bit "
                        "integers (issue 22's scale check: 60 copies = 239,580 requests)")
    args = parser.parse_args(argv)
    if not args.trace.is_file():
        print(f"trace not found: {args.trace}; nothing to benchmark")
        return 0
    os.environ["PYTHONPATH"] = str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")
    print(f"python {sys.version.split()[0]}; whole processes, wall-clock medians of {args.runs} paired rounds")
    with tempfile.TemporaryDirectory() as tmp:
        reference = Path(tmp) / "reference_replay.py"
        reference.write_text(REFERENCE)
        bench("1x", args.trace, args.capacity, args.runs, reference, args.versus)
        readme_figures(args.trace)
        scaled = Path(tmp) / f"trace_x{args.copies}.jsonl"
        t0 = time.perf_counter()
        build_scaled_trace(args.trace, args.copies, scaled, args.random_ids)
        print(f"\n(built the {args.copies}x trace{' with random 64-bit ids' if args.random_ids else ''} in {time.perf_counter() - t0:.1f} s, "
              f"{scaled.stat().st_size / 1e6:.0f} MB)")
        bench(f"{args.copies}x", scaled, args.capacity, args.runs, reference, args.versus)
    return 0


if __name__ == "__main__":
    sys.exit(main())
