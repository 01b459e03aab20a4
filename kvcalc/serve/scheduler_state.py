"""The scheduler's inputs and outputs (Pool, Scheduling, Requests, Run) and the state of one run, shared by its two
loops: scheduler.py's (runs of decode steps in numpy) and scheduler_fast.py's (O(1) work per step)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional


@dataclass(frozen=True)
class Pool:
    """The KV pool of one replica in blocks, as the engine pages it (memory/engine_vllm.py's KV-cache groups):
    a request of L tokens holds full x ceil(L / B) + sum over sliding groups of ceil(min(W, L) / B) + 1, + one
    block per state group [blocks]. A sliding group frees the blocks that left the window after each step
    (vLLM's SlidingWindowManager), so it holds W + one partial block, not the W - 1 + max_num_batched_tokens that
    the pool's sizing reserves for the worst step."""

    num_blocks: int
    block_size: int
    full_groups: int = 1
    sliding_windows: tuple = ()   # one window per sliding KV-cache group [tokens]
    state_groups: int = 0
    batched_tokens: int = 8192

    def need_one(self, tokens: int) -> int:
        """:meth:`need` of one request, in plain Python (the scheduler's per-request calls) [blocks]."""
        b = self.block_size
        n = self.full_groups * (-(-tokens // b))
        if tokens > 0:
            n += sum(-(-min(w, tokens) // b) + 1 for w in self.sliding_windows) + self.state_groups
        return n

    def need(self, tokens):
        """Blocks a request holding ``tokens`` tokens needs (int or numpy array) [blocks]."""
        import numpy as np

        t = tokens if isinstance(tokens, np.ndarray) and tokens.dtype == np.int64 else np.asarray(tokens, np.int64)
        b = self.block_size
        n = -(-t // b)
        if self.full_groups != 1:
            n = n * self.full_groups
        for w in self.sliding_windows:
            n = n + (-(-np.minimum(w, t) // b)) + (t > 0)
        return n + self.state_groups * (t > 0) if self.state_groups else n


@dataclass(frozen=True)
class Scheduling:
    """The scheduler's limits and the client's behaviour. ``mixed_batches``: a step carries the running decodes and
    prefill chunks together (vLLM V1, TensorRT-LLM's in-flight batching); False is SGLang's default (server_args
    ``enable_mixed_chunk: bool = False``; scheduler.py ``get_next_batch_to_run`` builds a prefill batch first
    whenever a request can be admitted, and only when none is built does the running batch decode): a step is
    prefill-only (a chunked prefill in progress first, then admissions, up to the token budget) whenever any
    prefill chunk can be scheduled, else decode-only (every running decode, 1 token each, not capped by the
    budget)."""

    max_num_batched_tokens: int
    max_num_seqs: int
    prefix_caching: bool = False
    reserve_output: bool = False
    max_concurrency: Optional[int] = None
    frontend_s_per_request: float = 0.0
    frontend_s_per_input_token: float = 0.0
    mixed_batches: bool = True


@dataclass
class Requests:
    """The requests of a run: send times [s] (sorted), prompt and output lengths [tokens], and optionally each
    request's prompt block keys (equal keys = equal prefix blocks of ``key_tokens`` tokens) for prefix caching,
    and ``handed``: prompt tokens whose KV arrives with the request (a prefill/decode hand-off), skipped at its
    first admission as a prefix-cache hit is (at least one token is computed) [tokens]."""

    send_s: object
    prompt: object
    output: object
    keys: Optional[list] = None
    key_tokens: int = 16
    handed: Optional[object] = None
    warm_keys: Optional[frozenset] = None   # block keys already in the prefix cache when the run starts
    load_s: Optional[object] = None         # per request: waits this long after the front end for its KV to load
                                            # from a lower tier (trace/plan_tiers.py) [s]

    def take(self, at):
        """The requests at ``at`` (an index array or a slice) with every per-request field."""
        import numpy as np

        idx = np.arange(len(self.prompt))[at]
        pick = (lambda a: None if a is None else np.asarray(a)[idx])
        keys = None if self.keys is None else [self.keys[i] for i in idx.tolist()]
        return Requests(np.asarray(self.send_s)[idx], np.asarray(self.prompt)[idx], np.asarray(self.output)[idx],
                        keys, self.key_tokens, handed=pick(self.handed), warm_keys=self.warm_keys,
                        load_s=pick(self.load_s))


@dataclass
class Run:
    """What happened to each request [s] and counters of the run."""

    send_s: object
    first_s: object
    done_s: object
    output: object
    prompt: object
    steps: int = 0
    preemptions: int = 0
    cached_tokens: int = 0
    prefill_tokens: int = 0
    peak_running: int = 0
    jumps: int = 0
    prefill_time_s: float = 0.0   # step time shared out by the steps' prefill tokens [s]
    decode_time_s: float = 0.0
    notes: list = field(default_factory=list)
    gap_s: object = None          # the gaps between successive output tokens, pooled over requests [s] ...
    gap_n: object = None          # ... and how many tokens had each (vLLM's ITL list, compressed)
    engine_s: object = None       # when each request reached the engine, out of the front end [s] (None: not kept)


class _State:
    """Mutable state of one simulation (arrays indexed by request)."""

    def __init__(self, req: Requests, sch: Scheduling):
        import numpy as np

        n = len(req.prompt)
        self.n = n
        self.prompt = np.asarray(req.prompt, dtype=np.int64)
        self.output = np.asarray(req.output, dtype=np.int64)
        self.sched_send = np.asarray(req.send_s, dtype=float)
        self.send = np.full(n, math.inf)
        self.engine = np.full(n, math.inf)
        self.computed = np.zeros(n, dtype=np.int64)
        self.target = self.prompt.copy()
        self.gen = np.zeros(n, dtype=np.int64)
        self.held = np.zeros(n, dtype=np.int64)
        self.first = np.full(n, math.nan)
        self.done = np.full(n, math.nan)
        self.admitted_once = np.zeros(n, dtype=bool)
        self._send, self._prompt = self.sched_send.tolist(), self.prompt.tolist()  # Python floats for release
        self.released = 0
        self.fe_free = 0.0
        self.sch = sch
        self.load = None if req.load_s is None else np.asarray(req.load_s, dtype=float)

    def release(self, i: int, now: float) -> None:
        """Send request i at max(its time, now) through the serial front end."""
        sch = self.sch
        self.send[i] = send = max(self._send[i], now)
        start = max(send, self.fe_free)
        self.engine[i] = self.fe_free = (start + sch.frontend_s_per_request
                                         + sch.frontend_s_per_input_token * self._prompt[i])
        if self.load is not None:  # its KV loads from a lower tier first (the queue behind it waits too)
            self.engine[i] += float(self.load[i])
        self.released += 1


def leading_hits(keys, cache: set) -> int:
    """How many of a prompt's leading block keys the prefix cache holds [blocks]."""
    n = 0
    for k in keys:
        if k not in cache:
            break
        n += 1
    return n


def begin_run(pool: Pool, req: Requests, sch: Scheduling):
    """(state, Run) of a run with its first requests sent (up to the client's cap); a pool that cannot hold the
    run's largest request is refused (ValueError)."""
    st = _State(req, sch)
    run = Run(st.send, st.first, st.done, st.output, st.prompt, engine_s=st.engine)
    if st.n == 0:
        return st, run
    for i in range(min(sch.max_concurrency or st.n, st.n)):
        st.release(i, 0.0)
    biggest = pool.need_one(int(st.prompt.max()) + (int(st.output.max()) if sch.reserve_output else 1))
    if biggest > pool.num_blocks:
        raise ValueError(f"the KV pool ({pool.num_blocks:,} blocks of {pool.block_size} tokens) cannot hold one "
                         f"request of the run ({biggest:,} blocks)")
    return st, run
