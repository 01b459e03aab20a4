"""Sweep axis specs (``--vary NAME=SPEC``): the one place they are parsed.

SPEC is one of
- a list: ``4k,32k,128k`` or ``h100-sxm,h200-sxm`` (each item read by the axis's own value parser);
- a range ``LO..HI`` with a mode: ``:logN`` (N points spaced evenly on a log scale, LO and HI included),
  ``:linN`` (N points evenly spaced) or ``:stepS`` (LO, LO + S, ... up to HI; S read like LO and HI, so
  ``1k..64k:step4k`` steps 4,096 tokens). Without a mode an integer axis steps by 1 and any other is ``:lin10``.
Integer axes round log/lin points to whole numbers and drop the repeats this makes (order kept).
Ranges and grids are counted before any point is made, so a typo such as ``1..1e12:step1`` fails at once; a
:class:`Budget` also prices the count (bytes and seconds per point of the target) before anything is allocated.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from kvcalc.out.errors import InputError

MAX_POINTS = 10**7
# What a sweep may spend by default (--max-memory, --max-seconds raise it): estimated from the target's measured
# cost per point, so a grid that would run out of memory or take minutes is refused before it starts.
DEFAULT_MAX_BYTES = 2e9
DEFAULT_MAX_SECONDS = 10.0
_MODE_RE = re.compile(r"^(log|lin|step)(.+)$", re.IGNORECASE)


@dataclass(frozen=True)
class AxisValues:
    """The parsed points of one axis: ``values`` (a list, or a numpy array for numeric axes) in the order given."""

    name: str
    values: Any
    numeric: bool

    def __len__(self) -> int:
        return len(self.values)


@dataclass(frozen=True)
class Budget:
    """What a sweep may spend (points, memory [B], time [s]) and what one point of its target costs: held
    [B per point] and computed and rendered [s per point]. ``held_points``: how many points are held at once (None:
    all of them; a streamed sweep holds one chunk); ``bytes_per_value``: what each axis value holds [B] when the
    rows are streamed (the axis arrays and the inputs echoed stay; held, they are within the B per point);
    ``kept_bytes_per_point``: what every point keeps even when streamed (its --check outcomes) [B]."""

    max_points: int = MAX_POINTS
    max_bytes: float = DEFAULT_MAX_BYTES
    max_seconds: float = DEFAULT_MAX_SECONDS
    bytes_per_point: float = 0.0
    seconds_per_point: float = 0.0
    held_points: int | None = None
    bytes_per_value: float = 0.0
    kept_bytes_per_point: float = 0.0

    def check(self, n, what: str, fixed_seconds: float = 0.0, values: int | None = None) -> None:
        """InputError naming ``what`` (an axis or the grid) when ``n`` points (of ``values`` axis values in all;
        default ``n``: one axis) exceed the budget."""
        from kvcalc.out.units import fmt_bytes, fmt_seconds

        if n > self.max_points:
            shown = f"{n:,}" if n < 10**21 else f"a {len(str(n))}-digit number of"
            raise InputError(f"{what}: {shown} points exceed the limit of {self.max_points:,}; "
                             "raise it with --max-points")
        values = n if values is None else values
        if self.held_points is None:  # every row held (the measured B per point include its axis values)
            held, per = n * self.bytes_per_point, f"{self.bytes_per_point:,.0f} B per point"
        else:
            chunk = min(n, self.held_points)
            held = chunk * self.bytes_per_point + values * self.bytes_per_value + n * self.kept_bytes_per_point
            per = (f"{chunk:,} points at a time x {self.bytes_per_point:,.0f} B + {values:,} axis values x "
                   f"{self.bytes_per_value:,.0f} B" + (f" + {self.kept_bytes_per_point:,.0f} B per point kept"
                                                       if self.kept_bytes_per_point else ""))
        if held > self.max_bytes:
            raise InputError(f"{what}: {n:,} points would hold ~{fmt_bytes(held)} ({per}), over the budget of "
                             f"{fmt_bytes(self.max_bytes)}; raise it with --max-memory")
        spent = n * self.seconds_per_point + fixed_seconds
        if spent > self.max_seconds:
            raise InputError(f"{what}: {n:,} points would take ~{fmt_seconds(spent)} (about "
                             f"{fmt_seconds(spent / n)} per point), over the budget of "
                             f"{fmt_seconds(self.max_seconds)}; raise it with --max-seconds")


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


def _range(name: str, spec: str, what: str, parse: Callable[[str], float], integer: bool, budget: Budget):
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
        span = (hi - lo) / step * (1 + 1e-12)
        if not math.isfinite(span):  # 1..1e308:step1e-300
            raise InputError(f"{what}: {spec!r} has more points than a float can count; use :logN or a larger step")
        n = math.floor(span) + 1
        budget.check(n, f"{what} {spec!r}")
        import numpy as np  # after the check: a refused grid imports nothing (and answers sooner)

        values = np.minimum(lo + np.arange(n) * step, hi)  # 0.1..1:step0.1 ends at 1, not 1.0000000000000002
    else:
        n = _count(arg, what)
        budget.check(n, f"{what} {spec!r}")
        import numpy as np

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


def parse_axis(name: str, spec: str, parse: Callable[[str], Any], numeric: bool, integer: bool = False,
               max_points: int = MAX_POINTS, flag: str = "--vary", budget: Budget | None = None) -> AxisValues:
    """Expand one axis spec with the axis's value parser ``parse`` (which raises InputError naming the value).
    Lists keep their order (repeats included); ranges need a numeric axis. The count is checked against
    ``budget`` (default: ``max_points`` alone) before any point is made."""
    what = f"{flag} {name}"
    budget = budget or Budget(max_points=max_points, max_bytes=math.inf, max_seconds=math.inf)
    if ".." in spec:
        if not numeric:
            raise InputError(f"{what}: a range needs a numeric axis; list the values instead (a,b,c)")
        return AxisValues(name, _range(name, spec, what, parse, integer, budget), True)
    items = [p.strip() for p in spec.split(",")]
    if not all(items):
        raise InputError(f"{what}: empty item in the list {spec!r}")
    budget.check(len(items), what)
    values = [parse(p) for p in items]
    if numeric:
        import numpy as np

        return AxisValues(name, np.array(values, dtype=np.int64 if integer else np.float64), True)
    return AxisValues(name, values, False)


def check_grid(axes: list[AxisValues], max_points: int = MAX_POINTS, budget: Budget | None = None,
               fixed_seconds: float = 0.0) -> int:
    """The number of points in the product of ``axes``; InputError past ``max_points`` (naming --max-points) or
    past ``budget`` (naming --max-memory or --max-seconds)."""
    n = math.prod(len(a) for a in axes)
    budget = budget or Budget(max_points=max_points, max_bytes=math.inf, max_seconds=math.inf)
    sizes = " x ".join(f"{len(a):,} {a.name}" for a in axes)
    budget.check(n, f"--vary: the grid of {sizes}" if len(axes) > 1 else f"--vary {axes[0].name}", fixed_seconds,
                 sum(len(a) for a in axes))
    return n
