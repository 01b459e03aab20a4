"""``kvcalc bench --measured FILE``: the requests of a measured run, and kvcalc's figures beside its own.

The requests (what the run says of them, where a flag does not say otherwise): a run saved with
``--save-detailed`` gives every successful request's prompt and output length (and, in later vLLM versions, its
send time); otherwise the file gives only totals, spread over the successful requests so that they add up
exactly (``spread``: the first total mod n requests one token longer), as the calibration spreads each row's
generated tokens.

The comparison: for every figure both have (saved-result names), error = kvcalc / measured - 1 (a ratio;
+0.19 = kvcalc 19% high), and ``max_abs_error``, the largest |error| over the timed figures (duration,
throughputs, TTFT, TPOT, ITL, E2EL), for one ``--check``.
"""

from __future__ import annotations

import math

# the figures kvcalc predicts, in the order vLLM prints them
COMPARED = ("completed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
            "output_throughput", "total_token_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms",
            "mean_tpot_ms", "median_tpot_ms", "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms",
            "mean_e2el_ms")
INPUTS = ("completed", "total_input_tokens", "total_output_tokens")   # the run's shape, not a time
GAP_NOTE = ("a run of lengths that vary (ShareGPT, early EOS) lasts longer than one of fixed lengths: its longest "
            "requests finish last; vllm bench serve --save-result --save-detailed saves each request's lengths")


def spread(total: int, n: int):
    """``n`` whole lengths [tokens] adding up to ``total``: total // n each, the first total mod n one more."""
    import numpy as np

    base, extra = divmod(int(total), int(n))
    out = np.full(int(n), base, dtype=np.int64)
    out[:extra] += 1
    return out


def measured_requests(run, n_given: int | None, input_given: bool, output_given: bool, max_requests: int,
                      max_tokens: int):
    """(n, input_lens or None, output_lens or None) of the run: per-request lengths where the file has them,
    else the totals spread over the successful requests; None where a flag gives the length (fixed). More than
    ``max_requests`` requests or a request of more than ``max_tokens`` tokens: InputError."""
    from kvcalc.out.errors import InputError

    count = len(run.input_lens) if run.detailed else run.figures["completed"]
    if count > max_requests:
        raise InputError(f"--measured {run.path}: {count:,} requests; kvcalc bench simulates at most "
                         f"{max_requests:,}")
    if n_given is not None and n_given != count:
        raise InputError(f"--num-prompts {n_given:,}: the measured run {run.path} has {count:,} successful "
                         "requests; leave --num-prompts out to compare with it")
    f = run.figures
    if run.detailed:
        ins, outs = run.input_lens, run.output_lens
    else:
        if f["total_output_tokens"] < count and not output_given:
            raise InputError(f"{run.path}: {f['total_output_tokens']:,} generated tokens for {count:,} requests: "
                             "fewer than one each")
        ins = tuple(spread(f["total_input_tokens"], count).tolist())
        outs = tuple(spread(f["total_output_tokens"], count).tolist())
    ins = None if input_given else tuple(max(1, x) for x in ins)
    outs = None if output_given else tuple(max(1, x) for x in outs)
    for what, lens in (("prompt", ins), ("output", outs)):
        if lens is not None and max(lens) > max_tokens:
            raise InputError(f"--measured {run.path}: a request of {max(lens):,} {what} tokens is absurdly large "
                             f"(limit {max_tokens:,})")
    return count, ins, outs


def send_times(run, ins, outs):
    """scheduler.Requests of a detailed run that saved each request's send time (start_times), in send order, with
    the lengths ``ins`` and ``outs`` (measured_requests'); None when it saved none."""
    if run.start_s is None:
        return None
    import numpy as np

    from kvcalc.serve.scheduler import Requests

    order = np.argsort(np.asarray(run.start_s), kind="stable")
    return Requests(np.asarray(run.start_s)[order], np.asarray(ins, dtype=np.int64)[order],
                    np.asarray(outs, dtype=np.int64)[order], None, 16)


def unit_of(key: str) -> str:
    """The unit of a saved-result figure, as its name says it."""
    if key.endswith("_ms"):
        return "ms"
    return {"completed": "requests", "duration": "s", "request_throughput": "req/s"}.get(
        key, "tokens" if key.startswith("total_") and key.endswith("_tokens") else "tok/s")


def comparison(row: dict, run) -> tuple[list[dict], dict, list[str]]:
    """(the comparison rows {figure, unit, kind, measured, predicted, error}, the main row's measured_* / error_* fields and
    max_abs_error, notes) of kvcalc's ``row`` against the measured ``run``."""
    from kvcalc.out import units

    rows, extra, worst = [], {}, None
    for key in COMPARED:
        if key not in run.figures or row.get(key) is None:
            continue
        measured, predicted = run.figures[key], row[key]
        error = predicted / measured - 1 if measured else (0.0 if predicted == 0 else None)
        rows.append({"figure": key, "unit": unit_of(key), "kind": "int" if key in INPUTS else "float",
                     "measured": measured, "predicted": predicted, "error": error})
        extra[f"measured_{key}"] = measured
        extra[f"error_{key}"] = error
        if key not in INPUTS and error is not None and (worst is None or abs(error) > abs(worst[1])):
            worst = (key, error)
    extra["max_abs_error"] = abs(worst[1]) if worst else None
    notes = []
    if worst:
        notes.append(f"measured vs kvcalc: error = kvcalc / measured - 1; the largest is {units.fmt_error(worst[1])} "
                     f"on {worst[0]}")
    if "mean_ttft_frontend_ms" in row and "mean_ttft_ms" in run.figures:
        ms = lambda key, fig: units.fmt_ms(units.ms_to_s(fig[key]), ",.2f")  # noqa: E731
        notes.append(f"kvcalc's mean TTFT {ms('mean_ttft_ms', row)} (measured {ms('mean_ttft_ms', run.figures)}) "
                     f"= {ms('mean_ttft_frontend_ms', row)} in the API server's front end (its serial queue and "
                     f"calibrated cost per request and prompt token) + {ms('mean_ttft_engine_ms', row)} in the "
                     "engine (waiting for the KV pool or the token budget, then prefill, to the first token)")
    return rows, extra, notes


def source_note(run, took: list[str]) -> str:
    """Where the measured figures came from and what kvcalc took from them."""
    form = (f"{run.client}'s printed result" if run.form == "block" else
            f"{run.client}'s saved result" + (" (per request: lengths" + (" and send times" if run.start_s is not
                                                                          None else "") + ")" if run.detailed
                                               else ""))
    failed = run.figures.get("failed")
    lost = f"; its {failed:,} failed requests are left out, as vLLM leaves them out" if failed else ""
    model = f" ({run.model_id})" if run.model_id else ""
    return (f"measured: {run.path}{model}, {form}, {run.where}; taken from it: {', '.join(took) or 'nothing'} "
            f"(a flag given on the command line wins){lost}")


def rate_of(run) -> float:
    """The run's request rate [req/s] (inf: all at t = 0; a saved result that does not say: inf)."""
    return math.inf if run.request_rate is None else run.request_rate


def mean_length(lens, default: int) -> int:
    """The requests' mean length [tokens], rounded (``default`` when a flag gives one length to all)."""
    return default if lens is None else max(1, round(sum(lens) / len(lens)))


def with_measured(result, run, took: list[str], user_trace: bool = False):
    """``result`` (bench_report.bench_result) with the measured run beside it: the main row's measured_* and
    error_* fields and max_abs_error, a ``measured`` table, and notes saying where the figures came from."""
    from dataclasses import replace

    from kvcalc.out.results import Column, Table

    row = result.rows[0]
    rows, extra, notes = comparison(row, run)
    columns = (Column("figure", "figure", "text"), Column("unit", "unit", "text"),
               Column("measured", "measured", "auto"), Column("predicted", "kvcalc", "auto"),
               Column("error", "error", "percent"))
    table = Table("measured", f"Measured ({run.path}) vs kvcalc", columns, tuple(rows))
    notes = [source_note(run, took)] + notes
    if not run.detailed:
        notes.append("lengths: the file gives totals, so every request has the run's mean prompt and output "
                     f"length; {GAP_NOTE}")
    inputs = dict(result.inputs, measured=run.path, dataset="trace" if user_trace else "measured")
    return replace(result, inputs=inputs, main=replace(result.main, rows=(dict(row, **extra),)),
                   extra=(table,) + tuple(result.extra), notes=tuple(notes) + tuple(result.notes))
