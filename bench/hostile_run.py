"""Hostile-input run (issue 21, Must hold): >= 10,000 command lines over every command, each in its own process.

    nice python bench/hostile_run.py [--per-kind 800] [--seed 21] [--timeout 20] [--show 10]

The command lines come from the suite's fuzz generators (tests/test_fuzz_cli.py: one per command, bench's from
tests/test_fuzz_bench.py, plan's from tests/test_fuzz_plan.py, plus the config.json-field, sweep-grid and engine/tier kinds), with the same hostile files and hostile config.json folders,
seeded. Each runs in a child forked from a parent that has already imported kvcalc (a fresh interpreter per case
would spend ~0.5 s starting up; a fork costs milliseconds and isolates memory, crashes and hangs just the same),
stdout and stderr captured, killed after --timeout seconds, limited to 4 GiB of address space (a runaway
allocation shows as an internal error, not a dead machine). Reported: exit codes, internal errors (exit 3),
timeouts, non-finite numbers printed (inf/nan in text, Infinity/NaN in JSON), tracebacks, raw library warnings,
error lines that are not one line, and the peak RSS of refused (exit 2) cases (ru_maxrss of each child: it
includes the parent's pages the child shares, printed as the baseline).
Must hold: 0 internal errors, 0 timeouts, 0 non-finite, refused cases under 1 GiB.
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import resource
import selectors
import signal
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # this checkout's kvcalc, and the suite's generators

ADDRESS_LIMIT = 4 * 2**30
OUTPUT_CAP = 64 * 2**20  # bytes of a child's stdout kept (the rest is read and dropped)


class Tmp:
    """What the generators' file fixture needs of pytest's tmp_path_factory."""

    def mktemp(self, name: str) -> Path:
        return Path(tempfile.mkdtemp(prefix=f"kvcalc-hostile-{name}-"))


class Run:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err


def run_child(args: list[str], columns: str, timeout: float) -> tuple[Run | None, int]:
    """Run ``kvcalc ARGS`` in a forked child -> (Run, or None on timeout; the child's peak RSS [kB])."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: kvcalc's own entry point, as `python -m kvcalc ARGS` runs it
        code = 3
        try:
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            for fd in (out_r, err_r, out_w, err_w, devnull):
                os.close(fd)
            resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_LIMIT, ADDRESS_LIMIT))
            os.environ["COLUMNS"] = columns
            from kvcalc.cli.app import main

            try:
                main(list(args))
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001 -- whatever escapes main is counted as an internal error
            code = 4
        finally:
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: BLE001
                pass
            os._exit(code)
    os.close(out_w)
    os.close(err_w)
    sel = selectors.DefaultSelector()
    bufs = {out_r: bytearray(), err_r: bytearray()}
    for fd in bufs:
        sel.register(fd, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    timed_out = False
    while sel.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            os.kill(pid, signal.SIGKILL)
            break
        for key, _ in sel.select(min(left, 1.0)):
            chunk = os.read(key.fd, 1 << 16)
            if not chunk:
                sel.unregister(key.fd)
            elif len(bufs[key.fd]) < OUTPUT_CAP:
                bufs[key.fd] += chunk
    for fd in bufs:
        os.close(fd)
    _, status, usage = os.wait4(pid, 0)
    if timed_out:
        return None, usage.ru_maxrss
    code = os.waitstatus_to_exitcode(status)
    return Run(code, bufs[out_r].decode("utf-8", "replace"), bufs[err_r].decode("utf-8", "replace")), usage.ru_maxrss


def warm_up() -> None:
    """Import what the commands use (numpy, pydantic, rich, every command's modules) once, in the parent, by
    running each command in-process with its output dropped: every child then starts warm."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    import test_fuzz_cli as fz
    from kvcalc.cli.app import main

    trace = Tmp().mktemp("warm") / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 16, "output_length": 1, "hash_ids": [0]}\n')
    for args in (["kv", "llama-3-8b", "--format", "json"], ["capacity"], ["capacity", "--engine", "vllm"],
                 ["blocks"], ["transfer"], ["cost"], ["compare", "--format", "csv"], ["presets", "list"],
                 ["trace", str(trace), "--block-tokens", "16", "--tiers", "hbm,dram", "--model", "llama-3-8b"],
                 ["sweep", "kv", "--vary", "context=1k,4k", "--format", "markdown"],
                 ["import", str(fz.CONFIGS / "qwen3-32b")], ["presets", "validate", "nosuch.toml"]):
        with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
            try:
                main(args)
            except SystemExit:
                pass


def command_lines(per_kind: int, seed: int):
    """(kind, args, COLUMNS) for every generator of the suite, ``per_kind`` each."""
    import test_fuzz_bench as fb
    import test_fuzz_cli as fz
    import test_fuzz_plan as fp

    files = fz.files.__wrapped__(Tmp())
    configs = fz.hostile_config_files(Tmp().mktemp("configs"), 400, seed)
    kinds = {**fz.GENERATORS, "bench": fb.gen_bench, "plan": fp.gen_plan, **fz.HOSTILE_GENERATORS}
    for kind, gen in kinds.items():
        rng = random.Random(f"{seed}-{kind}")
        for _ in range(per_kind):
            g = fz.Gen(rng, files, hostile=rng.choice([0.0, 0.1, 0.3, 0.6]))
            g.configs = configs
            gen(g)
            columns = g.pick(["200", "120", "80"], ["40", "1", "0", "", "x", "9" * 5000])
            yield kind, g.args, columns


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-kind", type=int, default=800,
                    help="cases per generator (15: every command, bench, plan, and the config-field, sweep-grid and "
                         "engine/tier kinds)")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds before a case counts as a hang")
    ap.add_argument("--show", type=int, default=10, help="failing command lines printed per problem")
    opts = ap.parse_args()

    import test_fuzz_cli as fz

    warm_up()

    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    codes: collections.Counter = collections.Counter()
    per_kind: dict = collections.defaultdict(collections.Counter)
    problems: dict = collections.defaultdict(list)
    refused_peak_kb, refused_peak_case = 0, None
    slowest = (0.0, None)
    t_start = time.monotonic()
    n = 0
    for kind, args, columns in command_lines(opts.per_kind, opts.seed):
        n += 1
        t0 = time.monotonic()
        r, rss_kb = run_child(args, columns, opts.timeout)
        dt = time.monotonic() - t0
        if dt > slowest[0]:
            slowest = (dt, args)
        line = f"[{kind}] kvcalc {' '.join(repr(a)[:70] for a in args)}"
        if r is None:
            codes["timeout"] += 1
            per_kind[kind]["timeout"] += 1
            problems["timeout"].append(line)
            continue
        codes[r.code] += 1
        per_kind[kind][r.code] += 1
        if r.code == 2 and rss_kb > refused_peak_kb:
            refused_peak_kb, refused_peak_case = rss_kb, line
        for p in fz.check_run(args, r):
            label = ("internal error" if p.startswith("exit 3") or p.startswith("exit 4") else
                     "non-finite" if p.startswith(("inf/nan", "bad JSON")) else p.split(":")[0])
            problems[label].append(f"{line}\n      {p}; err: {r.err.strip()[:200]}")
        if "Warning" in r.err or "warnings.warn" in r.err:
            problems["raw warning"].append(f"{line}\n      err: {r.err.strip()[:200]}")
        if n % 500 == 0:
            print(f"... {n} cases, {time.monotonic() - t_start:.0f} s", file=sys.stderr, flush=True)
    took = time.monotonic() - t_start
    print(f"hostile run: {n:,} cases ({opts.per_kind} per generator, seed {opts.seed}), {took:.0f} s, "
          f"timeout {opts.timeout:g} s per case")
    print("exit codes: " + ", ".join(f"{k}: {v:,}" for k, v in sorted(codes.items(), key=str)))
    for kind, c in per_kind.items():
        print(f"  {kind:14s} " + ", ".join(f"{k}: {v}" for k, v in sorted(c.items(), key=str)))
    for label in ("internal error", "timeout", "non-finite"):
        print(f"{label}s: {len(problems.get(label, []))}")
    others = {k: v for k, v in problems.items() if k not in ("internal error", "timeout", "non-finite")}
    for label, items in others.items():
        print(f"{label}: {len(items)}")
    print(f"peak RSS of a refused (exit 2) case: {refused_peak_kb / 2**10:.0f} MiB (the parent's baseline, "
          f"shared: {base_rss / 2**10:.0f} MiB): {refused_peak_case}")
    print(f"slowest case: {slowest[0]:.2f} s: {' '.join(slowest[1] or [])[:200]}")
    for label, items in problems.items():
        for item in items[:opts.show]:
            print(f"  {label}: {item}")
    bad = sum(len(problems.get(k, [])) for k in ("internal error", "timeout", "non-finite"))
    sys.exit(1 if bad or refused_peak_kb > 2**20 else 0)


if __name__ == "__main__":
    main()
