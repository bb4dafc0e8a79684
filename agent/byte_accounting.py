"""Which of a download's payload bytes came from the origin and which from peers.

``bytes_from_origin`` and ``bytes_from_peers`` come from libtorrent's cumulative
per-connection payload counters (``get_peer_info()``; a web seed is told apart by its
``connection_type``), read at every ``Swarm.poll`` and ``Swarm.status``. A connection that
closes between two reads takes the bytes it received since the last read with it; those
are recovered from the torrent's exact total (``total_payload_download``): the part of the
total not seen on live connections is given to the connections that disappeared, by their
last download rates. So ``bytes_from_origin + bytes_from_peers`` equals libtorrent's
payload total up to the bytes in flight during one read. (``block_finished_alert`` looks
exact but is not: libtorrent 2.x skips it for blocks whose disk write completes after the
torrent turned seed.) Pure Python, no libtorrent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ConnectionKey = tuple[Any, ...]
"""Identifies one live connection (its endpoints)."""


@dataclass
class _Connection:
    origin: bool
    downloaded: int
    rate: int


class ByteAccounting:
    """Splits one torrent's downloaded payload between the origin and the peers.

    Feed it, at every read, the torrent's exact payload total and a snapshot of its live
    connections (:meth:`update`). Each live connection contributes what its cumulative
    counter grew by since the previous snapshot. The bytes that no live counter explains
    (received by connections that closed since the previous snapshot) are given to the
    connections that disappeared last, in proportion to their last download rates —
    also later, since libtorrent's total lags the per-connection counters by up to a
    second. A connection can also open and close between two snapshots (a small file on
    a fast link). With the origin attached at either snapshot, no web seed seen and no
    connection gone, the unexplained bytes are the origin's; with the origin attached at
    neither and no connection ever gone to take them, they can only be the peers'.
    """

    def __init__(self) -> None:
        self.origin = 0
        """Payload bytes attributed to the origin (web seeds)."""
        self.peers = 0
        """Payload bytes attributed to peers."""
        self._live: dict[ConnectionKey, _Connection] = {}
        self._gone: list[_Connection] = []
        self._origin_was_attached = False

    def update(
        self,
        total: int,
        connections: list[tuple[ConnectionKey, bool, int, int]],
        *,
        origin_attached: bool = False,
    ) -> None:
        """Account for a snapshot.

        ``total`` is the torrent's cumulative payload download, read *before* the
        connections; ``connections`` holds ``(key, is_origin, downloaded, rate)`` per live
        connection: a key unique to the connection (endpoints), whether it is a web
        seed, its cumulative payload download, and its current download rate.
        ``origin_attached``: the origin is added as a web seed at this snapshot.
        """
        gone: list[_Connection] = []
        live: dict[ConnectionKey, _Connection] = {}
        for key, is_origin, downloaded, rate in connections:
            previous = self._live.pop(key, None)
            if previous is None or downloaded < previous.downloaded:
                if previous is not None:  # the key was reused by a new connection
                    gone.append(previous)
                delta = downloaded
            else:
                delta = downloaded - previous.downloaded
            if is_origin:
                self.origin += delta
            else:
                self.peers += delta
            live[key] = _Connection(is_origin, downloaded, rate)
        gone.extend(self._live.values())
        web_seed_seen = any(c.origin for c in live.values()) or any(c.origin for c in gone)
        self._live = live
        if gone:
            self._gone = gone
        unexplained = total - self.origin - self.peers
        origin_possible = origin_attached or self._origin_was_attached
        self._origin_was_attached = origin_attached
        if unexplained > 0 and origin_possible and not web_seed_seen and not gone:
            self.origin += unexplained  # a web-seed connection came and went unseen
        elif unexplained > 0 and not self._gone and not origin_possible:
            self.peers += unexplained  # a peer connection came and went unseen
        elif unexplained > 0 and self._gone:
            gone = self._gone
            weights = [max(c.rate, 1) for c in gone]
            to_origin = unexplained * sum(w for c, w in zip(gone, weights, strict=True) if c.origin)
            to_origin //= sum(weights)
            self.origin += to_origin
            self.peers += unexplained - to_origin
