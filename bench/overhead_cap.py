"""What the fitted per-step overheads absorb: the calibration and the held-out rows with every engine's per-step
overhead capped at CAP microseconds, nothing refitted (docs/serving-model.md, "Why rows miss").

    python bench/overhead_cap.py 1500

Prints, per CSV, the median |error| and the rows within 2x of output throughput, mean TTFT and mean TPOT.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
STEP_FIELDS = ("vllm_step_us", "vllm_async_step_us", "sglang_step_us", "trtllm_step_us")


def main() -> int:
    import numpy as np

    from kvcalc.serve import calibration as c

    cap = float(sys.argv[1])
    for name in ("calibration.csv", "validation.csv"):
        rows = c.read_rows(ROOT / "tests" / "fixtures" / "perf" / name)
        preds = []
        for r in rows:
            cal = c.calibration_for(c.hardware_of(r.hardware))[0]
            preds.append(c.predict(r, replace(cal, **{f: min(getattr(cal, f), cap) for f in STEP_FIELDS})))
        cells = []
        for k, v in c.errors(rows, preds).items():
            v = np.asarray(v)
            within = int((np.maximum(v + 1, 1 / (v + 1)) <= 2).sum())
            cells.append(f"{k}: median {100 * np.median(np.abs(v)):.1f}%, {within}/{len(v)} within 2x")
        print(f"{name} (per-step overheads <= {cap:g} us): " + "; ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
