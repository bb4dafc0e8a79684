"""Origin stripes inside a real libtorrent session (one Swarm, no peers; two for the fleet
in sight).

The rules themselves are the pure core's (test_origin_policy*.py, test_origin_stripes.py);
these tests check what the Swarm does to the torrent. Fetched by range requests (the
default): each stripe's pieces are requested from the origin exactly once, no web seed is
attached and no priority changed; an origin error turns the origin off. Fetched by the
web seed: the piece priorities a stripe sets, that an origin going off (here: an origin
error) leaves them at the default again, and that resume data never brings a stripe's
zeros back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bloomswarm.agent.config import SwarmConfig
from bloomswarm.agent.origin_stripes import DEFAULT_PRIORITY, TOP_PRIORITY
from bloomswarm.agent.swarm import Swarm
from bloomswarm.agent.transfer import OriginURL
from bloomswarm.publisher.torrent import make_torrent
from bloomswarm.sandbox.origin import Origin

PIECE = 16 << 10
PIECES = 32
SILENT_ORIGIN = "http://127.0.0.2:9/filter.bsf"
"""A closed port: the web seed is added, and no byte (nor error) ever comes back."""


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class _NotFound(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_error(404)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def failing_origin() -> Iterator[str]:
    """An origin that answers every request with 404 (libtorrent reports a url_seed_alert)."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotFound)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/filter.bsf"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


@pytest.fixture
def torrent(tmp_path: Path) -> bytes:
    path = tmp_path / "seed" / "filter.bsf"
    path.parent.mkdir()
    path.write_bytes(bytes(range(256)) * (PIECES * PIECE // 256))
    return make_torrent(path, piece_size=PIECE, progress=False).data


def _striped(fetch: str) -> SwarmConfig:
    # The policy decides at once (no grace, no stagger); the clock stands still, so an
    # origin that failed is not retried. Runs of 2 pieces, 4 stripes.
    return SwarmConfig(listen_interfaces="127.0.0.1:0", enable_dht=False, allow_private_origin=True,
                       origin_grace_s=0.0, origin_stagger_s=0.0, origin_request_bytes=2 * PIECE,
                       origin_stripes=4, origin_retry_s=30.0,
                       origin_stripe_fetch="ranges" if fetch == "ranges" else "web_seed")


@pytest.fixture
def swarm() -> Iterator[Swarm]:
    """Stripes fetched by libtorrent's web seed."""
    swarm = Swarm(_striped("web_seed"), clock=Clock())
    yield swarm
    swarm.close()


@pytest.fixture
def ranged() -> Iterator[Swarm]:
    """Stripes fetched by range requests (the default)."""
    swarm = Swarm(_striped("ranges"), clock=Clock())
    yield swarm
    swarm.close()


@pytest.fixture
def origin(tmp_path: Path, torrent: bytes) -> Iterator[Origin]:
    """The torrent's file behind an HTTP origin that logs every range it sends."""
    with Origin(files=tmp_path / "seed") as running:
        yield running


def test_stripes_fetched_by_ranges_request_each_piece_from_the_origin_once(
        ranged: Swarm, torrent: bytes, tmp_path: Path, origin: Origin) -> None:
    """With no peer, the download takes one free stripe after another: in the end every
    piece came from the origin, each requested once, in requests within one stripe's run;
    no web seed, no priority touched."""
    ranged.start_download(1, torrent, tmp_path / "download", _factory(origin.url("filter.bsf")))
    _poll_until(ranged, lambda: ranged.origin_in_use(1), "the origin on")
    assert ranged.web_seeds(1) == []
    assert _priorities(ranged) == [DEFAULT_PRIORITY] * PIECES
    _poll_until(ranged, lambda: (st := ranged.status(1)) is not None and st.finished, "the file complete")
    fetched = (tmp_path / "download" / "filter.bsf").read_bytes()
    assert fetched == (tmp_path / "seed" / "filter.bsf").read_bytes()
    requests = origin.wait_for_payload_requests(PIECES // 2)
    ranges = sorted((r.first, r.last) for r in requests)
    assert sum(r.sent for r in requests) == PIECES * PIECE
    assert ranges == [(run * 2 * PIECE, (run * 2 + 2) * PIECE - 1) for run in range(PIECES // 2)]
    status = ranged.status(1)
    assert status is not None and status.bytes_from_origin == PIECES * PIECE
    assert status.bytes_from_peers == 0


class _Zeros(BaseHTTPRequestHandler):
    """Answers every range with zeros of the right length: pieces that fail their hash."""

    requests = 0

    def do_GET(self) -> None:
        first, last = (int(v) for v in self.headers["Range"].removeprefix("bytes=").split("-"))
        type(self).requests += 1
        self.send_response(206)
        self.send_header("Content-Length", str(last - first + 1))
        self.send_header("Content-Range", f"bytes {first}-{last}/{PIECES * PIECE}")
        self.end_headers()
        self.wfile.write(bytes(last - first + 1))

    def log_message(self, format: str, *args: object) -> None:
        pass


def test_pieces_that_fail_their_hash_are_fetched_again_then_the_origin_counts_as_failed(
        torrent: bytes, tmp_path: Path) -> None:
    """A stripe whose pieces never pass their hash check is fetched three times (each 2 s
    after the last handed its pieces over), then the origin is an origin error: off."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Zeros)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    clock = Clock()
    swarm = Swarm(_striped("ranges"), clock=clock)
    try:
        swarm.start_download(1, torrent, tmp_path / "download",
                             _factory(f"http://127.0.0.1:{server.server_port}/filter.bsf"))
        _poll_until(swarm, lambda: swarm.origin_in_use(1), "the origin on")

        def tick() -> bool:
            clock.now += 0.5
            return not swarm.origin_in_use(1)

        _poll_until(swarm, tick, "the origin off after three fetches of bad pieces")
        status = swarm.status(1)
        assert status is not None and status.progress == 0.0 and status.hash_failures == 3 * 8
        assert _Zeros.requests == 3 * 4  # the stripe: 4 runs of 2 pieces, fetched 3 times
    finally:
        swarm.close()
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_a_stripe_fetch_that_fails_turns_the_origin_off(
        ranged: Swarm, torrent: bytes, tmp_path: Path, failing_origin: str) -> None:
    ranged.start_download(1, torrent, tmp_path / "download", _factory(failing_origin))
    _poll_until(ranged, lambda: ranged.origin_in_use(1), "the origin on")
    _poll_until(ranged, lambda: not ranged.origin_in_use(1), "the origin off after its error")
    assert ranged.web_seeds(1) == []
    status = ranged.status(1)
    assert status is not None and status.bytes_from_origin == 0


def _factory(url: str) -> Callable[[], OriginURL]:
    return lambda: OriginURL(url)


def _poll_until(swarm: Swarm, condition: Callable[[], bool], what: str) -> None:
    for _ in range(500):
        swarm.poll()
        if condition():
            return
        time.sleep(0.02)
    raise AssertionError(f"never: {what}")


def _priorities(swarm: Swarm) -> list[int]:
    priorities = swarm.piece_priorities(1)
    assert priorities is not None
    return priorities


def test_taking_the_origin_puts_one_stripe_first_and_other_unheld_pieces_at_zero(
        swarm: Swarm, torrent: bytes, tmp_path: Path) -> None:
    swarm.start_download(1, torrent, tmp_path / "download", _factory(SILENT_ORIGIN))
    _poll_until(swarm, lambda: swarm.origin_in_use(1), "the origin on")
    assert swarm.web_seeds(1) == [SILENT_ORIGIN]
    priorities = _priorities(swarm)
    first = priorities.index(TOP_PRIORITY)
    stripe = (first // 2) % 4
    assert priorities == [TOP_PRIORITY if (i // 2) % 4 == stripe else 0 for i in range(PIECES)]


def test_the_origin_going_off_restores_the_default_priorities(
        swarm: Swarm, torrent: bytes, tmp_path: Path, failing_origin: str) -> None:
    swarm.start_download(1, torrent, tmp_path / "download", _factory(failing_origin))
    _poll_until(swarm, lambda: swarm.origin_in_use(1), "the origin on")
    assert TOP_PRIORITY in _priorities(swarm)
    _poll_until(swarm, lambda: not swarm.origin_in_use(1), "the origin off after its error")
    assert _priorities(swarm) == [DEFAULT_PRIORITY] * PIECES
    assert swarm.web_seeds(1) == []


def test_a_resumed_download_starts_from_the_default_priorities(
        swarm: Swarm, torrent: bytes, tmp_path: Path) -> None:
    swarm.start_download(1, torrent, tmp_path / "download", _factory(SILENT_ORIGIN))
    _poll_until(swarm, lambda: swarm.origin_in_use(1), "the origin on")
    assert 0 in _priorities(swarm)  # a stripe is on: resume data would remember the zeros
    resume = swarm.save_resume_data(timeout=10.0)[1]
    swarm.remove(1)
    swarm.start_download(1, torrent, tmp_path / "download", None, resume_data=resume)
    assert _priorities(swarm) == [DEFAULT_PRIORITY] * PIECES
    assert swarm.web_seeds(1) == []


def test_without_stripes_the_priorities_are_never_touched(torrent: bytes, tmp_path: Path) -> None:
    config = SwarmConfig(listen_interfaces="127.0.0.1:0", enable_dht=False, allow_private_origin=True,
                         origin_grace_s=0.0, origin_stagger_s=0.0, origin_starved_s=0.0, origin_stripes=1)
    swarm = Swarm(config, clock=Clock())
    try:
        swarm.start_download(1, torrent, tmp_path / "download", _factory(SILENT_ORIGIN))
        _poll_until(swarm, lambda: swarm.origin_in_use(1), "the origin on")
        assert _priorities(swarm) == [DEFAULT_PRIORITY] * PIECES
    finally:
        swarm.close()


def test_a_new_versions_download_sees_the_agents_connected_for_the_version_seeded(
        torrent: bytes, tmp_path: Path) -> None:
    """The fleet in sight: peers connected for version 1 (both sides seeds) are counted for
    version 2 before anyone connects for it, per filter."""
    config = SwarmConfig(listen_interfaces="127.0.0.1:0", enable_dht=False, allow_private_origin=True)
    seeder, agent = Swarm(config, clock=Clock()), Swarm(config, clock=Clock())
    try:
        seeder.seed(1, torrent, tmp_path / "seed")
        agent.seed(1, torrent, tmp_path / "seed")
        agent._torrents[1].handle.connect_peer(("127.0.0.1", seeder.listen_port()))  # no tracker here
        path = tmp_path / "v2" / "filter.bsf"
        path.parent.mkdir()
        path.write_bytes(bytes(PIECES * PIECE))
        agent.start_download(2, make_torrent(path, piece_size=PIECE, progress=False).data,
                             tmp_path / "download", _factory(SILENT_ORIGIN))
        _poll_until(agent, lambda: agent.fleet_in_sight() == {seeder.peer_id}, "the seeder in sight")
        assert agent.fleet_in_sight("another filter") == frozenset()
    finally:
        agent.close()
        seeder.close()
