"""Plain help (click's formatter, no rich/markdown import) with options grouped under their panels.

typer groups options by ``rich_help_panel`` only in its rich help, which imports markdown and pygments (~100 ms);
this keeps the plain formatter and adds the panel headings (Options, Scenario overrides, KV layout, Output, ...).
"""

import types


def _format_options(self, ctx, formatter) -> None:
    sections: dict[str, list] = {}
    for param in self.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        title = ("Arguments" if param.param_type_name == "argument" else
                 getattr(param, "rich_help_panel", None) or "Options")
        sections.setdefault(title, []).append(record)
    for title, records in sections.items():
        with formatter.section(title):
            formatter.write_dl(records)


def _no_hyphen_breaks() -> None:
    """Wrap help text at spaces only, so ``--skip-bad`` in a sentence never becomes ``--skip-`` / ``bad``: click's
    TextWrapper (vendored in typer) splits words with the standard library's hyphen-aware pattern."""
    import textwrap

    try:
        from typer._click._textwrap import TextWrapper
    except ImportError:  # another typer layout: its help may break at hyphens, nothing else changes
        return
    TextWrapper.wordsep_re = textwrap.TextWrapper.wordsep_simple_re


def group_options(command) -> None:
    """Give ``command`` and every subcommand under it the panel-grouped options section (and wrap its help at
    spaces only)."""
    _no_hyphen_breaks()
    if getattr(command, "params", None) is not None and not hasattr(command, "commands"):
        command.format_options = types.MethodType(_format_options, command)
    for sub in getattr(command, "commands", {}).values():
        group_options(sub)
