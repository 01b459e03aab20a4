"""Derivations for ``--explain`` that need no model: formulas with the numbers substituted (text, never printed
here). The KV derivations live with the KV model, :mod:`kvcalc.model.kv_explain`."""

from __future__ import annotations

from kvcalc.out.units import fmt_bytes, fmt_seconds


def transfer_line(what: str, nbytes: float, latency_s: float, bw: float, total_s: float) -> str:
    """time = latency + bytes / bandwidth with the numbers substituted."""
    return (f"{what}: {fmt_seconds(latency_s)} + {fmt_bytes(nbytes)} / {fmt_bytes(bw)}/s = {fmt_seconds(total_s)}")
