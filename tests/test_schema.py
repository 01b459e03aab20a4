"""Presets: shipped files built without pydantic equal their strict validation; user files are validated."""

import subprocess
import sys

import pytest

from kvcalc.model import catalog
from kvcalc.out.errors import InputError


@pytest.mark.parametrize("kind", catalog.KINDS)
def test_fast_build_equals_strict_validation(kind):
    for name in catalog.names(kind):
        path = catalog.preset_path(kind, name)
        data = catalog.read_toml(path)
        from kvcalc.model.schema import build

        assert build(catalog._schema_for(kind), data) == catalog.validate(kind, data, path), name


def test_core_path_does_not_import_pydantic():
    # kvcalc's own work for `capacity --format json` (presets, model, rendering) must not load pydantic's
    # model machinery: it costs ~150 ms per process, and the CLI runs in CI loops
    code = ("import sys\n"
            "from kvcalc.model import catalog\nfrom kvcalc.out import render\n"
            "from kvcalc.memory.capacity import CapacityInputs, capacity_result\n"
            "m = [(n, catalog.load_model(n)) for n in ('deepseek-v4-flash', 'llama-3-70b')]\n"
            "hw = catalog.load_hardware('h100-sxm')\n"
            "r = capacity_result(m, 'h100-sxm', hw, 'pcie-gen5-x16', catalog.load_link('pcie-gen5-x16'), "
            "CapacityInputs())\n"
            "render.to_json(r, [])\n"
            "print(sorted(k for k in sys.modules if k.startswith(('pydantic', 'numpy'))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]", out


def test_user_file_is_validated_strictly(tmp_path):
    f = tmp_path / "link.toml"
    f.write_text('schema_version = 1\nsource = "x"\ndisplay_name = "x"\nbandwidth_gb_per_s = 10\n'
                 'latency_us = 5\nmeasured_bandwidth_gb_per_s = 20\n')
    with pytest.raises(InputError, match="link.toml: measured_bandwidth_gb_per_s exceeds"):
        catalog.load_link(str(f))
    f.write_text('schema_version = 1\nsource = "x"\ndisplay_name = "x"\nbandwidth_gb_per_s = 10\n')
    with pytest.raises(InputError, match="field 'latency_us': missing"):
        catalog.load_link(str(f))


def test_schema_has_descriptions():
    s = catalog.json_schema("models")
    assert "total parameters" in s["properties"]["params_total_b"]["description"]
    assert s["additionalProperties"] is False
