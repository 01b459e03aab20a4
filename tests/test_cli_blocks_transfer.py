"""``kvcalc blocks`` and ``kvcalc transfer`` through the CLI: JSON fields, exit codes, user link files."""

import json
import subprocess
import sys

import pytest
from conftest import run_cli

from kvcalc.model import catalog
from kvcalc.out import render
from kvcalc.out.units import us_to_s
from kvcalc.serve.transfer import TransferInputs, transfer_result


def run(*args):
    """Run ``kvcalc ARGS`` in-process -> (exit code, stdout, stderr)."""
    r = run_cli(*args)
    return r.code, r.out, r.err


def run_json(*args):
    code, out, err = run(*args, "--format", "json")
    assert code == 0, err
    return json.loads(out)


def assert_bad_input(code, err, *words):
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err
    for w in words:
        assert w in err


def test_blocks_json_fields_and_v4_figures():
    env = run_json("blocks", "-m", "deepseek-v4-flash")
    assert env["command"] == "blocks"
    rows = {r["block_tokens"]: r for r in env["results"]}
    assert sorted(rows) == [16, 32, 64, 128, 256, 512, 1024]
    for key in ("model", "block_tokens", "block_bytes", "metadata_overhead", "valid"):
        assert key in rows[256]
    # 912,192 B padded block (see test_blocks), 4 / 912,192 overhead; 16 tokens flagged invalid
    assert rows[256]["block_bytes"] == 912_192
    assert rows[256]["metadata_overhead"] == pytest.approx(4 / 912_192)
    assert rows[16]["valid"] is False and rows[256]["valid"] is True
    assert env["tables"]["recommended"][0]["recommended_block_tokens"] == 128


def test_blocks_article_entry_option():
    # the article's 16 B entry on its own 6.3 B/token: 16-token block 100.8 B -> 15.9% overhead
    env = run_json("blocks", "-m", "deepseek-v4-flash-article", "-b", "16,256", "--entry-bytes", "16")
    r16 = env["results"][0]
    assert r16["block_bytes"] == pytest.approx(100.8)
    assert r16["metadata_overhead"] == pytest.approx(16 / 100.8)


def test_blocks_invalid_size_is_flagged_not_used():
    code, out, err = run("blocks", "-m", "deepseek-v4-flash", "-b", "100", "--format", "json")
    assert code == 0
    env = json.loads(out)
    assert env["results"][0]["valid"] is False and env["results"][0]["recommended"] is False
    assert env["tables"]["recommended"][0]["recommended_block_tokens"] is None
    assert any("100-token blocks are not valid" in n for n in env["notes"])


@pytest.mark.parametrize("args,word", [
    (("blocks", "-b", "0"), "--block-tokens"),
    (("blocks", "-b", "-16"), "--block-tokens"),
    (("blocks", "-b", "16,,x"), "--block-tokens"),
    (("blocks", "--entry-bytes", "0"), "--entry-bytes"),
    (("blocks", "--entry-bytes", "-4"), "--entry-bytes"),
    (("blocks", "--max-overhead", "0"), "--max-overhead"),
    (("blocks", "--tables", "0"), "--tables"),
    (("blocks", "--context", "0"), "--context"),
    (("blocks", "-m", "no-such-model"), "no-such-model"),
    (("transfer", "--block-tokens", "0"), "--block-tokens"),
    (("transfer", "--block-tokens", "-256"), "--block-tokens"),
    (("transfer", "--requests", "0"), "--requests"),
    (("transfer", "--context", "0"), "--context"),
    (("transfer", "--bandwidth", "fast"), "--bandwidth"),
    (("transfer", "--overlap-us", "-1"), "--overlap-us"),
    (("transfer", "--mfu", "2"), "--mfu"),
    (("transfer", "--link", "no-such-link"), "no-such-link"),
    (("transfer", "--tiers", "--dram", "1000"), "--dram"),
])
def test_bad_input_exits_2_with_one_line(args, word):
    code, out, err = run(*args)
    assert_bad_input(code, err, word)


def test_transfer_json_fields_and_101_byte_block():
    # the article's 16-token block at 6.3 B/token = 100.8 B: 6e-6 + 100.8 / 63e9 = 6.0016e-6 s, 99.97% latency
    env = run_json("transfer", "-m", "deepseek-v4-flash-article", "-b", "16", "--link", "pcie-gen5-x16",
                   "--bandwidth", "theoretical")
    block = env["results"][0]
    for key in ("link", "payload", "bytes", "time_s", "latency_share"):
        assert key in block
    assert block["payload"] == "block" and block["link"] == "pcie-gen5-x16"
    assert block["time_s"] == pytest.approx(6.0016e-6, rel=1e-5)
    assert block["latency_share"] == pytest.approx(0.99973, rel=1e-4)
    assert block["bound"] == "latency"


def test_transfer_defaults_links_and_payloads():
    env = run_json("transfer")
    assert env["inputs"]["model"] == "deepseek-v4-flash" and env["inputs"]["block_tokens"] == 256
    links = ["pcie-gen5-x16", "nvlink4", "ib-ndr400", "eth-100g", "eth-10g", "nvme-gen5"]
    assert [(r["payload"], r["link"]) for r in env["results"]] == [
        (p, ln) for p in ("block", "request", "batch") for ln in links]
    for r in env["results"]:
        assert r["time_coalesced_s"] <= r["time_separate_s"]


def test_transfer_invalid_block_is_flagged():
    code, out, err = run("transfer", "-b", "16", "--format", "json")
    assert code == 0
    env = json.loads(out)
    assert env["inputs"]["block_valid"] is False
    assert any("not valid" in n for n in env["notes"])


def test_cli_json_equals_python_api():
    env = run_json("transfer", "-m", "llama-3-70b", "-c", "8k", "-n", "10", "-b", "16", "--link", "pcie-gen5-x16",
                   "--link", "nvlink4", "--overlap-us", "50", "--tiers")
    links = [(n, catalog.load_link(n)) for n in ("pcie-gen5-x16", "nvlink4")]
    hw = catalog.load_hardware("h100-sxm")
    pcie = catalog.load_link("pcie-gen5-x16")
    res = transfer_result("llama-3-70b", catalog.load_model("llama-3-70b"), links, "h100-sxm", hw,
                          TransferInputs(context_tokens=8192, requests=10, block_tokens=16, overlap_s=us_to_s(50)),
                          tiers=[("dram", 1e12, "pcie-gen5-x16", pcie),
                                 ("ssd", 8e12, "nvme-gen5", catalog.load_link("nvme-gen5"))])
    api = render.envelope(res, [])
    assert env["results"] == api["results"]
    assert env["tables"] == api["tables"]
    assert env["inputs"] == api["inputs"]


def test_user_link_file_by_path(tmp_path):
    f = tmp_path / "my-link.toml"
    f.write_text('schema_version = 1\nsource = "test"\ndisplay_name = "Mine"\n'
                 "bandwidth_gb_per_s = 10.0\nlatency_us = 100.0\n")
    env = run_json("transfer", "-m", "llama-3-70b", "-b", "16", "--link", str(f))
    block = env["results"][0]
    # 100e-6 + 5,242,880 / 10e9 = 100e-6 + 524.288e-6 = 624.288e-6 s
    assert block["link"] == "my-link"
    assert block["time_s"] == pytest.approx(624.288e-6)


def test_bad_user_link_file(tmp_path):
    f = tmp_path / "bad-link.toml"
    f.write_text('schema_version = 1\nsource = "test"\ndisplay_name = "Bad"\nbandwidth_gb_per_s = 10.0\n')
    code, out, err = run("transfer", "--link", str(f))
    assert_bad_input(code, err, "bad-link.toml", "latency_us")


def test_check_fails_exit_1():
    # a 256-token V4 block over NVLink4 is 54% latency: the check fails on that row
    code, out, err = run("transfer", "--link", "nvlink4", "--check", "latency_share < 0.5", "--format", "json")
    assert code == 1
    assert "check failed" in err and "block" in err
    code, _, _ = run("blocks", "-m", "llama-3-70b", "--check", "metadata_overhead <= 0.0001")
    assert code == 0


def test_explain_and_other_formats():
    code, out, err = run("blocks", "-m", "deepseek-v4-flash", "-b", "256", "--explain")
    assert code == 0 and "ceil(64 x 584 B / 576) x 576 = 37,440" in out and "912,192 B" in out
    code, out, err = run("transfer", "-m", "llama-3-70b", "--link", "pcie-gen5-x16", "-b", "16", "--bandwidth",
                         "theoretical", "--explain")
    assert code == 0 and "6 us + 5.243 MB / 63 GB/s = 89.22 us" in out
    # the README's worked example: the article's 100.8 B block is 99.97% latency
    code, out, err = run("transfer", "-m", "deepseek-v4-flash-article", "-b", "16", "--link", "pcie-gen5-x16",
                         "--bandwidth", "theoretical", "--explain")
    assert code == 0 and "6 us + 100.8 B / 63 GB/s = 6.002 us" in out
    assert "256 x 6 us + bytes / bandwidth = 1.536 ms" in out
    code, out, err = run("transfer", "--format", "csv")
    assert code == 0 and out.splitlines()[0].startswith("model,payload,tokens,bytes,link")
    code, out, err = run("blocks", "--format", "markdown")
    assert code == 0 and out.startswith("### ")


@pytest.mark.parametrize("cmd", ["blocks", "transfer"])
def test_help_has_examples(cmd):
    code, out, err = run(cmd, "--help")
    assert code == 0 and "Examples" in out and f"kvcalc {cmd}" in out


def test_subprocess_bad_input_no_traceback():
    p = subprocess.run([sys.executable, "-m", "kvcalc", "blocks", "--block-tokens", "0"],
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = subprocess.run([sys.executable, "-m", "kvcalc", "transfer", "-m", "llama-3-70b", "--link", "pcie-gen5-x16",
                        "--format", "json"], capture_output=True, text=True)
    assert p.returncode == 0
    assert json.loads(p.stdout)["results"][0]["bytes"] == 256 * 327_680   # default 256-token block: 83,886,080 B
