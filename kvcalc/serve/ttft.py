"""Time to first token of concurrent requests that all arrive together, in closed form.

Each request i needs w_i prefill FLOPs; the node runs R = gpus x peak x MFU FLOP/s.
  processor-sharing  the node is shared equally by the requests still prefilling: sorted by work, request i
                     finishes at sum_j min(w_j, w_i) / R. The last one finishes with the whole batch
                     (sum_j w_j / R = the prefill time), so no request waits longer than the batch takes.
                     The smallest requests finish at n x w / R: the article's 2,000 x 26 GFLOP / (16 PFLOP/s /
                     100) = 0.325 s for a 2K request among 100.
  fcfs               one request at a time with the whole node, in workload order (classes in file order; within
                     a class, requests that build a shared prefix first, as each group's first request arrives
                     first): request i finishes at sum_{j <= i} w_j / R.
  even-split         the article's: every request gets R / n for its whole prefill, T_i = w_i x n / R. It
                     ignores that compute frees up as short requests finish, so a long request can "wait" longer
                     than the whole batch takes (kept to reproduce the article's figures, named as such).
"""

from __future__ import annotations

TTFT_MODELS = {
    "processor-sharing": "the node shared equally by the requests still prefilling (all arrive together)",
    "fcfs": "first come first served, one request at a time with the whole node",
    "even-split": "the article's: node compute split evenly over all concurrent requests for the whole prefill",
}


def ttft_by_slice(works: list[float], counts: list[int], order: list[int], node_flops_per_s: float,
                  model: str) -> list[tuple[float, float]]:
    """(sum of TTFTs, largest TTFT) of each slice of ``counts[k]`` requests of ``works[k]`` FLOPs each [s];
    ``order`` is the slices' arrival order (FCFS only)."""
    if model not in TTFT_MODELS:
        raise ValueError(f"unknown TTFT model {model!r}")
    n = sum(counts)
    if model == "even-split":
        return [(c * w * n / node_flops_per_s, w * n / node_flops_per_s) for w, c in zip(works, counts)]
    out: list[tuple[float, float]] = [(0.0, 0.0)] * len(works)
    if model == "fcfs":
        start = 0.0
        for k in order:
            w, c = works[k] / node_flops_per_s, counts[k]
            out[k] = (c * start + w * c * (c + 1) / 2, start + c * w)
            start += c * w
        return out
    from itertools import groupby

    done_work, left = 0.0, n           # sum of c_j w_j over smaller works; requests with w_j >= w
    for w, tied in groupby(sorted(range(len(works)), key=lambda k: works[k]), key=lambda k: works[k]):
        tied = list(tied)
        t = (done_work + w * left) / node_flops_per_s
        for k in tied:
            out[k] = (counts[k] * t, t)
        c = sum(counts[k] for k in tied)
        done_work += c * w
        left -= c
    return out
