"""Delta files: make one from two filter versions, read its header, apply it to a base.

A delta holds the flips from a base body to a target body of the same parameters, plus
the target's header verbatim (docs/format.md, "Delta file"). Encoding and applying run
in the C extension when it is available and on the numpy path of :mod:`.rice`
otherwise; both write identical bytes. Every function here raises
:class:`~bloomswarm.common.errors.DeltaError` on bad input and leaves no output file
(nor temporary file) behind on any failure.
"""

from __future__ import annotations

import contextlib
import hashlib
import mmap
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from .atomic_file import fsync_directory, write_atomically
from .delta_format import (
    DELTA_SUFFIX,
    ENCODING_RICE_GAPS,
    PAYLOAD_OFFSET,
    DeltaHeader,
)
from .errors import DeltaError, FormatError, WrongBase
from .fastpath import EXTENSION, Engine, resolve_engine
from .header import HEADER_SIZE, FilterHeader

_READ_STEP = 8 << 20
"""Bytes of the base read (and hashed while still in the CPU's cache) at a time."""

_C = EXTENSION if EXTENSION is not None and hasattr(EXTENSION, "delta_apply") else None
"""The C extension when it has the delta functions (an older build falls back to numpy)."""


def _use_c(engine: Engine) -> bool:
    return resolve_engine(engine) == "c" and _C is not None


def make_delta(base: Path, target: Path, out: Path, *, engine: Engine = "auto") -> DeltaHeader:
    """Write the delta from filter file ``base`` to filter file ``target`` to ``out`` atomically.

    Raises DeltaError when either file is not a valid filter, when their parameters differ
    (m, k, layout, seed, hash: a resize has no delta), or when a body does not match the
    SHA-256 its header records.
    """
    resolve_engine(engine)
    with _mapped_filter(base, "base") as (base_header, base_map), \
            _mapped_filter(target, "target") as (target_header, target_map):
        if base_header.params != target_header.params:
            raise DeltaError(
                f"cannot diff filters of different parameters: {_describe(base_header)} "
                f"vs {_describe(target_header)} (a resized filter has no delta)"
            )
        base_body = memoryview(base_map)[HEADER_SIZE:]
        target_body = memoryview(target_map)[HEADER_SIZE:]
        try:
            if hashlib.sha256(base_body).digest() != base_header.body_sha256:
                raise DeltaError(f"base {base}: body does not match the SHA-256 in its header")
            if hashlib.sha256(target_body).digest() != target_header.body_sha256:
                raise DeltaError(f"target {target}: body does not match the SHA-256 in its header")
            target_sha256 = hashlib.sha256(target_map).digest()
            quotients, remainders, flips, rice_k = encode_bodies(base_body, target_body, engine=engine)
        finally:
            base_body.release()
            target_body.release()
        header = DeltaHeader(
            base_version=base_header.filter_version,
            target_version=target_header.filter_version,
            base_body_sha256=base_header.body_sha256,
            target_sha256=target_sha256,
            target_header=target_map[:HEADER_SIZE],
            encoding=ENCODING_RICE_GAPS,
            rice_k=rice_k,
            flips=flips,
            body_size=target_header.body_length,
            quotient_bytes=len(quotients),
            remainder_bytes=len(remainders),
        )
    write_atomically(out, (header.pack(), quotients, remainders), mode=0o444)
    return header


def _describe(header: FilterHeader) -> str:
    p = header.params
    return f"{p.layout.label} m={p.num_bits} k={p.num_probes} seed={p.hash_seed}"


def encode_bodies(
    base: bytes | memoryview,
    target: bytes | memoryview,
    *,
    engine: Engine = "auto",
    rice_k: int | None = None,
) -> tuple[bytes, bytes, int, int]:
    """Encode the flips between two equally long bodies: (quotients, remainders, flips, rice_k).

    ``rice_k`` defaults to :func:`rice.choose_rice_k` of the flip count (tests force others).
    """
    if len(base) != len(target):
        raise DeltaError(f"bodies of different sizes: {len(base)} and {len(target)} bytes")
    from . import rice  # numpy: imported by the first encode, not by every agent at start

    body_bits = len(base) * 8
    if _use_c(engine):
        assert _C is not None
        flips = int(_C.delta_count(base, target))
        rice_k = rice.choose_rice_k(flips, body_bits) if rice_k is None else rice_k
        q_buf = bytearray((flips + (body_bits >> rice_k) + 7) // 8 + 8)
        r_buf = bytearray((flips * rice_k + 7) // 8)
        q_bits = int(_C.delta_encode(base, target, rice_k, q_buf, r_buf))
        return bytes(memoryview(q_buf)[:(q_bits + 7) // 8]), bytes(r_buf), flips, rice_k
    import numpy as np

    base_u8 = np.frombuffer(base, dtype=np.uint8)
    target_u8 = np.frombuffer(target, dtype=np.uint8)
    flips = rice.count_flips(base_u8, target_u8)
    rice_k = rice.choose_rice_k(flips, body_bits) if rice_k is None else rice_k
    quotients, remainders = rice.encode_positions(rice.flip_positions(base_u8, target_u8), rice_k)
    return quotients, remainders, flips, rice_k


def patch_body(
    body: bytearray | memoryview | mmap.mmap,
    header: DeltaHeader,
    quotients: bytes | memoryview,
    remainders: bytes | memoryview,
    *,
    engine: Engine = "auto",
) -> None:
    """Flip in ``body`` (writable, ``header.body_size`` bytes) the bits the streams encode.

    Raises DeltaError when the streams are corrupt; ``body`` may then be partly patched.
    """
    if len(body) != header.body_size:
        raise DeltaError(f"body of {len(body)} bytes, the delta is for {header.body_size}")
    body_bits = header.body_size * 8
    if _use_c(engine):
        assert _C is not None
        try:
            _C.delta_apply(body, quotients, remainders, header.rice_k, header.flips)
        except ValueError as exc:
            raise DeltaError(f"corrupt delta: {exc}") from None
        return
    import numpy as np  # the C engine needs neither numpy nor rice

    from . import rice

    body_u8 = np.frombuffer(body, dtype=np.uint8)
    try:
        for positions in rice.decode_positions(quotients, remainders, header.rice_k, header.flips, body_bits):
            rice.xor_positions(body_u8, positions)
    finally:
        del body_u8  # the caller may release or close ``body`` (an mmap) right after


def read_delta_header(path: Path) -> DeltaHeader:
    """Read and validate the header of the delta file at ``path`` (size checked too).

    Raises DeltaError for a malformed or truncated delta and OSError when it cannot be read.
    """
    with open(path, "rb") as fh:
        return DeltaHeader.unpack(fh.read(PAYLOAD_OFFSET), os.fstat(fh.fileno()).st_size)


def apply_delta(
    base: Path,
    delta: Path,
    out: Path,
    *,
    expected_sha256: bytes | None = None,
    engine: Engine = "auto",
) -> DeltaHeader:
    """Write the target of ``delta`` to ``out``, patching a copy of the filter file ``base``.

    Checks, in order: the delta's header; that ``base`` is a filter whose header records
    the body SHA-256 the delta was made from, and whose body still hashes to it (else
    :class:`~bloomswarm.common.errors.WrongBase`); the streams (positions within the body,
    exactly ``flips`` of them); and the result's SHA-256 against the delta's
    ``target_sha256`` and ``expected_sha256`` when given. On success the file at ``out``
    hashes to ``target_sha256``: a caller may take that as the file's digest without
    reading it again.

    One pass over the base: its body is read into the output's mapping a few MiB at a
    time, each step hashed while in cache; then patched, and the whole result hashed
    once. Every long step (read, hashes, patch in C, fsync) runs without the GIL, so this
    may run on a worker thread without holding up the caller's other threads. Raises
    DeltaError on any failure and leaves neither ``out`` nor a temporary file; OSError
    when a file cannot be read or written (or the disk is full).
    """
    with open(delta, "rb") as fh:
        header = DeltaHeader.unpack(fh.read(PAYLOAD_OFFSET), os.fstat(fh.fileno()).st_size)
        quotients = fh.read(header.quotient_bytes)
        remainders = fh.read(header.remainder_bytes)
    if len(quotients) != header.quotient_bytes or len(remainders) != header.remainder_bytes:
        raise DeltaError(f"delta {delta} truncated while reading")
    with open(base, "rb") as src:
        try:
            base_header = FilterHeader.unpack(src.read(HEADER_SIZE), os.fstat(src.fileno()).st_size)
        except FormatError as exc:  # its header damaged: not the file the delta was made from
            raise WrongBase(f"base {base} is not a valid filter file: {exc}") from None
        _check_base(base_header, header)
        with _temporary_beside(out) as (tmp_fd, tmp_path):
            # Blocks reserved first: a full disk is an OSError here, never a SIGBUS in the mapping.
            os.posix_fallocate(tmp_fd, 0, HEADER_SIZE + header.body_size)
            with mmap.mmap(tmp_fd, HEADER_SIZE + header.body_size) as mapped:
                mapped[:HEADER_SIZE] = header.target_header
                body = memoryview(mapped)[HEADER_SIZE:]
                try:
                    if _read_hashing(src.fileno(), HEADER_SIZE, body) != header.base_body_sha256:
                        raise WrongBase(
                            f"wrong base: the base body was modified: v{base_header.filter_version} "
                            f"at {base} no longer hashes to the body SHA-256 its header records"
                        )
                    patch_body(body, header, quotients, remainders, engine=engine)
                finally:
                    body.release()
                digest = hashlib.sha256(mapped).digest()
                _check_result(digest, header, expected_sha256)
            # No mapped.flush(): msync holds the GIL for the whole write-back. On Linux the
            # mapping and the file share the page cache, so fsync writes the patch out.
            os.fchmod(tmp_fd, 0o444)
            os.fsync(tmp_fd)
            os.replace(tmp_path, out)
    fsync_directory(out.parent if str(out.parent) else Path("."))
    return header


def _check_base(base_header: FilterHeader, header: DeltaHeader) -> None:
    if base_header.body_sha256 != header.base_body_sha256:
        raise WrongBase(
            f"wrong base: the delta turns v{header.base_version} (body SHA-256 "
            f"{header.base_body_sha256.hex()[:16]}...) into v{header.target_version}; "
            f"the base is v{base_header.filter_version} ({base_header.body_sha256.hex()[:16]}...)"
        )
    if base_header.params != header.target.params:
        raise WrongBase("wrong base: its parameters differ from the delta's target")


def _check_result(digest: bytes, header: DeltaHeader, expected_sha256: bytes | None) -> None:
    if digest != header.target_sha256:
        raise DeltaError(
            f"the patched file's SHA-256 does not match the delta's target v{header.target_version} "
            "(the delta is corrupt)"
        )
    if expected_sha256 is not None and digest != expected_sha256:
        raise DeltaError(
            f"the patched file's SHA-256 {digest.hex()} is not the expected {expected_sha256.hex()}"
        )


def temporaries_of(out: Path) -> list[Path]:
    """The temporary files that writing ``out`` left behind: those of a process that was
    killed while writing it (any other failure removes its own)."""
    return sorted(out.parent.glob(f"{_TMP_PREFIX}{out.name}.*"))


_TMP_PREFIX = ".tmp-"


@contextlib.contextmanager
def _temporary_beside(out: Path) -> Iterator[tuple[int, str]]:
    """A new temporary file in ``out``'s directory, removed unless renamed away."""
    fd, tmp_path = tempfile.mkstemp(prefix=f"{_TMP_PREFIX}{out.name}.",
                                    dir=out.parent if str(out.parent) else ".")
    try:
        yield fd, tmp_path
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_path)
        raise
    finally:
        os.close(fd)


def _read_hashing(src_fd: int, offset: int, into: memoryview) -> bytes:
    """Read ``len(into)`` bytes of ``src_fd`` from ``offset`` into ``into`` (the output's
    mapping: the kernel copies the base's pages straight into the output's), hashing each
    step while it is in cache; their SHA-256. One read of the base, without the GIL."""
    digest = hashlib.sha256()
    done, length = 0, len(into)
    while done < length:
        size = min(_READ_STEP, length - done)
        with into[done:done + size] as step:
            got = 0
            while got < size:
                with step[got:] as rest:
                    read = os.preadv(src_fd, [rest], offset + done + got)
                if read == 0:
                    raise DeltaError(f"base truncated: {offset + done + got} of {offset + length} bytes")
                got += read
            digest.update(step)
        done += size
    return digest.digest()


@contextlib.contextmanager
def _mapped_filter(path: Path, role: str) -> Iterator[tuple[FilterHeader, mmap.mmap]]:
    """A validated filter file mapped read-only with its header."""
    with open(path, "rb") as fh:
        try:
            header = FilterHeader.unpack(fh.read(HEADER_SIZE), os.fstat(fh.fileno()).st_size)
        except FormatError as exc:
            raise DeltaError(f"{role} {path} is not a valid filter file: {exc}") from None
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            yield header, mapped


__all__ = [
    "DELTA_SUFFIX", "DeltaHeader", "apply_delta", "encode_bodies", "make_delta", "patch_body",
    "read_delta_header", "temporaries_of",
]
