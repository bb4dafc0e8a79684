"""An agent that finishes a download keeps its peer connections while it installs it.

Real libtorrent sessions in this process, on 127.0.0.1, with no tracker, DHT or LSD: the
only way peers meet is ``Swarm.connect``, so a connection that is cut stays cut until a
peer dials again. Agent A downloads a file from a seed S into staging/v1. Leecher L then
connects to A alone (S is gone by then, so PEX cannot lead L elsewhere) and downloads
from A, whose upload is capped so that L is still busy when A installs: the file is
hard-linked into versions/v1 (``install_version(keep_staged=True)``), the transfer
switched to it (``Swarm.relocate``) and staging deleted.

Kept (the fix): L's connection to A lives on, its per-connection byte counter never
drops, and L finishes with the right bytes, all of them served by A (most of them from
versions/v1, staging being gone). Removed and seeded again (what the agent did before):
L's connection is cut (L dials A again a second later); the test checks that too, so
that the first check can fail.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from bloomswarm.agent.config import SwarmConfig
from bloomswarm.agent.install import InstalledDocuments, install_version, prepare_data_dir
from bloomswarm.agent.swarm import Swarm
from bloomswarm.common.datadir import DataDir
from bloomswarm.publisher.torrent import make_torrent

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

MIB = 1 << 20
SIZE = 6 * MIB
PIECE = 64 << 10
CAP = 1 * MIB
"""A's upload cap, bytes/s: L needs about 6 s to get the file from it."""


def _swarm(*, upload_rate_limit: int = 0) -> Swarm:
    return Swarm(SwarmConfig(listen_interfaces="127.0.0.1:0", enable_dht=False,
                             upload_rate_limit=upload_rate_limit))


def _pump(*swarms: Swarm) -> None:
    for swarm in swarms:
        swarm.poll()
    time.sleep(0.05)


def _wait(what: str, condition: Callable[[], bool], *swarms: Swarm, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        _pump(*swarms)


@pytest.mark.parametrize("keep", [True, False], ids=["relocate", "remove_and_seed"])
def test_a_leecher_stays_connected_while_the_agent_installs(tmp_path: Path, *, keep: bool) -> None:
    source = tmp_path / "source"
    source.mkdir()
    data = os.urandom(SIZE)
    (source / "filter.bsf").write_bytes(data)
    torrent = make_torrent(source / "filter.bsf", trackers=[], piece_size=PIECE, progress=False).data
    data_dir = tmp_path / "agent"
    prepare_data_dir(data_dir)
    layout = DataDir(data_dir)
    staging = layout.staging_dir(1)
    with _swarm() as seed, _swarm(upload_rate_limit=CAP) as agent, _swarm() as leecher:
        seed.seed(1, torrent, source)
        agent.start_download(1, torrent, staging, None)
        agent.connect(1, ("127.0.0.1", seed.listen_port()))
        _wait("A's download", lambda: (s := agent.status(1)) is not None and s.finished, seed, agent)
        seed.close()  # L can only ever get bytes from A

        leecher.start_download(1, torrent, tmp_path / "leecher", None)
        a_address = ("127.0.0.1", agent.listen_port())
        leecher.connect(1, a_address)

        def connection() -> tuple[int, int] | None:
            """L's connection to A: its local port and the bytes received (None: none)."""
            for (peer, local), received in (leecher.connection_bytes(1) or {}).items():
                if peer == a_address:
                    return local[1], received
            return None

        _wait("L's first megabyte from A", lambda: (c := connection()) is not None and c[1] >= MIB,
              agent, leecher)
        uploaded = agent.status(1)
        assert uploaded is not None and uploaded.peers == 1

        samples = [connection()]  # every tick
        installed = install_version(data_dir, 1, staging / "filter.bsf",
                                    InstalledDocuments(b"{}", b"sig", torrent), keep_staged=True)
        if keep:
            assert agent.relocate(1, installed.parent)
        else:
            agent.remove(1)
            agent.seed(1, torrent, installed.parent)
        shutil.rmtree(staging)

        def finished() -> bool:
            status = leecher.status(1)
            assert status is not None and status.state != "error", status
            return status.finished

        deadline = time.monotonic() + 60
        while not finished():
            assert time.monotonic() < deadline, f"L did not finish: {samples[-20:]}"
            _pump(agent, leecher)
            if not finished():  # once L is a seed, libtorrent closes seed-to-seed connections
                samples.append(connection())
        # libtorrent may count the bytes of earlier connections to the same peer in a new
        # one: a cut shows as a tick without the connection, or, when L dialled A again
        # between two ticks, as a new local port (or a drop in bytes)
        live = [sample for sample in samples if sample is not None]
        cut = (len(live) < len(samples) or len({port for port, _ in live}) > 1
               or any(after < before for (_, before), (_, after) in itertools.pairwise(live)))
        if not keep:
            assert cut, f"removing the torrent cut no connection: this test cannot tell {samples}"
            return
        assert not cut, f"L's connection to A was cut: {samples}"
        assert (tmp_path / "leecher" / "filter.bsf").read_bytes() == data
        after = agent.status(1)
        assert after is not None and after.state == "seeding"
        assert after.bytes_uploaded >= SIZE > uploaded.bytes_uploaded  # counts carried on
        assert after.bytes_from_peers == SIZE  # the download's counts, not a fresh seed's
        assert hashlib.sha256(installed.read_bytes()).digest() == hashlib.sha256(data).digest()
