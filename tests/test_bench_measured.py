"""``kvcalc bench --measured FILE``: a measured ``vllm bench serve`` run read from what it printed or saved, its
requests replayed, its figures beside kvcalc's. The files in tests/fixtures/measured/ are copied unchanged from
published pages (their README cites each); the GPUStack ones are the runs of tests/fixtures/perf/*.csv, whose
figures were copied from the same pages separately, so each parse is held to an independent copy."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from conftest import run_cli

from kvcalc.out.errors import InputError
from kvcalc.trace.measured import parse_block, parse_json, read_measured

HERE = Path(__file__).parent
MEASURED = HERE / "fixtures" / "measured"
PERF = HERE / "fixtures" / "perf"

# fixture -> (CSV, row number counted from 1)
ROWS = {"qwen3-8b-h100-vllm-c1.txt": ("validation.csv", 1), "qwen3-8b-h100-sglang-c4.txt": ("validation.csv", 5),
        "deepseek-r1-h200-vllm-128in.txt": ("validation.csv", 13),
        "gpt-oss-120b-h100-vllm-4k.txt": ("calibration.csv", 10),
        "qwen3-14b-h100-vllm-128in.txt": ("calibration.csv", 44)}
CSV_FIGURES = {"duration": "duration_s", "request_throughput": "req_per_s", "output_throughput": "output_tok_per_s",
               "total_token_throughput": "total_tok_per_s", "mean_ttft_ms": "mean_ttft_ms",
               "median_ttft_ms": "median_ttft_ms", "p99_ttft_ms": "p99_ttft_ms", "mean_tpot_ms": "mean_tpot_ms",
               "median_tpot_ms": "median_tpot_ms", "p99_tpot_ms": "p99_tpot_ms", "mean_itl_ms": "mean_itl_ms"}


def _row(name: str, number: int) -> dict:
    with open(PERF / name, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))[number - 1]


def _note(row: dict, key: str) -> int:
    return int(next(x.split("=")[1] for x in row["notes"].split("; ") if x.startswith(key + "=")))


@pytest.mark.parametrize("fixture", sorted(ROWS))
def test_block_equals_the_csv_copy_of_the_same_page(fixture):
    run = read_measured(str(MEASURED / fixture))
    row = _row(*ROWS[fixture])
    assert run.form == "block" and not run.detailed
    for key, column in CSV_FIGURES.items():
        if row[column]:
            assert run.figures[key] == float(row[column]), key
    assert run.figures["completed"] == _note(row, "successful")
    assert run.figures["total_input_tokens"] == _note(row, "total_input_tokens")
    assert run.figures["total_output_tokens"] == _note(row, "total_output_tokens")
    assert run.request_rate == math.inf  # all these runs sent every request at t = 0
    assert run.max_concurrency == (int(row["max_concurrency"]) if row["max_concurrency"] else None)
    assert "max_concurrency" not in run.figures and "request_rate" not in run.figures


def test_the_printed_block_and_the_saved_json_of_one_run_agree():
    # nerdalert/vllm-bench-automation: one 10 QPS run, printed and saved (benchmark_serving.py, before vllm bench)
    text = read_measured(str(MEASURED / "llama-3.2-3b-l40s-10qps.txt"))
    saved = read_measured(str(MEASURED / "llama-3.2-3b-l40s-10qps.json"))
    assert (text.form, saved.form) == ("block", "json")
    # the older block prints no configured rate: it is read from "Traffic request rate: 10.0" before the block
    assert text.request_rate == saved.request_rate == 10.0
    assert text.burstiness == saved.burstiness == 1.0 and text.max_concurrency is saved.max_concurrency is None
    assert saved.num_prompts == 300 and saved.model_id == "meta-llama/Llama-3.2-3B-Instruct"
    assert set(text.figures) <= set(saved.figures)
    for key, value in text.figures.items():  # the block prints "{:<10.2f}": the JSON's figure rounded
        assert value == (round(saved.figures[key], 2) if isinstance(value, float) else saved.figures[key]), key
    # --metadata keys ("deployment", "gpu") and the misspelt "request_goodput:" are not figures
    assert "gpu" not in saved.figures and "request_goodput:" not in saved.figures
    assert saved.figures["std_ttft_ms"] == 9.27197373989555


def _detailed(**changes) -> str:
    doc = {"date": "20260101-000000", "backend": "vllm", "model_id": "Qwen/Qwen3-8B", "num_prompts": 4,
           "request_rate": 2.0, "burstiness": 0.5, "max_concurrency": None, "duration": 3.5, "completed": 3,
           "failed": 1, "total_input_tokens": 600, "total_output_tokens": 60, "mean_ttft_ms": 50.0,
           "p90_ttft_ms": 80.0, "input_lens": [100, 200, 300, 400], "output_lens": [10, 0, 20, 30],
           "errors": ["", "Bad Request", "", ""], "start_times": [5.0, 5.5, 6.25, 7.0],
           "generated_texts": ["a", "", "b", "c"], "custom": {"nested": [1, 2]}}
    doc.update(changes)
    return json.dumps(doc)


def test_a_detailed_saved_result_gives_each_successful_request():
    run = parse_json(_detailed(), "d.json")
    # the failed request (the 2nd) is left out of every list, as vLLM leaves it out of every figure
    assert run.input_lens == (100, 300, 400) and run.output_lens == (10, 20, 30)
    assert run.start_s == (0.0, 1.25, 2.0)  # relative to the first successful send
    assert run.request_rate == 2.0 and run.burstiness == 0.5 and run.figures["p90_ttft_ms"] == 80.0
    assert run.figures["failed"] == 1 and "custom" not in run.figures


def test_spread_adds_up_to_the_total():
    from kvcalc.serve.bench_measured import spread

    # 23,260 prompt tokens over 100 requests = 232 each, and 60 of them one more: 60 x 233 + 40 x 232
    lens = spread(23_260, 100)
    assert lens.sum() == 23_260 and (lens[:60] == 233).all() and (lens[60:] == 232).all()
    assert spread(7, 7).tolist() == [1] * 7


BLOCK = MEASURED / "qwen3-8b-h100-vllm-c1.txt"
ARGS = ["bench", "--model", "qwen3-8b", "--hardware", "h100-sxm", "--measured", str(BLOCK)]


def test_cli_replays_the_run_and_puts_its_figures_beside_kvcalcs():
    j = json.loads(run_cli(*ARGS, "--format", "json").out)
    row, inputs = j["results"][0], j["inputs"]
    # taken from the block: 100 requests, concurrency 1, rate inf, the totals spread over the requests
    assert inputs["num_prompts"] == 100 and inputs["max_concurrency"] == 1 and inputs["request_rate"] is None
    assert inputs["dataset"] == "measured" and inputs["measured"] == str(BLOCK)
    assert row["total_input_tokens"] == 23_260 and row["total_output_tokens"] == 22_061 and row["completed"] == 100
    # error = kvcalc / measured - 1, figure by figure; the measured figures as the block prints them
    assert row["measured_mean_ttft_ms"] == 59.01 and row["measured_duration"] == 166.04
    assert row["error_mean_ttft_ms"] == pytest.approx(row["mean_ttft_ms"] / 59.01 - 1, rel=1e-12)
    assert row["error_output_throughput"] == pytest.approx(row["output_throughput"] / 132.86 - 1, rel=1e-12)
    assert row["error_total_input_tokens"] == 0
    timed = [k for k in row if k.startswith("error_") and k[6:] not in ("completed", "total_input_tokens",
                                                                          "total_output_tokens")]
    assert row["max_abs_error"] == max(abs(row[k]) for k in timed)
    table = j["tables"]["measured"]
    assert [t["figure"] for t in table][:3] == ["completed", "duration", "total_input_tokens"]
    assert {t["figure"]: t["error"] for t in table}["mean_ttft_ms"] == row["error_mean_ttft_ms"]


def test_cli_equals_the_python_api_on_the_same_requests():
    from kvcalc.model import catalog
    from kvcalc.serve.bench import BenchSpec
    from kvcalc.serve.bench_measured import spread
    from kvcalc.serve.bench_report import bench_result
    from kvcalc.serve.calibration import calibration_for

    hw = catalog.load_hardware("h100-sxm")
    spec = BenchSpec("qwen3-8b", catalog.load_model("qwen3-8b"), "h100-sxm", hw, None,
                     calibration_for("h100-sxm")[0], "h100-sxm", input_len=233, output_len=221, num_prompts=100,
                     max_concurrency=1, input_lens=tuple(spread(23_260, 100).tolist()),
                     output_lens=tuple(spread(22_061, 100).tolist()), started=True)
    api = bench_result(spec).rows[0]
    cli = json.loads(run_cli(*ARGS, "--format", "json").out)["results"][0]
    for k in ("duration", "mean_ttft_ms", "p99_tpot_ms", "median_itl_ms", "output_throughput"):
        assert cli[k] == pytest.approx(api[k], rel=1e-12), k


def test_table_shows_measured_kvcalc_and_error_side_by_side():
    r = run_cli(*ARGS)
    assert r.code == 0, r.err
    lines = r.out.splitlines()
    assert lines[1].split() == ["measured", "kvcalc", "error"]
    j = json.loads(run_cli(*ARGS, "--format", "json").out)["results"][0]
    ttft = next(x for x in lines if x.startswith("Mean TTFT (ms):"))
    assert ttft == f"{'Mean TTFT (ms):':<40} {59.01:<10.2f} {j['mean_ttft_ms']:<10.2f} {j['error_mean_ttft_ms']:+.1%}"
    conc = next(x for x in lines if x.startswith("Maximum request concurrency:"))
    assert conc.split()[-2:] == ["1", "1"]  # a setting: measured and kvcalc's, no error
    notes = " ".join(r.out.split())  # the notes wrap at the terminal's width
    assert "note: measured: " in notes and "100 requests" in notes and "max concurrency 1" in notes


def test_flags_given_win_over_the_file():
    j = json.loads(run_cli(*ARGS, "--max-concurrency", "2", "--random-output-len", "100", "--format",
                           "json").out)
    assert j["inputs"]["max_concurrency"] == 2 and j["results"][0]["total_output_tokens"] == 100 * 100
    assert j["results"][0]["error_total_output_tokens"] == pytest.approx(10_000 / 22_061 - 1)


def test_check_gates_on_the_error():
    assert run_cli(*ARGS, "--check", "max_abs_error <= 10").code == 0
    r = run_cli(*ARGS, "--check", "error_mean_ttft_ms >= -0.25")  # TTFT at concurrency 1: kvcalc 66% low
    assert r.code == 1 and "error_mean_ttft_ms" in r.err


def test_a_saved_result_with_send_times_replays_them(tmp_path):
    f = tmp_path / "detailed.json"
    f.write_text(_detailed(), encoding="utf-8")
    j = json.loads(run_cli("bench", "--model", "qwen3-8b", "--measured", str(f), "--format", "json").out)
    row = j["results"][0]
    assert row["completed"] == 3 and row["total_input_tokens"] == 800 and row["total_output_tokens"] == 60
    # the last request is sent 2.0 s after the first: the run cannot end before it is served
    assert row["duration"] > 2.0 and row["measured_completed"] == 3
    assert row["error_total_input_tokens"] == pytest.approx(800 / 600 - 1)  # the file's own totals disagree


@pytest.mark.parametrize("args, message", [
    (["--num-prompts", "50"], "--num-prompts 50: the measured run"),
    (["--measured", str(HERE / "fixtures")], "is a directory"),
    (["--measured", str(PERF / "calibration.csv")], "no 'Serving Benchmark Result' block"),
])
def test_bad_use_is_one_line_exit_2(args, message):
    r = run_cli(*ARGS, *args)
    assert r.code == 2 and message in r.err and len(r.err.strip().splitlines()) == 1, r.err


def _block(body: str) -> str:
    return "============ Serving Benchmark Result ============\n" + body + "=" * 50 + "\n"


GOOD = ("Successful requests:                     10\nTotal input tokens:                      100\n"
        "Total generated tokens:                  20\n")


@pytest.mark.parametrize("text, message", [
    (_block(GOOD + "Mean TTFT (ms):                          nan\n"), "line 5 (Mean TTFT (ms))"),
    (_block(GOOD + "Mean TTFT (ms):                          -3\n"), "not a figure"),
    (_block(GOOD + "Mean TTFT (ms):                          1e400\n"), "not a figure"),
    (_block(GOOD.replace("10\n", "10.5\n", 1)), "not a whole number"),
    (_block(GOOD + "Mean TTFT (ms):                          1\nMean TTFT (ms):  2\n"), "given twice"),
    (_block(GOOD + "this line is garbage\n"), "line 5: not a 'name: value' line"),
    (_block(GOOD)[:-51], "no closing '=====' line"),
    (_block(GOOD) + _block(GOOD), "2 'Serving Benchmark Result' blocks (lines 1, 6)"),
    (_block("Successful requests:                     10\n"), "has no total_input_tokens, total_output_tokens"),
    (_block(GOOD.replace("10\n", "0\n", 1)), "no successful request"),
])
def test_a_bad_block_names_the_line(text, message):
    with pytest.raises(InputError, match=None) as e:
        parse_block(text, "b.txt")
    assert message in str(e.value) and str(e.value).startswith("b.txt")


@pytest.mark.parametrize("changes, message", [
    ({"completed": "3"}, "key 'completed': expected a number"),
    ({"completed": 10**500}, "about 501 digits"),
    ({"mean_ttft_ms": True}, "key 'mean_ttft_ms': expected a number"),
    ({"request_rate": "fast"}, "key 'request_rate': expected a number"),
    ({"output_lens": [10, 0, 20]}, "lists of one length per request"),
    ({"input_lens": [100, 200, -1, 400]}, "input_lens[2]: -1 is not a token count"),
    ({"start_times": [0, 1, "x", 2]}, "start_times[2]"),
    ({"completed": 5}, "completed is 5 but the per-request lists hold 3"),
    ({"errors": ["x", "y", "z", "w"]}, "no successful request"),
    ({"burstiness": 0}, "burstiness 0"),
])
def test_a_bad_saved_result_names_the_key(changes, message):
    with pytest.raises(InputError) as e:
        parse_json(_detailed(**changes), "d.json")
    assert message in str(e.value), str(e.value)


def test_hostile_json_is_refused(tmp_path):
    for text, message in (("[1, 2]", "not a saved vllm bench result"), ("{" * 100_000, "not a saved vllm bench"),
                          ('{"completed": ' + "[" * 10_000 + "]" * 10_000 + "}", "nested too deeply"),
                          ('{"completed": 1', "not a saved vllm bench result")):
        with pytest.raises(InputError) as e:
            parse_json(text, "h.json")
        assert message in str(e.value), (text[:20], str(e.value))


def test_burstiness_draws_gamma_gaps_as_vllm_does():
    from kvcalc.model import catalog
    from kvcalc.serve.bench import BenchSpec, requests_of

    hw = catalog.load_hardware("h100-sxm")
    base = BenchSpec("qwen3-8b", catalog.load_model("qwen3-8b"), "h100-sxm", hw, None, None, "h100-sxm",
                     num_prompts=40_001, request_rate=4.0)
    poisson = np.diff(requests_of(base).send_s)
    # burstiness 1 keeps the exponential draws of before (the same seed, the same arrivals)
    assert np.array_equal(poisson, np.diff(requests_of(BenchSpec(**{**base.__dict__, "burstiness": 1.0})).send_s))
    gaps = np.diff(requests_of(BenchSpec(**{**base.__dict__, "burstiness": 0.5})).send_s)
    # gamma(shape k, scale 1 / (rate k)): mean 1 / rate = 0.25 s, squared coefficient of variation 1 / k = 2
    assert gaps.mean() == pytest.approx(0.25, rel=0.03) and (gaps.var() / gaps.mean() ** 2) == pytest.approx(2, rel=0.06)
    assert (poisson.var() / poisson.mean() ** 2) == pytest.approx(1, rel=0.05)


def test_burstiness_option_is_checked():
    r = run_cli("bench", "--model", "qwen3-8b", "--num-prompts", "5", "--request-rate", "2", "--burstiness", "0")
    assert r.code == 2 and "--burstiness" in r.err
    ok = run_cli("bench", "--model", "qwen3-8b", "--num-prompts", "5", "--request-rate", "2", "--burstiness", "0.5")
    assert ok.code == 0, ok.err


@pytest.mark.parametrize("fixture, row, args", [
    ("gpt-oss-120b-h100-vllm-4k.txt", 10, ["-m", "gpt-oss-120b", "--max-model-len", "32768"]),
    ("qwen3-14b-h100-vllm-128in.txt", 44, ["-m", "qwen3-14b"])])
def test_a_calibration_runs_block_gives_the_calibrations_prediction(fixture, row, args):
    # the calibration (kvcalc.serve.calibration.predict) runs the CSV row: its prompts of the command's length
    # (4,000 / 128 tokens); --measured runs the block: the run's own 1,999,274 / 500 = 3,998.5 and 127,698 /
    # 1,000 = 127.7 tokens. Otherwise the same requests (the generated tokens spread alike), so within 1%
    from kvcalc.serve import calibration as c

    measured = c.read_rows(PERF / "calibration.csv")[row - 1]
    want = c.predict(measured)
    got = json.loads(run_cli("bench", *args, "--hardware", "h100-sxm", "--measured", str(MEASURED / fixture),
                             "--format", "json").out)["results"][0]
    for key in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
        assert got[key] == pytest.approx(want[key], rel=0.01), key
        # and its error is the calibration table's (docs/serving-model.md), to the same 1%
        assert got[f"error_{key}"] == pytest.approx(want[key] / measured.measured[key] - 1, abs=0.01), key


def test_sglang_bench_servings_block_is_read_too():
    # SGLang's client prints its settings inside the block ("Traffic request rate", "Max request concurrency: not
    # set"), E2E Latency for vLLM's E2EL, and lines kvcalc does not compare (retokenized tokens, Concurrency, Max ITL)
    run = read_measured(str(MEASURED / "sglang-deepseek-v3.2-exp-random-1024.txt"))
    assert run.request_rate == math.inf and run.max_concurrency is None
    f = run.figures
    assert (f["completed"], f["total_input_tokens"], f["total_output_tokens"]) == (500, 253_168, 131_674)
    assert (f["mean_e2el_ms"], f["median_e2el_ms"], f["p90_e2el_ms"], f["p99_e2el_ms"]) == (
        63957.86, 64404.77, 108928.34, 118216.62)
    assert (f["p95_itl_ms"], f["p99_itl_ms"], f["total_token_throughput"]) == (121.57, 160.03, 3194.21)
    assert "max_itl_ms" not in f and "max_concurrent_requests" in f


@pytest.mark.parametrize("changes, message", [
    ({"request_rate": "trace"}, "sent its requests at a trace's timestamps"),
])
def test_sglang_names_in_a_saved_result(changes, message):
    with pytest.raises(InputError) as e:
        parse_json(_detailed(**changes), "s.json")
    assert message in str(e.value)
    run = parse_json(_detailed(mean_e2e_latency_ms=123.0, p99_e2e_latency_ms=456.0), "s.json")
    assert run.figures["mean_e2el_ms"] == 123.0 and run.figures["p99_e2el_ms"] == 456.0


def test_a_jsonl_of_several_runs_is_refused():
    with pytest.raises(InputError) as e:
        parse_json(_detailed() + "\n" + _detailed() + "\n", "runs.jsonl")
    assert "2 JSON lines" in str(e.value)


def test_the_client_is_named():
    assert read_measured(str(MEASURED / "sglang-deepseek-v3.2-exp-random-1024.txt")).client == "sglang.bench_serving"
    assert read_measured(str(BLOCK)).client == "vllm bench serve"
    assert parse_json(_detailed(total_output_tokens_retokenized=59), "s.json").client == "sglang.bench_serving"
    assert parse_json(_detailed(), "v.json").client == "vllm bench serve"


def test_the_ttft_split_adds_up_and_one_request_pays_the_front_ends_cost():
    from kvcalc.model import catalog
    from kvcalc.serve.bench import BenchSpec
    from kvcalc.serve.bench_report import bench_result
    from kvcalc.serve.calibration import calibration_for

    cal = calibration_for("h100-sxm")[0]
    hw = catalog.load_hardware("h100-sxm")
    base = dict(model_name="qwen3-8b", model=catalog.load_model("qwen3-8b"), hw_name="h100-sxm", hw=hw, link=None,
                cal=cal, cal_name="h100-sxm", input_len=1000, output_len=20)
    # one request: it reaches the engine after the front end's cost, 3,105 us + 21.1 ns x 1,000 tokens = 3.1261 ms
    one = bench_result(BenchSpec(**base, num_prompts=1)).rows[0]
    assert one["mean_ttft_frontend_ms"] == pytest.approx(
        (cal.frontend_us_per_request * 1e-3 + cal.frontend_ns_per_input_token * 1000 * 1e-6), rel=1e-12)
    assert one["mean_ttft_frontend_ms"] == pytest.approx(3.1261, rel=1e-3)
    for extra in ({"num_prompts": 200}, {"num_prompts": 60, "max_concurrency": 4}, {"num_prompts": 60, "dp": 2},
                  {"num_prompts": 60, "engine": "sglang"}, {"num_prompts": 60, "engine": "trtllm"},
                  {"num_prompts": 60, "request_rate": 5.0}):
        row = bench_result(BenchSpec(**base, **extra)).rows[0]
        assert row["mean_ttft_frontend_ms"] + row["mean_ttft_engine_ms"] == pytest.approx(row["mean_ttft_ms"],
                                                                                          rel=1e-9), extra
        assert row["mean_ttft_frontend_ms"] > 0 and row["mean_ttft_engine_ms"] > 0, extra
    # a burst queues at the serial front end: the 200th request waits for the 199 before it
    burst = bench_result(BenchSpec(**base, num_prompts=200)).rows[0]
    assert burst["mean_ttft_frontend_ms"] > 50 * one["mean_ttft_frontend_ms"]
