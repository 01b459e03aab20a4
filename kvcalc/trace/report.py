"""``kvcalc trace`` results: cache capacities (tokens, bytes or infinite) and the Result built from a replay.

Capacities come as a comma-separated list; each item is ``inf`` (an infinite cache), a decimal token count
(``3m`` = 3,000,000 tokens, ``units.parse_token_capacity``) or a byte quantity with a unit (``80GB`` = 80e9 B,
``80GiB`` = 80 x 2^30 B, ``units.parse_bytes``). Bytes need a model: the cache holds whole blocks of
``kv_bytes_per_block`` = the model's paged block (block_tokens x paged bytes per token summed over its layer
groups, each layer's page padded where the model sets ``page_align_bytes``; ``blocks.block_bytes``, as
``kvcalc capacity`` uses it), so tokens = floor(bytes / kv_bytes_per_block) x block_tokens. For DeepSeek V4
that block is the compressed cache (CSA/HCA entries and indexer keys); the sliding-window ring and the
per-request compressor state are not paged per block and are not counted.

The replay semantics are those of :mod:`kvcalc.trace.result` (see its docstring); :data:`SEMANTICS` says them in
short lines for ``--help``, notes and ``--explain``. This module computes and formats text; it never prints.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional, Sequence

from kvcalc.model import attention as att
from kvcalc.model.schema import ModelPreset
from kvcalc.out.errors import InputError
from kvcalc.out.results import Column, Result, Table
from kvcalc.out.units import fmt_bytes_exact, fmt_count, fmt_percent, parse_bytes, parse_token_capacity
from kvcalc.trace.analysis import analyze_trace
from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS
from kvcalc.trace.result import POLICIES, ReplayResult, capacity_grid, capacity_tokens_from_bytes
from kvcalc.trace.stats import TraceStats

if TYPE_CHECKING:
    from kvcalc.trace.lru_curve import LruProfile

DEFAULT_CAPACITIES = "3m,10m,20m,inf"
DEFAULT_CURVE_POINTS = 20
INFINITE = ("inf", "infinite", "infinity")
_TOKENS_FORM = re.compile(r"^[-+0-9.eE]+\s*[kmgKMG]?$")  # a number with an optional k/m/g: read as tokens

SEMANTICS = (
    "requests are replayed in file order (timestamps only give the duration); a capacity of C tokens holds "
    "floor(C / B) whole B-token blocks",
    "a request reuses the longest run of its leading hash ids already cached before it arrives; "
    "reused tokens = min(hit blocks x B, input length)",
    "then each of its blocks is inserted or refreshed in order: lru moves a present block to most recent and "
    "evicts the least recent; fifo never refreshes and evicts the oldest insert",
    "token hit rate = reused / input tokens; block hit rate = hit / total blocks; peak cached blocks = the "
    "most the cache held after any request",
    "an infinite cache gives the trace's maximum: every block seen before is reused",
)


@dataclass(frozen=True)
class CapacitySpec:
    """One capacity as the user wrote it: exactly one of infinite, tokens [tokens] or bytes [B]."""

    text: str
    tokens: Optional[int] = None
    bytes: Optional[float] = None


@dataclass(frozen=True)
class BlockBytes:
    """How bytes become blocks for one model: the paged KV block [B] of ``block_tokens`` tokens."""

    model_name: str
    block_tokens: int  # [tokens]
    kv_bytes_per_block: float  # padded as paged [B]
    unpadded_bytes_per_block: float  # block_tokens x paged bytes per token [B]
    compressed: bool  # the model pages compressed entries (DeepSeek V4 CSA/HCA)


@dataclass(frozen=True)
class Capacity:
    """A resolved capacity: the spec and its tokens [tokens] (None = infinite)."""

    spec: CapacitySpec
    tokens: Optional[int]


def parse_capacity(text: str, what: str = "--capacity") -> CapacitySpec:
    """One capacity: ``inf``, decimal tokens (``3m`` = 3,000,000) or bytes with a unit (``80GB``, ``80GiB``)."""
    item = str(text).strip()
    if item.lower() in INFINITE:
        return CapacitySpec("inf")
    if item.lower().endswith("b"):
        return CapacitySpec(item, bytes=parse_bytes(item, what))
    if _TOKENS_FORM.match(item):
        return CapacitySpec(item, tokens=parse_token_capacity(item, what))
    raise InputError(f"{what}: cannot read {item!r}: give tokens (3m = 3,000,000, 500k, 20000), bytes with a "
                     "unit (80GB, 80GiB; needs --model) or inf")


def parse_capacity_list(text: str, what: str = "--capacity") -> list[CapacitySpec]:
    """A comma-separated list of capacities (see :func:`parse_capacity`); at least one."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise InputError(f"{what}: empty list; give e.g. 3m,10m,inf or 80GB with --model")
    return [parse_capacity(p, what) for p in parts]


def block_bytes_of(model_name: str, model: ModelPreset, block_tokens: int,
                   opts: att.KvOptions = att.KvOptions()) -> BlockBytes:
    """The model's paged KV block of ``block_tokens`` tokens [B], padded as the kernel pages it."""
    from kvcalc.memory.blocks import block_bytes, block_bytes_unpadded

    groups = att.resolve_groups(model, opts)
    return BlockBytes(
        model_name=model_name, block_tokens=block_tokens,
        kv_bytes_per_block=float(block_bytes(groups, block_tokens, model.page_align_bytes)),
        unpadded_bytes_per_block=float(block_bytes_unpadded(groups, block_tokens)),
        compressed=any(g.ratio is not None for g in groups),
    )


def resolve_capacities(specs: Sequence[CapacitySpec], block_tokens: int, block: Optional[BlockBytes] = None,
                       what: str = "--capacity") -> list[Capacity]:
    """Specs -> capacities in tokens; a byte capacity needs ``block`` (the model's block bytes)."""
    out = []
    for spec in specs:
        if spec.bytes is not None:
            if block is None:
                raise InputError(f"{what}: {spec.text!r} is in bytes; give --model to convert bytes -> blocks "
                                 "-> tokens (or give tokens, e.g. 3m)")
            out.append(Capacity(spec, capacity_tokens_from_bytes(spec.bytes, block.kv_bytes_per_block,
                                                                    block_tokens)))
        else:
            out.append(Capacity(spec, spec.tokens))
    return out


def conversion_line(cap: Capacity, block: BlockBytes) -> str:
    """'80GB: floor(80,000,000,000 B / 167,772,160 B per block) = 476 blocks x 512 = 243,712 tokens'."""
    blocks = (cap.tokens or 0) // block.block_tokens
    return (f"{cap.spec.text}: floor({fmt_count(cap.spec.bytes)} B / {fmt_count(block.kv_bytes_per_block)} B per "
            f"block) = {fmt_count(blocks)} blocks x {block.block_tokens} = {fmt_count(cap.tokens)} tokens")


def block_line(block: BlockBytes) -> str:
    """Where the block bytes come from, with the numbers."""
    per_token = block.unpadded_bytes_per_block / block.block_tokens
    line = (f"{block.model_name}: KV per {block.block_tokens}-token block = {block.block_tokens} x "
            f"{fmt_count(per_token)} B paged per token = {fmt_bytes_exact(block.unpadded_bytes_per_block)}")
    if block.kv_bytes_per_block != block.unpadded_bytes_per_block:
        line += f", {fmt_bytes_exact(block.kv_bytes_per_block)} with page padding"
    if block.compressed:
        line += (" (the compressed cache: CSA/HCA entries + indexer keys; the sliding-window ring and "
                 "per-request state are not in blocks)")
    return line


# ---------------------------------------------------------------- the Result


@dataclass(frozen=True)
class TraceInputs:
    """What ``kvcalc trace`` was asked."""

    path: str
    capacities: tuple[CapacitySpec, ...] = ()
    block_tokens: int = DEFAULT_BLOCK_TOKENS
    policy: str = "lru"
    curve: bool = False
    curve_points: int = DEFAULT_CURVE_POINTS
    skip_bad: bool = False
    trace_format: str = "mooncake"  # kvcalc.trace.formats.FORMATS, or "jsonl" (hash-id lines, rule by content)
    replicas: int = 1  # replicas behind the router (kvcalc.trace.replica_report when given)
    router: str = "round-robin"  # kvcalc.trace.replicas.ROUTERS
    sample_rate: Optional[float] = None  # --curve from a stratified sample (kvcalc.trace.stratified)
    exact_stats: bool = False  # True: a dict of every id for sparse ids (else a bounded sample estimates them)


MAIN_COLUMNS = (
    Column("capacity", "capacity", "text"), Column("capacity_tokens", "tokens", "int", unbounded=True),
    Column("capacity_blocks", "blocks", "int", unbounded=True), Column("token_hit_rate", "token hit", "percent"),
    Column("block_hit_rate", "block hit", "percent"), Column("requests", "requests", "int"),
    Column("input_tokens", "input tokens", "int"), Column("reused_tokens", "reused tokens", "int"),
    Column("peak_cached_blocks", "peak cached blocks", "int"),
)
BYTES_COLUMN = Column("capacity_bytes", "bytes held", "bytes", unbounded=True)
TRACE_COLUMNS = (
    Column("requests", "requests", "int"), Column("skipped_lines", "skipped", "int"),
    Column("duration_s", "duration", "s"), Column("input_mean_tokens", "in mean", "round"),
    Column("input_p50_tokens", "in p50", "round"), Column("input_p90_tokens", "in p90", "round"),
    Column("input_p99_tokens", "in p99", "round"), Column("output_mean_tokens", "out mean", "round"),
    Column("output_p50_tokens", "out p50", "round"), Column("output_p99_tokens", "out p99", "round"),
    Column("distinct_blocks", "distinct blocks", "int"), Column("max_token_hit_rate", "max token hit", "percent"),
)


ESTIMATED = ("distinct_blocks", "working_set_tokens", "max_reused_tokens", "max_token_hit_rate",
             "max_block_hit_rate")  # the trace table's fields that become ``*_estimate`` from a sample
ESTIMATE_COLUMNS = (
    Column("distinct_blocks_estimate", "distinct blocks (est.)", "int"),
    Column("distinct_blocks_std_error", "± s.e.", "int"),
    Column("max_token_hit_rate_estimate", "max token hit (est.)", "percent"),
    Column("max_token_hit_rate_std_error", "± s.e.", "percent"),
)
ESTIMATE_ROW_COLUMN = Column("token_hit_rate_std_error", "token hit ± s.e.", "percent")


def trace_columns(s: TraceStats) -> tuple[Column, ...]:
    """The trace table's columns: the exact ones, or with the estimated figures and their standard errors."""
    if s.estimate is None:
        return TRACE_COLUMNS
    return tuple(c for c in TRACE_COLUMNS if c.key not in ESTIMATED) + ESTIMATE_COLUMNS


def estimate_fields(s: TraceStats) -> dict:
    """The standard errors of an estimated infinite cache [blocks], [fractions] and how it was sampled."""
    e = s.estimate
    return {"distinct_blocks_std_error": e.distinct_blocks_std_error,
            "max_token_hit_rate_std_error": e.reused_tokens_std_error / s.input.total_tokens
            if s.input.total_tokens else 0.0,
            "max_block_hit_rate_std_error": e.hit_blocks_std_error / s.total_blocks if s.total_blocks else 0.0,
            "estimate_sample_rate": e.rate, "estimate_sampled_ids": e.sampled_ids}


def _inf(x: Optional[int]) -> float | int:
    """None (infinite) -> math.inf so tables show 'inf' and JSON shows null."""
    return math.inf if x is None else x


def capacity_row(cap: Capacity, r: ReplayResult, block: Optional[BlockBytes]) -> dict:
    """One main row: the capacity in tokens, blocks (and bytes held with a model) and its replay figures."""
    held = None
    if block is not None:
        held = math.inf if r.capacity_blocks is None else r.capacity_blocks * block.kv_bytes_per_block
    return {
        "capacity": cap.spec.text, "policy": r.policy, "block_tokens": r.block_tokens,
        "capacity_tokens": _inf(r.capacity_tokens), "capacity_blocks": _inf(r.capacity_blocks),
        "capacity_bytes": held, "requests": r.requests, "input_tokens": r.input_tokens,
        "reused_tokens": r.reused_tokens, "token_hit_rate": r.token_hit_rate, "total_blocks": r.total_blocks,
        "hit_blocks": r.hit_blocks, "block_hit_rate": r.block_hit_rate,
        "peak_cached_blocks": r.peak_cached_blocks, "peak_cached_tokens": r.peak_cached_blocks * r.block_tokens,
    }


def stats_row(path: str, s: TraceStats) -> dict:
    """The trace table's one row: counts, duration [s], length distributions [tokens], infinite-cache maxima."""
    row = {"file": Path(path).name, "block_tokens": s.block_tokens, "requests": s.requests,
           "skipped_lines": s.skipped_lines, "duration_s": s.duration_s,
           "input_tokens": s.input.total_tokens, "output_tokens": s.output.total_tokens}
    for name, dist in (("input", s.input), ("output", s.output)):
        row |= {f"{name}_mean_tokens": dist.mean_tokens, f"{name}_p50_tokens": dist.p50_tokens,
                f"{name}_p90_tokens": dist.p90_tokens, f"{name}_p99_tokens": dist.p99_tokens,
                f"{name}_max_tokens": dist.max_tokens}
    blocks = {"distinct_blocks": s.distinct_blocks, "working_set_tokens": s.distinct_blocks * s.block_tokens,
              "max_reused_tokens": s.max_reused_tokens, "max_token_hit_rate": s.max_token_hit_rate,
              "max_block_hit_rate": s.max_block_hit_rate}
    if s.estimate is not None:  # the names say so (JSON, CSV), with the standard errors beside them
        blocks = {f"{k}_estimate": v for k, v in blocks.items()} | estimate_fields(s)
    return row | {"total_blocks": s.total_blocks} | blocks


def _capacity_order(cap: Capacity) -> float:
    return math.inf if cap.tokens is None else cap.tokens


def _curve_capacities(given: list[Capacity], profile: LruProfile, points: int) -> list[Capacity]:
    """A geometric grid up to the working set, merged with the given capacities, ascending (inf last)."""
    working_set = max(1, profile.distinct_blocks) * profile.block_tokens
    grid = [Capacity(CapacitySpec("curve", tokens=t), t)
            for t in capacity_grid(working_set, points, profile.block_tokens)]
    seen = {c.tokens for c in given}
    return sorted(given + [c for c in grid if c.tokens not in seen], key=_capacity_order)


def _explain_rows(rows: list[dict], block_tokens: int) -> list[str]:
    out = []
    for r in rows:
        cap = ("infinite" if r["capacity_tokens"] == math.inf else
               f"{fmt_count(r['capacity_tokens'])} tok = {fmt_count(r['capacity_blocks'])} x {block_tokens}-token "
               f"block{'' if r['capacity_blocks'] == 1 else 's'}")
        out.append(f"{r['capacity']} ({cap}): token hit = {fmt_count(r['reused_tokens'])} / "
                   f"{fmt_count(r['input_tokens'])} = {fmt_percent(r['token_hit_rate'])}; block hit = "
                   f"{fmt_count(r['hit_blocks'])} / {fmt_count(r['total_blocks'])} = "
                   f"{fmt_percent(r['block_hit_rate'])}")
    return out


def check_inputs(inp: TraceInputs) -> None:
    """InputError naming the option when ``inp`` asks something the replay cannot answer."""
    if inp.policy not in POLICIES:
        import difflib

        close = difflib.get_close_matches(str(inp.policy), POLICIES, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(f"--policy: {inp.policy!r} is not one of {', '.join(POLICIES)}{hint}")
    if inp.curve and inp.policy != "lru":
        raise InputError(f"--curve: the one-pass hit-rate curve is for --policy lru only, not {inp.policy!r} "
                         "(give --capacity values instead)")
    if inp.curve and inp.curve_points < 1:
        raise InputError(f"--curve-points: must be >= 1, got {inp.curve_points}")
    if not inp.capacities and not inp.curve:
        raise InputError("--capacity: no capacity given")


def trace_result(inp: TraceInputs, model: Optional[tuple[str, ModelPreset]] = None,
                 opts: att.KvOptions = att.KvOptions()) -> Result:
    """Replay the trace in one streaming pass and build the ``kvcalc trace`` Result.

    Main rows: one per capacity (the given ones; with ``curve`` also a geometric grid up to the working set,
    LRU only). Extra table ``trace``: the trace's own statistics (one row).
    """
    check_inputs(inp)
    block = block_bytes_of(model[0], model[1], inp.block_tokens, opts) if model else None
    given = resolve_capacities(inp.capacities, inp.block_tokens, block)
    analysis = analyze_trace(inp.path, [c.tokens for c in given], inp.block_tokens, inp.policy, inp.skip_bad,
                             keep_profile=inp.curve, trace_format=inp.trace_format, sample_rate=inp.sample_rate,
                             exact_stats=inp.exact_stats)
    if inp.curve:
        caps = _curve_capacities(given, analysis.profile, inp.curve_points)
        results = [analysis.profile.at(c.tokens) for c in caps]
    else:
        caps, results = given, list(analysis.results)
    rows = [capacity_row(c, r, block) for c, r in zip(caps, results)]
    s = analysis.stats
    columns = MAIN_COLUMNS + ((BYTES_COLUMN,) if block is not None else ())
    if s.estimate is not None:  # the infinite capacity's row is the estimate (the finite ones stay exact)
        errors = estimate_fields(s)
        for row in rows:
            infinite = row["capacity_tokens"] == math.inf and not inp.curve
            row |= {"estimated": infinite,
                    "token_hit_rate_std_error": errors["max_token_hit_rate_std_error"] if infinite else 0.0,
                    "block_hit_rate_std_error": errors["max_block_hit_rate_std_error"] if infinite else 0.0}
        if any(row["estimated"] for row in rows):
            columns += (ESTIMATE_ROW_COLUMN,)
    title = (f"{inp.policy} prefix-cache hit rate, {inp.block_tokens}-token blocks: {Path(inp.path).name}"
             + (" (curve)" if inp.curve else ""))
    main = Table("capacities", title, columns, tuple(rows))
    trace_table = Table("trace", f"Trace: {Path(inp.path).name}", trace_columns(s), (stats_row(inp.path, s),))

    notes = [f"{s.requests:,} requests over {s.duration_s:,.1f} s; an infinite cache reuses "
             f"{'an estimated ' if s.estimate is not None else ''}"
             f"{fmt_percent(s.max_token_hit_rate)} of {fmt_count(s.input.total_tokens)} input tokens "
             f"(working set {fmt_count(s.distinct_blocks)} blocks = {fmt_count(s.distinct_blocks * s.block_tokens)} "
             "tokens)",
             f"hit = the leading blocks of a request already cached when it arrives; reused tokens = "
             f"min(hit blocks x {inp.block_tokens}, input length); capacities are decimal (3m = 3,000,000 tokens) "
             f"and hold whole {inp.block_tokens}-token blocks"]
    if s.estimate is not None:
        e = s.estimate
        notes.append(f"the ids are too sparse for a table of the blocks seen: the infinite cache's figures (distinct "
                     f"blocks, max hit rate{', the inf row' if any(r['estimated'] for r in rows) else ''}) are "
                     f"estimates from a hashed sample of {fmt_count(e.sampled_ids)} ids (rate {e.rate:.3g}), "
                     f"shown with one standard error; --exact-stats keeps every id (~100 B each)")
    if inp.curve:
        notes.append(f"curve: {len(caps)} capacities, geometric from one block to the working set, from one "
                     "LRU pass (LRU's inclusion property)")
    if inp.sample_rate is not None:
        notes.append(f"--sample-rate {inp.sample_rate:g}: the capacities' rows are estimates (a stratified sample: "
                     f"every id at a request's first two blocks and the hot ids replayed exactly, the rest by "
                     f"hashed id; the curve ends at the infinite cache above); the trace's own figures are exact")
    if block is not None:
        notes.append(block_line(block) + "; bytes held = blocks x that")
        notes += [f"capacity {conversion_line(c, block)}" for c in caps if c.spec.bytes is not None]
    for c in caps:
        if c.tokens is not None and c.tokens < inp.block_tokens:
            notes.append(f"capacity {c.spec.text} holds no whole {inp.block_tokens}-token block: nothing is reused")
    if s.skipped_lines:
        notes.append(f"--skip-bad: skipped {s.skipped_lines:,} bad line(s); first: {analysis.first_problem}")

    explain = [f"semantics: {line}" for line in SEMANTICS]
    if block is not None:
        explain.append(block_line(block))
        explain += [conversion_line(c, block) for c in caps if c.spec.bytes is not None]
    explain += _explain_rows(rows, inp.block_tokens)
    explain.append(f"maximum (infinite cache): {fmt_count(s.max_reused_tokens)} / {fmt_count(s.input.total_tokens)} "
                   f"= {fmt_percent(s.max_token_hit_rate)}")

    inputs = {"file": str(inp.path), "trace_format": analysis.trace_format, "block_tokens": inp.block_tokens,
              "policy": inp.policy,
              "capacities": [c.spec.text for c in given], "curve": inp.curve,
              "curve_points": inp.curve_points if inp.curve else None, "sample_rate": inp.sample_rate,
              "skip_bad": inp.skip_bad, "exact_stats": inp.exact_stats,
              "model": block.model_name if block else None,
              "kv_bytes_per_block": block.kv_bytes_per_block if block else None}
    return Result("trace", inputs, main, (trace_table,), tuple(explain), tuple(notes))
