"""What reading a model from its config.json costs on top of a shipped preset, measured side by side in one run.

    python bench/bench_config_import.py [--runs 21]

For each pair, the same command runs on the shipped preset (built from TOML) and on the config.json it was
imported from (tests/fixtures/configs); every process is fresh and the runs are interleaved so drift hits both
alike. Prints the medians and the difference. Target: < 20 ms on top of the preset (issue 10).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from bench_startup import wall_s  # same folder: one way of timing a fresh process

CONFIGS = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "configs"
MODELS = ("qwen3-32b", "gpt-oss-120b", "qwen3-next-80b-a3b", "glm-5", "deepseek-v4-flash")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args()
    kv = [sys.executable, "-m", "kvcalc", "kv", "--format", "json", "--context", "4k"]
    cmds = {}
    for m in MODELS:
        cmds[f"{m} (preset)"] = kv + [m]
        cmds[f"{m} (config.json)"] = kv + [str(CONFIGS / m / "config.json")]
    for cmd in cmds.values():  # warm the file cache
        wall_s(cmd)
    times: dict[str, list[float]] = {n: [] for n in cmds}
    for _ in range(args.runs):
        for n, cmd in cmds.items():
            times[n].append(wall_s(cmd))
    print(f"{'kvcalc kv MODEL --context 4k':40s} {'median':>9s} {'+config':>9s}")
    for m in MODELS:
        pre, cfg = (statistics.median(times[f"{m} ({k})"]) for k in ("preset", "config.json"))
        print(f"{m + ' (preset)':40s} {pre * 1e3:7.1f} ms")
        print(f"{m + ' (config.json)':40s} {cfg * 1e3:7.1f} ms {(cfg - pre) * 1e3:+7.1f} ms")


if __name__ == "__main__":
    main()
