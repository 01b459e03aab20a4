"""The ``kvcalc transfer`` question: a block, a request and a batch of a model's KV moved over links
(:mod:`kvcalc.move.links`), next to the prefill that produced them; prefix-cache hits served from lower tiers,
load vs recompute.

Payloads: one paged block (its padded bytes, see :mod:`kvcalc.memory.blocks`), one request's KV (every stored
entry plus the fixed per-request state, unpadded: what must reach the decode node), and a batch of N requests.
Prefill seconds per token: 2 x (active params - embedding - LM head) / (GPUs x dense peak x MFU), the peak for
the model's compute dtype (BF16 for 2-byte weights, FP8 for 1-byte; :mod:`kvcalc.serve.compute`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvcalc.model.schema import HardwarePreset, LinkPreset, ModelPreset
from kvcalc.move.links import (Payload, bound, breakeven_bandwidth_bytes_per_s, effective_bandwidth_bytes_per_s,
                               exposed_prefetch_s, latency_share, separate_copies_time_s, transfer_time_s)
from kvcalc.serve.compute import compute_dtype, per_token_matmul_params, prefill_s_per_token

DEFAULT_LINKS = ("pcie-gen5-x16", "nvlink4", "ib-ndr400", "eth-100g", "eth-10g", "nvme-gen5")
# End-to-end prefill reaches ~15-24% of FP8 dense peak on big MoE models (DeepSeek production ~15%,
# RTP-LLM ~20%, SGLang on H100 ~24%: reference/hardware.md, "Efficiencies").
DEFAULT_MFU = 0.2


@dataclass(frozen=True)
class TransferInputs:
    """Everything a transfer row depends on besides the model, links and hardware presets."""

    context_tokens: int = 4096
    requests: int = 100
    block_tokens: int = 256
    bandwidth: str = "measured"   # measured | theoretical
    overlap_s: float = 0.0        # window a speculative prefetch hides behind [s]
    gpus: int = 8
    mfu: float = DEFAULT_MFU


def payloads(model: ModelPreset, inp: TransferInputs, opts=None) -> list[Payload]:
    """The three payloads for a model: one block, one request's KV, the batch's KV."""
    from kvcalc.memory import blocks
    from kvcalc.model import attention as att
    from kvcalc.model.kv import request_bytes

    opts = opts or att.KvOptions()
    groups = att.resolve_groups(model, opts)
    t, b, n = inp.context_tokens, inp.block_tokens, inp.requests
    per_request = float(request_bytes(groups, t))
    nblocks = blocks.blocks_per_request(t, b)
    return [
        Payload("block", b, float(blocks.block_bytes(groups, b, model.page_align_bytes)), 1),
        Payload("request", t, per_request, nblocks),
        Payload("batch", t * n, per_request * n, nblocks * n),
    ]


def transfer_row(model_name: str, p: Payload, link_name: str, link: LinkPreset, inp: TransferInputs,
                 prefill_per_token_s: float) -> dict:
    """One payload over one link (raw SI units)."""
    bw = link.bandwidth_bytes_per_s(inp.bandwidth)
    lat = link.latency_s
    t = transfer_time_s(p.nbytes, lat, bw)
    separate = separate_copies_time_s(p.nbytes, p.copies, lat, bw)
    share = latency_share(lat, t)
    prefill = p.tokens * prefill_per_token_s
    return {
        "model": model_name, "payload": p.name, "tokens": p.tokens, "bytes": p.nbytes, "link": link_name,
        "bandwidth": inp.bandwidth, "bandwidth_bytes_per_s": bw, "latency_s": lat,
        "time_s": t, "latency_share": share, "bound": bound(share),
        "effective_bandwidth_bytes_per_s": effective_bandwidth_bytes_per_s(p.nbytes, t),
        "copies": p.copies, "time_separate_s": separate, "time_coalesced_s": t,
        "separate_over_coalesced": separate / t,
        "prefill_s": prefill, "transfer_over_prefill": t / prefill,
        "overlap_s": inp.overlap_s, "exposed_s": exposed_prefetch_s(t, inp.overlap_s),
    }


def tier_row(tier: str, capacity_bytes: float, link_name: str, link: LinkPreset, request_bytes_: float,
             inp: TransferInputs, prefill_per_token_s: float) -> dict:
    """A prefix-cache hit of one request's KV served from a lower tier: load vs the prefill it replaces."""
    bw = link.bandwidth_bytes_per_s(inp.bandwidth)
    load = transfer_time_s(request_bytes_, link.latency_s, bw)
    recompute = inp.context_tokens * prefill_per_token_s
    per_token = request_bytes_ / inp.context_tokens
    return {
        "tier": tier, "capacity_bytes": capacity_bytes, "requests_fit": math.floor(capacity_bytes / request_bytes_),
        "link": link_name, "bandwidth_bytes_per_s": bw, "latency_s": link.latency_s,
        "prefix_tokens": inp.context_tokens, "bytes": request_bytes_, "kv_bytes_per_token": per_token,
        "load_s": load, "recompute_s": recompute, "load_over_recompute": load / recompute,
        "load_wins": load < recompute,
        "breakeven_bandwidth_bytes_per_s": breakeven_bandwidth_bytes_per_s(per_token, prefill_per_token_s),
    }


TRANSFER_COLUMNS = (
    ("payload", "payload", "text"),
    ("link", "link", "text"),
    ("bytes", "bytes", "bytes"),
    ("time_s", "time", "s"),
    ("latency_share", "latency share", "percent"),
    ("effective_bandwidth_bytes_per_s", "effective bw", "bytes_per_s"),
    ("copies", "blocks", "int"),
    ("time_separate_s", "as separate copies", "s"),
    ("prefill_s", "prefill", "s"),
    ("exposed_s", "exposed", "s"),
)
TIER_COLUMNS = (
    ("tier", "tier", "text"),
    ("link", "link", "text"),
    ("capacity_bytes", "capacity", "bytes"),
    ("requests_fit", "requests fit", "int"),
    ("bytes", "prefix KV", "bytes"),
    ("load_s", "load", "s"),
    ("recompute_s", "recompute", "s"),
    ("load_over_recompute", "load/recompute", "ratio"),
    ("breakeven_bandwidth_bytes_per_s", "break-even bw", "bytes_per_s"),
)


def _transfer_explain(r: dict) -> list[str]:
    from kvcalc.out import explain
    from kvcalc.out.units import fmt_count, fmt_percent, fmt_seconds

    lines = ["  " + explain.transfer_line(f"{r['payload']} over {r['link']}", r["bytes"], r["latency_s"],
                                          r["bandwidth_bytes_per_s"], r["time_s"])
             + f"; latency share {fmt_percent(r['latency_share'])}"]
    if r["copies"] > 1:
        lines.append(f"    as {fmt_count(r['copies'])} separate copies: {fmt_count(r['copies'])} x "
                     f"{fmt_seconds(r['latency_s'])} + bytes / bandwidth = {fmt_seconds(r['time_separate_s'])}")
    return lines


def transfer_result(model_name: str, model: ModelPreset, links: list[tuple[str, LinkPreset]], hw_name: str,
                    hw: HardwarePreset, inp: TransferInputs, opts=None,
                    tiers: list[tuple[str, float, str, LinkPreset]] | None = None):
    """The ``kvcalc transfer`` result: payloads x links; with ``tiers`` [(tier, capacity [B], link name, link)]
    also a table of prefix-cache hits served from those tiers (load vs recompute)."""
    from kvcalc.model import attention as att
    from kvcalc.out.results import Column, Result, Table
    from kvcalc.out.units import fmt_count, fmt_percent, fmt_rate, fmt_seconds

    opts = opts or att.KvOptions()
    dtype = compute_dtype(model.weight_bytes_per_param)
    peak = hw.peak_flops(dtype)
    per_token = prefill_s_per_token(model, inp.gpus, peak, inp.mfu)
    pls = payloads(model, inp, opts)
    valid = inp.block_tokens % model.block_tokens_multiple == 0
    rows = [transfer_row(model_name, p, ln, lk, inp, per_token) | {"block_valid": valid}
            for p in pls for ln, lk in links]
    notes = [
        f"time = latency + bytes / bandwidth ({inp.bandwidth} bandwidth"
        + ("; theoretical where none was measured" if inp.bandwidth == "measured" else "") + "); "
        "latency share = latency / time; effective bandwidth = bytes / time.",
        f"payloads: one {inp.block_tokens}-token block (padded as the kernel pages it), one {inp.context_tokens:,}-"
        f"token request's KV (stored entries + fixed state, unpadded), a batch of {inp.requests:,} requests; "
        "as separate copies = one copy per block, each paying the latency.",
        f"prefill = tokens x 2 x {fmt_count(per_token_matmul_params(model))} params per token (active minus "
        f"embedding and LM head) / ({inp.gpus} x {fmt_rate(peak, 'FLOP/s')} {dtype.upper()} dense (the model's "
        f"{model.weight_bytes_per_param:g} B/param weights) x MFU {inp.mfu:g}) = {fmt_seconds(per_token)} "
        "per token (matmuls only; the 0.2 default: end-to-end prefill of big MoE models runs at ~15-24% of "
        f"dense peak: DeepSeek production ~15%, RTP-LLM ~20%, SGLang on H100 ~24%); exposed = max(0, time - overlap {fmt_seconds(inp.overlap_s)}) "
        "(speculative prefetch, strategy D).",
    ]
    if not valid:
        notes.append(f"{model_name}: {inp.block_tokens}-token blocks are not valid for this model (engines need a "
                     f"multiple of {model.block_tokens_multiple} tokens); the block row is shown but flagged")
    lines = [f"{model_name}, {inp.context_tokens:,} tokens x {inp.requests:,} requests, "
             f"{inp.block_tokens}-token blocks:"]
    for r in rows:
        lines += _transfer_explain(r)
    extra = []
    if tiers:
        req = pls[1].nbytes
        trows = [tier_row(tier, cap, ln, lk, req, inp, per_token) for tier, cap, ln, lk in tiers]
        extra.append(Table("tiers", f"Prefix-cache hit of one {inp.context_tokens:,}-token request served from "
                           "a lower tier: load vs the prefill it replaces",
                           tuple(Column(*c) for c in TIER_COLUMNS), tuple(trows)))
        notes.append("tiers: load = latency + the request's KV / bandwidth; recompute = its prefill; break-even "
                     "bandwidth = KV bytes per token / prefill seconds per token (latency ignored); "
                     "requests fit = floor(capacity / request KV).")
        for t in trows:
            lines.append(f"  {t['tier']} over {t['link']}: load {explain_load(t)}; recompute "
                         f"{fmt_count(t['prefix_tokens'])} x {fmt_seconds(per_token)} = "
                         f"{fmt_seconds(t['recompute_s'])}; break-even {fmt_count(t['kv_bytes_per_token'])} B/token"
                         f" / {fmt_seconds(per_token)} = {fmt_rate(t['breakeven_bandwidth_bytes_per_s'], 'B/s')}")
    inputs = {"model": model_name, "context_tokens": inp.context_tokens, "requests": inp.requests,
              "block_tokens": inp.block_tokens, "block_valid": valid, "links": [n for n, _ in links],
              "bandwidth": inp.bandwidth, "overlap_s": inp.overlap_s, "hardware": hw_name, "gpus": inp.gpus,
              "mfu": inp.mfu, "prefill_s_per_token": per_token,
              "kv_dtype": opts.kv_dtype, "mla_layout": opts.mla_layout, "indexer_dtype": opts.indexer_dtype,
              "mtp": opts.mtp}
    if tiers:
        inputs["tiers"] = [{"tier": t, "capacity_bytes": c, "link": ln} for t, c, ln, _ in tiers]
    main = Table("transfer", f"{model_name}: moving a block, a request and a batch of {inp.requests:,} "
                 f"(latency share {fmt_percent(0.5)}+ = latency-bound)", tuple(Column(*c) for c in TRANSFER_COLUMNS),
                 tuple(rows))
    return Result("transfer", inputs, main, tuple(extra), tuple(lines), tuple(notes))


def explain_load(t: dict) -> str:
    """'6 us + 29.81 MB / 55.5 GB/s = 543 us' for a tier row."""
    from kvcalc.out.units import fmt_bytes, fmt_seconds

    return (f"{fmt_seconds(t['latency_s'])} + {fmt_bytes(t['bytes'])} / {fmt_bytes(t['bandwidth_bytes_per_s'])}/s"
            f" = {fmt_seconds(t['load_s'])}")
