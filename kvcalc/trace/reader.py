"""Reading request traces, streaming: one request per line, line-numbered errors.

Trace format (Mooncake; one JSON object per line, blank lines ignored; other fields are ignored):

- ``timestamp``: arrival time [ms], relative: an int or float, finite, within +-2^53 ms (~285,000 years; every
  such integer is exact as a float and every difference of two stays finite)
- ``input_length``, ``output_length``: [tokens], integers from 0 to 2^63 - 1
- ``hash_ids``: one integer id per ``block_tokens``-token block of the input, so
  ``len(hash_ids) == ceil(input_length / block_tokens)`` (the last block may be partial). An equal id at the
  same position means the whole prefix up to and including that block is identical. Ids must fit in a
  signed 64-bit integer.

Reading is streaming (64 KiB of whole lines at a time; the file is never read whole, and nothing is kept per
request). Lines are decoded by msgspec into typed records that validate types and bounds as they decode (one
C call per piece of lines); a line it refuses is decoded again with the standard library's ``json`` to say exactly what is wrong,
so messages do not depend on the decoder. A bad line raises :class:`InputError` with one line
``FILE:LINE: problem``; with ``skip_bad=True`` bad lines are skipped and counted instead (``skipped_lines`` in
every result). Hostile lines (nested 100,000 deep, numbers of thousands of digits) are bad lines, never a
crash. A trace without any valid request is an error.

This module computes; it never prints.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from kvcalc.out import progress
from kvcalc.out.errors import InputError
from kvcalc.trace.compression import decompressed

DEFAULT_BLOCK_TOKENS = 512
_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1
MAX_TIMESTAMP_MS = 2**53  # |timestamp| bound [ms]: integers up to 2^53 are exact as floats
_REQUIRED_FIELDS = ("timestamp", "input_length", "output_length", "hash_ids")
READ_BYTES = 1 << 16  # the file is read 64 KiB at a time, cut after the last whole line
MAX_IDS_PER_LINE = 1_000_000  # hash ids on one line, at most (512M tokens at 512-token blocks)
MAX_LINE_BYTES = 24_000_000  # bytes of one line, at most: 1,000,000 ids of up to 20 digits and a comma each,
# plus the other fields; a longer line is refused before it is read whole, so one line costs at most this much
_OTHER_COMMAS = 64  # commas a line may hold besides those between its ids (a line with more is refused unread)
RULES = ("ceil", "floor")  # ids per request: ceil(input / B) (the last block may be partial: Mooncake) or
# floor(input / B) (full blocks only: kv-cache-tester; the partial last block is never reused)
_BLANK_LINE = re.compile(rb"\n[ \t\r]*\n")


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
    """repr of a value, cut to keep error messages on one short line (huge ints are not converted whole)."""
    if type(value) is int and not -10**40 < value < 10**40:
        return f"an integer of {len(str(abs(value))) if value.bit_length() < 14000 else 'thousands of'} digits"
    text = repr(value).replace("\n", " ")
    return text if len(text) <= 40 else text[:37] + "..."


@lru_cache(maxsize=1)
def _decoder():
    """msgspec's typed decoder of one trace line (built once; msgspec imported only on the trace path)."""
    from typing import Annotated

    import msgspec

    tokens = Annotated[int, msgspec.Meta(ge=0, le=_INT64_MAX)]
    line = msgspec.defstruct("TraceLine", [
        ("timestamp", Annotated[float, msgspec.Meta(ge=-float(MAX_TIMESTAMP_MS), le=float(MAX_TIMESTAMP_MS))]),
        ("input_length", tokens), ("output_length", tokens),
        ("hash_ids", Annotated[list[Annotated[int, msgspec.Meta(ge=_INT64_MIN, le=_INT64_MAX)]],
                               msgspec.Meta(max_length=MAX_IDS_PER_LINE)]),
    ])
    return msgspec.json.Decoder(line), (msgspec.DecodeError, RecursionError)


def _check_length(obj: dict, field: str) -> str | None:
    """None if obj[field] is an int in 0 .. 2^63 - 1 (not a bool), else the problem."""
    value = obj[field]
    if type(value) is not int:
        return f"{field} must be an integer number of tokens, got {_short(value)} ({type(value).__name__})"
    if value < 0:
        return f"{field} must be >= 0 tokens, got {value}"
    if value > _INT64_MAX:
        return f"{field} must be at most 2^63 - 1 tokens, got {_short(value)}"
    return None


def expected_ids(input_length: int, block_tokens: int, rule: str = "ceil") -> int:
    """Hash ids a request of ``input_length`` [tokens] has under ``rule`` (see :data:`RULES`) [blocks]."""
    return -(-input_length // block_tokens) if rule == "ceil" else input_length // block_tokens


def _ids_problem(n_ids: int, input_length: int, block_tokens: int, rule: str | None = "ceil") -> str | None:
    """The problem when ``n_ids`` hash ids do not cover ``input_length`` tokens in blocks under ``rule`` (None:
    either rule), else None."""
    if n_ids > MAX_IDS_PER_LINE:
        return f"hash_ids has {n_ids:,} ids, more than the {MAX_IDS_PER_LINE:,} a line may hold"
    rules = RULES if rule is None else (rule,)
    if any(n_ids == expected_ids(input_length, block_tokens, r) for r in rules):
        return None
    need = " or ".join(f"{r}({input_length}/{block_tokens}) = {expected_ids(input_length, block_tokens, r)}"
                       for r in rules)
    return f"hash_ids has {n_ids} ids but input_length {input_length} needs {need} (wrong block size?)"


def _problem_of(line: bytes | str, block_tokens: int, rule: str | None = "ceil") -> str:
    """Why a line the typed decoder refused is bad, decoded again with ``json`` (one line, no location)."""
    import json  # only for lines msgspec refused

    if len(line) > 1 << 20 and (line.count(b",") if isinstance(line, bytes) else line.count(",")) >= MAX_IDS_PER_LINE:
        return f"more than the {MAX_IDS_PER_LINE:,} hash ids a line may hold"  # not decoded again: memory

    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError:
            return "not UTF-8 text"
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(line.rstrip()) or exc.msg.startswith("Unterminated string"):
            return "truncated JSON (the line ends inside the object)"
        return f"malformed JSON ({str(exc).splitlines()[0]})"
    except RecursionError:
        return "JSON nested too deeply"
    except ValueError as exc:  # e.g. an integer of more than 4,300 digits
        return f"unreadable JSON ({str(exc).splitlines()[0][:80]})"
    if type(obj) is not dict:
        return f"expected a JSON object, got {type(obj).__name__}"
    for field in _REQUIRED_FIELDS:
        if field not in obj:
            return f"missing field {field!r}"
    timestamp = obj["timestamp"]
    if type(timestamp) not in (int, float) or not -MAX_TIMESTAMP_MS <= timestamp <= MAX_TIMESTAMP_MS:
        return (f"timestamp must be a finite number of ms within +-2^53, got {_short(timestamp)}")
    for field in ("input_length", "output_length"):
        problem = _check_length(obj, field)
        if problem:
            return problem
    ids = obj["hash_ids"]
    if type(ids) is not list:
        return f"hash_ids must be a list of integers, got {type(ids).__name__}"
    problem = _ids_problem(len(ids), obj["input_length"], block_tokens, rule)
    if problem:
        return problem
    for h in ids:
        if type(h) is not int:
            return f"hash_ids must be integers, found {_short(h)} ({type(h).__name__})"
    if ids and (min(ids) < _INT64_MIN or max(ids) > _INT64_MAX):
        return "hash_ids must fit in a signed 64-bit integer"
    return "not a valid trace line"  # the typed decoder refused what json accepts: say so, never pass it


def parse_trace_line(line: bytes | str, block_tokens: int = DEFAULT_BLOCK_TOKENS,
                     line_number: int = 0, rule: str | None = "ceil") -> tuple[TraceRequest | None, str | None]:
    """Parse one non-blank line -> (request, None) or (None, problem) [problem: one line, no location];
    ``rule``: ids per request (:data:`RULES`; None: either)."""
    decoder, errors = _decoder()
    try:
        rec = decoder.decode(line)
    except errors:
        return None, _problem_of(line, block_tokens, rule)
    problem = _ids_problem(len(rec.hash_ids), rec.input_length, block_tokens, rule)
    if problem:
        return None, _problem_of(line, block_tokens, rule)
    return TraceRequest(rec.timestamp, rec.input_length, rec.output_length, tuple(rec.hash_ids), line_number), None


MAX_KEPT_BAD = 1_000_000  # bad line numbers a reader keeps (8 MB at most; the count itself has no bound)


class ReaderViews:
    """The views every trace reader offers on its ``signed_batches()``: batches, records, requests; and its
    handling of a bad line or item (``path``, ``skip_bad``, ``skipped_lines``, ``first_problem``)."""

    def _bad(self, where: int | str, problem: str, number: int | None = None) -> None:
        """Raise ``FILE:WHERE: problem``, or count it with skip_bad (keeping the first problem, and the line or
        item ``number`` (default: ``where``) of the first :data:`MAX_KEPT_BAD` bad lines in ``bad_numbers``, so a
        reader stopped early can tell how many of them came before its last request)."""
        message = f"{self.path}:{where}: {problem}"
        if not self.skip_bad:
            raise InputError(message)
        if self.skipped_lines == 0:
            self.bad_numbers = []
        if len(self.bad_numbers) < MAX_KEPT_BAD:
            self.bad_numbers.append(int(where) if number is None else number)
        self.skipped_lines += 1
        if self.first_problem is None:
            self.first_problem = message

    def batches(self) -> Iterator[tuple[list, Sequence[int]]]:
        """(records, their line numbers) per ~64 KiB of whole lines of the file, in order.

        A record has ``timestamp`` [ms] (float), ``input_length``, ``output_length`` [tokens] and ``hash_ids``
        (a list). A piece whose lines are all good (one object each, no blank line, ids that fit) is decoded in
        one msgspec call; any other piece is read again line by line, which names or skips the bad lines.
        Nothing is kept between pieces: memory is one piece, whatever the trace's length.
        """
        for records, numbers, _ in self.signed_batches():
            yield records, numbers

    def records(self) -> Iterator[tuple[int, object]]:
        """(line number, record) per valid line (see :meth:`batches`)."""
        for records, numbers in self.batches():
            yield from zip(numbers, records)

    def __iter__(self) -> Iterator[TraceRequest]:
        for line_number, rec in self.records():
            yield TraceRequest(rec.timestamp, rec.input_length, rec.output_length, tuple(rec.hash_ids), line_number)


class TraceReader(ReaderViews):
    """Streaming iterable of :class:`TraceRequest` from a JSONL trace file (plain, gzip or Zstandard).

    Iterating reads the file line by line. Errors are :class:`InputError` with one line
    ``FILE:LINE: problem``; with ``skip_bad`` bad lines are counted in ``skipped_lines`` (the first problem is
    kept in ``first_problem``). When the file is exhausted without any request, iteration raises.
    :meth:`records` is the same stream without building a TraceRequest per line (the replay's hot path).

    ``rule`` says how many hash ids a request has (:data:`RULES`): ``ceil`` (Mooncake: the partial last block
    has an id and can be reused), ``floor`` (full blocks only: the partial last block has no id, so it is
    always a miss), or None: the first line whose input is not a whole number of blocks decides, and every
    line must then follow it (``rule`` holds the decision). ``progress``, if given, is called with the bytes
    of the file read so far (compressed bytes for a compressed file) after each piece.
    A line longer than :data:`MAX_LINE_BYTES` or with more than :data:`MAX_IDS_PER_LINE` ids is refused with
    its line number (the former even with ``skip_bad``: it is never read whole).
    """

    lengths_only = False  # hash ids on every line (the CSV readers of kvcalc.trace.formats have none)

    def __init__(self, path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False,
                 rule: str | None = "ceil", progress: Callable[[int], None] | None = None):
        check_block_tokens(block_tokens)
        if rule is not None and rule not in RULES:
            raise InputError(f"ids per request: {rule!r} is not one of {', '.join(RULES)}")
        self.path = Path(path)
        self.block_tokens = block_tokens
        self.skip_bad = skip_bad
        self.rule = rule
        self.progress = progress
        self.requests = 0
        self.skipped_lines = 0
        self.first_problem: str | None = None


    def signed_batches(self) -> Iterator[tuple[list, Sequence[int], bool]]:
        """:meth:`batches` with a third item: False when the records' text holds no ``-`` at all, so that no
        number in them (no hash id) is negative (a byte search of the piece, far cheaper than reading the ids)."""
        self.requests = self.skipped_lines = 0
        self.first_problem = None
        decoder, errors = _decoder()
        lines_before = 0
        stream, raw = open_stream(self.path)
        with raw, stream:
            pieces = _pieces(stream)
            while True:
                try:
                    piece = next(pieces)
                except StopIteration:
                    break
                except _LineTooLong:
                    raise InputError(f"{self.path}:{lines_before + 1}: line longer than {MAX_LINE_BYTES:,} bytes "
                                     f"(at most {MAX_IDS_PER_LINE:,} hash ids a line)") from None
                except (OSError, EOFError) as exc:  # a damaged .gz
                    raise InputError(f"{self.path}: cannot read ({exc})") from None
                n_lines = piece.count(b"\n") + 1
                signed = b"-" in piece
                # a line may hold too many ids: never decoded whole (a piece shorter than the bound cannot)
                many = len(piece) > MAX_IDS_PER_LINE and piece.count(b",") > MAX_IDS_PER_LINE
                records = None if many else self._whole_piece(piece, n_lines, decoder, errors)
                if records is not None:
                    self.requests += len(records)
                    yield records, range(lines_before + 1, lines_before + 1 + n_lines), signed
                else:  # one line at a time: the good lines before a bad one are delivered before it raises
                    for line_number, rec in self._line_by_line(piece, lines_before, decoder, errors):
                        self.requests += 1
                        yield [rec], (line_number,), signed
                lines_before += n_lines
                if self.progress is not None:
                    self.progress(raw.tell())
        if self.requests == 0:
            skipped = f" ({self.skipped_lines} bad lines skipped)" if self.skipped_lines else ""
            raise InputError(f"{self.path}: no requests in the trace{skipped}")

    def _decide(self, records: Sequence) -> None:
        """With no rule yet: the first record whose input is not a whole number of blocks decides it."""
        b = self.block_tokens
        for r in records:
            if r.input_length % b:
                n = len(r.hash_ids)
                if n == expected_ids(r.input_length, b, "ceil"):
                    self.rule = "ceil"
                elif n == expected_ids(r.input_length, b, "floor"):
                    self.rule = "floor"
                return

    def _fits(self, rec) -> bool:
        """The record's ids follow the rule (deciding it first if need be)."""
        if self.rule is None:
            self._decide((rec,))
        return len(rec.hash_ids) == expected_ids(rec.input_length, self.block_tokens, self.rule or "ceil")

    def _whole_piece(self, piece: bytes, n_lines: int, decoder, errors) -> list | None:
        """The piece's records if every line is one good request, else None."""
        try:
            records = decoder.decode_lines(piece)
        except errors:
            return None
        if len(records) != n_lines or _BLANK_LINE.search(b"\n" + piece + b"\n"):
            return None  # a blank line, or two objects on one line (one object per line is the format)
        if self.rule is None:
            self._decide(records)
        b = self.block_tokens
        if self.rule == "floor":
            if any(len(r.hash_ids) != r.input_length // b for r in records):
                return None
        elif any(len(r.hash_ids) != (r.input_length + b - 1) // b for r in records):
            return None
        return records

    def _line_by_line(self, piece: bytes, lines_before: int, decoder, errors) -> Iterator[tuple[int, object]]:
        """(line number, record) of the good lines of a piece; bad lines raise or are counted (skip_bad)."""
        b = self.block_tokens
        for line_number, line in enumerate(piece.split(b"\n"), start=lines_before + 1):
            if len(line) > 2 * MAX_IDS_PER_LINE and line.count(b",") > MAX_IDS_PER_LINE + _OTHER_COMMAS:
                self._bad(line_number, f"more than the {MAX_IDS_PER_LINE:,} hash ids a line may hold")
                continue
            try:
                rec = decoder.decode(line)
            except errors:
                if line.strip():
                    self._bad(line_number, _problem_of(line, b, self.rule))
                continue
            if not self._fits(rec):
                self._bad(line_number, _problem_of(line, b, self.rule))
                continue
            yield line_number, rec


class _LineTooLong(Exception):
    """A line grew past MAX_LINE_BYTES before its end was found."""


def open_binary(path: Path, what: str, watched: bool = True):
    """``path`` opened for buffered binary reading (InputError naming it when it is missing, a directory, a
    FIFO or a device, or unreadable); ``watched``: a progress bar on stderr counts the bytes read, if one is
    shown (:func:`kvcalc.out.progress.watch`)."""
    try:
        if not path.is_file() and path.exists():
            raise InputError(f"{path}: is a directory or special file, not a {what}")
        handle = open(path, "rb")
        return progress.watch(handle) if watched else handle
    except FileNotFoundError:
        raise InputError(f"{path}: no such {what}") from None
    except IsADirectoryError:
        raise InputError(f"{path}: is a directory, not a {what}") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror or exc})") from None


def open_stream(path: Path, watched: bool = True):
    """(decompressed binary stream, raw file) of ``path``, the raw file telling the bytes read: plain, gzip or
    Zstandard, told by the magic bytes (:func:`kvcalc.trace.compression.decompressed`). ``watched``: see
    :func:`open_binary` (not for a format's detection, which reads only the first lines)."""
    raw = open_binary(path, "trace file", watched)
    try:
        return decompressed(path, raw), raw
    except BaseException:
        raw.close()
        raise


def _pieces(handle) -> Iterator[bytes]:
    """Whole lines of an open binary file, READ_BYTES at a time, without their last newline (raises
    _LineTooLong once an unfinished line passes MAX_LINE_BYTES)."""
    parts: list[bytes] = []
    pending = 0
    while True:
        data = handle.read(READ_BYTES)
        if not data:
            break
        cut = data.rfind(b"\n")
        if cut < 0:
            parts.append(data)  # a line longer than one read: joined once its end is found
            pending += len(data)
            if pending > MAX_LINE_BYTES:
                raise _LineTooLong
            continue
        head = data[:cut]
        if parts and pending + data.find(b"\n") > MAX_LINE_BYTES:
            raise _LineTooLong
        yield b"".join(parts) + head if parts else head
        parts = [data[cut + 1:]]
        pending = len(parts[0])
    tail = b"".join(parts)
    if len(tail) > MAX_LINE_BYTES:
        raise _LineTooLong
    if tail:
        yield tail


def read_trace(path: str | Path, block_tokens: int = DEFAULT_BLOCK_TOKENS, skip_bad: bool = False,
               rule: str | None = "ceil", progress: Callable[[int], None] | None = None) -> TraceReader:
    """A streaming reader of the Mooncake-format JSONL ``path`` (see :class:`TraceReader`); every format,
    detected by content: :func:`kvcalc.trace.formats.open_trace`."""
    return TraceReader(path, block_tokens, skip_bad, rule, progress)
