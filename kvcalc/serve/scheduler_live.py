"""scheduler_fast's O(1)-per-step loop as a replica that can be stepped to a time, be sent a request and be asked
about its state, so a router can decide on the serving clock (serve/cluster.py steps N of them in lockstep).

- ``advance_to(t)``: every step that starts before ``t`` [s] runs (the step running at ``t`` included: its
  finishes and completed prefills count, and a request sent at ``t`` joins at the earliest the step after it);
  a replica with nothing to do stops there.
- ``submit(send_s, prompt, output, keys)``: a request sent to the replica at ``send_s`` [s] (never before the
  time it was advanced to). The client's cap (``max_concurrency``: a request is sent when fewer than C are in
  flight) and the serial front end are scheduler_state._State.release's, request for request.
- ``in_flight()``: requests sent to it and not finished (waiting, running, preempted, or held by the client's
  cap) and their prompt tokens; ``cached_run(keys)``: how many of a prompt's leading block keys its prefix cache
  holds now (blocks whose prefill has completed, as the scheduler's own hit count reads them) [blocks].
- ``run_to_end()``: every step left -> Run.

The rules are scheduler.py's (see there). Submitting every request first and then running to the end is
scheduler_fast.simulate step for step (it is that function: one loop); a replica fed its requests at their send
times runs the same steps, since no step that starts before a request's send time can depend on it
(tests/test_bench_clock_router.py holds both).
"""

from __future__ import annotations

import functools
import math
from collections import deque

from kvcalc.serve.decode_forms import block_terms
from kvcalc.serve.decode_set import DecodeSet
from kvcalc.serve.scheduler_state import Run, leading_hits


class Replica:
    """One replica's scheduler, resumable (see the module doc). ``keyed``: requests carry prefix block keys of
    ``key_tokens`` tokens; ``handed``/``loads``: they carry handed-over tokens / tier load times; ``tick``: a
    progress callback per finished request."""

    def __init__(self, sm, pool, sch, forms, key_tokens: int = 16, keyed: bool = False, handed: bool = False,
                 loads: bool = False, warm_keys=None, tick=None):
        self.sm, self.pool, self.sch, self.tick = sm, pool, sch, tick
        self.key_tokens, self.caching = key_tokens, sch.prefix_caching and keyed
        self.has_handed, self.has_load = handed, loads
        self.prompt: list = []
        self.output: list = []
        self.keys: list = []
        self.handed: list = []
        self.load: list = []
        self.target: list = []
        self.computed: list = []
        self.gen: list = []
        self.held: list = []
        self.once: list = []
        self.last: list = []
        self.first: list = []
        self.done: list = []
        self.sched_send: list = []
        self.send: list = []
        self.engine: list = []   # when each sent request reaches the engine [s], in send order
        self.fe_free = 0.0
        self.credits = deque([0.0] * sch.max_concurrency) if sch.max_concurrency else None  # free client slots [s]
        self.pending: deque = deque()   # submitted, held by the client's cap
        self.cache: set = set(warm_keys or ())
        self.dec = DecodeSet(0, forms, block_terms(pool))
        self.run = Run(None, None, None, None, None)
        self.finished = 0
        self.finished_prompt = 0
        self.sent_prompt = 0
        self._loop = self._steps()
        next(self._loop)

    # ---------------------------------------------------------------- the driver's interface
    def submit(self, send_s: float, prompt: int, output: int, keys=None, handed: int = 0,
               load_s: float = 0.0) -> None:
        i = len(self.prompt)
        self.prompt.append(prompt)
        self.output.append(output)
        self.keys.append(keys)
        self.handed.append(handed)
        self.load.append(load_s)
        self.target.append(prompt)
        self.computed.append(0)
        self.gen.append(0)
        self.held.append(0)
        self.once.append(False)
        self.last.append(math.nan)
        self.first.append(math.nan)
        self.done.append(math.nan)
        self.sched_send.append(send_s)
        self.send.append(math.inf)
        self.dec.grow()
        self.sent_prompt += prompt
        if self.credits is None:
            self._release(i, 0.0)
        elif self.credits:
            self._release(i, self.credits.popleft())
        else:
            self.pending.append(i)

    def advance_to(self, t: float) -> None:
        self._loop.send(t)

    def in_flight(self) -> tuple:
        """(requests, prompt tokens [tokens]) sent here and not finished."""
        return len(self.prompt) - self.finished, self.sent_prompt - self.finished_prompt

    def cached_run(self, keys) -> int:
        return leading_hits(keys, self.cache) if self.caching else 0

    def run_to_end(self) -> Run:
        import numpy as np

        self._loop.send(math.inf)
        run = self.run
        run.send_s, run.first_s, run.done_s = (np.array(self.send, dtype=float), np.array(self.first, dtype=float),
                                               np.array(self.done, dtype=float))
        run.output, run.prompt = np.array(self.output, dtype=np.int64), np.array(self.prompt, dtype=np.int64)
        run.engine_s = np.array(self.engine, dtype=float) if len(self.engine) == len(self.send) else None  # in
        # send order, which is the requests' order (the client releases them first come first served)
        shared_s, shared_n, odd = self._gaps
        run.gap_s = np.array(shared_s + odd, dtype=float)
        run.gap_n = np.array(shared_n + [1] * len(odd), dtype=np.int64)
        return run

    # ---------------------------------------------------------------- the client and the front end
    def _release(self, i: int, now: float) -> None:
        """Send request i at max(its time, now) through the serial front end (scheduler_state._State.release)."""
        sch = self.sch
        self.send[i] = send = max(self.sched_send[i], now)
        start = max(send, self.fe_free)
        e = self.fe_free = start + sch.frontend_s_per_request + sch.frontend_s_per_input_token * self.prompt[i]
        if self.has_load:
            e += float(self.load[i])
        self.engine.append(e)

    def _finished(self, i: int, now: float) -> None:
        self.finished += 1
        self.finished_prompt += self.prompt[i]
        if self.tick is not None:
            self.tick()
        if self.pending:
            self._release(self.pending.popleft(), now)
        elif self.credits is not None:
            self.credits.append(now)

    # ---------------------------------------------------------------- the loop (scheduler_fast's, resumable)
    def _steps(self):
        """A generator: sent a time t, it runs every step that starts before t, then waits for the next t."""
        sm, pool, sch, run = self.sm, self.pool, self.sch, self.run
        prompt, output, keys, handed = self.prompt, self.output, self.keys, self.handed
        target, computed, gen, held = self.target, self.computed, self.gen, self.held
        once, last, first, done = self.once, self.last, self.first, self.done
        engine, cache, dec, key_tokens = self.engine, self.cache, self.dec, self.key_tokens
        caching, has_handed, reserve = self.caching, self.has_handed, sch.reserve_output
        need_one = functools.lru_cache(maxsize=None)(pool.need_one)  # the blocks of t tokens, once per t
        waiting: deque = deque()
        running: dict = {}      # admission order
        prefilling: dict = {}   # the running requests still prefilling, admission order
        irregular: dict = {}    # decodes whose last token came at another time than the others' (the token budget
                                # left them out of the last step; unmixed, a prefill-only step gave them their
                                # first): when it came [s]
        ptr, now, free = 0, 0.0, pool.num_blocks
        budget_cap, seq_cap, mixed = sch.max_num_batched_tokens, sch.max_num_seqs, sch.mixed_batches
        reg_last = 0.0          # when the decodes not in ``irregular`` got their last token [s]
        chunk_terms: dict = {}
        parts: dict = {}
        shared_s: list = []
        shared_n: list = []
        odd: list = []
        self._gaps = (shared_s, shared_n, odd)   # made arrays once, by run_to_end
        released = self._finished

        def hit_tokens(i: int) -> int:
            if once[i]:
                return 0
            if has_handed:
                return max(0, min(handed[i], target[i] - 1))
            if not caching:
                return 0
            return min(leading_hits(keys[i], cache) * key_tokens, target[i] - 1)

        def finish(i: int, blocks: int) -> None:
            nonlocal free
            done[i] = now
            free += blocks
            held[i] = 0
            del running[i]
            released(i, now)

        def take_prefill(budget: int, chunks: list) -> int:
            """The step's prefill chunks (the running requests still prefilling, a chunk whose blocks do not fit
            waiting a step, then new requests first come first served) -> the budget left [tokens]; nothing
            changes when no chunk is taken."""
            nonlocal free
            for i in prefilling:
                tokens = min(target[i] - computed[i], budget)
                if tokens <= 0:
                    continue
                need = 0 if reserve else max(0, need_one(computed[i] + tokens) - held[i])
                if need > free:
                    continue
                free -= need
                held[i] += need
                budget -= tokens
                chunks.append((i, computed[i], tokens))
            while waiting and budget > 0 and len(running) < seq_cap:
                i = waiting[0]
                begin = hit_tokens(i) if not once[i] else 0
                tokens = min(target[i] - begin, budget)
                need = need_one(prompt[i] + output[i] if reserve else begin + tokens)
                if need > free:
                    break
                waiting.popleft()
                if not once[i]:
                    once[i] = True
                    computed[i] = begin
                    run.cached_tokens += begin
                free -= need
                held[i] = need
                running[i] = prefilling[i] = None
                chunks.append((i, begin, tokens))
                budget -= tokens
            return budget

        def decode_blocks(i: int, x: int) -> int:
            return held[i] if reserve else need_one(x - 1)

        steps, peak, prefill_s, decode_s = 0, 0, 0.0, 0.0
        t = yield
        while True:
            while ptr < len(engine) and engine[ptr] <= now:
                waiting.append(ptr)
                ptr += 1
            if not running and not waiting:
                if ptr < len(engine):
                    now = engine[ptr]
                    continue
                run.steps, run.peak_running, run.prefill_time_s, run.decode_time_s = steps, peak, prefill_s, decode_s
                t = yield   # every request sent here has finished
                continue
            if now >= t:
                t = yield
                continue
            # unmixed (SGLang): a prefill-only step whenever a prefill chunk can be taken, else decode-only
            budget = budget_cap
            chunks: list = []  # (request, start, tokens)
            skipped: dict = {}   # decodes past the token budget: out of the DecodeSet for this step
            if not mixed:
                budget = take_prefill(budget, chunks)
            if chunks:
                nd = 0
            else:
                if mixed and dec.n > budget:   # (unmixed, a decode-only step takes every decode)
                    for i in [i for i in running if i not in prefilling][budget:]:
                        skipped[i] = dec.remove(i)
                need = 0 if reserve else dec.block_need()
                while need > free and running:  # preempt the newest running request until the decodes' blocks fit
                    j = next(reversed(running))
                    if j in prefilling:
                        del prefilling[j]
                        blocks = held[j]
                    else:
                        if j in skipped:
                            x, left = skipped.pop(j)
                        else:
                            x = dec.x(j)
                            if not reserve:
                                need -= need_one(x) - need_one(x - 1)
                            x, left = dec.remove(j)
                        gen[j] = output[j] - left
                        blocks = decode_blocks(j, x)
                        last[j] = irregular.pop(j, reg_last)
                    del running[j]
                    free += blocks
                    held[j] = 0
                    target[j] = prompt[j] + gen[j]
                    computed[j] = 0
                    waiting.appendleft(j)
                    run.preemptions += 1
                free -= need
                nd = dec.n
                budget -= nd
                if mixed:
                    budget = take_prefill(budget, chunks)
            if not nd and not chunks:  # nothing could be scheduled (nothing above changed any state)
                if ptr < len(engine):
                    now = max(now, engine[ptr])
                    continue
                if t == math.inf:
                    raise ValueError("the scheduler cannot make progress (KV pool too small for the requests)")
                t = yield   # a request sent later may reach the engine
                continue
            if len(running) > peak:
                peak = len(running)
            # ---- the step's time
            attn, kv = dec.totals() if nd else (0.0, 0.0)
            tokens, sampled = nd, nd
            for i, s, n_t in chunks:
                tokens += n_t
                sampled += s + n_t >= target[i]
                terms = chunk_terms.get((s, n_t))
                if terms is None:
                    terms = chunk_terms[s, n_t] = (sm.prefill_attention_flops(s, n_t), float(sm.kv_read_bytes(s + n_t)))
                attn += terms[0]
                kv += terms[1]
            key = (tokens, nd + len(chunks), sampled)
            p = parts.get(key)
            if p is None:
                p = parts[key] = sm.step_parts(float(tokens), float(key[1]), float(sampled))
            dt = max(p[0] + p[1] * attn, p[2] + p[3] * kv) + p[4]
            prefill = tokens - nd
            prefill_s += dt * prefill / (prefill + nd)
            decode_s += dt * nd / (prefill + nd)
            was, now = now, now + dt
            steps += 1
            # ---- the decodes' tokens, the prefill chunks, who finished
            if nd:
                k = nd
                if irregular:
                    for i in [i for i in irregular if i not in skipped]:
                        odd.append(now - irregular.pop(i))
                        k -= 1
                if k:
                    shared_s.append(now - reg_last)   # (mixed: reg_last is the step's start)
                    shared_n.append(k)
                reg_last = now
                for i in dec.tick():
                    x, _ = dec.remove(i)
                    finish(i, decode_blocks(i, x))
            if skipped:
                for i, (x, left) in skipped.items():  # one token behind the others from now on
                    dec.add(i, x, left)
                    irregular.setdefault(i, was)
            for i, s, n_t in chunks:
                computed[i] = s + n_t
                run.prefill_tokens += n_t
                if computed[i] >= target[i]:
                    gen[i] += 1
                    target[i] = computed[i]
                    if math.isnan(first[i]):
                        first[i] = now
                    else:  # a preempted request's recomputed prompt ends in its next token
                        odd.append(now - last[i])
                    if caching:
                        cache.update(keys[i])
                    del prefilling[i]
                    if gen[i] >= output[i]:
                        finish(i, held[i])
                    else:
                        if now != reg_last:   # a prefill-only step (unmixed), or the first decodes
                            if dec.n > len(irregular):   # the others' last token came at an earlier step
                                irregular[i] = now
                            else:
                                reg_last = now
                        dec.add(i, computed[i] + 1, output[i] - gen[i])

