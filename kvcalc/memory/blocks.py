"""Paged KV blocks: bytes per block, page padding, block-table overhead, validity and last-block waste.

block bytes (unpadded) = block_tokens x paged bytes per token (``paged_bytes_per_token``: V4's
128-token sliding window lives in a separate ring and is excluded; a compressed group pages
(entry + indexer) / ratio per token).
Padding (models with ``page_align_bytes``): each layer's page of KV entries in a block is rounded up to a
multiple of the alignment, ceil(page / align) x align (FlashMLA pads to 576 B: vLLM's 256-token C128 page of
2 x 584 = 1,168 B becomes 1,728 B); indexer keys are not padded (they live in their own cache).
metadata overhead = block-table bytes per block / block bytes, with one table entry (default 4 B, int32 as in
vLLM and FlashMLA; the article assumes 16-24 B) per block per table (default one table; vLLM keeps one per
KV-cache group).
valid = block_tokens is a multiple of the model's ``block_tokens_multiple`` (V4: 128).
last-block waste for a context of T tokens = ceil(T / B) x B - T tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvcalc.model import attention as att
from kvcalc.model.schema import ModelPreset

DEFAULT_BLOCK_TOKENS = (16, 32, 64, 128, 256, 512, 1024)
DEFAULT_ENTRY_BYTES = 4.0    # int32 block-table entry (vLLM block_table.py, FlashMLA)


@dataclass(frozen=True)
class BlockInputs:
    """The sweep and the assumptions of ``kvcalc blocks``."""

    block_tokens: tuple[int, ...] = DEFAULT_BLOCK_TOKENS
    entry_bytes: float = DEFAULT_ENTRY_BYTES
    tables: int = 1
    context_tokens: int = 3200    # the article's mean request (20 x 8,000 + 80 x 2,000) / 100
    max_overhead: float = 0.01


def paged_bytes_per_token(g: att.GroupLayout) -> float:
    """Bytes a token adds to the group's paged KV pool [B/token].

    Full/sliding/MLA groups page every token (a window only frees old blocks); a compressed group pages its
    compressed entries (entry + indexer) / ratio; V4's window entries sit in a separate ring and are excluded.
    """
    if g.ratio is not None:
        idx = g.indexer_bytes if g.indexed == "compressed" else 0
        return g.layers * (g.entry_bytes + idx) / g.ratio
    if g.kind == "swa":
        return 0.0
    idx = g.indexer_bytes if g.indexed == "dense" else 0
    return g.layers * (g.entry_bytes + idx)


def padded_page_bytes(page_bytes: float, align: int | None) -> float:
    """One layer's page rounded up to a multiple of ``align``: ceil(page / align) x align [B]."""
    if not align:
        return page_bytes
    return math.ceil(page_bytes / align) * align


def paged_entries_per_token(g: att.GroupLayout) -> float:
    """Entries a token adds to one layer's paged pool [entries/token]: 1/ratio compressed, 0 for V4's window
    ring, 1 otherwise."""
    if g.ratio is not None:
        return 1.0 / g.ratio
    return 0.0 if g.kind == "swa" else 1.0


def group_block_bytes(g: att.GroupLayout, block_tokens: int, align: int | None = None) -> float:
    """One group's share of a block: layers x (padded page of entries + indexer keys) [B]."""
    entries = block_tokens * paged_entries_per_token(g)
    indexed = g.indexed == ("compressed" if g.ratio is not None else "dense")
    idx = entries * g.indexer_bytes if indexed else 0.0
    if entries == 0:
        return 0.0
    return g.layers * (padded_page_bytes(entries * g.entry_bytes, align) + idx)


def block_bytes_unpadded(groups: list[att.GroupLayout], block_tokens: int) -> float:
    """block_tokens x paged bytes per token, summed over groups [B]."""
    return block_tokens * sum(paged_bytes_per_token(g) for g in groups)


def block_bytes(groups: list[att.GroupLayout], block_tokens: int, align: int | None = None) -> float:
    """Bytes of one paged block, each layer's page padded to ``align`` where given [B]."""
    if not align:
        return block_bytes_unpadded(groups, block_tokens)
    return sum(group_block_bytes(g, block_tokens, align) for g in groups)


def metadata_overhead(metadata_bytes_per_block: float, block_bytes_: float) -> float:
    """Block-table bytes per byte of KV block [fraction]; NaN when the model pages nothing."""
    return metadata_bytes_per_block / block_bytes_ if block_bytes_ > 0 else math.nan


def is_valid(block_tokens: int, multiple: int) -> bool:
    """Whether engines accept blocks of ``block_tokens`` for a model that needs a multiple of ``multiple``."""
    return block_tokens % multiple == 0


def blocks_per_request(tokens: int, block_tokens: int) -> int:
    """Blocks one request of ``tokens`` occupies: ceil(T / B) [blocks]."""
    return -(-tokens // block_tokens)


def last_block_waste_tokens(tokens: int, block_tokens: int) -> int:
    """Unused slots of the last block: ceil(T / B) x B - T [tokens]."""
    return blocks_per_request(tokens, block_tokens) * block_tokens - tokens


def fragmentation(tokens: int, block_tokens: int) -> float:
    """Share of the request's allocated token slots left unused by the last block [fraction]."""
    return last_block_waste_tokens(tokens, block_tokens) / (blocks_per_request(tokens, block_tokens) * block_tokens)


def block_row(name: str, model: ModelPreset, block_tokens: int, inp: BlockInputs,
              opts: att.KvOptions = att.KvOptions()) -> dict:
    """One model at one block size (raw SI units)."""
    groups = att.resolve_groups(model, opts)
    align = model.page_align_bytes
    unpadded = block_bytes_unpadded(groups, block_tokens)
    padded = block_bytes(groups, block_tokens, align)
    meta = inp.entry_bytes * inp.tables
    nblocks = blocks_per_request(inp.context_tokens, block_tokens)
    waste = last_block_waste_tokens(inp.context_tokens, block_tokens)
    return {
        "model": name, "block_tokens": block_tokens, "block_tokens_multiple": model.block_tokens_multiple,
        "valid": is_valid(block_tokens, model.block_tokens_multiple),
        "block_bytes": padded, "block_bytes_unpadded": unpadded, "padding_bytes": padded - unpadded,
        "page_align_bytes": align, "entry_bytes": inp.entry_bytes, "tables": inp.tables,
        "metadata_bytes_per_block": meta, "metadata_overhead": metadata_overhead(meta, padded),
        "context_tokens": inp.context_tokens, "blocks_per_request": nblocks,
        "metadata_bytes_per_request": nblocks * meta,
        "last_block_waste_tokens": waste, "fragmentation": fragmentation(inp.context_tokens, block_tokens),
        "fragmentation_bytes": waste / block_tokens * padded,
    }


def recommend(rows: list[dict], max_overhead: float) -> dict | None:
    """The smallest valid swept block size whose metadata overhead is within ``max_overhead``, or None."""
    ok = [r for r in rows if r["valid"] and r["metadata_overhead"] <= max_overhead]
    return min(ok, key=lambda r: r["block_tokens"]) if ok else None


BLOCK_COLUMNS = (
    ("model", "model", "text"),
    ("block_tokens", "tokens", "int"),
    ("valid", "valid", "bool"),
    ("block_bytes", "block", "bytes"),
    ("padding_bytes", "padding", "bytes"),
    ("metadata_overhead", "table overhead", "percent"),
    ("blocks_per_request", "blocks/request", "int"),
    ("last_block_waste_tokens", "last-block waste", "tokens"),
    ("fragmentation_bytes", "waste", "bytes"),
    ("recommended", "recommended", "bool"),
)
RECOMMEND_COLUMNS = (
    ("model", "model", "text"),
    ("block_tokens_multiple", "multiple of", "int"),
    ("recommended_block_tokens", "smallest valid block", "int"),
    ("block_bytes", "block", "bytes"),
    ("metadata_overhead", "table overhead", "percent"),
)


def _explain_row(name: str, groups: list[att.GroupLayout], align: int | None, r: dict) -> str:
    from kvcalc.out.units import fmt_bytes_exact, fmt_count, fmt_percent

    b = r["block_tokens"]
    parts = []
    for g in groups:
        entries = b * paged_entries_per_token(g)
        if entries == 0:
            continue
        page = entries * g.entry_bytes
        page_s = (f"ceil({fmt_count(entries)} x {fmt_count(g.entry_bytes)} B / {align}) x {align} = "
                  f"{fmt_count(padded_page_bytes(page, align))}" if align else
                  f"{fmt_count(entries)} x {fmt_count(g.entry_bytes)} B")
        idx = g.indexed == ("compressed" if g.ratio is not None else "dense")
        if idx:
            page_s += f" + {fmt_count(entries)} x {fmt_count(g.indexer_bytes)} B idx"
        parts.append(f"{g.name} {g.layers} x ({page_s})")
    flag = "" if r["valid"] else f" [not a multiple of {r['block_tokens_multiple']}: invalid]"
    return (f"{name}, {b} tokens{flag}: " + " + ".join(parts) + f" = {fmt_bytes_exact(r['block_bytes'])}; "
            f"overhead {fmt_count(r['metadata_bytes_per_block'])} B / {fmt_bytes_exact(r['block_bytes'])} = "
            f"{fmt_percent(r['metadata_overhead'])}; last block: ceil({fmt_count(r['context_tokens'])} / {b}) x {b} "
            f"- {fmt_count(r['context_tokens'])} = {fmt_count(r['last_block_waste_tokens'])} tokens unused")


def engine_note(name: str, groups: list[att.GroupLayout], engine: str, model: ModelPreset | None = None) -> str:
    """What vLLM or SGLang pages for this model on one GPU: block size, KV-cache groups, one pool block."""
    from kvcalc.memory.engine_common import check_engine_groups
    from kvcalc.memory.engine_vllm import block_layout
    from kvcalc.memory.engine_vllm_v4 import is_v4, v4_block_layout

    if engine == "sglang":
        from kvcalc.memory.engine_sglang import page_size
        from kvcalc.memory.engine_sglang_v4 import DSV4_PAGE

        page = DSV4_PAGE if is_v4(groups) else page_size(groups)
        if page == 1:
            return f"{name}: SGLang pages single tokens (page size 1): no block overhead, no last-block waste"
        return f"{name}: SGLang pages {page}-token pages (" + ("DeepSeek V4's" if is_v4(groups) else "DSA's") + ")"

    check_engine_groups(groups, engine)
    if model is not None and is_v4(groups):
        lay = v4_block_layout(model)
        return (f"{name}: vLLM pages DeepSeek V4 in {', '.join(map(str, lay['block_sizes']))}-token blocks; "
                f"{lay['groups_text']}; one block of the pool = {lay['block_bytes']:,.0f} B on every TP rank")
    lay = block_layout(groups, 1, None)
    grouping = (f"{lay['kv_groups']} KV-cache groups of {lay['group_size']} layers ({lay['padding_layers']} "
                f"padding), one block table each (--tables {lay['kv_groups']})" if lay["kv_groups"] > 1
                else "one KV-cache group")
    return (f"{name}: vLLM pages {lay['block_size']}-token blocks"
            + (f" (enlarged from {lay['requested_block_size']} so a page holds a {lay['state_page_bytes']:,.0f} B "
               "state)" if lay["state_page_bytes"] else "")
            + f"; {grouping}; one block of the pool = {lay['block_bytes']:,.0f} B at TP 1")


def blocks_result(models: list[tuple[str, ModelPreset]], inp: BlockInputs, opts: att.KvOptions = att.KvOptions(),
                  engine: str = "ideal"):
    """The ``kvcalc blocks`` result: one row per model and block size, and the recommended size per model;
    with ``engine`` vllm/sglang a note per model says what that engine pages."""
    from kvcalc.out.results import Column, Result, Table
    from kvcalc.out.units import fmt_percent

    rows, recs, lines = [], [], []
    notes = [f"block-table entry {inp.entry_bytes:g} B per block"
             + (f" x {inp.tables} tables" if inp.tables != 1 else " (one table)")
             + "; overhead = table bytes per block / block bytes (padded where the model's kernel pads pages). "
             "int32 (4 B) is what vLLM and FlashMLA use; the article assumes 16-24 B.",
             f"last-block waste for a {inp.context_tokens:,}-token request: ceil(T / B) x B - T tokens; bytes = that "
             "share of a block (a compressed group's real waste comes in whole entries).",
             f"recommended = the smallest valid block size swept whose overhead is <= {fmt_percent(inp.max_overhead)}."]
    for name, model in models:
        groups = att.resolve_groups(model, opts)
        mrows = [block_row(name, model, b, inp, opts) for b in sorted(set(inp.block_tokens))]
        best = recommend(mrows, inp.max_overhead)
        for r in mrows:
            r["recommended"] = r is best
            lines.append(_explain_row(name, groups, model.page_align_bytes, r))
        rows += mrows
        recs.append({"model": name, "block_tokens_multiple": model.block_tokens_multiple,
                     "max_overhead": inp.max_overhead,
                     "recommended_block_tokens": best["block_tokens"] if best else None,
                     "block_bytes": best["block_bytes"] if best else None,
                     "metadata_overhead": best["metadata_overhead"] if best else None})
        bad = [str(r["block_tokens"]) for r in mrows if not r["valid"]]
        if bad:
            notes.append(f"{name}: {', '.join(bad)}-token blocks are not valid (engines need a multiple of "
                         f"{model.block_tokens_multiple} tokens): flagged, never recommended")
        if best is None:
            notes.append(f"{name}: no valid swept block size keeps the overhead <= {fmt_percent(inp.max_overhead)}")
        if model.page_align_bytes:
            notes.append(f"{name}: each layer's page padded to a multiple of {model.page_align_bytes} B "
                         "(indexer keys unpadded)")
        if engine != "ideal":
            notes.append(engine_note(name, groups, engine, model))
        if all(r["block_bytes"] == 0 for r in mrows):
            notes.append(f"{name}: pages no KV per token (window ring only): no block overhead")
    main = Table("blocks", f"Paged block size sweep; table overhead with {inp.entry_bytes:g} B entries, "
                 f"waste for {inp.context_tokens:,} tokens", tuple(Column(*c) for c in BLOCK_COLUMNS), tuple(rows))
    rec = Table("recommended", f"Smallest valid block with table overhead <= {fmt_percent(inp.max_overhead)}",
                tuple(Column(*c) for c in RECOMMEND_COLUMNS), tuple(recs))
    inputs = {"models": [n for n, _ in models], "block_tokens": sorted(set(inp.block_tokens)),
              "entry_bytes": inp.entry_bytes, "tables": inp.tables, "context_tokens": inp.context_tokens,
              "max_overhead": inp.max_overhead, "kv_dtype": opts.kv_dtype, "mla_layout": opts.mla_layout,
              "indexer_dtype": opts.indexer_dtype, "mtp": opts.mtp}
    if engine != "ideal":
        inputs["engine"] = engine
    return Result("blocks", inputs, main, (rec,), tuple(lines), tuple(notes))
