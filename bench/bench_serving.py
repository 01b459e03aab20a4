"""Speed of the serving model: simulated requests per second of kvcalc's scheduler, three ways side by side in
one run on the same requests: the O(1)-per-step loop (serve/scheduler_fast.py, the default), the loop before it
(``fast=False``: runs of pure decode steps in one numpy call, the running set as arrays) and the plain loop
stepping one token step at a time (``jump=False``); with whether their figures agree (rel 1e-9).

    python bench/bench_serving.py [--big 100000] [--skip-compare] [--skip-before]

Cases on 1 x H100: Qwen3-14B, 500 requests x 4,000 in / 200 out (the issue's "well under a second"), the same
with 32 requests at a time (a client cap); Qwen3-8B, --big requests x 1,000 in / 200 out sent at once, at 50
req/s (Poisson) and 64 at a time (the one-step loop is timed on a tenth of them and its rate reported per
request). Then the compare path: ``kvcalc compare``'s core call on the serving model beside the stated-rate
closed form, for the shipped scenarios.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


CPU = {}  # the process's CPU seconds of the best run of each timed call (the machine is shared: wall > CPU)


def timed(fn, repeat: int = 3):
    best = float("inf")
    for _ in range(repeat):
        c, t = time.process_time(), time.perf_counter()
        out = fn()
        wall = time.perf_counter() - t
        if wall < best:
            best, CPU[fn] = wall, time.process_time() - c
    return best, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", type=int, default=100_000)
    ap.add_argument("--skip-compare", action="store_true", help="only the scheduler cases")
    ap.add_argument("--skip-before", action="store_true", help="not the loop before the O(1) one (fast=False)")
    a = ap.parse_args()

    from kvcalc.model import catalog
    from kvcalc.serve.bench import BenchSpec, metrics, pool_and_limits, requests_of
    from kvcalc.serve.calibration import calibration_for
    from kvcalc.serve.scheduler import simulate
    from kvcalc.serve.step_time import step_model

    hw = catalog.load_hardware("h100-sxm")
    cal = calibration_for("h100-sxm")[0]
    base = BenchSpec("qwen3-14b", catalog.load_model("qwen3-14b"), "h100-sxm", hw, None, cal, "h100-sxm",
                     input_len=4000, output_len=200, num_prompts=500)
    big = BenchSpec("qwen3-8b", catalog.load_model("qwen3-8b"), "h100-sxm", hw, None, cal, "h100-sxm",
                    input_len=1000, output_len=200, num_prompts=a.big)
    rep = dataclasses.replace
    cases = [("Qwen3-14B 500 x 4000/200, burst", base, 1),
             ("Qwen3-14B 500 x 4000/200, max-concurrency 32", rep(base, max_concurrency=32), 1),
             (f"Qwen3-8B {a.big:,} x 1000/200, burst", big, 10),
             (f"Qwen3-8B {a.big:,} x 1000/200, 50 req/s", rep(big, request_rate=50.0), 10),
             (f"Qwen3-8B {a.big:,} x 1000/200, max-concurrency 64", rep(big, max_concurrency=64), 10)]
    print(f"{'case':48} {'O(1) loop [req/s]':>18} {'before (numpy runs)':>20} {'one step at a time':>19}"
          f" {'ratios':>13}  same figures")
    for name, spec, cut in cases:
        sm = step_model(spec.model, spec.hw, spec.link, spec.cal, spec.tp)
        pool, sch = pool_and_limits(spec)
        if spec.max_concurrency:
            sch = dataclasses.replace(sch, max_concurrency=spec.max_concurrency)
        req = requests_of(spec)
        fast = (lambda: simulate(sm, pool, req, sch))
        t_fast, run = timed(fast, 1 if cut > 1 else 3)
        old = (lambda: simulate(sm, pool, req, sch, True, False))
        t_before, before = (math.nan, None) if a.skip_before else timed(old, 1 if cut > 1 else 3)
        small = dataclasses.replace(spec, num_prompts=spec.num_prompts // cut)
        req_s = requests_of(small)
        t_slow, slow = timed(lambda: simulate(sm, pool, req_s, sch, False), 1)
        fast_small = simulate(sm, pool, req_s, sch)
        same = _same(metrics([fast_small], small), metrics([slow], small))
        if before is not None:
            same = same and _same(metrics([run], spec), metrics([before], spec)) and run.steps == before.steps
        r_fast, r_before, r_slow = (spec.num_prompts / t_fast, spec.num_prompts / t_before,
                                    small.num_prompts / t_slow)
        print(f"{name:48} {r_fast:>18,.0f} {r_before:>20,.0f} {r_slow:>19,.0f} {r_fast / r_before:>5.1f}x"
              f" {r_fast / r_slow:>5.1f}x  {same}   ({t_fast:.2f} s, CPU {CPU[fast]:.2f} s, for {spec.num_prompts:,}"
              + ("" if before is None else f"; before {t_before:.2f} s, CPU {CPU[old]:.2f} s") + f"; {run.steps:,} steps"
              + (f"; the one-step loop timed on {small.num_prompts:,})" if cut > 1 else ")"), flush=True)
    if not a.skip_compare:
        compare_path()
    return 0


def _same(a: dict, b: dict) -> bool:
    return all(math.isclose(a[k], b[k], rel_tol=1e-9, abs_tol=1e-12) for k in a)


def compare_path() -> None:
    """``kvcalc compare`` on the serving model: the core call (A and C, both simulated) for the shipped
    non-article scenarios and a derived one, beside the same call on the stated path (--decode-tokens-per-s,
    the closed form) measured in the same run."""
    from kvcalc.serve.cost import compare_result
    from kvcalc.serve.scenario import Overrides, resolve

    print(f"\n{'kvcalc compare (core call, A + C)':52} {'serving model':>14} {'stated rate':>12} {'ratio':>7}")
    for name, ref, o in (("--scenario v4-flash-8xh100", "v4-flash-8xh100", {}),
                         ("--scenario v4-flash-pd-ib", "v4-flash-pd-ib", {}),
                         ("--model llama-3-70b --hardware h200-sxm (article-100)", None,
                          {"model": "llama-3-70b", "hardware": "h200-sxm"})):
        served = resolve(ref, Overrides(**o))
        stated = resolve(ref, Overrides(decode_tokens_per_s=60.0, **o))
        compare_result(served).rows  # warm the imports
        t_served, _ = timed(lambda: compare_result(served).rows)
        t_stated, _ = timed(lambda: compare_result(stated).rows)
        print(f"{name:52} {t_served * 1e3:>11.0f} ms {t_stated * 1e3:>9.1f} ms {t_served / t_stated:>6.0f}x")


if __name__ == "__main__":
    sys.exit(main())
