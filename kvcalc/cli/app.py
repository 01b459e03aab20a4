"""The ``kvcalc`` typer app: registers one small module per command; errors become one line + exit code."""

from __future__ import annotations

import sys

import typer

from kvcalc.cli import blocks as _blocks
from kvcalc.cli import capacity as _capacity
from kvcalc.cli import compare as _compare
from kvcalc.cli import cost as _cost
from kvcalc.cli import kv as _kv
from kvcalc.cli import presets as _presets
from kvcalc.cli import transfer as _transfer

app = typer.Typer(
    name="kvcalc", no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
    help="KV-cache cost-and-capacity calculator: KV bytes from the architecture, requests that fit, "
         "transfers, prefill cost and prefix-sharing strategies.\n\n"
         "Examples:  kvcalc compare   |   kvcalc capacity   |   kvcalc kv deepseek-v4-flash --context 4k,1m   |   "
         "kvcalc presets list",
)
app.command("kv")(_kv.kv)
app.command("capacity")(_capacity.capacity)
app.command("cost")(_cost.cost)
app.command("compare")(_compare.compare)
app.command("blocks")(_blocks.blocks)
app.command("transfer")(_transfer.transfer)
app.add_typer(_presets.app, name="presets")


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; KvcalcError -> one line on stderr and its exit code; usage errors -> 2."""
    from kvcalc.errors import KvcalcError

    command = typer.main.get_command(app)
    try:
        rv = command.main(args=argv, prog_name="kvcalc", standalone_mode=False)
    except KvcalcError as e:
        sys.stderr.write(f"kvcalc: error: {e.message}\n")
        sys.exit(e.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    except (typer.Abort, KeyboardInterrupt):
        sys.stderr.write("kvcalc: aborted\n")
        sys.exit(130)
    except Exception as e:
        # click's (or typer's vendored click's) usage errors: bad option, missing argument, bad type
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):
            sys.stderr.write(f"kvcalc: error: {e.format_message()}\n")
            sys.exit(2)
        raise
    code = rv if isinstance(rv, int) else 0
    sys.exit(code)
