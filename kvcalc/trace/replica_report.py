"""``kvcalc trace --replicas N --router R``: the Result of a replay over N replicas behind a router
(:mod:`kvcalc.trace.replicas`): one row per replica and one for the cluster, per capacity (each replica's own).

This module computes and formats text; it never prints.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from kvcalc.model import attention as att
from kvcalc.model.schema import ModelPreset
from kvcalc.out.errors import InputError
from kvcalc.out.results import Column, Result, Table
from kvcalc.out.units import fmt_count, fmt_percent
from kvcalc.trace.engine import Tee, format_read, run_pass
from kvcalc.trace.formats import open_replay_trace
from kvcalc.trace.lean import LeanEngine
from kvcalc.trace.replicas import ReplicaSet, check_replicas
from kvcalc.trace.report import (TRACE_COLUMNS, TraceInputs, block_bytes_of, check_inputs, resolve_capacities,
                                 stats_row)

REPLICA_COLUMNS = (
    Column("capacity", "capacity per replica", "text"), Column("capacity_tokens", "tokens", "int", unbounded=True),
    Column("capacity_blocks", "blocks", "int", unbounded=True), Column("replica", "replica", "text"),
    Column("requests", "requests", "int"), Column("load_share", "load share", "percent"),
    Column("token_hit_rate", "token hit", "percent"), Column("block_hit_rate", "block hit", "percent"),
    Column("input_tokens", "input tokens", "int"), Column("reused_tokens", "reused tokens", "int"),
    Column("load_imbalance", "load imbalance", "float"),
)


def replica_result(inp: TraceInputs, model: Optional[tuple[str, ModelPreset]] = None,
                   opts: att.KvOptions = att.KvOptions()) -> Result:
    """Replay ``inp`` over ``inp.replicas`` replicas behind ``inp.router``, each with every given capacity."""
    check_inputs(inp)
    check_replicas(inp.replicas, inp.router)
    if inp.curve:
        raise InputError("--curve: not with --replicas (give --capacity values: each replica's cache)")
    block = block_bytes_of(model[0], model[1], inp.block_tokens, opts) if model else None
    given = resolve_capacities(inp.capacities, inp.block_tokens, block)
    reader = open_replay_trace(inp.path, inp.block_tokens, inp.skip_bad, inp.trace_format)
    cluster = ReplicaSet([c.tokens for c in given], inp.replicas, inp.block_tokens, inp.policy, inp.router)
    stats, (by_capacity, single) = run_pass(reader, Tee(cluster, LeanEngine([None], inp.block_tokens)),
                                            inp.block_tokens)
    s = stats.finish(reader.skipped_lines, single.at(None))
    rows = []
    for cap in given:
        res = by_capacity[cap.tokens]
        total_input = res.total.input_tokens
        for i, part in enumerate((*res.replicas, res.total)):
            last = i == len(res.replicas)
            rows.append({"capacity": cap.spec.text, "replica": "all" if last else str(i), "router": res.router,
                         "capacity_tokens": math.inf if cap.tokens is None else cap.tokens,
                         "capacity_blocks": math.inf if part.capacity_blocks is None else part.capacity_blocks,
                         "capacity_bytes": None, "policy": part.policy, "requests": part.requests,
                         "load_share": part.input_tokens / total_input if total_input else 0.0,
                         "token_hit_rate": part.token_hit_rate, "block_hit_rate": part.block_hit_rate,
                         "input_tokens": part.input_tokens, "reused_tokens": part.reused_tokens,
                         "hit_blocks": part.hit_blocks, "total_blocks": part.total_blocks,
                         "peak_cached_blocks": part.peak_cached_blocks,
                         "load_imbalance": res.load_imbalance if last else None})
    name = Path(inp.path).name
    plural = "s" if inp.replicas > 1 else ""
    title = (f"{inp.policy} prefix caches on {inp.replicas} replica{plural}, {inp.router} routing, "
             f"{inp.block_tokens}-token blocks: {name}")
    main = Table("replicas", title, REPLICA_COLUMNS, tuple(rows))
    trace_table = Table("trace", f"Trace: {name}", TRACE_COLUMNS, (stats_row(inp.path, s),))
    notes = [f"each replica has its own cache of the given capacity; the router sees requests in file order, "
             f"load = input tokens routed so far; load imbalance = the busiest replica's input tokens / the mean",
             f"one node with an infinite cache would reuse {fmt_percent(s.max_token_hit_rate)} of "
             f"{fmt_count(s.input.total_tokens)} input tokens"]
    explain = [f"{r['capacity']} replica {r['replica']}: token hit = {fmt_count(r['reused_tokens'])} / "
               f"{fmt_count(r['input_tokens'])} = {fmt_percent(r['token_hit_rate'])}" for r in rows]
    inputs = {"file": str(inp.path), "trace_format": format_read(reader), "block_tokens": inp.block_tokens,
              "policy": inp.policy, "replicas": inp.replicas, "router": inp.router,
              "capacities": [c.spec.text for c in given], "skip_bad": inp.skip_bad,
              "model": block.model_name if block else None}
    return Result("trace", inputs, main, (trace_table,), tuple(explain), tuple(notes))
