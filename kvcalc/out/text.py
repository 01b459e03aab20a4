"""Tables as aligned text, the layout of every table kvcalc prints (piped, or styled by rich on a terminal).

The boxes are rich's HEAVY_HEAD characters (ASCII when stdout cannot encode them), so piped output reads as
the rich tables did. A number never breaks across lines:
1. a table whose columns fit the width at their natural size prints as is;
2. else headers and text cells wrap at spaces while number columns keep their widest cell, the widest columns
   giving way first;
3. else, when every column but the first holds numbers, the table prints transposed (one column per row);
4. else its columns are split over several tables, one under the other, each led by the columns that name
   the row;
5. else each row prints as ``field: value`` lines, rows apart by a blank line.
Words longer than the width (in titles, notes, text cells) overflow the line rather than break.
"""

from __future__ import annotations

import re

BOX_UTF8 = {"top": "┏━┳┓", "head": "┃┃┃", "sep": "┡━╇┩", "body": "│││", "bottom": "└─┴┘"}
BOX_ASCII = {"top": "+-++", "head": "|||", "sep": "+=++", "body": "|||", "bottom": "+-++"}
MIN_WIDTH = 20  # narrower requests (COLUMNS=1) are raised to this; a line may still overflow with a long word
_WORD = re.compile(r"\S+\s*")


def wrap(text: str, width: int, hang: str = "") -> list[str]:
    """Greedy word wrap at spaces (as rich wraps), never splitting a word; keeps the leading indentation and
    starts continuation lines with ``hang``."""
    lead = text[: len(text) - len(text.lstrip(" "))]
    lines: list[str] = []
    line = lead
    for w in _WORD.findall(text):
        if line.strip() and len(line) + len(w.rstrip()) > width:
            lines.append(line.rstrip())
            line = hang
        line += w
    lines.append(line.rstrip())
    return lines


class Grid:
    """A table as text cells: titles, per column whether it holds numbers (right-justified, never wrapped)."""

    def __init__(self, title: str, heads: list[str], numeric: list[bool], rows: list[list[str]]):
        self.title, self.heads, self.numeric, self.rows = title, heads, numeric, rows

    def widths(self, width: int) -> list[int] | None:
        """Column content widths that fit ``width`` (see module doc, steps 1-2), or None."""
        n = len(self.heads)
        cols = list(zip(*self.rows)) if self.rows else [()] * n
        widest = [max(map(len, c), default=0) for c in cols]
        natural = [max(len(h), w) for h, w in zip(self.heads, widest)]
        room = width - (3 * n + 1)
        if sum(natural) <= room:
            return natural
        head_min = [max((len(x) for x in h.split()), default=0) for h in self.heads]
        least = [max(hm, w if num else max((len(x) for s in c for x in s.split()), default=0))
                 for hm, w, num, c in zip(head_min, widest, self.numeric, cols)]
        if sum(least) > room:
            return None
        lo, hi = 0, max(natural)  # the largest cap W with sum(clamp(natural, least, W)) <= room
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if sum(max(m, min(nat, mid)) for m, nat in zip(least, natural)) <= room:
                lo = mid
            else:
                hi = mid - 1
        out = [max(m, min(nat, lo)) for m, nat in zip(least, natural)]
        spare = room - sum(out)
        # hand the leftover to the columns closest to their natural width first, so their headers fit one line
        for i in sorted(range(n), key=lambda i: natural[i] - out[i]):
            give = min(spare, natural[i] - out[i])
            out[i] += give
            spare -= give
        return out

    def lines(self, widths: list[int], box: dict, width: int = 0) -> list[tuple[str, str]]:
        """The boxed table as (line, style) pairs, style one of title, head, body; the title wraps at the table's
        width, or at ``width`` (the output's) when that is wider: a title never wraps while the line has room."""
        out = []
        total = sum(widths) + 3 * len(widths) + 1
        out += [(t.ljust(total), "title") for t in wrap(self.title, max(total, width))] if self.title else []
        out.append((_rule(box["top"], widths), ""))
        out += [(x, "head") for x in _row_lines(self.heads, widths, self.numeric, box["head"], bottom=True)]
        if self.rows:
            out.append((_rule(box["sep"], widths), ""))
        bar = box["body"][0]
        if self.rows and all(max(map(len, c)) <= w for c, w in zip(zip(*self.rows), widths)):
            # every row is one line: one format template (no brace can come from a cell; cells are arguments)
            line = f"{bar} " + f" {bar} ".join(("{:>%d}" if num else "{:<%d}") % w
                                               for w, num in zip(widths, self.numeric)) + f" {bar}"
            out += [(line.format(*row), "body") for row in self.rows]
            out.append((_rule(box["bottom"], widths), ""))
            return out
        for row in self.rows:
            if all(len(c) <= w for c, w in zip(row, widths)):  # the common case: one line per row
                cells = (c.rjust(w) if num else c.ljust(w) for c, w, num in zip(row, widths, self.numeric))
                out.append((f"{bar} " + f" {bar} ".join(cells) + f" {bar}", "body"))
            else:
                out += [(x, "body") for x in _row_lines(row, widths, self.numeric, box["body"])]
        out.append((_rule(box["bottom"], widths), ""))
        return out

    def transposed(self) -> Grid | None:
        """Fields as rows and one column per row, when every column but the first holds numbers."""
        if len(self.heads) < 2 or self.numeric[0] or not all(self.numeric[1:]):
            return None
        rows = [[h, *(r[i] for r in self.rows)] for i, h in enumerate(self.heads) if i]
        return Grid(self.title, [self.heads[0], *(r[0] for r in self.rows)], [False] + [True] * len(self.rows),
                    rows)

    def _columns(self, keep: list[int], title: str) -> Grid:
        return Grid(title, [self.heads[i] for i in keep], [self.numeric[i] for i in keep],
                    [[r[i] for i in keep] for r in self.rows])

    def split(self, width: int) -> list[Grid] | None:
        """The columns after the key packed, in order, into as few tables as fit, each led by the key: the fewest
        leading columns (up to 3) that tell the rows apart, e.g. kv's model and tokens."""
        n = len(self.heads)
        key = next((k for k in range(1, min(3, n - 1) + 1)
                    if len({tuple(r[:k]) for r in self.rows}) == len(self.rows)), 1)
        lead = list(range(key))
        parts: list[list[int]] = [[]]
        for i in range(key, n):
            if self._columns([*lead, *parts[-1], i], "").widths(width) is None:
                if not parts[-1] or self._columns([*lead, i], "").widths(width) is None:
                    return None
                parts.append([])
            parts[-1].append(i)
        return [self._columns([*lead, *p], self.title if k == 0 else "") for k, p in enumerate(parts)]

    def records(self, width: int) -> list[tuple[str, str]]:
        """Each row as ``field: value`` lines, text values wrapped under their start."""
        out = [(t, "title") for t in wrap(self.title, width)] if self.title else []
        pad = max(map(len, self.heads), default=0) + 2
        for k, row in enumerate(self.rows):
            if k:
                out.append(("", ""))
            for h, c, num in zip(self.heads, row, self.numeric):
                parts = [c] if num else wrap(c, max(width - pad, MIN_WIDTH))
                out.append(((h + ":").ljust(pad) + parts[0], "body"))
                out += [(" " * pad + p, "body") for p in parts[1:]]
        return out

    def render(self, width: int, box: dict) -> list[tuple[str, str]]:
        """The grid laid out for ``width`` columns (module doc, steps 1-5)."""
        w = self.widths(width)
        if w is not None:
            return self.lines(w, box, width)
        t = self.transposed()
        w = t.widths(width) if t is not None else None
        if w is not None:
            return t.lines(w, box, width)
        parts = self.split(width) if len(self.heads) > 2 and self.rows else None
        if parts is not None:
            return [line for g in parts for line in g.lines(g.widths(width), box, width)]
        return self.records(width)


def _rule(chars: str, widths: list[int]) -> str:
    left, fill, mid, right = chars
    return left + mid.join(fill * (w + 2) for w in widths) + right


def _row_lines(cells, widths, numeric, bars: str, bottom: bool = False) -> list[str]:
    """One row as several lines: each cell wrapped to its column; headers bottom-aligned, body cells top."""
    parts = [[c] if len(c) <= w else wrap(c, w) for c, w in zip(cells, widths)]
    height = max(map(len, parts), default=1)
    parts = [([""] * (height - len(p)) + p) if bottom else (p + [""] * (height - len(p))) for p in parts]
    bar = bars[0]
    return [f"{bar} " + f" {bar} ".join(p[i].rjust(w) if num else p[i].ljust(w)
                                        for p, w, num in zip(parts, widths, numeric)) + f" {bar}"
            for i in range(height)]
