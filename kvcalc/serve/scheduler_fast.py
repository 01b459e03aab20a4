"""scheduler.simulate's rules stepped with O(1) work per step (amortised), so 10^5 requests take seconds.

The same scheduler, step by step (no run of steps is skipped): what made a step cost O(running requests) is
kept incrementally instead.
- The running decodes' contexts: every decode of a step gains one token, so decode i sits at x_i = off_i + clock
  and a step ticks the clock. The step's attention FLOPs and KV bytes are linear forms of integer sums of a few
  atoms of x (serve/decode_forms.py: x, min(x, W), floor(x / r), ...); each sum moves by a count per tick, and the
  counts (decodes below a window, decodes at a residue of x) change only when a decode joins, leaves, or passes a
  limit (a calendar by clock). The sums are integers: exact.
- The blocks the decodes need for their tokens: a full group takes a block when x - 1 = 0 (mod block size), a
  sliding group only while x <= W: the same counters. A decode holds Pool.need_one(x - 1) blocks (the scheduler's
  invariant), so nothing per decode is stored.
- Who finishes: a calendar by clock. Who is preempted: the newest of the running set (an insertion-ordered dict).
- The step time: step_s at a step's (tokens, sequences, sampled) is max(c0 + c1 x attn, m0 + m1 x kv) + rest
  (StepModel.step_parts, memoised), evaluated on Python floats; prefill chunks' terms are memoised as before.
- The inter-token gaps: one pooled entry per step; a decode the token budget left out of a step (more running
  decodes than max_num_batched_tokens) gets its own gap, as in scheduler._Gaps.
The figures equal scheduler.simulate's step-by-step loop to float rounding (tests/test_serving_fast.py).
"""

from __future__ import annotations

import functools
import math
from collections import deque

from kvcalc.out import progress
from kvcalc.serve.decode_forms import UNBOUNDED, atom_step, atom_value, block_terms


def plan(sm, pool, req):
    """The decode forms of ``sm`` when this loop can run the requests, else None (the caller steps them with
    scheduler.simulate's own loop): a step model without forms (a test double), a group without a form, or an
    empty prompt."""
    import numpy as np

    forms = sm.decode_forms() if hasattr(sm, "decode_forms") else None
    if forms is None or (len(req.prompt) and int(np.min(req.prompt)) < 1):
        return None
    return forms


class DecodeSet:
    """The running decodes at contexts x_i = off_i + clock [tokens], the integer sum of every atom over them, and
    the counters (decodes with x = residue (mod period), x < limit) that move the sums and count blocks."""

    def __init__(self, n: int, forms, blocks):
        attn, kv = forms
        self.atoms = sorted(set(attn) | set(kv))
        at = {a: k for k, a in enumerate(self.atoms)}
        self.attn_coef = [(at[a], c) for a, c in attn.items()]
        self.kv_coef = [(at[a], c) for a, c in kv.items()]
        self.sums = [0] * len(self.atoms)
        keys: list = []
        moves = [atom_step(a) for a in self.atoms]
        for key in [m[1] for m in moves if m[1] is not None] + [b[0] for b in blocks]:
            if key not in keys:
                keys.append(key)
        self.keys = keys
        self.counts = [[0] * p for p, _ in keys]
        self.moves = [(k, slope, None if key is None else keys.index(key), res, mult)
                      for k, (slope, key, res, mult) in enumerate(moves)]
        self.blocks = [(keys.index(key), res, mult) for key, res, mult in blocks]
        self.clock = 0
        self.n = 0
        self.off = [0] * n
        self.end = [0] * n       # the clock at which decode i has all its tokens
        self.serial = [0] * n    # bumped when i leaves: its calendar entries lapse
        self.limits: dict = {}   # clock -> [(counter, off mod period, request, serial)]: x reaches the limit
        self.due: dict = {}      # clock -> [(request, serial)]: the decode's last token

    def add(self, i: int, x: int, left: int) -> None:
        """Decode i joins at context ``x`` with ``left`` tokens to go."""
        clock = self.clock
        off = self.off[i] = x - clock
        s = self.serial[i] = self.serial[i] + 1
        self.end[i] = clock + left
        self.due.setdefault(clock + left, []).append((i, s))
        sums = self.sums
        for k, a in enumerate(self.atoms):
            sums[k] += atom_value(a, x)
        for j, (p, lim) in enumerate(self.keys):
            if x < lim:
                self.counts[j][off % p] += 1
                if lim < UNBOUNDED:
                    self.limits.setdefault(lim - off, []).append((j, off % p, i, s))
        self.n += 1

    def remove(self, i: int) -> tuple:
        """Decode i leaves -> (its context x, tokens it still had to go)."""
        off = self.off[i]
        x = off + self.clock
        sums = self.sums
        for k, a in enumerate(self.atoms):
            sums[k] -= atom_value(a, x)
        for j, (p, lim) in enumerate(self.keys):
            if x < lim:
                self.counts[j][off % p] -= 1
        self.serial[i] += 1
        self.n -= 1
        return x, self.end[i] - self.clock

    def x(self, i: int) -> int:
        """Decode i's context this step [tokens]."""
        return self.off[i] + self.clock

    def block_need(self) -> int:
        """Blocks the decodes need for this step's tokens [blocks]."""
        c, keys, clock = self.counts, self.keys, self.clock
        need = 0
        for j, res, mult in self.blocks:
            need += mult * c[j][(res - clock) % keys[j][0]]
        return need

    def totals(self) -> tuple:
        """(attention FLOPs, KV bytes read per GPU) of this step's decodes [FLOP, B]."""
        s = self.sums
        attn, kv = 0.0, 0.0
        for k, c in self.attn_coef:
            attn += c * s[k]
        for k, c in self.kv_coef:
            kv += c * s[k]
        return attn, kv

    def tick(self) -> list:
        """Every decode gains a token -> the decodes that now have all their tokens."""
        c, keys, clock, n, sums = self.counts, self.keys, self.clock, self.n, self.sums
        for k, slope, j, res, mult in self.moves:
            if j is None:
                sums[k] += slope * n
            else:
                sums[k] += slope * n + mult * c[j][(res - clock) % keys[j][0]]
        clock = self.clock = clock + 1
        serial = self.serial
        if self.limits:
            for j, r, i, s in self.limits.pop(clock, ()):
                if serial[i] == s:
                    c[j][r] -= 1
        due = self.due.pop(clock, None)
        return [i for i, s in due if serial[i] == s] if due else ()


def simulate(sm, pool, req, sch, forms):
    """scheduler.simulate's run of ``req`` (see scheduler.py for the rules), O(1) work per step -> Run."""
    import numpy as np

    from kvcalc.serve.scheduler_state import begin_run, leading_hits

    st, run = begin_run(pool, req, sch)
    n = st.n
    if n == 0:
        return run
    prompt, output = st.prompt.tolist(), st.output.tolist()
    target, computed, gen, held = list(prompt), [0] * n, [0] * n, [0] * n
    once, last, first, done = [False] * n, [math.nan] * n, [math.nan] * n, [math.nan] * n
    handed = None if req.handed is None else np.asarray(req.handed, dtype=np.int64).tolist()
    caching = sch.prefix_caching and req.keys is not None
    reserve = sch.reserve_output
    need_one = functools.lru_cache(maxsize=None)(pool.need_one)  # the blocks of t tokens, once per t
    cache: set = set(req.warm_keys or ())
    waiting: deque = deque()
    running: dict = {}      # admission order
    prefilling: dict = {}   # the running requests still prefilling, admission order
    irregular: dict = {}    # decodes the token budget left out of the last step: when their last token came [s]
    dec = DecodeSet(n, forms, block_terms(pool))
    ptr, finished, now, free = 0, 0, 0.0, pool.num_blocks
    steps, peak, prefill_s, decode_s = 0, 0, 0.0, 0.0
    budget_cap, seq_cap = sch.max_num_batched_tokens, sch.max_num_seqs
    chunk_terms: dict = {}
    parts: dict = {}
    shared_s: list = []
    shared_n: list = []
    odd: list = []
    tick = progress.counter(n)

    def hit_tokens(i: int) -> int:
        if once[i]:
            return 0
        if handed is not None:
            return max(0, min(handed[i], target[i] - 1))
        if not caching:
            return 0
        return min(leading_hits(req.keys[i], cache) * req.key_tokens, target[i] - 1)

    engine: list = st.engine[:st.released].tolist()   # when each sent request reaches the engine [s]

    def finish(i: int, blocks: int) -> None:
        nonlocal finished, free
        done[i] = now
        free += blocks
        held[i] = 0
        del running[i]
        finished += 1
        if tick is not None:
            tick()
        if st.released < n:
            st.release(st.released, now)
            engine.append(float(st.engine[st.released - 1]))

    def decode_blocks(i: int, x: int) -> int:
        return held[i] if reserve else need_one(x - 1)

    while finished < n:
        while ptr < len(engine) and engine[ptr] <= now:
            waiting.append(ptr)
            ptr += 1
        if not running and not waiting:
            now = engine[ptr]
            continue
        budget = budget_cap
        skipped: dict = {}   # decodes past the token budget: out of the DecodeSet for this step
        if dec.n > budget:
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
                last[j] = irregular.pop(j, now)
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
        chunks: list = []  # (request, start, tokens)
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
        if not nd and not chunks:
            if ptr < len(engine):
                now = max(now, engine[ptr])
                continue
            raise ValueError("the scheduler cannot make progress (KV pool too small for the requests)")
        if len(running) > peak:
            peak = len(running)
        # ---- the step's time
        attn, kv = dec.totals() if nd else (0.0, 0.0)
        tokens, sampled = nd, nd
        for i, s, t in chunks:
            tokens += t
            sampled += s + t >= target[i]
            terms = chunk_terms.get((s, t))
            if terms is None:
                terms = chunk_terms[s, t] = (sm.prefill_attention_flops(s, t), float(sm.kv_read_bytes(s + t)))
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
                shared_s.append(now - was)
                shared_n.append(k)
            for i in dec.tick():
                x, _ = dec.remove(i)
                finish(i, decode_blocks(i, x))
        if skipped:
            for i, (x, left) in skipped.items():  # one token behind the others from now on
                dec.add(i, x, left)
                irregular.setdefault(i, was)
        for i, s, t in chunks:
            computed[i] = s + t
            run.prefill_tokens += t
            if computed[i] >= target[i]:
                gen[i] += 1
                target[i] = computed[i]
                if math.isnan(first[i]):
                    first[i] = now
                else:  # a preempted request's recomputed prompt ends in its next token
                    odd.append(now - last[i])
                if caching:
                    cache.update(req.keys[i])
                del prefilling[i]
                if gen[i] >= output[i]:
                    finish(i, held[i])
                else:
                    dec.add(i, computed[i] + 1, output[i] - gen[i])
    st.first[:], st.done[:] = first, done
    run.steps, run.peak_running, run.prefill_time_s, run.decode_time_s = steps, peak, prefill_s, decode_s
    run.gap_s = np.array(shared_s + odd, dtype=float)
    run.gap_n = np.array(shared_n + [1] * len(odd), dtype=np.int64)
    return run
