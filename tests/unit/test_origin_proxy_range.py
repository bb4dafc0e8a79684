"""The sandbox origin proxy's Range parsing (it answers range GETs from its own copy of a
filter file the way S3 does)."""

from __future__ import annotations

import pytest

from bloomswarm.sandbox.origin_proxy import parse_range


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-99", (0, 99)),
        ("bytes=100-", (100, 999)),
        ("bytes=990-5000", (990, 999)),  # clipped to the end, like S3
        ("bytes=-10", (990, 999)),  # the last 10 bytes
        ("bytes=-5000", (0, 999)),
        ("bytes=999-999", (999, 999)),
    ],
)
def test_single_ranges(header: str, expected: tuple[int, int]) -> None:
    assert parse_range(header, 1000) == expected


@pytest.mark.parametrize("header", [None, "", "bytes=-", "bytes=0-9,20-29", "items=0-9", "bytes=9-2"])
def test_whole_file_when_there_is_no_usable_range(header: str | None) -> None:
    assert parse_range(header, 1000) is None


@pytest.mark.parametrize("header", ["bytes=1000-", "bytes=5000-6000", "bytes=-0"])
def test_unsatisfiable_ranges_raise(header: str) -> None:
    with pytest.raises(ValueError):
        parse_range(header, 1000)
