"""Reading the full data set: keys from text, CSV and Parquet inputs, local or on S3.

A source is a list of patterns: files, directories (every regular file in it, sorted),
globs, and ``s3://bucket/prefix`` URLs (every object under the prefix, sorted; see
:mod:`.source_inputs`). Each input's format is detected from its first bytes, never its
name:

- ``PAR1``: Parquet; keys are one column's values (:mod:`.source_parquet`);
- gzip or zstd magic: compressed text, decompressed on the fly;
- anything else: plain text (but an input named .gz or .zst that is too short to hold
  its format's marker is an error: a cut-off file, not a key). With ``parquet_column``
  and no ``csv_column``, anything but Parquet is an error (:func:`check_parquet_only`).

Text is read as one key per line (line endings stripped, blank lines skipped), or as one
CSV column chosen by header name (:mod:`.source_text`); a leading UTF-8 byte order mark is
skipped. Memory stays bounded: inputs are
streamed in blocks and converted in batches, never collected.

The unit of reading is a :class:`Partition`: a whole input, a byte range of an
uncompressed, non-CSV text input, or some row groups of a Parquet input. The local build
reads whole inputs in order; the distributed build (:mod:`.distributed`) plans smaller
partitions and reads them on Dask workers. Either way every key is read exactly once.
"""

from __future__ import annotations

import contextlib
import csv
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import zstandard

from bloomswarm.common.errors import InputError
from bloomswarm.common.keys import Key
from bloomswarm.common.storage import S3Config

from .source_inputs import (
    InputRef,
    LocalInput,
    S3Input,
    expand_paths,
    open_raw,
    open_seekable,
    resolve_inputs,
    sniff,
)
from .source_keys import KeyBatch, KeyType, batch_keys, convert_fields, convert_key
from .source_parquet import PARQUET_MAGIC, ParquetInput
from .source_text import (
    check_named_format,
    csv_batches,
    decompressing,
    line_batches,
    range_chunks,
    read_chunks,
    skip_bom,
)

__all__ = [
    "InputRef",
    "KeyBatch",
    "KeyType",
    "LocalInput",
    "Partition",
    "S3Input",
    "SourceSpec",
    "check_parquet_only",
    "convert_fields",
    "convert_key",
    "expand_paths",
    "iter_key_batches",
    "iter_keys",
    "iter_partition_batches",
    "parquet_row_group_sizes",
    "resolve_inputs",
]

_READ_ERRORS = (
    OSError,  # also gzip.BadGzipFile (bad header or CRC)
    EOFError,  # gzip data cut short
    zlib.error,  # corrupt deflate data inside a gzip member
    zstandard.ZstdError,  # corrupt or truncated zstd data
    UnicodeDecodeError,
    csv.Error,
)
"""Failures of a stream half-way through; reported as InputError naming the input. Every
decompressor :func:`~.source_text.decompressing` uses must have its errors here."""


@dataclass(frozen=True)
class SourceSpec:
    """What to read and how to turn it into keys."""

    paths: Sequence[str]
    """Files, directories, glob patterns or ``s3://bucket/prefix`` URLs."""
    key_type: KeyType = "str"
    csv_column: str | None = None
    """Read this CSV column (by header name) of text inputs instead of whole lines."""
    parquet_column: str | None = None
    """Read this column of Parquet inputs (None: a Parquet file's only column). When it is
    set and ``csv_column`` is not, a text input is an error rather than read as lines."""
    s3_config: S3Config | None = None
    """Endpoint, region, profile and timeouts for ``s3://`` inputs (bucket and prefix come
    from each URL); None: ``$BLOOMSWARM_S3_ENDPOINT_URL`` or boto3's own settings."""


@dataclass(frozen=True)
class Partition:
    """A piece of the input read by one task: a whole input, the lines starting in byte
    range ``[start, end)`` of an uncompressed text input, or some row groups of a
    Parquet input."""

    source: InputRef
    byte_range: tuple[int, int] | None = None
    row_groups: tuple[int, ...] | None = None

    def __str__(self) -> str:
        if self.byte_range is not None:
            return f"{self.source}[bytes {self.byte_range[0]}-{self.byte_range[1]}]"
        if self.row_groups is not None:
            return f"{self.source}[row groups {self.row_groups[0]}-{self.row_groups[-1]}]"
        return str(self.source)


def iter_key_batches(spec: SourceSpec) -> Iterator[KeyBatch]:
    """Yield every key of every input, in order, as batches ready to insert (see
    :data:`~.source_keys.KeyBatch`). InputError on unreadable input."""
    for ref in resolve_inputs(spec.paths, spec.s3_config):
        yield from iter_partition_batches(Partition(ref), spec)


def iter_keys(spec: SourceSpec) -> Iterator[Key]:
    """Yield every key of every input, in order, as str, bytes or int per ``spec.key_type``."""
    for batch in iter_key_batches(spec):
        yield from batch_keys(batch, spec.key_type)


def iter_partition_batches(part: Partition, spec: SourceSpec) -> Iterator[KeyBatch]:
    """Yield the key batches of one partition. Errors name the input (and the range);
    line numbers of a byte range count from the range's first line."""
    where = str(part)
    try:
        if part.byte_range is not None:
            check_parquet_only(where, b"", spec)  # a byte range is never Parquet
            yield from _range_batches(part.source, part.byte_range, spec.key_type, where)
        else:
            yield from _input_batches(part, spec, where)
    except _READ_ERRORS as exc:
        raise InputError(f"cannot read {where}: {exc}") from exc


def _range_batches(
    ref: InputRef, byte_range: tuple[int, int], key_type: KeyType, where: str
) -> Iterator[KeyBatch]:
    start, end = byte_range
    with open_raw(ref, max(start - 1, 0)) as raw:
        chunks = range_chunks(read_chunks(raw), start, end)
        yield from line_batches(skip_bom(chunks) if start == 0 else chunks, key_type, where)


def _input_batches(part: Partition, spec: SourceSpec, where: str) -> Iterator[KeyBatch]:
    with contextlib.ExitStack() as stack:
        magic, stream = sniff(open_raw(part.source))
        stack.callback(stream.close)
        if magic == PARQUET_MAGIC:
            if not stream.seekable():
                stream.close()
                stream = open_seekable(part.source)
                stack.callback(stream.close)
            parquet = ParquetInput(stream, spec.parquet_column, spec.key_type, where)
            yield from parquet.batches(part.row_groups)
            return
        check_parquet_only(where, magic, spec)
        check_named_format(str(part.source), magic)
        text = stack.enter_context(decompressing(stream, magic))
        if spec.csv_column is not None:
            yield from csv_batches(text, spec.csv_column, spec.key_type, where)
        else:
            yield from line_batches(skip_bom(read_chunks(text)), spec.key_type, where)


def check_parquet_only(where: str, magic: bytes, spec: SourceSpec) -> None:
    """InputError when ``spec`` reads Parquet only (``parquet_column`` without
    ``csv_column``) and the input ``where``, whose first bytes are ``magic``, is not
    Parquet (an empty input included): a text input is then a likely mistake, not lines."""
    if spec.parquet_column is not None and spec.csv_column is None and magic != PARQUET_MAGIC:
        raise InputError(
            f"{where} is not a Parquet file (it does not start with PAR1); "
            "--parquet-column reads Parquet inputs only"
        )


def parquet_row_group_sizes(ref: InputRef, spec: SourceSpec) -> list[int]:
    """The byte size of each row group of a Parquet input (for planning partitions);
    InputError, as reading would raise, for a bad column or file."""
    with ParquetInput(open_seekable(ref), spec.parquet_column, spec.key_type, str(ref)) as parquet:
        return parquet.row_group_sizes()
