"""A vLLM-V1-like continuous-batching scheduler, stepped over a whole run of requests on one replica.

Each step (vllm/v1/core/sched/scheduler.py's order): a token budget of max_num_batched_tokens; the running
requests first, in admission order: a decode takes 1 token, a request still prefilling takes min(what is left,
the budget) (chunked prefill); then waiting requests are admitted first come first served while budget is left,
fewer than max_num_seqs run and the KV pool has the blocks their first chunk needs. A running request that cannot
get a block preempts the most recently admitted one (recompute: its blocks are freed, it goes to the front of
the queue and later prefills prompt + generated tokens again). With prefix caching a new request skips the
prefill of its leading blocks that an earlier request has already computed (at least one token is computed,
as vLLM does). ``reserve_output`` (TensorRT-LLM's GUARANTEED_NO_EVICT) admits a request only when the blocks of
its whole prompt + output fit. Unmixed (``Scheduling.mixed_batches`` False: SGLang without --enable-mixed-chunk)
a step is prefill-only, the same chunks and admissions with the whole budget and pool, whenever it has any
chunk; else decode-only, every running decode (the budget does not cap them).

Requests reach the engine through a serial front end (HTTP, tokenising the text prompt: a fixed cost per request
+ a cost per prompt token); ``max_concurrency`` is ``vllm bench serve``'s client-side cap (a request is sent when
fewer than C are in flight). Steps are timed by :class:`kvcalc.serve.step_time.StepModel`. By default
:func:`simulate` hands the run to serve/scheduler_fast.py, the same rules at O(1) work per step (10^5 requests
in seconds: bench/bench_serving.py). This module's own loop (``fast=False``, and step models without decode
forms) computes a run of pure decode steps in one numpy call up to the next event (a finish, the pool running
out, an arrival into an empty queue); ``jump=False`` is the plain step-by-step loop both must equal.
"""

from __future__ import annotations

import math
from collections import deque

from kvcalc.out import progress
from kvcalc.serve.scheduler_state import (  # noqa: F401  (Pool, Requests, Run, Scheduling: imported from here)
    Pool, Requests, Run, Scheduling, _State, begin_run, leading_hits)

MAX_JUMP_CELLS = 2_000_000  # requests x steps evaluated in one numpy call of a decode run
MIN_JUMP_STEPS = 8          # shorter runs cost more as one numpy call than step by step (bench/bench_serving.py)
JUMP_CELLS_AT_ONCE = 4_096   # requests x steps a run first looks at for the step where the pool runs out (then 4 x)


def simulate(sm, pool: Pool, req: Requests, sch: Scheduling, jump: bool = True, fast: bool = True) -> Run:
    """Step the scheduler over every request of ``req`` on one replica timed by ``sm`` (a StepModel) -> Run.
    By default every step costs O(1) (serve/scheduler_fast.py) where the step model has decode forms;
    ``fast=False`` is this module's loop, with runs of decode steps in one numpy call (kept for
    bench/bench_serving.py and the tests), ``jump=False`` takes every step one at a time (the plain loop both
    must equal)."""
    import numpy as np

    if fast and jump:
        from kvcalc.serve import scheduler_fast

        forms = scheduler_fast.plan(sm, pool, req)
        if forms is not None:
            return scheduler_fast.simulate(sm, pool, req, sch, forms)
    st, run = begin_run(pool, req, sch)
    if st.n == 0:
        return run
    cache: set = set(req.warm_keys or ())
    waiting: deque = deque()
    run_arr = np.zeros(0, dtype=np.int64)   # the running requests, in admission order
    ptr, finished, now, free = 0, 0, 0.0, pool.num_blocks
    budget_cap, seq_cap, mixed = sch.max_num_batched_tokens, sch.max_num_seqs, sch.mixed_batches

    handed = None if req.handed is None else np.asarray(req.handed, dtype=np.int64)
    gaps = _Gaps(st.n)
    chunk_terms: dict = {}

    def hit_tokens(i: int) -> int:
        if st.admitted_once[i]:
            return 0
        if handed is not None:
            return max(0, min(int(handed[i]), int(st.target[i]) - 1))
        if not (sch.prefix_caching and req.keys is not None):
            return 0
        return min(leading_hits(req.keys[i], cache) * req.key_tokens, int(st.target[i]) - 1)

    tick = progress.counter(st.n)  # a bar on stderr counts the finished requests, if one is shown

    def finish(i: int) -> None:
        nonlocal finished, free
        st.done[i] = now
        free += int(st.held[i])
        st.held[i] = 0
        finished += 1
        if tick is not None:
            tick()
        if st.released < st.n:
            st.release(st.released, now)

    def preempt(j: int) -> None:
        nonlocal free
        free += int(st.held[j])
        st.held[j] = 0
        st.target[j] = st.prompt[j] + st.gen[j]
        st.computed[j] = 0
        waiting.appendleft(j)
        run.preemptions += 1

    def take_prefill(prefilling, budget: int, chunks: list, admitted: list) -> int:
        """The step's prefill chunks: the running requests still prefilling (a chunk whose blocks do not fit
        waits a step), then new requests first come first served -> the budget left [tokens]; nothing changes
        when no chunk is taken."""
        nonlocal free
        for i in prefilling:
            tokens = min(int(st.target[i] - st.computed[i]), budget)
            if tokens <= 0:
                continue
            need = 0 if sch.reserve_output else max(0, pool.need_one(int(st.computed[i]) + tokens) - int(st.held[i]))
            if need > free:
                continue
            free -= need
            st.held[i] += need
            budget -= tokens
            chunks.append((i, int(st.computed[i]), tokens))
        while waiting and budget > 0 and len(run_arr) + len(admitted) < seq_cap:
            i = waiting[0]
            hit = hit_tokens(i)
            start = hit if not st.admitted_once[i] else 0
            tokens = min(int(st.target[i]) - start, budget)
            total = int(st.prompt[i] + st.output[i]) if sch.reserve_output else start + tokens
            need = pool.need_one(total)
            if need > free:
                break
            waiting.popleft()
            if not st.admitted_once[i]:
                st.admitted_once[i] = True
                st.computed[i] = start
                run.cached_tokens += start
            free -= need
            st.held[i] = need
            admitted.append(i)
            chunks.append((i, start, tokens))
            budget -= tokens
        return budget

    def finish_done(r):
        """Finish the requests of ``r`` that have all their tokens -> the others."""
        left = st.gen[r] < st.output[r]
        if left.all():
            return r
        for i in r[~left].tolist():
            finish(i)
        return r[left]

    while finished < st.n:
        while ptr < st.released and st.engine[ptr] <= now:
            waiting.append(ptr)
            ptr += 1
        if not len(run_arr) and not waiting:
            now = float(st.engine[ptr])
            continue
        comp = st.computed[run_arr]
        decoding = comp >= st.target[run_arr]
        all_dec = bool(decoding.all())
        # the decodes' contexts and the blocks each needs for its next token, once per step
        d_all, ctx = (run_arr, comp + 1) if all_dec else (run_arr[decoding], comp[decoding] + 1)
        need_all = (np.zeros(len(d_all), dtype=np.int64) if sch.reserve_output else
                    np.maximum(pool.need(ctx) - st.held[d_all], 0))
        need_sum = int(need_all.sum())
        # ---- a run of pure decode steps, in one call (not when even its first step's blocks do not fit)
        if (jump and len(run_arr) and all_dec and (len(run_arr) <= budget_cap or not mixed) and need_sum <= free
                and int((st.output[run_arr] - st.gen[run_arr]).min()) >= MIN_JUMP_STEPS
                and not (_can_admit(st, pool, waiting, len(run_arr), free - need_sum, seq_cap,
                                    budget_cap - len(run_arr), hit_tokens, sch) if mixed else
                         _can_admit(st, pool, waiting, len(run_arr), free, seq_cap, budget_cap, hit_tokens, sch))):
            # an arrival ends the run only when it could be admitted: behind a waiting head that cannot be (and
            # cannot become so while the run's decodes only take blocks) it changes no step of the run. Unmixed
            # (SGLang), a step is decode-only exactly when no prefill chunk can be taken: no request is still
            # prefilling (all_dec) and the head cannot be admitted with the whole pool and budget
            was = now
            now, used, steps = _decode_run(
                sm, pool, st, run_arr, free, now, gaps,
                float(st.engine[ptr]) if ptr < st.released and len(run_arr) < seq_cap and not waiting else math.inf)
            run.decode_time_s += now - was
            free -= used
            run.steps += steps
            run.jumps += 1
            run_arr = finish_done(run_arr)
            continue
        # ---- one step. Unmixed (SGLang): prefill-only whenever a prefill chunk can be taken, else decode-only
        budget = budget_cap
        chunks: list = []  # (request, start, tokens)
        admitted: list = []
        if not mixed:
            budget = take_prefill(() if all_dec else run_arr[~decoding].tolist(), budget, chunks, admitted)
        if chunks:
            d = d_all[:0]
        else:
            # the running decodes (the newest preempted while their blocks do not fit; unmixed, all of them) ...
            cap = budget if mixed else st.n
            while True:
                need_d = need_all[:cap]
                need_sum = int(need_d.sum())
                if need_sum <= free or not len(run_arr):
                    break
                preempt(int(run_arr[-1]))
                if decoding[-1]:
                    d_all, ctx, need_all = d_all[:-1], ctx[:-1], need_all[:-1]
                run_arr, decoding = run_arr[:-1], decoding[:-1]
            d = d_all[:cap]
            if need_sum:
                free -= need_sum
                st.held[d] += need_d
            budget -= len(d)
            if mixed:  # ... then the running requests still prefilling, then new requests
                budget = take_prefill(() if all_dec else run_arr[~decoding].tolist(), budget, chunks, admitted)
        if not len(d) and not chunks:
            if ptr < st.released:
                now = max(now, float(st.engine[ptr]))
                continue
            raise ValueError("the scheduler cannot make progress (KV pool too small for the requests)")
        if admitted:
            run_arr = np.concatenate([run_arr, np.array(admitted, dtype=np.int64)])
        run.peak_running = max(run.peak_running, len(run_arr))
        dt = _step_time(sm, st, len(d), ctx[:len(d)], chunks, chunk_terms)
        prefill = sum(c[2] for c in chunks)
        run.prefill_time_s += dt * prefill / (prefill + len(d))
        run.decode_time_s += dt * len(d) / (prefill + len(d))
        was, now = now, now + dt
        run.steps += 1
        if len(d):
            st.computed[d] += 1
            st.gen[d] += 1
            gaps.step(d, was, now)
        for i, start, tokens in chunks:
            st.computed[i] = start + tokens
            run.prefill_tokens += tokens
            if st.computed[i] >= st.target[i]:
                st.gen[i] += 1
                st.target[i] = st.computed[i]
                if math.isnan(st.first[i]):
                    st.first[i] = now
                else:  # a preempted request's recomputed prompt ends in its next token
                    gaps.one(i, now)
                gaps.last[i] = now
                if req.keys is not None and sch.prefix_caching:
                    cache.update(req.keys[i])
        run_arr = finish_done(run_arr)
    run.gap_s, run.gap_n = gaps.arrays()
    return run


class _Gaps:
    """The gaps between successive output tokens of every request, pooled (vLLM's ITL list), kept as (gap [s],
    how many tokens had it): a step's decodes whose last token ended the step before share one entry."""

    def __init__(self, n: int):
        import numpy as np

        self.last = np.full(n, math.nan)   # when each request's latest token came [s]
        self.shared: list = []             # (gap [s], tokens) of whole steps
        self.runs: list = []               # (gaps of a jumped run's steps after its first [s], tokens per step)
        self.odd: list = []                # gaps of single tokens [s]

    def step(self, d, was: float, now: float) -> None:
        """The decodes ``d`` of a step from ``was`` to ``now`` [s] got a token."""
        import numpy as np

        last = self.last[d]
        regular = last == was
        ref = was
        if len(d) and not regular.any():  # prefill-only steps came between (SGLang): gaps since an older step
            ref = float(last[0])
            regular = last == ref
        k = int(np.count_nonzero(regular))
        if k:
            self.shared.append((now - ref, k))
        if k < len(d):  # their last token came earlier: the token budget left them out of a step
            self.odd.append(now - last[~regular])
        self.last[d] = now

    def one(self, i: int, now: float) -> None:
        """Request i's token at ``now`` after a gap of its own (a recomputed prompt ends in it) [s]."""
        self.odd.append([now - float(self.last[i])])

    def run(self, r, was: float, times) -> None:
        """A jumped run of decode steps of ``r`` from ``was`` ending at ``times`` [s]."""
        import numpy as np

        self.step(r, was, float(times[0]))
        if len(times) > 1:
            self.runs.append((np.diff(times), len(r)))
        self.last[r] = times[-1]

    def arrays(self):
        """(gaps [s], tokens of each) as two arrays."""
        import numpy as np

        v = [np.array([g for g, _ in self.shared])] + [g for g, _ in self.runs] + [np.asarray(g) for g in self.odd]
        n = ([np.array([k for _, k in self.shared], dtype=np.int64)] + [np.full(len(g), k, dtype=np.int64)
                                                                       for g, k in self.runs]
             + [np.ones(len(g), dtype=np.int64) for g in self.odd])
        return np.concatenate(v).astype(float), np.concatenate(n)


def _can_admit(st, pool, waiting, running: int, free_after, seq_cap, budget_left, hit_tokens, sch) -> bool:
    """Whether the head of the queue could be admitted now, with ``free_after`` blocks and ``budget_left`` tokens
    left once the running decodes have theirs (a decode run stops only for that)."""
    if not waiting or running >= seq_cap or budget_left <= 0:
        return False
    i = waiting[0]
    start = hit_tokens(i) if not st.admitted_once[i] else 0
    tokens = min(int(st.target[i]) - start, budget_left)
    total = int(st.prompt[i] + st.output[i]) if sch.reserve_output else start + tokens
    return pool.need_one(total) <= free_after


def _decode_run(sm, pool, st, r, free, now, gaps, next_arrival):
    """Pure decode steps of the running set ``r`` until a request finishes, the pool runs out or the next
    arrival -> (time, blocks used, steps); the caller has checked that the first step's blocks fit."""
    import numpy as np

    rem = st.output[r] - st.gen[r]
    n = len(r)
    most = int(min(rem.min(), max(1, MAX_JUMP_CELLS // n)))
    base, held = st.computed[r][:, None] + 1, st.held[r][:, None]
    # the blocks the run needs never fall from step to step: when its last step's fit, every step's do
    ample = int(np.maximum(pool.need(base[:, 0] + most - 1) - held[:, 0], 0).sum()) <= free
    J = most if ample or n * most <= JUMP_CELLS_AT_ONCE else max(MIN_JUMP_STEPS, JUMP_CELLS_AT_ONCE // n)
    while True:  # the steps whose blocks fit, looking 4 x further each time (the pool often ends a run early)
        ctx = base + np.arange(J)[None, :]   # context of each step's query [tokens]
        if ample:
            break
        extra = np.maximum(pool.need(ctx) - held, 0).sum(axis=0)
        fits = int(np.searchsorted(extra, free, side="right"))  # extra never falls: the leading steps fit
        if fits < J or J == most:
            J = min(J, fits)
            ctx = ctx[:, :J]
            break
        J = min(most, 4 * J)
    attn, kv = sm.decode_sums(ctx, axis=0)
    times = now + np.cumsum(sm.step_s(float(n), float(n), float(n), attn, kv))
    if next_arrival < times[-1]:
        J = int(np.searchsorted(times, next_arrival, side="left")) + 1
    st.computed[r] += J
    st.gen[r] += J
    now_held = np.maximum(held[:, 0], pool.need(st.computed[r]))
    used = int((now_held - held[:, 0]).sum())  # = the blocks of the J-th step: sum max(0, need - held)
    st.held[r] = now_held
    gaps.run(r, now, times[:J])
    return float(times[J - 1]), used, J


def _step_time(sm, st, n_dec: int, dec_ctx, chunks, memo: dict) -> float:
    """One step's time from its ``n_dec`` decodes (at contexts ``dec_ctx``) and prefill chunks [s]; ``memo``
    keeps each chunk's (attention FLOPs, KV bytes) by (start, tokens): equal prompts have equal chunks."""
    tokens = n_dec + sum(c[2] for c in chunks)
    sampled = n_dec + sum(1 for i, s, t in chunks if s + t >= st.target[i])
    attn, kv = 0.0, 0.0
    if n_dec:
        a, k = sm.decode_sums(dec_ctx)
        attn += float(a)
        kv += float(k)
    for i, start, t in chunks:
        terms = memo.get((start, t))
        if terms is None:
            terms = memo[start, t] = (sm.prefill_attention_flops(start, t), float(sm.kv_read_bytes(start + t)))
        attn += terms[0]
        kv += terms[1]
    return float(sm.step_s(float(tokens), float(n_dec + len(chunks)), float(sampled), attn, kv))
