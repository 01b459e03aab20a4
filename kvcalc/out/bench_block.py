"""The block ``vllm bench serve`` prints at the end of a run (vllm/benchmarks/serve.py: a 50-character
"=" title, "{:<40} {:<10}" lines, "-" section headers), filled with kvcalc's predicted figures, so the two
can be held side by side. Lines kvcalc does not predict (peak output token throughput, peak concurrent
requests) are left out."""

from __future__ import annotations

import math

WIDTH = 50


def _title(text: str, fill: str) -> str:
    return "{s:{c}^{n}}".format(s=text, n=WIDTH, c=fill)


def _line(name: str, value, digits: bool = True) -> str:
    return ("{:<40} {:<10.2f}" if digits else "{:<40} {:<10}").format(name, value).rstrip()


def vllm_block(row: dict, max_concurrency=None, request_rate: float = math.inf) -> str:
    """The result block for one row of bench's figures (the saved-result names)."""
    out = [_title(" Serving Benchmark Result ", "="), _line("Successful requests:", row["completed"], False)]
    if max_concurrency is not None:
        out.append(_line("Maximum request concurrency:", max_concurrency, False))
    if not math.isinf(request_rate):
        out.append(_line("Request rate configured (RPS):", request_rate))
    out += [_line("Benchmark duration (s):", row["duration"]),
            _line("Total input tokens:", row["total_input_tokens"], False),
            _line("Total generated tokens:", row["total_output_tokens"], False),
            _line("Request throughput (req/s):", row["request_throughput"]),
            _line("Output token throughput (tok/s):", row["output_throughput"]),
            _line("Total Token throughput (tok/s):", row["total_token_throughput"])]
    for header, name, key in (("Time to First Token", "TTFT", "ttft"),
                              ("Time per Output Token (excl. 1st token)", "TPOT", "tpot")):
        out += [_title(header, "-"), _line(f"Mean {name} (ms):", row[f"mean_{key}_ms"]),
                _line(f"Median {name} (ms):", row[f"median_{key}_ms"]), _line(f"P99 {name} (ms):", row[f"p99_{key}_ms"])]
    out += [_title("Inter-token Latency", "-"), _line("Mean ITL (ms):", row["mean_itl_ms"]),
            _line("Median ITL (ms):", row["median_itl_ms"]), _line("P99 ITL (ms):", row["p99_itl_ms"]),
            "=" * WIDTH]
    return "\n".join(out) + "\n"
