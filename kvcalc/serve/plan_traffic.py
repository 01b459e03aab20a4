"""``kvcalc plan``'s request lists: a workload preset as requests (classes, shared prefixes as block keys,
Poisson arrivals), and the split of a request list over replicas by index (the trace layer's routers pick the
indices: kvcalc/trace/plan_input.py)."""

from __future__ import annotations

import math

KEY_TOKENS = 16  # tokens per prefix block key (vLLM's block size)


def workload_requests(w, request_rate: float, seed: int = 0):
    """scheduler.Requests of a workload preset: its classes in file order (prompt = context_tokens, output =
    output_tokens, at least 1 each), arrivals at t = 0 (rate inf) or Poisson at ``request_rate`` [req/s] drawn
    with ``seed``; block b of the shared prefix has the key (b, the groups of every segment that starts before
    the block ends), so equal keys = an equal prefix up to that block."""
    import numpy as np

    from kvcalc.serve.scheduler import Requests

    prompt = np.concatenate([np.full(c.count, c.context_tokens, dtype=np.int64) for c in w.classes])
    output = np.concatenate([np.full(c.count, max(1, c.output_tokens), dtype=np.int64) for c in w.classes])
    n = len(prompt)
    if math.isinf(request_rate):
        send = np.zeros(n)
    else:
        gaps = np.random.default_rng(seed).exponential(1.0 / request_rate, n)
        send = np.concatenate([[0.0], np.cumsum(gaps[:-1])])
    starts, total = [], 0
    for s in w.shared:
        starts.append(total)
        total += s.tokens
    keys = None
    if w.shared:
        idx = np.arange(n)
        groups = [idx * s.groups // n for s in w.shared]  # request i's group in each segment
        blocks = total // KEY_TOKENS
        seg_of_block = [sum(1 for st in starts if st < (b + 1) * KEY_TOKENS) for b in range(blocks)]
        keys = [tuple((b,) + tuple(int(groups[j][i]) for j in range(seg_of_block[b])) for b in range(blocks))
                for i in range(n)]
    return Requests(send, prompt, output, keys, KEY_TOKENS)


def part(req, index):
    """The requests at ``index`` (a sorted index array), as scheduler.Requests."""
    import numpy as np

    return req.take(np.asarray(index, dtype=np.int64))


def round_robin(req):
    """``split(replicas)``: request k to replica k mod replicas (as ``kvcalc bench --dp`` splits)."""
    import numpy as np

    def split(replicas: int):
        n = len(req.prompt)
        return [part(req, np.arange(r, n, replicas)) for r in range(replicas)]
    return split
