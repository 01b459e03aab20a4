"""A measured ``vllm bench serve`` run, read from what it printed or saved (``kvcalc bench --measured FILE``);
SGLang's ``python -m sglang.bench_serving`` too, whose block and JSON differ in a few names (below).

Two forms, told apart by the first non-blank character (``{`` = JSON):

- the result block it prints (vllm/benchmarks/serve.py, the same in the older benchmarks/benchmark_serving.py): a
  50-character "=" title " Serving Benchmark Result ", lines "{:<40} {:<10}" such as "Successful requests:  500",
  "-" section headers, and a closing line of "="; anywhere in a log or a page (indented too), exactly one block.
  "Request rate configured (RPS)" is printed only for a finite rate and "Maximum request concurrency" only when
  one was set; where the block has neither (the older script prints no rate in it), the lines vLLM prints as the
  run starts, before the block, say them ("Traffic request rate: 10.0", "Maximum request concurrency: None"), and
  "Burstiness factor: B" too; none of them at all = inf, no cap. 0.11's "Total Token throughput" and later
  "Total token throughput" are both read. SGLang's block has "Traffic request rate" and "Max request
  concurrency" ("not set" = no cap) inside it and "Mean E2E Latency (ms)" for vLLM's "Mean E2EL (ms)"; its JSON
  (``--output-file``, a JSONL of one line a run: give one line) names that ``mean_e2e_latency_ms``.
- the JSON it saves with ``--save-result`` (``--save-detailed`` adds each request's ``input_lens``,
  ``output_lens`` and ``errors``, and later versions its ``start_times``): the saved-result names (``completed``,
  ``total_input_tokens``, ``mean_ttft_ms``, ``p99_itl_ms``, ...) and the run's ``num_prompts``, ``request_rate``
  (a number or "inf"), ``burstiness``, ``max_concurrency`` and ``model_id``. Unknown keys (``--metadata`` ones,
  ``generated_texts``) are skipped without being decoded.

Figures are kept in the saved-result names, whatever the form: [s] for duration, [ms] for latencies, [tok/s] and
[req/s] for rates. A number that is not finite, negative or absurd, a count that is not whole, a line of the block
that cannot be read: an InputError naming the file and the line or key.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kvcalc.out.errors import InputError

MAX_MEASURED_BYTES = 256 * 2**20   # a saved result with --save-detailed holds every generated text
MAX_FIGURE = 1e15                  # any figure of a benchmark result (tokens, ms, tok/s)
MAX_TIME_S = 2**53 / 1e3           # a send time [s]: the bound of a trace's timestamps (trace/reader.py), in s
TITLE = "Serving Benchmark Result"

# the block's labels -> the saved-result names (vllm/benchmarks/serve.py prints one from the other)
LABELS = {
    "Successful requests": "completed", "Failed requests": "failed",
    "Maximum request concurrency": "max_concurrency", "Request rate configured (RPS)": "request_rate",
    "Benchmark duration (s)": "duration", "Total input tokens": "total_input_tokens",
    "Total generated tokens": "total_output_tokens", "Request throughput (req/s)": "request_throughput",
    "Request goodput (req/s)": "request_goodput", "Output token throughput (tok/s)": "output_throughput",
    "Peak output token throughput (tok/s)": "max_output_tokens_per_s",
    "Peak concurrent requests": "max_concurrent_requests",
    "Total Token throughput (tok/s)": "total_token_throughput",  # vLLM <= 0.11
    "Total token throughput (tok/s)": "total_token_throughput",
    # SGLang's python -m sglang.bench_serving prints its run's settings inside the block
    "Traffic request rate": "request_rate", "Max request concurrency": "max_concurrency",
}
VLLM, SGLANG = "vllm bench serve", "sglang.bench_serving"
SGLANG_ONLY = ("Backend", "Traffic request rate", "Max request concurrency", "Total generated tokens (retokenized)")
COUNTS = ("completed", "failed", "max_concurrency", "total_input_tokens", "total_output_tokens", "num_prompts")
_STAT = re.compile(r"^(Mean|Median|P(\d+(?:\.\d+)?)) (TTFT|TPOT|ITL|E2EL|E2E Latency) \(ms\)$")
_STAT_KEY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el|e2e_latency)_ms$")
_LINE = re.compile(r"^\s*([A-Za-z][A-Za-z0-9 ().,/%-]*?):\s+(\S.*?)\s*$")
# printed as the run starts ("Traffic request rate: inf", "Burstiness factor: 1.0 (Poisson process)", "Maximum
# request concurrency: None"), before the block: the older benchmark_serving.py's block has no configured rate
_BEFORE = {"request_rate": re.compile(r"^\s*Traffic request rate:\s*(\S+)\s*$"),
           "burstiness": re.compile(r"^\s*Burstiness factor:\s*(\S+)"),
           "max_concurrency": re.compile(r"^\s*Maximum request concurrency:\s*(\S+)\s*$")}
# a saved result's keys that describe the run, not a figure of it
SETTINGS = ("num_prompts", "request_rate", "burstiness", "max_concurrency", "model_id", "ramp_up_strategy",
            "input_lens", "output_lens", "errors", "start_times")
JSON_KEYS = set(LABELS.values()) | set(SETTINGS)


@dataclass(frozen=True)
class MeasuredRun:
    """A measured run: its figures in the saved-result names, and what it says of its requests.

    ``request_rate``: [req/s], inf for all at t = 0, None when the file does not say (a JSON without it);
    ``input_lens``/``output_lens`` [tokens] and ``start_s`` [s from the first send]: the successful requests', from
    a detailed JSON (else None); ``where``: how the file gave it, for notes ("line 12", "JSON")."""

    path: str
    form: str                      # "block" or "json"
    where: str
    figures: dict
    request_rate: float | None
    burstiness: float | None
    max_concurrency: int | None
    num_prompts: int | None
    model_id: str | None
    input_lens: tuple | None = None
    output_lens: tuple | None = None
    start_s: tuple | None = None
    ramp_up: str | None = None
    client: str = "vllm bench serve"   # or "sglang.bench_serving", told by the lines or keys only it writes

    @property
    def detailed(self) -> bool:
        return self.input_lens is not None


def read_measured(ref: str) -> MeasuredRun:
    """Read the measured run at ``ref`` (a regular file of at most MAX_MEASURED_BYTES, UTF-8)."""
    from kvcalc.model import catalog

    path = catalog.user_path(ref)
    text = catalog.read_text_bounded(path, MAX_MEASURED_BYTES, "a benchmark result")
    if text.lstrip()[:1] == "{":
        return parse_json(text, ref)
    return parse_block(text, ref)


def _number(text: str, what: str, count: bool):
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0 or value > MAX_FIGURE:
        raise InputError(f"{what}: {text[:40]!r} is not a figure of a benchmark result (a number from 0 to 1e15)")
    if count:
        if value != int(value):
            raise InputError(f"{what}: {text[:40]!r} is not a whole number")
        return int(value)
    return value


def parse_block(text: str, ref: str = "result") -> MeasuredRun:
    """The one result block of a text (a log, a page, the printed output)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if TITLE in line and "=" in line]
    if not starts:
        raise InputError(f"{ref}: no '{TITLE}' block of vllm bench serve and not a saved result (JSON)")
    if len(starts) > 1:
        shown = ", ".join(str(i + 1) for i in starts[:5]) + (", ..." if len(starts) > 5 else "")
        raise InputError(f"{ref}: {len(starts)} '{TITLE}' blocks (lines {shown}); give a file with one run")
    start = starts[0]
    figures: dict = {}
    end, sglang = None, False
    for i in range(start + 1, len(lines)):
        stripped = lines[i].strip()
        if stripped and set(stripped) == {"="}:
            end = i
            break
        if not stripped or set(stripped) <= set("-") or (stripped.startswith("-") and stripped.endswith("-")):
            continue  # a section header ("-----Time to First Token-----")
        m = _LINE.match(lines[i])
        if not m:
            raise InputError(f"{ref}: line {i + 1}: not a 'name: value' line of the result block: "
                             f"{stripped[:60]!r}")
        label, value = m.group(1).strip(), m.group(2)
        sglang = sglang or label in SGLANG_ONLY
        key = LABELS.get(label)
        stat = _STAT.match(label)
        if stat:
            kind = stat.group(1).lower() if stat.group(2) is None else f"p{stat.group(2)}"
            key = f"{kind}_{'e2el' if stat.group(3) == 'E2E Latency' else stat.group(3).lower()}_ms"
        if key is None:
            continue  # a line kvcalc does not compare (RTFx, probe requests, client queue time, backend, ...)
        if key in figures:
            raise InputError(f"{ref}: line {i + 1}: {label!r} given twice")
        what = f"{ref}: line {i + 1} ({label})"
        if key == "max_concurrency" and value == "not set":  # SGLang's word for no cap
            figures[key] = None
        elif key == "request_rate" and value.lower() in ("inf", "trace"):
            figures[key] = _rate_word(value, what)
        else:
            figures[key] = _number(value, what, key in COUNTS)
    if end is None:
        raise InputError(f"{ref}: the result block of line {start + 1} has no closing '=====' line (truncated?)")
    before = _before(lines[:start], ref)  # the lines vLLM prints as the run starts, the last of each kind
    burst = before.get("burstiness")
    rate = figures.pop("request_rate") if "request_rate" in figures else before.get("request_rate", math.inf)
    conc = figures.pop("max_concurrency") if "max_concurrency" in figures else before.get("max_concurrency")
    return _checked(MeasuredRun(ref, "block", f"the block of line {start + 1}", figures, rate, burst, conc, None,
                                None, client=SGLANG if sglang else VLLM))


def _rate_word(text: str, what: str) -> float:
    """'inf' -> inf; 'trace' (SGLang replaying a trace's timestamps) -> InputError: give the trace instead."""
    if text.lower() == "inf":
        return math.inf
    raise InputError(f"{what}: the run sent its requests at a trace's timestamps; give that trace with --trace "
                     "(the file's figures are still compared)")


def _before(lines: list, ref: str) -> dict:
    """The run's rate [req/s], burstiness and concurrency cap from the lines before the block (the last of each)."""
    out: dict = {}
    for i, line in enumerate(lines):
        for key, pattern in _BEFORE.items():
            m = pattern.match(line)
            if not m:
                continue
            text = m.group(1)
            what = f"{ref}: line {i + 1} ({line.strip()[:40]})"
            if key == "request_rate" and text.lower() in ("inf", "trace"):
                out[key] = _rate_word(text, what)
            elif key == "max_concurrency" and text == "None":
                out.pop(key, None)
            else:
                out[key] = _number(text, what, key == "max_concurrency")
    return out


def parse_json(text: str, ref: str = "result") -> MeasuredRun:
    """A result saved by ``vllm bench serve --save-result`` (``--save-detailed`` for per-request lengths)."""
    import msgspec

    runs = sum(1 for line in text.splitlines() if line.lstrip().startswith("{"))
    if runs > 1 and text.count("\n{") + 1 >= runs:  # a JSONL file: SGLang's bench_serving appends a line a run
        raise InputError(f"{ref}: {runs} JSON lines (one saved result each); give a file with one run")
    try:
        raw = msgspec.json.decode(text, type=dict[str, msgspec.Raw])
    except RecursionError:
        raise InputError(f"{ref}: not a saved vllm bench result we can read: JSON nested too deeply") from None
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise InputError(f"{ref}: not a saved vllm bench result (a JSON object): {str(e)[:100]}") from None
    doc = {}
    sglang = "total_output_tokens_retokenized" in raw or any("_e2e_latency_" in k for k in raw)
    for key, value in raw.items():
        if _STAT_KEY.match(key):
            key = key.replace("_e2e_latency_", "_e2el_")  # SGLang's bench_serving names it so
        if key in JSON_KEYS or _STAT_KEY.match(key):
            try:
                doc[key] = msgspec.json.decode(value)
            except (msgspec.DecodeError, RecursionError):
                raise InputError(f"{ref}: key {key!r}: not JSON we can read (nested too deeply?)") from None
    figures: dict = {}
    for key, value in doc.items():
        if key in SETTINGS or value is None:
            continue
        figures[key] = _value(value, f"{ref}: key {key!r}", key in COUNTS)
    rate = doc.get("request_rate")
    if isinstance(rate, str) and rate.strip().lower() in ("inf", "trace"):
        rate = _rate_word(rate.strip(), f"{ref}: key 'request_rate'")
    elif rate is not None:
        rate = _value(rate, f"{ref}: key 'request_rate'", False)
    conc, n, burst = (None if doc.get(k) is None else _value(doc[k], f"{ref}: key {k!r}", k in COUNTS)
                      for k in ("max_concurrency", "num_prompts", "burstiness"))
    model = doc.get("model_id")
    ramp = doc.get("ramp_up_strategy")
    lens = _detailed(doc, ref, figures)
    return _checked(MeasuredRun(ref, "json", "JSON", figures, rate, burst, conc, n,
                                model if isinstance(model, str) else None, *lens,
                                ramp_up=ramp if isinstance(ramp, str) else None, client=SGLANG if sglang else VLLM))


def _value(value, what: str, count: bool):
    """A JSON number as a figure (whole for a count); anything else an InputError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"{what}: expected a number, got {_short(value)}")
    if isinstance(value, int) and not 0 <= value <= MAX_FIGURE:
        raise InputError(f"{what}: {_short(value)} is not a figure of a benchmark result (a number from 0 to 1e15)")
    return _number(repr(value), what, count)


def _short(value) -> str:
    """A value in an error line, short (a million-entry list or a 5,000-digit number stays one line)."""
    import reprlib

    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**21:
        return f"a number of about {int(value.bit_length() * 0.30103) + 1:,} digits"
    text = reprlib.repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _detailed(doc: dict, ref: str, figures: dict):
    """(input_lens, output_lens, start_s) of the successful requests of a --save-detailed result, or Nones."""
    ins, outs = doc.get("input_lens"), doc.get("output_lens")
    if ins is None and outs is None:
        return None, None, None
    if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
        raise InputError(f"{ref}: input_lens and output_lens must be lists of one length per request")
    errors = doc.get("errors")
    if errors is not None and (not isinstance(errors, list) or len(errors) != len(ins)):
        raise InputError(f"{ref}: errors must be a list of one entry per request, as input_lens")
    starts = doc.get("start_times")
    if starts is not None and (not isinstance(starts, list) or len(starts) != len(ins)):
        raise InputError(f"{ref}: start_times must be a list of one entry per request, as input_lens")
    keep_in, keep_out, keep_start = [], [], []
    for i, (a, b) in enumerate(zip(ins, outs)):
        ok = (not errors[i]) if errors is not None else (isinstance(b, int) and b > 0)
        if not ok:
            continue  # a failed request: vLLM counts it apart and leaves it out of every figure
        for key, value in (("input_lens", a), ("output_lens", b)):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_FIGURE:
                raise InputError(f"{ref}: {key}[{i}]: {_short(value)} is not a token count")
        keep_in.append(a)
        keep_out.append(b)
        if starts is not None:
            t = starts[i]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not abs(t) <= MAX_TIME_S:
                raise InputError(f"{ref}: start_times[{i}]: {_short(t)} is not a time in seconds (at most "
                                 f"{MAX_TIME_S:g} s from 0)")
            keep_start.append(float(t))
    if not keep_in:
        raise InputError(f"{ref}: no successful request in input_lens / output_lens")
    if "completed" in figures and figures["completed"] != len(keep_in):
        raise InputError(f"{ref}: completed is {figures['completed']:,} but the per-request lists hold "
                         f"{len(keep_in):,} successful requests")
    start = None
    if starts is not None:
        first = min(keep_start)
        start = tuple(t - first for t in keep_start)
    return tuple(keep_in), tuple(keep_out), start


def _checked(run: MeasuredRun) -> MeasuredRun:
    """The run, if it names its requests (a count and the tokens, or per-request lengths) and its rate is usable."""
    f = run.figures
    missing = [k for k in ("completed", "total_input_tokens", "total_output_tokens") if k not in f]
    if missing and not run.detailed:
        raise InputError(f"{run.path}: the {('result block' if run.form == 'block' else 'saved result')} has no "
                         f"{', '.join(missing)}: kvcalc needs the requests and their tokens")
    if f.get("completed", 1) < 1:
        raise InputError(f"{run.path}: no successful request (completed 0): nothing to compare")
    if run.request_rate is not None and run.request_rate == 0:
        raise InputError(f"{run.path}: request rate 0: no request would be sent")
    if run.burstiness is not None and run.burstiness == 0:
        raise InputError(f"{run.path}: burstiness 0: vLLM needs a positive burstiness factor")
    if run.max_concurrency is not None and run.max_concurrency < 1:
        raise InputError(f"{run.path}: max_concurrency {run.max_concurrency}: at least 1")
    return run
