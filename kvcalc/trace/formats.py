"""Trace formats beyond Mooncake JSONL, detection by content, and the one entry point :func:`open_trace`.

Formats (``--trace-format``; ``auto`` tells them apart by content):

- ``mooncake``: JSONL, one ``{timestamp [ms], input_length, output_length, hash_ids}`` per line,
  ``ceil(input_length / B)`` ids (the partial last block has an id and can be reused) (:mod:`kvcalc.trace.reader`).
- ``full-blocks``: the same lines with ``floor(input_length / B)`` ids: only full blocks are hashed, so the
  partial last block is always a miss. ``auto`` reads a JSONL trace under the rule its first line with a partial
  block follows, and holds every later line to it.
- ``kv-cache-tester``: one JSON document per conversation, as WEKA's kv-cache-tester ships its Claude Code
  traces (``traces/trace_NNNN.json``): ``{"id", "block_size", "requests": [{"t" [s], "in", "out",
  "hash_ids", ...}]}``, ``floor(in / block_size)`` ids per request; the file's ``block_size`` is the block size.
  Read whole (at most :data:`MAX_DOCUMENT_BYTES`); errors name ``requests[i]``.
- ``azure-csv``: the Azure LLM inference trace (``TIMESTAMP,ContextTokens,GeneratedTokens``, timestamps as
  ``2023-11-16 18:15:46.6805900``); ``burstgpt-csv``: BurstGPT (``Timestamp`` [s], ``Request tokens``,
  ``Response tokens``, other columns ignored). Lengths only: arrivals and lengths for the serving model (no hash
  ids: there is nothing to replay through a cache). Timestamps become ms after the first row. A row of 0 input
  or 0 output tokens is a bad row (named by its line; left out with ``skip_bad``): BurstGPT logs a failed request
  so (17 of the first 400 rows of BurstGPT_1), and serving it as a 1-token request would invent one.

Every reader has the interface of :class:`~kvcalc.trace.reader.TraceReader` (``signed_batches``, ``batches``,
``records``, iteration as :class:`TraceRequest`, ``requests``, ``skipped_lines``, ``first_problem``), so every
engine reads every format. Compressed input, in every format: gzip (the standard library) and Zstandard (the
optional ``zstandard`` package, extra ``kvcalc[zstd]``), told by their magic bytes and streamed
(:func:`kvcalc.trace.reader.open_stream`). :func:`open_replay_trace` is the reader of every cache replay: it
refuses the lengths-only formats, which only ``kvcalc bench --trace`` reads (:mod:`kvcalc.trace.bench_input`).

This module computes; it never prints.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import NamedTuple

from kvcalc.out.errors import InputError
from kvcalc.trace.reader import (_INT64_MAX, _INT64_MIN, DEFAULT_BLOCK_TOKENS, MAX_IDS_PER_LINE, MAX_TIMESTAMP_MS,
                                 ReaderViews, TraceReader, TraceRequest, _short, check_block_tokens,
                                 open_stream)
from kvcalc.trace.compression import read_all

FORMATS = ("auto", "mooncake", "full-blocks", "kv-cache-tester", "azure-csv", "burstgpt-csv")
LENGTHS_ONLY = ("azure-csv", "burstgpt-csv")
SKIP_HINT = "; --skip-bad leaves such rows out"  # the end of a 0-token row's error (dropped in the --skip-bad note)
MAX_DOCUMENT_BYTES = 256_000_000  # a kv-cache-tester file is read whole: at most this many bytes [B]
BATCH_ROWS = 4096  # rows per batch of the non-JSONL readers
_SNIFF_BYTES = 1 << 16


class Record(NamedTuple):
    """One request as the engines read it (the fields of a Mooncake line)."""

    timestamp: float  # [ms]
    input_length: int  # [tokens]
    output_length: int  # [tokens]
    hash_ids: Sequence[int]


def detect_format(path: str | Path) -> str:
    """The format of ``path`` from its first bytes (see the module doc): a kv-cache-tester document, an Azure or
    BurstGPT CSV header, else ``jsonl`` (hash-id lines; its reader names a bad line with its number)."""
    path = Path(path)
    stream, raw = open_stream(path, watched=False)
    with raw, stream:
        try:
            head = stream.read(_SNIFF_BYTES)
        except (OSError, EOFError) as exc:
            raise InputError(f"{path}: cannot read ({exc})") from None
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not text:
        return "jsonl"  # empty: the reader says there are no requests
    if text.startswith(b"{"):
        first = text.split(b"\n", 1)[0]
        if b'"requests"' in text[:_SNIFF_BYTES] and b'"hash_ids"' not in first.split(b'"requests"')[0]:
            return "kv-cache-tester"
        return "jsonl"
    header = text.split(b"\n", 1)[0].decode("utf-8", "replace").strip().lower()
    columns = [c.strip() for c in header.split(",")]
    if "contexttokens" in columns and "generatedtokens" in columns:
        return "azure-csv"
    if "request tokens" in columns and "response tokens" in columns:
        return "burstgpt-csv"
    return "jsonl"  # anything else is read as JSONL, whose reader names the first bad line


class _RowReader(ReaderViews):
    """The reader interface over rows (line or item number, Record) a subclass yields from ``_rows``."""

    lengths_only = False

    def __init__(self, path: str | Path, block_tokens: int, skip_bad: bool = False,
                 progress: Callable[[int], None] | None = None):
        check_block_tokens(block_tokens)
        self.path = Path(path)
        self.block_tokens = block_tokens
        self.skip_bad = skip_bad
        self.progress = progress
        self.requests = self.skipped_lines = 0
        self.first_problem: str | None = None
        self._raw = None

    def _rows(self) -> Iterator[tuple[int, Record]]:
        raise NotImplementedError

    def signed_batches(self) -> Iterator[tuple[list, Sequence[int], bool]]:
        self.requests = self.skipped_lines = 0
        self.first_problem = None
        records, numbers = [], []
        for number, rec in self._rows():
            records.append(rec)
            numbers.append(number)
            if len(records) >= BATCH_ROWS:
                yield from self._deliver(records, numbers)
                records, numbers = [], []
        if records:
            yield from self._deliver(records, numbers)
        if self.requests == 0:
            skipped = f" ({self.skipped_lines} bad lines skipped)" if self.skipped_lines else ""
            raise InputError(f"{self.path}: no requests in the trace{skipped}")

    def _deliver(self, records: list, numbers: list):
        self.requests += len(records)
        yield records, numbers, any(h < 0 for r in records for h in r.hash_ids)
        if self.progress is not None and self._raw is not None and not self._raw.closed:
            self.progress(self._raw.tell())


def _whole_tokens(value, field: str) -> str | None:
    if type(value) is not int:
        return f"{field} must be an integer number of tokens, got {_short(value)} ({type(value).__name__})"
    if not 0 <= value <= _INT64_MAX:
        return f"{field} must be from 0 to 2^63 - 1 tokens, got {_short(value)}"
    return None


def kv_cache_tester_block_tokens(path: str | Path) -> int:
    """The ``block_size`` [tokens] a kv-cache-tester file states (InputError if missing or bad)."""
    doc = _document(Path(path))
    size = doc.get("block_size")
    if type(size) is not int or size < 1:
        raise InputError(f"{path}: block_size must be a whole number of tokens >= 1, got {_short(size)}")
    return size


def _document(path: Path) -> dict:
    """The kv-cache-tester JSON document of ``path`` (read whole, bounded)."""
    import json

    stream, raw = open_stream(path)
    with raw, stream:
        try:
            data = read_all(stream, MAX_DOCUMENT_BYTES + 1)
        except (OSError, EOFError) as exc:
            raise InputError(f"{path}: cannot read ({exc})") from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise InputError(f"{path}: a kv-cache-tester document of more than {MAX_DOCUMENT_BYTES:,} bytes")
    try:
        doc = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{path}: not UTF-8 text") from None
    except RecursionError:
        raise InputError(f"{path}: JSON nested too deeply") from None
    except ValueError as exc:
        raise InputError(f"{path}: malformed JSON ({str(exc).splitlines()[0][:80]})") from None
    if type(doc) is not dict or type(doc.get("requests")) is not list:
        raise InputError(f"{path}: a kv-cache-tester trace is a JSON object with a 'requests' list")
    return doc


class KvCacheTesterReader(_RowReader):
    """A kv-cache-tester conversation: ``requests[i]`` in order, ``floor(in / block_size)`` ids each; a
    sub-agent entry (``"type": "subagent"`` with its own ``requests``, times from its start) is replayed in its
    place, its requests one after the other at the entry's time plus their own (sub-agents spawned together run
    concurrently in kv-cache-tester; here one after another, in file order). The file's ids are one namespace
    (``hash_id_scope`` local means local to the file)."""

    kind = "kv-cache-tester"

    def _rows(self) -> Iterator[tuple[int, Record]]:
        doc = _document(self.path)
        size = doc.get("block_size", self.block_tokens)
        if size != self.block_tokens:
            raise InputError(f"{self.path}: block_size {_short(size)} in the trace, but {self.block_tokens}-token "
                             f"blocks asked (leave --block-tokens out to use the trace's)")
        number = 0
        for where, start_s, req in _flatten(doc["requests"], "requests", 0.0):
            number += 1
            problem = _request_problem(req, self.block_tokens, start_s)
            if problem:
                self._bad(where, problem, number)
                continue
            yield number, Record((start_s + req["t"]) * 1000.0, req["in"], req["out"], req["hash_ids"])


def _flatten(requests: list, where: str, start_s: float, depth: int = 0):
    """(location, start [s], request) of a request list, sub-agents' requests in their place."""
    for i, req in enumerate(requests):
        here = f"{where}[{i}]"
        if type(req) is dict and req.get("type") == "subagent" and type(req.get("requests")) is list and depth < 8:
            t = req.get("t")
            if type(t) not in (int, float) or not math.isfinite(t):
                yield here, start_s, req  # reported as a bad request (t)
                continue
            yield from _flatten(req["requests"], here + ".requests", start_s + t, depth + 1)
        else:
            yield here, start_s, req


def _request_problem(req, block_tokens: int, start_s: float = 0.0) -> str | None:
    """Why one kv-cache-tester request (of a conversation or sub-agent starting at ``start_s`` [s]) is bad, or
    None."""
    if type(req) is not dict:
        return f"expected a JSON object, got {type(req).__name__}"
    for field in ("t", "in", "out", "hash_ids"):
        if field not in req:
            return f"missing field {field!r}"
    t = req["t"]
    if type(t) not in (int, float) or not math.isfinite(t) or not abs(start_s + t) * 1000 <= MAX_TIMESTAMP_MS:
        return f"t must be a finite number of seconds, got {_short(t)}"
    for field in ("in", "out"):
        problem = _whole_tokens(req[field], field)
        if problem:
            return problem
    ids = req["hash_ids"]
    if type(ids) is not list:
        return f"hash_ids must be a list of integers, got {type(ids).__name__}"
    if len(ids) > MAX_IDS_PER_LINE:
        return f"hash_ids has {len(ids):,} ids, more than the {MAX_IDS_PER_LINE:,} a request may hold"
    if any(type(h) is not int or not _INT64_MIN <= h <= _INT64_MAX for h in ids):
        return "hash_ids must be integers that fit in a signed 64-bit integer"
    if len(ids) != req["in"] // block_tokens:
        return (f"hash_ids has {len(ids)} ids but in {req['in']} needs floor({req['in']}/{block_tokens}) = "
                f"{req['in'] // block_tokens} (full blocks only)")
    return None


class LengthsCsvReader(_RowReader):
    """Azure LLM inference or BurstGPT CSV: arrivals and lengths, no hash ids (see the module doc)."""

    lengths_only = True
    COLUMNS = {"azure-csv": ("timestamp", "contexttokens", "generatedtokens"),
               "burstgpt-csv": ("timestamp", "request tokens", "response tokens")}

    def __init__(self, path, block_tokens=DEFAULT_BLOCK_TOKENS, skip_bad=False, progress=None, kind="azure-csv"):
        super().__init__(path, block_tokens, skip_bad, progress)
        self.kind = kind

    def _rows(self) -> Iterator[tuple[int, Record]]:
        stream, raw = open_stream(self.path)
        self._raw = raw
        with raw, stream:
            text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
            rows = csv.reader(text)
            try:
                header = [c.strip().lower() for c in next(rows, [])]
                wanted = self.COLUMNS[self.kind]
                missing = [c for c in wanted if c not in header]
                if missing:
                    raise InputError(f"{self.path}:1: --trace-format {self.kind} needs a header with the columns {', '.join(wanted)} "
                                     f"(missing {', '.join(missing)})")
                at = [header.index(c) for c in wanted]
                first = None
                for row in rows:
                    line = rows.line_num
                    if not row or not "".join(row).strip():
                        continue
                    parsed = self._parse(row, at)
                    if isinstance(parsed, str):
                        self._bad(line, parsed)
                        continue
                    seconds, n_in, n_out = parsed
                    if first is None:
                        first = seconds
                    yield line, Record((seconds - first) * 1000.0, n_in, n_out, ())
            except UnicodeDecodeError:
                raise InputError(f"{self.path}:{rows.line_num + 1}: not UTF-8 text") from None
            except csv.Error as exc:
                raise InputError(f"{self.path}:{rows.line_num}: malformed CSV ({exc})") from None
            except (OSError, EOFError) as exc:
                raise InputError(f"{self.path}: cannot read ({exc})") from None

    def _parse(self, row: list[str], at: list[int]) -> tuple[float, int, int] | str:
        if len(row) <= max(at):
            return f"expected at least {max(at) + 1} columns, got {len(row)}"
        stamp, n_in, n_out = (row[i].strip() for i in at)
        if self.kind == "azure-csv":
            from datetime import datetime, timezone

            try:
                seconds = datetime.fromisoformat(stamp).replace(tzinfo=timezone.utc).timestamp()
            except ValueError:
                return f"TIMESTAMP must be a date and time like 2023-11-16 18:15:46.680590, got {_short(stamp)}"
        else:
            try:
                seconds = float(stamp)
            except ValueError:
                return f"Timestamp must be a number of seconds, got {_short(stamp)}"
            if not math.isfinite(seconds) or abs(seconds) * 1000 > MAX_TIMESTAMP_MS:
                return f"Timestamp must be a finite number of seconds, got {_short(stamp)}"
        lengths = []
        for value, name in ((n_in, "input"), (n_out, "output")):
            if not value.isdigit() or len(value) > 19 or int(value) > _INT64_MAX:
                return f"{name} tokens must be a whole number from 0 to 2^63 - 1, got {_short(value)}"
            lengths.append(int(value))
        if 0 in lengths:  # BurstGPT logs a failed request as 0 request and 0 response tokens: nothing was served
            return (f"a request of {lengths[0]} input and {lengths[1]} output tokens: a lengths-only row needs at "
                    f"least 1 of each (a failed request){SKIP_HINT}")
        return seconds, lengths[0], lengths[1]


def resolve_format(path: str | Path, trace_format: str = "auto") -> str:
    """The format to read ``path`` with: ``trace_format`` itself, or for ``auto`` the detected one (``jsonl``
    for hash-id lines, whose ids-per-request rule the first partial block decides)."""
    if trace_format == "jsonl":  # already resolved: hash-id lines, the rule decided by content
        return trace_format
    if trace_format not in FORMATS:
        import difflib

        close = difflib.get_close_matches(str(trace_format), FORMATS, n=1, cutoff=0.5)
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise InputError(f"--trace-format: {trace_format!r} is not one of {', '.join(FORMATS)}{hint}")
    return detect_format(path) if trace_format == "auto" else trace_format


def trace_block_tokens(path: str | Path, trace_format: str = "auto", given: int | None = None) -> int:
    """The block size [tokens] to read ``path`` with: ``given``, else the trace's own (kv-cache-tester's
    ``block_size``), else 512 (Mooncake's)."""
    if given is not None:
        return given
    if resolve_format(path, trace_format) == "kv-cache-tester":
        return kv_cache_tester_block_tokens(path)
    return DEFAULT_BLOCK_TOKENS


def open_trace(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False,
               trace_format: str = "mooncake", progress: Callable[[int], None] | None = None):
    """A streaming reader of ``path`` in ``trace_format`` (``auto``: detected by content; see the module doc).

    ``progress``: called with the bytes of the file read so far (compressed bytes for ``.gz``)."""
    kind = resolve_format(path, trace_format)
    if kind in ("mooncake", "full-blocks", "jsonl"):
        rule = {"mooncake": "ceil", "full-blocks": "floor", "jsonl": None}[kind]
        return TraceReader(path, block_tokens, skip_bad, rule, progress)
    if kind == "kv-cache-tester":
        return KvCacheTesterReader(path, block_tokens, skip_bad, progress)
    return LengthsCsvReader(path, block_tokens, skip_bad, progress, kind)


def open_replay_trace(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False,
                      trace_format: str = "mooncake", progress: Callable[[int], None] | None = None):
    """:func:`open_trace` for a cache replay: a lengths-only trace (no hash ids) is an InputError saying that
    the serving model (``kvcalc bench --trace``) reads it."""
    reader = open_trace(path, block_tokens, skip_bad, trace_format, progress)
    if reader.lengths_only:
        raise InputError(f"{path}: a lengths-only trace ({reader.kind}: arrivals and lengths, no hash ids): nothing "
                         f"to replay through a cache; the serving model reads it (kvcalc bench --trace)")
    return reader


def read_requests(path: str | Path, trace_format: str = "auto", block_tokens: int | None = None,
                  skip_bad: bool = False, progress: Callable[[int], None] | None = None) -> Iterator[TraceRequest]:
    """Every request of a trace in any format, streamed, as :class:`TraceRequest` (timestamp [ms] after the
    first request, input and output lengths [tokens], hash ids (empty for the lengths-only CSV formats), line
    or item number). The arrivals-and-lengths entry point for the serving model (``kvcalc bench --trace``)."""
    b = trace_block_tokens(path, trace_format, block_tokens)
    yield from open_trace(path, b, skip_bad, trace_format, progress)
