"""Sweep benchmark: points/s of the vectorised kv and capacity grids next to a scalar loop, in one run.

    python bench/bench_sweep.py [--points 1000000] [--scalar 20000]

Rows (best of 3 runs each):
- "arrays": the closed form itself on numpy arrays (kv_arrays / capacity_arrays), presets resolved;
- "engine": serve.sweep.evaluate_columns over 1,000,000 contexts (kv) and a 1,000 x 1,000 grid (capacity):
  grid indices, preset loop, column assembly;
- "scalar loop": the same function called once per point with Python ints (what a loop over the
  single-point path costs), timed over fewer points and reported per second.
Targets (issue 13): >= 1e7 points/s for kv arrays; a 1,000,000-point kv or capacity grid in < 1 s.
"""

from __future__ import annotations

import argparse
import time


def best_s(fn, runs: int = 3) -> float:
    """Best wall time of ``runs`` calls [s]."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return min(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=1_000_000)
    ap.add_argument("--scalar", type=int, default=20_000)
    args = ap.parse_args()
    import numpy as np

    from kvcalc.memory.capacity import capacity_arrays
    from kvcalc.model import attention as att
    from kvcalc.model import catalog
    from kvcalc.model.kv import kv_arrays
    from kvcalc.out.sweep_spec import parse_axis
    from kvcalc.serve import sweep as sw

    n, ns = args.points, args.scalar
    rows = []
    for name in ("llama-3-70b", "deepseek-v4-flash"):
        model = catalog.load_model(name)
        groups = att.resolve_groups(model)
        hbm = catalog.load_hardware("h100-sxm").hbm_bytes
        tokens = np.linspace(1, 2**20, n).astype(np.int64)
        gpus = np.resize(np.array([1, 2, 4, 8], dtype=np.int64), n)
        small = tokens[:: max(1, n // ns)][:ns].tolist()
        small_g = gpus[:ns].tolist()
        t = best_s(lambda: kv_arrays(groups, tokens))
        s = best_s(lambda: [kv_arrays(groups, x) for x in small], 1)
        rows.append((f"kv {name}", n / t, len(small) / s))
        t = best_s(lambda: capacity_arrays(groups, model.weight_bytes, hbm, tokens, gpus, 0.9, 0.0))
        s = best_s(lambda: [capacity_arrays(groups, model.weight_bytes, hbm, x, g, 0.9, 0.0)
                            for x, g in zip(small, small_g)], 1)
        rows.append((f"capacity {name}", n / t, len(small) / s))
    side = int(round(n ** 0.5))
    ctx = parse_axis("context", f"1..{side}", int, True, integer=True)
    util = parse_axis("hbm-utilization", f"0.5..1:lin{side}", float, True)
    fixed = {"model": "deepseek-v4-flash"}
    ctx_all = parse_axis("context", f"1..{n}", int, True, integer=True, max_points=n)
    t_kv = best_s(lambda: sw.evaluate_columns("kv", [ctx_all], fixed))
    t_cap = best_s(lambda: sw.evaluate_columns("capacity", [ctx, util], fixed))
    print(f"{'closed form':34s} {'arrays [pt/s]':>15s} {'scalar loop [pt/s]':>19s} {'speed-up':>9s}")
    for label, vec, sca in rows:
        print(f"{label:34s} {vec:15.3g} {sca:19.3g} {vec / sca:8.0f}x")
    print(f"engine kv, {n:,} contexts: {n / t_kv:.3g} pt/s ({t_kv * 1e3:.0f} ms)")
    print(f"engine capacity, {side:,} x {side:,} = {side * side:,} points: {side * side / t_cap:.3g} pt/s "
          f"({t_cap * 1e3:.0f} ms)")


if __name__ == "__main__":
    main()
