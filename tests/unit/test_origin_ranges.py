"""The stripe fetch by HTTP range requests (agent/origin_ranges.py), against the sandbox's
HTTP origin on loopback, which logs every range it answers."""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomswarm.agent.origin_ranges import Pace, PieceGeometry, StripeFetch, runs
from bloomswarm.sandbox.origin import Origin

PIECE = 16 << 10
PIECES = 10
TOTAL = PIECES * PIECE - 1000  # a short last piece
CONTENT = bytes((i * 7) % 251 for i in range(TOTAL))
GEOMETRY = PieceGeometry(PIECES, PIECE, TOTAL)


@given(st.lists(st.integers(0, 200), max_size=60))
def test_runs_cover_exactly_the_pieces_in_sorted_maximal_runs(pieces: list[int]) -> None:
    result = runs(pieces)
    covered = [p for first, last in result for p in range(first, last + 1)]
    assert covered == sorted(set(pieces))
    assert all(first <= last for first, last in result)
    assert all(b[0] > a[1] + 1 for a, b in itertools.pairwise(result))  # not adjacent


def test_piece_geometry_gives_inclusive_byte_ranges_and_a_short_last_piece() -> None:
    assert GEOMETRY.byte_range(0, 0) == (0, PIECE - 1)
    assert GEOMETRY.byte_range(2, 3) == (2 * PIECE, 4 * PIECE - 1)
    assert GEOMETRY.byte_range(9, 9) == (9 * PIECE, TOTAL - 1)
    assert GEOMETRY.piece_bytes(9) == PIECE - 1000


def test_pace_holds_the_rate_after_a_short_burst() -> None:
    now = [100.0]
    pace = Pace(1 << 20, clock=lambda: now[0])  # 1 MiB/s, a burst of 0.1 s
    assert pace.delay(100 << 10) == 0.0  # within the burst
    assert pace.delay(512 << 10) == pytest.approx((512 + 100 - 102.4) / 1024, rel=1e-3)
    now[0] = 200.0  # idle long after: only a burst's worth is free again
    assert pace.delay(102 << 10) == 0.0
    assert pace.delay(1 << 20) == pytest.approx((1024 + 102 - 102.4) / 1024, rel=1e-3)
    assert Pace(0).delay(10**9) == 0.0


@given(st.lists(st.integers(1, 1 << 20), min_size=1, max_size=30))
def test_pace_never_lets_more_than_the_rate_and_a_burst_through(sizes: list[int]) -> None:
    """Reading each size after its delay, the bytes by any time stay within rate × time +
    burst."""
    now = [0.0]
    rate = 1 << 20
    pace = Pace(rate, clock=lambda: now[0])
    total = 0
    for size in sizes:
        now[0] += pace.delay(size)
        total += size
        assert total <= rate * now[0] + rate * 0.1 + 1e-6


@pytest.fixture
def origin(tmp_path: Path) -> Iterator[Origin]:
    (tmp_path / "filter.bsf").write_bytes(CONTENT)
    with Origin(files=tmp_path) as running:
        yield running


def _fetch(url: str, wanted: list[int], *, have: set[int] | None = None,
           rate: int = 0) -> tuple[StripeFetch, dict[int, bytes]]:
    got: dict[int, bytes] = {}
    held = have or set()
    fetch = StripeFetch(url, wanted, GEOMETRY, missing=lambda p: p not in held and p not in got,
                        deliver=got.__setitem__, pace=Pace(rate, burst_s=0.0))
    return fetch, got


def _piece(piece: int) -> bytes:
    start, end = GEOMETRY.byte_range(piece, piece)
    return CONTENT[start:end + 1]


def test_a_fetch_requests_one_range_per_run_of_missing_pieces_and_delivers_whole_pieces(
        origin: Origin) -> None:
    fetch, got = _fetch(origin.url("filter.bsf"), [1, 2, 3, 5, 8, 9], have={2})
    fetch.start().join(10)
    assert fetch.done and fetch.error is None
    assert got == {p: _piece(p) for p in (1, 3, 5, 8, 9)}
    assert sorted((r.first, r.last) for r in origin.wait_for_payload_requests(4)) == [
        GEOMETRY.byte_range(1, 1), GEOMETRY.byte_range(3, 3), GEOMETRY.byte_range(5, 5),
        GEOMETRY.byte_range(8, 9)]
    assert fetch.received == sum(len(d) for d in got.values())


def test_a_cancelled_fetch_stops_between_reads_and_delivers_no_partial_piece(origin: Origin) -> None:
    fetch, got = _fetch(origin.url("filter.bsf"), list(range(PIECES)), rate=PIECE)  # a piece a second
    fetch.start()
    deadline = time.monotonic() + 10
    while 0 not in got and time.monotonic() < deadline:
        time.sleep(0.01)
    fetch.cancel()
    fetch.join(10)
    assert fetch.done and fetch.error is None
    assert set(got) == {0}
    assert PIECE <= fetch.received < 2 * PIECE


def test_an_http_error_ends_the_fetch_with_it(origin: Origin) -> None:
    fetch, got = _fetch(origin.url("missing.bsf"), [0, 1])
    fetch.start().join(10)
    assert fetch.done and fetch.error == "HTTP 404 Not Found"
    assert got == {}


class _Short(BaseHTTPRequestHandler):
    """Promises a whole range and sends half of it."""

    def do_GET(self) -> None:
        self.send_response(206)
        self.send_header("Content-Length", str(PIECE))
        self.end_headers()
        self.wfile.write(bytes(PIECE // 2))

    def log_message(self, format: str, *args: object) -> None:
        pass


class _IgnoresRange(BaseHTTPRequestHandler):
    """Answers every GET with the whole file (200), ranges or not."""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(TOTAL))
        self.end_headers()
        self.wfile.write(CONTENT)

    def log_message(self, format: str, *args: object) -> None:
        pass


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, threading.Thread]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@pytest.mark.parametrize(("handler", "wanted", "error", "delivered"), [
    (_Short, [0], "ended", set()),
    (_IgnoresRange, [2], "answered 200", set()),
    (_IgnoresRange, [0, 1], None, {0, 1}),  # a whole file from byte 0 serves a range from 0
])
def test_an_answer_that_is_not_the_range_asked_for_is_an_error(
        handler: type[BaseHTTPRequestHandler], wanted: list[int], error: str | None,
        delivered: set[int]) -> None:
    server, thread = _serve(handler)
    try:
        fetch, got = _fetch(f"http://127.0.0.1:{server.server_port}/filter.bsf", wanted)
        fetch.start().join(10)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    assert fetch.done
    assert (fetch.error is None) if error is None else (error in (fetch.error or ""))
    assert set(got) == delivered
    assert all(got[p] == _piece(p) for p in got)


def test_a_piece_that_cannot_be_handed_over_ends_the_fetch(origin: Origin) -> None:
    def refuse(piece: int, data: bytes) -> None:
        raise RuntimeError("invalid torrent handle used")

    fetch = StripeFetch(origin.url("filter.bsf"), [0], GEOMETRY, missing=lambda p: True, deliver=refuse)
    fetch.start().join(10)
    assert fetch.done and "could not be handed over" in (fetch.error or "")


def test_a_piece_that_fails_its_sha1_is_not_handed_over_and_is_reported(origin: Origin) -> None:
    hashes = {p: hashlib.sha1(_piece(p)).digest() for p in (3, 4)}
    hashes[4] = bytes(20)  # the torrent says otherwise: the origin's piece 4 is "bad"
    got: dict[int, bytes] = {}
    fetch = StripeFetch(origin.url("filter.bsf"), [3, 4], GEOMETRY, missing=lambda p: True,
                        deliver=got.__setitem__, piece_hashes=hashes)
    fetch.start().join(10)
    assert fetch.done and fetch.error is None
    assert got == {3: _piece(3)}
    assert fetch.take_bad_pieces() == [4]
    assert fetch.take_bad_pieces() == []
