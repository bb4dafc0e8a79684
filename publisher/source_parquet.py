"""Parquet inputs: one column's values as keys, streamed record batch by record batch.

Needs the optional ``pyarrow`` dependency (``pip install 'bloomswarm[parquet]'``); without
it, reading a Parquet file raises InputError saying so. Memory stays bounded: only the
chosen column is read, one row group's column chunk and one record batch at a time.

Column types and key types:

- integer columns (int8 … uint64) hold int keys: they need ``--key-type int`` (a uint64
  value above 2**63-1 is an error);
- string and binary columns (also dictionary-encoded or "view") hold text: read as str
  (must be UTF-8), bytes, or decimal integers, like the lines of a text file;
- any other type is an error. Null and empty values are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Any, BinaryIO

import numpy as np

from bloomswarm.common.errors import InputError
from bloomswarm.common.keys import INT64_MAX

from .source_keys import KeyBatch, KeyType, convert_fields

PARQUET_MAGIC = b"PAR1"
BATCH_ROWS = 65536
"""Rows per record batch."""


def _pyarrow() -> tuple[ModuleType, ModuleType]:
    try:
        import pyarrow
        import pyarrow.compute
        import pyarrow.parquet
    except ImportError:
        raise InputError(
            "reading Parquet needs pyarrow: install bloomswarm[parquet] "
            "(pip install 'bloomswarm[parquet]')"
        ) from None
    return pyarrow, pyarrow.parquet


class ParquetInput:
    """An open Parquet file and its key column. Use as a context manager.

    Raises InputError (one line) for a missing pyarrow, an unreadable file, a missing
    column (listing the columns there are) or a column type that cannot hold keys.
    """

    def __init__(self, stream: BinaryIO, column: str | None, key_type: KeyType, where: str) -> None:
        self._pa, pq = _pyarrow()
        self._stream = stream
        self.where = where
        self.key_type = key_type
        try:
            try:
                self._file = pq.ParquetFile(stream)
                names: list[str] = list(self._file.schema_arrow.names)
            except self._pa.ArrowException as exc:
                raise InputError(f"cannot read {where} as Parquet: {exc}") from exc
            self.column = _choose_column(names, column, where)
            self._type = self._file.schema_arrow.field(self.column).type
            self._check_type()
        except BaseException:
            stream.close()
            raise

    def __enter__(self) -> ParquetInput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the underlying stream."""
        self._stream.close()

    @property
    def num_row_groups(self) -> int:
        """How many row groups the file has (the distributed build's unit of splitting)."""
        return int(self._file.metadata.num_row_groups)

    def row_group_sizes(self) -> list[int]:
        """Each row group's size in bytes (uncompressed), for balancing partitions."""
        metadata = self._file.metadata
        return [int(metadata.row_group(i).total_byte_size) for i in range(self.num_row_groups)]

    def batches(self, row_groups: Sequence[int] | None = None) -> Iterator[KeyBatch]:
        """The column's keys, batch by batch, from ``row_groups`` (default: all of them).
        Row numbers in error messages count from 1 over the whole file."""
        groups = range(self.num_row_groups) if row_groups is None else row_groups
        metadata = self._file.metadata
        starts = np.cumsum([0] + [metadata.row_group(i).num_rows for i in range(self.num_row_groups)])
        try:
            for group in groups:
                row = int(starts[group]) + 1
                for batch in self._file.iter_batches(
                    batch_size=BATCH_ROWS, row_groups=[group], columns=[self.column], use_threads=False
                ):
                    yield self._convert(batch.column(0), row)
                    row += batch.num_rows
        except self._pa.ArrowException as exc:
            raise InputError(f"cannot read {self.where}: {exc}") from exc

    def _check_type(self) -> None:
        types = self._pa.types
        value_type = self._type.value_type if types.is_dictionary(self._type) else self._type
        if types.is_integer(value_type):
            if self.key_type != "int":
                raise InputError(
                    f"{self.where}: column {self.column!r} holds integers ({value_type}); "
                    "read it with --key-type int"
                )
        elif not _is_text(self._pa, value_type):
            raise InputError(
                f"{self.where}: column {self.column!r} has type {value_type}; "
                "keys must be integers, strings or binary"
            )

    def _convert(self, array: Any, first_row: int) -> KeyBatch:
        pa = self._pa
        if pa.types.is_dictionary(array.type):
            array = array.dictionary_decode()
        if pa.types.is_integer(array.type):
            return self._ints(array, first_row)
        values: list[bytes | None] = array.cast(pa.binary()).to_pylist()
        fields = [b"" if v is None else v for v in values] if array.null_count else values
        return convert_fields(fields, self.key_type, self.where, first_row)  # type: ignore[arg-type]

    def _ints(self, array: Any, first_row: int) -> KeyBatch:
        present = array.drop_null() if array.null_count else array
        if self._pa.types.is_uint64(array.type) and len(present):
            largest = self._pa.compute.max(present).as_py()
            if largest > INT64_MAX:
                offset = next(i for i, v in enumerate(array.to_pylist()) if v is not None and v > INT64_MAX)
                raise InputError(
                    f"{self.where}:{first_row + offset}: integer {array[offset].as_py()} outside the "
                    "64-bit signed range"
                )
        result: KeyBatch = present.to_numpy(zero_copy_only=False).astype(np.int64, copy=False)
        return result


def _choose_column(names: list[str], column: str | None, where: str) -> str:
    if column is None:
        if len(names) == 1:
            return names[0]
        raise InputError(
            f"{where} is a Parquet file with {len(names)} columns: choose the key column "
            f"with --parquet-column; columns are {', '.join(names)}"
        )
    if column not in names:
        raise InputError(f"{where}: no column {column!r}; columns are {', '.join(names)}")
    return column


def _is_text(pa: ModuleType, value_type: Any) -> bool:
    checks = ("is_string", "is_large_string", "is_string_view", "is_binary", "is_large_binary",
              "is_binary_view", "is_fixed_size_binary")  # the *_view checks are pyarrow >= 16
    return any(getattr(pa.types, name, lambda _: False)(value_type) for name in checks)
