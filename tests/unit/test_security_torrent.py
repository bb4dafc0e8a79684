"""What a bucket writer without the signing key can and cannot do through the .torrent.

The torrent is not signed: only its info-hash is (in the manifest). Fields outside the
info dictionary — web seeds ("url-list") and trackers ("announce-list") — can be changed
without changing the info-hash, so the swap gate cannot notice. The agent therefore drops
every web seed written into a torrent (the origin is added at run time under its policy),
so an injected URL (an internal service, a metadata endpoint) is never fetched.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import libtorrent as lt

from bloomswarm.agent.swarm import Swarm
from bloomswarm.agent.verify import read_torrent
from bloomswarm.publisher.torrent import make_torrent

INJECTED = "http://169.254.169.254/latest/meta-data/?x=1"


def _torrent_with_injected_web_seed(tmp_path: Path) -> tuple[bytes, bytes]:
    """(the published torrent, the same torrent with a web seed added by a bucket writer)."""
    path = tmp_path / "filter.bsf"
    path.write_bytes(bytes(range(256)) * 1024)
    published = make_torrent(path, trackers=[], piece_size=16 << 10, torrent_format="hybrid",
                             progress=False).data
    document: Any = lt.bdecode(published)  # keys are bytes at run time
    document[b"url-list"] = [INJECTED.encode()]
    return published, lt.bencode(document)


def test_injected_web_seed_keeps_the_info_hash_so_the_gate_cannot_see_it(tmp_path: Path) -> None:
    published, tampered = _torrent_with_injected_web_seed(tmp_path)
    assert read_torrent(tampered) == read_torrent(published)
    document: Any = lt.bdecode(tampered)  # keys are bytes at run time
    assert document[b"url-list"] == [INJECTED.encode()]


def test_the_agent_drops_web_seeds_written_into_a_torrent(tmp_path: Path) -> None:
    from bloomswarm.agent.config import SwarmConfig

    _published, tampered = _torrent_with_injected_web_seed(tmp_path)
    swarm = Swarm(SwarmConfig(listen_interfaces="127.0.0.1:0", enable_dht=False))
    try:
        swarm.start_download(1, tampered, tmp_path / "download", None)
        assert swarm.web_seeds(1) == []
    finally:
        swarm.close()


def _announced(torrent_trackers: bool, tmp_path: Path) -> list[str]:
    """The trackers a Swarm announces to for a torrent listing ``TORRENT_TRACKER``."""
    from bloomswarm.agent.config import SwarmConfig

    path = tmp_path / "filter.bsf"
    path.write_bytes(bytes(range(256)) * 256)
    torrent = make_torrent(path, trackers=[TORRENT_TRACKER], piece_size=16 << 10, progress=False).data
    config = SwarmConfig(listen_interfaces="127.0.0.1:0", enable_dht=False, trackers=(CONFIGURED,),
                         torrent_trackers=torrent_trackers)
    swarm = Swarm(config)
    try:
        swarm.start_download(1, torrent, tmp_path / "download", None)
        trackers = swarm.trackers(1)
        assert trackers is not None
        return trackers
    finally:
        swarm.close()


# Both on loopback: announces (if any get out) go nowhere else.
TORRENT_TRACKER = "http://127.0.0.2:9/announce"
CONFIGURED = "http://127.0.0.3:9/announce"


def test_the_agent_ignores_trackers_written_into_a_torrent(tmp_path: Path) -> None:
    assert _announced(False, tmp_path) == [CONFIGURED]


def test_torrent_trackers_setting_keeps_them(tmp_path: Path) -> None:
    assert _announced(True, tmp_path) == sorted([CONFIGURED, TORRENT_TRACKER])
