"""Reading the full data set: keys from plain, gzip or zstd text files and CSV columns.

A source is a file, a directory (every regular file in it, sorted) or a glob. Lines are
keys: the line ending (``\\n`` or ``\\r\\n``) is stripped and blank lines are skipped. The
compression is detected from the file's first bytes, not its name. Memory stays bounded:
keys are streamed, never collected.
"""

from __future__ import annotations

import csv
import glob
import gzip
import io
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

import zstandard

from bloomswarm.common.errors import InputError
from bloomswarm.common.keys import INT64_MAX, INT64_MIN, Key

KeyType = Literal["str", "bytes", "int"]
"""How each line becomes a key: UTF-8 text, raw bytes, or a decimal 64-bit integer."""

_GZIP_MAGIC = b"\x1f\x8b"
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
_INTEGER = re.compile(rb"-?[0-9]+")
"""A decimal integer key: an optional minus sign and digits, nothing else."""


@dataclass(frozen=True)
class SourceSpec:
    """What to read and how to turn it into keys."""

    paths: Sequence[str]
    """Files, directories or glob patterns."""
    key_type: KeyType = "str"
    csv_column: str | None = None
    """Read this CSV column (by header name) instead of whole lines."""


def expand_paths(patterns: Sequence[str]) -> list[Path]:
    """Resolve files, directories and globs to a sorted list of files; InputError if none."""
    files: list[Path] = []
    for pattern in patterns:
        if glob.has_magic(pattern):
            matches = sorted(Path(p) for p in glob.glob(pattern, recursive=True))
            files.extend(p for p in matches if p.is_file())
            if not matches:
                raise InputError(f"no files match {pattern}")
        elif os.path.isdir(pattern):
            files.extend(sorted(p for p in Path(pattern).iterdir() if p.is_file()))
        elif os.path.exists(pattern):
            files.append(Path(pattern))
        else:
            raise InputError(f"input not found: {pattern}")
    if not files:
        raise InputError(f"no input files in {', '.join(patterns)}")
    return files


def open_decompressed(path: Path) -> BinaryIO:
    """Open ``path`` for binary reading, decompressing gzip or zstd transparently."""
    try:
        raw = open(path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    except OSError as exc:
        raise InputError(f"cannot open {path}: {exc.strerror or exc}") from exc
    magic = raw.read(4)
    raw.seek(0)
    if magic.startswith(_GZIP_MAGIC):
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    if magic == _ZSTD_MAGIC:
        return io.BufferedReader(_ZstdFrames(raw), 1 << 20)
    return raw


class _ZstdFrames(io.RawIOBase):
    """A readable stream of zstd frames that raises on truncation.

    zstandard's own ``stream_reader`` ends quietly at a cut in the middle of a frame,
    which would lose every key after the cut; this reader raises ZstdError instead.
    """

    _CHUNK = 1 << 20

    def __init__(self, raw: BinaryIO) -> None:
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


def iter_keys(spec: SourceSpec) -> Iterator[Key]:
    """Yield every key of every input file, in order. InputError on unreadable input."""
    for path in expand_paths(spec.paths):
        yield from _keys_of_file(path, spec)


def _keys_of_file(path: Path, spec: SourceSpec) -> Iterator[Key]:
    try:
        with open_decompressed(path) as stream:
            if spec.csv_column is not None:
                yield from _csv_keys(stream, path, spec)
            else:
                yield from _line_keys(stream, path, spec.key_type)
    except (OSError, EOFError, UnicodeDecodeError, csv.Error, zstandard.ZstdError) as exc:
        raise InputError(f"cannot read {path}: {exc}") from exc


def _line_keys(stream: BinaryIO, path: Path, key_type: KeyType) -> Iterator[Key]:
    for line_no, line in enumerate(stream, 1):
        raw = line.rstrip(b"\r\n")
        if not raw:
            continue
        yield convert_key(raw, key_type, path, line_no)


def _csv_keys(stream: BinaryIO, path: Path, spec: SourceSpec) -> Iterator[Key]:
    text = io.TextIOWrapper(stream, encoding="utf-8-sig", newline="")
    reader = csv.reader(text)
    header = next(reader, None)
    if header is None:
        return
    if spec.csv_column not in header:
        raise InputError(f"{path}: no column {spec.csv_column!r}; columns are {', '.join(header)}")
    index = header.index(spec.csv_column)
    for row_no, row in enumerate(reader, 2):
        if index >= len(row) or row[index] == "":
            continue
        yield convert_key(row[index].encode("utf-8"), spec.key_type, path, row_no)


def convert_key(raw: bytes, key_type: KeyType, path: Path | str, line_no: int) -> Key:
    """Turn one raw field into a key of ``key_type``; InputError naming file and line."""
    if key_type == "bytes":
        return raw
    if key_type == "str":
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{path}:{line_no}: not valid UTF-8 (use --key-type bytes)") from None
    if not _INTEGER.fullmatch(raw):
        raise InputError(f"{path}:{line_no}: not an integer: {raw[:40]!r}")
    value = int(raw)
    if not INT64_MIN <= value <= INT64_MAX:
        raise InputError(f"{path}:{line_no}: integer {value} outside the 64-bit signed range")
    return value
