"""``kvcalc presets list|show|validate|schema``: the catalogue, one preset, a user's file, the JSON Schema."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer

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
def list_(kind: Annotated[Optional[str], typer.Argument(help="only this kind")] = None,
          fmt: Annotated[str, typer.Option("--format", "-f", help="table | json | csv | markdown")] = "table"):
    """List the shipped presets with their display names and sources.

    Example: kvcalc presets list models --format json
    """
    from kvcalc.cli.common import emit
    from kvcalc.model.presets_report import list_result

    kinds = [_kind(kind)] if kind else None
    emit(list_result(kinds), fmt, None, False)


@app.command("show")
def show(name: Annotated[str, typer.Argument(help="preset name or TOML path")], kind: KindOpt = None,
         fmt: Annotated[str, typer.Option("--format", "-f", help="table (the TOML text) | json")] = "table"):
    """Show one preset: its TOML text, or its validated fields as JSON.

    Example: kvcalc presets show deepseek-v4-flash
    """
    import dataclasses
    import json

    from kvcalc.model.presets_report import find

    kind_, path, preset = find(name, _kind(kind))
    if fmt == "json":
        sys.stdout.write(json.dumps({"kind": kind_, "name": path.stem, "path": path.name,
                                     "preset": dataclasses.asdict(preset)}, indent=2) + "\n")
    elif fmt == "table":
        sys.stdout.write(f"# {kind_}/{path.name}\n" + path.read_text())
    else:
        from kvcalc.out.errors import InputError

        raise InputError(f"--format: {fmt!r} is not one of table, json for 'presets show'")


@app.command("validate")
def validate(files: Annotated[list[str], typer.Argument(help="TOML files to check")], kind: KindOpt = None):
    """Validate preset files: exit 0 and 'ok' per file, or exit 2 with one line naming file, field, reason.

    Example: kvcalc presets validate my-model.toml --kind models
    """
    from kvcalc.model.presets_report import validate_file

    for f in files:
        kind_ = validate_file(f, _kind(kind))
        sys.stdout.write(f"{f}: ok ({kind_})\n")


@app.command("schema")
def schema(kind: Annotated[str, typer.Argument(help="models | hardware | links | workloads | scenarios")] = "models"):
    """Print the JSON Schema of one preset kind (the TOML files follow it).

    Example: kvcalc presets schema models > model.schema.json
    """
    import json

    from kvcalc.model.catalog import json_schema

    sys.stdout.write(json.dumps(json_schema(_kind(kind)), indent=2) + "\n")
