"""Text inputs: keys one per line (plain, gzip or zstd) and CSV columns, read in batches.

Lines end with ``\\n``; trailing ``\\r`` characters are stripped (``\\r\\n`` files work) and
blank lines are skipped. A UTF-8 byte order mark at the start of an input is not part of
its first key, for every key type (:func:`skip_bom`), as in CSV. Data is read in blocks
of :data:`BLOCK_SIZE` bytes and each block's whole lines become one batch, so memory
stays bounded by the block size plus the longest line, which is at most
:data:`MAX_KEY_BYTES` (a longer line is an error, raised before more than about a block
past the limit is held). An uncompressed file can also be read by byte range
(:func:`range_chunks`), which is how the distributed build splits a big file.

CSV is parsed strictly: a quoted field that never ends, or text after a closing quote, is
an error naming the line, not a field that swallows the rest of the file. Only the key
column has to be UTF-8 (and only for str and int keys): the other columns' bytes are
carried through undecoded, and a bytes key is its field's exact bytes.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterator
from itertools import chain, islice
from typing import TYPE_CHECKING, BinaryIO

import zstandard

from bloomswarm.common.errors import InputError

from .source_keys import KeyBatch, KeyType, convert_fields

if TYPE_CHECKING:
    from _csv import Reader as _CsvReader

BLOCK_SIZE = 4 << 20
"""Bytes read per step from a text input."""
CSV_BATCH_ROWS = 65536
MAX_KEY_BYTES = 1 << 20
"""The longest line read as a key: 1 MiB, counting a trailing "\\r" but not the "\\n".
Keys are hashed, so length costs nothing in the filter, but a multi-megabyte "key" in a
text file is almost surely bad input (a binary file, a file without line ends);
refusing it keeps memory bounded."""
MAX_CSV_FIELD_CHARS = MAX_KEY_BYTES
"""The longest CSV field read (in characters): the same bound as a text key."""
MAX_CSV_LINE_CHARS = 16 << 20
"""The longest physical CSV line read (in characters). Fields are bounded on their own
(:data:`MAX_CSV_FIELD_CHARS`); this bounds a row of many fields, or a file with no
line ends, so it cannot fill memory."""

UTF8_BOM = b"\xef\xbb\xbf"

# The csv module's field size limit is process-wide state (no reader takes its own), so it
# is raised once, here, and only ever raised: a CSV key may be as long as a text key.
csv.field_size_limit(max(csv.field_size_limit(), MAX_CSV_FIELD_CHARS))

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"

_NAMED_FORMATS = {".gz": ("gzip", GZIP_MAGIC), ".gzip": ("gzip", GZIP_MAGIC),
                  ".zst": ("zstd", ZSTD_MAGIC), ".zstd": ("zstd", ZSTD_MAGIC)}
"""Compressed formats by file name ending (see :func:`check_named_format`)."""


def is_compressed(magic: bytes) -> bool:
    """Whether data starting with ``magic`` is gzip or zstd (and so cannot be split)."""
    return magic.startswith(GZIP_MAGIC) or magic == ZSTD_MAGIC


def check_named_format(name: str, magic: bytes) -> None:
    """InputError when ``name`` ends in .gz or .zst (.gzip, .zstd) but the input, whose
    first bytes are ``magic`` (all of it when it is shorter), is shorter than that
    format's marker: a cut-off download is not plain text. The format is otherwise
    detected from the bytes, never the name; an empty input has no keys."""
    dot = name.rfind(".")
    named = _NAMED_FORMATS.get(name[dot:].lower()) if dot >= 0 else None
    if named is None or not magic:
        return
    format_name, marker = named
    if len(magic) < len(marker):
        raise InputError(
            f"{name}: {len(magic)} byte{'s' if len(magic) > 1 else ''} long, too short for a "
            f"{format_name} file ({format_name} data starts with {len(marker)} marker bytes)"
        )


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


def skip_bom(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """``chunks`` (an input's bytes from its first byte) without a leading UTF-8 byte
    order mark, however the first chunks are cut."""
    head = b""
    rest = iter(chunks)
    for chunk in rest:
        head += chunk
        if len(head) >= len(UTF8_BOM):
            break
    if head.startswith(UTF8_BOM):
        head = head[len(UTF8_BOM):]
    if head:
        yield head
    yield from rest


def line_batches(chunks: Iterator[bytes], key_type: KeyType, where: str) -> Iterator[KeyBatch]:
    """One batch of keys per block of whole lines; errors name ``where`` and the line.
    A line longer than :data:`MAX_KEY_BYTES` is an InputError."""
    line_no = 1
    try:
        for block in _whole_lines(chunks):
            _check_line_lengths(block, where, line_no)
            lines = block.split(b"\n")
            if block.endswith(b"\n"):
                lines.pop()
            if b"\r" in block:
                lines = [line.rstrip(b"\r") for line in lines]
            yield convert_fields(lines, key_type, where, line_no, text=block)
            line_no += len(lines)
    except _LongLine:  # the line after the last block, still running on
        raise InputError(_long_line(where, line_no)) from None


class _LongLine(Exception):
    """The line after the last block yielded is already longer than MAX_KEY_BYTES."""


def _long_line(where: str, line_no: int) -> str:
    return (f"{where}:{line_no}: line longer than {MAX_KEY_BYTES:,} bytes (1 MiB), the "
            "longest key allowed; is this a key file with one key per line?")


def _whole_lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Regroup ``chunks`` into blocks that end at a line end (the last one may not).
    Raises _LongLine as soon as the unfinished line held exceeds MAX_KEY_BYTES, so a
    file without line ends is never held whole."""
    pieces: list[bytes] = []
    held = 0
    for chunk in chunks:
        cut = chunk.rfind(b"\n") + 1
        if cut == 0:
            pieces.append(chunk)
            held += len(chunk)
        else:
            pieces.append(chunk[:cut])
            yield b"".join(pieces)
            pieces = [chunk[cut:]]
            held = len(chunk) - cut
        if held > MAX_KEY_BYTES:
            raise _LongLine
    tail = b"".join(pieces)
    if tail:
        yield tail


def _check_line_lengths(block: bytes, where: str, first_no: int) -> None:
    """InputError naming the first line of ``block`` (line ``first_no`` of ``where``)
    longer than MAX_KEY_BYTES.

    Looks for a newline in each window of half the limit: a line over the limit holds a
    whole window, and in ordinary data every window finds one within a few bytes, so the
    check reads a handful of bytes per block; only a window without one is followed to
    its line's ends.
    """
    if len(block) <= MAX_KEY_BYTES:
        return
    step = MAX_KEY_BYTES // 2
    pos = 0
    while pos + step <= len(block):
        if block.find(b"\n", pos, pos + step) >= 0:
            pos += step
            continue
        start = block.rfind(b"\n", 0, pos) + 1
        end = block.find(b"\n", pos + step)
        if end < 0:
            end = len(block)
        if end - start > MAX_KEY_BYTES:
            raise InputError(_long_line(where, first_no + block.count(b"\n", 0, start)))
        pos = end


def csv_batches(stream: BinaryIO, column: str, key_type: KeyType, where: str) -> Iterator[KeyBatch]:
    """Batches of the keys in CSV column ``column`` (chosen by header name); empty fields
    and short rows are skipped. Numbers in errors are row numbers (the header is row 1),
    except for malformed CSV (an unterminated quote, text after a closing quote, a line
    over :data:`MAX_CSV_LINE_CHARS` or a field over :data:`MAX_CSV_FIELD_CHARS`), which
    names the line where the bad row starts. A leading byte order mark is skipped. Bytes
    that are not UTF-8 are kept as they are (``surrogateescape``): a str or int key that
    is not UTF-8 is an InputError naming its row; a bytes key is its field's bytes."""
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", errors="surrogateescape", newline="")
    reader = csv.reader(_bounded_lines(text, where), strict=True)
    header = _next_row(reader, where)
    if header is None:
        return
    if column not in header:
        raise InputError(f"{where}: no column {column!r}; columns are {', '.join(header)}")
    index = header.index(column)
    row_no = 2
    while rows := _csv_rows(reader, where, CSV_BATCH_ROWS):
        fields = [row[index].encode("utf-8", "surrogateescape") if index < len(row) else b""
                  for row in rows]
        yield convert_fields(fields, key_type, where, row_no)
        row_no += len(rows)


def _bounded_lines(text: io.TextIOWrapper, where: str) -> Iterator[str]:
    """The physical lines of ``text``; InputError for one over MAX_CSV_LINE_CHARS, read
    no further than the limit."""
    size = MAX_CSV_LINE_CHARS + 2  # room for "\r\n"
    line_no = 0
    while line := text.readline(size):
        line_no += 1
        if len(line) == size and not line.endswith("\n"):
            raise InputError(f"cannot read {where}: line {line_no} is longer than "
                             f"{MAX_CSV_LINE_CHARS:,} characters")
        yield line


def _next_row(reader: _CsvReader, where: str) -> list[str] | None:
    rows = _csv_rows(reader, where, 1)
    return rows[0] if rows else None


def _csv_rows(reader: _CsvReader, where: str, count: int) -> list[list[str]]:
    """Up to ``count`` more rows; malformed CSV is an InputError naming the line where the
    bad row starts."""
    rows: list[list[str]] = []
    append = rows.append
    done = reader.line_num  # the line the last good row ended on
    try:
        for row in islice(reader, count):
            append(row)
            done = reader.line_num
    except csv.Error as exc:
        if str(exc) == "unexpected end of data":
            problem = "has a quoted field that never ends (a \" without its closing \")"
        else:
            problem = f"is malformed: {exc}"
        raise InputError(f"cannot read {where}: the CSV row starting on line {done + 1} "
                         f"{problem}") from None
    return rows
