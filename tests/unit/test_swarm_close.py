"""Swarm.close destroys the libtorrent session at once: its listening socket is closed
when close() returns, not when the Swarm object is garbage collected."""

from __future__ import annotations

import socket

from bloomswarm.agent.config import SwarmConfig
from bloomswarm.agent.swarm import Swarm


def _can_listen_on(port: int) -> bool:
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("127.0.0.1", port))
        probe.listen()
        return True
    except OSError:
        return False
    finally:
        probe.close()


def test_close_releases_the_listening_port_while_the_swarm_object_lives() -> None:
    # An origin class too: OriginPeerClass holds the session as well.
    swarm = Swarm(SwarmConfig(listen_interfaces="127.0.0.1:0", enable_dht=False, enable_lsd=False,
                              origin_rate_limit=1_000_000))
    port = swarm.listen_port()
    assert port > 0 and not _can_listen_on(port)
    swarm.close()
    assert _can_listen_on(port), "the session still listens after close()"
    swarm.close()  # idempotent
