"""Speed of the serving model: simulated requests per second of kvcalc's scheduler (runs of pure decode steps in
one numpy call) beside the same scheduler stepping one token step at a time (``jump=False``, a plain Python loop
over steps), measured side by side in one run, on the same requests, with the same results.

    python bench/bench_serving.py [--big 100000]

Cases: 500 requests x 4,000 in / 200 out on 1 x H100 (the issue's "well under a second"), the same with 32
requests at a time (a client cap), and --big requests x 1,000 in / 200 out (the one-step loop is timed on a
tenth of them and its rate reported per request).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def timed(fn, repeat: int = 3):
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best, out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--big", type=int, default=100_000)
    a = ap.parse_args()

    from kvcalc.model import catalog
    from kvcalc.serve.bench import BenchSpec, metrics, pool_and_limits, requests_of
    from kvcalc.serve.calibration import calibration_for
    from kvcalc.serve.scheduler import simulate
    from kvcalc.serve.step_time import step_model

    hw = catalog.load_hardware("h100-sxm")
    base = BenchSpec("qwen3-14b", catalog.load_model("qwen3-14b"), "h100-sxm", hw, None, calibration_for("h100-sxm")[0],
                     "h100-sxm", input_len=4000, output_len=200, num_prompts=500)
    cases = [("500 x 4000/200, burst", base, 1), ("500 x 4000/200, max-concurrency 32",
                                                    dataclasses.replace(base, max_concurrency=32), 1),
             (f"{a.big:,} x 1000/200, burst", dataclasses.replace(base, num_prompts=a.big, input_len=1000), 10)]
    print(f"{'case':38} {'numpy runs [req/s]':>20} {'one step at a time':>20} {'ratio':>7}  same figures")
    for name, spec, cut in cases:
        sm = step_model(spec.model, spec.hw, spec.link, spec.cal, spec.tp)
        pool, sch = pool_and_limits(spec)
        if spec.max_concurrency:
            sch = dataclasses.replace(sch, max_concurrency=spec.max_concurrency)
        req = requests_of(spec)
        t_fast, run = timed(lambda: simulate(sm, pool, req, sch, True), 1 if cut > 1 else 3)
        small = dataclasses.replace(spec, num_prompts=spec.num_prompts // cut)
        req_s = requests_of(small)
        t_slow, slow = timed(lambda: simulate(sm, pool, req_s, sch, False), 1)
        fast_small = simulate(sm, pool, req_s, sch, True)
        m_fast, m_slow = metrics([fast_small], small), metrics([slow], small)
        same = all(math.isclose(m_fast[k], m_slow[k], rel_tol=1e-9) for k in m_fast)
        r_fast, r_slow = spec.num_prompts / t_fast, small.num_prompts / t_slow
        print(f"{name:38} {r_fast:>20,.0f} {r_slow:>20,.0f} {r_fast / r_slow:>6.1f}x  {same}"
              f"   ({t_fast:.2f} s for {spec.num_prompts:,}; {run.steps:,} steps, {run.jumps:,} runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
