"""Where input data lives: local files, directories and globs, and ``s3://`` prefixes.

:func:`resolve_inputs` turns the user's patterns into a sorted list of input references
(:class:`LocalInput` or :class:`S3Input`); the rest of the publisher opens them through
:func:`open_raw` and :func:`open_seekable` and never cares which kind it holds. S3
objects are read through the project's storage client (:class:`S3ObjectStore`), streamed,
never downloaded whole. References are small frozen dataclasses, so they can be sent to
Dask workers, which open them again there.
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import io
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from bloomswarm.common.errors import ConfigError, InputError
from bloomswarm.common.storage import S3Config, parse_s3_url

if TYPE_CHECKING:  # imported by store_for: building from local files never loads boto3
    from bloomswarm.common.storage import S3ObjectStore

ENDPOINT_ENV = "BLOOMSWARM_S3_ENDPOINT_URL"
"""Environment variable naming the S3 endpoint for ``s3://`` inputs (MinIO, moto, ...).
Without it, and without an explicit config, boto3 decides (``AWS_ENDPOINT_URL_S3``,
``AWS_ENDPOINT_URL``, or AWS itself)."""

MAGIC_SIZE = 4


@dataclass(frozen=True)
class LocalInput:
    """A file on the local (or a shared) file system."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class S3Input:
    """One object: ``key`` relative to ``config``'s bucket and prefix."""

    config: S3Config
    key: str

    def __str__(self) -> str:
        return f"{self.config.url}/{self.key}"


InputRef = LocalInput | S3Input


def is_s3_url(pattern: str) -> bool:
    """Whether an input pattern names S3 objects rather than local files."""
    return pattern.startswith("s3://")


def expand_paths(patterns: Sequence[str]) -> list[Path]:
    """Resolve files, directories and globs to a list of files (each pattern's sorted, as
    :func:`resolve_inputs` does); InputError for a pattern that adds none."""
    files: list[Path] = []
    for pattern in patterns:
        files.extend(_expand_local(pattern))
    if not files:
        raise InputError(f"no input files in {', '.join(patterns)}")
    return files


def resolve_inputs(patterns: Sequence[str], s3_config: S3Config | None = None) -> list[InputRef]:
    """Resolve local patterns and ``s3://bucket/prefix`` URLs to input references.

    A local pattern is a file, a directory (its regular files, sorted; a directory
    without any is an InputError, not an input that adds no keys) or a glob (the regular
    files it matches; one matching none, directories only included, is an InputError
    too, whatever the other patterns hold); a path
    that exists is taken literally even when it holds glob characters (``keys[1].txt``).
    ``**`` matches any depth of directories, hidden ones excepted, and follows a
    symlinked directory only to a directory that walk has not visited yet: a symlink
    loop (``d/up -> ..``) or a second link to the same directory is not read again.
    An S3 URL stands for every object under the prefix taken as a folder, sorted by key
    (folder markers, the zero-byte ``dir/`` objects the S3 console makes, are skipped),
    or for the one object it names.
    ``s3_config`` supplies the endpoint, region, profile and timeouts for S3 URLs (its
    bucket and prefix are replaced); without it the endpoint comes from
    ``$BLOOMSWARM_S3_ENDPOINT_URL`` or boto3's own settings. InputError when a pattern
    matches nothing; StorageError when the store cannot be listed.
    """
    refs: list[InputRef] = []
    for pattern in patterns:
        if is_s3_url(pattern):
            refs.extend(_list_s3(pattern, s3_config))
        else:
            refs.extend(LocalInput(p) for p in _expand_local(pattern))
    if not refs:
        raise InputError(f"no input files in {', '.join(patterns)}")
    return refs


def _expand_local(pattern: str) -> list[Path]:
    # An existing path is literal first: a file may be named "keys[1].txt".
    if os.path.isdir(pattern):
        files = sorted(p for p in Path(pattern).iterdir() if p.is_file())
        if not files:  # an input that adds nothing is a mistake, not an empty data set
            raise InputError(f"no input files in directory {pattern} "
                             "(it holds no regular files; subdirectories are not read)")
        return files
    if os.path.exists(pattern):
        return [Path(pattern)]
    if glob.has_magic(pattern):
        matches = sorted({Path(p) for p in _glob(pattern)})
        files = [p for p in matches if p.is_file()]
        if not files:  # as for a directory: a pattern that adds nothing is a mistake
            raise InputError(f"no files match {pattern}" + (
                " (it matches directories only; globs do not read inside them)" if matches else ""))
        return files
    raise InputError(f"input not found: {pattern}")


_RECURSIVE = "**"
"""A path component that matches any depth of directories (``glob``'s ``recursive=True``)."""


def _glob(pattern: str) -> Iterator[str]:
    """``glob.iglob(pattern, recursive=True)``, except that ``**`` walks each directory
    once: a symlinked directory is followed only to a directory this walk has not seen
    (by device and inode), so a symlink loop ends instead of recursing until the path is
    too long (2**40 paths for two looping links)."""
    parts = pattern.split("/")
    if _RECURSIVE not in parts:
        yield from glob.iglob(pattern)
        return
    at = parts.index(_RECURSIVE)
    head, rest = "/".join(parts[:at]), parts[at + 1:]
    if at > 0 and not head:  # "/**/...": the root
        head = "/"
    bases = (glob.iglob(head) if glob.has_magic(head) else iter([head])) if head else iter([""])
    for base in bases:
        if base and not os.path.isdir(base):
            continue
        for directory in _walk_once(base):
            if not rest:  # "DIR/**": everything under it
                yield from (os.path.join(directory, name) for name in _visible(directory))
            elif rest == [""]:  # "DIR/**/": directories only
                yield os.path.join(directory, "")
            else:
                yield from _glob(os.path.join(glob.escape(directory), *rest))


def _walk_once(base: str) -> Iterator[str]:
    """``base`` ("" for the working directory) and the non-hidden directories under it,
    top down, each (device, inode) once: symlinked directories are followed unless the
    walk already went through the directory they point to, or it holds ``base`` (an
    ancestor: following it would come back here)."""
    seen = _ancestors(os.path.realpath(base or os.curdir))
    for path, subdirs, _files in os.walk(base or os.curdir, followlinks=True):
        try:
            stat = os.stat(path)
        except OSError:  # vanished, or a dangling link: glob skips it as well
            subdirs.clear()
            continue
        if (stat.st_dev, stat.st_ino) in seen:
            subdirs.clear()
            continue
        seen.add((stat.st_dev, stat.st_ino))
        subdirs[:] = sorted(name for name in subdirs if not name.startswith("."))
        if base:
            yield path
        else:  # "." -> "", "./sub" -> "sub": the paths glob makes of a relative pattern
            relative = os.path.relpath(path)
            yield "" if relative == os.curdir else relative


def _ancestors(path: str) -> set[tuple[int, int]]:
    """(device, inode) of every directory above the absolute ``path``, up to the root."""
    found: set[tuple[int, int]] = set()
    parent = os.path.dirname(path)
    while True:
        try:
            stat = os.stat(parent)
        except OSError:  # an unreadable ancestor: a link to it is simply followed
            pass
        else:
            found.add((stat.st_dev, stat.st_ino))
        if os.path.dirname(parent) == parent:
            return found
        parent = os.path.dirname(parent)


def _visible(directory: str) -> list[str]:
    """Names in ``directory`` that ``**`` matches: all but hidden ones."""
    try:
        return sorted(name for name in os.listdir(directory or os.curdir) if not name.startswith("."))
    except OSError:
        return []


def s3_config_for(url: str, template: S3Config | None = None) -> S3Config:
    """The S3Config of ``url`` (bucket and prefix) with the other settings of ``template``."""
    try:
        bucket, prefix = parse_s3_url(url)
    except ConfigError as exc:
        raise InputError(str(exc)) from None
    if template is not None:
        return dataclasses.replace(template, bucket=bucket, prefix=prefix)
    endpoint = os.environ.get(ENDPOINT_ENV) or None
    return S3Config(bucket=bucket, prefix=prefix, endpoint_url=endpoint)


def _list_s3(url: str, template: S3Config | None) -> list[InputRef]:
    config = s3_config_for(url, template)
    keys = [k for k in store_for(config).list("") if not _is_folder_marker(k)]
    for key in keys:
        if key.startswith("/"):  # "dir//k": no store key can start with "/"
            raise InputError(f"cannot read {config.url}/{key}: an object key with an empty "
                             "folder name (\"//\") is not supported; rename the object")
    if keys:
        return [S3Input(config, key) for key in keys]
    if config.prefix:  # maybe the URL names one object
        parent, _, name = config.prefix.rpartition("/")
        single = dataclasses.replace(config, prefix=parent)
        if store_for(single).exists(name):
            return [S3Input(single, name)]
    raise InputError(f"no objects under {url}")


def _is_folder_marker(key: str) -> bool:
    """Whether a listed key (relative to the URL's prefix) is a folder marker: ``""``
    for the prefix's own ``dir/`` object, or any other key ending in "/"."""
    return not key or key.endswith("/")


@functools.lru_cache(maxsize=16)
def store_for(config: S3Config) -> S3ObjectStore:
    """One storage client per configuration and process (boto3 clients are thread-safe)."""
    from bloomswarm.common.storage import S3ObjectStore

    return S3ObjectStore(config)


def input_size(ref: InputRef) -> int:
    """The input's size in bytes (a stat, or a HEAD request)."""
    if isinstance(ref, S3Input):
        return store_for(ref.config).head(ref.key).size
    try:
        return ref.path.stat().st_size
    except OSError as exc:
        raise InputError(f"cannot open {ref}: {exc.strerror or exc}") from exc


def read_magic(ref: InputRef, size: int) -> bytes:
    """The input's first bytes (up to 4), read with one small request; ``size`` is its size."""
    if size == 0:
        return b""
    if isinstance(ref, S3Input):
        with store_for(ref.config).open_stream(ref.key, end=min(MAGIC_SIZE, size)) as stream:
            return stream.read()
    with open_raw(ref) as stream:
        return stream.read(MAGIC_SIZE)


def open_raw(ref: InputRef, start: int = 0) -> BinaryIO:
    """Open the input's raw bytes from offset ``start`` (local files are seekable; S3
    streams are forward-only). InputError or StorageError when it cannot be opened."""
    if isinstance(ref, S3Input):
        return store_for(ref.config).open_stream(ref.key, start=start)
    try:
        raw = open(ref.path, "rb")  # noqa: SIM115 - returned to the caller, who closes it
    except OSError as exc:
        raise InputError(f"cannot open {ref}: {exc.strerror or exc}") from exc
    if start:
        raw.seek(start)
    return raw


def open_seekable(ref: InputRef) -> BinaryIO:
    """Open the input for random access (Parquet needs it): a local file, or an S3 object
    read through ranged GETs of just the bytes asked for."""
    if isinstance(ref, S3Input):
        store = store_for(ref.config)
        size = store.head(ref.key).size
        return io.BufferedReader(_S3RangeFile(store, ref.key, size), buffer_size=1 << 20)
    return open_raw(ref)


def sniff(stream: BinaryIO) -> tuple[bytes, BinaryIO]:
    """Return the stream's first bytes (up to 4) and a stream that still starts with them."""
    if stream.seekable():
        position = stream.tell()
        magic = stream.read(MAGIC_SIZE)
        stream.seek(position)
        return magic, stream
    magic = stream.read(MAGIC_SIZE)
    return magic, io.BufferedReader(_Prefixed(magic, stream), buffer_size=1 << 20)


class _Prefixed(io.RawIOBase):
    """``prefix`` followed by the rest of ``stream``: undoes a read on a forward-only stream."""

    def __init__(self, prefix: bytes, stream: BinaryIO) -> None:
        super().__init__()
        self._prefix = prefix
        self._stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self._prefix:
            size = min(len(buffer), len(self._prefix))
            buffer[:size] = self._prefix[:size]
            self._prefix = self._prefix[size:]
            return size
        data = self._stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._stream.close()
        super().close()


class _S3RangeFile(io.RawIOBase):
    """A seekable, read-only view of an S3 object: every read is one ranged GET."""

    def __init__(self, store: S3ObjectStore, key: str, size: int) -> None:
        super().__init__()
        self._store = store
        self._key = key
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise ValueError("negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        want = min(len(buffer), self._size - self._pos)
        if want <= 0:
            return 0
        with self._store.open_stream(self._key, start=self._pos, end=self._pos + want) as body:
            done = 0
            view = memoryview(buffer)
            while done < want:
                got = body.readinto(view[done:want])
                if not got:
                    raise InputError(f"{self._store.config.url}/{self._key}: object ended early")
                done += got
        self._pos += done
        return done
