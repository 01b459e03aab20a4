"""The running decodes of one replica's O(1)-per-step loop (serve/scheduler_live.py; the idea in
serve/scheduler_fast.py's docstring): contexts x_i = off_i + clock, the integer sums of the decode forms' atoms over
them, and the counters that move those sums and count the blocks the decodes take [tokens, blocks]."""

from __future__ import annotations

from kvcalc.serve.decode_forms import UNBOUNDED, atom_step, atom_value


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
