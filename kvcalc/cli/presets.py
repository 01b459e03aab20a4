"""``kvcalc presets list|show|validate|schema``: the catalogue, one preset, a user's file, the JSON Schema."""

import sys
from typing import Annotated, Optional

import typer

from kvcalc.cli.common import CheckOpt, FormatOpt

app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The preset catalogue: list, show, validate a file, JSON Schema.\n\n"
                  "Examples:\n\n\b\n  kvcalc presets list models\n  kvcalc presets show deepseek-v4-flash\n"
                  "  kvcalc presets validate my-model.toml\n  kvcalc presets schema models")

KindOpt = Annotated[Optional[str], typer.Option(
    "--kind", "-k", help="models | hardware | links | workloads | scenarios (default: guessed)")]


def _kind(kind: Optional[str]) -> Optional[str]:
    from kvcalc.model.catalog import KINDS
    from kvcalc.out.errors import InputError

    if kind is not None and kind not in KINDS:
        raise InputError(f"--kind: {kind!r} is not one of {', '.join(KINDS)}")
    return kind


@app.command("list")
def list_(kind: Annotated[Optional[str], typer.Argument(help="only this kind")] = None, fmt: FormatOpt = "table",
          check: CheckOpt = None):
    """List the shipped presets with their display names and sources.

    Example:

    \b
      kvcalc presets list models --format json
    """
    from kvcalc.cli.common import emit
    from kvcalc.model.presets_report import list_result

    kinds = [_kind(kind)] if kind else None
    emit(list_result(kinds), fmt, check, False)


@app.command("show")
def show(name: Annotated[str, typer.Argument(help="preset name or TOML path")], kind: KindOpt = None,
         fmt: Annotated[str, typer.Option("--format", "-f", help="table (the TOML text) | json | csv | markdown "
                                          "(validated fields, nested ones dotted)")] = "table"):
    """Show one preset: its TOML text, or its validated fields as JSON, CSV or Markdown.

    Example:

    \b
      kvcalc presets show deepseek-v4-flash
    """
    import dataclasses
    import json

    from kvcalc.cli.common import check_format, emit
    from kvcalc.model.presets_report import find, show_result

    check_format(fmt)
    kind_, path, preset = find(name, _kind(kind))
    if fmt == "json":
        sys.stdout.write(json.dumps({"kind": kind_, "name": path.stem, "path": path.name,
                                     "preset": dataclasses.asdict(preset)}, indent=2) + "\n")
    elif fmt == "table":
        sys.stdout.write(f"# {kind_}/{path.name}\n" + path.read_text())
    else:
        emit(show_result(kind_, path, preset), fmt, None, False)


@app.command("validate")
def validate(files: Annotated[list[str], typer.Argument(help="TOML files to check")], kind: KindOpt = None,
             fmt: FormatOpt = "table", check: CheckOpt = None):
    """Validate preset files: exit 0 and 'FILE: ok (KIND)' per file (or rows file, kind, ok in the other formats),
    or exit 2 with one line naming file, field, reason.

    Example:

    \b
      kvcalc presets validate my-model.toml --kind models
    """
    from kvcalc.cli.common import check_format, emit
    from kvcalc.model.presets_report import validate_file, validate_result

    check_format(fmt)
    checked = [(f, validate_file(f, _kind(kind))) for f in files]
    if fmt == "table" and not check:
        sys.stdout.write("".join(f"{f}: ok ({k})\n" for f, k in checked))
    else:
        emit(validate_result(checked), fmt, check, False)


@app.command("schema")
def schema(kind: Annotated[str, typer.Argument(help="models | hardware | links | workloads | scenarios")] = "models",
           fmt: Annotated[str, typer.Option("--format", "-f", help="json (the JSON Schema) | table | csv | markdown "
                                            "(its top-level fields)")] = "json"):
    """Print the JSON Schema of one preset kind (the TOML files follow it), or a table of its fields.

    Example:

    \b
      kvcalc presets schema models > model.schema.json
    """
    import json

    from kvcalc.cli.common import check_format, emit
    from kvcalc.model.catalog import json_schema
    from kvcalc.model.presets_report import schema_result

    check_format(fmt)
    schema_ = json_schema(_kind(kind))
    if fmt == "json":
        sys.stdout.write(json.dumps(schema_, indent=2) + "\n")
    else:
        emit(schema_result(kind, schema_), fmt, None, False)
