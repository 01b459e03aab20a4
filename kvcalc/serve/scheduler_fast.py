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
The figures equal scheduler.simulate's step-by-step loop to float rounding (tests/test_serving_fast.py). The loop
itself is serve/scheduler_live.py's Replica (resumable, so a router can decide on the serving clock: serve/cluster.py);
:func:`simulate` sends it every request and runs it to the end.
"""

from __future__ import annotations


from kvcalc.out import progress
from kvcalc.serve.decode_forms import UNBOUNDED, atom_step, atom_value


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

    def grow(self) -> None:
        """Room for one more request (a replica fed its requests one at a time: serve/scheduler_live.py)."""
        self.off.append(0)
        self.end.append(0)
        self.serial.append(0)

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
    """scheduler.simulate's run of ``req`` (see scheduler.py for the rules), O(1) work per step -> Run: every
    request sent to one serve/scheduler_live.Replica, which then runs to the end."""
    import numpy as np

    from kvcalc.serve.scheduler_live import Replica
    from kvcalc.serve.scheduler_state import begin_run

    st, run = begin_run(pool, req, sch)   # an empty run, or a pool too small for the largest request
    n = st.n
    if n == 0:
        return run
    rep = Replica(sm, pool, sch, forms, req.key_tokens, keyed=req.keys is not None, handed=req.handed is not None,
                  loads=req.load_s is not None, warm_keys=req.warm_keys, tick=progress.counter(n))
    send, prompt, output = st.sched_send.tolist(), st.prompt.tolist(), st.output.tolist()
    keys = req.keys if req.keys is not None else [None] * n
    handed = np.asarray(req.handed, dtype=np.int64).tolist() if req.handed is not None else [0] * n
    load = st.load.tolist() if st.load is not None else [0.0] * n
    for i in range(n):
        rep.submit(send[i], prompt[i], output[i], keys[i], handed[i], load[i])
    return rep.run_to_end()
