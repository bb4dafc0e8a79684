"""Local Service Discovery: two swarm workers find each other by LSD multicast alone.

Multicast needs an interface that carries it; the test makes its own network namespace
(``ip netns add``), brings its loopback up with multicast on and a route for
239.0.0.0/8 (LSD sends to 239.192.152.143:6771), and runs the workers in it through
``ip netns exec`` (which execs the command, so each worker keeps the PID the test stops
it by). No tracker, no DHT, no web seed: a leecher completes only if LSD connects it
to the seed. A third worker with LSD off, started beside the leecher, is the control:
it finds nobody. The namespace is deleted at the end; nothing leaves it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.common.file_hash import file_sha256
from bloomswarm.sandbox.swarm_worker import WorkerProcess
from bloomswarm.sandbox.worker_swarm import MIB, make_test_torrent, write_random_file
from tests.functional.netns import network_namespace

pytestmark = pytest.mark.timeout(180)

FILE_SIZE = 4 * MIB


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace with multicast on its loopback; deleted afterwards."""
    with network_namespace("bsw-lsd", [["link", "set", "lo", "multicast", "on"],
                                       ["route", "add", "239.0.0.0/8", "dev", "lo"]]) as name:
        yield name


def _swarm(lsd: bool) -> dict[str, Any]:
    return {"listen_interfaces": "127.0.0.1:0", "trackers": [], "enable_dht": False,
            "enable_lsd": lsd, "peer_rediscovery_s": 2.0}


def _spec(torrent_path: Path, directory: Path, mode: str, lsd: bool) -> dict[str, Any]:
    return {"swarm": _swarm(lsd), "version": 1, "torrent": str(torrent_path), "dir": str(directory),
            "mode": mode, "origin_url": None, "poll_interval": 0.1, "report_interval": 0.5}


def test_two_workers_find_each_other_by_lsd_alone(netns: str, tmp_path: Path) -> None:
    file = tmp_path / "seed" / "filter.bsf"
    write_random_file(file, FILE_SIZE)
    torrent = make_test_torrent(file, v1_only=True)
    prefix = ["ip", "netns", "exec", netns]
    seed = WorkerProcess(_spec(torrent.torrent_path, torrent.file.parent, "seed", lsd=True),
                         name="lsd-seed", prefix=prefix)
    leecher = WorkerProcess(_spec(torrent.torrent_path, tmp_path / "leecher", "download", lsd=True),
                            name="lsd-leecher", prefix=prefix)
    control = WorkerProcess(_spec(torrent.torrent_path, tmp_path / "control", "download", lsd=False),
                            name="no-lsd", prefix=prefix)
    workers = [seed, leecher, control]
    try:
        seed.start()
        ready = seed.wait_for(lambda r: r.get("event") == "ready", 5)
        assert ready["pid"] == seed.pid  # ip netns exec exec'd the worker: stopped by its PID
        leecher.start()
        control.start()
        started = time.monotonic()
        done = leecher.wait_finished(60)
        assert done["bytes_from_peers"] == torrent.size and done["bytes_from_origin"] == 0, done
        assert done["hash_failures"] == 0
        assert file_sha256(tmp_path / "leecher" / torrent.name) == torrent.sha256
        # The control ran as long with the same seed in the namespace, LSD off: nobody.
        time.sleep(max(0.0, 3.0 - (time.monotonic() - started)))
        control.wait_for(lambda r: r.get("event") == "status" and r["t"] >= 2.0, 10)
        assert control.latest is not None
        assert control.latest["bytes_from_peers"] == 0 and control.latest["peers"] == 0, control.latest
        assert not control.latest["finished"]
    finally:
        for worker in workers:
            worker.cleanup()
