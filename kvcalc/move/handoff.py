"""Prefill/decode disaggregation: the KV a prefill node hands to a decode node, and speculative prefetch.

Handed-off KV per strategy = every request's KV (entries + fixed state) minus what its reused prefix provides,
counted layer group by layer group (kvcalc.serve.sharing), which a prefix-tree deployment keeps on the decode side. Each request's KV moves as one coalesced copy:
time = latency + bytes / bandwidth. Speculative prefetch (the article's strategy D) starts the copy early and
hides it behind an overlap window (default: one decode step, 1 / decode tokens per second; none when nothing
decodes); what remains is
exposed = max(0, transfer - overlap).
"""

from __future__ import annotations

from kvcalc.model.schema import LinkPreset
from kvcalc.move.links import exposed_prefetch_s, transfer_time_s


def handoff_fields(row: dict, link_name: str, link: LinkPreset, overlap_s: float | None,
                   bandwidth: str = "measured") -> dict:
    """PD figures for one strategy row (raw SI units): per request and for the whole batch."""
    n = row["requests"]
    bw = link.bandwidth_bytes_per_s(bandwidth)
    per_request_bytes = row["kv_handoff_bytes"] / n
    per_request_s = transfer_time_s(per_request_bytes, link.latency_s, bw)
    batch_s = transfer_time_s(row["kv_handoff_bytes"], link.latency_s, bw)
    # no request decodes (--output-tokens 0): no decode step follows to hide the copy behind
    decode = row["decode_tokens_per_s"] if row.get("output_tokens", 1) else None
    overlap = overlap_s if overlap_s is not None else (1.0 / decode if decode else 0.0)
    return {
        "pd_link": link_name, "pd_bandwidth_bytes_per_s": bw, "pd_latency_s": link.latency_s,
        "pd_handoff_bytes_per_request": per_request_bytes, "pd_handoff_s_per_request": per_request_s,
        "pd_handoff_batch_s": batch_s, "pd_handoff_over_prefill": batch_s / row["prefill_time_s"]
        if row["prefill_time_s"] else None,
        "pd_overlap_s": overlap, "pd_exposed_s_per_request": exposed_prefetch_s(per_request_s, overlap),
    }


PD_COLUMNS = (
    ("strategy", "strategy", "text"), ("pd_link", "link", "text"),
    ("pd_handoff_bytes_per_request", "KV / request", "bytes"), ("kv_handoff_bytes", "KV / batch", "bytes"),
    ("pd_handoff_s_per_request", "transfer / request", "s"), ("pd_handoff_batch_s", "transfer / batch", "s"),
    ("prefill_time_s", "prefill (batch)", "s"), ("pd_overlap_s", "overlap", "s"),
    ("pd_exposed_s_per_request", "exposed / request", "s"),
)


def pd_table(rows: list[dict], title: str = "coalesced copy per request; speculative prefetch hides it behind "
             "the overlap window"):
    """The 'disaggregation' table of compare/cost (``title``: what its figures are)."""
    from kvcalc.out.results import Column, Table

    return Table("disaggregation", f"Prefill -> decode hand-off ({title})", tuple(Column(*c) for c in PD_COLUMNS),
                 tuple(rows))
