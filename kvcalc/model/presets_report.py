"""The preset catalogue as a Result, lookup of a preset of any kind, validation of a user's file."""

from __future__ import annotations

from kvcalc.model import catalog
from kvcalc.out.errors import InputError, PresetNotFound

# keys that identify a kind when --kind is not given
_SIGNATURES = {"layer_groups": "models", "as_stated_kv_bytes_per_token": "models", "hbm_gb": "hardware",
               "latency_us": "links", "classes": "workloads", "workload": "scenarios",
               "matmul_efficiency_max": "calibration"}


def guess_kind(data: dict, path) -> str:
    """The preset kind a parsed TOML file looks like, from its keys."""
    for key, kind in _SIGNATURES.items():
        if key in data:
            return kind
    raise InputError(f"{path}: cannot tell which kind of preset this is; pass --kind")


def validate_file(ref: str, kind: str | None) -> str:
    """Validate a file (or a shipped name) -> its kind; InputError on the first problem."""
    path = catalog.user_path(ref)
    data = catalog.read_toml(path)
    kind = kind or guess_kind(data, path)
    catalog.validate(kind, data, path)
    return kind


def find(name: str, kind: str | None):
    """Find a preset by name (any kind unless given) or path -> (kind, path, preset)."""
    if kind is None and name.endswith(".toml"):
        kind = guess_kind(catalog.read_toml(catalog.user_path(name)), name)
    kinds = [kind] if kind else [k for k in catalog.KINDS if (catalog.presets_root() / k).is_dir()]
    last = None
    for k in kinds:
        try:
            path = catalog.preset_path(k, name)
        except PresetNotFound as e:
            last = e
            continue
        return k, path, catalog.load(k, name)
    if len(kinds) == 1 and last:
        raise last
    everything = [n for k in kinds for n in catalog.names(k)]
    import difflib

    close = difflib.get_close_matches(name, everything, n=3, cutoff=0.5)
    raise PresetNotFound(f"unknown preset {name!r}" + (f"; did you mean {', '.join(close)}?" if close else ""))


def list_result(kinds: list[str] | None = None):
    """Every shipped preset: kind, name, display name, source."""
    from kvcalc.out.results import Column, Result, Table

    rows = []
    for k in kinds or [k for k in catalog.KINDS if (catalog.presets_root() / k).is_dir()]:
        for n in catalog.names(k):
            p = catalog.load(k, n)
            rows.append({"kind": k, "name": n, "display_name": getattr(p, "display_name", n),
                         "source": p.source})
    cols = (Column("kind", "kind", "text"), Column("name", "name", "text"),
            Column("display_name", "description", "text"))
    return Result("presets list", {"kinds": kinds}, Table("presets", "Presets", cols, tuple(rows)))


def _flat(value, prefix: str = ""):
    """(dotted field, value) pairs of a nested dict/list, e.g. layer_groups.0.kind."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _flat(v, f"{prefix}{k}.")
    elif isinstance(value, (list, tuple)) and value:
        for i, v in enumerate(value):
            yield from _flat(v, f"{prefix}{i}.")
    else:
        yield prefix[:-1], value


def _field_table(name: str, title: str, rows: list[dict], keys: tuple[str, ...]):
    from kvcalc.out.results import Column, Table

    return Table(name, title, tuple(Column(k, k, "bool" if k == "required" else "text") for k in keys), tuple(rows))


def show_result(kind: str, path: Path, preset):
    """One preset's validated fields as rows {field, value} (nested fields dotted), for csv/markdown/table."""
    import dataclasses

    from kvcalc.out.results import Result

    rows = [{"field": f, "value": v} for f, v in _flat(dataclasses.asdict(preset))]
    return Result("presets show", {"kind": kind, "name": path.stem, "path": path.name},
                  _field_table("fields", f"{kind}/{path.name}", rows, ("field", "value")))


def validate_result(checked: list[tuple[str, str]]):
    """Rows {file, kind, ok} for files that validated (a bad one stops with InputError before this)."""
    from kvcalc.out.results import Result

    rows = [{"file": f, "kind": k, "ok": True} for f, k in checked]
    return Result("presets validate", {"files": [f for f, _ in checked]},
                  _field_table("validated", "Validated preset files", rows, ("file", "kind")))


def schema_result(kind: str, schema: dict):
    """The schema's top-level fields as rows {field, type, required, description}."""
    from kvcalc.out.results import Result

    required = set(schema.get("required", ()))
    rows = []
    for f, p in schema.get("properties", {}).items():
        types = [x.get("type") or x.get("$ref", "").rsplit("/", 1)[-1] for x in p.get("anyOf", [p])]
        rows.append({"field": f, "type": " | ".join(t for t in types if t) or "any", "required": f in required,
                     "description": p.get("description", "")})
    return Result("presets schema", {"kind": kind},
                  _field_table("fields", f"Fields of a {kind} preset (JSON Schema: --format json)", rows,
                               ("field", "type", "required", "description")))
