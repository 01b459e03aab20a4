"""``--explain`` for KV bytes: each layer group's stored and read bytes with the numbers substituted (text)."""

from __future__ import annotations

from kvcalc.model import attention as att
from kvcalc.out.units import fmt_bytes, fmt_bytes_exact, fmt_count


def _n(x: float) -> str:
    return fmt_count(x)


def group_stored(g: att.GroupLayout, tokens: int) -> str:
    """'csa: 21 layers x [min(L,128)=128 x 584 B + floor(L/4)=1,024 x (584 + 68) B] = ... B'."""
    parts = []
    if g.chunk_tokens is not None:
        dense = f"((L-1) mod {_n(g.chunk_tokens)})+1={_n(att.dense_entries(g, tokens))}"
    elif g.window_tokens is None:
        dense = f"L={_n(tokens)}"
    elif g.window_tokens == 0:
        dense = None
    else:
        dense = f"min(L, {_n(g.window_tokens)})={_n(att.dense_entries(g, tokens))}"
    idx_dense = g.indexed == "dense"
    if dense is not None:
        entry = f"({_n(g.entry_bytes)} + {_n(g.indexer_bytes)} idx) B" if idx_dense else f"{_n(g.entry_bytes)} B"
        parts.append(f"{dense} x {entry}")
    if g.ratio is not None:
        ce = f"floor(L/{g.ratio})={_n(att.compressed_entries(g, tokens))}"
        entry = (f"({_n(g.entry_bytes)} + {_n(g.indexer_bytes)} idx) B" if g.indexed == "compressed"
                 else f"{_n(g.entry_bytes)} B")
        parts.append(f"{ce} x {entry}")
    if g.residual_tokens:
        parts.append(f"min(L, R={_n(g.residual_tokens)})={_n(att._minimum(tokens, g.residual_tokens))} x "
                     f"{_n(g.residual_extra_bytes)} B BF16 residual")
    body = " + ".join(parts)
    if not parts:  # a state-only group (linear attention, Mamba): nothing grows with L
        line = f"{g.name} ({g.kind}): no per-token entries"
    else:
        line = f"{g.name} ({g.kind}): {g.layers} layers x [{body}] = {fmt_bytes_exact(att.stored_bytes(g, tokens))}"
    if g.state_bytes_per_layer:
        line += (f"; state {g.layers} x {_n(g.state_bytes_per_layer)} B = "
                 f"{fmt_bytes_exact(att.state_bytes(g))}")
    return line


def group_read(g: att.GroupLayout, tokens: int) -> str:
    """The decode-step read of one group, with top-k where the group is sparse."""
    if g.kind in att.RECURRENT_KINDS:
        how = "the whole recurrent state"
    elif g.top_k is None:
        how = "every stored entry"
    elif g.indexed == "dense":
        how = f"min(L, top_k={_n(g.top_k)}) entries + every indexer key"
    else:
        how = f"window + min(floor(L/{g.ratio}), top_k={_n(g.top_k)}) entries + every indexer key"
    return f"{g.name} read/step: {how} = {fmt_bytes_exact(att.read_bytes_per_step(g, tokens))}"


def kv_lines(name: str, groups: list[att.GroupLayout], tokens: int, total: float) -> list[str]:
    """The derivation of a model's KV bytes per request at ``tokens`` tokens."""
    lines = [f"{name} at L = {_n(tokens)} tokens:"]
    lines += ["  " + group_stored(g, tokens) for g in groups]
    lines += ["  " + group_read(g, tokens) for g in groups]
    lines.append(f"  total per request = {fmt_bytes_exact(total)} ({fmt_bytes(total)}); "
                 f"/ L = {fmt_count(total / tokens)} B/token")
    return lines


def format_lines(model, opts: att.KvOptions) -> list[str]:
    """The byte layout of each full-attention group's entry in the chosen KV format, with its source."""
    from kvcalc.model import kv_formats

    if model.as_stated_kv_bytes_per_token is not None:
        return []
    gs = opts.kv_group_size
    lines = []
    for grp in model.layer_groups:
        if grp.kind != "full" or (grp.mtp and not opts.mtp):
            continue
        dtype = opts.kv_dtype or grp.kv_dtype or model.kv_dtype
        hv = grp.head_dim_v or grp.head_dim
        entry = att.full_entry_bytes(grp.kv_heads, grp.head_dim, hv, dtype, grp.k_eq_v, gs)
        rows = (f"K = V, one row {kv_formats.row_layout(dtype, hv, gs)}" if grp.k_eq_v else
                f"K and V each {kv_formats.row_layout(dtype, hv, gs)}" if hv == grp.head_dim else
                f"K {kv_formats.row_layout(dtype, grp.head_dim, gs)}; V {kv_formats.row_layout(dtype, hv, gs)}")
        line = (f"  {grp.name} entry ({dtype}): {grp.kv_heads} KV heads x {1 if grp.k_eq_v else 2} rows [{rows}] "
                f"= {fmt_count(entry)} B/layer/token")
        if dtype == "kivi":
            line += f"; residual R = {opts.kv_residual_tokens:,} tokens"
        if dtype in kv_formats.SOURCES:
            line += f" (source: {kv_formats.SOURCES[dtype]})"
        lines.append(line)
    return lines
