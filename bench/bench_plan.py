"""Speed of ``kvcalc plan``'s search (issue 23, Must hold: a search over >= 10^3 candidates finishes in seconds):
the wall time of one search, how many candidates the lower bounds pruned, how many were simulated, and beside
it, in the same run, the time an exhaustive search (every candidate simulated) would take, estimated from
simulating a seeded random sample of the candidates (--sample) and scaling their mean to all of them.

    python bench/bench_plan.py [--model qwen3-32b] [--max-gpus 64] [--sample 20] [--tpot-ms 50] [--disagg off]
    python bench/bench_plan.py --disagg both   # off and auto side by side: the CPU ratio of adding the P:D families

The case: Qwen3-32B on h100-sxm, h200-sxm, b200, a100-80g and h800-sxm (every TP the heads allow x DP inside an
8-GPU node x replicas up to --max-gpus), 1,000 requests of 2,000 in / 200 out at 8 req/s, p99 TTFT <= 2 s and
p99 TPOT <= 50 ms (--tpot-ms 30 lets the TPOT floor prune; --disagg auto adds the P:D families).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

HARDWARE = ("h100-sxm", "h200-sxm", "b200", "a100-80g", "h800-sxm")


def setup(model_name: str, max_gpus: int, disagg: str = "off"):
    from kvcalc.model import catalog
    from kvcalc.serve import plan_space
    from kvcalc.serve.bench import BenchSpec

    m = catalog.load_model(model_name)
    hws = plan_space.hardware_choices(HARDWARE)
    tmpl = BenchSpec(model_name, m, "", None, None, None, "", input_len=2000, output_len=200, num_prompts=1000,
                     request_rate=8.0, max_model_len=2200)
    traffic = plan_space.Traffic(base=tmpl)
    return plan_space.families(m, hws, tmpl, max_gpus, disagg), traffic


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-32b")
    ap.add_argument("--max-gpus", type=int, default=64)
    ap.add_argument("--sample", type=int, default=20, help="candidates simulated to estimate the exhaustive search")
    ap.add_argument("--tpot-ms", type=float, default=50.0, help="the p99 TPOT target [ms]")
    ap.add_argument("--disagg", default="off", choices=("off", "on", "auto", "both"))
    opts = ap.parse_args()
    from kvcalc.serve import plan_search, plan_space

    if opts.disagg == "both":  # why --disagg stays off by default (docs/commands/plan.md)
        targets = plan_space.Targets(2.0, opts.tpot_ms / 1e3)
        cpu = {}
        for mode in ("off", "auto"):
            fams, traffic = setup(opts.model, opts.max_gpus, mode)
            t = time.process_time()
            plan = plan_search.search(fams, traffic, targets, opts.max_gpus, top=3)
            cpu[mode] = time.process_time() - t
            print(f"--disagg {mode}: {plan.enumerated:,} candidates ({plan.families} families), {plan.simulations:,} "
                  f"simulated, {plan.unprobed:,} families never simulated, {cpu[mode]:.2f} s CPU; answers "
                  + ", ".join(f"{r['gpus']} x {r['hardware']} tp {r['tp']} dp {r['dp']} {r['disagg'] or ''}"
                              f"x {r['replicas']}" for r in plan.rows))
        print(f"auto / off CPU: {cpu['auto'] / cpu['off']:.2f}")
        return

    fams, traffic = setup(opts.model, opts.max_gpus, opts.disagg)
    targets = plan_space.Targets(2.0, opts.tpot_ms / 1e3)
    t, cpu = time.perf_counter(), time.process_time()
    plan = plan_search.search(fams, traffic, targets, opts.max_gpus, top=3)
    wall, cpu = time.perf_counter() - t, time.process_time() - cpu
    print(f"search: {plan.enumerated:,} candidates ({plan.families} families), {plan.bound_pruned:,} pruned by a "
          f"bound, {plan.simulations:,} simulated ({plan.screened:,} of them stopped by the short screening run), "
          f"{wall:.2f} s wall, {cpu:.2f} s CPU")
    for r in plan.rows:
        print(f"  {r['gpus']} x {r['hardware']} tp {r['tp']} dp {r['dp']} {r['disagg'] or ''} x {r['replicas']}: "
              f"${r['usd_per_hour']:.2f}/h, "
              f"p99 TTFT {r['p99_ttft_ms']:.0f} ms, p99 TPOT {r['p99_tpot_ms']:.1f} ms")
    everything = plan_space.candidates(fams, opts.max_gpus)
    sample = random.Random(0).sample(everything, min(opts.sample, len(everything)))
    t = time.process_time()
    for c in sample:
        try:
            plan_search.simulate_candidate(c, traffic, targets)
        except ValueError:
            pass  # a pool too small for a request: the scheduler refuses at once
    per = (time.process_time() - t) / len(sample)
    exhaustive = per * len(everything)
    print(f"exhaustive (estimated from {len(sample)} random candidates, {per * 1e3:.0f} ms CPU each): "
          f"{exhaustive:.0f} s CPU; the search takes {cpu / exhaustive:.2f} of that")


if __name__ == "__main__":
    main()
