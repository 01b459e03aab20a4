"""Honest labels and limits (issue 19, items 4 and 6): strategy labels people read, a config.json's model label
from its Hugging Face name, tensor-parallel sizes the engines refuse, and a `fits` column with the verdict in the
table's title."""

import json
import shutil
from pathlib import Path

import pytest
from conftest import assert_bad_input, run_cli
from hypothesis import given
from hypothesis import strategies as st

CONFIGS = Path(__file__).parent / "fixtures" / "configs"
SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"  # a hub snapshot folder is named by a 40-character hash


@pytest.fixture(autouse=True)
def fixed_width(monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")


def model_label(ref: str) -> str:
    r = run_cli("kv", ref, "-c", "4k", "--format", "json")
    assert r.code == 0, r.err
    return r.json()["results"][0]["model"]


# --- a config.json's label ----------------------------------------------------------------------------------

def test_label_from_name_or_path():
    # tests/fixtures/configs/llama-2-7b/config.json has "_name_or_path": "meta-llama/Llama-2-7b-hf"
    assert model_label(str(CONFIGS / "llama-2-7b")) == "meta-llama/Llama-2-7b-hf"
    assert model_label(str(CONFIGS / "llama-2-7b" / "config.json")) == "meta-llama/Llama-2-7b-hf"


def test_label_from_a_hub_cache_folder_not_its_snapshot_hash(tmp_path):
    snap = tmp_path / "hub" / "models--Qwen--Qwen3-8B" / "snapshots" / SNAPSHOT
    snap.mkdir(parents=True)
    shutil.copy(CONFIGS / "qwen3-8b" / "config.json", snap)  # Qwen/Qwen3-8B's config: no _name_or_path
    assert model_label(str(snap)) == "Qwen/Qwen3-8B"
    assert model_label(str(snap / "config.json")) == "Qwen/Qwen3-8B"
    # the same KV as the plain folder: 36 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 147,456 B/token
    row = run_cli("kv", str(snap), "-c", "4k", "--format", "json").json()["results"][0]
    assert row["kv_bytes_per_request"] == 147_456 * 4096


def test_label_else_the_folder(tmp_path):
    assert model_label(str(CONFIGS / "qwen3-8b")) == "qwen3-8b"


@pytest.mark.parametrize("name_or_path,label", [
    ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),
    ("/data/models/Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),  # a local path: its last two parts
    (f"/root/.cache/huggingface/hub/models--Qwen--Qwen3-8B/snapshots/{SNAPSHOT}", "Qwen/Qwen3-8B"),
    ("gpt2", "gpt2"),
    ("C:\\models\\Qwen\\Qwen3-8B", "Qwen/Qwen3-8B"),  # written on Windows
    ("", "mine"), (None, "mine"), (7, "mine"), (".", "mine"), ("./", "mine"),  # empty or not text: the folder
])
def test_config_label(name_or_path, label, tmp_path):
    from kvcalc.model.config_import import config_label

    folder = tmp_path / "mine"
    folder.mkdir()
    assert config_label(name_or_path, folder / "config.json") == label


def test_import_names_the_preset_the_same_way(tmp_path):
    out = tmp_path / "llama.toml"
    assert run_cli("import", str(CONFIGS / "llama-2-7b"), "--output", str(out)).code == 0
    assert 'display_name = "meta-llama/Llama-2-7b-hf"' in out.read_text()


# --- tensor-parallel sizes the engines refuse ---------------------------------------------------------------

def engine_accepts(heads: int, kv_heads: int, tp: int) -> bool:
    """vLLM/SGLang's QKVParallelLinear, transcribed: divide() asserts that the numerator divides evenly."""
    def divide(a, b):
        assert a % b == 0
        return a // b

    try:
        divide(heads, tp)
        if tp >= kv_heads:
            divide(tp, kv_heads)   # num_kv_head_replicas
        else:
            divide(kv_heads, tp)   # num_kv_heads per rank
    except AssertionError:
        return False
    return True


@given(heads=st.integers(1, 256), kv_div=st.integers(1, 16), tp=st.integers(1, 64))
def test_check_tp_is_the_engines_rule(heads, kv_div, tp):
    from kvcalc.memory.engine_common import check_tp
    from kvcalc.model import attention as att
    from kvcalc.model import catalog
    from kvcalc.out.errors import InputError

    kv = max(1, heads // kv_div)
    model = catalog.load_model("llama-3-8b")
    group = att.resolve_groups(model, att.KvOptions())[0]
    from dataclasses import replace

    g = replace(group, q_heads=heads, kv_heads=kv)
    try:
        check_tp(model, [g], tp, "vllm")
        refused = False
    except InputError as e:
        refused = True
        assert e.message.startswith(f"--gpus {tp}: vLLM refuses")
    assert refused != engine_accepts(heads, kv, tp)


@pytest.mark.parametrize("engine,who", [("vllm", "vLLM"), ("sglang", "SGLang")])
def test_capacity_refuses_tp_the_engine_refuses(engine, who):
    # Llama-3-70B: 64 attention heads, 8 KV heads (its config.json)
    assert_bad_input(run_cli("capacity", "-m", "llama-3-70b", "--gpus", "3", "--engine", engine),
                     "--gpus 3", who, "64 attention heads")
    # Qwen2.5-7B: 28 heads (7 divides them), 4 KV heads: neither 4 % 7 nor 7 % 4 is 0
    assert_bad_input(run_cli("capacity", "-m", "qwen2.5-7b", "--gpus", "7", "--engine", engine),
                     "--gpus 7", "4 KV heads")
    # 16 ranks: 64 / 16 = 4 heads each, the 8 KV heads replicated twice: accepted
    assert run_cli("capacity", "-m", "llama-3-70b", "--gpus", "16", "--engine", engine).code == 0


def test_ideal_budget_and_mla_latents_are_not_engine_checked():
    assert run_cli("capacity", "-m", "llama-3-70b", "--gpus", "3").code == 0  # kvcalc's ideal: any split
    # DeepSeek V3: one latent (replicated), but its 128 query heads still must divide
    assert_bad_input(run_cli("capacity", "-m", "deepseek-v3", "--gpus", "3", "--engine", "vllm"), "128 attention heads")
    assert run_cli("capacity", "-m", "deepseek-v3", "--gpus", "8", "--engine", "vllm").code == 0


def test_cost_and_compare_refuse_it_too():
    for cmd in ("cost", "compare"):
        assert_bad_input(run_cli(cmd, "-m", "llama-3-70b", "--hardware", "h100-sxm", "--gpus", "6", "--engine",
                                 "vllm"), "--gpus 6", "vLLM")


# --- strategy labels ----------------------------------------------------------------------------------------

def test_strategy_labels_shown_json_and_csv_stable():
    table = run_cli("compare").out
    assert "│ A lru (no prefix reuse) │" in table and "│ C prefix-tree           │" in table
    md = run_cli("compare", "--format", "markdown").out
    assert "| A lru (no prefix reuse) |" in md and "| C prefix-tree |" in md
    env = run_cli("compare", "--format", "json").json()
    assert [r["strategy"] for r in env["results"]] == ["lru", "prefix-tree"]
    assert run_cli("compare", "--format", "csv").out.splitlines()[1].startswith("lru,")
    assert "A lru (no prefix reuse) on" in run_cli("cost", "--strategy", "lru").out


def test_each_help_says_which_lru_is_which():
    for cmd in ("cost", "compare"):
        text = " ".join(run_cli(cmd, "--help").out.split())
        assert "A lru (no prefix reuse)" in text and "C prefix-tree" in text and "not a prefix cache" in text
    trace = " ".join(run_cli("trace", "--help").out.split())
    assert "LRU prefix cache" in trace and "A lru (no prefix reuse)" in trace


# --- fits ---------------------------------------------------------------------------------------------------

def test_fits_column_and_verdict_in_the_title():
    out = run_cli("compare").out
    fits = out.splitlines()
    head = next(i for i, line in enumerate(fits) if line.startswith("┃"))  # after the title, however it wraps
    assert "fits" in fits[head] and "does not fit" not in out.split("┏")[0]  # the article's 2 MB fits 8 x H100
    assert all(" yes │" in line for line in fits[head + 2:head + 4])
    args = ("compare", "--model", "llama-3-70b", "--hardware", "h100-sxm", "--gpus", "2", "--requests", "200",
            "--context", "32k")
    out = run_cli(*args).out
    title = out.split("┏")[0]  # the title, however it wraps
    assert "KV does not fit for A lru (no prefix reuse) and C prefix-tree" in " ".join(title.split())
    rows = run_cli(*args, "--format", "json").json()["results"]
    # budget per GPU: the 79.19 GiB CUDA reports (85,029,615,042.56 B) x 0.9 = 76,526,653,538.3 B
    # - 141,107,412,992 B / 2 = 5,972,947,042.304 B; KV per GPU: 200 x 32,768 tokens x
    # 163,840 B (80 layers x 4 of 8 KV heads x 128 x 2 x 2 B) = 1,073,741,824,000 B: far over
    assert rows[0]["kv_budget_bytes_per_gpu"] == pytest.approx(5_972_947_042.304)
    assert rows[0]["kv_stored_bytes_per_gpu"] == 200 * 32_768 * 163_840
    assert [r["kv_fits"] for r in rows] == [False, False]
    one = run_cli("cost", *args[1:], "--strategy", "prefix-tree").out
    assert "KV does not fit for C prefix-tree" in " ".join(one.split("┏")[0].split())
