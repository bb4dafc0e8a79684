"""Rice coding of flipped bit positions: the pure-Python (numpy) reference path.

Bit ``p`` of a body is bit ``p % 8`` (value ``1 << (p % 8)``) of byte ``p // 8``. The
positions where base and target differ, ascending, become gaps ``g0 = p0`` and
``gi = pi - p(i-1) - 1``. Each gap is split by the Rice parameter ``k``: its quotient
``g >> k`` goes to the quotient stream in unary (that many 0 bits, then a 1 bit), its
remainder (the low ``k`` bits) to the remainder stream, least significant bit first.
Both streams fill each byte from its least significant bit and end with zero padding.

The C extension (csrc/delta.c) implements the same functions; both produce identical
bytes and accept or refuse identical streams (tests/unit/test_delta_equivalence.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from .delta_format import MAX_RICE_K
from .errors import DeltaError

U8 = npt.NDArray[np.uint8]
U64 = npt.NDArray[np.uint64]

_CHUNK_BYTES = 1 << 22
"""Body bytes compared per step when finding flips (bounds memory at GiB scale)."""
_CHUNK_QBYTES = 1 << 18
"""Quotient-stream bytes decoded per step."""


def choose_rice_k(flips: int, body_bits: int) -> int:
    """The Rice parameter that minimises the expected code length for ``flips`` flips.

    Models the gaps as geometric with ``p = flips / body_bits``: a gap costs ``k + 1``
    bits plus its expected quotient ``x / (1 - x)``, ``x = (1 - p) ** (2 ** k)``. The
    result is about ``log2(0.69 / p)``; 0 for no flips or all bits flipped.
    """
    if flips <= 0 or flips >= body_bits:
        return 0
    log_q = math.log1p(-flips / body_bits)
    best_k, best_cost = 0, math.inf
    for k in range(MAX_RICE_K + 1):
        x = math.exp(log_q * (1 << k))
        cost = k + 1 + (x / (1.0 - x) if x < 1.0 else math.inf)
        if cost < best_cost:
            best_k, best_cost = k, cost
    return best_k


def count_flips(base: U8, target: U8) -> int:
    """Number of bits that differ between two equally long bodies."""
    total = 0
    for start in range(0, len(base), _CHUNK_BYTES):
        diff = np.bitwise_xor(base[start:start + _CHUNK_BYTES], target[start:start + _CHUNK_BYTES])
        total += int(np.bitwise_count(diff).sum(dtype=np.uint64))
    return total


def flip_positions(base: U8, target: U8) -> Iterator[U64]:
    """The bit positions where the bodies differ, ascending, in chunks."""
    for start in range(0, len(base), _CHUNK_BYTES):
        diff = np.bitwise_xor(base[start:start + _CHUNK_BYTES], target[start:start + _CHUNK_BYTES])
        nonzero = np.flatnonzero(diff)
        if not len(nonzero):
            continue
        bits = np.unpackbits(diff[nonzero][:, None], axis=1, bitorder="little")
        rows, cols = np.nonzero(bits)
        yield (nonzero[rows].astype(np.uint64) + np.uint64(start)) * np.uint64(8) + cols.astype(np.uint64)


class _BitWriter:
    """Appends bit arrays (one uint8 0/1 per bit) and packs them LSB-first into bytes."""

    def __init__(self) -> None:
        self._parts: list[bytes] = []
        self._carry: U8 = np.zeros(0, dtype=np.uint8)

    def write(self, bits: U8) -> None:
        bits = np.concatenate((self._carry, bits))
        whole = len(bits) // 8 * 8
        self._parts.append(np.packbits(bits[:whole], bitorder="little").tobytes())
        self._carry = bits[whole:]

    def getvalue(self) -> bytes:
        tail = np.packbits(self._carry, bitorder="little").tobytes() if len(self._carry) else b""
        return b"".join((*self._parts, tail))


def encode_positions(chunks: Iterator[U64], rice_k: int) -> tuple[bytes, bytes]:
    """Rice-code ascending positions (in chunks) into (quotient stream, remainder stream)."""
    quotients, remainders = _BitWriter(), _BitWriter()
    previous = -1
    shifts = np.arange(rice_k, dtype=np.uint64)
    for positions in chunks:
        if not len(positions):
            continue
        starts = np.concatenate((np.array([previous + 1], dtype=np.uint64), positions[:-1] + np.uint64(1)))
        gaps = positions - starts
        previous = int(positions[-1])
        q = gaps >> np.uint64(rice_k)
        ones = np.cumsum(q + np.uint64(1)) - np.uint64(1)
        unary = np.zeros(int(ones[-1]) + 1, dtype=np.uint8)
        unary[ones.astype(np.int64)] = 1
        quotients.write(unary)
        if rice_k:
            low = (gaps[:, None] >> shifts[None, :]) & np.uint64(1)
            remainders.write(low.astype(np.uint8).ravel())
    return quotients.getvalue(), remainders.getvalue()


def decode_positions(
    quotients: bytes | memoryview, remainders: bytes | memoryview, rice_k: int, flips: int, body_bits: int
) -> Iterator[U64]:
    """The positions a pair of streams encodes, ascending, in chunks; validated as it goes.

    Raises DeltaError (possibly after some chunks were yielded) unless the streams hold
    exactly ``flips`` positions, all below ``body_bits``, with no bit set after the last
    one (canonical padding). Stream lengths are assumed checked by the header already.
    """
    q_all = np.frombuffer(quotients, dtype=np.uint8)
    r_all = np.frombuffer(remainders, dtype=np.uint8)
    if len(r_all) != (flips * rice_k + 7) // 8:
        raise DeltaError("corrupt delta: the remainder stream's length does not match the flip count")
    decoded = 0
    last_one = -1  # stream bit index of the previous terminating 1
    previous = -1  # previous position
    max_q = body_bits >> rice_k
    for start in range(0, len(q_all), _CHUNK_QBYTES):
        ones = np.flatnonzero(np.unpackbits(q_all[start:start + _CHUNK_QBYTES], bitorder="little"))
        if not len(ones):
            continue
        ones = ones.astype(np.int64) + start * 8
        if decoded + len(ones) > flips:
            raise DeltaError("corrupt delta: the quotient stream holds more flips than the header says")
        q = np.diff(ones, prepend=last_one) - 1
        last_one = int(ones[-1])
        if int(q.max()) > max_q:
            raise DeltaError("corrupt delta: a position lies beyond the body")
        gaps = q.astype(np.uint64) << np.uint64(rice_k)
        if rice_k:
            gaps |= _read_remainders(r_all, decoded, len(ones), rice_k)
        if int(gaps.max()) >= body_bits or float(gaps.sum(dtype=np.float64)) >= body_bits:
            raise DeltaError("corrupt delta: a position lies beyond the body")
        positions = np.cumsum(gaps + np.uint64(1)) + np.uint64(previous + 1) - np.uint64(1)
        if int(positions[-1]) >= body_bits:
            raise DeltaError("corrupt delta: a position lies beyond the body")
        previous = int(positions[-1])
        decoded += len(ones)
        yield positions
    if decoded != flips:
        raise DeltaError("corrupt delta: the quotient stream holds fewer flips than the header says")
    if len(q_all) != (last_one // 8 + 1 if flips else 0):
        raise DeltaError("corrupt delta: bytes after the quotient stream's last flip")
    used = flips * rice_k
    if used % 8 and int(r_all[-1]) >> (used % 8):
        raise DeltaError("corrupt delta: non-zero padding after the remainder stream")


def _read_remainders(stream: U8, first: int, count: int, rice_k: int) -> U64:
    """The ``count`` k-bit remainders starting with remainder number ``first``."""
    begin, end = first * rice_k, (first + count) * rice_k
    unpacked = np.unpackbits(stream[begin // 8:(end + 7) // 8], bitorder="little")
    bits = unpacked[begin % 8:begin % 8 + end - begin].reshape(count, rice_k).astype(np.uint64)
    values = np.zeros(count, dtype=np.uint64)
    for bit in range(rice_k):
        values |= bits[:, bit] << np.uint64(bit)
    return values


def xor_positions(body: U8, positions: U64) -> None:
    """Flip the bits at ascending ``positions`` (all below ``8 * len(body)``) in place."""
    if not len(positions):
        return
    byte_index = (positions >> np.uint64(3)).astype(np.int64)
    masks = np.left_shift(np.uint8(1), (positions & np.uint64(7)).astype(np.uint8))
    starts = np.flatnonzero(np.concatenate(([True], byte_index[1:] != byte_index[:-1])))
    body[byte_index[starts]] ^= np.bitwise_or.reduceat(masks, starts)


__all__ = [
    "choose_rice_k", "count_flips", "decode_positions", "encode_positions", "flip_positions",
    "xor_positions",
]
