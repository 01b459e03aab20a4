"""``kvcalc import``: read a Hugging Face config.json into a model preset and say what was mapped."""

from typing import Annotated, Optional

import typer

from kvcalc.cli.common import CheckOpt, FormatOpt


def import_(
    config: Annotated[str, typer.Argument(help="a config.json, or a model folder holding one (local files only)",
                                          show_default=False)],
    output: Annotated[Optional[str], typer.Option("--output", "-o", help="write the preset TOML to this file")] = None,
    source: Annotated[Optional[str], typer.Option(
        "--source", help="where the config came from (starts the preset's source), e.g. a Hugging Face URL")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="the preset's display name (default: the folder's)")]
    = None,
    fmt: FormatOpt = "table", check: CheckOpt = None,
):
    """Read a model's config.json into a preset: layer groups, parameters, weight bytes per component.

    Every command takes the config.json (or its folder) wherever it takes a model.

    --output writes the equivalent preset (same results) to review and commit.

    Examples:

    \b
      kvcalc import ./Qwen3-32B/config.json
      kvcalc import ./gpt-oss-120b --output presets/gpt-oss-120b.toml
      kvcalc kv ./gpt-oss-120b/config.json --context 4k,128k
    """
    from pathlib import Path

    from kvcalc.cli.common import check_format, emit
    from kvcalc.model.config_import import import_config
    from kvcalc.model.config_report import import_result
    from kvcalc.model.preset_toml import to_toml
    from kvcalc.out.errors import InputError

    check_format(fmt)
    imported = import_config(config, origin=source, name=name)
    result = import_result(imported, output)
    if output:
        try:
            Path(output).write_text(to_toml(imported.preset, imported.notes), encoding="utf-8")
        except OSError as e:
            raise InputError(f"--output: cannot write {output}: {e.strerror}") from None
    emit(result, fmt, check, False)
