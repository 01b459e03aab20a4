"""Reading request traces, streaming: one :class:`TraceRequest` per line, line-numbered errors.

Trace format (Mooncake; one JSON object per line, blank lines ignored):

- ``timestamp``: arrival time [ms], relative (int or float; any finite number)
- ``input_length``, ``output_length``: [tokens], integers >= 0
- ``hash_ids``: one integer id per ``block_tokens``-token block of the input, so
  ``len(hash_ids) == ceil(input_length / block_tokens)`` (the last block may be partial). An equal id at the
  same position means the whole prefix up to and including that block is identical. Ids must fit in a
  signed 64-bit integer.

Reading is streaming (line by line; the file is never read whole). A bad line raises :class:`InputError`
with one line ``FILE:LINE: problem``; with ``skip_bad=True`` bad lines are skipped and counted instead
(``skipped_lines`` in every result). A trace without any valid request is an error.

This module computes; it never prints.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

from kvcalc.out.errors import InputError

DEFAULT_BLOCK_TOKENS = 512
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
_REQUIRED_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")


class TraceRequest(NamedTuple):
    """One request of a trace (a NamedTuple: cheap to create for millions of lines)."""

    timestamp_ms: float  # arrival [ms]
    input_length: int  # [tokens]
    output_length: int  # [tokens]
    hash_ids: tuple[int, ...]  # one id per block_tokens-token input block
    line_number: int  # 1-based line in the file (0 when built in memory)


def check_block_tokens(block_tokens: int) -> None:
    """Raise InputError unless block_tokens [tokens] is a whole number >= 1."""
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1:
        raise InputError(f"block size: must be a whole number of tokens >= 1, got {block_tokens!r}")


def _short(value: object) -> str:
    """repr of a value, cut to keep error messages on one short line."""
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 40 else text[:37] + "..."


def _check_length(obj: dict, field: str) -> tuple[int | None, str | None]:
    """(length [tokens], None) if obj[field] is an int >= 0 (not a bool), else (None, problem)."""
    value = obj[field]
    if type(value) is not int:
        return None, f"{field} must be an integer number of tokens, got {_short(value)} ({type(value).__name__})"
    if value < 0:
        return None, f"{field} must be >= 0 tokens, got {value}"
    return value, None


def parse_trace_line(line: bytes | str, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                     line_number: int = 0) -> tuple[TraceRequest | None, str | None]:
    """Parse one non-blank line -> (request, None) or (None, problem) [problem: one line, no location]."""
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            return None, "not UTF-8 text"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(line.rstrip()) or exc.msg.startswith("Unterminated string"):
            return None, "truncated JSON (the line ends inside the object)"
        return None, f"malformed JSON ({str(exc).splitlines()[0]})"
    if type(obj) is not dict:
        return None, f"expected a JSON object, got {type(obj).__name__}"
    for field in _REQUIRED_FIELDS:
        if field not in obj:
            return None, f"missing field {field!r}"
    timestamp = obj["timestamp"]
    if type(timestamp) not in (int, float) or not math.isfinite(timestamp):
        return None, f"timestamp must be a finite number of ms, got {_short(timestamp)}"
    input_length, problem = _check_length(obj, "input_length")
    if problem:
        return None, problem
    output_length, problem = _check_length(obj, "output_length")
    if problem:
        return None, problem
    ids = obj["hash_ids"]
    if type(ids) is not list:
        return None, f"hash_ids must be a list of integers, got {type(ids).__name__}"
    expected = -(-input_length // block_tokens)
    if len(ids) != expected:
        return None, (f"hash_ids has {len(ids)} ids but input_length {input_length} needs "
                      f"ceil({input_length}/{block_tokens}) = {expected} (wrong block size?)")
    for h in ids:
        if type(h) is not int:
            return None, f"hash_ids must be integers, found {_short(h)} ({type(h).__name__})"
    if ids and (min(ids) < _INT64_MIN or max(ids) > _INT64_MAX):
        return None, "hash_ids must fit in a signed 64-bit integer"
    return TraceRequest(timestamp, input_length, output_length, tuple(ids), line_number), None


class TraceReader:
    """Streaming iterable of :class:`TraceRequest` from a JSONL trace file.

    Iterating reads the file line by line. Errors are :class:`InputError` with one line
    ``FILE:LINE: problem``; with ``skip_bad`` bad lines are counted in ``skipped_lines`` (the first problem is
    kept in ``first_problem``). When the file is exhausted without any request, iteration raises.
    """

    def __init__(self, path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False):
        check_block_tokens(block_tokens)
        self.path = Path(path)
        self.block_tokens = block_tokens
        self.skip_bad = skip_bad
        self.requests = 0
        self.skipped_lines = 0
        self.first_problem: str | None = None

    def __iter__(self) -> Iterator[TraceRequest]:
        self.requests = self.skipped_lines = 0
        self.first_problem = None
        try:
            handle = open(self.path, "rb")
        except FileNotFoundError:
            raise InputError(f"{self.path}: no such trace file") from None
        except IsADirectoryError:
            raise InputError(f"{self.path}: is a directory, not a trace file") from None
        except OSError as exc:
            raise InputError(f"{self.path}: cannot read ({exc.strerror})") from None
        with handle:
            for line_number, line in enumerate(handle, start=1):
                if not line.strip():
                    continue
                request, problem = parse_trace_line(line, self.block_tokens, line_number)
                if problem is not None:
                    message = f"{self.path}:{line_number}: {problem}"
                    if not self.skip_bad:
                        raise InputError(message)
                    self.skipped_lines += 1
                    if self.first_problem is None:
                        self.first_problem = message
                    continue
                self.requests += 1
                yield request
        if self.requests == 0:
            skipped = f" ({self.skipped_lines} bad lines skipped)" if self.skipped_lines else ""
            raise InputError(f"{self.path}: no requests in the trace{skipped}")


def read_trace(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False) -> TraceReader:
    """A streaming reader of ``path`` (see :class:`TraceReader`)."""
    return TraceReader(path, block_tokens, skip_bad)
