"""Compressed traces: gzip and Zstandard told by their magic bytes, streamed.

gzip is read by the standard library; Zstandard by the ``zstandard`` package (the optional extra
``kvcalc[zstd]``), imported only when a Zstandard file is read, and named in the error when it is missing. A
``.gz`` or ``.zst`` name on other bytes is refused; a truncated file is an error, never a shorter trace.

This module computes; it never prints.
"""

from __future__ import annotations

import io
from pathlib import Path

from kvcalc.out.errors import InputError

BUFFER_BYTES = 1 << 16  # decompressed bytes buffered per read [B]
GZIP_MAGIC = b"\x1f\x8b"  # the first two bytes of every gzip member (RFC 1952)
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # the first four bytes of a Zstandard frame (RFC 8878, 0xFD2FB528 little-endian)
ZSTD_FEED_BYTES = 2048  # compressed bytes per decompression call (see _ZstdRaw)
ZSTD_EXTRA = "pip install 'kvcalc[zstd]'"  # what to install for .zst traces (the zstandard package)


def compression_of(path: Path, head: bytes) -> str | None:
    """``gzip``, ``zstd`` or None (plain) for a file whose first bytes are ``head``: the magic bytes decide, so a
    compressed file is read whatever its name; a ``.gz`` or ``.zst`` name on data without that magic is an
    InputError (a truncated or mislabelled file, never read as something else)."""
    if head.startswith(GZIP_MAGIC):
        return "gzip"
    if head.startswith(ZSTD_MAGIC):
        return "zstd"
    suffix = path.suffix.lower()
    if suffix in (".gz", ".zst") and head:
        kind = "gzip" if suffix == ".gz" else "zstd"
        raise InputError(f"{path}: named {suffix} but not {kind} data (its first bytes are not {kind}'s magic)")
    return None


class _ZstdRaw(io.RawIOBase):
    """A Zstandard stream as a raw binary file: every frame in turn; a decoding error is an OSError, and data
    that ends inside a frame (a truncated file) an EOFError, as gzip's are (the ``zstandard`` package's own
    stream reader ends silently there). Compressed input is fed :data:`ZSTD_FEED_BYTES` at a time, which bounds
    the output of one call (zstd expands a block at most ~32,768 times: 64 MiB from 2 KiB)."""

    def __init__(self, raw, zstandard):
        self._raw = raw
        self._new = zstandard.ZstdDecompressor().decompressobj
        self._error = zstandard.ZstdError
        self._obj = self._new()
        self._out, self._at, self._carry, self._in_frame = b"", 0, b"", False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._at >= len(self._out):
            data = self._carry or self._raw.read(ZSTD_FEED_BYTES)
            self._carry = b""
            if not data:
                if self._in_frame:
                    raise EOFError("zstd: the compressed data ends inside a frame (a truncated file?)")
                return 0
            try:
                self._out, self._at = self._obj.decompress(data), 0
            except self._error as exc:
                raise OSError(f"zstd: {exc}") from None
            self._in_frame = not self._obj.eof
            if self._obj.eof:  # a frame ended: what follows it starts the next one
                self._carry, self._obj = self._obj.unused_data, self._new()
        n = min(len(buffer), len(self._out) - self._at)
        buffer[:n] = self._out[self._at:self._at + n]
        self._at += n
        return n


def decompressed(path: Path, raw):
    """The decompressed binary stream of ``raw`` (``path`` opened for buffered reading, peekable): gzip,
    Zstandard or ``raw`` itself, as :func:`compression_of` tells from its first bytes (InputError naming
    ``path`` when it cannot be read so, or when the zstd extra is missing)."""
    kind = compression_of(path, raw.peek(4)[:4])
    if kind == "gzip":
        import gzip

        return gzip.GzipFile(fileobj=raw, mode="rb")
    if kind == "zstd":
        try:
            import zstandard
        except ImportError:
            raise InputError(f"{path}: a Zstandard-compressed trace needs the zstd extra: {ZSTD_EXTRA}") from None
        return io.BufferedReader(_ZstdRaw(raw, zstandard), BUFFER_BYTES)
    return raw


def read_all(stream, limit: int) -> bytes:
    """At most ``limit`` bytes of ``stream``, read until its end (a decompressor may return less per call)."""
    parts, size = [], 0
    while size < limit:
        data = stream.read(min(BUFFER_BYTES * 16, limit - size))
        if not data:
            break
        parts.append(data)
        size += len(data)
    return b"".join(parts)
