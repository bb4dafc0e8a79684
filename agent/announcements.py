"""The announcement seam: how the agent learns that a new version exists.

An :class:`AnnouncementSource` answers one question, "what should run now, if that
changed?", with a verified :class:`Announcement`: the signed pointer, the signed
manifest it names, and the torrent whose info-hashes the manifest carries. Sources
verify everything before returning, so the daemon never sees an unsigned byte.

Two sources read the bucket's documents (``latest.json``, ``vN/manifest.json`` + ``.sig``,
the torrent) through a :class:`DocumentReader`:

- :class:`ObjectStoreAnnouncements` over any :class:`~bloomswarm.common.storage.ObjectStore`
  (the S3 API; the in-memory store in tests);
- :class:`HttpAnnouncements` over a plain HTTP(S) base URL, such as a CDN in front of the
  bucket (urllib, ``If-None-Match``/``ETag``, timeouts).

Both poll ``latest.json`` with a conditional GET, so an unchanged pointer costs one 304.
Over the S3 API the agent polls through a :class:`PresignedPollReader`: the same
conditional GET, on a presigned URL (signed locally, re-signed at half its lifetime)
with plain urllib instead of a botocore request per poll; every other document is
read through the store.
Another source (a message bus, a file dropped by configuration management) implements
the same one-method protocol; nothing that downloads or installs depends on which.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from bloomswarm.common.bucket_layout import INDEX_KEY, LATEST_KEY, signature_key_of
from bloomswarm.common.errors import (
    FormatError,
    HTTPStatusError,
    ObjectNotFound,
    StorageError,
    VerificationError,
)
from bloomswarm.common.manifest import Manifest, verify_manifest
from bloomswarm.common.pointer import Pointer, open_pointer
from bloomswarm.common.signing import VerifyKey
from bloomswarm.common.storage import StoredObject

from .http_pool import HttpPool
from .verify import CheckFailed, check_torrent

T = TypeVar("T")

MAX_DOCUMENT_SIZE = 64 * 1024 * 1024
"""Largest pointer, manifest or torrent accepted over HTTP (a torrent of a 64 GiB file
in 16 MiB pieces is a few hundred KiB)."""


@dataclass(frozen=True)
class SignedDocuments:
    """The exact bytes an announcement was verified from, kept so it can be stored and
    verified again (after a restart, with the keys configured then)."""

    pointer_envelope: bytes
    """``latest.json`` as served: the pointer and its signature."""
    manifest: bytes
    """``vN/manifest.json`` as served."""
    manifest_signature: bytes
    """``vN/manifest.json.sig`` as served."""
    torrent: bytes
    """The version's .torrent file."""


@dataclass(frozen=True)
class Announcement:
    """A verified instruction to run one version.

    Invariant: the pointer's and the manifest's signatures verified against the pinned
    keys, the manifest is the pointer's version, and the torrent's info-hashes equal the
    manifest's.
    """

    pointer: Pointer
    manifest: Manifest
    documents: SignedDocuments

    @property
    def version(self) -> int:
        """The announced version."""
        return self.manifest.version

    @property
    def torrent(self) -> bytes:
        """The version's .torrent bytes."""
        return self.documents.torrent


class AnnouncementSource(Protocol):
    """Where announcements come from. Called from the daemon's thread only.

    :meth:`latest` raises StorageError (ObjectNotFound when nothing is published) when
    the source cannot be read, and :class:`~.verify.CheckFailed` (a VerificationError)
    when what it read does not verify; the daemon retries with backoff either way.
    """

    def latest(self) -> Announcement | None:
        """The current announcement, or None when it has not changed since the last call
        that returned one (or after a call that raised, when the source cannot tell)."""
        ...

    def document(self, key: str) -> bytes:
        """Another object a verified manifest names by key (a delta's torrent), unverified:
        the caller checks it against the manifest. ObjectNotFound when it is missing,
        StorageError when it cannot be read."""
        ...


def open_announcement(documents: SignedDocuments, public_keys: Sequence[VerifyKey]) -> Announcement:
    """Verify stored documents into an Announcement; CheckFailed naming the failed check.

    Checks, in order: the pointer's signature ("pointer_signature"), the manifest's
    ("manifest_signature"; also when it is for another version than the pointer's),
    the well-formedness of both ("format"), and the torrent ("torrent", "info_hash").
    """
    pointer = checked("pointer_signature", lambda: open_pointer(documents.pointer_envelope, public_keys))
    manifest = checked(
        "manifest_signature",
        lambda: verify_manifest(
            documents.manifest,
            documents.manifest_signature,
            public_keys,
            expected_version=pointer.version,
        ),
    )
    check_torrent(manifest, documents.torrent)
    return Announcement(pointer=pointer, manifest=manifest, documents=documents)


def checked(check: str, read: Callable[[], T]) -> T:
    """Run ``read``; turn a VerificationError or FormatError into CheckFailed."""
    try:
        return read()
    except CheckFailed:
        raise
    except VerificationError as exc:
        raise CheckFailed(check, f"{check.replace('_', ' ')}: {exc}") from exc
    except FormatError as exc:
        raise CheckFailed("format", str(exc)) from exc


class DocumentReader(Protocol):
    """Reads small documents by object key; :class:`~bloomswarm.common.storage.ObjectStore`
    is one. Same contract as ``ObjectStore.get``: None when the ETag equals
    ``if_none_match``; ObjectNotFound or StorageError on failure."""

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None:
        """The object at ``key``, or None when unchanged."""
        ...


class ObjectStoreAnnouncements:
    """Announcements from the bucket's documents, polled with a conditional GET.

    The ETag of ``latest.json`` is remembered only once everything it leads to has been
    fetched and verified, so a failure is retried on the next call, and a pointer that
    did not change (ETag equal, or same pointer re-uploaded) returns None. A manifest and
    signature that verified are kept for the pointer that named them, so that over a
    flaky origin each call only fetches what it still lacks (a new version needs four
    GETs in all; with 30% of requests failing, all four succeed in one call only a
    quarter of the time).
    """

    def __init__(self, reader: DocumentReader, public_keys: Sequence[VerifyKey]) -> None:
        if not public_keys:
            raise ValueError("at least one public key is needed")
        self._reader = reader
        self._keys = list(public_keys)
        self._etag: str | None = None
        self._last: Pointer | None = None
        self._verified: tuple[tuple[int, str], bytes, bytes, Manifest] | None = None
        """((version, manifest key), manifest, signature, the verified manifest)."""

    def latest(self) -> Announcement | None:
        """See :meth:`AnnouncementSource.latest`."""
        stored = self._reader.get(LATEST_KEY, if_none_match=self._etag)
        if stored is None:
            return None
        pointer = checked("pointer_signature", lambda: open_pointer(stored.data, self._keys))
        if pointer == self._last:
            self._etag = stored.etag or None
            return None
        manifest, signature, manifest_obj = self._verified_manifest(pointer)
        torrent = self._fetch(manifest_obj.torrent_key)
        check_torrent(manifest_obj, torrent)
        documents = SignedDocuments(stored.data, manifest, signature, torrent)
        self._etag, self._last = stored.etag or None, pointer
        return Announcement(pointer=pointer, manifest=manifest_obj, documents=documents)

    def document(self, key: str) -> bytes:
        """See :meth:`AnnouncementSource.document`."""
        stored = self._reader.get(key)
        if stored is None:  # no condition was sent: a reader that returns None is broken
            raise StorageError(f"{key}: the store answered 'not modified' to a plain GET")
        return stored.data

    def _verified_manifest(self, pointer: Pointer) -> tuple[bytes, bytes, Manifest]:
        """The manifest ``pointer`` names and its signature, verified (kept from an earlier
        call for the same pointer, else fetched)."""
        named = (pointer.version, pointer.manifest_key)
        if self._verified is not None and self._verified[0] == named:
            return self._verified[1:]
        manifest = self._fetch(pointer.manifest_key)
        signature = self._fetch(signature_key_of(pointer.manifest_key))
        verified = checked(
            "manifest_signature",
            lambda: verify_manifest(manifest, signature, self._keys, expected_version=pointer.version),
        )
        self._verified = (named, manifest, signature, verified)
        return manifest, signature, verified

    def _fetch(self, key: str) -> bytes:
        """A document latest.json leads to; its absence is a StorageError, not "nothing
        published" (ObjectNotFound is kept for a missing latest.json)."""
        try:
            stored = self._reader.get(key)
        except ObjectNotFound as exc:
            raise StorageError(f"{LATEST_KEY} leads to {key}, which is missing: {exc}") from exc
        if stored is None:  # no condition was sent: a reader that returns None is broken
            raise StorageError(f"{key}: the store answered 'not modified' to a plain GET")
        return stored.data


class HttpDocumentReader:
    """A :class:`DocumentReader` over plain HTTP(S): ``GET {base_url}/{key}``.

    Conditional GETs send ``If-None-Match``; a 304 answer returns None. 404 raises
    ObjectNotFound; any other failure (status, connection, timeout, a body larger than
    :data:`MAX_DOCUMENT_SIZE`) raises StorageError. Honours the usual proxy variables.
    Connections are kept alive (:class:`~.http_pool.HttpPool`).
    """

    def __init__(self, base_url: str, *, timeout_s: float = 10.0) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.http = HttpPool(max_idle=POLL_CONNECTIONS)
        """Connections kept alive from one GET to the next."""

    def url(self, key: str) -> str:
        """The URL of object ``key``."""
        return f"{self.base_url}/{urllib.parse.quote(key)}"

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None:
        """See :class:`DocumentReader`."""
        url = self.url(key)
        return http_get(self.http, url, url, if_none_match=if_none_match, timeout_s=self.timeout_s)


def http_get(pool: HttpPool, url: str, shown: str, *, if_none_match: str | None,
             timeout_s: float) -> StoredObject | None:
    """GET ``url`` on ``pool``'s connections as :meth:`HttpDocumentReader.get` does; error
    messages name ``shown`` (not a presigned URL's signature). HTTPStatusError for a
    status other than 200, 304 and 404, ObjectNotFound for 404, StorageError for any
    other failure."""
    headers = {"If-None-Match": if_none_match} if if_none_match else {}
    try:
        with pool.get(url, headers, timeout=timeout_s) as response:
            data = response.read(MAX_DOCUMENT_SIZE + 1)
            etag = response.headers.get("ETag") or ""
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 304:
            return None
        if exc.code == 404:
            raise ObjectNotFound(f"{shown} not found (HTTP 404)") from None
        raise HTTPStatusError(f"GET {shown}: HTTP {exc.code} {exc.reason}", exc.code) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise StorageError(f"GET {shown} failed: {reason}") from exc
    if len(data) > MAX_DOCUMENT_SIZE:
        raise StorageError(f"GET {shown}: larger than {MAX_DOCUMENT_SIZE} bytes")
    return StoredObject(data=data, etag=etag)


class PresignedStore(Protocol):
    """What :class:`PresignedPollReader` needs of the S3 store."""

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None: ...

    def presigned_get_url(self, key: str, expires_s: int) -> str: ...


POLL_CONNECTIONS = 2
"""Connections a reader keeps alive for its polls (one poll at a time, and a spare)."""

POLLED_KEYS = frozenset({LATEST_KEY, INDEX_KEY})
"""The documents an agent polls (one of them, every few seconds): read on presigned URLs."""


class PresignedPollReader:
    """A :class:`DocumentReader` over an S3 store that polls cheaply.

    The polled documents (:data:`POLLED_KEYS`: ``latest.json``, and ``index.json`` of an
    agent of many filters) are read with a conditional GET on a presigned URL (signed
    locally, re-signed once half of ``expiry_s`` has passed) over urllib: a poll then
    costs the agent a fraction of a botocore request's CPU, and an idle agent polls every
    few seconds. An answer of 403 (a URL the store no longer accepts: clock skew, rotated
    credentials) drops the URL and reads the object through the store once. Every other
    document (manifest, signature, torrent: once per version) is read through the store.
    Errors name the key, never the signed URL.
    """

    def __init__(self, store: PresignedStore, *, expiry_s: int = 3600, timeout_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._store = store
        self._expiry_s = expiry_s
        self._timeout_s = timeout_s
        self._clock = clock
        self._urls: dict[str, tuple[str, float]] = {}
        """Each polled key's presigned URL and when to sign a new one."""
        self.http = HttpPool(max_idle=POLL_CONNECTIONS)
        """The polls' connection, kept alive from one poll to the next."""

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None:
        """See :class:`DocumentReader`."""
        if key not in POLLED_KEYS:
            return self._store.get(key, if_none_match=if_none_match)
        now = self._clock()
        signed = self._urls.get(key)
        if signed is None or now >= signed[1]:
            signed = self._urls[key] = (self._store.presigned_get_url(key, self._expiry_s),
                                        now + self._expiry_s / 2)
        try:
            return http_get(self.http, signed[0], key, if_none_match=if_none_match,
                            timeout_s=self._timeout_s)
        except HTTPStatusError as exc:
            if exc.status != 403:
                raise
            del self._urls[key]
            return self._store.get(key, if_none_match=if_none_match)


class HttpAnnouncements(ObjectStoreAnnouncements):
    """Announcements read from a CDN or any HTTP server in front of the bucket prefix."""

    def __init__(
        self, base_url: str, public_keys: Sequence[VerifyKey], *, timeout_s: float = 10.0
    ) -> None:
        self.reader = HttpDocumentReader(base_url, timeout_s=timeout_s)
        super().__init__(self.reader, public_keys)


__all__ = [
    "MAX_DOCUMENT_SIZE",
    "POLLED_KEYS",
    "Announcement",
    "AnnouncementSource",
    "DocumentReader",
    "HttpAnnouncements",
    "HttpDocumentReader",
    "ObjectStoreAnnouncements",
    "PresignedPollReader",
    "SignedDocuments",
    "checked",
    "open_announcement",
]
