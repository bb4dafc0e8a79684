"""The swarm keys its torrents by TransferKey: a version's file (an int) and a delta
(DeltaKey) are transfers of their own in one session, each with its status and resume data.

A real libtorrent session on 127.0.0.1 with no peers and no origin: one agent seeds a
delta it holds, and a second session downloads it from the first (both on loopback).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from bloomswarm.agent.config import SwarmConfig
from bloomswarm.agent.swarm import Swarm
from bloomswarm.agent.transfer import DeltaKey
from bloomswarm.publisher.torrent import make_torrent

pytestmark = pytest.mark.timeout(60)


def _torrent(directory: Path, name: str, fill: int) -> bytes:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_bytes(bytes([fill]) * (64 << 10))
    return make_torrent(path, trackers=[], piece_size=16 << 10, progress=False).data


def _swarm() -> Swarm:
    return Swarm(SwarmConfig(listen_interfaces="127.0.0.1:0", enable_dht=False))


def test_a_delta_and_its_versions_file_are_separate_transfers(tmp_path: Path) -> None:
    seeded = tmp_path / "versions" / "v2"
    file_torrent = _torrent(seeded, "filter.bsf", 1)
    delta_torrent = _torrent(seeded, "delta-from-v1.bsd", 2)
    key = DeltaKey(2, 1)
    with _swarm() as source, _swarm() as sink:
        source.seed(2, file_torrent, seeded)
        source.seed(key, delta_torrent, seeded)
        assert source.versions() == [2, key]
        with pytest.raises(ValueError, match="v2-from-v1"):  # one torrent, one key
            source.seed(DeltaKey(2, 9), delta_torrent, seeded)
        status = source.status(key)
        assert status is not None and status.key == key and status.base == 1 and status.finished

        staging = tmp_path / "staging" / "v2"
        sink.start_download(key, delta_torrent, staging, None)
        handle_status = sink.status(key)
        assert handle_status is not None and handle_status.key == key and not handle_status.finished
        assert sink.trackers(key) == [] and sink.web_seeds(key) == []
        sink.connect(key, ("127.0.0.1", source.listen_port()))  # no discovery here
        deadline = time.monotonic() + 30
        while not (done := sink.status(key)) or not done.finished:
            assert time.monotonic() < deadline, sink.status(key)
            source.poll()
            sink.poll()
            time.sleep(0.05)
        assert (staging / "delta-from-v1.bsd").read_bytes() == bytes([2]) * (64 << 10)
        assert done.bytes_from_peers == 64 << 10 and done.base == 1
        sink.remove(key)
        assert sink.versions() == [] and sink.status(key) is None
