"""Header packing: property tests of the round trip and of rejection."""

from __future__ import annotations

import contextlib
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomswarm.common import FilterHeader, FilterParams, FormatError, Layout
from bloomswarm.common.header import HEADER_SIZE

headers = st.builds(
    FilterHeader,
    params=st.one_of(
        st.builds(lambda b, k, s: FilterParams(Layout.BLOCKED, 512 * b, k, s),
                  st.integers(1, 2**32 - 1), st.integers(1, 10), st.integers(0, 2**32 - 1)),
        st.builds(lambda w, k, s: FilterParams(Layout.STANDARD, 64 * w, k, s),
                  st.integers(1, 2**40), st.integers(1, 32), st.integers(0, 2**32 - 1)),
    ),
    key_count=st.integers(0, 2**64 - 1),
    capacity=st.integers(0, 2**64 - 1),
    target_fpp=st.floats(min_value=1e-12, max_value=0.999999),
    filter_version=st.integers(0, 2**64 - 1),
    created_at=st.integers(-(2**63), 2**63 - 1),
    body_sha256=st.binary(min_size=32, max_size=32),
)


@given(headers)
def test_round_trip(header: FilterHeader) -> None:
    data = header.pack()
    assert len(data) == HEADER_SIZE
    assert FilterHeader.unpack(data, header.file_size) == header


@given(headers, st.binary(min_size=0, max_size=HEADER_SIZE + 10))
def test_arbitrary_bytes_parse_or_raise_format_error(header: FilterHeader, noise: bytes) -> None:
    """Whatever the bytes, unpack returns a header or raises FormatError, nothing else."""
    for candidate in (noise, header.pack()[: len(noise)], noise + header.pack()[len(noise):]):
        with contextlib.suppress(FormatError):
            FilterHeader.unpack(candidate)


@given(headers, st.integers(0, HEADER_SIZE - 5), st.integers(1, 255))
def test_any_single_byte_change_is_detected(header: FilterHeader, offset: int, xor: int) -> None:
    data = bytearray(header.pack())
    data[offset] ^= xor
    with pytest.raises(FormatError):
        FilterHeader.unpack(bytes(data))


def test_reserved_bytes_rejected_even_with_valid_crc() -> None:
    import zlib

    params = FilterParams(Layout.BLOCKED, 512, 3)
    data = bytearray(FilterHeader(params, 0, 0, 0.01, 0, 0, bytes(32)).pack())
    data[3000] = 1
    struct.pack_into("<I", data, 4092, zlib.crc32(bytes(data[:4092])))
    with pytest.raises(FormatError, match="reserved"):
        FilterHeader.unpack(bytes(data))
