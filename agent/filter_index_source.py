"""Announcements of many filters from one poll: ``index.json``.

An agent that follows several named filters does not poll each filter's ``latest.json``:
the publisher keeps a signed index of every filter's pointer (:mod:`bloomswarm.common.
filter_index`), and one :class:`IndexPoller` polls it with a conditional GET, so the
request rate is that of one filter whatever their number. Each filter's daemon reads its
entry through an :class:`IndexedAnnouncements`, an
:class:`~.announcements.AnnouncementSource` that does no request of its own until its
entry changes (then only what the entry does not carry inline: a large torrent).

Trust: the index's signature is checked against every key the agent pins (any one of
them may have written it); each entry is then verified like ``latest.json`` with the
keys of its own filter (pointer signature, manifest signature, torrent), so a filter's
key signs for that filter alone. An index older than one already seen (a lower
``sequence``) is refused; each filter's pointer sequence is checked by its daemon too,
across restarts.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

from bloomswarm.common.bucket_layout import INDEX_KEY
from bloomswarm.common.errors import CheckFailed, ObjectNotFound, StorageError
from bloomswarm.common.filter_index import FilterIndex, IndexEntry, open_index
from bloomswarm.common.manifest import verify_manifest
from bloomswarm.common.pointer import open_pointer
from bloomswarm.common.signing import VerifyKey

from .announcements import (
    Announcement,
    AnnouncementSource,
    DocumentReader,
    ObjectStoreAnnouncements,
    SignedDocuments,
    checked,
    open_announcement,
)
from .filter_config import FilterConfig


@dataclass(frozen=True)
class IndexNews:
    """What one poll of the index found."""

    changed: frozenset[str]
    """Filters whose entry is new or different since the previous poll."""
    index: FilterIndex | None
    """The index now held (None: none read yet)."""


class IndexPoller:
    """Polls ``index.json`` with one conditional GET per :meth:`refresh`.

    Thread-safe: :meth:`refresh` runs on a worker thread while daemons read
    :meth:`entry` on theirs. :meth:`refresh` raises StorageError (ObjectNotFound when no
    index is published) when the index cannot be read, and CheckFailed when it does not
    verify or is older than the one held; the index held is kept either way.
    """

    def __init__(self, reader: DocumentReader, public_keys: Sequence[VerifyKey]) -> None:
        if not public_keys:
            raise ValueError("at least one public key is needed")
        self._reader = reader
        self._keys = list(public_keys)
        self._lock = threading.Lock()
        self._etag: str | None = None
        self._index: FilterIndex | None = None

    @property
    def index(self) -> FilterIndex | None:
        """The newest verified index (None: none read yet)."""
        return self._index

    def set_keys(self, public_keys: Sequence[VerifyKey]) -> None:
        """Check the index against ``public_keys`` from the next :meth:`refresh` on (a
        reload added or dropped a filter's keys)."""
        if not public_keys:
            raise ValueError("at least one public key is needed")
        with self._lock:
            self._keys = list(public_keys)

    def entry(self, name: str) -> IndexEntry | None:
        """Filter ``name``'s entry in the index held; None when it has none (yet), or one
        that does not parse (see :meth:`problem`)."""
        index = self._index
        return index.filters.get(name) if index is not None else None

    def problem(self, name: str) -> str | None:
        """Why filter ``name``'s entry in the index held does not parse; None when it
        parses or is absent."""
        index = self._index
        bad = index.unreadable.get(name) if index is not None else None
        return bad.problem if bad is not None else None

    def refresh(self) -> IndexNews:
        """GET the index if it changed; the filters whose entries changed."""
        with self._lock:
            stored = self._reader.get(INDEX_KEY, if_none_match=self._etag)
            held = self._index
            if stored is None:
                return IndexNews(frozenset(), held)
            index = checked("index_signature", lambda: open_index(stored.data, self._keys))
            if held is not None and index.sequence < held.sequence:
                raise CheckFailed(
                    "index_replay",
                    f"{INDEX_KEY} has sequence {index.sequence}, older than {held.sequence} "
                    "(a replayed or rolled-back index): keeping the newer one",
                )
            self._index, self._etag = index, stored.etag or None
            return IndexNews(_changed(held, index), index)


def _changed(held: FilterIndex | None, index: FilterIndex) -> frozenset[str]:
    """The names whose entry in ``index`` is new or differs from ``held``'s (readable or
    not)."""
    old, old_bad = (held.filters, held.unreadable) if held is not None else ({}, {})
    return frozenset(
        [n for n, e in index.filters.items() if old.get(n) != e]
        + [n for n, b in index.unreadable.items() if old_bad.get(n) != b]
    )


class IndexedAnnouncements:
    """Filter ``name``'s announcements, read from the index an :class:`IndexPoller` holds.

    :meth:`latest` makes no request while the entry is unchanged; raises ObjectNotFound
    while the index lists no such filter (nothing published for it yet), CheckFailed when
    the entry does not verify with ``public_keys`` (the filter's own keys), StorageError
    when a torrent the entry does not carry cannot be read. ``reader`` reads the filter's
    own folder (``filters/NAME/``): large torrents and deltas' torrents.
    """

    def __init__(self, poller: IndexPoller, name: str, reader: DocumentReader,
                 public_keys: Sequence[VerifyKey]) -> None:
        if not public_keys:
            raise ValueError("at least one public key is needed")
        self.poller = poller
        self.name = name
        self._reader = reader
        self._keys = list(public_keys)
        self._last: IndexEntry | None = None

    def latest(self) -> Announcement | None:
        """See :meth:`~.announcements.AnnouncementSource.latest`."""
        entry = self.poller.entry(self.name)
        if entry is None:
            problem = self.poller.problem(self.name)
            if problem is not None:
                self._last = None
                raise CheckFailed("format", f"{INDEX_KEY}: {problem}")
            raise ObjectNotFound(f"{INDEX_KEY} lists no filter {self.name!r} (yet)")
        if entry == self._last:
            return None
        torrent = entry.torrent if entry.torrent is not None else self._large_torrent(entry)
        documents = SignedDocuments(entry.pointer, entry.manifest, entry.manifest_signature, torrent)
        announcement = open_announcement(documents, self._keys)
        self._last = entry
        return announcement

    def document(self, key: str) -> bytes:
        """See :meth:`~.announcements.AnnouncementSource.document`."""
        stored = self._reader.get(key)
        if stored is None:  # no condition was sent: a reader that returns None is broken
            raise StorageError(f"{key}: the store answered 'not modified' to a plain GET")
        return stored.data

    def _large_torrent(self, entry: IndexEntry) -> bytes:
        """The torrent an entry names but does not carry (verified with the rest by
        open_announcement; the manifest is checked here first, to trust its key)."""
        pointer = checked("pointer_signature", lambda: open_pointer(entry.pointer, self._keys))
        manifest = checked(
            "manifest_signature",
            lambda: verify_manifest(entry.manifest, entry.manifest_signature, self._keys,
                                    expected_version=pointer.version),
        )
        try:
            return self.document(manifest.torrent_key)
        except ObjectNotFound as exc:
            raise StorageError(
                f"{INDEX_KEY} entry {self.name!r} leads to {manifest.torrent_key}, which is missing: {exc}"
            ) from exc


def filter_announcements(entry: FilterConfig, poller: IndexPoller, folder: DocumentReader,
                         public_keys: Sequence[VerifyKey]) -> AnnouncementSource:
    """Where filter ``entry`` learns of its versions: its entry of the index when it
    :attr:`~.filter_config.FilterConfig.follows_index`, else its own ``latest.json`` in
    ``folder`` (the reader of its folder, which also serves its other documents)."""
    if entry.follows_index:
        return IndexedAnnouncements(poller, entry.name, folder, public_keys)
    return ObjectStoreAnnouncements(folder, public_keys)


__all__ = ["IndexNews", "IndexPoller", "IndexedAnnouncements", "filter_announcements"]
