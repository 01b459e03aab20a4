"""The public Python API (``import kvcalc``): lazy, documented, and the very functions the CLI calls."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import kvcalc


def test_import_kvcalc_loads_no_layer():
    # `import kvcalc` must cost nothing beyond the version: names load on first use
    code = ("import sys, kvcalc\n"
            "print(sorted(m for m in sys.modules if m.startswith('kvcalc.') and m != 'kvcalc.out.version'))\n"
            "print(sorted(m for m in ('numpy', 'pydantic', 'rich', 'typer') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split("\n")[:2] == ["['kvcalc.out']", "[]"]


def test_every_api_name_resolves_and_is_listed():
    for name in kvcalc.__all__:
        assert getattr(kvcalc, name) is not None, name
    assert set(kvcalc.__all__) <= set(dir(kvcalc))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        kvcalc.nope  # noqa: B018


def test_api_names_are_the_modules_functions():
    from kvcalc.memory.capacity import capacity_result
    from kvcalc.serve.cost import compare_result
    from kvcalc.serve.scenario import resolve

    assert kvcalc.capacity_result is capacity_result
    assert kvcalc.compare_result is compare_result
    assert kvcalc.resolve_scenario is resolve


def test_kv_profile_of_v4_flash_by_hand():
    # V4 Flash at 4,096 tokens: 17,608,704 B of entries + 12,206,080 B of compressor state = 29,814,784 B
    # (the foundation's reference values; tests/test_kv.py derives them layer group by layer group)
    p = kvcalc.kv_profile("v4-flash", kvcalc.load_model("deepseek-v4-flash"), 4096)
    assert p.kv_bytes_per_request_excl_state == 17_608_704
    assert p.kv_bytes_per_request == 17_608_704 + 12_206_080
    # Llama-3-70B: 2 x 8 KV heads x 128 x 2 B x 80 layers = 327,680 B per token
    llama = kvcalc.kv_profile("l", kvcalc.load_model("llama-3-70b"), 1000, kvcalc.KvOptions())
    assert llama.kv_bytes_per_token == 327_680


def test_api_json_equals_the_cli_json():
    # the article's case: 320,000 vs 124,000 prefill tokens (A vs C), the same envelope as `kvcalc compare`
    api = json.loads(kvcalc.to_json(kvcalc.compare_result(kvcalc.resolve_scenario("article"))))
    cli = subprocess.run([sys.executable, "-m", "kvcalc", "compare", "--format", "json"],
                         capture_output=True, text=True, check=True).stdout
    assert api == json.loads(cli)
    assert [r["prefill_tokens"] for r in api["results"]] == [320_000, 124_000]


def test_transfer_time_and_bad_input():
    # 6 us + 100.8 B / 63 GB/s = 6.0016 us (PCIe Gen5, the README's worked example)
    link = kvcalc.load_link("pcie-gen5-x16")
    assert kvcalc.transfer_time_s(100.8, link.latency_s, link.bandwidth_bytes_per_s("theoretical")) == \
        pytest.approx(6.0016e-6, rel=1e-5)
    with pytest.raises(kvcalc.InputError, match="no-such-model"):
        kvcalc.load_model("no-such-model")


def test_import_api_is_the_clis():
    from kvcalc.model.config_import import import_config
    from kvcalc.model.config_report import import_result

    assert kvcalc.import_config is import_config and kvcalc.import_result is import_result
