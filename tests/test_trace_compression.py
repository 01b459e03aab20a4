"""Compressed traces (issue 22): gzip and Zstandard streamed in every format, told by their magic bytes; the
zstd extra imported only when a .zst file is read, and named when it is missing. Real excerpts from
tests/fixtures/traces (sources and licences in its README.md)."""

from __future__ import annotations

import gzip
import json
import sys

import pytest
from conftest import assert_bad_input, run_cli
from test_trace_formats import AZURE, KVT, MOONCAKE_HEAD, full_block_copy

from kvcalc.out.errors import InputError
from kvcalc.trace.analysis import analyze_trace
from kvcalc.trace.formats import detect_format, read_requests
from kvcalc.trace.compression import ZSTD_FEED_BYTES

zstandard = pytest.importorskip("zstandard")

BURST_ROWS = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
              "5,ChatGPT,472,18,490,Conversation log\n45,ChatGPT,1087,230,1317,Conversation log\n"
              "118,GPT-4,417,276,693,Conversation log\n")  # BurstGPT's schema; see fixtures/traces/README.md


def plain_traces(tmp_path):
    """(name, plain file, its format) of every format kvcalc reads."""
    burst = tmp_path / "burst.csv"
    burst.write_text(BURST_ROWS)
    full, _ = full_block_copy(tmp_path)
    return [("mooncake", MOONCAKE_HEAD, "jsonl"), ("full-blocks", full, "jsonl"),
            ("kv-cache-tester", KVT[1], "kv-cache-tester"), ("azure-csv", AZURE, "azure-csv"),
            ("burstgpt-csv", burst, "burstgpt-csv")]


def zstd_bytes(data: bytes, frames: int = 1) -> bytes:
    """``data`` compressed as ``frames`` Zstandard frames one after another (as ``cat a.zst b.zst`` makes)."""
    c = zstandard.ZstdCompressor(level=3)
    step = -(-len(data) // frames)
    return b"".join(c.compress(data[i:i + step]) for i in range(0, len(data), step))


def compressed_copies(tmp_path, name, plain):
    """The same trace gzip- and zstd-compressed, with and without a telling suffix (the magic bytes decide)."""
    data = plain.read_bytes()
    out = {}
    for kind, blob in (("gz", gzip.compress(data)), ("zst", zstd_bytes(data)), ("zst3", zstd_bytes(data, 3))):
        for suffix in (f".{kind[:3]}", ".trace"):
            path = tmp_path / f"{name}-{kind}{suffix}"
            path.write_bytes(blob)
            out[path.name] = path
    return out


def test_every_format_reads_the_same_from_gzip_and_zstd(tmp_path):
    for name, plain, kind in plain_traces(tmp_path):
        expected = list(read_requests(plain))
        assert len(expected) > 2
        for label, path in compressed_copies(tmp_path, name, plain).items():
            assert detect_format(path) == kind, label
            assert list(read_requests(path)) == expected, label  # arrivals, lengths, ids, line numbers
        if kind not in ("azure-csv", "burstgpt-csv"):  # and every replay of the hash formats is the same
            b = 64 if kind == "kv-cache-tester" else 512
            want = analyze_trace(plain, [200 * b, None], b, trace_format="auto")
            for label, path in compressed_copies(tmp_path, name, plain).items():
                assert analyze_trace(path, [200 * b, None], b, trace_format="auto") == want, label


def test_zstd_cli_equals_plain(tmp_path):
    path = tmp_path / "head.jsonl.zst"
    path.write_bytes(zstd_bytes(MOONCAKE_HEAD.read_bytes(), 2))
    runs = [run_cli("trace", str(p), "--capacity", "1m,inf", "--format", "json") for p in (MOONCAKE_HEAD, path)]
    assert all(r.code == 0 for r in runs)
    assert [json.loads(r.out)["results"] for r in runs][0] == json.loads(runs[1].out)["results"]


def test_a_trace_bigger_than_one_feed_streams_in_pieces(tmp_path):
    # the excerpt compresses to several ZSTD_FEED_BYTES feeds: the reader joins output across feeds and frames
    blob = zstd_bytes(MOONCAKE_HEAD.read_bytes(), 4)
    assert len(blob) > 3 * ZSTD_FEED_BYTES
    path = tmp_path / "head.zst"
    path.write_bytes(blob)
    assert list(read_requests(path)) == list(read_requests(MOONCAKE_HEAD))


def test_truncated_or_mislabelled_compressed_files_are_refused(tmp_path):
    blob = zstd_bytes(MOONCAKE_HEAD.read_bytes())
    for cut in (100, len(blob) // 2, len(blob) - 1):  # zstandard's own stream reader would end silently here
        path = tmp_path / "cut.jsonl.zst"
        path.write_bytes(blob[:cut])
        assert_bad_input(run_cli("trace", str(path)), "cut.jsonl.zst", "truncated")
    bad = tmp_path / "bad.zst"
    bad.write_bytes(blob[:4] + b"\x00" * 64)  # the magic, then garbage
    assert_bad_input(run_cli("trace", str(bad)), "bad.zst", "zstd")
    for suffix, kind in ((".gz", "gzip"), (".zst", "zstd")):  # a name that promises what the bytes are not
        path = tmp_path / f"plain.jsonl{suffix}"
        path.write_bytes(MOONCAKE_HEAD.read_bytes())
        assert_bad_input(run_cli("trace", str(path)), f"plain.jsonl{suffix}", f"not {kind} data")
    empty = tmp_path / "empty.jsonl.zst"
    empty.write_bytes(b"")
    assert_bad_input(run_cli("trace", str(empty)), "empty.jsonl.zst", "no requests")
    gz = tmp_path / "cut.csv.gz"
    gz.write_bytes(gzip.compress(AZURE.read_bytes())[:-20])
    with pytest.raises(InputError, match="cut.csv.gz"):
        list(read_requests(gz))


def test_without_the_zstd_extra_a_zst_trace_names_it(tmp_path, monkeypatch):
    path = tmp_path / "head.jsonl.zst"
    path.write_bytes(zstd_bytes(MOONCAKE_HEAD.read_bytes()))
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import zstandard now raises ImportError
    with pytest.raises(InputError, match=r"head.jsonl.zst: .*zstd extra: pip install 'kvcalc\[zstd\]'"):
        list(read_requests(path))
    assert list(read_requests(MOONCAKE_HEAD))  # plain and gzip traces never need it


def test_zstandard_is_not_imported_for_plain_traces():
    import subprocess

    code = ("import sys; from kvcalc.trace.formats import read_requests; "
            f"list(read_requests({str(MOONCAKE_HEAD)!r})); print('zstandard' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_a_zstd_bomb_costs_one_line_bound(tmp_path, monkeypatch):
    import kvcalc.trace.reader as reader

    monkeypatch.setattr(reader, "MAX_LINE_BYTES", 1_000_000)
    path = tmp_path / "bomb.jsonl.zst"  # 64 MB of one endless line in a few kilobytes
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(b"[" * 64_000_000))
    assert path.stat().st_size < 100_000
    assert_bad_input(run_cli("trace", str(path)), "bomb.jsonl.zst:1:", "longer than 1,000,000 bytes")


def test_tiers_and_compare_read_zstd(tmp_path):
    path = tmp_path / "k.json.zst"
    path.write_bytes(zstd_bytes(KVT[1].read_bytes(), 2))
    for args in (("trace", "--tiers", "hbm,dram", "--tier-capacity", "hbm=50k,dram=150k"),
                 ("compare", "--capacity", "100k"), ("compare", "--tiers", "hbm", "--tier-capacity", "hbm=50k")):
        runs = []
        for p in (KVT[1], path):
            argv = [args[0], str(p), *args[1:]] if args[0] == "trace" else [args[0], "--trace", str(p), *args[1:]]
            r = run_cli(*argv, "--format", "json")
            assert r.code == 0, r.err
            runs.append([{k: v for k, v in row.items() if k != "workload"}  # the file's name
                         for row in json.loads(r.out)["results"]])
        assert runs[0] == runs[1], args
