"""Origin stripes inside a real libtorrent session (one Swarm, no peers, no network).

The rules themselves are pure functions (test_origin_stripes.py); these tests check what
the Swarm does to the torrent: the piece priorities a stripe sets, and that every way the
origin goes off leaves them at the default again, also across resume data.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bloomswarm.agent.origin_stripes import DEFAULT_PRIORITY, TOP_PRIORITY
from bloomswarm.agent.swarm import Swarm, SwarmConfig
from bloomswarm.agent.transfer import OriginURL
from bloomswarm.publisher.torrent import make_torrent

PIECE = 16 << 10
PIECES = 32


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def torrent(tmp_path: Path) -> bytes:
    path = tmp_path / "seed" / "filter.bsf"
    path.parent.mkdir()
    path.write_bytes(bytes(range(256)) * (PIECES * PIECE // 256))
    return make_torrent(path, piece_size=PIECE, progress=False).data


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def swarm(clock: Clock) -> Iterator[Swarm]:
    # An origin nobody listens on (a closed port of 127.0.0.2): the policy decides, no
    # byte ever arrives. Runs of 2 pieces, 4 stripes.
    config = SwarmConfig(listen_interfaces="127.0.0.1:0", enable_dht=False, allow_private_origin=True,
                         origin_grace_s=0.0, origin_stagger_s=0.0, origin_request_bytes=2 * PIECE,
                         origin_stripes=4, origin_retry_s=30.0)
    swarm = Swarm(config, clock=clock)
    yield swarm
    swarm.close()


def _origin() -> OriginURL:
    return OriginURL("http://127.0.0.2:9/filter.bsf")


def _poll_until_on(swarm: Swarm) -> None:
    """Poll until the download took the origin (once libtorrent finished adding it)."""
    for _ in range(200):
        swarm.poll()
        origin = swarm._torrents[1].origin
        if origin is not None and origin.added is not None:
            return
        time.sleep(0.02)
    raise AssertionError("the download never took the origin")


def _priorities(swarm: Swarm) -> list[int]:
    return list(swarm._torrents[1].handle.get_piece_priorities())


def test_taking_the_origin_puts_one_stripe_first_and_other_unheld_pieces_at_zero(
        swarm: Swarm, torrent: bytes, tmp_path: Path) -> None:
    swarm.start_download(1, torrent, tmp_path / "download", _origin)
    _poll_until_on(swarm)
    record = swarm._torrents[1]
    assert record.origin is not None and record.origin.added is not None
    stripe = record.origin.stripe
    assert stripe is not None
    expected = [TOP_PRIORITY if (i // 2) % 4 == stripe else 0 for i in range(PIECES)]
    assert _priorities(swarm) == expected


def test_every_way_off_restores_the_default_priorities(swarm: Swarm, torrent: bytes, tmp_path: Path) -> None:
    swarm.start_download(1, torrent, tmp_path / "download", _origin)
    _poll_until_on(swarm)
    record = swarm._torrents[1]
    assert record.origin is not None and record.origin.stripe is not None
    swarm._origin_off(record, "test")
    assert record.origin.stripe is None
    assert _priorities(swarm) == [DEFAULT_PRIORITY] * PIECES


def test_a_resumed_download_starts_from_the_default_priorities(
        swarm: Swarm, torrent: bytes, tmp_path: Path) -> None:
    swarm.start_download(1, torrent, tmp_path / "download", _origin)
    _poll_until_on(swarm)
    assert 0 in _priorities(swarm)  # a stripe is on: resume data would remember the zeros
    resume = swarm.save_resume_data(timeout=10.0)[1]
    swarm.remove(1)
    swarm.start_download(1, torrent, tmp_path / "download", None, resume_data=resume)
    assert _priorities(swarm) == [DEFAULT_PRIORITY] * PIECES


def test_without_stripes_the_priorities_are_never_touched(
        clock: Clock, torrent: bytes, tmp_path: Path) -> None:
    config = SwarmConfig(listen_interfaces="127.0.0.1:0", enable_dht=False, allow_private_origin=True,
                         origin_grace_s=0.0, origin_stagger_s=0.0, origin_starved_s=0.0, origin_stripes=1)
    swarm = Swarm(config, clock=clock)
    try:
        swarm.start_download(1, torrent, tmp_path / "download", _origin)
        _poll_until_on(swarm)
        assert swarm._torrents[1].origin is not None and swarm._torrents[1].origin.added is not None
        assert _priorities(swarm) == [DEFAULT_PRIORITY] * PIECES
    finally:
        swarm.close()
