"""A vLLM or SGLang start-up log read into the engine's inputs and its own KV figures (``capacity --engine-log``).

The lines read (the versions whose logs were found; every figure in GiB as the engines print it, SGLang's "GB"
being GiB too):

- vLLM v1 (0.7+), gpu_worker: "the current vLLM instance can use total_gpu_memory (79.19GiB) x
  gpu_memory_utilization (0.90) = 71.27GiB; model weights take 14.08GiB; non_torch_memory takes 0.07GiB; PyTorch
  activation peak memory takes 1.97GiB; the rest of the memory reserved for KV Cache is 55.15GiB", or its later
  form "Available KV cache memory: 6.51 GiB"; kv_cache_utils: "GPU KV cache size: 42,656 tokens", "Maximum
  concurrency for 32,768 tokens per request: 1.30x"; v0: "Memory profiling results: total_gpu_memory=23.58GiB ...
  non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90" and "# GPU blocks: 1952".
- SGLang: "KV Cache is allocated. #tokens: 105531, K size: 2.82 GB, V size: 2.82 GB" (or "KV size" for MLA), or
  where that line has no count (v0.4.1, "KV Cache is allocated. K size: 27.13 GB, V size: 27.13 GB.") the
  scheduler's "max_total_num_tokens=444500, ..."; "mem_fraction_static=0.88" from its server-args dump; "Load weight
  begin. avail mem=78.81 GB"; "Load weight end. ... mem usage=14.39 GB", or where that line has no "mem usage"
  (v0.4.1) its "avail mem=63.72 GB", the weights then being begin - end as SGLang computes them
  (model_runner.py ModelRunner.load_model: weight_load_mem_usage = before_avail_memory - after_avail_memory);
  the scheduler line's "context_len=131072" as the context length.

A log that gives the KV memory itself ("the rest ... is", "Available KV cache memory", "kv_cache_size") fills
the budget with it: total = that memory, utilisation 1, the other terms 0 (their own figures are shown beside).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kvcalc.out import units

MAX_LOG_BYTES = 64 * 2**20
MAX_LOG_GIB = 1e6     # a memory figure of a start-up log [GiB]: 1,000,000 GiB is far past any one GPU
MAX_LOG_COUNT = 1e15  # a count or ratio of a start-up log (tokens, blocks, concurrency)
_NUM = r"([0-9][0-9,]*(?:\.[0-9]+)?)"
VLLM_PATTERNS = {
    "total_memory_gib": rf"total_gpu_memory[ =(]+{_NUM} ?GiB",
    "gpu_memory_utilization": rf"gpu_memory_utilization[ =(]+{_NUM}",
    "weights_gib": rf"model weights take {_NUM} ?GiB",
    "non_torch_gib": rf"non_torch_memory(?: takes |=){_NUM} ?GiB",
    "activation_gib": rf"activation peak memory takes {_NUM} ?GiB",
    "kv_memory_gib": rf"(?:reserved for KV Cache is|Available KV cache memory:|kv_cache_size=) ?{_NUM} ?GiB",
    "kv_cache_tokens": rf"GPU KV cache size: {_NUM} tokens",
    "max_model_len": rf"Maximum concurrency for {_NUM} tokens per request",
    "max_concurrency": rf"tokens per request: {_NUM}x",
    "num_gpu_blocks": rf"GPU blocks: {_NUM}",
}
SGLANG_PATTERNS = {
    "kv_cache_tokens": rf"KV Cache is allocated\. #tokens: {_NUM}",
    "mem_fraction_static": rf"mem_fraction_static=({_NUM[1:-1]})",
    "weights_gib": rf"Load weight end\..*?mem usage={_NUM} GB",
    "total_memory_gib": rf"Load weight begin\. avail mem={_NUM} GB",
    "after_load_gib": rf"Load weight end\..*?avail mem={_NUM} GB",
    "max_total_num_tokens": rf"max_total_num_tokens={_NUM}",
    "max_model_len": rf"max_total_num_tokens=.*?context_len={_NUM}",
}
NEEDED = {"vllm": ("kv_memory_gib or total_gpu_memory", "the line 'the rest of the memory reserved for KV Cache "
                   "is X GiB', 'Available KV cache memory: X GiB' or 'Memory profiling results: ... kv_cache_size=X'"),
          "sglang": ("#tokens", "the line 'KV Cache is allocated. #tokens: N, ...' or 'max_total_num_tokens=N, ...'")}


@dataclass(frozen=True)
class EngineLog:
    """What a start-up log says: the engine, the inputs it prints, and its own KV figures (raw SI units)."""

    engine: str
    figures: dict = field(default_factory=dict)   # the log's numbers, by name (GiB values already in bytes)
    found: dict = field(default_factory=dict)     # the numbers as printed, by pattern name (GiB values in GiB)
    decimals: dict = field(default_factory=dict)  # the GiB figures' decimals shown, by pattern name


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _sglang_fallbacks(figures: dict) -> None:
    """v0.4.1's lines: the pool from max_total_num_tokens when the KV line has no #tokens; the weights as free
    memory before - after loading when "Load weight end" has no "mem usage" (SGLang's weight_load_mem_usage)."""
    total = figures.pop("max_total_num_tokens", None)
    after = figures.pop("after_load_bytes", None)
    if "kv_cache_tokens" not in figures and total is not None:
        figures["kv_cache_tokens"] = total
    if "weights_bytes" not in figures and after is not None and "total_memory_bytes" in figures:
        figures["weights_bytes"] = figures["total_memory_bytes"] - after


def read_engine_log(text: str, where: str) -> EngineLog:
    """Parse a start-up log; InputError (one line, naming ``where`` and the line it needed) when it has none of
    an engine's KV lines."""
    from kvcalc.out.errors import InputError

    engine = "sglang" if ("KV Cache is allocated" in text or "max_total_num_tokens=" in text) else (
        "vllm" if ("GPU KV cache size" in text or "GPU blocks" in text or "KV Cache is" in text
                   or "Available KV cache memory" in text or "Memory profiling results" in text) else None)
    if engine is None:
        raise InputError(f"{where}: not a vLLM or SGLang start-up log: needs {NEEDED['vllm'][1]} (vLLM) or "
                         f"{NEEDED['sglang'][1]} (SGLang)")
    found, decimals = {}, {}
    for name, pattern in (SGLANG_PATTERNS if engine == "sglang" else VLLM_PATTERNS).items():
        hits = re.findall(pattern, text)
        if hits:
            found[name] = _number(hits[-1])  # the last start-up in the file
            if name.endswith("_gib"):
                decimals[name] = len(hits[-1].partition(".")[2])
    return _figures(engine, found, decimals, where)


def _figures(engine: str, found: dict, decimals: dict, where: str) -> EngineLog:
    """The EngineLog of the numbers found (GiB ones as printed), checked."""
    from kvcalc.out.errors import InputError

    figures = {}
    for name, value in found.items():
        limit = MAX_LOG_GIB if name.endswith("_gib") else MAX_LOG_COUNT
        if not value <= limit:  # inf from a 400-digit figure too
            shown = name[:-4] + " GiB" if name.endswith("_gib") else name
            raise InputError(f"{where}: the log's {shown} is not a plausible figure (at most {limit:,.0f})")
        if name.endswith("_gib"):
            figures[name[:-4] + "_bytes"] = units.gib_to_bytes(value)
        elif name in ("kv_cache_tokens", "max_model_len", "num_gpu_blocks", "max_total_num_tokens"):
            figures[name] = int(value)
        else:
            figures[name] = value
    if engine == "vllm" and "kv_memory_bytes" not in figures and "total_memory_bytes" not in figures:
        raise InputError(f"{where}: vLLM log without its KV memory: needs {NEEDED['vllm'][1]}")
    if engine == "sglang":
        _sglang_fallbacks(figures)
    if engine == "sglang" and "kv_cache_tokens" not in figures:
        raise InputError(f"{where}: SGLang log without its pool: needs {NEEDED['sglang'][1]}")
    for key in ("gpu_memory_utilization", "mem_fraction_static"):
        if key in figures and not 0 < figures[key] <= 1:
            raise InputError(f"{where}: {key} {figures[key]:g} is not in (0, 1]")
    if figures.get("max_model_len", 1) <= 0:
        raise InputError(f"{where}: 'Maximum concurrency for 0 tokens': max_model_len must be positive")
    return EngineLog(engine, figures, found, decimals)


def rounding_corners(log: EngineLog, limit: int = 5):
    """The logs the printed GiB figures allow: each figure at value +- half its last printed digit (6.51 ->
    6.505 and 6.515 GiB), every combination of the (at most ``limit``) figures: the engines' sizing is monotone
    in each, so the extremes of a figure computed from them lie at these corners."""
    import itertools

    from kvcalc.out.errors import InputError

    names = sorted(log.decimals)[:limit]
    for signs in itertools.product((-1, 1), repeat=len(names)):
        found = dict(log.found)
        for name, sign in zip(names, signs):  # a printed 0.00 is not negative
            found[name] = max(0.0, found[name] + sign * 0.5 * 10.0 ** -log.decimals[name])
        try:
            yield _figures(log.engine, found, log.decimals, "")
        except InputError:  # a corner outside a field's domain: not a log the engine prints
            continue


def log_inputs(log: EngineLog) -> dict:
    """EngineInputs fields from a log: vLLM's KV memory as the whole budget (total = it, utilisation 1, the other
    terms 0) when the log prints it, else its total, utilisation and terms; SGLang's mem_fraction_static."""
    f = log.figures
    out: dict = {}
    if "max_model_len" in f:
        out["max_model_len"] = f["max_model_len"]
    if log.engine == "vllm":
        if "kv_memory_bytes" in f:
            out.update(total_memory_bytes=f["kv_memory_bytes"], gpu_memory_utilization=1.0, weights_bytes=0.0,
                       activation_bytes=0.0, non_torch_bytes=0.0, cuda_graph_bytes=0.0)
        else:
            out.update(total_memory_bytes=f["total_memory_bytes"])
            for key, name in (("gpu_memory_utilization", "gpu_memory_utilization"), ("weights_bytes", "weights_bytes"),
                              ("activation_bytes", "activation_bytes"), ("non_torch_bytes", "non_torch_bytes")):
                if key in f:
                    out[name] = f[key]
    else:
        for key in ("mem_fraction_static", "total_memory_bytes", "weights_bytes"):
            if key in f:
                out[key] = f[key]
    return out


def apply_log(einp, log: EngineLog, given: set):
    """The EngineInputs with the log's inputs filled in, the flags the user gave (``given``: field names) kept."""
    from dataclasses import replace

    return replace(einp, **{k: v for k, v in log_inputs(log).items() if k not in given})


COMPARED = (("kv_cache_tokens", "KV tokens"), ("num_gpu_blocks", "blocks"), ("max_concurrency", "max concurrency"))


def rounding_windows(log: EngineLog, rows_of) -> dict:
    """(row index, figure) -> (lowest, highest) kvcalc figure over the logs the printed GiB figures allow
    (rounding_corners); ``rows_of(EngineLog)`` sizes one such log into result rows."""
    from kvcalc.out.errors import InputError

    windows: dict = {}
    for corner in rounding_corners(log):
        try:
            rows = rows_of(corner)
        except InputError:  # the engine refuses this corner (e.g. weights above the budget): no figure there
            continue
        for i, row in enumerate(rows):
            for key, _ in COMPARED:
                if row.get(key) is not None:
                    lo, hi = windows.get((i, key), (row[key], row[key]))
                    windows[(i, key)] = (min(lo, row[key]), max(hi, row[key]))
    return windows


def log_comparison(log: EngineLog, rows, windows: dict | None = None) -> list[str]:
    """Notes putting the log's own KV figures beside kvcalc's, one per figure the log prints; with ``windows``
    (rounding_windows) each says whether the log's figure lies within what its rounded GiB figures allow."""
    f, notes = log.figures, []
    for i, row in enumerate(rows):
        for key, label in COMPARED:
            if key in f and key in row and row[key] is not None:
                mine, theirs = row[key], f[key]
                conc = key == "max_concurrency"
                same = round(mine, 2) == round(theirs, 2) if conc else mine == theirs
                diff = "equal" if same else (f"kvcalc {mine - theirs:+,.2f}" if conc
                                             else f"kvcalc {mine - theirs:+,}, {(mine - theirs) / theirs:+.3%}")
                shown = f"{theirs:.2f}x" if conc else f"{theirs:,}"
                note = (f"{row['model']}: the log's {label} {shown}, kvcalc's "
                        f"{(f'{mine:.2f}x' if conc else f'{mine:,}')} ({diff})")
                window = (windows or {}).get((i, key))
                if window and (f'{window[0]:.2f}' != f'{window[1]:.2f}' if conc else window[0] != window[1]):
                    lo, hi = window
                    inside = round(lo, 2) <= round(theirs, 2) <= round(hi, 2) if conc else lo <= theirs <= hi
                    span = f"{lo:.2f}x ... {hi:.2f}x" if conc else f"{lo:,} ... {hi:,}"
                    note += (f"; its GiB figures, rounded as printed, allow {span}: "
                             + ("within the log's rounding" if inside else "OUTSIDE the log's rounding"))
                notes.append(note)
    return notes


def read_log_file(ref: str) -> EngineLog:
    """Read and parse a log file (a regular UTF-8 file of at most 64 MiB)."""
    from kvcalc.model import catalog

    path = catalog.user_path(ref)
    catalog.check_regular_file(path, ref)
    return read_engine_log(catalog.read_text_bounded(path, MAX_LOG_BYTES, "a start-up log"), ref)
