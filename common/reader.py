"""The read-only filter: a validated file mapped with mmap, answering membership queries.

Opening costs one ``pread`` of the header and one ``mmap`` call, whatever the file's size:
the body is never read up front, and every process that opens the same file shares one
page-cache copy of it. The header is validated before the mapping exists, so a truncated
or corrupt file raises FormatError and can never cause SIGBUS.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import mmap
import os
import stat
import threading
import weakref
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from bitarray import bitarray

from . import batch
from .errors import FormatError
from .fastpath import EXTENSION, Engine, resolve_engine
from .header import HEADER_SIZE, FilterHeader
from .keys import Key
from .params import FilterParams, Layout
from .probing import make_contains

_PARALLEL_MIN_KEYS = 1 << 16
"""Below this many keys a batch runs in the calling thread whatever ``threads`` says."""

_NO_BODY: npt.NDArray[np.uint8] = np.zeros(0, dtype=np.uint8)
"""The body of a closed filter: :meth:`Filter._body` raises ValueError when it finds it."""
_CLOSE_LOCK = threading.Lock()
"""Makes two :meth:`Filter.close` calls from different threads one close."""


def reject_single_key(keys: object) -> None:
    """TypeError when a batch argument is one key (str, bytes, bytearray, memoryview): each
    of those is iterable, and would otherwise be answered one character (byte) at a time."""
    if isinstance(keys, (str, bytes, bytearray, memoryview)):
        raise TypeError(
            f"contains_many() takes a collection of keys, not one {type(keys).__name__} key: "
            "use `key in filter` for one key, or pass [key]"
        )


def _check_regular_file(path: Path, mode: int) -> None:
    """FormatError for a FIFO, device or socket; a directory keeps its OSError (EISDIR)."""
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
    raise FormatError(f"not a regular file: {path} (a FIFO, device or socket cannot be a filter file)")


class Filter:
    """A filter file mapped read-only. Use :meth:`open`; ``key in f`` tests membership.

    Lookups are thread-safe. Do not :meth:`close` a filter that other threads are still
    using: drop the reference instead, and the mapping is released when the last user
    is done (this is what :class:`~bloomswarm.common.live.LiveFilter` does on a swap).

    After :meth:`close`, every query (``in``, :meth:`contains_many`, :meth:`fill_ratio`,
    :meth:`expected_fpp`) raises ``ValueError("filter is closed")``, with either engine.
    A query that another thread is running when the filter is closed either finishes
    with the right answer (the mapping then stays until it returns) or raises that same
    ValueError; it never reads freed memory or fails with another error.
    """

    path: Path
    identity: tuple[int, int]
    """(device, inode) of the mapped file: tells two installed versions apart."""
    header: FilterHeader
    engine: str
    _mm: mmap.mmap | None
    _view: memoryview | None
    _body_u8: npt.NDArray[np.uint8]

    @classmethod
    def open(cls, path: str | os.PathLike[str], *, verify: bool = False, engine: Engine = "auto") -> Filter:
        """Map and validate the filter file at ``path``.

        With ``verify=True`` the body's SHA-256 is checked too (reads the whole file).
        Raises FormatError for a malformed, truncated or (when verified) corrupt file and
        for a path that is not a regular file (a FIFO, device or socket: refused at once,
        never waited on), OSError when the file cannot be opened (a directory:
        IsADirectoryError), and ConfigError for an unknown or unavailable ``engine``.
        """
        chosen = resolve_engine(engine)
        instance: Filter = _CFilter() if chosen == "c" else _PyFilter()
        instance._attach(Path(path), verify)
        return instance

    def _attach(self, path: Path, verify: bool) -> None:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer (forever,
        # and under LiveFilter's lock). Nothing is read before the type check below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        try:
            info = os.fstat(fd)
            _check_regular_file(path, info.st_mode)
            os.set_blocking(fd, True)
            size = info.st_size
            header = FilterHeader.unpack(os.pread(fd, HEADER_SIZE, 0), size)
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        view = memoryview(mm)[HEADER_SIZE:]
        if verify and hashlib.sha256(view).digest() != header.body_sha256:
            view.release()
            mm.close()
            raise FormatError(f"{path}: body SHA-256 does not match the header (corrupt file)")
        self.path = path
        self.identity = (info.st_dev, info.st_ino)
        self.header = header
        self._mm = mm
        self._view = view
        self._body_u8 = np.frombuffer(view, dtype=np.uint8)
        self._bind_engine()

    def _bind_engine(self) -> None:
        raise NotImplementedError

    def _unbind_engine(self) -> None:
        raise NotImplementedError

    def _contains_array(self, keys: batch.U64Array) -> npt.NDArray[np.bool_]:
        raise NotImplementedError

    def _contains_sequence(self, keys: list[Key]) -> npt.NDArray[np.bool_]:
        raise NotImplementedError

    # -- queries -------------------------------------------------------------------

    def contains_many(
        self, keys: Iterable[Key] | np.ndarray, *, threads: int = 1
    ) -> npt.NDArray[np.bool_]:
        """Membership of each key, as a numpy bool array in input order.

        ``keys`` is a 1-D uint64/int64 numpy array (the fastest form) or an iterable of
        bytes / str / int keys. One key on its own (a str, bytes, bytearray or memoryview)
        raises TypeError rather than being taken as a sequence of one-character keys: use
        ``key in filter`` for one key. ``threads > 1`` splits a large array across that
        many threads (the C path runs without the GIL, so they use separate cores).
        Raises ValueError "filter is closed" once the filter is closed (see the class
        docstring).
        """
        reject_single_key(keys)
        self._check_open()
        if isinstance(keys, np.ndarray):
            u64 = batch.as_u64_keys(keys)
            if threads > 1 and len(u64) >= _PARALLEL_MIN_KEYS:
                return self._contains_array_parallel(u64, threads)
            return self._contains_array(u64)
        seq = keys if isinstance(keys, list) else list(keys)
        return self._contains_sequence(seq)

    def _batch_runner(self) -> Callable[[batch.U64Array], npt.NDArray[np.bool_]]:
        """What each thread of a parallel batch runs on its share of the keys."""
        return self._contains_array

    def _contains_array_parallel(self, keys: batch.U64Array, threads: int) -> npt.NDArray[np.bool_]:
        out = np.empty(len(keys), dtype=np.bool_)
        bounds = np.linspace(0, len(keys), threads + 1, dtype=np.int64)
        contains = self._batch_runner()

        def run(i: int) -> None:
            lo, hi = int(bounds[i]), int(bounds[i + 1])
            out[lo:hi] = contains(keys[lo:hi])

        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="bloomswarm-batch") as pool:
            list(pool.map(run, range(threads)))
        return out

    @property
    def params(self) -> FilterParams:
        """Layout, size, probe count and hash of this filter."""
        return self.header.params

    @property
    def version(self) -> int:
        """The publisher's version number of this file (0 when unversioned)."""
        return self.header.filter_version

    @property
    def key_count(self) -> int:
        """Number of insertions the filter was built with."""
        return self.header.key_count

    def fill_ratio(self) -> float:
        """Fraction of the bits that are set (reads the whole body)."""
        ones = int(np.bitwise_count(self._body()).sum(dtype=np.uint64))
        return ones / self.params.num_bits

    def expected_fpp(self) -> float:
        """False-positive rate for a random absent key, computed from the bits actually set.

        Blocked: the mean over blocks of (bits set in the block / 512)^k; standard:
        (fill ratio)^k. Reads the whole body.
        """
        k = self.params.num_probes
        if self.params.layout == Layout.STANDARD:
            return self.fill_ratio() ** k  # "filter is closed" raised there
        body = self._body()  # held for the whole computation: a close() meanwhile cannot empty it
        blocks = body.reshape(-1, 64)
        total = 0.0
        step = 1 << 16
        for start in range(0, len(blocks), step):
            ones = np.bitwise_count(blocks[start:start + step]).sum(axis=1, dtype=np.uint32)
            total += float(((ones / 512.0) ** k).sum())
        return total / len(blocks)

    # -- lifetime ------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """True once :meth:`close` has run."""
        return self._mm is None

    def close(self) -> None:
        """Release the mapping now (idempotent). Later lookups raise ValueError "filter is
        closed"; the mapping outlives this call while a query under way still uses it."""
        with _CLOSE_LOCK:
            mm, view = self._mm, self._view
            if mm is None:
                return
            self._body_u8 = _NO_BODY  # first: a query from now on raises ValueError
            self._unbind_engine()
            self._mm = None
            self._view = None
        if view is not None:
            with contextlib.suppress(BufferError):  # a batch under way still holds the body
                view.release()
        with contextlib.suppress(BufferError):
            mm.close()

    def _check_open(self) -> None:
        """ValueError "filter is closed" once :meth:`close` has run (it empties the body
        before it drops the mapping)."""
        self._body()

    def _body(self) -> npt.NDArray[np.uint8]:
        """The body as uint8, for a query to hold while it runs; ValueError once closed."""
        body = self._body_u8
        if body is _NO_BODY:
            raise ValueError("filter is closed")
        return body

    def __enter__(self) -> Filter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        p = self.params
        state = "closed" if self.closed else str(self.path)
        return (
            f"<Filter v{self.version} {p.layout.label} bits={p.num_bits} k={p.num_probes} "
            f"keys={self.key_count} engine={self.engine} {state}>"
        )

    def __contains__(self, key: Key) -> bool:
        """True when ``key`` may be in the set; False when it certainly is not."""
        raise NotImplementedError


def _release_one_off(one_off: type, release_contains: Callable[[], None]) -> None:
    """Break the references from a :class:`_PyFilter`'s one-off class and generated test
    to its bits (see ``_PyFilter._bind_engine``)."""
    release_contains()
    with contextlib.suppress(AttributeError):
        delattr(one_off, "__contains__")


class _PyFilter(Filter):
    """The pure-Python reference path: mmh3 + bitarray over the mapping, numpy for batches."""

    engine = "python"

    def _bind_engine(self) -> None:
        assert self._view is not None
        self._bits = bitarray(buffer=self._view, endian="little")
        self._contains, self._release_contains = make_contains(self._bits, self.params)
        # ``key in f`` costs one Python frame instead of two when the generated test is the
        # class's own __contains__: give this instance a one-off subclass that has it.
        one_off = type(
            "_PyFilter", (_PyFilter,), {"__contains__": staticmethod(self._contains), "__slots__": ()}
        )
        self.__class__ = one_off
        # A filter dropped without close() (LiveFilter's old versions) must release the
        # mapping when it goes, not at the next collection of its one-off class.
        self._finalizer = weakref.finalize(self, _release_one_off, one_off, self._release_contains)

    def _unbind_engine(self) -> None:
        # The test, its namespace and the one-off class refer to each other: break that, or
        # ``_bits`` keeps the buffer exported (and the file mapped) until a collection.
        self._contains = _closed
        self.__class__ = _PyFilter
        self._finalizer()
        del self._bits

    def __contains__(self, key: Key) -> bool:
        return self._contains(key)

    def _contains_array(self, keys: batch.U64Array) -> npt.NDArray[np.bool_]:
        return batch.contains_u64(self._body(), keys, self.params)

    def _batch_runner(self) -> Callable[[batch.U64Array], npt.NDArray[np.bool_]]:
        # The body is taken once for the whole batch, as the C engine holds its buffer: a
        # close() while the threads run cannot leave some of them an empty body.
        body, params = self._body(), self.params
        return lambda keys: batch.contains_u64(body, keys, params)

    def _contains_sequence(self, keys: list[Key]) -> npt.NDArray[np.bool_]:
        contains = self._contains
        return np.fromiter((contains(k) for k in keys), dtype=np.bool_, count=len(keys))


def _closed(key: object) -> bool:
    raise ValueError("filter is closed")


if EXTENSION is not None:
    _ProbeBase: Any = EXTENSION.Probe
else:  # pragma: no cover - exercised by the pure-Python CI leg

    class _ProbeBase:  # type: ignore[no-redef]
        """Stand-in so the class statement below works without the extension."""


class _CFilter(_ProbeBase, Filter):  # type: ignore[misc]
    """The C path: ``key in f`` goes straight to the extension's sq_contains slot."""

    engine = "c"

    def _bind_engine(self) -> None:
        p = self.params
        self._bind(self._view, int(p.layout), p.hash_seed, p.num_probes, p.num_bits)

    def _unbind_engine(self) -> None:
        self._unbind()

    def _contains_array(self, keys: batch.U64Array) -> npt.NDArray[np.bool_]:
        out = np.empty(len(keys), dtype=np.bool_)
        self._contains_u64(keys, out)
        return out

    def _contains_sequence(self, keys: list[Key]) -> npt.NDArray[np.bool_]:
        out = np.empty(len(keys), dtype=np.bool_)
        self._contains_keys(keys, out)
        return out
