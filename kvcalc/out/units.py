"""Units: constants, parsing of readable quantities, and the only place conversions live.

Inside kvcalc everything is in base SI units: bytes, seconds, FLOP, FLOP/s, bytes/s, USD.
GB = 1e9 bytes and GiB = 2**30 bytes are different units and are never mixed silently.

Token counts come in two kinds, each with its own parser, named in every option's help:
- context lengths (``parse_tokens``): ``4k`` = 4,096 and ``1m`` = 1,048,576 tokens, because context windows
  are named in powers of two (a "128K" model takes 131,072 positions, DeepSeek V4's "1M" 1,048,576);
- cache capacities (``parse_token_capacity``): ``3m`` = 3,000,000 tokens, decimal, as trace studies report them
  (Mooncake's "3 M tokens" cache is 3,000,000 tokens).
Plain integers are taken as they are in both, so ``4000`` is 4,000 tokens.
"""

from __future__ import annotations

import math
import re

from kvcalc.out.errors import InputError

# Decimal (SI) and binary (IEC) byte multiples.
KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

TERA = 1e12
PETA = 1e15
GIGA = 1e9
MEGA = 1e6
SECONDS_PER_HOUR = 3600.0

# Bounds of every numeric option, in one place (each option's --help states its bound): past them a value is a
# typo, not a plan, and would overflow a float, allocate terabytes or print $inf / infinite times.
MAX_TOKENS = 2**40               # a context or output length [tokens] (1,099,511,627,776; 1M-token windows today)
MAX_CAPACITY_TOKENS = 2**50      # a cache capacity [tokens]
MAX_GPUS = 1_000_000             # GPUs in one deployment
MAX_BENCH_PROMPTS = 10**6        # requests in one simulated kvcalc bench run (10^5 take 2-3 CPU-s on a 2-core machine)
MAX_REQUEST_RATE = 1e9          # requests per second (kvcalc bench --request-rate)
MIN_REQUEST_RATE = 1e-6         # requests per second: one request per 11.6 days; plan splits it over replicas, and
# a rate near the smallest float would underflow to 0 there
MAX_BURSTINESS = 1e6            # vllm's --burstiness, the gamma shape of the arrivals (1 = Poisson; 1e6: even)
MIN_BURSTINESS = 1e-3           # a shape near 0 makes gaps of 0 or of 1 / (rate x shape) seconds: absurd
MAX_KV_COMPRESSION = 1e4        # kvcalc --kv-compression: the article's what-if factor
MAX_REPLICAS = 1024              # replicas behind one router (kvcalc trace --replicas), each its own cache
MAX_REQUESTS = 10**12            # requests in one workload or batch
MAX_BLOCK_TOKENS = 2**24         # tokens per paged block (engines use 16 to 1,024)
MAX_BLOCK_TABLES = 1_024         # block tables per request (vLLM: one per KV-cache group, a handful)
MAX_ENTRY_BYTES = 1_024          # one block-table entry [B] (int32 = 4; the article assumes 16-24)
MAX_CURVE_POINTS = 10_000        # points of a hit-rate curve (each is a row; the default is 20)
MAX_KV_GROUP_SIZE = 2**20        # elements per int4 scale+zero group (KIVI: 32)
MAX_GROUP_START_TESTS = 2 * 10**7  # group starts a prefix tree may walk (counts that do not divide; ~0.5 s)
MAX_SWEEP_POINTS = 10**9         # --max-points of a sweep (its default refuses grids over 10^7)
MAX_SWEEP_BYTES = 1e13           # --max-memory of a sweep [B] (default 2 GB): 10 TB is no machine's RAM
MAX_SWEEP_SECONDS = 604_800.0    # --max-seconds of a sweep [s] (default 10): one week
MIN_MFU = 1e-3                   # a model-FLOPs utilisation below 0.1% is a typo (end to end: ~15-60%)
MIN_DECODE_TOKENS_PER_S = 1e-3   # decode speed per request [tok/s]: one token in ~17 minutes
MAX_DECODE_TOKENS_PER_S = 1e7    # decode speed per request [tok/s]: ~1e4x the fastest served today
MAX_USD_PER_GPU_HOUR = 1e4       # price [USD per GPU-hour]: rentals are ~$1-$10
MAX_OVERLAP_US = 3.6e9           # a prefetch window [us]: one hour
MIN_LATENCY_TARGET_S = 1e-6      # kvcalc plan --ttft-p99/--tpot-p99: below a microsecond is a typo
MAX_LATENCY_TARGET_S = 86_400.0  # one day
MAX_PLAN_GPUS = 4096             # kvcalc plan --max-gpus (every replica count up to it is a candidate)
MAX_PLAN_TOP = 1000              # kvcalc plan --top
MAX_PLAN_PROMPTS = 10_000        # kvcalc plan --num-prompts (every answer simulates its whole share; bench: 10^6)
MAX_RATE_SCALE = 1e6             # kvcalc plan --rate-scale (a trace's arrivals x FACTOR)
MIN_RATE_SCALE = 1e-6

# The bound of each numeric option a single command and a sweep axis share, by the option's name (issue 21: one
# definition, so ``sweep cost --vary decode-tokens-per-s=1e308`` is refused as ``cost --decode-tokens-per-s
# 1e308`` is): name -> (minimum or None, maximum, zero allowed). Fractions (mfu-prefill) are in (0, 1] anyway.
OPTION_BOUNDS = {
    "gpus": (None, MAX_GPUS, False),
    "replicas": (None, MAX_REPLICAS, False),
    "requests": (None, MAX_REQUESTS, False),
    "output-tokens": (None, MAX_TOKENS, True),
    "block-tokens": (None, MAX_BLOCK_TOKENS, False),
    "price-per-gpu-hour": (None, MAX_USD_PER_GPU_HOUR, False),
    "decode-tokens-per-s": (MIN_DECODE_TOKENS_PER_S, MAX_DECODE_TOKENS_PER_S, False),
    "mfu-prefill": (MIN_MFU, 1.0, False),
    "pd-overlap-us": (None, MAX_OVERLAP_US, True),
    "kv-group-size": (None, MAX_KV_GROUP_SIZE, False),
    "kv-residual-tokens": (None, MAX_TOKENS, True),
    "kv-compression": (1.0, MAX_KV_COMPRESSION, False),  # the article's what-if: a factor >= 1 (1 = none)
    "pd-split": (None, MAX_REPLICAS, False),  # prefill engines and decode engines, each (--pd-split P:D)
    # a GPU's memory as an engine's log states it [B]: 1 MiB to 1 PB (5e-324 B made --solve answer inf)
    "total-memory": (float(MiB), 1e15, False),
    "ttft-p99": (MIN_LATENCY_TARGET_S, MAX_LATENCY_TARGET_S, False),
    "tpot-p99": (MIN_LATENCY_TARGET_S, MAX_LATENCY_TARGET_S, False),
    "max-gpus": (None, MAX_PLAN_GPUS, False),
    "top": (None, MAX_PLAN_TOP, False),
    "rate-scale": (MIN_RATE_SCALE, MAX_RATE_SCALE, False),
}

TOKEN_SUFFIXES = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30}
CAPACITY_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9}
BYTE_SUFFIXES = {
    "b": 1,
    "kb": KB, "mb": MB, "gb": GB, "tb": TB,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
}

_NUM = r"([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)"
_TOKENS_RE = re.compile(rf"^\s*{_NUM}\s*([kmg]?)\s*$", re.IGNORECASE)
_BYTES_RE = re.compile(rf"^\s*{_NUM}\s*([kmgt]i?b|b)\s*$", re.IGNORECASE)
_PERCENT_RE = re.compile(rf"^\s*{_NUM}\s*(%?)\s*$")
_DURATION_RE = re.compile(rf"^\s*{_NUM}\s*(us|ms|s|min|h)\s*$", re.IGNORECASE)
DURATION_SUFFIXES = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}


def gb_to_bytes(gb: float) -> float:
    """Decimal gigabytes -> bytes [B]."""
    return gb * GB


def gib_to_bytes(gib: float) -> float:
    """Binary gibibytes (2^30 B, as CUDA and engine logs report memory) -> bytes [B]."""
    return gib * GiB


def bytes_to_gib(n: float) -> float:
    """Bytes -> binary gibibytes [GiB]."""
    return n / GiB


def fmt_gib(n: float) -> str:
    """Bytes -> 'x.xx GiB', the way vLLM and SGLang logs print memory."""
    return f"{n / GiB:,.2f} GiB"


def gb_per_s_to_bytes_per_s(gb_per_s: float) -> float:
    """Decimal GB/s -> bytes per second [B/s]."""
    return gb_per_s * GB


def tb_per_s_to_bytes_per_s(tb_per_s: float) -> float:
    """Decimal TB/s -> bytes per second [B/s]."""
    return tb_per_s * TB


def tflops_to_flops(tflops: float) -> float:
    """TFLOP/s -> FLOP/s."""
    return tflops * TERA


def us_to_s(us: float) -> float:
    """Microseconds -> seconds [s] (divided, so 50 us is exactly 5e-05 s)."""
    return us / 1e6


def billions_to_count(billions: float) -> float:
    """Billions (of parameters) -> a plain count."""
    return billions * GIGA


def count_to_billions(count: float) -> float:
    """A plain count (of parameters) -> billions."""
    return count / GIGA


def bytes_to_gb(n: float) -> float:
    """Bytes -> decimal gigabytes [GB = 1e9 B]."""
    return n / GB


def usd_per_hour_to_usd_per_s(usd_per_hour: float) -> float:
    """USD per hour -> USD per second [USD/s]."""
    return usd_per_hour / SECONDS_PER_HOUR


def ms_to_s(ms: float) -> float:
    """Milliseconds -> seconds [s]."""
    return ms / 1e3


def s_to_ms(s: float) -> float:
    """Seconds -> milliseconds [ms]."""
    return s * 1e3


def usd_per_million(usd: float, count: float) -> float:
    """USD spent on ``count`` things (tokens) -> USD per million of them [USD/M]."""
    return usd / count * MEGA


def _shown(value) -> str:
    """A number as quoted in a message: short, however many digits it has."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**21:
        return f"a {len(str(abs(value)))}-digit number"
    return f"{value:,}" if isinstance(value, int) else f"{value:g}"


def _finite_positive(value: float, what: str, allow_zero: bool = False) -> float:
    if math.isnan(value) or math.isinf(value):
        raise InputError(f"{what}: {value} is not a finite number")
    if value < 0 or (value == 0 and not allow_zero):
        raise InputError(f"{what}: must be {'>= 0' if allow_zero else '> 0'}, got {value:g}")
    return value


def _whole_tokens(value: float, text, what: str, limit: int) -> int:
    """A parsed token count (float) -> int, or InputError: not finite, not whole, over ``limit``."""
    shown = repr(str(text)) if len(str(text)) <= 40 else repr(str(text)[:40]) + "..."
    if math.isinf(value) or value > limit:
        raise InputError(f"{what}: {shown} tokens is absurdly large (limit {limit:,})")
    if value != int(value):
        raise InputError(f"{what}: {shown} is not a whole number of tokens")
    return int(value)


def parse_tokens(text: str | int, what: str = "tokens", allow_zero: bool = False, limit: int = MAX_TOKENS) -> int:
    """Parse a token count such as ``4096``, ``4k`` (4,096) or ``1m`` (1,048,576) -> tokens [int], at most
    ``limit`` (MAX_TOKENS)."""
    if isinstance(text, int):
        check_positive(text, what, allow_zero, limit=limit)
        return int(text)
    m = _TOKENS_RE.match(str(text))
    if not m:
        raise InputError(f"{what}: cannot read {str(text)[:40]!r} as a token count (examples: 4096, 4k, 128k, 1m)")
    value = float(m.group(1)) * TOKEN_SUFFIXES[m.group(2).lower()]
    if not math.isinf(value):
        _finite_positive(value, what, allow_zero)
    return _whole_tokens(value, text, what, limit)


def parse_token_capacity(text: str | int, what: str = "capacity") -> int:
    """Parse a cache capacity in tokens, decimal: ``3m`` = 3,000,000, ``500k`` = 500,000 -> tokens [int], at
    most MAX_CAPACITY_TOKENS."""
    m = _TOKENS_RE.match(str(text))
    if not m:
        raise InputError(f"{what}: cannot read {str(text)[:40]!r} as a token count (examples: 3m = 3,000,000, "
                         "500k, 20000)")
    value = float(m.group(1)) * CAPACITY_SUFFIXES[m.group(2).lower()]
    if not math.isinf(value):
        _finite_positive(value, what)
    return _whole_tokens(value, text, what, MAX_CAPACITY_TOKENS)


def parse_token_list(text: str, what: str = "tokens", limit: int = MAX_TOKENS) -> list[int]:
    """Parse a comma-separated list of token counts, e.g. ``4k,32k,1m`` -> [4096, 32768, 1048576]."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise InputError(f"{what}: empty list")
    return [parse_tokens(p, what, limit=limit) for p in parts]


def parse_bytes(text: str, what: str = "bytes") -> float:
    """Parse a byte quantity with an explicit unit, e.g. ``80GB`` (80e9) or ``80GiB`` (80 x 2^30) -> [B]."""
    m = _BYTES_RE.match(str(text))
    if not m:
        raise InputError(f"{what}: cannot read {text!r} as bytes; give a unit: B, KB, MB, GB, TB (1e3 steps) "
                         "or KiB, MiB, GiB, TiB (2^10 steps)")
    value = float(m.group(1)) * BYTE_SUFFIXES[m.group(2).lower()]
    return _finite_positive(value, what)


def parse_duration(text: str, what: str = "duration") -> float:
    """Parse a duration with its unit: ``2s``, ``50ms``, ``500us``, ``1.5min``, ``1h`` -> [s]. A bare number is
    refused (seconds or milliseconds? the unit says)."""
    m = _DURATION_RE.match(str(text))
    if not m:
        raise InputError(f"{what}: cannot read {str(text)[:40]!r} as a duration; give a unit: us, ms, s, min, h "
                         "(examples: 2s, 50ms)")
    return _finite_positive(float(m.group(1)) * DURATION_SUFFIXES[m.group(2).lower()], what)


_PD_SPLIT_RE = re.compile(r"^\s*([0-9]{1,7})\s*[Pp]?\s*:\s*([0-9]{1,7})\s*[Dd]?\s*$")


def parse_pd_split(text: str, what: str = "--pd-split") -> tuple[int, int]:
    """Parse a prefill/decode split in engines, ``P:D`` or plan's ``PP:DD`` (``1:3``, ``1P:3D``) -> (prefill
    engines, decode engines), each 1 to MAX_REPLICAS (OPTION_BOUNDS["pd-split"]: engines behind one proxy)."""
    m = _PD_SPLIT_RE.match(str(text))
    if not m:
        raise InputError(f"{what}: cannot read {str(text)[:40]!r} as prefill:decode engines (examples: 1:1, 1:3, "
                         "1P:3D)")
    return (int(check_option("pd-split", int(m.group(1)), f"{what} prefill engines")),
            int(check_option("pd-split", int(m.group(2)), f"{what} decode engines")))


def parse_fraction(text: str | float, what: str = "fraction", minimum: float | None = None) -> float:
    """Parse ``0.9``, ``90%`` -> a fraction in (0, 1] (and >= minimum if given)."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = _PERCENT_RE.match(str(text))
        if not m:
            raise InputError(f"{what}: cannot read {str(text)[:40]!r} as a fraction (examples: 0.9, 90%)")
        value = float(m.group(1)) / (100.0 if m.group(2) else 1.0)
    check_fraction(value, what, minimum)
    return value


def check_fraction(value: float, what: str, minimum: float | None = None) -> float:
    """Raise InputError unless 0 < value <= 1 (and value >= minimum if given)."""
    if math.isnan(value) or not (0.0 < value <= 1.0):
        raise InputError(f"{what}: must be in (0, 1], got {value:g}")
    if minimum is not None and value < minimum:
        raise InputError(f"{what}: {value:g} is absurdly small (minimum {minimum:g})")
    return value


def check_option(name: str, value: float, what: str | None = None) -> float:
    """``value`` within the bound of option ``name`` in OPTION_BOUNDS (InputError naming ``what``, by default
    ``--name``) -> value as a float."""
    minimum, limit, zero = OPTION_BOUNDS[name]
    return check_positive(value, what or f"--{name}", allow_zero=zero, limit=limit, minimum=minimum)


def option_minimum(name: str) -> float | None:
    """The smallest value option ``name`` accepts (a fraction's floor: mfu-prefill 0.1%), None when unbounded."""
    return OPTION_BOUNDS[name][0]


def check_positive(value: float, what: str, allow_zero: bool = False, limit: float | None = None,
                   minimum: float | None = None) -> float:
    """Raise InputError unless value is finite and > 0 (or >= 0 with allow_zero), <= limit and >= minimum if
    given -> value as a float. An int of any size is compared exactly, before any conversion to float."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 0 or (value == 0 and not allow_zero):
            raise InputError(f"{what}: must be {'>= 0' if allow_zero else '> 0'}, got {_shown(value)}")
        if (limit is not None and value > limit) or value > 2**53:
            raise InputError(f"{what}: {_shown(value)} is absurdly large (limit {_shown(limit or 2**53)})")
    v = _finite_positive(float(value), what, allow_zero)
    if limit is not None and v > limit:
        raise InputError(f"{what}: {_shown(value)} is absurdly large (limit {_shown(limit)})")
    if minimum is not None and v < minimum and not (allow_zero and v == 0):
        raise InputError(f"{what}: {_shown(value)} is absurdly small (minimum {_shown(minimum)})")
    return v


# ---------------------------------------------------------------- formatting (for render.py)

def _scaled(value: float, steps: list[tuple[float, str]], unit_base: str, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if math.isinf(value):
        return "inf"
    a = abs(value)
    for factor, prefix in steps:
        if a >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit_base}"
    return f"{value:.{digits}g} {unit_base}"


def fmt_bytes(n: float) -> str:
    """Bytes -> decimal text: exact integer below 10 kB, then kB/MB/GB/TB (1e3 steps)."""
    if n is None:
        return "-"
    if abs(n) < 10_000 and float(n) == int(n):
        return f"{int(n):,} B"
    return _scaled(n, [(TB, "T"), (GB, "G"), (MB, "M"), (KB, "k")], "B", 4).replace(".0 ", " ")


def fmt_bytes_exact(n: float) -> str:
    """Bytes -> exact integer with thousands separators."""
    return f"{int(round(n)):,} B"


def fmt_ms(s: float, spec: str = ".3f") -> str:
    """Seconds -> milliseconds with a fixed format (``spec``, e.g. ".3f", ",.1f", "g"), for derivation lines whose
    terms must line up in one unit: fmt_ms(0.0116712) -> "11.671 ms"."""
    return f"{s * 1e3:{spec}} ms"


def fmt_seconds(s: float) -> str:
    """Seconds -> s / ms / us / ns text."""
    if s is None:
        return "-"
    if s == 0:
        return "0 s"
    return _scaled(s, [(1.0, ""), (1e-3, "m"), (1e-6, "u"), (1e-9, "n")], "s", 4).replace(" s", " s")


def fmt_flops(f: float) -> str:
    """FLOP -> PFLOP/TFLOP/GFLOP text."""
    return _scaled(f, [(1e18, "E"), (PETA, "P"), (TERA, "T"), (GIGA, "G"), (MEGA, "M")], "FLOP", 4)


def fmt_rate(v: float, unit: str) -> str:
    """A rate such as FLOP/s or B/s with decimal prefixes."""
    return _scaled(v, [(PETA, "P"), (TERA, "T"), (GIGA, "G"), (MEGA, "M"), (KB, "k")], unit, 4)


def fmt_count(n: float) -> str:
    """A count: integer with separators, else 4 significant digits."""
    if n is None:
        return "-"
    if isinstance(n, float) and (math.isnan(n) or math.isinf(n)):
        return str(n)
    if float(n) == int(n):
        return f"{int(n):,}"
    return f"{n:,.4g}"


def fmt_error(x: float) -> str:
    """A relative error (predicted / measured - 1) -> signed percent with one decimal: 0.0597 -> "+6.0%"."""
    return f"{x:+.1%}"


def fmt_percent(x: float) -> str:
    """A fraction -> percent text."""
    if x is None:
        return "-"
    return f"{100 * x:.3g}%"


def fmt_usd(x: float) -> str:
    """USD -> $ text, the sign before the $ (-$0.02654)."""
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return "-"
    sign = "-" if x < 0 else ""
    a = abs(x)
    return f"{sign}${a:,.4g}" if a < 1000 else f"{sign}${a:,.0f}"
