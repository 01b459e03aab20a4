"""``kvcalc sweep trace``: a request trace's prefix-cache hit rate over a grid of capacities, block sizes,
policies, models and nodes. Importing this module registers the ``trace`` target with :mod:`kvcalc.serve.sweep`.

Each point's row is the ``kvcalc trace FILE --capacity C -b B --policy P [--model M]`` row for that capacity (with
``replicas`` above 1: the cluster's ``all`` row of ``--replicas N --router R``, each replica of that capacity); with
``hardware`` (and ``model``) the capacity is the node's KV budget after the weights, as ``kvcalc trace --model M
--hardware H --gpus N`` adds it (:mod:`kvcalc.trace.node_cache`). Points that share a file, block size, policy,
model and layout are replayed together in one pass over the trace (``trace_result`` with all their capacities).
"""

from __future__ import annotations

from kvcalc.out.errors import InputError
from kvcalc.serve import sweep as sw
from kvcalc.trace.replicas import ROUTERS
from kvcalc.trace.result import POLICIES

AXES = {
    "file": sw.AxisDef("path"), "capacity": sw.AxisDef("captokens", "tokens"),
    "block-tokens": sw.AxisDef("int", "int", bound="block-tokens"), "policy": sw.choice(*POLICIES),
    "model": sw.MODEL_AXIS, "hardware": sw.AxisDef("preset", choices=("hardware",)),
    "gpus": sw.AxisDef("int", "int", bound="gpus"), "replicas": sw.AxisDef("int", "int", bound="replicas"),
    "router": sw.choice(*ROUTERS), **sw.LAYOUT_AXES,
}
# block-tokens None: the trace's own (kv-cache-tester's block_size), else 512, as kvcalc trace reads it
DEFAULTS = {"block-tokens": None, "policy": "lru", "gpus": 8, "replicas": 1, "router": "round-robin"}
# What replaying costs per byte of trace [s/B], measured on the Mooncake trace (1.1 MB, 3,993 requests) and ten
# copies of it (11 MB) on a loaded 2-core machine, rounded up: FIFO replays every capacity on its own (~130 ns/B
# per point: 50 capacities of the 1.1 MB trace in 7.9 s; LFU and S3-FIFO too, priced as FIFO), LRU serves all capacities from one pass (~20 ns/B per
# point: 50 in 1.45 s) and each set-up (file, block size, policy, model, layout) reads the file once (~0.5 us/B).
FIFO_S_PER_BYTE, LRU_S_PER_BYTE, PASS_S_PER_BYTE = 1.5e-7, 3e-8, 5e-7


def replay_cost(axes, fixed: dict) -> tuple[float, float]:
    """(extra seconds per point, fixed seconds) of a trace sweep: per-point replay by policy, and one pass over the
    file per set-up; a file that cannot be read costs nothing here (it is refused when opened)."""
    import math
    import os

    def size(path) -> float:
        try:
            return float(os.stat(path).st_size)
        except (OSError, ValueError):
            return 0.0

    varied = {a.name: a.values for a in axes}
    files = varied.get("file", [fixed.get("file")] if fixed.get("file") else [])
    mean_size = sum(size(f) for f in files) / len(files) if files else 0.0
    policies = varied.get("policy", [fixed.get("policy", DEFAULTS["policy"])])
    fifo = sum(p != "lru" for p in policies) / len(policies)  # every policy but LRU replays capacity by capacity
    per_point = mean_size * (fifo * FIFO_S_PER_BYTE + (1 - fifo) * LRU_S_PER_BYTE)
    setups = math.prod(len(a) for a in axes if a.name not in ("capacity", "hardware", "gpus"))
    return per_point, setups * mean_size * PASS_S_PER_BYTE


def _spec(s: dict, opts):
    from kvcalc.model import catalog
    from kvcalc.trace.node_cache import node_cache_tokens
    from kvcalc.trace.report import CapacitySpec

    if "hardware" in s:
        if "model" not in s:
            raise InputError("sweep trace: hardware needs a model (--set model=... or --vary model=...)")
        if "capacity" in s:
            raise InputError("sweep trace: give capacity or hardware (the node's KV budget), not both")
        tokens = node_cache_tokens(catalog.load_model(s["model"]), catalog.load_hardware(s["hardware"]), s["gpus"],
                                   s["block-tokens"], opts)
        return CapacitySpec(f"{s['gpus']} x {catalog.name_of(s['hardware'])}", tokens=tokens)
    if "capacity" not in s:
        raise InputError("sweep trace: vary or set capacity (tokens, 3m = 3,000,000), or hardware with a model")
    return CapacitySpec(str(s["capacity"]), tokens=s["capacity"])


def trace_points(settings: list[dict]) -> list[list[dict]]:
    """Each point's ``kvcalc trace`` row (one per point), replaying each distinct trace set-up once."""
    from kvcalc.model import catalog
    from kvcalc.trace.report import TraceInputs, trace_result

    from kvcalc.trace.formats import trace_block_tokens

    groups: dict[tuple, list[int]] = {}
    settings = [dict(s) for s in settings]
    blocks: dict[tuple, int] = {}  # (file, block-tokens given) -> block size: each file is looked at once
    for p, s in enumerate(settings):
        if "file" not in s:
            raise InputError("sweep trace: give the trace with --set file=PATH (or --vary file=A,B)")
        given = (s["file"], s.get("block-tokens"))
        if given not in blocks:
            blocks[given] = trace_block_tokens(s["file"], "auto", s.get("block-tokens"))
        s["block-tokens"] = blocks[given]
        key = (s["file"], s["block-tokens"], s["policy"], s.get("model"), s["replicas"], s["router"],
               *(s.get(k) for k in sw.LAYOUT_AXES))
        groups.setdefault(key, []).append(p)
    out: list[list[dict]] = [[] for _ in settings]
    for points in groups.values():
        s = settings[points[0]]
        opts = sw.kv_options_of(s)
        specs = tuple(_spec(settings[p], opts) for p in points)
        model = (catalog.name_of(s["model"]), catalog.load_model(s["model"])) if "model" in s else None
        inp = TraceInputs(path=s["file"], capacities=specs, block_tokens=s["block-tokens"], policy=s["policy"],
                          trace_format="auto", replicas=s["replicas"], router=s["router"])
        if s["replicas"] == 1:
            rows = trace_result(inp, model, opts).rows
        else:
            from kvcalc.trace.replica_report import replica_result

            rows = [r for r in replica_result(inp, model, opts).rows if r["replica"] == "all"]
        for p, row in zip(points, rows):
            out[p] = [row]
    return out


def _register() -> None:
    from kvcalc.trace.report import BYTES_COLUMN, MAIN_COLUMNS

    sw.AXES["trace"] = AXES
    sw.DEFAULTS["trace"] = DEFAULTS
    sw.DEFAULT_Y["trace"] = "token_hit_rate"
    sw.POINT_BATCHES["trace"] = trace_points
    sw.EXTRA_COST["trace"] = replay_cost
    sw.COLUMNS["trace"] = tuple((c.key, c.title, c.kind) for c in (*MAIN_COLUMNS, BYTES_COLUMN))


_register()
