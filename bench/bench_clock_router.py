"""Speed of ``bench --dp N --router least-loaded|prefix`` on the serving clock (serve/cluster.py), side by side in
one run on the same requests: the lockstep replicas routing on the clock, the lockstep replicas given that same
assignment (the driver's own cost), and each replica simulated alone on its share (the path round-robin and
session take); with whether the three give the same steps.

    python bench/bench_clock_router.py [TRACE] [--dp 4]

Default trace: the Mooncake excerpt (tests/fixtures/traces/mooncake_synthetic_head400.jsonl); the whole
synthetic trace is ../shared/traces/mooncake_synthetic_trace.jsonl. Qwen3-14B on single-H100 replicas, prefix
caching on, --max-model-len 131072 (the docs' example, docs/traces.md "Replicas").
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    import numpy as np

    from kvcalc.model import catalog
    from kvcalc.serve.bench import BenchSpec, _admissible, pool_and_limits, spec_step_model
    from kvcalc.serve.calibration import calibration_for
    from kvcalc.serve.cluster import simulate_cluster
    from kvcalc.serve.scheduler import simulate
    from kvcalc.trace.bench_input import trace_requests

    ap = argparse.ArgumentParser()
    ap.add_argument("trace", nargs="?", default=str(ROOT / "tests/fixtures/traces/mooncake_synthetic_head400.jsonl"))
    ap.add_argument("--dp", type=int, default=4)
    a = ap.parse_args()
    trace = trace_requests(a.trace)
    spec = BenchSpec("qwen3-14b", catalog.load_model("qwen3-14b"), "h100-sxm", catalog.load_hardware("h100-sxm"),
                     None, calibration_for("h100-sxm")[0], "h100-sxm", dp=a.dp, max_model_len=131072,
                     prefix_caching=True, trace=trace)
    sm, (pool, sch) = spec_step_model(spec), pool_and_limits(spec)
    req, _ = _admissible(trace, spec)

    def cpu(fn):
        best, out = float("inf"), None
        for _ in range(3):
            c = time.process_time()
            out = fn()
            best = min(best, time.process_time() - c)
        return best, out

    print(f"{len(req.prompt):,} requests on {a.dp} replicas; CPU s, best of 3")
    for router in ("least-loaded", "prefix"):
        t_clock, (runs, chosen) = cpu(lambda: simulate_cluster(sm, pool, req, sch, a.dp, router))
        t_fixed, (fixed, _) = cpu(lambda: simulate_cluster(sm, pool, req, sch, a.dp, chosen))
        at = np.asarray(chosen)
        t_alone, alone = cpu(lambda: [simulate(sm, pool, req.take(np.flatnonzero(at == r)), sch)
                                      for r in range(a.dp)])
        same = [r.steps for r in runs] == [r.steps for r in fixed] == [r.steps for r in alone]
        print(f"{router:>12}: clock {t_clock:.3f}  same split in lockstep {t_fixed:.3f}  alone {t_alone:.3f}  "
              f"(clock / alone {t_clock / t_alone:.2f}x; same steps: {same})")


if __name__ == "__main__":
    main()
