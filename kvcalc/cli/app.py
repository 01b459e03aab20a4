"""The ``kvcalc`` typer app: one small module per command; errors become one line + exit code.

Start-up matters (kvcalc runs inside CI loops), so :func:`main` imports and registers only the command
being run; ``kvcalc --help`` (or no command) registers them all.
"""

import importlib
import sys

import typer

HELP = ("KV-cache cost-and-capacity calculator: KV bytes from the architecture, requests that fit, "
        "transfers, prefill cost and prefix-sharing strategies.\n\n"
        "Examples:\n\n\b\n  kvcalc compare\n  kvcalc capacity\n  kvcalc kv deepseek-v4-flash --context 4k,1m\n"
        "  kvcalc presets list\n  kvcalc sweep capacity --vary context=1k..1m:log20")  # \b: click keeps the lines

HELP_OPTIONS = ("-h", "--help")
# -h as --help everywhere; help as wide as the terminal (click caps it at max_content_width, 80 by default;
# the width is shutil.get_terminal_size's: the terminal's, else $COLUMNS, else 80)
CONTEXT_SETTINGS = {"help_option_names": list(HELP_OPTIONS), "max_content_width": 10_000}
COMPLETE_VAR = "_KVCALC_COMPLETE"  # set by the shell's completion script: every command and option is needed

# command name -> (module, attribute); a typer.Typer attribute is a command group
COMMANDS = {
    "kv": ("kvcalc.cli.kv", "kv"),
    "capacity": ("kvcalc.cli.capacity", "capacity"),
    "cost": ("kvcalc.cli.cost", "cost"),
    "compare": ("kvcalc.cli.compare", "compare"),
    "blocks": ("kvcalc.cli.blocks", "blocks"),
    "transfer": ("kvcalc.cli.transfer", "transfer"),
    "trace": ("kvcalc.cli.trace", "trace"),
    "bench": ("kvcalc.cli.bench", "bench"),
    "plan": ("kvcalc.cli.plan", "plan"),
    "sweep": ("kvcalc.cli.sweep", "sweep"),
    "import": ("kvcalc.cli.import_", "import_"),
    "presets": ("kvcalc.cli.presets", "app"),  # a group: typer lists groups after the commands
}


# command name -> the first paragraph of its help: all that `kvcalc --help` lists (click shortens it), so the
# listing needs neither the command modules nor their ~200 parameters (tests/test_cli.py: the same text)
SUMMARIES = {
    "kv": "KV cache per request and per token, per layer group; bytes stored vs bytes read per decode step.",
    "capacity": "Requests that fit in a node's HBM after the weights, 16-token block bytes, page-in time per block.",
    "cost": "One strategy on one scenario: prefill tokens and FLOPs, TTFT, KV held, decode speed, $ per M tokens.",
    "compare": "Strategy A lru (no prefix reuse) vs C prefix-tree on one workload: absolute and relative deltas, "
               "TTFT per request class, and every assumption with its source.",
    "blocks": "Block size sweep: block bytes (padded as the kernel pages them), block-table overhead, whether the "
              "size is valid for the model (V4: multiple of 128 tokens), last-block waste, and the smallest valid "
              "size under the target.",
    "transfer": "Time to move one block, one request's KV and a batch's KV over each link: latency + bytes / "
                "bandwidth, the share spent in latency, effective bandwidth, separate copies per block vs one "
                "coalesced copy, and the prefill time that produced the payload.",
    "bench": "Predict what `vllm bench serve` prints: TTFT, TPOT, ITL, throughput, GPU-seconds and $ per M tokens.",
    "plan": "The cheapest deployment that meets p99 TTFT and TPOT targets: hardware, TP x DP, replicas, $/hour, $/M.",
    "trace": "Replay a request trace through a prefix cache (LRU, FIFO, LFU or S3-FIFO): hit rate per capacity, or a curve.",
    "sweep": "Evaluate kv, capacity, cost, compare or a trace replay over a grid of inputs: one row per point, "
             "varied inputs first.",
    "import": "Read a model's config.json into a preset: layer groups, parameters, weight bytes per component.",
    "presets": "The preset catalogue: list, show, validate a file, JSON Schema.",
}


def _listed(name: str):
    """A stand-in for command ``name`` in the top-level help listing (never run)."""
    def stand_in() -> None:
        raise AssertionError(f"{name}: listed only")
    return stand_in


def build_app(only: str | None = None, listing: bool = False) -> typer.Typer:
    """A Typer app with every command, or with just ``only`` (the one being run); ``listing``: every command
    as its name and summary only (for the top-level help)."""
    # rich_markup_mode=None: click's plain help formatter; typer's rich one imports markdown and pygments (~100 ms)
    # add_completion: typer's --install-completion / --show-completion (bash, zsh, fish, powershell); typer imports
    # its completion module anyway, so the two options cost ~nothing at start-up (bench/bench_startup.py)
    app = typer.Typer(name="kvcalc", no_args_is_help=True, add_completion=True, pretty_exceptions_enable=False,
                      help=HELP, rich_markup_mode=None, context_settings=CONTEXT_SETTINGS)

    @app.callback()
    def _root(version: bool = typer.Option(False, "--version", "-V", help="print kvcalc's version and exit",
                                           is_eager=True, callback=_print_version),
              quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress bars on stderr (they show "
                                         "only when stderr is a terminal)")):
        # keeps kvcalc a command group even when one command is registered
        from kvcalc.out import progress

        progress.QUIET = quiet  # set on every run (in-process runs share the module)

    _root.__doc__ = HELP
    for name, (module, attr) in COMMANDS.items():
        if only is not None and name != only:
            continue
        if listing:
            app.command(name, help=SUMMARIES[name])(_listed(name))
            continue
        obj = getattr(importlib.import_module(module), attr)
        if isinstance(obj, typer.Typer):
            app.add_typer(obj, name=name)
        else:
            app.command(name, cls=getattr(obj, "command_class", None))(obj)
    return app


def _print_version(value: bool) -> None:
    if value:
        from kvcalc.out.version import __version__

        sys.stdout.write(f"kvcalc {__version__}\n")
        raise typer.Exit(0)


def _quiet_stdout() -> None:
    """After a closed pipe (``kvcalc kv | head -1``): point stdout at /dev/null so the final flush is silent."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # in-process runs (tests) have no file descriptor
        pass


class _PipeClosed(Exception):
    """stdout's reader went away. Not an OSError, so click's own EPIPE handler (which exits 1, the code of a
    failed --check) never sees it; :func:`_run` turns it into a quiet exit 0."""


class _PipeGuard:
    """stdout as the commands see it: a closed pipe in write or flush raises :class:`_PipeClosed`."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise _PipeClosed from None

    def flush(self):
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise _PipeClosed from None

    def __getattr__(self, name):  # isatty, fileno, encoding, buffer...: the real stream's
        return getattr(self._stream, name)


def _command_of(argv: list[str]) -> str | None:
    """The command named in argv (its first word), if it is one of ours."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in COMMANDS else None


def _one_line(text: str, limit: int = 1000) -> str:
    """``text`` on one line (a file name or a value may hold newlines), cut to ``limit`` characters."""
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _internal_error_line(e: BaseException) -> str:
    """One line for an unexpected exception: its type and message (first 200 characters)."""
    return f"kvcalc: internal error: {type(e).__name__}: {_one_line(str(e), 200)}; please report\n"


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the app; KvcalcError -> one line on stderr and its exit code; usage errors -> 2;
    Ctrl-C -> 130 quietly; anything else (a bug) -> one ``internal error`` line and exit 3, never a traceback."""
    import warnings

    from kvcalc.out.errors import EXIT_INTERNAL, EXIT_INTERRUPTED

    with warnings.catch_warnings(record=True) as caught:  # no library warning reaches the terminal raw
        warnings.simplefilter("always")
        try:
            code = _run(sys.argv[1:] if argv is None else list(argv))
        except KeyboardInterrupt:
            code = EXIT_INTERRUPTED
        except Exception as e:  # noqa: BLE001 -- the last line of defence: one line, exit 3, never 1
            sys.stderr.write(_internal_error_line(e))
            code = EXIT_INTERNAL
    if code in (0, 1):  # after an error its one line stands alone
        sys.stderr.writelines(warning_notes(caught))
    sys.exit(code)


def warning_notes(caught) -> list[str]:
    """Library warnings as one ``kvcalc: note:`` line each (deduplicated), except numpy's floating-point
    RuntimeWarnings (overflow, invalid value, divide by zero), silenced as harmless: every result passes
    kvcalc.out.finite before output, so an inf or NaN they announce that reaches a figure is an internal error
    (exit 3), and one that does not (np.minimum(inf, budget)) changes nothing shown."""
    lines: list[str] = []
    for w in caught:
        text = str(w.message).strip().splitlines()[0] if str(w.message).strip() else w.category.__name__
        if (issubclass(w.category, RuntimeWarning) and "numpy" in str(w.filename)) or any(
                k in text for k in ("overflow encountered", "invalid value encountered", "divide by zero")):
            continue
        path = str(w.filename).replace("\\", "/")
        where = path.split("site-packages/")[1].split("/")[0] if "site-packages/" in path else \
            path.rsplit("/", 1)[-1].removesuffix(".py")
        line = f"kvcalc: note: {where}: {_one_line(text, 200)}\n"
        if line not in lines:
            lines.append(line)
    return lines


def _run(args: list[str]) -> int:
    """Run the app on ``args`` -> exit code; KvcalcError and click's usage errors become one line on stderr."""
    import os

    from kvcalc.out.errors import EXIT_BAD_INPUT, EXIT_INTERRUPTED, KvcalcError

    # pydantic looks for plugins in every installed distribution's entry points on first validation
    # (~25 ms, more in big environments); kvcalc's presets use none.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    completing = COMPLETE_VAR in os.environ
    only = None if completing else _command_of(args)
    listing = only is None and not completing and (args == [] or (len(args) == 1 and args[0] in HELP_OPTIONS))
    command = typer.main.get_command(build_app(only, listing=listing))
    if any(a in HELP_OPTIONS for a in args) or args in ([], ["presets"]):  # help: options grouped by panel
        from kvcalc.cli.help import group_options

        group_options(command)
    real_stdout, sys.stdout = sys.stdout, _PipeGuard(sys.stdout)
    try:
        rv = command.main(args=args, prog_name="kvcalc", standalone_mode=False)
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers, not at interpreter exit
    except KvcalcError as e:
        sys.stderr.write(f"kvcalc: error: {_one_line(e.message)}\n")
        return e.exit_code
    except (BrokenPipeError, _PipeClosed):  # the reader went away (| head): exit 0 quietly, as the shell expects
        sys.stdout = real_stdout
        _quiet_stdout()
        return 0
    except typer.Abort:  # click turns Ctrl-C into Abort
        return EXIT_INTERRUPTED
    except Exception as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # `kvcalc` or `kvcalc presets` alone: the help, exit 0
            sys.stdout.write(e.format_message() + "\n")
            return 0
        # click's (or typer's vendored click's) usage errors: bad option, missing argument, bad type
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):
            sys.stderr.write(f"kvcalc: error: {_one_line(e.format_message())}\n")
            return EXIT_BAD_INPUT
        raise
    finally:
        sys.stdout = real_stdout
    return rv if isinstance(rv, int) else 0
