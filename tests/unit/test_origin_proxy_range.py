"""The sandbox origin's pure parts: its Range parsing (:mod:`bloomswarm.sandbox.http_range`),
which answers range GETs the way S3 does (one range, clipped to the file, anything
unusable ignored), and the pace of one of its connections."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomswarm.sandbox.http_range import RangeNotSatisfiable, parse_range
from bloomswarm.sandbox.origin import ConnectionPace


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("bytes=0-99", (0, 99)),
        ("bytes=100-", (100, 999)),
        ("bytes=990-5000", (990, 999)),  # clipped to the end, like S3
        ("bytes=-10", (990, 999)),  # the last 10 bytes
        ("bytes=-5000", (0, 999)),
        ("bytes=999-999", (999, 999)),
        (" bytes=0-0 ", (0, 0)),
    ],
)
def test_single_ranges(header: str, expected: tuple[int, int]) -> None:
    assert parse_range(header, 1000) == expected


@pytest.mark.parametrize("header", [None, "", "bytes=-", "bytes=0-9,20-29", "items=0-9", "bytes=9-2",
                                    "bytes=a-b", "bytes 0-9"])
def test_whole_file_when_there_is_no_usable_range(header: str | None) -> None:
    assert parse_range(header, 1000) is None


@pytest.mark.parametrize("header", ["bytes=1000-", "bytes=5000-6000", "bytes=-0"])
def test_unsatisfiable_ranges_raise(header: str) -> None:
    with pytest.raises(RangeNotSatisfiable):
        parse_range(header, 1000)


def test_no_suffix_of_an_empty_file() -> None:
    with pytest.raises(RangeNotSatisfiable):
        parse_range("bytes=-5", 0)


@given(size=st.integers(1, 1 << 40), first=st.integers(0, 1 << 41), last=st.integers(0, 1 << 41))
def test_a_first_last_range_is_inside_the_file_or_refused(size: int, first: int, last: int) -> None:
    try:
        answer = parse_range(f"bytes={first}-{last}", size)
    except RangeNotSatisfiable:
        assert first >= size
        return
    assert first < size
    if first > last:
        assert answer is None
    else:
        assert answer == (first, min(last, size - 1))


@given(size=st.integers(1, 1 << 40), first=st.integers(0, 1 << 41))
def test_an_open_range_runs_to_the_end(size: int, first: int) -> None:
    if first >= size:
        with pytest.raises(RangeNotSatisfiable):
            parse_range(f"bytes={first}-", size)
    else:
        assert parse_range(f"bytes={first}-", size) == (first, size - 1)


@given(size=st.integers(1, 1 << 40), count=st.integers(1, 1 << 41))
def test_a_suffix_is_the_last_bytes_and_never_more_than_the_file(size: int, count: int) -> None:
    answer = parse_range(f"bytes=-{count}", size)
    assert answer is not None
    first, last = answer
    assert last == size - 1 and last - first + 1 == min(count, size)


@given(header=st.text(max_size=40), size=st.integers(0, 10_000))
def test_any_header_gives_a_range_within_the_file_none_or_refusal(header: str, size: int) -> None:
    try:
        answer = parse_range(header, size)
    except RangeNotSatisfiable:
        return
    if answer is not None:
        first, last = answer
        assert 0 <= first <= last < size


@given(rate=st.integers(1, 1 << 30), sends=st.lists(st.tuples(st.integers(1, 1 << 20), st.floats(0, 0.5)),
                                                  min_size=1, max_size=50))
def test_a_paced_connection_never_runs_ahead_of_its_rate(rate: int, sends: list[tuple[int, float]]) -> None:
    """Sends that wait as told never put more than ``rate`` bytes a second on the wire,
    counted from the first send's start."""
    pace, now = ConnectionPace(rate), 1000.0
    first, sent = now, 0
    for size, pause in sends:
        now += pace.delay(size, now)
        sent += size
        assert sent <= rate * (now - first) * (1 + 1e-9) + 1e-3
        now += pause


def test_a_connection_paused_past_what_was_due_starts_its_pace_again() -> None:
    pace = ConnectionPace(1000)
    assert pace.delay(1000, 50.0) == 1.0  # due at 51.0
    assert pace.delay(1000, 51.5) == 0.5  # due at 52.0: still one pace
    assert pace.delay(1000, 53.5) == 1.0  # 1.5 s past due: a new start, no credit for the pause
    assert pace.delay(500, 53.5) == 1.5


def test_an_unpaced_connection_never_waits() -> None:
    assert ConnectionPace(0).delay(1 << 30, 7.0) == 0.0
