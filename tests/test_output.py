"""Output that survives terminals and pipes: numbers never break, narrow widths, closed pipes, help, --version,
presets in every format, negative money, --check on booleans, context and reserve notes."""

import io
import json
import subprocess
import sys

import pytest
from conftest import assert_bad_input, run_cli

from kvcalc.out import render, text
from kvcalc.out.units import fmt_usd

WIDE_TABLES = [["kv"], ["capacity"], ["compare"], ["cost"], ["compare", "--scenario", "v4-flash-8xh100"],
               ["transfer"], ["blocks"], ["presets", "list"], ["presets", "schema", "models", "-f", "table"]]


@pytest.fixture(autouse=True)
def no_color(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.mark.parametrize("args", WIDE_TABLES)
@pytest.mark.parametrize("width", [20, 40, 60, 80, 100, 140])
def test_a_number_never_breaks_and_tables_fit(monkeypatch, args, width):
    shown = []
    write = render.write_tables
    monkeypatch.setattr(render, "write_tables", lambda result, *a: shown.append(result) or write(result, *a))
    monkeypatch.setenv("COLUMNS", str(width))
    r = run_cli(*args)
    assert r.code == 0 and r.out.strip(), r.err
    lines = r.out.splitlines()
    for line in lines:  # boxed tables fit; only `field: value` records and overlong words may overflow
        assert len(line) <= width or line[0] not in "┏┃┡│└", line
    for t in (shown[0].main, *shown[0].extra):
        for row in t.rows:
            for c in t.columns:
                if c.kind != "text":  # every number cell whole on one line
                    cell = render.format_value(c, row)
                    assert any(cell in line for line in lines), (cell, width)


def test_article_compare_at_80_columns_prints_strategies_as_columns(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    out = run_cli("compare").out
    # the 9-column A/C table cannot fit 80 columns with whole numbers: it prints transposed
    # the strategies as people read them (issue 19): JSON keeps lru / prefix-tree
    assert "┃ strategy       ┃ A lru (no prefix reuse) ┃ C prefix-tree ┃" in out
    assert "│ prefill tokens │                 320,000 │       124,000 │" in out  # the article's 320,000 vs 124,000
    assert "$-" not in out and "-$0.02654" in out  # C - A input $/M: 0.01679 - 0.04333


def test_kv_at_80_columns_splits_its_columns_under_the_row_names(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    lines = run_cli("kv").out.splitlines()
    # 7 columns need 91 characters even with wrapped headers: the last one moves to a second table, led by
    # model and tokens (the fewest leading columns that tell the 24 rows apart)
    assert "┃ model             ┃    tokens ┃ read/step ┃" in lines
    assert "│ deepseek-v4-flash │     4,096 │  11.33 MB │" in lines  # V4 Flash reads 11.33 MB per step at 4K
    assert all(len(line) <= 80 for line in lines if line[:1] in "┏┃┡│└")


def test_kv_at_40_columns_prints_records(monkeypatch):
    monkeypatch.setenv("COLUMNS", "40")
    out = run_cli("kv", "deepseek-v4-flash", "-c", "4k,1m").out
    # 29,814,784 B = 29.81 MB per 4K request (17,608,704 B of entries + 12,206,080 B of state)
    assert "model:           deepseek-v4-flash" in out and "KV/request:      29.81 MB" in out


@pytest.mark.parametrize("columns", ["0", "1", "-3", "abc", "", "9" * 5000])
def test_degenerate_columns_still_print(monkeypatch, columns):
    monkeypatch.setenv("COLUMNS", columns)
    r = run_cli("capacity")
    assert r.code == 0 and r.out.count("\n") > 5
    assert not any(len(line) == 1 for line in r.out.splitlines())
    monkeypatch.setenv("COLUMNS", "20" if columns == "1" else "160")
    assert run_cli("capacity").out == r.out  # 0/invalid = unset (160 when piped); 1 is raised to 20


def test_grid_wraps_headers_and_text_never_numbers():
    g = text.Grid("t", ["prefill tokens", "source"], [True, False],
                  [["320,000", "the article, section 8"], ["124,000", "x"]])
    assert g.widths(200) == [14, 22]  # natural widths fit
    # 3 x 2 + 1 = 7 of border leaves 23; the widest columns give way first: cap 11 -> [11, 11], spare 1 -> [12, 11]
    assert g.widths(30) == [12, 11]
    lines = [x for x, _ in g.lines([12, 11], text.BOX_UTF8)]
    # headers wrap bottom-aligned, text wraps at spaces, the number stays whole and right-aligned
    assert lines[2:4] == ["┃      prefill ┃             ┃", "┃       tokens ┃ source      ┃"]
    assert lines[5:8] == ["│      320,000 │ the         │", "│              │ article,    │", "│              │ section 8   │"]
    assert g.widths(10) is None  # 7 + 8 + 7 > 10
    assert text.wrap("note: 1,048,576 tokens", 5) == ["note:", "1,048,576", "tokens"]


def test_terminal_output_is_the_piped_text(monkeypatch):
    """On a terminal rich only styles the same lines (NO_COLOR: no escape codes, same characters)."""
    from kvcalc.model import catalog
    from kvcalc.model.kv import kv_result

    class Tty(io.StringIO):
        def isatty(self):
            return True

    result = kv_result([("deepseek-v4-flash", catalog.load_model("deepseek-v4-flash"))], [4096, 1 << 20])
    monkeypatch.setenv("COLUMNS", "100")
    piped, tty = io.StringIO(), Tty()
    render.write_tables(result, piped)
    render.write_tables(result, tty)
    import re

    styled = tty.getvalue()
    assert re.sub(r"\x1b\[[0-9;]*m", "", styled) == piped.getvalue() and "29.81 MB" in piped.getvalue()
    assert "\x1b[1m" in styled  # headers bold (NO_COLOR drops colours, not bold/italic)


def test_api_to_table_is_the_piped_table(monkeypatch):
    import kvcalc

    monkeypatch.setenv("COLUMNS", "100")
    result = kvcalc.compare_result(kvcalc.resolve_scenario("article"))
    assert kvcalc.to_table(result, width=100) == run_cli("compare").out


def test_closed_pipe_exits_0_quietly():
    contexts = ",".join(str(n) for n in range(1, 3001))  # 3,000 rows: more than a pipe buffer holds
    p = subprocess.Popen([sys.executable, "-m", "kvcalc", "kv", "llama-3-8b", "-c", contexts],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.readline()
    p.stdout.close()  # as `| head -1` does
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0 and err == b""


@pytest.mark.parametrize("fmt", ["json", "csv", "table"])
def test_pipe_closed_before_any_read_exits_0(fmt):
    # `kvcalc ... --format json | head -c 0`: the reader is gone before the first write; the write (140 kB, more
    # than a pipe buffer) fails inside the command, where click's own EPIPE handler would exit 1 (a failed --check)
    contexts = ",".join(str(n) for n in range(1, 3001))
    p = subprocess.Popen([sys.executable, "-m", "kvcalc", "kv", "llama-3-8b", "-c", contexts, "--format", fmt],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0 and err == b""


def test_piped_tables_and_help_do_not_import_rich_markdown():
    code = ("import sys\nfrom kvcalc.cli.app import main\n"
            "for args in (['kv', 'llama-3-8b'], ['compare', '--help']):\n"
            "    try:\n        main(args)\n    except SystemExit:\n        pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'pygments', 'markdown_it')"
            " and m != 'rich'), file=sys.stderr)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "rich.markdown" not in r.stderr and "pygments" not in r.stderr and "rich.table" not in r.stderr, r.stderr


@pytest.mark.parametrize("cmd", ["cost", "compare"])
def test_help_keeps_option_names_whole_at_80_columns(monkeypatch, cmd):
    import typer

    from kvcalc.cli.app import build_app

    monkeypatch.setenv("COLUMNS", "80")
    r = run_cli(cmd, "--help")
    assert r.code == 0 and "Examples:" in r.out
    click_cmd = typer.main.get_command(build_app(cmd)).commands[cmd]
    for param in click_cmd.params:
        for name in param.opts + param.secondary_opts:
            assert any(name in line.split() or f"{name}," in line.split() for line in r.out.splitlines()), name
    assert all(len(line) <= 80 for line in r.out.splitlines() if line.startswith("  -"))


def _commands():
    from kvcalc.cli.app import COMMANDS

    return list(COMMANDS)


@pytest.mark.parametrize("cmd", _commands())
def test_help_wraps_at_spaces_only(monkeypatch, cmd):
    monkeypatch.setenv("COLUMNS", "80")
    r = run_cli(cmd, "--help")
    assert r.code == 0 and r.out
    assert not [line for line in r.out.splitlines() if line.endswith("-")]  # e.g. `--skip-` / `bad` in trace's


def test_version_and_bare_commands_print_help():
    from kvcalc.out.version import __version__

    v = run_cli("--version")
    assert v.code == 0 and v.out == f"kvcalc {__version__}\n"
    for args in ([], ["presets"]):
        r = run_cli(*args)
        assert r.code == 0 and r.err == "" and "Usage: kvcalc" in r.out and "Commands:" in r.out


def test_negative_money():
    assert fmt_usd(-0.02654) == "-$0.02654"
    assert fmt_usd(-1500) == "-$1,500" and fmt_usd(0.01679) == "$0.01679" and fmt_usd(0) == "$0"


def test_check_on_boolean_fields():
    # deepseek-v3's 671 B FP8 weights (83.88 GB per GPU over 8) do not fit 72 GB usable: weights_fit false
    bad = run_cli("capacity", "-m", "deepseek-v3", "--check", "weights_fit == true")
    assert bad.code == 1 and "check failed: weights_fit == true" in bad.err
    ok = run_cli("capacity", "-m", "deepseek-v4-flash", "--check", "weights_fit == 1", "--check",
                 "weights_fit != false", "--format", "json")
    assert ok.code == 0 and all(c["passed"] for c in ok.json()["checks"])
    assert_bad_input(run_cli("capacity", "--check", "model == 1"), "not numeric")


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "markdown"])
def test_presets_commands_take_every_format(fmt, tmp_path):
    from kvcalc.model.catalog import presets_root

    path = str(presets_root() / "models" / "llama-3-8b.toml")
    for args in (["presets", "list", "models"], ["presets", "show", "llama-3-8b"], ["presets", "validate", path],
                 ["presets", "schema", "hardware"]):
        r = run_cli(*args, "--format", fmt)
        assert r.code == 0 and r.out.strip(), (args, r.err)
        if fmt == "json":
            json.loads(r.out)
    csv_show = run_cli("presets", "show", "llama-3-8b", "--format", "csv").out
    assert "layer_groups.0.kv_heads,8" in csv_show  # Llama 3 8B: GQA with 8 KV heads
    assert "| hbm_gb | number | yes |" in run_cli("presets", "schema", "hardware", "-f", "markdown").out
    r = run_cli("presets", "validate", path, "--check", "ok == false")
    assert r.code == 1 and "check failed" in r.err


def test_capacity_and_cost_note_a_context_beyond_the_model():
    cap = run_cli("capacity", "-m", "llama-3-8b", "-c", "32k", "--format", "json").json()
    assert "llama-3-8b: 32,768 tokens is beyond its 8,192-token context" in cap["notes"]
    cost = run_cli("cost", "-m", "llama-3-8b", "--requests", "4", "--context", "16k", "--format", "json").json()
    assert "llama-3-8b: 16,384 tokens is beyond its 8,192-token context" in cost["notes"]


def test_many_contexts_beyond_the_model_make_one_note():
    notes = run_cli("kv", "llama-3-8b", "-c", "4k,16k,32k,64k", "--format", "json").json()["notes"]
    # Llama 3 8B takes 8,192 positions: 16K, 32K and 64K are beyond it
    assert notes == ["llama-3-8b: 3 context lengths (16,384 to 65,536 tokens) are beyond its 8,192-token context"]


def test_a_reserve_beyond_the_hbm_is_named():
    notes = run_cli("capacity", "-m", "llama-3-8b", "--reserve", "100GB", "--format", "json").json()["notes"]
    # H100: 79.19 GiB (85.03 GB, as CUDA reports it) x 0.9 = 76.53 GB usable per GPU < 100 GB reserved
    assert any("the reserve (100 GB per GPU) is not below the usable HBM (76.53 GB per GPU)" in n for n in notes)
    assert not any("the weights" in n for n in notes)


def test_cells_with_newlines_or_pipes_stay_on_one_line(tmp_path):
    f = tmp_path / "nl.toml"
    f.write_text('schema_version = 1\nsource = "line one\\nline | two"\ndisplay_name = "x"\nparams_total_b = 1\n'
                 'params_active_b = 1\nweight_bytes_per_param = 2\nas_stated_kv_bytes_per_token = 1\n')
    md = run_cli("presets", "show", str(f), "--kind", "models", "-f", "markdown").out
    assert "| source | line one line \\| two |" in md
    grid = text.Grid("", ["a"], [False], [["x"]])
    assert grid.lines([1], text.BOX_UTF8)[1] == ("┃ a ┃", "head")  # no title line when the title is empty
    from kvcalc.out.results import Column, Result, Table

    result = Result("t", {}, Table("t", "", (Column("s", "s", "text"),), ({"s": "one\ntwo"},)))
    assert "│ one two │" in render.to_table(result)


def test_a_title_wraps_at_the_output_width_not_the_narrower_table():
    from kvcalc.out import text

    title = "A vs C on a workload whose name is longer than its small table"  # 62 characters
    grid = text.Grid(title, ["n"], [True], [["1"]])  # a 5-character table: | n |
    lines = [line for line, style in grid.render(120, text.BOX_UTF8) if style == "title"]
    assert [line.rstrip() for line in lines] == [title]  # room on the line: one line, however narrow the table
    narrow = [line.rstrip() for line, style in grid.render(30, text.BOX_UTF8) if style == "title"]
    assert len(narrow) == 3 and " ".join(narrow) == title and all(len(x) <= 30 for x in narrow)
