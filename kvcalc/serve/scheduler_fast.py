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
from kvcalc.serve.decode_set import DecodeSet  # noqa: F401  (imported from here by the tests)


def plan(sm, pool, req):
    """The decode forms of ``sm`` when this loop can run the requests, else None (the caller steps them with
    scheduler.simulate's own loop): a step model without forms (a test double), a group without a form, or an
    empty prompt."""
    import numpy as np

    forms = sm.decode_forms() if hasattr(sm, "decode_forms") else None
    if forms is None or (len(req.prompt) and int(np.min(req.prompt)) < 1):
        return None
    return forms


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
