"""The block ``vllm bench serve`` prints at the end of a run (vllm/benchmarks/serve.py: a 50-character
"=" title, "{:<40} {:<10}" lines, "-" section headers), filled with kvcalc's predicted figures, so the two
can be held side by side. Lines kvcalc does not predict (peak output token throughput, peak concurrent
requests) are left out. With a measured run's figures (``bench --measured``), each line carries the measured
figure, kvcalc's and kvcalc's error (kvcalc / measured - 1), where the measured run has that figure."""

from __future__ import annotations

import math

from kvcalc.out import units

WIDTH = 50
SETTINGS = ("max_concurrency", "request_rate")  # the run's settings: shown beside kvcalc's, no error


def _title(text: str, fill: str) -> str:
    return "{s:{c}^{n}}".format(s=text, n=WIDTH, c=fill)


def _value(value, digits: bool) -> str:
    return "{:<10.2f}".format(value) if digits else "{:<10}".format(value)


def vllm_block(row: dict, max_concurrency=None, request_rate: float = math.inf, measured: dict | None = None) -> str:
    """The result block for one row of bench's figures (the saved-result names); with ``measured`` (a measured
    run's figures in the same names) the measured, kvcalc and error columns."""

    def line(name: str, key: str | None, value, digits: bool = True) -> str:
        if measured is None:
            return ("{:<40} ".format(name) + _value(value, digits)).rstrip()
        theirs = measured.get(key) if key else None
        if theirs is None:
            return ("{:<40} {:<10} ".format(name, "") + _value(value, digits)).rstrip()
        error = units.fmt_error(value / theirs - 1) if theirs and key not in SETTINGS else ""
        return ("{:<40} ".format(name) + _value(theirs, digits) + " " + _value(value, digits) + " " + error).rstrip()

    out = [_title(" Serving Benchmark Result ", "=")]
    if measured is not None:
        out.append("{:<40} {:<10} {:<10} {}".format("", "measured", "kvcalc", "error"))
    out.append(line("Successful requests:", "completed", row["completed"], False))
    if max_concurrency is not None:
        out.append(line("Maximum request concurrency:", "max_concurrency", max_concurrency, False))
    if not math.isinf(request_rate):
        out.append(line("Request rate configured (RPS):", "request_rate", request_rate))
    out += [line("Benchmark duration (s):", "duration", row["duration"]),
            line("Total input tokens:", "total_input_tokens", row["total_input_tokens"], False),
            line("Total generated tokens:", "total_output_tokens", row["total_output_tokens"], False),
            line("Request throughput (req/s):", "request_throughput", row["request_throughput"]),
            line("Output token throughput (tok/s):", "output_throughput", row["output_throughput"]),
            line("Total Token throughput (tok/s):", "total_token_throughput", row["total_token_throughput"])]
    for header, name, key in (("Time to First Token", "TTFT", "ttft"),
                              ("Time per Output Token (excl. 1st token)", "TPOT", "tpot"),
                              ("Inter-token Latency", "ITL", "itl")):
        out.append(_title(header, "-"))
        out += [line(f"{stat} {name} (ms):", f"{stat.lower()}_{key}_ms", row[f"{stat.lower()}_{key}_ms"])
                for stat in ("Mean", "Median", "P99")]
    if measured is not None and "mean_e2el_ms" in measured:
        out += [_title("End-to-end Latency", "-"), line("Mean E2EL (ms):", "mean_e2el_ms", row["mean_e2el_ms"])]
    out.append("=" * WIDTH)
    return "\n".join(out) + "\n"
