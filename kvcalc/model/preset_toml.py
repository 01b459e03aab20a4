"""Write a model preset (plain dicts, lists, numbers, strings, booleans) as TOML that tomllib reads back equal.

Top-level scalars first, then one ``[[layer_groups]]`` table per group (a nested table such as an indexer is
written inline). Floats use Python's shortest round-trip repr, so reading the file gives the same numbers.
"""

from __future__ import annotations

import json


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)  # a JSON string is a valid TOML basic string
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} as TOML")


def to_toml(preset: dict, comments: list[str] | tuple = ()) -> str:
    """The preset as TOML text, ``comments`` as leading ``#`` lines."""
    lines = [f"# {c}" for c in comments]
    tables = {k: v for k, v in preset.items() if isinstance(v, list) and v and all(isinstance(x, dict) for x in v)}
    lines += [f"{k} = {_value(v)}" for k, v in preset.items() if k not in tables]
    for name, rows in tables.items():
        for row in rows:
            lines += ["", f"[[{name}]]"] + [f"{k} = {_value(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n"
