"""A step's decode sums as linear forms of integer sums over the running decodes' contexts.

Every quantity StepModel.decode_sums adds up over the decodes of a step (attention FLOPs, KV bytes read) and the
blocks a decode's next token needs (scheduler.Pool) is, per request, a weighted sum of a few integer functions of
its context x [tokens] ("atoms"):

  ("one",)             1                 (recurrent layers' FLOPs, a recurrent state read every step)
  ("lin",)             x                 (full attention, MLA)
  ("min", K)           min(x, K)         (sliding window, DSA top-k, a KIVI residual window)
  ("div", r)           floor(x / r)      (V4 compressed entries)
  ("divmin", r, K)     min(floor(x / r), K)   (CSA's top-k of the compressed entries)
  ("chunk", C)         (x - 1) mod C + 1 (chunked local attention)

so sum_i f(x_i) = sum over atoms of coefficient x sum_i atom(x_i), and each atom's sum moves by a count when
every decode's x rises by one: n for "lin", the decodes below K for "min", those at x = -1 mod r (and below K r)
for "div"/"divmin", n - C x those at x = 0 mod C for "chunk" (kvcalc/serve/scheduler_fast.py keeps the counts).
The decomposition reads the same GroupLayout fields as model/attention.py and step_time.attended;
tests/test_serving_fast.py checks it against decode_sums and Pool.need on random contexts of every preset.
"""

from __future__ import annotations

from typing import Optional

from kvcalc.model import attention as att

UNBOUNDED = 1 << 62  # an atom counted for every context [tokens]


def atom_value(atom: tuple, x: int) -> int:
    """One request's value of ``atom`` at context ``x`` (x >= 1) [entries or 1]."""
    kind = atom[0]
    if kind == "lin":
        return x
    if kind == "min":
        return min(x, atom[1])
    if kind == "div":
        return x // atom[1]
    if kind == "divmin":
        return min(x // atom[1], atom[2])
    if kind == "chunk":
        return (x - 1) % atom[1] + 1
    return 1  # "one"


def atom_step(atom: tuple):
    """How the atom's sum over the decodes moves when every x rises by one: (n's coefficient, the counter
    (period, limit) or None, the residue of x the counter counts, its coefficient). The counter counts the
    decodes with x = residue (mod period) and x < limit."""
    kind = atom[0]
    if kind == "lin":
        return 1, None, 0, 0
    if kind == "min":
        return 0, (1, atom[1]), 0, 1
    if kind == "div":
        return 0, (atom[1], UNBOUNDED), atom[1] - 1, 1
    if kind == "divmin":
        return 0, (atom[1], atom[1] * atom[2]), atom[1] - 1, 1
    if kind == "chunk":
        return 1, (atom[1], UNBOUNDED), 0, -atom[1]
    return 0, None, 0, 0  # "one"


def _add(form: dict, atoms: Optional[dict], coef: float) -> bool:
    """form += coef x atoms; False when a part has no form (None)."""
    if atoms is None:
        return False
    for a, c in atoms.items():
        form[a] = form.get(a, 0.0) + coef * c
    return True


def _capped(cap: Optional[int]):
    """min(x, cap) as atoms (0 when cap is 0, x when there is no cap)."""
    if cap is None:
        return {("lin",): 1}
    return {("min", cap): 1} if cap > 0 else {}


def dense_atoms(g: att.GroupLayout, cap: Optional[int] = None) -> Optional[dict]:
    """min(dense_entries(g, x), cap) as atoms; None where it has no form here (a chunk with a cap)."""
    if g.chunk_tokens is not None:
        return {("chunk", g.chunk_tokens): 1} if cap is None else None
    w = g.window_tokens
    return _capped(w if cap is None else (cap if w is None else min(w, cap)))


def compressed_atoms(g: att.GroupLayout, cap: Optional[int] = None) -> dict:
    """min(compressed_entries(g, x), cap) as atoms."""
    if g.ratio is None or cap == 0:
        return {}
    return {("div", g.ratio) if cap is None else ("divmin", g.ratio, cap): 1}


def indexed_atoms(g: att.GroupLayout) -> Optional[dict]:
    """att.indexed_entries as atoms."""
    if g.indexed == "dense":
        return dense_atoms(g)
    if g.indexed == "compressed":
        return compressed_atoms(g)
    return {}


def read_atoms(g: att.GroupLayout) -> Optional[dict]:
    """att.read_bytes_per_step as atoms [B]."""
    if g.kind in att.RECURRENT_KINDS:
        return {("one",): float(att.state_bytes(g))}
    out: dict = {}
    if g.top_k is None:
        parts = [(dense_atoms(g), g.entry_bytes), (compressed_atoms(g), g.entry_bytes)]
    elif g.indexed == "dense":
        parts = [(dense_atoms(g, g.top_k), g.entry_bytes), (compressed_atoms(g), g.entry_bytes)]
    else:
        parts = [(dense_atoms(g), g.entry_bytes), (compressed_atoms(g, g.top_k), g.entry_bytes)]
    parts.append((indexed_atoms(g), g.indexer_bytes))
    if g.residual_tokens:
        parts.append((dense_atoms(g, g.residual_tokens), g.residual_extra_bytes))
    for atoms, coef in parts:
        if coef and not _add(out, atoms, g.layers * coef):
            return None
    return out


def attended_atoms(g: att.GroupLayout) -> Optional[dict]:
    """step_time.attended as atoms [entries]."""
    k = g.kind
    if k in ("flat", "linear", "mamba"):
        return {}
    if k in ("full", "mla"):
        return {("lin",): 1}
    if k == "chunked":
        return {("chunk", g.chunk_tokens): 1}
    if k == "sliding":
        return _capped(g.window_tokens)
    if k == "dsa":
        return _capped(g.top_k)
    window = _capped(g.window_tokens) if g.window_tokens else {}
    if k == "swa":
        return window
    out = dict(window)
    _add(out, compressed_atoms(g, g.top_k if k == "csa" else None), 1)
    return out


def decode_forms(sm) -> Optional[tuple]:
    """(attention FLOPs, KV bytes read per GPU) of one decode as {atom: coefficient} [FLOP, B], from the
    StepModel ``sm``'s groups and coefficients as decode_sums uses them; None where a group has no form here."""
    attn: dict = {("one",): sm.recurrent_flops} if sm.recurrent_flops else {}
    kv: dict = {}
    for g, share, c in zip(sm.groups, sm.shares, sm.decode_attn_coef or sm.attn_coef):
        if (c and not _add(attn, attended_atoms(g), c)) or not _add(kv, read_atoms(g), share * sm.kv_scale):
            return None
    for g, c in zip(sm.groups, sm.indexer_coef):
        if c and not _add(attn, indexed_atoms(g), c):
            return None
    return attn, kv


def block_terms(pool) -> list:
    """The blocks a decode at context x (holding the blocks of x - 1 tokens) needs for its token, as counter
    terms: ((period, limit), residue, blocks) summed over the counters' decodes with x = residue (mod period) and
    x < limit. Pool.need_one: full groups x ceil(t / B) + per sliding window ceil(min(W, t) / B) + 1 (+ states),
    so a full group takes a block at x - 1 = 0 (mod B), a window only while x <= W [blocks]."""
    b = pool.block_size
    out = [((b, UNBOUNDED), 1 % b, pool.full_groups)] if pool.full_groups else []
    return out + [((b, w + 1), 1 % b, 1) for w in pool.sliding_windows]
