"""Building a filter in memory and writing it as an immutable file."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from itertools import islice
from pathlib import Path

import numpy as np
from bitarray import bitarray

from . import batch
from .atomic_file import write_atomically
from .fastpath import EXTENSION as _C
from .fastpath import Engine, resolve_engine
from .header import FilterHeader
from .keys import Key
from .params import FilterParams, Layout
from .probing import add_keys_python
from .sizing import size_filter

_BATCH = 65536
"""Keys inserted per step when adding from an iterable."""


class FilterBuilder:
    """A mutable filter held in memory: add keys, merge partial filters, write the file.

    Not thread-safe: one builder is filled by one thread (partitions of a parallel build
    each use their own builder and are merged with :meth:`merge`).
    """

    def __init__(
        self,
        params: FilterParams,
        *,
        capacity: int = 0,
        target_fpp: float = 0.01,
        engine: Engine = "auto",
        body: bytes | bytearray | None = None,
        key_count: int = 0,
    ) -> None:
        """Create an empty builder, or one holding a copy of ``body`` (``key_count`` keys)."""
        self.params = params
        self.capacity = capacity
        self.target_fpp = target_fpp
        self.key_count = key_count
        self.engine = resolve_engine(engine)
        if body is None:
            self._body = bytearray(params.num_bytes)
        else:
            if len(body) != params.num_bytes:
                raise ValueError(f"body has {len(body)} bytes, params need {params.num_bytes}")
            self._body = bytearray(body)
        self._bits = bitarray(buffer=self._body, endian="little")
        self._body_u8 = np.frombuffer(self._body, dtype=np.uint8)

    @classmethod
    def for_capacity(
        cls,
        capacity: int,
        target_fpp: float = 0.01,
        *,
        layout: Layout = Layout.BLOCKED,
        seed: int = 0,
        engine: Engine = "auto",
    ) -> FilterBuilder:
        """An empty builder sized so that ``capacity`` keys give at most ``target_fpp``."""
        num_bits, num_probes = size_filter(capacity, target_fpp, layout)
        params = FilterParams(layout, num_bits, num_probes, seed)
        return cls(params, capacity=capacity, target_fpp=target_fpp, engine=engine)

    @property
    def body(self) -> memoryview:
        """A read-only view of the bit array."""
        return memoryview(self._body).toreadonly()

    def add(self, key: Key) -> None:
        """Insert one key."""
        self.add_many((key,))

    def add_many(self, keys: Iterable[Key] | np.ndarray) -> int:
        """Insert every key of an iterable, or of a 1-D uint64/int64 numpy array.

        Returns the number of keys inserted. On a bad key (TypeError, OverflowError,
        UnicodeEncodeError) the keys before it may already be inserted.
        """
        if isinstance(keys, np.ndarray):
            u64 = batch.as_u64_keys(keys)
            if self.engine == "c":
                _c_add_u64(self._body, self.params, u64)
            else:
                batch.add_u64(self._body_u8, u64, self.params)
            self.key_count += len(u64)
            return len(u64)
        added = 0
        iterator = iter(keys)
        while chunk := list(islice(iterator, _BATCH)):
            if self.engine == "c":
                _c_add_keys(self._body, self.params, chunk)
            else:
                add_keys_python(self._bits, self.params, chunk)
            self.key_count += len(chunk)
            added += len(chunk)
        return added

    def merge(self, other: FilterBuilder) -> None:
        """OR ``other``'s bits into this filter. ValueError unless the params are identical."""
        if other.params != self.params:
            raise ValueError(
                f"cannot merge filters with different parameters: {self.params} vs {other.params}"
            )
        np.bitwise_or(self._body_u8, other._body_u8, out=self._body_u8)
        self.key_count += other.key_count

    def header(self, *, version: int = 0, created_at: int | None = None) -> FilterHeader:
        """The header of the file this builder would write now."""
        return FilterHeader(
            params=self.params,
            key_count=self.key_count,
            capacity=self.capacity,
            target_fpp=self.target_fpp,
            filter_version=version,
            created_at=int(time.time()) if created_at is None else created_at,
            body_sha256=hashlib.sha256(self._body).digest(),
        )

    def write(self, path: str | Path, *, version: int = 0, created_at: int | None = None) -> FilterHeader:
        """Write the filter file atomically (temporary file, fsync, rename); return its header."""
        header = self.header(version=version, created_at=created_at)
        write_atomically(path, (header.pack(), self._body), mode=0o444)
        return header


def _c_add_u64(body: bytearray, params: FilterParams, keys: np.ndarray) -> None:
    assert _C is not None
    _C.add_u64(body, int(params.layout), params.hash_seed, params.num_probes, params.num_bits, keys)


def _c_add_keys(body: bytearray, params: FilterParams, keys: list[Key]) -> None:
    assert _C is not None
    _C.add_keys(body, int(params.layout), params.hash_seed, params.num_probes, params.num_bits, keys)
