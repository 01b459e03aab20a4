"""Sweep axis specs (``--vary NAME=SPEC``): the one place they are parsed.

SPEC is one of
- a list: ``4k,32k,128k`` or ``h100-sxm,h200-sxm`` (each item read by the axis's own value parser);
- a range ``LO..HI`` with a mode: ``:logN`` (N points spaced evenly on a log scale, LO and HI included),
  ``:linN`` (N points evenly spaced) or ``:stepS`` (LO, LO + S, ... up to HI; S read like LO and HI, so
  ``1k..64k:step4k`` steps 4,096 tokens). Without a mode an integer axis steps by 1 and any other is ``:lin10``.
Integer axes round log/lin points to whole numbers and drop the repeats this makes (order kept).
Ranges and grids are counted before any point is made, so a typo such as ``1..1e12:step1`` fails at once.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from kvcalc.out.errors import InputError

MAX_POINTS = 10**7
_MODE_RE = re.compile(r"^(log|lin|step)(.+)$", re.IGNORECASE)


@dataclass(frozen=True)
class AxisValues:
    """The parsed points of one axis: ``values`` (a list, or a numpy array for numeric axes) in the order given."""

    name: str
    values: Any
    numeric: bool

    def __len__(self) -> int:
        return len(self.values)


def split_assignment(text: str, flag: str) -> tuple[str, str]:
    """``NAME=SPEC`` -> (name, spec); InputError naming the flag when either side is missing."""
    name, eq, spec = str(text).partition("=")
    if not eq or not name.strip() or not spec.strip():
        raise InputError(f"{flag} {text!r}: expected NAME=SPEC, e.g. {flag} context=4k,32k,128k")
    return name.strip(), spec.strip()


def _count(text: str, what: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise InputError(f"{what}: {text!r} must be a whole number of points >= 1")
    return int(text)


def _unique(values: list) -> list:
    seen, out = set(), []
    for v in values:
        if v not in seen:
            seen.add(v)
            out.append(v)
    return out


def _range(name: str, spec: str, what: str, parse: Callable[[str], float], integer: bool, max_points: int):
    import numpy as np

    lo_text, _, rest = spec.partition("..")
    hi_text, _, mode = rest.partition(":")
    lo, hi = parse(lo_text.strip()), parse(hi_text.strip())
    if hi < lo:
        raise InputError(f"{what}: empty range {spec!r} (the end {hi_text.strip()} is below the start)")
    mode = mode.strip()
    if not mode:
        mode = "step1" if integer else "lin10"
    m = _MODE_RE.match(mode)
    if not m:
        raise InputError(f"{what}: {mode!r} is not a range mode; use :logN, :linN or :stepS (e.g. 1k..1m:log20)")
    kind, arg = m.group(1).lower(), m.group(2)
    if kind == "step":
        if re.fullmatch(r"[0.]*[a-z%]*", arg, re.IGNORECASE):
            raise InputError(f"{what}: step of zero in {spec!r}")
        step = parse(arg)
        if not step > 0:
            raise InputError(f"{what}: step of zero in {spec!r}")
        n = math.floor((hi - lo) / step * (1 + 1e-12)) + 1
        _limit(n, f"{what} {spec!r}", max_points)
        values = np.minimum(lo + np.arange(n) * step, hi)  # 0.1..1:step0.1 ends at 1, not 1.0000000000000002
    else:
        n = _count(arg, what)
        _limit(n, f"{what} {spec!r}", max_points)
        if kind == "log":
            if lo <= 0:
                raise InputError(f"{what}: a log range needs a start > 0, got {lo_text.strip()}")
            values = np.geomspace(lo, hi, n) if n > 1 else np.array([float(lo)])
        else:
            values = np.linspace(lo, hi, n) if n > 1 else np.array([float(lo)])
    if integer:
        values = np.rint(values).astype(np.int64)
        if kind != "step":
            values = np.array(_unique(values.tolist()), dtype=np.int64)
    return values


def _limit(n: int, what: str, max_points: int) -> None:
    if n > max_points:
        raise InputError(f"{what}: {n:,} points exceed the limit of {max_points:,}; raise it with --max-points")


def parse_axis(name: str, spec: str, parse: Callable[[str], Any], numeric: bool, integer: bool = False,
               max_points: int = MAX_POINTS, flag: str = "--vary") -> AxisValues:
    """Expand one axis spec with the axis's value parser ``parse`` (which raises InputError naming the value).
    Lists keep their order (repeats included); ranges need a numeric axis."""
    what = f"{flag} {name}"
    if ".." in spec:
        if not numeric:
            raise InputError(f"{what}: a range needs a numeric axis; list the values instead (a,b,c)")
        return AxisValues(name, _range(name, spec, what, parse, integer, max_points), True)
    items = [p.strip() for p in spec.split(",")]
    if not all(items):
        raise InputError(f"{what}: empty item in the list {spec!r}")
    _limit(len(items), what, max_points)
    values = [parse(p) for p in items]
    if numeric:
        import numpy as np

        return AxisValues(name, np.array(values, dtype=np.int64 if integer else np.float64), True)
    return AxisValues(name, values, False)


def check_grid(axes: list[AxisValues], max_points: int = MAX_POINTS) -> int:
    """The number of points in the product of ``axes``; InputError past ``max_points`` (naming --max-points)."""
    n = math.prod(len(a) for a in axes)
    if n > max_points:
        sizes = " x ".join(f"{len(a):,} {a.name}" for a in axes)
        raise InputError(f"--vary: the grid of {sizes} = {n:,} points exceeds the limit of {max_points:,}; "
                         "raise it with --max-points")
    return n
