"""Filter parameters: the layout, the hash and the sizes that fix where a key's bits go.

Two filters can be merged, and two code paths agree bit for bit, exactly when their
:class:`FilterParams` are equal.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

BLOCK_BITS = 512
"""Bits in one block of the blocked layout: one 64-byte cache line."""

MAX_BLOCKS = 2**32 - 1
"""The block index is a 32x32-bit multiply-shift, so a blocked filter has fewer than 2**32 blocks."""

MAX_PROBES_BLOCKED = 10
"""The blocked layout takes its probes from ten 9-bit fields of the 128-bit hash."""

MAX_PROBES_STANDARD = 32


class Layout(enum.IntEnum):
    """How a key's k bits are placed in the bit array (the header's ``layout`` byte)."""

    BLOCKED = 1
    """All k bits in one 512-bit block: one cache miss per lookup (RocksDB FastLocalBloom)."""
    STANDARD = 2
    """k bits anywhere, by Kirsch–Mitzenmacher double hashing."""

    @classmethod
    def parse(cls, name: str) -> Layout:
        """Return the layout called ``name`` ("blocked" or "standard"); ValueError otherwise."""
        try:
            return cls[name.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown layout {name!r} (expected 'blocked' or 'standard')") from None

    @property
    def label(self) -> str:
        """The lower-case name used in manifests, configs and the CLI."""
        return self.name.lower()


class HashId(enum.IntEnum):
    """The hash function (the header's ``hash_id`` byte)."""

    MURMUR3_X64_128 = 1


@dataclass(frozen=True)
class FilterParams:
    """Everything that decides which bits a key maps to. Validated on construction.

    Raises ValueError when a value breaks the rules of docs/format.md.
    """

    layout: Layout
    num_bits: int
    num_probes: int
    hash_seed: int = 0
    hash_id: HashId = HashId.MURMUR3_X64_128

    def __post_init__(self) -> None:
        problem = params_problem(self.layout, self.num_bits, self.num_probes, self.hash_seed)
        if problem is not None:
            raise ValueError(problem)

    @property
    def num_bytes(self) -> int:
        """Size of the bit array (the file's body) in bytes."""
        return self.num_bits // 8

    @property
    def num_blocks(self) -> int:
        """Number of 512-bit blocks (meaningful for the blocked layout)."""
        return self.num_bits // BLOCK_BITS


def params_problem(layout: int, num_bits: int, num_probes: int, hash_seed: int) -> str | None:
    """Describe what is wrong with these parameters, or return None when they are valid."""
    if layout == Layout.BLOCKED:
        if num_bits <= 0 or num_bits % BLOCK_BITS:
            return f"blocked layout needs num_bits a positive multiple of 512, got {num_bits}"
        if num_bits // BLOCK_BITS > MAX_BLOCKS:
            return f"blocked layout allows at most {MAX_BLOCKS} blocks, got {num_bits // 512}"
        if not 1 <= num_probes <= MAX_PROBES_BLOCKED:
            return f"blocked layout needs 1..{MAX_PROBES_BLOCKED} probes, got {num_probes}"
    elif layout == Layout.STANDARD:
        if num_bits <= 0 or num_bits % 64:
            return f"standard layout needs num_bits a positive multiple of 64, got {num_bits}"
        if not 1 <= num_probes <= MAX_PROBES_STANDARD:
            return f"standard layout needs 1..{MAX_PROBES_STANDARD} probes, got {num_probes}"
    else:
        return f"unknown layout id {layout}"
    if not 0 <= hash_seed < 2**32:
        return f"hash seed must fit in 32 bits, got {hash_seed}"
    return None
