"""Small filters straight from the origin, larger ones through the swarm.

A swarm pays a fixed cost per version before the first byte moves: a tracker or DHT
answer, connections, the origin policy's grace period (``swarm.origin_grace_s``) while
peers are given the first chance. For a file of a few hundred KiB that wait is the whole
rollout, and what P2P saves the origin is a few hundred KiB per agent.
:class:`SizeRoutedTransfer` therefore fetches a filter file of at most
``swarm.direct_max_bytes`` with a plain HTTP GET from the origin (or CDN), and
everything else through the swarm. A delta is routed by its own size the same way: a
small filter's delta (a few KiB) through the swarm took twice as long as its whole file
fetched directly (docs/benchmarks/delta-rollout.md). docs/benchmarks/many_filters.md
measures the choice.

A key's route is decided once, when it starts (from the size its torrent states), and
kept until it is removed; a file fetched directly is not seeded (the direct transfer
only records it). The daemon cannot tell the routes apart: each key has one status.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from .transfer import (
    OriginURLFactory,
    Transfer,
    TransferKey,
    TransferStatus,
    key_order,
)
from .verify import CheckFailed, read_torrent

DIRECT_WAIT_S = 0.05
"""While direct downloads run, :meth:`SizeRoutedTransfer.wait` waits on them at most
this long before it looks at the swarm's news."""


class SizeRoutedTransfer:
    """A :class:`~.transfer.Transfer` sending files (filter files or deltas) of at most
    ``max_direct`` bytes to ``direct`` and the rest to ``swarm`` (see the module
    docstring)."""

    def __init__(self, swarm: Transfer, direct: Transfer, max_direct: int) -> None:
        if max_direct < 0:
            raise ValueError(f"max_direct must not be negative, got {max_direct}")
        self.swarm = swarm
        self.direct = direct
        self.max_direct = max_direct
        self._routes: dict[TransferKey, Transfer] = {}
        self._direct_under_way: set[TransferKey] = set()
        """Direct downloads not seen finished yet: :meth:`wait` looks at these alone, not
        at every file the direct transfer holds (an agent of many filters holds hundreds)."""

    def route(self, key: TransferKey, torrent: bytes) -> Transfer:
        """The transfer ``key`` goes to: the direct one for a file (a filter file or a
        delta) whose torrent states at most ``max_direct`` bytes; the swarm otherwise (a
        torrent that does not parse too: the swarm reports it)."""
        if self.max_direct == 0:
            return self.swarm
        try:
            size = read_torrent(torrent).total_size
        except CheckFailed:
            return self.swarm
        return self.direct if size <= self.max_direct else self.swarm

    def _routed(self, key: TransferKey, torrent: bytes, *, has_origin: bool = True) -> Transfer:
        transfer = self._routes.get(key)
        if transfer is None:
            transfer = self._routes[key] = self.route(key, torrent) if has_origin else self.swarm
        return transfer

    def start_download(
        self,
        key: TransferKey,
        torrent: bytes,
        save_dir: Path,
        origin: OriginURLFactory | None,
        *,
        resume_data: bytes | None = None,
    ) -> None:
        """See :meth:`Transfer.start_download`; a small file without an origin (peers
        only) goes to the swarm, where peers are."""
        transfer = self._routed(key, torrent, has_origin=origin is not None)
        transfer.start_download(key, torrent, save_dir, origin, resume_data=resume_data)
        if transfer is self.direct:
            self._direct_under_way.add(key)

    def seed(self, key: TransferKey, torrent: bytes, file_dir: Path) -> None:
        """See :meth:`Transfer.seed` (a small file is only recorded, not served)."""
        self._routed(key, torrent).seed(key, torrent, file_dir)

    def relocate(self, key: TransferKey, file_dir: Path, timeout: float = 5.0) -> bool:
        """See :meth:`Transfer.relocate`."""
        transfer = self._routes.get(key)
        return transfer is not None and transfer.relocate(key, file_dir, timeout)

    def remove(self, key: TransferKey) -> None:
        """See :meth:`Transfer.remove`."""
        transfer = self._routes.pop(key, None)
        self._direct_under_way.discard(key)
        if transfer is not None:
            transfer.remove(key)

    def status(self, key: TransferKey) -> TransferStatus | None:
        """See :meth:`Transfer.status`."""
        transfer = self._routes.get(key)
        return transfer.status(key) if transfer is not None else None

    def versions(self) -> list[TransferKey]:
        """See :meth:`Transfer.versions`: both transfers' keys."""
        return sorted({*self.swarm.versions(), *self.direct.versions()}, key=key_order)

    def poll(self) -> None:
        """Poll both transfers."""
        self.swarm.poll()
        self.direct.poll()

    def wait(self, timeout: float) -> None:
        """Wait for news of either transfer (a direct download's news within
        :data:`DIRECT_WAIT_S` while one runs)."""
        if self._direct_downloading():
            self.direct.wait(min(timeout, DIRECT_WAIT_S))
            self.swarm.wait(0.0)
        else:
            self.swarm.wait(timeout)

    def _direct_downloading(self) -> bool:
        """Whether a direct download is under way (the finished ones are forgotten here)."""
        finished = {k for k in self._direct_under_way
                    if (s := self.direct.status(k)) is None or s.finished}
        self._direct_under_way -= finished
        return bool(self._direct_under_way)

    def save_resume_data(
        self, timeout: float = 10.0, keys: Collection[TransferKey] | None = None
    ) -> dict[TransferKey, bytes]:
        """The swarm's resume data (of ``keys``, when given). A small file fetched directly
        has none: after a restart it is fetched again, which costs less than keeping its
        announcement and resume data on disk while it downloads (four file writes for a
        download that takes a fraction of a second)."""
        if keys is not None:
            keys = [k for k in keys if self._routes.get(k) is not self.direct]
            if not keys:  # only files fetched directly: the swarm is not bothered
                return {}
        return self.swarm.save_resume_data(timeout, keys)

    def close(self) -> None:
        """Close both transfers."""
        self._routes.clear()
        self._direct_under_way.clear()
        self.direct.close()
        self.swarm.close()


__all__ = ["DIRECT_WAIT_S", "SizeRoutedTransfer"]
