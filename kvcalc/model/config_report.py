"""The ``kvcalc import`` result: what a config.json was read into (layer groups, parameters and weight bytes per
component, the checkpoint's measured size beside the computed one) and what was assumed."""

from __future__ import annotations

from kvcalc.model.config_import import Imported

WEIGHT_COLUMNS = (("component", "component", "text"), ("params", "params", "count"),
                  ("weight_bytes", "weights", "bytes"), ("bytes_per_param", "B/param", "float"))
GROUP_COLUMNS = (("group", "group", "text"), ("kind", "kind", "text"), ("layers", "layers", "int"),
                 ("layout", "layout", "text"), ("kv_bytes_per_token", "KV/token", "bytes_exact"),
                 ("state_bytes", "state/request", "bytes_exact"))


def import_result(imported: Imported, output: str | None = None):
    """Parameters and weight bytes per component (raw counts and bytes) and the layer groups of the preset."""
    from kvcalc.model import attention as att
    from kvcalc.out.results import Column, Result, Table
    from kvcalc.out.units import fmt_bytes

    model = imported.model
    rows = [{"component": k, "params": n, "weight_bytes": b, "bytes_per_param": b / n}
            for k, (n, b) in imported.components.items()]
    total_params = sum(n for n, _ in imported.components.values())
    total_bytes = sum(b for _, b in imported.components.values())
    rows.append({"component": "total (computed)", "params": total_params, "weight_bytes": total_bytes,
                 "bytes_per_param": total_bytes / total_params})
    rows.append({"component": "active per token", "params": round(model.params_active), "weight_bytes": None,
                 "bytes_per_param": None})
    notes = list(imported.notes)
    if imported.measured_weight_bytes is not None:
        m = imported.measured_weight_bytes
        rows.append({"component": "checkpoint (safetensors index total_size)", "params": None,
                     "weight_bytes": m, "bytes_per_param": None})
        notes.append(f"measured checkpoint {fmt_bytes(m)} vs computed {fmt_bytes(total_bytes)} "
                     f"({(total_bytes - m) / m:+.2%})")
    groups = []
    for g in att.resolve_groups(model, att.KvOptions(mtp=True)):
        groups.append({"group": g.name + (" (--mtp)" if g.name == "mtp" else ""), "kind": g.kind,
                       "layers": g.layers, "layout": g.layout,
                       "kv_bytes_per_token": att.stored_bytes(g, 1) if g.window_tokens != 0 else 0.0,
                       "state_bytes": att.state_bytes(g)})
    if output:
        notes.append(f"preset written to {output}")
    notes.insert(0, f"read from {imported.path}")
    main = Table("weights", "Parameters and weight bytes per component",
                 tuple(Column(*c) for c in WEIGHT_COLUMNS), tuple(rows))
    extra = Table("groups", "Layer groups (KV/token = one token's entries in the whole group; state = fixed per "
                  "request)", tuple(Column(*c) for c in GROUP_COLUMNS), tuple(groups))
    inputs = {"config": str(imported.path), "output": output, "preset": imported.preset}
    return Result("import", inputs, main, (extra,), (), tuple(notes))
