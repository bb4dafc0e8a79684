"""One transfer shared by many filters: each filter sees only its own keys.

Every named filter's daemon numbers its versions from 1, so one libtorrent session
serving them all keys each transfer by ``ScopedKey(filter name, key)``. A
:class:`ScopedTransfer` is the filter's view of that session: it implements
:class:`~.transfer.Transfer` with the filter's plain keys, scoping them on the way in
and keeping only its own on the way out.

The shared transfer belongs to whoever runs the filters (:mod:`.filter_set`): it calls
``poll`` and ``wait`` once per tick for all of them, and ``close`` once at the end. The
view's ``poll`` and ``wait`` therefore do nothing, and its ``close`` removes only the
filter's own transfers (the filter was dropped from the configuration; the others keep
their downloads and their peers).
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import TypeGuard

from .transfer import (
    OriginURLFactory,
    ScopedKey,
    Transfer,
    TransferKey,
    TransferStatus,
    key_order,
)


class ScopedTransfer:
    """Filter ``scope``'s view of the ``shared`` transfer (see the module docstring)."""

    def __init__(self, shared: Transfer, scope: str) -> None:
        self.shared = shared
        self.scope = scope
        self._keys: set[TransferKey] = set()
        """The filter's keys in the shared transfer (which drops a key only when told):
        listing them costs the filter's own count, not every filter's."""

    def _scoped(self, key: TransferKey) -> ScopedKey:
        if isinstance(key, ScopedKey):
            raise ValueError(f"{key}: a filter's view takes its own keys, not scoped ones")
        return ScopedKey(self.scope, key)

    def _owns(self, key: TransferKey) -> TypeGuard[ScopedKey]:
        return isinstance(key, ScopedKey) and key.scope == self.scope

    def start_download(
        self,
        key: TransferKey,
        torrent: bytes,
        save_dir: Path,
        origin: OriginURLFactory | None,
        *,
        resume_data: bytes | None = None,
    ) -> None:
        """See :meth:`Transfer.start_download`."""
        self.shared.start_download(self._scoped(key), torrent, save_dir, origin, resume_data=resume_data)
        self._keys.add(key)

    def seed(self, key: TransferKey, torrent: bytes, file_dir: Path) -> None:
        """See :meth:`Transfer.seed`."""
        self.shared.seed(self._scoped(key), torrent, file_dir)
        self._keys.add(key)

    def relocate(self, key: TransferKey, file_dir: Path, timeout: float = 5.0) -> bool:
        """See :meth:`Transfer.relocate`."""
        return self.shared.relocate(self._scoped(key), file_dir, timeout)

    def remove(self, key: TransferKey) -> None:
        """See :meth:`Transfer.remove`."""
        self.shared.remove(self._scoped(key))
        self._keys.discard(key)

    def status(self, key: TransferKey) -> TransferStatus | None:
        """See :meth:`Transfer.status` (the status's ``key`` is the filter's own)."""
        return self.shared.status(self._scoped(key))

    def versions(self) -> list[TransferKey]:
        """The filter's own keys being transferred, in :func:`~.transfer.key_order`."""
        return sorted(self._keys, key=key_order)

    def poll(self) -> None:
        """Nothing: the owner of the shared transfer polls it once for every filter."""

    def wait(self, timeout: float) -> None:
        """Nothing: the owner of the shared transfer waits on it for every filter."""

    def save_resume_data(
        self, timeout: float = 10.0, keys: Collection[TransferKey] | None = None
    ) -> dict[TransferKey, bytes]:
        """Resume data of the filter's own unfinished downloads (of ``keys``, when given),
        by its own keys: the shared transfer is asked for those alone."""
        own = [self._scoped(k) for k in (self._keys if keys is None else keys)]
        saved = self.shared.save_resume_data(timeout, own)
        return {k.key: data for k, data in saved.items() if self._owns(k)}

    def close(self) -> None:
        """Stop the filter's own transfers; the shared transfer and the others go on."""
        for key in self.versions():
            self.remove(key)


__all__ = ["ScopedTransfer"]
