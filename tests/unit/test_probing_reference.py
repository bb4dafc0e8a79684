"""The pure-Python reference against hand-checked values and the spec's formulas."""

from __future__ import annotations

import mmh3

from bloomswarm.common.params import FilterParams, Layout
from bloomswarm.common.probing import bit_indexes, blocked_bit_indexes, key_hash, standard_bit_indexes


def test_key_hash_is_h2_high_h1_low() -> None:
    h1, h2 = mmh3.hash64(b"abc", 5, signed=False)
    assert key_hash(b"abc", 5) == (h2 << 64) | h1


def test_murmur3_x64_128_of_empty_input_with_seed_zero_is_zero() -> None:
    # No blocks, no tail: h1 = h2 = 0 and fmix64(0) = 0 (a fixed point of the reference).
    assert key_hash(b"", 0) == 0
    assert key_hash(b"", 1) != 0


def test_blocked_indexes_follow_the_spec() -> None:
    h = (0xFFFFFFFF << 96) | 0b111_000000001_000000010
    idx = blocked_bit_indexes(h, num_blocks=4, num_probes=3)
    # Top 32 bits all ones -> the last block (3); fields 2, 1, 7.
    assert idx == [3 * 512 + 2, 3 * 512 + 1, 3 * 512 + 7]


def test_blocked_field_seven_spans_both_halves() -> None:
    h = (1 << 63) | (0xFF << 64)  # bit 63 of h1 and bits 0..7 of h2
    assert blocked_bit_indexes(h, 1, 8)[7] == 511


def test_standard_indexes_follow_the_spec() -> None:
    h1, h2 = 10, 2**64 - 1  # h1 + i*h2 wraps: 10, 9, 8 ...
    assert standard_bit_indexes((h2 << 64) | h1, 1000, 4) == [10, 9, 8, 7]


def test_int_key_hashes_its_little_endian_bytes() -> None:
    params = FilterParams(Layout.BLOCKED, 512 * 8, 5)
    assert bit_indexes(-2, params) == bit_indexes(b"\xfe" + b"\xff" * 7, params)
    assert bit_indexes("é", params) == bit_indexes("é".encode(), params)
