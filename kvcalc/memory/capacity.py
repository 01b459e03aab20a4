"""How many requests fit in GPU memory after the weights, and the paged block a request is made of.

Placement (stated in every output): the weights are spread evenly over the ``gpus`` GPUs; attention is
tensor-parallel over the same GPUs, so full-attention KV shards by KV head (each rank holds
ceil(kv_heads / tp) heads) while a single latent head (MLA, V4) is replicated on every rank.
With ``attention="dp"`` (data-parallel attention) each GPU holds whole requests of its own.

per-GPU budget = HBM x utilisation - weights / gpus - reserve
requests that fit = floor(per-GPU budget / per-GPU KV per request) (x gpus with dp attention)
block bytes = the paged block as blocks.py computes it (padded to the kernel's page alignment).
page-in = latency + block bytes per GPU / bandwidth: under tensor parallelism each GPU loads its own share of the
block (its KV heads; a replicated latent loads whole) over its own host link, all GPUs in parallel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvcalc.memory.blocks import block_bytes as paged_block_bytes
from kvcalc.memory.blocks import group_block_bytes
from kvcalc.model import attention as att
from kvcalc.model.kv import request_bytes
from kvcalc.model.schema import HardwarePreset, LinkPreset, ModelPreset
from kvcalc.move.links import transfer_time_s


@dataclass(frozen=True)
class CapacityInputs:
    """Everything a capacity row depends on besides the presets."""

    gpus: int = 8
    context_tokens: int = 4096
    hbm_utilization: float = 0.9
    reserve_bytes_per_gpu: float = 0.0
    attention: str = "tp"          # tp | dp
    block_tokens: int = 16
    bandwidth: str = "measured"    # measured | theoretical
    kv_compression: float = 1.0    # the article's section-11 what-if (an unproven hypothesis): KV bytes / FACTOR


def per_gpu_request_bytes(groups: list[att.GroupLayout], tokens: int, tp: int) -> float:
    """KV of one request held by one tensor-parallel rank [B] (state included, replicated with its latent)."""
    return sum(att.per_gpu_share(g, tp) * (att.stored_bytes(g, tokens) + att.state_bytes(g)) for g in groups)


def _floor(x):
    """floor(x) for a float (-> int) or a numpy array (-> int64 array)."""
    if isinstance(x, (int, float)):
        return math.floor(x)
    import numpy as np

    return np.floor(x).astype(np.int64)


def _where(cond, a, b):
    """``a if cond else b`` for a bool, elementwise for a numpy bool array."""
    if isinstance(cond, bool):
        return a if cond else b
    import numpy as np

    return np.where(cond, a, b)


def per_gpu_block_bytes(groups: list[att.GroupLayout], block_tokens: int, align: int | None, tp) -> float:
    """The share of one paged block a tensor-parallel rank holds and pages in [B] (tp may be a numpy array):
    sum over groups of ceil(kv_heads / tp) / kv_heads (1 for a replicated latent) x the group's block bytes."""
    return sum(att.per_gpu_share(g, tp) * group_block_bytes(g, block_tokens, align) for g in groups)


def capacity_arrays(groups: list[att.GroupLayout], weight_bytes: float, hbm_bytes: float, tokens, gpus,
                    hbm_utilization, reserve_bytes_per_gpu, attention: str = "tp", block: tuple | None = None,
                    kv_scale: float = 1.0) -> dict:
    """The capacity figures that depend on context, GPUs, utilisation and reserve, for scalars or numpy arrays
    (broadcast together; a sweep passes whole grids, ``capacity_row`` the one-point case) [B, counts].
    ``block`` = (block tokens, page alignment [B], link latency [s], link bandwidth [B/s]) adds each GPU's share
    of a block and its page-in time, which depend on the GPU count. ``kv_scale`` multiplies every KV byte
    (1 / --kv-compression)."""
    kv_request = request_bytes(groups, tokens) * kv_scale
    dp = attention == "dp"
    kv_request_gpu = per_gpu_request_bytes(groups, tokens, 1 if dp else gpus) * kv_scale
    budget_gpu = hbm_bytes * hbm_utilization - weight_bytes / gpus - reserve_bytes_per_gpu
    fits = budget_gpu > 0
    if dp:
        per_fit = gpus * _floor(budget_gpu / kv_request)
    else:
        per_fit = _floor(budget_gpu / kv_request_gpu)
    budget_gpu_kept = _where(fits, budget_gpu, 0.0)
    paging = {}
    if block is not None:
        block_tokens, align, latency_s, bandwidth = block
        block_gpu = per_gpu_block_bytes(groups, block_tokens, align, 1 if dp else gpus) * kv_scale
        paging = {"block_bytes_per_gpu": block_gpu,
                  "block_page_in_s": transfer_time_s(block_gpu, latency_s, bandwidth)}
    return paging | {
        "gpus": gpus, "context_tokens": tokens, "hbm_utilization": hbm_utilization,
        "weight_bytes_per_gpu": weight_bytes / gpus, "weights_fit": fits,
        "kv_budget_bytes": budget_gpu_kept * gpus, "kv_budget_bytes_per_gpu": budget_gpu_kept,
        "kv_bytes_per_token": kv_request / tokens, "kv_bytes_per_request": kv_request,
        "kv_bytes_per_request_per_gpu": kv_request_gpu, "max_requests": _where(fits, per_fit, 0),
    }


def capacity_static(name: str, model: ModelPreset, groups: list[att.GroupLayout], hw_name: str,
                    hw: HardwarePreset, link_name: str, link: LinkPreset, inp: CapacityInputs) -> dict:
    """The capacity figures that do not depend on context, GPUs, utilisation or reserve (block, link)."""
    block_bytes = paged_block_bytes(groups, inp.block_tokens, model.page_align_bytes) / inp.kv_compression
    bw = link.bandwidth_bytes_per_s(inp.bandwidth)
    return {
        "model": name, "hardware": hw_name, "attention": inp.attention, "hbm_bytes_per_gpu": hw.device_memory_bytes,
        "weight_bytes": model.weight_bytes, "block_tokens": inp.block_tokens, "block_bytes": block_bytes,
        "block_valid": inp.block_tokens % model.block_tokens_multiple == 0,
        "link": link_name, "link_bandwidth_bytes_per_s": bw, "link_latency_s": link.latency_s,
    }


ROW_KEYS = ("model", "hardware", "gpus", "context_tokens", "attention", "hbm_bytes_per_gpu", "hbm_utilization",
            "weight_bytes", "weight_bytes_per_gpu", "weights_fit", "kv_budget_bytes", "kv_budget_bytes_per_gpu",
            "kv_bytes_per_token", "kv_bytes_per_request", "kv_bytes_per_request_per_gpu", "max_requests",
            "block_tokens", "block_bytes", "block_bytes_per_gpu", "block_valid", "link", "link_bandwidth_bytes_per_s", "link_latency_s",
            "block_page_in_s")


def capacity_row(name: str, model: ModelPreset, hw_name: str, hw: HardwarePreset, link_name: str,
                 link: LinkPreset, inp: CapacityInputs, opts: att.KvOptions = att.KvOptions()) -> dict:
    """One model on one node: budget, requests that fit, block bytes and page-in time (raw SI units)."""
    groups = att.resolve_groups(model, opts)
    parts = capacity_static(name, model, groups, hw_name, hw, link_name, link, inp) | capacity_arrays(
        groups, model.weight_bytes, hw.device_memory_bytes, inp.context_tokens, inp.gpus, inp.hbm_utilization,
        inp.reserve_bytes_per_gpu, inp.attention, block=page_in_block(model, link, inp),
        kv_scale=1.0 / inp.kv_compression)
    return {k: parts[k] for k in ROW_KEYS}


def page_in_block(model: ModelPreset, link: LinkPreset, inp: CapacityInputs) -> tuple:
    """The ``block`` argument of capacity_arrays: (block tokens, page alignment, latency [s], bandwidth [B/s])."""
    return inp.block_tokens, model.page_align_bytes, link.latency_s, link.bandwidth_bytes_per_s(inp.bandwidth)


CAPACITY_COLUMNS = (
    ("model", "model", "text"),
    ("kv_bytes_per_token", "KV/token", "bytes"),
    ("kv_bytes_per_request", "KV/request", "bytes"),
    ("weight_bytes_per_gpu", "weights/GPU", "bytes"),
    ("kv_budget_bytes", "KV budget", "bytes"),
    ("max_requests", "requests", "fit"),
    ("block_bytes", "block", "bytes"),
    ("block_page_in_s", "page-in", "s"),
)


def capacity_result(models, hw_name: str, hw: HardwarePreset, link_name: str, link: LinkPreset,
                    inp: CapacityInputs, opts: att.KvOptions = att.KvOptions()):
    """The ``kvcalc capacity`` result for several models on one node."""
    from kvcalc.model.kv import context_notes
    from kvcalc.out import explain
    from kvcalc.out.results import Column, Result, Table
    from kvcalc.out.units import fmt_bytes, fmt_count, fmt_percent

    rows = [capacity_row(n, m, hw_name, hw, link_name, link, inp, opts) for n, m in models]
    place = ("data-parallel attention: each GPU holds whole requests" if inp.attention == "dp" else
             f"tensor-parallel attention over {inp.gpus} GPUs: GQA KV shards by KV head, "
             "a single latent head (MLA, V4) is replicated on every GPU")
    notes = [f"{inp.gpus} x {hw.display_name}, {hw.device_memory_label}, "
             f"{fmt_percent(inp.hbm_utilization)} usable; weights spread evenly over the GPUs; {place}.",
             f"{inp.block_tokens}-token blocks paged in over {link.display_name} ({inp.bandwidth} bandwidth): "
             "latency + bytes / bandwidth, each GPU loading its own share of the block over its own link."]
    lines = []
    usable, reserve = hw.device_memory_bytes * inp.hbm_utilization, inp.reserve_bytes_per_gpu
    if reserve >= usable:
        notes.append(f"the reserve ({fmt_bytes(reserve)} per GPU) is not below the usable HBM ({fmt_bytes(usable)} "
                     "per GPU): no room for weights or KV")
    for r, (n, m) in zip(rows, models):
        notes.extend(context_notes(n, m, [inp.context_tokens]))
        if not r["weights_fit"] and reserve < usable:
            held = (f"the weights ({fmt_bytes(r['weight_bytes_per_gpu'])} per GPU)" if reserve == 0 else
                    f"the weights ({fmt_bytes(r['weight_bytes_per_gpu'])}) and the reserve ({fmt_bytes(reserve)}) "
                    "per GPU")
            notes.append(f"{n}: {held} do not fit in {fmt_bytes(usable)} usable HBM: no room for KV")
        states = [g for g in att.resolve_groups(m, opts) if g.kind in ("linear", "mamba")]
        if states and inp.attention != "dp":
            kinds = " and ".join(sorted({g.kind for g in states}))
            notes.append(f"{n}: its {kinds} state ({fmt_bytes(sum(att.state_bytes(g) for g in states))} per request) "
                         f"shards by head over the {inp.gpus} GPUs, like GQA KV")
        if not r["block_valid"]:
            notes.append(f"{n}: {inp.block_tokens}-token blocks are not valid for this model "
                         f"(engines need a multiple of {m.block_tokens_multiple} tokens)")
        lines.append(
            f"{n}: per-GPU budget = {fmt_bytes(hw.device_memory_bytes)} x {inp.hbm_utilization:g} - "
            f"{fmt_bytes(r['weight_bytes'])} / {inp.gpus}"
            + (f" - reserve {fmt_bytes(reserve)}" if reserve else "") + f" = {fmt_bytes(r['kv_budget_bytes_per_gpu'])}; "
            f"requests = floor({fmt_bytes(r['kv_budget_bytes_per_gpu'])} / "
            f"{fmt_bytes(r['kv_bytes_per_request_per_gpu'])} per GPU per request)"
            + (f" x {inp.gpus}" if inp.attention == "dp" else "") + f" = {fmt_count(r['max_requests'])}")
        lines.append("  " + explain.transfer_line(f"page-in of {inp.block_tokens}-token block (one GPU's share)",
                                                  r["block_bytes_per_gpu"],
                                                  r["link_latency_s"], r["link_bandwidth_bytes_per_s"],
                                                  r["block_page_in_s"]))
    main = Table("capacity", f"Requests that fit at {inp.context_tokens:,} tokens each; "
                 f"{inp.block_tokens}-token block and its page-in time",
                 tuple(Column(*c) for c in CAPACITY_COLUMNS), tuple(rows))
    inputs = {"models": [n for n, _ in models], "hardware": hw_name, "gpus": inp.gpus,
              "context_tokens": inp.context_tokens, "hbm_utilization": inp.hbm_utilization,
              "reserve_bytes_per_gpu": inp.reserve_bytes_per_gpu, "attention": inp.attention,
              "block_tokens": inp.block_tokens, "link": link_name, "bandwidth": inp.bandwidth,
              "kv_dtype": opts.kv_dtype, "mla_layout": opts.mla_layout, "indexer_dtype": opts.indexer_dtype,
              "mtp": opts.mtp}
    if opts.state_dtype:
        inputs["state_dtype"] = opts.state_dtype
    if inp.kv_compression != 1.0:
        inputs["kv_compression"] = inp.kv_compression
        notes.append(f"--kv-compression {inp.kv_compression:g}: the article's unproven hypothesis (its section 11, "
                     "delta encoding): every KV byte stored and paged in / FACTOR")
    return Result("capacity", inputs, main, (), tuple(lines), tuple(notes))
