"""Text inputs: keys one per line (plain, gzip or zstd) and CSV columns, read in batches.

Lines end with ``\\n``; trailing ``\\r`` characters are stripped (``\\r\\n`` files work) and
blank lines are skipped. Data is read in blocks of :data:`BLOCK_SIZE` bytes and each
block's whole lines become one batch, so memory stays bounded by the block size (plus
the longest line). An uncompressed file can also be read by byte range
(:func:`range_chunks`), which is how the distributed build splits a big file.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterator
from itertools import chain, islice
from typing import BinaryIO

import zstandard

from bloomswarm.common.errors import InputError

from .source_keys import KeyBatch, KeyType, convert_fields

BLOCK_SIZE = 4 << 20
"""Bytes read per step from a text input."""
CSV_BATCH_ROWS = 65536

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"


def is_compressed(magic: bytes) -> bool:
    """Whether data starting with ``magic`` is gzip or zstd (and so cannot be split)."""
    return magic.startswith(GZIP_MAGIC) or magic == ZSTD_MAGIC


def decompressing(raw: BinaryIO, magic: bytes) -> BinaryIO:
    """Wrap ``raw`` (whose first bytes are ``magic``) to decompress gzip or zstd; else ``raw``."""
    if magic.startswith(GZIP_MAGIC):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if magic == ZSTD_MAGIC:
        return io.BufferedReader(_ZstdFrames(raw), 1 << 20)
    return raw


class _ZstdFrames(io.RawIOBase):
    """A readable stream of zstd frames that raises on truncation.

    zstandard's own ``stream_reader`` ends quietly at a cut in the middle of a frame,
    which would lose every key after the cut; this reader raises ZstdError instead.
    """

    _CHUNK = 1 << 20

    def __init__(self, raw: BinaryIO) -> None:
        super().__init__()
        self._raw = raw
        self._decompressor = zstandard.ZstdDecompressor()
        self._frame = self._decompressor.decompressobj()
        self._in_frame = False
        self._pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            chunk = self._raw.read(self._CHUNK)
            if not chunk:
                if self._in_frame:
                    raise zstandard.ZstdError("truncated zstd data: the last frame never ends")
                return 0
            self._pending = self._feed(chunk)
        size = min(len(buffer), len(self._pending))
        buffer[:size] = self._pending[:size]
        self._pending = self._pending[size:]
        return size

    def _feed(self, chunk: bytes) -> bytes:
        out = []
        while chunk:
            self._in_frame = True
            out.append(self._frame.decompress(chunk))
            if not self._frame.eof:
                break
            self._in_frame = False
            chunk = self._frame.unused_data
            self._frame = self._decompressor.decompressobj()
        return b"".join(out)

    def close(self) -> None:
        self._raw.close()
        super().close()


def read_chunks(stream: BinaryIO) -> Iterator[bytes]:
    """The stream's bytes in blocks of up to :data:`BLOCK_SIZE`."""
    while chunk := stream.read(BLOCK_SIZE):
        yield chunk


def range_chunks(chunks: Iterator[bytes], start: int, end: int) -> Iterator[bytes]:
    """The part of an input that byte range ``[start, end)`` owns, from ``chunks`` (the
    input's bytes from offset ``max(start - 1, 0)``).

    A range owns every line that *starts* inside it: it skips the line that runs into it
    from before and finishes the line that runs out of it. Consecutive ranges therefore
    own every line exactly once, wherever the cuts fall.
    """
    offset = max(start - 1, 0)
    rest: Iterator[bytes] = iter(chunks)
    if start > 0:
        for chunk in rest:
            newline = chunk.find(b"\n")
            if newline >= 0:
                offset += newline + 1
                rest = chain([chunk[newline + 1 :]], rest)
                break
            offset += len(chunk)
        else:
            return
        if offset >= end:
            return  # the line that started before this range covers all of it
    for chunk in rest:
        if offset + len(chunk) >= end:  # this chunk holds byte end - 1
            newline = chunk.find(b"\n", max(end - 1 - offset, 0))
            if newline >= 0:
                yield chunk[: newline + 1]
                return
        yield chunk
        offset += len(chunk)


def line_batches(chunks: Iterator[bytes], key_type: KeyType, where: str) -> Iterator[KeyBatch]:
    """One batch of keys per block of whole lines; errors name ``where`` and the line."""
    line_no = 1
    for block in _whole_lines(chunks):
        lines = block.split(b"\n")
        if block.endswith(b"\n"):
            lines.pop()
        if b"\r" in block:
            lines = [line.rstrip(b"\r") for line in lines]
        yield convert_fields(lines, key_type, where, line_no, text=block)
        line_no += len(lines)


def _whole_lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Regroup ``chunks`` into blocks that end at a line end (the last one may not)."""
    pieces: list[bytes] = []
    for chunk in chunks:
        cut = chunk.rfind(b"\n") + 1
        if cut == 0:
            pieces.append(chunk)
            continue
        pieces.append(chunk[:cut])
        yield b"".join(pieces)
        pieces = [chunk[cut:]]
    tail = b"".join(pieces)
    if tail:
        yield tail


def csv_batches(stream: BinaryIO, column: str, key_type: KeyType, where: str) -> Iterator[KeyBatch]:
    """Batches of the keys in CSV column ``column`` (chosen by header name); empty fields
    and short rows are skipped. Numbers in errors are row numbers (the header is row 1)."""
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    reader = csv.reader(text)
    header = next(reader, None)
    if header is None:
        return
    if column not in header:
        raise InputError(f"{where}: no column {column!r}; columns are {', '.join(header)}")
    index = header.index(column)
    row_no = 2
    while rows := list(islice(reader, CSV_BATCH_ROWS)):
        fields = [row[index].encode("utf-8") if index < len(row) else b"" for row in rows]
        yield convert_fields(fields, key_type, where, row_no)
        row_no += len(rows)
