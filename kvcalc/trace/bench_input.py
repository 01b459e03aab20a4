"""A trace as the requests of ``kvcalc bench``: arrivals, lengths and prefix blocks (Mooncake JSONL).

Send time = timestamp - the first timestamp [s]; prompt = input_length and output = output_length (at least one
token each: a request that asks for nothing still prefills and samples once); the prompt's block keys are its
``hash_ids`` (an equal id at the same position = an equal prefix up to that block; ``block_tokens`` tokens each,
512 in Mooncake's traces), which the scheduler's prefix cache matches when prefix caching is on. At most
``limit`` requests are read (in file order, sorted by time).
"""

from __future__ import annotations

from kvcalc.trace.reader import DEFAULT_BLOCK_TOKENS, read_trace


def trace_requests(path: str, limit: int | None = None, block_tokens: int = DEFAULT_BLOCK_TOKENS):
    """scheduler.Requests of the first ``limit`` requests of the trace at ``path``."""
    import numpy as np

    from kvcalc.serve.scheduler import Requests

    send, prompt, output, keys = [], [], [], []
    for r in read_trace(path, block_tokens):
        send.append(r.timestamp_ms / 1e3)
        prompt.append(max(1, r.input_length))
        output.append(max(1, r.output_length))
        keys.append(tuple(r.hash_ids))
        if limit is not None and len(send) >= limit:
            break
    order = np.argsort(np.asarray(send), kind="stable")
    t = np.asarray(send)[order]
    return Requests(t - t[0], np.asarray(prompt, dtype=np.int64)[order], np.asarray(output, dtype=np.int64)[order],
                    [keys[i] for i in order.tolist()], block_tokens)
