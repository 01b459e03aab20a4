"""Sweeps: one command's closed form evaluated over the product of several input axes (``kvcalc sweep``).

Every row of a sweep is the row the single-point command (``kvcalc kv``, ``capacity``, ``cost``, ``compare``)
prints for the same inputs, prefixed by the varied inputs as columns; rows come in product order, the first
``--vary`` axis slowest. ``kv`` and ``capacity`` are vectorised: axes that change the model, hardware, link or a
layout are looped, and each inner grid (context, GPUs, HBM utilisation, reserve) is one numpy evaluation of the
same functions the single-point commands call (:func:`kvcalc.model.kv.kv_arrays`,
:func:`kvcalc.memory.capacity.capacity_arrays`). ``cost`` and ``compare`` loop the scalar path point by point.
"""

from __future__ import annotations

import difflib
import itertools
import math
import re
from dataclasses import dataclass
from typing import Any, get_args

from kvcalc.model.schema import IndexerDtype, KvDtype, MlaLayout, StateDtype
from kvcalc.model.weights_dtype import WEIGHT_DTYPES
from kvcalc.out import units
from kvcalc.out.errors import InputError
from kvcalc.out.sweep_spec import MAX_POINTS, AxisValues, Budget, check_grid, parse_axis
from kvcalc.serve.sweep_cost import (CHUNK_POINTS, EXTRA_COST, LOOP_CHUNK, POINT_COST, Output,  # noqa: F401
                                     budget_for, check_cost)

TARGETS = ("kv", "capacity", "cost", "compare", "trace")  # trace: registered by kvcalc.trace.sweep


@dataclass(frozen=True)
class AxisDef:
    """An input a sweep can vary or fix: how its values are read and shown."""

    kind: str                    # tokens | captokens | int | fraction | bytes | float | choice | preset | path
    column_kind: str = "text"    # render kind of its column (results.py)
    choices: tuple = ()          # allowed values (choice) or the preset kind (preset: ("models",))
    vector: bool = False         # evaluated as a numpy array inside one call (kv, capacity)
    bound: str = ""              # the option whose bound it shares (units.OPTION_BOUNDS), e.g. "gpus"

    @property
    def numeric(self) -> bool:
        return self.kind not in ("choice", "preset", "path")


def choice(*values) -> AxisDef:
    """An axis of named choices."""
    return AxisDef("choice", choices=values)


LAYOUT_AXES = {"kv-dtype": choice(*get_args(KvDtype)), "mla-layout": choice(*get_args(MlaLayout)),
           "indexer-dtype": choice(*get_args(IndexerDtype)), "state-dtype": choice(*get_args(StateDtype)),
           "mtp": choice("off", "on"),
           # the grouped-INT4 formats' parameters (kv --kv-group-size / --kv-residual-tokens), same bounds
           "kv-group-size": AxisDef("int", "int", bound="kv-group-size"),
           "kv-residual-tokens": AxisDef("int", "tokens", bound="kv-residual-tokens")}
MODEL_AXIS = AxisDef("preset", choices=("models",))
_CONTEXT = AxisDef("tokens", "tokens", vector=True)
_SCENARIO_AXES = {
    "scenario": AxisDef("preset", choices=("scenarios",)), "model": MODEL_AXIS,
    "hardware": AxisDef("preset", choices=("hardware",)), "gpus": AxisDef("int", "int", bound="gpus"),
    "workload": AxisDef("preset", choices=("workloads",)),
    "price-per-gpu-hour": AxisDef("float", "usd", bound="price-per-gpu-hour"),
    "mfu-prefill": AxisDef("fraction", "percent", bound="mfu-prefill"),
    "decode-tokens-per-s": AxisDef("float", "tokens_per_s", bound="decode-tokens-per-s"),
    "warm": choice("cold", "warm"), "attention-flops": choice("on", "off"),
    "pd-link": AxisDef("preset", choices=("links",)),
    "requests": AxisDef("int", "int", bound="requests"), "context": AxisDef("tokens", "tokens"),
    "output-tokens": AxisDef("int", "tokens", bound="output-tokens"),
    "shared-prefix": AxisDef("tokens", "tokens", bound="zero"),
    "weights-dtype": choice(*WEIGHT_DTYPES), "kv-compression": AxisDef("float", "float", bound="kv-compression"),
    **LAYOUT_AXES}
AXES: dict[str, dict[str, AxisDef]] = {
    "kv": {"model": MODEL_AXIS, "context": _CONTEXT, **LAYOUT_AXES},
    "capacity": {
        "model": MODEL_AXIS, "hardware": AxisDef("preset", choices=("hardware",)),
        "link": AxisDef("preset", choices=("links",)), "context": _CONTEXT,
        "gpus": AxisDef("int", "int", vector=True, bound="gpus"),
        "hbm-utilization": AxisDef("fraction", "percent", vector=True),
        "reserve": AxisDef("bytes", "bytes", vector=True, bound="zero"),
        "block-tokens": AxisDef("int", "int", bound="block-tokens"),
        "attention": choice("tp", "dp"), "bandwidth": choice("measured", "theoretical"), **LAYOUT_AXES},
    "cost": {"strategy": choice("lru", "prefix-tree"), **_SCENARIO_AXES},
    "compare": _SCENARIO_AXES,
}
DEFAULTS: dict[str, dict[str, Any]] = {
    "kv": {"model": "deepseek-v4-flash", "context": 4096},
    "capacity": {"model": "deepseek-v4-flash", "hardware": "h100-sxm", "gpus": 8, "context": 4096,
                 "hbm-utilization": 0.9, "reserve": 0.0, "block-tokens": 16, "attention": "tp",
                 "bandwidth": "measured"},
    "cost": {"scenario": None, "strategy": "prefix-tree"},   # None: article, or derived with --model/--hardware
    "compare": {"scenario": None},
}
# the output field a chart shows when --y is not given
DEFAULT_Y = {"kv": "kv_bytes_per_request", "capacity": "max_requests", "cost": "usd_per_mtok_blended",
             "compare": "usd_per_mtok_blended"}


def axis_def(target: str, name: str, flag: str) -> AxisDef:
    """The definition of input ``name`` for ``target``; InputError with close matches when unknown."""
    known = AXES[target]
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"did you mean {', '.join(close)}?" if close else f"one of {', '.join(known)}"
        raise InputError(f"{flag} {name}: not an input of sweep {target}; {hint}")
    return known[name]


def parse_value(d: AxisDef, text: str, what: str):
    """One value of an axis from text, bounded like the single-point command's option (InputError naming it):
    the bound of the option ``d.bound`` names (units.OPTION_BOUNDS; "zero": any size from 0)."""
    zero_ok = d.bound == "zero"
    if d.kind == "tokens":
        return units.parse_tokens(text, what, allow_zero=zero_ok)
    if d.kind == "captokens":  # cache capacities: decimal, 3m = 3,000,000
        return units.parse_token_capacity(text, what)
    if d.kind == "path":
        from pathlib import Path

        if not Path(text).expanduser().is_file():
            raise InputError(f"{what}: no such file: {text}")
        return text
    if d.kind in ("int", "float"):
        pattern = r"[0-9]+" if d.kind == "int" else r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?"
        if not re.fullmatch(pattern, text.strip()):
            raise InputError(f"{what}: cannot read {text!r} as {'a whole number' if d.kind == 'int' else 'a number'}")
        v = int(text) if d.kind == "int" else float(text)
        if len(text) > 400:  # int('9' * 5000) would take long and fail past 4,300 digits: absurd either way
            raise InputError(f"{what}: a {len(text)}-digit number is absurdly large")
        if d.bound in units.OPTION_BOUNDS:
            units.check_option(d.bound, v, what)
        else:
            units.check_positive(v, what, allow_zero=zero_ok)
        return v
    if d.kind == "fraction":
        return units.parse_fraction(text, what, units.option_minimum(d.bound) if d.bound in units.OPTION_BOUNDS
                                    else None)
    if d.kind == "bytes":
        if zero_ok and re.fullmatch(r"\s*0*\.?0*\s*[kmgt]?i?b?\s*", text, re.IGNORECASE):
            return 0.0  # a zero reserve, in any unit
        return units.parse_bytes(text, what)
    if d.kind == "choice":
        if text not in d.choices:
            raise InputError(f"{what}: {text!r} is not one of {', '.join(d.choices)}")
        return text
    from kvcalc.model import catalog

    # PresetNotFound lists close matches; a model may also be a config.json, as wherever a model is taken
    catalog.load_model(text) if d.choices[0] == "models" else catalog.load(d.choices[0], text)
    return text


def parse_axes(target: str, specs: list[str], max_points: int = MAX_POINTS,
               limits: Budget | None = None, output: Output | None = None) -> list[AxisValues]:
    """``--vary NAME=SPEC`` texts -> axes in the order given; each axis and the grid are counted against
    ``max_points`` and priced against ``limits`` (memory, seconds) as written in ``output`` (default: a table)
    before any point is made."""
    from kvcalc.out.sweep_spec import split_assignment

    if target not in TARGETS:
        raise InputError(f"sweep: target {target!r} is not one of {', '.join(TARGETS)}")
    if target not in AXES:
        raise InputError(f"sweep {target}: not registered (import kvcalc.trace.sweep first)")
    import dataclasses

    budget = dataclasses.replace(budget_for(target, limits, output), max_points=max_points)
    axes, seen = [], set()
    for text in specs:
        name, spec = split_assignment(text, "--vary")
        d = axis_def(target, name, "--vary")
        if name in seen:
            raise InputError(f"--vary {name}: given twice; list every value in one --vary")
        seen.add(name)
        axes.append(parse_axis(name, spec, lambda t, d=d, n=name: parse_value(d, t, f"--vary {n}"), d.numeric,
                               integer=d.kind in ("tokens", "captokens", "int"), budget=budget))
    if not axes:
        raise InputError("sweep: give at least one --vary NAME=SPEC, e.g. --vary context=1k..1m:log20")
    check_grid(axes, max_points, budget)
    return axes


def parse_fixed(target: str, texts: list[str], varied: list[AxisValues],
                options: tuple[tuple[str, str, str], ...] = ()) -> dict[str, Any]:
    """``--set NAME=VALUE`` texts, and the target's own options given to the sweep (``options``: (name, flag as
    typed, value text), e.g. ("model", "--model", "llama-3-70b")) -> {name: value}; an input is given once,
    fixed or varied."""
    from kvcalc.out.sweep_spec import split_assignment

    out: dict[str, Any] = {}
    names = {a.name for a in varied}
    given = [(*split_assignment(text, "--set"), None) for text in texts] + [(n, v, f) for n, f, v in options]
    for name, value, flag in given:
        what = flag or f"--set {name}"
        d = axis_def(target, name, "--set") if flag is None else AXES[target][name]
        if name in names:
            raise InputError(f"{what}: also given with --vary {name}; give it once")
        if name in out:
            raise InputError(f"{what}: {name} is already fixed (--set {name} and {flag or '--' + name}); give it once")
        out[name] = parse_value(d, value, what)
    return out


def column_key(name: str) -> str:
    """Axis name -> its column in the rows (``kv-dtype`` -> ``kv_dtype``)."""
    return name.replace("-", "_")


def _shown(d: AxisDef, v):
    if d.kind == "preset":
        from kvcalc.model import catalog

        return catalog.name_of(v)
    return v


def kv_options_of(s: dict):
    """The layout choices among a point's settings -> KvOptions."""
    from kvcalc.model.attention import KvOptions

    from kvcalc.model import kv_formats

    return KvOptions(kv_dtype=s.get("kv-dtype"), mla_layout=s.get("mla-layout"),
                     indexer_dtype=s.get("indexer-dtype"), mtp=s.get("mtp") == "on", state_dtype=s.get("state-dtype"),
                     kv_group_size=s.get("kv-group-size", kv_formats.DEFAULT_GROUP_SIZE),
                     kv_residual_tokens=s.get("kv-residual-tokens", kv_formats.DEFAULT_RESIDUAL_TOKENS))


def kv_point(s: dict, vec: dict) -> dict:
    """The ``kvcalc kv`` row for settings ``s``; ``vec`` may hold a numpy array of contexts."""
    from kvcalc.model import attention as att
    from kvcalc.model import catalog
    from kvcalc.model.kv import kv_arrays

    tokens = vec.get("context", s["context"])
    groups = att.resolve_groups(catalog.load_model(s["model"]), kv_options_of(s))
    return {"model": catalog.name_of(s["model"]), "context_tokens": tokens} | kv_arrays(groups, tokens)


def capacity_point(s: dict, vec: dict) -> dict:
    """The ``kvcalc capacity`` row for settings ``s``; ``vec`` may hold numpy arrays of the vector inputs."""
    from kvcalc.memory.capacity import ROW_KEYS, CapacityInputs, capacity_arrays, capacity_static, page_in_block
    from kvcalc.model import attention as att
    from kvcalc.model import catalog

    model, hw = catalog.load_model(s["model"]), catalog.load_hardware(s["hardware"])
    link_ref = s.get("link") or hw.host_link
    inp = CapacityInputs(attention=s["attention"], block_tokens=s["block-tokens"], bandwidth=s["bandwidth"])
    groups = att.resolve_groups(model, kv_options_of(s))
    v = {k: vec.get(k, s[k]) for k in ("context", "gpus", "hbm-utilization", "reserve")}
    link = catalog.load_link(link_ref)
    parts = capacity_static(catalog.name_of(s["model"]), model, groups, catalog.name_of(s["hardware"]), hw,
                            catalog.name_of(link_ref), link, inp) | capacity_arrays(
        groups, model.weight_bytes, hw.device_memory_bytes, v["context"], v["gpus"], v["hbm-utilization"], v["reserve"],
        s["attention"], block=page_in_block(model, link, inp))
    return {k: parts[k] for k in ROW_KEYS}


def scenario_rows(target: str, s: dict) -> list[dict]:
    """The ``kvcalc cost`` / ``compare`` main rows for settings ``s`` (one point, the scalar path)."""
    from kvcalc.serve.cost import compare_result, cost_result
    from kvcalc.serve.scenario import Overrides, resolve
    from kvcalc.serve.workload import inline_workload

    inline = None
    if any(k in s for k in ("requests", "context", "shared-prefix", "output-tokens")):
        if "workload" in s:
            raise InputError("sweep: give a workload preset or requests/context/shared-prefix, not both")
        if "requests" not in s or "context" not in s:
            raise InputError("sweep: an inline workload needs both requests and context (--set or --vary)")
        shared = [(s["shared-prefix"], 1)] if s.get("shared-prefix") else []
        inline = inline_workload(s["requests"], s["context"], s.get("output-tokens", 500), shared)
    o = Overrides(model=s.get("model"), hardware=s.get("hardware"), gpus=s.get("gpus"), workload=s.get("workload"),
                  inline_workload=inline, usd_per_gpu_hour=s.get("price-per-gpu-hour"),
                  mfu_prefill=s.get("mfu-prefill"), decode_tokens_per_s=s.get("decode-tokens-per-s"),
                  warm=None if "warm" not in s else s["warm"] == "warm",
                  attention_flops=None if "attention-flops" not in s else s["attention-flops"] == "on",
                  kv_options=kv_options_of(s), pd_link=s.get("pd-link"), weights_dtype=s.get("weights-dtype"),
                  kv_compression=s.get("kv-compression"))
    inp = resolve(s["scenario"], o)
    result = cost_result(inp, s["strategy"]) if target == "cost" else compare_result(inp)
    return list(result.rows)


# target -> (axis settings of every point, in order) -> each point's rows; targets above serve register here
POINT_BATCHES: dict[str, Any] = {}
# target -> the columns (key, title, kind) its rows show, for targets registered from above serve
COLUMNS: dict[str, tuple] = {}


def _columns_of(target: str):
    if target in COLUMNS:
        return COLUMNS[target]
    if target == "kv":
        from kvcalc.model.kv import KV_COLUMNS as cols
    elif target == "capacity":
        from kvcalc.memory.capacity import CAPACITY_COLUMNS as cols
    else:
        from kvcalc.serve.cost import COST_COLUMNS as cols
    return cols


def _grid_index(axes: list[AxisValues], lo: int = 0, hi: int | None = None):
    """Per axis, the value index of grid points ``lo`` to ``hi`` (default: all) in product order (first axis
    slowest) [int arrays, one row per axis]."""
    import numpy as np

    sizes = [len(a) for a in axes]
    if lo == 0 and hi is None:
        return np.indices(sizes).reshape(len(sizes), -1)
    return np.stack(np.unravel_index(np.arange(lo, hi), sizes)).reshape(len(sizes), -1)


def evaluate_columns(target: str, axes: list[AxisValues], fixed: dict, idx=None) -> dict[str, Any]:
    """kv or capacity over the grid points ``idx`` (default: the whole grid; see _grid_index) -> {field: numpy
    array or list, one entry per point}: the looped axes (presets, layouts) in Python, the vector axes as one numpy
    call per looped combination."""
    import numpy as np

    defs = AXES[target]
    point = kv_point if target == "kv" else capacity_point
    idx = _grid_index(axes) if idx is None else idx
    n = idx.shape[1]
    base = DEFAULTS[target] | fixed
    looped = [i for i, a in enumerate(axes) if not defs[a.name].vector]
    cols: dict[str, Any] = {}
    for combo in itertools.product(*(np.unique(idx[i]).tolist() for i in looped)):
        mask = np.ones(n, dtype=bool)
        s = dict(base)
        for i, j in zip(looped, combo):
            mask &= idx[i] == j
            s[axes[i].name] = axes[i].values[j]
        sel = np.flatnonzero(mask) if looped else slice(None)
        if looped and not sel.size:
            continue
        vec = {a.name: np.asarray(a.values)[idx[i][sel]] for i, a in enumerate(axes) if defs[a.name].vector}
        for k, v in point(s, vec).items():
            if k not in cols:
                cols[k] = np.empty(n, dtype=object if isinstance(v, str) else np.asarray(v).dtype)
            elif np.asarray(v).dtype.kind == "f" and cols[k].dtype.kind in "iub":
                cols[k] = cols[k].astype(np.float64)
            cols[k][sel] = v
    return cols


def _as_rows(cols: dict[str, Any], n: int) -> list[dict]:
    lists = {k: v.tolist() for k, v in cols.items()}
    keys = list(lists)
    return [dict(zip(keys, vals)) for vals in zip(*(lists[k] for k in keys))] if keys else [{}] * n


def _prefix(target: str, axes: list[AxisValues], idx) -> dict[str, Any]:
    """The varied inputs' columns (raw values, presets by name) of the grid points ``idx``."""
    import numpy as np

    defs = AXES[target]
    return {column_key(a.name): np.asarray([_shown(defs[a.name], v) for v in a.values]
                                           if not a.numeric else a.values, dtype=object if not a.numeric
                                           else None)[idx[i]] for i, a in enumerate(axes)}


def _settings(target: str, axes: list[AxisValues], fixed: dict, idx, p: int) -> dict:
    """The inputs of grid point ``p`` of ``idx``: the defaults, the fixed inputs and the point's axis values."""
    s = DEFAULTS[target] | fixed
    for i, a in enumerate(axes):
        v = a.values[idx[i][p]]
        s[a.name] = v.item() if a.numeric else v
    return s


STREAMED_TARGETS = ("kv", "capacity", "cost", "compare")  # trace replays its set-ups over the whole grid at once
# cost and compare rows differ in keys from point to point (the serving model's TTFT/TPOT/throughput fields appear
# only where it runs, e.g. --vary scenario=article,v4-flash-8xh100): CSV and Markdown must write the header first,
# so those hold their rows (a looped grid is small: its time budget caps it at a few thousand points); JSON streams
KEYED_ROWS_ONLY = ("cost", "compare")


def streams(target: str, fmt: str) -> bool:
    """Whether a sweep of ``target`` in ``fmt`` is written chunk by chunk (see STREAMED_TARGETS, KEYED_ROWS_ONLY)."""
    from kvcalc.out.render import STREAMED

    return fmt in STREAMED and target in STREAMED_TARGETS and (target not in KEYED_ROWS_ONLY or fmt == "json")


def row_chunks(target: str, axes: list[AxisValues], fixed: dict, points: int | None = None):
    """Every point's rows in product order, each prefixed by the varied inputs (raw values), as lists of rows:
    ``points`` grid points at a time (default: CHUNK_POINTS for kv/capacity, LOOP_CHUNK for cost/compare; the
    whole grid at once for trace, whose set-ups replay all their capacities in one pass)."""
    n = math.prod(len(a) for a in axes)
    if target not in STREAMED_TARGETS:
        yield sweep_rows(target, axes, fixed)
        return
    vector = target in ("kv", "capacity")
    step = points or (CHUNK_POINTS if vector else LOOP_CHUNK)
    from kvcalc.out import progress

    tick = progress.counter(n, "points")
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        idx = _grid_index(axes, lo, hi)
        if vector:
            rows = _as_rows(_prefix(target, axes, idx) | evaluate_columns(target, axes, fixed, idx), hi - lo)
        else:
            heads = _as_rows(_prefix(target, axes, idx), hi - lo)
            rows = [h | r for p, h in enumerate(heads) for r in scenario_rows(target, _settings(target, axes, fixed,
                                                                                                 idx, p))]
        if tick is not None:
            tick(hi - lo)
        yield rows


def sweep_rows(target: str, axes: list[AxisValues], fixed: dict) -> list[dict]:
    """Every point's rows in product order, each prefixed by the varied inputs (raw values)."""
    idx = _grid_index(axes)
    n = idx.shape[1]
    prefix = _prefix(target, axes, idx)
    if target in ("kv", "capacity"):  # one dict per row: the same keys, order and values as heads[i] | body[i]
        return _as_rows(prefix | evaluate_columns(target, axes, fixed, idx), n)
    heads = _as_rows(prefix, n)
    settings = [_settings(target, axes, fixed, idx, p) for p in range(n)]
    from kvcalc.out import progress

    batch = POINT_BATCHES.get(target) or (lambda ss: [scenario_rows(target, s) for s in progress.track(ss)])
    return [h | r for h, rows in zip(heads, batch(settings)) for r in rows]


def sweep_result(target: str, axes: list[AxisValues], fixed: dict, limits: Budget | None = None,
                 output: Output | None = None):
    """The ``kvcalc sweep`` result: one row per grid point (compare: per strategy), varied inputs first; refused
    first when its estimated cost, written as ``output`` (default: a table), exceeds ``limits`` (check_cost)."""
    check_cost(target, axes, fixed, limits, output)
    rows = sweep_rows(target, axes, fixed)
    return _result(target, axes, fixed, rows, rows)


def sweep_stream(target: str, axes: list[AxisValues], fixed: dict, limits: Budget | None = None,
                 output: Output | None = None, points: int | None = None):
    """(the result without its main rows, the first chunk of rows, every chunk of rows): :func:`sweep_result` held
    one chunk at a time
    (render.write_chunks writes the same bytes). The first chunk is computed here, as are, when the scenario is
    varied, the first point of each scenario: the model, hardware and GPUs the scenario chose (named in the
    inputs, which JSON writes before the rows) depend on nothing else."""
    from itertools import chain

    import dataclasses

    check_cost(target, axes, fixed, limits, dataclasses.replace(output or Output("json"), streamed=True))
    chunks = row_chunks(target, axes, fixed, points)
    first = next(chunks)
    seen = list(first)
    names = [a.name for a in axes]
    if target in ("cost", "compare") and "scenario" in names:
        i = names.index("scenario")
        stride = math.prod(len(a) for a in axes[i + 1:])
        for j in range(len(axes[i])):
            idx = _grid_index(axes, j * stride, j * stride + 1)
            seen += scenario_rows(target, _settings(target, axes, fixed, idx, 0))
    return _result(target, axes, fixed, seen, ()), first, chain([first], chunks)


def _result(target: str, axes: list[AxisValues], fixed: dict, seen, rows):
    """The sweep's Result with main rows ``rows``; ``seen``: rows that show what the scenario chose."""
    from kvcalc.out.results import Column, Result, Table

    defs = AXES[target]
    axis_cols = [Column(column_key(a.name), a.name, defs[a.name].column_kind) for a in axes]
    keys = {c.key for c in axis_cols}
    cols = tuple(axis_cols + [Column(*c) for c in _columns_of(target) if c[0] not in keys])
    shown = {k: _shown(defs[k], v) for k, v in (DEFAULTS[target] | fixed).items()
             if k not in {a.name for a in axes} and v is not None}
    inputs = {"target": target, "axes": {a.name: [_shown(defs[a.name], v) for v in
                                                  (a.values.tolist() if a.numeric else a.values)] for a in axes},
              "fixed": shown, "points": math.prod(len(a) for a in axes)}
    for k in ("model", "hardware", "gpus"):  # name what the scenario chose when the user did not
        same = {r.get(k) for r in seen}
        if k not in shown and k not in {a.name for a in axes} and len(same) == 1 and None not in same:
            shown[k] = same.pop()
    title = (f"sweep {target} over " + " x ".join(f"{len(a)} {a.name}" for a in axes)
             + (": " + ", ".join(f"{k}={v}" for k, v in shown.items()) if shown else ""))
    notes = (f"each row equals `kvcalc {target}` with the same inputs; rows in the order of the --vary axes, "
             "the first slowest",)
    return Result("sweep", inputs, Table("sweep", title, cols, tuple(rows)), (), (), notes)
