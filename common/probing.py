"""Where a key's bits go: the pure-Python reference of docs/format.md, "Probing".

These functions are the specification in executable form. The C extension
(csrc/bloomfast.c) and the numpy batch path (:mod:`.batch`) must agree with them bit for
bit; the tests check that on random keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import cast

import mmh3
from bitarray import bitarray

from .keys import Key, encode_key
from .params import FilterParams, Layout

_U64 = (1 << 64) - 1


def key_hash(data: bytes | bytearray | memoryview, seed: int) -> int:
    """MurmurHash3 x64_128 of ``data`` as one 128-bit int: h2 << 64 | h1."""
    return int(mmh3.mmh3_x64_128_uintdigest(data, seed))


def blocked_bit_indexes(h: int, num_blocks: int, num_probes: int) -> list[int]:
    """Bit indexes of a key with hash ``h`` in a blocked-512 filter."""
    base = (((h >> 96) * num_blocks) >> 32) << 9
    return [base + ((h >> (9 * i)) & 511) for i in range(num_probes)]


def standard_bit_indexes(h: int, num_bits: int, num_probes: int) -> list[int]:
    """Bit indexes of a key with hash ``h`` in a standard (Kirsch–Mitzenmacher) filter."""
    h1, h2 = h & _U64, h >> 64
    return [((h1 + i * h2) & _U64) % num_bits for i in range(num_probes)]


def bit_indexes(key: Key, params: FilterParams) -> list[int]:
    """The k bit indexes that ``key`` sets in a filter with ``params``."""
    h = key_hash(encode_key(key), params.hash_seed)
    if params.layout == Layout.BLOCKED:
        return blocked_bit_indexes(h, params.num_blocks, params.num_probes)
    return standard_bit_indexes(h, params.num_bits, params.num_probes)


class _ClosedBits:
    """Stands in for the bits of a released test: every lookup raises ValueError."""

    __slots__ = ()

    def __getitem__(self, index: object) -> bool:
        raise ValueError("filter is closed")


CLOSED_BITS = _ClosedBits()
"""What a released test (see :func:`make_contains`) reads instead of the filter's bits."""


def make_contains(
    bits: bitarray, params: FilterParams
) -> tuple[Callable[[Key], bool], Callable[[], None]]:
    """A fast pure-Python membership test over ``bits`` (a little-endian bitarray).

    Equivalent to ``all(bits[i] for i in bit_indexes(key, params))``. The blocked
    layout's test is generated for the filter's k (like ``dataclasses`` generates
    ``__init__``): probes are read three at a time from 27-bit slices of the hash, which
    are small ints and cost a third of a 128-bit int operation, and an absent key returns
    at its first unset bit.

    Returns the test and its ``release``, which drops the test's reference to ``bits``: a
    later call of the test, or one under way in another thread, raises ValueError
    "filter is closed" (the C engine's error for a closed filter). The generated test
    and its namespace refer to each other, so without it ``bits``, and the buffer it
    exports, would live until the next garbage collection.
    """
    seed, k = params.hash_seed, params.num_probes
    if params.layout == Layout.BLOCKED:
        namespace: dict[str, object] = {
            "bits": bits, "nb": params.num_blocks, "seed": seed,
            "hash128": mmh3.mmh3_x64_128_uintdigest, "encode_key": encode_key,
        }
        exec(_blocked_contains_source(k), namespace)
        contains = cast("Callable[[Key], bool]", namespace["contains"])

        def release_blocked() -> None:
            # The test keeps its namespace (its globals) but the namespace no longer holds
            # the test, which breaks the cycle; a lookup then reads the closed stand-in.
            namespace["bits"] = CLOSED_BITS
            namespace.pop("contains", None)

        return contains, release_blocked

    hash128 = mmh3.mmh3_x64_128_uintdigest
    m = params.num_bits
    steps = tuple(range(k))

    def contains_standard(key: Key) -> bool:
        data = key.encode("utf-8") if type(key) is str else key if type(key) is bytes else encode_key(key)
        h = hash128(data, seed)
        h1, h2 = h & _U64, h >> 64
        for i in steps:  # noqa: SIM110 - a loop beats all() over a generator here
            if not bits[((h1 + i * h2) & _U64) % m]:
                return False
        return True

    def release() -> None:
        for cell in contains_standard.__closure__ or ():
            if cell.cell_contents is bits:
                cell.cell_contents = CLOSED_BITS

    return contains_standard, release


def _blocked_contains_source(num_probes: int) -> str:
    """Source of ``contains(key)`` for a blocked filter with ``num_probes`` probes."""
    lines = [
        "def contains(key):",
        "    tk = type(key)",
        "    if tk is str:",
        "        key = key.encode('utf-8')",
        "    elif tk is not bytes:",
        "        key = encode_key(key)",
        "    h = hash128(key, seed)",
        "    base = ((h >> 96) * nb >> 32) << 9",
    ]
    for chunk_start in range(0, num_probes, 3):
        shift = 9 * chunk_start
        lines.append(f"    c = h >> {shift} & 0x7FFFFFF" if shift else "    c = h & 0x7FFFFFF")
        fields = ["c & 511", "c >> 9 & 511", "c >> 18"][: min(3, num_probes - chunk_start)]
        test = " and ".join(f"bits[base + ({field})]" for field in fields)
        lines.append(f"    if not ({test}):")
        lines.append("        return False")
    lines.append("    return True")
    return "\n".join(lines) + "\n"


def add_keys_python(bits: bitarray, params: FilterParams, keys: Iterable[Key]) -> int:
    """Set the bits of every key in the iterable ``keys``; return how many were added."""
    count = 0
    for key in keys:
        for i in bit_indexes(key, params):
            bits[i] = 1
        count += 1
    return count
