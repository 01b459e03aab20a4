"""CLI conventions (issue 19, item 4): sweep takes its target's own options, options that only apply with another
are refused naming it, -h / -V, completion, help at the terminal's width with whole example commands."""

import pytest
from conftest import assert_bad_input, run_cli


@pytest.fixture(autouse=True)
def fixed_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "140")
    monkeypatch.setenv("NO_COLOR", "1")


def rows(*args):
    r = run_cli(*args, "--format", "json")
    assert r.code == 0, r.err
    return r.json()["results"]


# --- sweep TARGET with the target's own options -------------------------------------------------------------

@pytest.mark.parametrize("target,own,via_set", [
    ("kv", ["--model", "llama-3-70b"], ["--set", "model=llama-3-70b"]),
    ("kv", ["-m", "llama-3-70b", "--kv-dtype", "fp8", "--mtp"],
     ["--set", "model=llama-3-70b", "--set", "kv-dtype=fp8", "--set", "mtp=on"]),
    ("capacity", ["--model", "llama-3-70b", "--hardware", "h200-sxm", "--gpus", "4", "--hbm-utilization", "80%"],
     ["--set", "model=llama-3-70b", "--set", "hardware=h200-sxm", "--set", "gpus=4", "--set", "hbm-utilization=0.8"]),
    ("compare", ["--requests", "20", "--warm", "--shared-prefix", "1k"],
     ["--set", "requests=20", "--set", "warm=warm", "--set", "shared-prefix=1k"]),
    ("cost", ["--strategy", "lru", "--requests", "20", "--no-attention-flops"],
     ["--set", "strategy=lru", "--set", "requests=20", "--set", "attention-flops=off"]),
])
def test_sweep_takes_the_targets_own_options_as_set_does(target, own, via_set):
    """`sweep kv --model X` is `sweep kv --set model=X`: the same rows and the same fixed inputs."""
    vary = ["--vary", "context=4k,32k"]
    assert rows("sweep", target, *own, *vary) == rows("sweep", target, *via_set, *vary)


def test_sweep_kv_model_from_the_issue():
    # issue 19's failing example: the rows equal `kvcalc kv llama-3-70b -c 4k,32k`
    got = rows("sweep", "kv", "--model", "llama-3-70b", "--vary", "context=4k,32k")
    single = rows("kv", "llama-3-70b", "--context", "4k,32k")
    assert [r["kv_bytes_per_request"] for r in got] == [r["kv_bytes_per_request"] for r in single]
    # 80 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 327,680 B/token; x 4,096 = 1,342,177,280 B
    assert got[0]["kv_bytes_per_request"] == 327_680 * 4096


def test_sweep_target_options_in_its_help():
    out = run_cli("sweep", "kv", "--help").out
    assert "Fixed inputs of kv" in out and "--model" in out and "--kv-dtype" in out
    cap = run_cli("sweep", "capacity", "-h").out
    assert "--hbm-utilization" in cap and "--gpus" in cap


@pytest.mark.parametrize("args,words", [
    (["sweep", "kv", "--vary", "context=4k", "--context", "8k"], ["--context", "--vary context"]),
    (["sweep", "kv", "--vary", "model=llama-3-8b", "--context", "8k,16k"], ["--context"]),
    (["sweep", "capacity", "--vary", "context=4k", "-m", "llama-3-8b", "-m", "qwen3-8b"], ["--model", "--vary"]),
    (["sweep", "kv", "--set", "model=llama-3-8b", "--model", "llama-3-8b", "--vary", "context=4k"], ["--model"]),
    (["sweep", "capacity", "--vary", "context=4k", "--gpus", "0"], ["--gpus"]),
    (["sweep", "kv", "--vary", "context=4k", "--hardware", "h100-sxm"], ["--hardware"]),  # not a kv input
])
def test_sweep_target_option_errors_name_the_option(args, words):
    assert_bad_input(run_cli(*args), *words)


# --- options that only apply with another -------------------------------------------------------------------

ENGINE_FLAGS = [("--gpu-memory-utilization", "0.5"), ("--total-memory", "70GiB"), ("--weights-memory", "14GiB"),
                ("--mem-fraction-static", "0.8"), ("--max-num-batched-tokens", "8k"), ("--max-num-seqs", "256"),
                ("--block-size", "32"), ("--activation-memory", "1GiB"), ("--non-torch-memory", "0"),
                ("--cuda-graph-memory", "0"), ("--swa-full-tokens-ratio", "0.5"),
                ("--mamba-full-memory-ratio", "0.5"), ("--max-mamba-cache-size", "10")]


@pytest.mark.parametrize("flag,value", ENGINE_FLAGS)
def test_capacity_engine_flags_need_engine(flag, value):
    """Silently ignored before (issue 19): the same table as without them."""
    assert_bad_input(run_cli("capacity", flag, value), flag, "--engine")
    assert_bad_input(run_cli("capacity", "--engine", "ideal", flag, value), flag, "--engine")


def test_capacity_engine_flags_with_engine_still_work():
    assert run_cli("capacity", "--gpu-memory-utilization", "0.5", "--engine", "vllm", "-m", "llama-3-8b",
                   "--gpus", "1").code == 0
    # the value typed equals the default (0.9): still refused without --engine, still accepted with it
    assert_bad_input(run_cli("capacity", "--gpu-memory-utilization", "0.9"), "--engine")
    assert run_cli("capacity", "-m", "llama-3-8b", "--solve", "max-model-len", "--max-model-len", "8k").code == 0


@pytest.mark.parametrize("args,words", [
    (["capacity", "--max-model-len", "8k"], ["--max-model-len", "--engine", "--solve"]),
    (["capacity", "--concurrency", "4"], ["--concurrency", "--solve gpu-memory-utilization"]),
    (["capacity", "--engine", "vllm", "--solve", "max-model-len", "--concurrency", "4"], ["--concurrency"]),
    (["compare", "--tier-copies", "per-block"], ["--tier-copies", "--tiers"]),
    (["compare", "--pd-overlap-us", "5"], ["--pd-overlap-us", "--pd-link"]),
    (["cost", "--pd-overlap-us", "5"], ["--pd-overlap-us", "--pd-link"]),
    (["trace", "t.jsonl", "--tier-copies", "per-block"], ["--tier-copies", "--tiers"]),
    (["trace", "t.jsonl", "--scenario", "article"], ["--scenario", "--tiers"]),
    (["trace", "t.jsonl", "--gpus", "4"], ["--gpus", "--hardware"]),
    (["transfer", "--dram", "2TB"], ["--dram", "--tiers"]),
    (["transfer", "--ssd-link", "nvme-gen4"], ["--ssd-link", "--tiers"]),
    (["kv", "--kv-group-size", "64"], ["--kv-group-size", "--kv-dtype int4-grouped"]),
    (["capacity", "--kv-residual-tokens", "64", "--kv-dtype", "int4-grouped"], ["--kv-residual-tokens", "kivi"]),
])
def test_options_that_need_another_name_it(args, words):
    assert_bad_input(run_cli(*args), *words)


def test_grouped_kv_params_apply_with_their_formats():
    # Llama-3-8B, int4-grouped with 64-element groups: K (or V) per layer per token = 8 heads x 128 = 1,024
    # elements x 0.5 B = 512 B + 1,024 / 64 = 16 FP16 scale+zero pairs x 4 B = 64 B -> 576 B; x 2 x 32 layers
    row = rows("kv", "llama-3-8b", "--kv-dtype", "int4-grouped", "--kv-group-size", "64", "-c", "4k")[0]
    assert row["kv_bytes_per_token"] == 2 * 32 * 576
    assert run_cli("transfer", "--tiers", "--dram", "2TB").code == 0


def test_pd_overlap_with_a_scenario_that_has_a_pd_link():
    assert run_cli("compare", "--scenario", "v4-flash-pd-ib", "--pd-overlap-us", "5").code == 0


# --- -h, -V, completion, help width, placeholders, whole example commands ------------------------------------

def _commands():
    """(path of words, click command) of every command and subcommand, the top level first."""
    import typer

    from kvcalc.cli.app import build_app

    out = []

    def walk(cmd, path):
        out.append((path, cmd))
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(typer.main.get_command(build_app()), [])
    return out


COMMAND_PATHS = [path for path, _ in _commands()]


def _examples(text: str, rendered: bool = False) -> list[str]:
    """The example commands in a help text: lines starting with `kvcalc `, a line ending in `\\` joined to the
    next (a continued command), a trailing `# comment` dropped."""
    out, pending = [], None
    lines = text.splitlines()
    # a help's description ends at its first section heading (Arguments:, Options:...); its usage line is skipped
    end = next((i for i, line in enumerate(lines) if i and line and not line[0].isspace()), len(lines))
    for line in lines[1:end] if rendered else lines:
        s = line.strip()
        if pending is not None:
            pending += " " + s
        elif s.startswith("kvcalc "):
            pending = s
        else:
            continue
        if pending.endswith("\\"):
            pending = pending[:-1].rstrip()
            continue
        out.append(pending.split("  # ")[0].strip())
        pending = None
    return out


def test_version_flags():
    from kvcalc.out.version import __version__

    for flag in ("-V", "--version"):
        r = run_cli(flag)
        assert r.code == 0 and r.out == f"kvcalc {__version__}\n"


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=lambda p: " ".join(p) or "kvcalc")
def test_dash_h_is_help(path):
    long, short = run_cli(*path, "--help"), run_cli(*path, "-h")
    assert long.code == short.code == 0 and long.out == short.out and "Usage: kvcalc" in long.out


def test_shell_completion_for_bash_zsh_fish(monkeypatch):
    top = run_cli("--help").out
    assert "--install-completion" in top and "--show-completion" in top
    for shell, marker in (("bash", "complete -o default -F _kvcalc_completion kvcalc"),
                          ("zsh", "compdef _kvcalc_completion kvcalc"), ("fish", "complete --command kvcalc")):
        monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
        r = run_cli("--show-completion", shell)
        assert r.code == 0 and marker in r.out, (shell, r.out)
    # what the bash script asks for: every command is built, the sweep target's own options too
    monkeypatch.setenv("_KVCALC_COMPLETE", "complete_bash")
    for words, cword, expect in (("kvcalc capacity --eng", "2", "--engine"), ("kvcalc comp", "1", "compare"),
                                 ("kvcalc sweep kv --mod", "3", "--model")):
        monkeypatch.setenv("COMP_WORDS", words)
        monkeypatch.setenv("COMP_CWORD", cword)
        r = run_cli()
        assert r.code == 0 and expect in r.out.split(), (words, r.out)


def test_help_follows_the_terminal_width(monkeypatch):
    widths = {}
    for columns in (60, 100, 200):
        monkeypatch.setenv("COLUMNS", str(columns))
        text = run_cli("capacity", "--help").out
        lines = text.splitlines()
        prose = [line for i, line in enumerate(lines) if not line.strip().startswith("kvcalc ")
                 and not (i and lines[i - 1].endswith("\\"))]  # examples are never wrapped (tested below)
        widths[columns] = max(len(line) for line in prose)
    assert widths[60] <= 60 and 80 < widths[100] <= 100 and 100 < widths[200] <= 200, widths


@pytest.mark.parametrize("path", COMMAND_PATHS, ids=lambda p: " ".join(p) or "kvcalc")
def test_example_commands_are_whole_lines_at_any_width(path, monkeypatch):
    """Every example in the docstring appears in --help as one whole command (copy-paste works), at 60, 100 and
    200 columns; no other line of the help looks like a (broken) command."""
    import shlex

    from kvcalc.cli.app import COMMANDS

    cmd = dict((tuple(p), c) for p, c in _commands())[tuple(path)]
    source = _examples(cmd.help or "")
    assert source or not path or path == ["presets"], f"{path}: no example in its help"
    for columns in (60, 100, 200):
        monkeypatch.setenv("COLUMNS", str(columns))
        shown = _examples(run_cli(*path, "--help").out, rendered=True)
        assert shown == source, (columns, shown, source)
        for example in shown:
            words = shlex.split(example)  # balanced quotes: a whole shell command
            assert words[0] == "kvcalc" and words[1] in COMMANDS, example


def test_every_option_has_a_placeholder():
    """No <str> / <int>: each option taking a value says what it is read as (kvcalc.cli.help.METAVARS)."""
    from kvcalc.cli.help import METAVARS

    for path, cmd in _commands():
        for p in getattr(cmd, "params", []):
            if p.param_type_name == "option" and not p.is_flag and not p.opts[0].startswith("--install") and \
                    not p.opts[0].startswith("--show"):
                assert max(p.opts, key=len) in METAVARS, (path, p.opts)
    text = run_cli("capacity", "--help").out
    assert "<str>" not in text and "<int>" not in text
    assert "--total-memory SIZE" in text and "--gpus INTEGER" in text and "--context TOKENS" in text


def test_quiet_holds_for_one_run():
    from kvcalc.out import progress

    assert run_cli("--quiet", "kv", "llama-3-8b", "-c", "4k").code == 0 and progress.QUIET
    assert run_cli("kv", "llama-3-8b", "-c", "4k").code == 0 and not progress.QUIET
