"""KV cache per request and per token for one model, summed over its layer groups.

bytes(L) = sum over groups of layers x (dense_entries(L) + compressed_entries(L)) x entry_bytes
          + indexer keys + fixed per-request state. See attention.py for each group's layout.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.model import attention as att
from kvcalc.model.schema import ModelPreset


@dataclass(frozen=True)
class GroupKv:
    """One layer group's share of a request's KV cache at one context length [B]."""

    name: str
    kind: str
    layers: int
    layout: str
    dense_entries: int
    compressed_entries: int
    stored_bytes: float
    state_bytes: float
    read_bytes_per_step: float
    long_context_bytes_per_token: float


@dataclass(frozen=True)
class KvProfile:
    """A model's KV cache for one request of ``context_tokens`` tokens."""

    model: str
    context_tokens: int
    groups: tuple[GroupKv, ...]
    kv_bytes_per_request: float            # stored entries + fixed state [B]
    kv_bytes_per_request_excl_state: float  # stored entries only [B]
    kv_fixed_bytes_per_request: float      # state that does not grow with L [B]
    kv_bytes_per_token: float              # amortised: per request / L [B/token]
    kv_long_context_bytes_per_token: float  # growth per extra token once windows are full [B/token]
    kv_read_bytes_per_step: float          # read by one decode step at this context [B]


def request_bytes(groups: list[att.GroupLayout], tokens, include_state: bool = True):
    """KV bytes of one request of ``tokens`` tokens (int or numpy array) [B]."""
    total = sum(att.stored_bytes(g, tokens) for g in groups)
    if include_state:
        total = total + sum(att.state_bytes(g) for g in groups)
    return total


def read_bytes(groups: list[att.GroupLayout], tokens):
    """KV bytes one decode step reads at context ``tokens`` [B]."""
    return sum(att.read_bytes_per_step(g, tokens) for g in groups)


def long_context_bytes_per_token(groups: list[att.GroupLayout]) -> float:
    """Stored bytes added per extra token at long context [B/token]."""
    return sum(att.long_context_bytes_per_token(g) for g in groups)


def group_kv(g: att.GroupLayout, tokens: int) -> GroupKv:
    """One group's breakdown at ``tokens`` tokens."""
    return GroupKv(
        name=g.name, kind=g.kind, layers=g.layers, layout=g.layout,
        dense_entries=int(att.dense_entries(g, tokens)), compressed_entries=int(att.compressed_entries(g, tokens)),
        stored_bytes=att.stored_bytes(g, tokens), state_bytes=att.state_bytes(g),
        read_bytes_per_step=att.read_bytes_per_step(g, tokens),
        long_context_bytes_per_token=att.long_context_bytes_per_token(g))


def kv_arrays(groups: list[att.GroupLayout], tokens) -> dict:
    """A request's KV totals at ``tokens`` tokens (an int, or a numpy array for a sweep: the scalar call is the
    one-point case of the same arithmetic) [B, B/token]."""
    entries = request_bytes(groups, tokens, include_state=False)
    state = sum(att.state_bytes(g) for g in groups)
    return {
        "kv_bytes_per_request": entries + state, "kv_bytes_per_request_excl_state": entries,
        "kv_fixed_bytes_per_request": state, "kv_bytes_per_token": (entries + state) / tokens,
        "kv_long_context_bytes_per_token": long_context_bytes_per_token(groups),
        "kv_read_bytes_per_step": read_bytes(groups, tokens),
    }


def kv_profile(name: str, model: ModelPreset, tokens: int, opts: att.KvOptions = att.KvOptions()) -> KvProfile:
    """The KV profile of ``model`` for one request of ``tokens`` tokens [B]."""
    groups = att.resolve_groups(model, opts)
    return KvProfile(model=name, context_tokens=tokens, groups=tuple(group_kv(g, tokens) for g in groups),
                     **kv_arrays(groups, tokens))


KV_COLUMNS = (
    ("model", "model", "text"),
    ("context_tokens", "tokens", "int"),
    ("kv_bytes_per_request", "KV/request", "bytes"),
    ("kv_bytes_per_token", "per token", "bytes"),
    ("kv_long_context_bytes_per_token", "per extra token", "bytes"),
    ("kv_fixed_bytes_per_request", "fixed state", "bytes"),
    ("kv_read_bytes_per_step", "read/step", "bytes"),
)
GROUP_COLUMNS = (
    ("model", "model", "text"),
    ("context_tokens", "tokens", "int"),
    ("group", "group", "text"),
    ("layers", "layers", "int"),
    ("dense_entries", "dense", "int"),
    ("compressed_entries", "compr.", "int"),
    ("stored_bytes", "stored", "bytes"),
    ("state_bytes", "state", "bytes"),
    ("read_bytes_per_step", "read/step", "bytes"),
)


def profile_row(p: KvProfile) -> dict:
    """The flat JSON/CSV record of one profile (raw bytes)."""
    return {
        "model": p.model, "context_tokens": p.context_tokens,
        "kv_bytes_per_request": p.kv_bytes_per_request,
        "kv_bytes_per_request_excl_state": p.kv_bytes_per_request_excl_state,
        "kv_fixed_bytes_per_request": p.kv_fixed_bytes_per_request,
        "kv_bytes_per_token": p.kv_bytes_per_token,
        "kv_long_context_bytes_per_token": p.kv_long_context_bytes_per_token,
        "kv_read_bytes_per_step": p.kv_read_bytes_per_step,
    }


def group_rows(p: KvProfile) -> list[dict]:
    """One record per layer group of a profile."""
    return [{"model": p.model, "context_tokens": p.context_tokens, "group": g.name, "kind": g.kind,
             "layers": g.layers, "layout": g.layout, "dense_entries": g.dense_entries,
             "compressed_entries": g.compressed_entries, "stored_bytes": g.stored_bytes,
             "state_bytes": g.state_bytes, "read_bytes_per_step": g.read_bytes_per_step} for g in p.groups]


def context_notes(name: str, model: ModelPreset, contexts) -> list[str]:
    """A note when context lengths [tokens] go beyond the model's max_context_tokens (none when it is unknown):
    one per model, naming the length, or how many and their range."""
    limit = model.max_context_tokens
    over = sorted({t for t in contexts if limit and t > limit})
    if len(over) == 1:
        return [f"{name}: {over[0]:,} tokens is beyond its {limit:,}-token context"]
    if over:
        return [f"{name}: {len(over):,} context lengths ({over[0]:,} to {over[-1]:,} tokens) are beyond its "
                f"{limit:,}-token context"]
    return []


def kv_result(models: list[tuple[str, ModelPreset]], contexts: list[int],
              opts: att.KvOptions = att.KvOptions()):
    """The ``kvcalc kv`` result: one row per model and context, a per-group breakdown, derivations."""
    from kvcalc.out.results import Column, LazyLines, Result, Table

    rows, grows, derive, notes = [], [], [], []
    for name, model in models:
        groups = att.resolve_groups(model, opts)
        for tokens in contexts:
            p = kv_profile(name, model, tokens, opts)
            rows.append(profile_row(p))
            grows.extend(group_rows(p))
            derive.append((name, model, opts, groups, tokens, p.kv_bytes_per_request))
        notes.extend(context_notes(name, model, contexts))
        if model.as_stated_kv_bytes_per_token is not None:
            notes.append(f"{name}: as-stated flat figure, not derived from the architecture")
    main = Table("kv", "KV cache per request (per token = amortised; per extra token = growth at long context)", tuple(Column(*c) for c in KV_COLUMNS), tuple(rows))
    breakdown = Table("groups", "Per layer group (dense/compr. = entries per layer)", tuple(Column(*c) for c in GROUP_COLUMNS), tuple(grows))
    inputs = {"models": [n for n, _ in models], "context_tokens": list(contexts),
              "kv_dtype": opts.kv_dtype, "mla_layout": opts.mla_layout,
              "indexer_dtype": opts.indexer_dtype, "mtp": opts.mtp}
    if opts.state_dtype:
        inputs["state_dtype"] = opts.state_dtype
    if opts.kv_dtype in ("int4-grouped", "kivi"):
        inputs["kv_group_size"] = opts.kv_group_size
    if opts.kv_dtype == "kivi":
        inputs["kv_residual_tokens"] = opts.kv_residual_tokens
    return Result("kv", inputs, main, (breakdown,), LazyLines(lambda: _kv_lines(derive)), tuple(notes))


def _kv_lines(derive: list[tuple]) -> list[str]:
    """--explain lines for (name, model, KvOptions, groups, context [tokens], KV bytes per request [B]) records:
    the derivation, then the KV format's byte layout."""
    from kvcalc.model import kv_explain

    lines = []
    for name, model, opts, groups, tokens, total in derive:
        lines += kv_explain.kv_lines(name, groups, tokens, total)
        lines += kv_explain.format_lines(model, opts)
    return lines
