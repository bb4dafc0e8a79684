"""``index.json``: every named filter's latest version in one signed object.

A bucket with many filters (``filters/NAME/...``, :mod:`.filter_names`) also holds
``index.json``, so an agent polls one object for all its filters, not one ``latest.json``
each. The index carries, per filter, the filter's own signed documents byte for byte —
its ``latest.json`` envelope, the manifest it names and that manifest's detached
signature — plus the version's torrent when it is small (at most
:data:`INLINE_TORRENT_MAX` bytes). An agent verifies each of them exactly as it verifies
them when it reads them from the filter's folder, so the index adds no trust of its own
about a filter: its signature only protects the set of entries (and its ``sequence``
lets agents refuse a replayed older index).

Like ``latest.json`` it moves by compare-and-swap and travels as one envelope::

    {"key_id": "<16 hex>", "index": {...}, "signature": "<base64 of 64 bytes>"}

where the signature covers the canonical JSON (:mod:`.canonical_json`) of ``index``::

    {"filters": {"NAME": {"manifest": "<text>", "manifest_signature": "<text>",
                          "pointer": "<text>", "torrent": "<base64>"}, ...},
     "issued_at": 1700000000, "publisher_id": "...", "schema": 1, "sequence": 7}

``pointer``, ``manifest`` and ``manifest_signature`` are the UTF-8 text of those objects;
``torrent`` is absent when the torrent was too large to inline (the agent GETs it).
Unknown fields of an entry are ignored; unknown top-level fields of ``index`` are kept in
``extra`` (:mod:`.document_fields`). An entry that does not parse (its name is not a
filter name, or a field is malformed) does not make the index unreadable: it is kept
apart, verbatim, in ``unreadable`` with the reason, so that the other filters go on, an
agent reports it for its filter alone, and a writer carries it over unchanged.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from .canonical_json import canonical_json
from .document_fields import (
    SCHEMA_VERSION,
    Fields,
    check_extra,
    check_int,
    check_schema,
    check_str,
    require,
)
from .errors import FormatError
from .filter_names import check_filter_name
from .signed_envelope import envelope_payload, open_envelope, seal_envelope
from .signing import SigningKey, VerifyKey

INLINE_TORRENT_MAX = 64 * 1024
"""A filter's torrent rides in the index when it is at most this many bytes."""

_TEXT_FIELDS = ("pointer", "manifest", "manifest_signature")


def _text_bytes(value: object, what: str) -> None:
    """``value`` is non-empty bytes of UTF-8 text (so that JSON can carry it as a string)."""
    if not isinstance(value, bytes) or not value:
        raise FormatError(f"{what} must be non-empty bytes, got {type(value).__name__}")
    try:
        value.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None


@dataclass(frozen=True)
class IndexEntry:
    """One filter's current state, as its own folder holds it. The bytes are opaque here:
    an agent verifies them as it would the objects themselves."""

    pointer: bytes
    """The filter's ``latest.json`` envelope, byte for byte."""
    manifest: bytes
    """``filters/NAME/vN/manifest.json`` of the version the pointer names, byte for byte."""
    manifest_signature: bytes
    """``filters/NAME/vN/manifest.json.sig``, byte for byte."""
    torrent: bytes | None = None
    """The version's ``.torrent`` when at most INLINE_TORRENT_MAX bytes, else None."""

    def __post_init__(self) -> None:
        for name in _TEXT_FIELDS:
            _text_bytes(getattr(self, name), f"index entry {name}")
        require(self.torrent is None or isinstance(self.torrent, bytes),
                "index entry torrent must be bytes or None")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object form."""
        obj: dict[str, Any] = {name: getattr(self, name).decode("utf-8") for name in _TEXT_FIELDS}
        if self.torrent is not None:
            obj["torrent"] = base64.b64encode(self.torrent).decode("ascii")
        return obj

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any], what: str = "index entry") -> IndexEntry:
        """Validate a parsed JSON object; FormatError on anything malformed. Unknown
        fields are ignored (a newer publisher's additions)."""
        r = Fields(obj, what)
        texts: dict[str, bytes] = {}
        for name in _TEXT_FIELDS:
            value = r.value(name)
            check_str(value, f"{what} {name}", nonempty=True)
            try:
                texts[name] = value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate ("\ud800") in the JSON string
                raise FormatError(f"{what} {name} is not valid Unicode text") from None
        torrent = obj.get("torrent")
        if torrent is not None:
            check_str(torrent, f"{what} torrent")
            try:
                torrent = base64.b64decode(torrent, validate=True)
            except (binascii.Error, ValueError):
                raise FormatError(f"{what} torrent is not valid base64") from None
        return cls(pointer=texts["pointer"], manifest=texts["manifest"],
                   manifest_signature=texts["manifest_signature"], torrent=torrent)


@dataclass(frozen=True)
class UnreadableEntry:
    """An entry of ``index.json`` that does not parse, as it was found."""

    raw: Any
    """The entry's JSON value, verbatim (carried over by a writer)."""
    problem: str
    """Why it does not parse, one line."""


@dataclass(frozen=True)
class FilterIndex:
    """The content of ``index.json``: every named filter's current entry.

    An agent applies an index only if its ``sequence`` is greater than the last one it
    accepted; each filter's entry is then judged on its own pointer, as ``latest.json``
    would be. Construction validates and raises FormatError.
    """

    sequence: int
    """Strictly increasing each time index.json is written, >= 1."""
    issued_at: int
    """When this index was written, Unix seconds UTC."""
    publisher_id: str
    """Who wrote it."""
    filters: Mapping[str, IndexEntry] = field(default_factory=dict, hash=False)
    """Filter name (:func:`~.filter_names.check_filter_name`) -> its entry."""
    schema: int = SCHEMA_VERSION
    """Document schema; only 1 exists."""
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Unknown fields, kept so they round-trip."""
    unreadable: Mapping[str, UnreadableEntry] = field(default_factory=dict, hash=False)
    """Entries under ``filters`` that do not parse, by their key: not in ``filters``, and
    written back verbatim by :meth:`to_dict`."""

    def __post_init__(self) -> None:
        check_schema(self.schema, "index")
        check_int(self.sequence, "index sequence", 1)
        check_int(self.issued_at, "index issued_at")
        check_str(self.publisher_id, "index publisher_id", nonempty=True)
        require(isinstance(self.filters, Mapping), "index filters must be a mapping")
        for name, entry in self.filters.items():
            try:
                check_filter_name(name)
            except ValueError as exc:
                raise FormatError(f"index filters: {exc}") from None
            require(isinstance(entry, IndexEntry), f"index filter {name!r} is not an IndexEntry")
        require(isinstance(self.unreadable, Mapping), "index unreadable must be a mapping")
        for name, bad in self.unreadable.items():
            require(isinstance(name, str) and isinstance(bad, UnreadableEntry),
                    f"index unreadable entry {name!r:.60} is not an UnreadableEntry")
            require(name not in self.filters, f"index filter {name!r} is both readable and unreadable")
        object.__setattr__(self, "filters", dict(sorted(self.filters.items())))
        object.__setattr__(self, "unreadable", dict(sorted(self.unreadable.items())))
        object.__setattr__(self, "extra", check_extra(self.extra, _INDEX_FIELDS, "index"))
        self.to_bytes()  # FormatError for anything JSON cannot carry exactly

    def to_dict(self) -> dict[str, Any]:
        """The JSON object form, ``extra`` merged in."""
        obj: dict[str, Any] = {
            "schema": self.schema,
            "sequence": self.sequence,
            "issued_at": self.issued_at,
            "publisher_id": self.publisher_id,
            "filters": {name: bad.raw for name, bad in self.unreadable.items()}
            | {name: entry.to_dict() for name, entry in self.filters.items()},
        }
        obj.update(self.extra)
        return obj

    def to_bytes(self) -> bytes:
        """Canonical JSON bytes: what the envelope's signature covers."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> FilterIndex:
        """Validate a parsed JSON object; FormatError when the index itself is malformed.
        An entry that does not parse goes to ``unreadable`` (see the module docstring)."""
        r = Fields(obj, "index")
        check_schema(r.value("schema"), "index")  # first: another schema may lack fields
        entries: dict[str, IndexEntry] = {}
        unreadable: dict[str, UnreadableEntry] = {}
        for name, entry in r.mapping("filters").items():
            try:
                entries[name] = _parse_entry(name, entry)
            except FormatError as exc:
                unreadable[name] = UnreadableEntry(entry, str(exc))
        return cls(
            schema=r.value("schema"),
            sequence=r.value("sequence"),
            issued_at=r.value("issued_at"),
            publisher_id=r.value("publisher_id"),
            filters=entries,
            extra=r.rest(),
            unreadable=unreadable,
        )


def _parse_entry(name: str, entry: Any) -> IndexEntry:
    """Entry ``name`` of the index's ``filters``; FormatError when it does not parse."""
    try:
        check_filter_name(name)
    except ValueError as exc:
        raise FormatError(f"index filters: {exc}") from None
    if not isinstance(entry, dict):
        raise FormatError(f"index filter {name!r} must be an object, got {entry!r:.60}")
    return IndexEntry.from_dict(entry, f"index filter {name!r}")


_INDEX_FIELDS = {f.name for f in fields(FilterIndex) if f.name not in ("extra", "unreadable")}


def seal_index(index: FilterIndex, signing_key: SigningKey) -> bytes:
    """The bytes of ``index.json``: the index and its signature in one envelope."""
    return seal_envelope("index", index.to_dict(), signing_key)


def read_index_unverified(data: bytes) -> FilterIndex:
    """Parse an ``index.json`` envelope WITHOUT checking its signature.

    For writers, which need the current sequence and entries to write the next index,
    whoever signed this one. Never decide what to run from it: agents use
    :func:`open_index`. FormatError when the envelope or index is malformed.
    """
    return FilterIndex.from_dict(envelope_payload(data, "index"))


def open_index(data: bytes, public_keys: Sequence[VerifyKey]) -> FilterIndex:
    """Verify an ``index.json`` envelope and return its index.

    The signature is checked over the canonical JSON of the ``index`` object before its
    fields are trusted (:mod:`.signed_envelope`). Raises FormatError for a malformed
    envelope or index, VerificationError when no pinned key signed it.
    """
    return FilterIndex.from_dict(open_envelope(data, "index", public_keys))


__all__ = [
    "INLINE_TORRENT_MAX",
    "FilterIndex",
    "IndexEntry",
    "UnreadableEntry",
    "open_index",
    "read_index_unverified",
    "seal_index",
]
