"""Moving bytes over a link: alpha-beta transfer times, separate vs coalesced copies, prefetch overlap, and the
break-even bandwidth of reuse vs recompute. Knows bytes and links only; what is moved (blocks, requests) and what
it is compared with (prefill) is :mod:`kvcalc.serve.transfer`'s.

time = latency + bytes / bandwidth, per copy (the alpha-beta model; ``reference/hardware.md``). A copy of a few
hundred bytes costs the link's fixed latency (5-7 us for a cudaMemcpy over PCIe), not bytes / bandwidth, so tiny
blocks are latency-bound. n separate copies pay n latencies; one coalesced copy pays one.

Prefill-to-decode handoff (strategy D, speculative prefetch): the exposed time is max(0, transfer - overlap).
Reuse vs recompute: loading a cached prefix beats prefilling it when bandwidth > KV bytes per token / prefill
seconds per token (the break-even bandwidth).

Functions over numbers accept floats or numpy arrays.
"""

from __future__ import annotations

from dataclasses import dataclass


def transfer_time_s(nbytes, latency_s: float, bandwidth_bytes_per_s: float):
    """Alpha-beta transfer time of one copy: latency + bytes / bandwidth [s]."""
    return latency_s + nbytes / bandwidth_bytes_per_s


def separate_copies_time_s(nbytes, copies, latency_s: float, bandwidth_bytes_per_s: float):
    """``copies`` separate copies of ``nbytes`` in all: copies x latency + bytes / bandwidth [s]."""
    return copies * latency_s + nbytes / bandwidth_bytes_per_s


def latency_share(latency_s: float, time_s):
    """Share of a transfer's time spent in fixed latency: latency / time [0..1]."""
    return latency_s / time_s


def effective_bandwidth_bytes_per_s(nbytes, time_s):
    """Bytes actually moved per second of transfer time, latency included [B/s]."""
    return nbytes / time_s


def exposed_prefetch_s(transfer_s, overlap_s):
    """Transfer time not hidden behind an overlap window (strategy D): max(0, transfer - overlap) [s]."""
    diff = transfer_s - overlap_s
    if hasattr(diff, "shape"):  # a numpy array (sweeps); numpy is imported only then
        import numpy as np

        return np.maximum(diff, 0.0)
    return max(0.0, float(diff))


def breakeven_bandwidth_bytes_per_s(kv_bytes_per_token, prefill_s_per_token_):
    """Bandwidth above which loading a token's KV is faster than prefilling it again (latency ignored) [B/s]."""
    return kv_bytes_per_token / prefill_s_per_token_


def bound(latency_share_: float) -> str:
    """'latency' when fixed latency is at least half the time, else 'bandwidth'."""
    return "latency" if latency_share_ >= 0.5 else "bandwidth"


@dataclass(frozen=True)
class Payload:
    """Something to move: its name, tokens, bytes [B] and the blocks it is made of (copies if sent apart)."""

    name: str
    tokens: int
    nbytes: float
    copies: int
