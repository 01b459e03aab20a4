"""A trace as the requests of ``kvcalc bench``: arrivals, lengths and prefix blocks, in every trace format.

Send time = timestamp - the first timestamp [s]; prompt = input length and output = output length (at least one
token each: a request that asks for nothing still prefills and samples once); the prompt's block keys are its
hash ids (an equal id at the same position = an equal prefix up to that block; ``block_tokens`` tokens each),
which the scheduler's prefix cache matches when prefix caching is on. Formats (:mod:`kvcalc.trace.formats`):
Mooncake JSONL (``ceil(input / B)`` ids, 512-token blocks), full-block hash JSONL and kv-cache-tester JSON
(``floor(input / B)`` ids: the partial last block has none, so it is never read from the cache; kv-cache-tester's
own ``block_size``), and the lengths-only CSVs (Azure LLM inference, BurstGPT: arrivals and lengths, no keys, so
nothing is reused; a row of 0 input or 0 output tokens, a failed request, is a bad line: refused with its number,
or left out and counted with ``skip_bad``). Plain, gzip or Zstandard. At most ``limit`` requests are read (in file order, then sorted by
time).
"""

from __future__ import annotations


def trace_requests(path: str, limit: int | None = None, block_tokens: int | None = None,
                   trace_format: str = "auto", skip_bad: bool = False):
    """scheduler.Requests of the first ``limit`` requests of the trace at ``path`` (``block_tokens``: None = the
    trace's own (kv-cache-tester), else 512; ``trace_format``: see :mod:`kvcalc.trace.formats`; ``skip_bad``:
    leave out malformed lines, as the replay does)."""
    return read_trace_requests(path, limit, block_tokens, trace_format, skip_bad)[0]


def read_trace_requests(path: str, limit: int | None = None, block_tokens: int | None = None,
                        trace_format: str = "auto", skip_bad: bool = False):
    """(scheduler.Requests as :func:`trace_requests` reads them, the bad lines ``skip_bad`` left out, the first
    one's problem or None)."""
    import numpy as np

    from kvcalc.serve.scheduler import Requests
    from kvcalc.trace.formats import open_trace, trace_block_tokens

    block_tokens = trace_block_tokens(path, trace_format, block_tokens)
    reader = open_trace(path, block_tokens, skip_bad, trace_format)
    send, prompt, output, keys = [], [], [], []
    skipped, last = None, None
    for r in reader:
        send.append(r.timestamp_ms / 1e3)
        prompt.append(max(1, r.input_length))
        output.append(max(1, r.output_length))
        keys.append(r.hash_ids)
        if limit is not None and len(send) >= limit:
            last = r.line_number
            break
    if last is not None and reader.skipped_lines:  # the reader read ahead of the last request kept: count the
        skipped = sum(1 for b in reader.bad_numbers if b < last)  # bad lines before it only
    order = np.argsort(np.asarray(send), kind="stable")
    t = np.asarray(send)[order]
    lengths_only = not any(keys)  # no hash ids at all (a lengths-only CSV): nothing for a prefix cache to match
    req = Requests(t - t[0], np.asarray(prompt, dtype=np.int64)[order], np.asarray(output, dtype=np.int64)[order],
                   None if lengths_only else [keys[i] for i in order.tolist()], block_tokens)
    return req, reader.skipped_lines if skipped is None else skipped, reader.first_problem


def skipped_note(skipped: int, first_problem: str | None) -> str | None:
    """The note of a run that left out ``skipped`` bad trace lines (``--skip-bad``), or None when it left none."""
    from kvcalc.trace.formats import SKIP_HINT

    if not skipped:
        return None
    first_problem = (first_problem or "").removesuffix(SKIP_HINT)
    return f"--skip-bad: {skipped:,} bad trace line{'s' if skipped != 1 else ''} left out (first: {first_problem})"


def route_requests(requests, replicas: int, router: str):
    """The replica [0, replicas) of each of ``requests`` (scheduler.Requests, in send order) behind ``router``
    (:mod:`kvcalc.trace.replicas`: the trace replay's routers, each replica's cache unlimited as the serving
    model's prefix cache is, a replica's load the prompt tokens routed to it so far); int64 array. ``kvcalc bench``
    routes by it for ``session`` only: its least-loaded and prefix decide on the serving clock (serve/cluster.py)."""
    import numpy as np

    from kvcalc.trace.replicas import ReplicaEngine

    keys = requests.keys if requests.keys is not None else [()] * len(requests.prompt)
    engine = ReplicaEngine(replicas, None, requests.key_tokens, "lru", router)
    return np.asarray(engine.assignments(zip(keys, requests.prompt.tolist())), dtype=np.int64)
