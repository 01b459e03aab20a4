"""The installed package works from any directory: presets ship inside it, the console script runs."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


def _run(args, cwd):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)


def _installed(cwd) -> bool:
    return _run([sys.executable, "-c", "import kvcalc"], cwd).returncode == 0


def test_module_runs_from_another_directory(tmp_path):
    if not _installed(tmp_path):
        pytest.skip("kvcalc is not installed in this interpreter (pip install . first)")
    r = _run([sys.executable, "-m", "kvcalc", "capacity", "--format", "json"], tmp_path)
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["results"]
    assert [x["model"] for x in rows][3] == "deepseek-v4-flash" and rows[3]["max_requests"] == 1761


def test_console_script_and_shipped_presets(tmp_path):
    if not _installed(tmp_path):
        pytest.skip("kvcalc is not installed in this interpreter (pip install . first)")
    script = Path(sys.executable).with_name("kvcalc")
    if not script.exists():
        pytest.skip("no kvcalc console script beside this interpreter")
    r = _run([str(script), "presets", "list", "--format", "csv"], tmp_path)
    assert r.returncode == 0, r.stderr
    names = {line.split(",")[1] for line in r.stdout.splitlines()[1:]}
    assert {"deepseek-v4-flash", "h100-sxm", "pcie-gen5-x16", "article-100", "article"} <= names
    where = _run([sys.executable, "-c", "from kvcalc.model.catalog import presets_root; print(presets_root())"], tmp_path)
    assert (Path(where.stdout.strip()) / "models" / "deepseek-v4-flash.toml").is_file()
