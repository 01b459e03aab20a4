"""Progress bars (issue 19, item 5): a rich bar on stderr while a long trace replays, when stderr is a terminal;
nothing when stderr is piped or with kvcalc --quiet. Driven in a real pseudo-terminal (the pty module)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO

pty = pytest.importorskip("pty")  # POSIX only


@pytest.fixture(scope="module")
def long_trace(tmp_path_factory):
    """40,000 requests (~5 MB): a replay of a few seconds, read in ~80 pieces of 64 KiB."""
    path = tmp_path_factory.mktemp("progress") / "long.jsonl"
    with open(path, "w") as f:
        for i in range(40_000):
            ids = [i % 50, 1000 + i % 300, *range(10_000 + 20 * i, 10_000 + 20 * i + 10)]
            f.write(json.dumps({"timestamp": i, "input_length": 512 * len(ids), "output_length": 100,
                                "hash_ids": ids}) + "\n")
    return str(path)


def run_on(args: list[str], stderr_tty: bool) -> tuple[int, str, bytes]:
    """Run ``python -m kvcalc ARGS`` with stdout piped and stderr on a pseudo-terminal (or piped) -> (exit code,
    stdout, everything written to stderr)."""
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "100"}
    env.pop("NO_COLOR", None)
    cmd = [sys.executable, "-m", "kvcalc", *args]
    if not stderr_tty:
        p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        return p.returncode, p.stdout, p.stderr.encode()
    master, slave = pty.openpty()
    p = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=slave, stdin=subprocess.DEVNULL)
    os.close(slave)
    err = b""
    while True:  # drain the terminal while the command runs (a full pty buffer would block it)
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the command closed the terminal (it ended)
            break
        if not chunk:
            break
        err += chunk
    out = p.stdout.read().decode()
    code = p.wait(timeout=600)
    os.close(master)
    return code, out, err


def test_trace_replay_shows_a_bar_on_a_terminal(long_trace):
    code, out, err = run_on(["trace", long_trace, "--capacity", "3m", "--format", "json"], stderr_tty=True)
    assert code == 0, err[-500:]
    assert json.loads(out)["results"][0]["requests"] == 40_000  # stdout untouched: the JSON alone
    text = err.decode("utf-8", "replace")
    assert "LRU replay: long.jsonl" in text and "━" in text, text[-500:]  # the name and rich's bar glyph
    assert "MB" in text  # the bytes read so far


def test_no_bar_when_stderr_is_piped_or_quiet(long_trace):
    code, out, err = run_on(["trace", long_trace, "--capacity", "3m", "--format", "json"], stderr_tty=False)
    assert code == 0 and err == b"" and json.loads(out)["results"][0]["requests"] == 40_000
    code, out, err = run_on(["--quiet", "trace", long_trace, "--capacity", "3m", "--format", "json"],
                            stderr_tty=True)
    assert code == 0 and err == b"", err[-300:]


def test_sweep_points_show_a_bar_on_a_terminal():
    code, out, err = run_on(["sweep", "compare", "--requests", "10", "--vary", "context=1k..64k:lin12",
                             "--format", "csv"], stderr_tty=True)
    assert code == 0, err[-500:]
    text = err.decode("utf-8", "replace")
    assert "sweep compare: points" in text and "12/12" in text, text[-500:]
    assert out.count("\n") == 1 + 24  # header + 12 points x 2 strategies: the bar never reaches stdout


def test_bench_shows_its_finished_requests_on_a_terminal():
    args = ["bench", "--model", "qwen3-14b", "--random-input-len", "1000", "--random-output-len", "100",
            "--num-prompts", "5000", "--format", "json"]
    code, out, err = run_on(args, stderr_tty=True)
    assert code == 0, err[-500:]
    assert json.loads(out)["results"][0]["completed"] == 5000  # stdout untouched: the JSON alone
    text = err.decode("utf-8", "replace")
    assert "bench: requests" in text and "/5,000" in text, text[-500:]
    code, out, err = run_on(args, stderr_tty=False)
    assert code == 0 and err == b""
