"""The delta file's header (docs/format.md, "Delta file"): packing, unpacking, validation.

A delta turns the body of one filter version (the base) into the body of another (the
target) of the same parameters. It is a 256-byte fixed header, the target's 4096-byte
file header verbatim, and the encoded flips (old XOR new) as two streams. This module is
pure: bytes in, a validated :class:`DeltaHeader` out, DeltaError on any deviation.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

from .errors import DeltaError, FormatError
from .header import HEADER_SIZE, FilterHeader

DELTA_MAGIC = b"BLMSDLT\x00"
DELTA_FORMAT_VERSION = 1
DELTA_SUFFIX = ".bsd"
"""File-name suffix of a delta file."""

ENCODING_RICE_GAPS = 1
"""The gaps between flipped bit positions, Rice-coded with parameter ``rice_k``."""

MAX_RICE_K = 48
"""Largest Rice parameter a writer uses and a reader accepts."""

FIXED_SIZE = 256
"""Size of the delta's own header; the target header follows it."""

PAYLOAD_OFFSET = FIXED_SIZE + HEADER_SIZE
"""Byte offset of the quotient stream in a delta file."""

_FIXED = struct.Struct("<8sHBBI QQQQQQ 32s32s")
_CRC_OFFSET = FIXED_SIZE - 4


@dataclass(frozen=True)
class DeltaHeader:
    """The parsed header of a delta file (everything but the two streams)."""

    base_version: int
    target_version: int
    base_body_sha256: bytes
    """SHA-256 of the base file's body (equal to the base header's ``body_sha256``)."""
    target_sha256: bytes
    """SHA-256 of the whole target file, header included."""
    target_header: bytes
    """The target file's 4096-byte header, verbatim."""
    encoding: int
    rice_k: int
    flips: int
    """Number of bits that differ between base and target body."""
    body_size: int
    """Body length in bytes, the same in base and target."""
    quotient_bytes: int
    remainder_bytes: int

    @property
    def file_size(self) -> int:
        """Exact size of a well-formed delta file with this header."""
        return PAYLOAD_OFFSET + self.quotient_bytes + self.remainder_bytes

    @property
    def target(self) -> FilterHeader:
        """The target header, parsed (it was validated when this header was)."""
        return FilterHeader.unpack(self.target_header)

    def pack(self) -> bytes:
        """Return the fixed header followed by the target header (``PAYLOAD_OFFSET`` bytes)."""
        fixed = _FIXED.pack(
            DELTA_MAGIC, DELTA_FORMAT_VERSION, self.encoding, self.rice_k, len(self.target_header),
            self.base_version, self.target_version, self.body_size, self.flips,
            self.quotient_bytes, self.remainder_bytes, self.base_body_sha256, self.target_sha256,
        )
        head = fixed + bytes(_CRC_OFFSET - len(fixed))
        return head + struct.pack("<I", zlib.crc32(head)) + self.target_header

    @classmethod
    def unpack(cls, data: bytes, file_size: int | None = None) -> DeltaHeader:
        """Parse and validate the first ``PAYLOAD_OFFSET`` bytes of a delta file.

        ``file_size``, when given, must be exactly :attr:`file_size`. Raises DeltaError on
        any deviation from docs/format.md.
        """
        if len(data) < PAYLOAD_OFFSET:
            raise DeltaError(f"delta too short for its header: {len(data)} of {PAYLOAD_OFFSET} bytes")
        if data[:8] != DELTA_MAGIC:
            raise DeltaError("not a bloomswarm delta file (bad magic)")
        (stored_crc,) = struct.unpack_from("<I", data, _CRC_OFFSET)
        if zlib.crc32(data[:_CRC_OFFSET]) != stored_crc:
            raise DeltaError("delta header checksum (CRC-32) mismatch: the header is corrupt")
        (
            _magic, version, encoding, rice_k, header_size, base_version, target_version,
            body_size, flips, q_bytes, r_bytes, base_sha, target_sha,
        ) = _FIXED.unpack_from(data)
        if version != DELTA_FORMAT_VERSION:
            raise DeltaError(f"unsupported delta format version {version} (this reader knows 1)")
        if encoding != ENCODING_RICE_GAPS:
            raise DeltaError(f"unknown delta encoding {encoding}")
        if any(data[_FIXED.size:_CRC_OFFSET]):
            raise DeltaError("non-zero reserved delta header bytes: written by a newer format?")
        if rice_k > MAX_RICE_K:
            raise DeltaError(f"invalid delta header: rice_k {rice_k} above {MAX_RICE_K}")
        if header_size != HEADER_SIZE:
            raise DeltaError(
                f"invalid delta header: target header of {header_size} bytes, expected {HEADER_SIZE}"
            )
        target_header = bytes(data[FIXED_SIZE:PAYLOAD_OFFSET])
        try:
            target = FilterHeader.unpack(target_header)
        except FormatError as exc:
            raise DeltaError(f"the delta's target header is invalid: {exc}") from None
        if target.filter_version != target_version:
            raise DeltaError(
                f"invalid delta header: target version {target_version}, "
                f"its target header says {target.filter_version}"
            )
        if body_size != target.body_length:
            raise DeltaError(
                f"invalid delta header: body size {body_size}, target header says {target.body_length}"
            )
        problem = streams_problem(flips, rice_k, body_size * 8, q_bytes, r_bytes)
        if problem is not None:
            raise DeltaError(f"invalid delta header: {problem}")
        header = cls(
            base_version=base_version, target_version=target_version, base_body_sha256=base_sha,
            target_sha256=target_sha, target_header=target_header, encoding=encoding, rice_k=rice_k,
            flips=flips, body_size=body_size, quotient_bytes=q_bytes, remainder_bytes=r_bytes,
        )
        if file_size is not None and file_size != header.file_size:
            kind = "truncated" if file_size < header.file_size else "has trailing bytes"
            raise DeltaError(f"delta {kind}: {file_size} bytes, header says {header.file_size}")
        return header


def streams_problem(flips: int, rice_k: int, body_bits: int, q_bytes: int, r_bytes: int) -> str | None:
    """Why these stream sizes cannot encode ``flips`` positions in ``body_bits``, or None.

    Each flip costs one quotient bit (its terminating one) and ``rice_k`` remainder bits;
    all quotients together cannot exceed ``body_bits >> rice_k`` (every gap is below
    ``body_bits``), so the quotient stream is bounded too.
    """
    if flips > body_bits:
        return f"{flips} flips in a body of {body_bits} bits"
    if r_bytes != (flips * rice_k + 7) // 8:
        return f"remainder stream of {r_bytes} bytes, expected {(flips * rice_k + 7) // 8}"
    if flips == 0:
        return None if q_bytes == 0 else f"quotient stream of {q_bytes} bytes for no flips"
    if not (flips + 7) // 8 <= q_bytes <= (flips + (body_bits >> rice_k) + 7) // 8:
        return f"quotient stream of {q_bytes} bytes cannot hold {flips} flips"
    return None


__all__ = [
    "DELTA_FORMAT_VERSION", "DELTA_MAGIC", "DELTA_SUFFIX", "ENCODING_RICE_GAPS", "FIXED_SIZE",
    "MAX_RICE_K", "PAYLOAD_OFFSET", "DeltaHeader", "streams_problem",
]
