"""The 4096-byte file header: packing, unpacking and validation (docs/format.md).

Validation happens here, on bytes read with ordinary file I/O, before any mapping of
the body exists: a malformed or truncated file raises FormatError, never SIGBUS.
"""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass

from .errors import FormatError
from .params import FilterParams, HashId, Layout, params_problem

MAGIC = b"BLMSWRM\x00"
FORMAT_VERSION = 1
HEADER_SIZE = 4096
"""Header size in bytes; the body starts here, page-aligned."""

_FIXED = struct.Struct("<8sHBBIII QQQd QqQQ 32s")
_CRC_OFFSET = HEADER_SIZE - 4


@dataclass(frozen=True)
class FilterHeader:
    """The parsed header of a filter file."""

    params: FilterParams
    key_count: int
    capacity: int
    target_fpp: float
    filter_version: int
    created_at: int
    body_sha256: bytes

    @property
    def body_offset(self) -> int:
        """Byte offset of the bit array in the file."""
        return HEADER_SIZE

    @property
    def body_length(self) -> int:
        """Length of the bit array in bytes."""
        return self.params.num_bytes

    @property
    def file_size(self) -> int:
        """Exact size of a well-formed file with this header."""
        return HEADER_SIZE + self.params.num_bytes

    def pack(self) -> bytes:
        """Return the 4096 header bytes, CRC included."""
        p = self.params
        fixed = _FIXED.pack(
            MAGIC, FORMAT_VERSION, int(p.layout), int(p.hash_id), p.hash_seed, p.num_probes, 0,
            p.num_bits, self.key_count, self.capacity, self.target_fpp,
            self.filter_version, self.created_at, HEADER_SIZE, p.num_bytes, self.body_sha256,
        )
        body = fixed + bytes(_CRC_OFFSET - len(fixed))
        return body + struct.pack("<I", zlib.crc32(body))

    @classmethod
    def unpack(cls, data: bytes, file_size: int | None = None) -> FilterHeader:
        """Parse and validate header bytes; ``file_size``, when given, must match exactly.

        Raises FormatError on any deviation from docs/format.md.
        """
        if len(data) < HEADER_SIZE:
            raise FormatError(f"file too short for a header: {len(data)} of {HEADER_SIZE} bytes")
        data = data[:HEADER_SIZE]
        if data[:8] != MAGIC:
            raise FormatError("not a bloomswarm filter file (bad magic)")
        (stored_crc,) = struct.unpack_from("<I", data, _CRC_OFFSET)
        if zlib.crc32(data[:_CRC_OFFSET]) != stored_crc:
            raise FormatError("header checksum (CRC-32) mismatch: the header is corrupt")
        (
            _magic, version, layout, hash_id, seed, probes, flags, num_bits, key_count,
            capacity, target_fpp, filter_version, created_at, body_offset, body_length, sha,
        ) = _FIXED.unpack_from(data)
        if version != FORMAT_VERSION:
            raise FormatError(f"unsupported format version {version} (this reader knows 1)")
        if layout not in Layout.__members__.values():
            raise FormatError(f"unknown layout id {layout}")
        if hash_id not in HashId.__members__.values():
            raise FormatError(f"unknown hash id {hash_id}")
        if flags != 0 or any(data[_FIXED.size:_CRC_OFFSET]):
            raise FormatError("non-zero reserved header bytes: written by a newer format?")
        problem = params_problem(layout, num_bits, probes, seed)
        if problem is not None:
            raise FormatError(f"invalid header: {problem}")
        if body_offset != HEADER_SIZE or body_length != num_bits // 8:
            raise FormatError(
                f"invalid header: body at {body_offset}+{body_length}, "
                f"expected {HEADER_SIZE}+{num_bits // 8}"
            )
        if not 0.0 < target_fpp < 1.0:
            raise FormatError(f"invalid header: target_fpp {target_fpp} outside (0, 1)")
        expected = HEADER_SIZE + body_length
        if file_size is not None and file_size != expected:
            kind = "truncated" if file_size < expected else "has trailing bytes"
            raise FormatError(f"file {kind}: {file_size} bytes, header says {expected}")
        return cls(
            params=FilterParams(Layout(layout), num_bits, probes, seed, HashId(hash_id)),
            key_count=key_count,
            capacity=capacity,
            target_fpp=target_fpp,
            filter_version=filter_version,
            created_at=created_at,
            body_sha256=sha,
        )


def read_header(path: str) -> FilterHeader:
    """Read and validate the header of the file at ``path`` (size checked against fstat).

    Raises FormatError for a malformed file and OSError when it cannot be read.
    """
    with open(path, "rb") as fh:
        return FilterHeader.unpack(fh.read(HEADER_SIZE), os.fstat(fh.fileno()).st_size)
