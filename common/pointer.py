"""The ``latest.json`` pointer: which version the fleet should run, signed in one envelope.

``latest.json`` changes by compare-and-swap on its ETag, and a detached signature could
not move in the same atomic step, so the pointer travels in one envelope object::

    {"key_id": "<16 hex>", "pointer": {...}, "signature": "<base64 of 64 bytes>"}

where the signature covers the canonical JSON (:mod:`bloomswarm.common.canonical_json`)
of the ``pointer`` object. ``issued_at`` is integer seconds since the Unix epoch, UTC.
Field rules and forward compatibility (``schema``, ``extra``):
:mod:`bloomswarm.common.document_fields`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from .canonical_json import canonical_json, load_object
from .document_fields import (
    SCHEMA_VERSION,
    Fields,
    check_extra,
    check_flag,
    check_int,
    check_key,
    check_schema,
    check_str,
)
from .signed_envelope import envelope_payload, open_envelope, seal_envelope
from .signing import SigningKey, VerifyKey


@dataclass(frozen=True)
class Pointer:
    """The content of ``latest.json``: which version the fleet should run.

    An agent applies a pointer only if its ``sequence`` is greater than the last one it
    accepted (a replayed older pointer is refused even when it names a pinned version),
    and its version is greater than the installed one or ``pinned`` is true (a rollback
    or a hold, as Netflix Hollow pins). Construction validates and raises FormatError.
    """

    version: int
    """The version to run, >= 1."""
    manifest_key: str
    """Object key of that version's manifest."""
    sequence: int
    """Strictly increasing each time latest.json is written, >= 1."""
    issued_at: int
    """When this pointer was written, Unix seconds UTC."""
    publisher_id: str
    """Who wrote it."""
    pinned: bool = False
    """Roll the fleet to ``version`` even if it is lower than what agents run."""
    schema: int = SCHEMA_VERSION
    """Document schema; only 1 exists."""
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Unknown fields, kept so they round-trip."""

    def __post_init__(self) -> None:
        check_schema(self.schema, "pointer")
        check_int(self.version, "pointer version", 1)
        check_key(self.manifest_key, "pointer manifest_key")
        check_int(self.sequence, "pointer sequence", 1)
        check_int(self.issued_at, "pointer issued_at")
        check_str(self.publisher_id, "pointer publisher_id", nonempty=True)
        check_flag(self.pinned, "pointer pinned")
        object.__setattr__(self, "extra", check_extra(self.extra, _POINTER_FIELDS, "pointer"))
        self.to_bytes()  # FormatError for anything JSON cannot carry exactly

    def to_dict(self) -> dict[str, Any]:
        """The JSON object form, ``extra`` merged in."""
        obj = {name: getattr(self, name) for name in _POINTER_FIELDS}
        obj.update(self.extra)
        return obj

    def to_bytes(self) -> bytes:
        """Canonical JSON bytes: what the envelope's signature covers."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_bytes(cls, data: bytes) -> Pointer:
        """Parse and validate bare pointer bytes (no envelope); FormatError on faults."""
        return cls.from_dict(load_object(data, "pointer"))

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Pointer:
        """Validate a parsed JSON object; FormatError on anything malformed."""
        r = Fields(obj, "pointer")
        check_schema(r.value("schema"), "pointer")  # first: another schema may lack fields
        return cls(
            schema=r.value("schema"),
            version=r.value("version"),
            manifest_key=r.value("manifest_key"),
            sequence=r.value("sequence"),
            issued_at=r.value("issued_at"),
            publisher_id=r.value("publisher_id"),
            pinned=r.value("pinned"),
            extra=r.rest(),
        )


_POINTER_FIELDS = tuple(f.name for f in fields(Pointer) if f.name != "extra")


def seal_pointer(pointer: Pointer, signing_key: SigningKey) -> bytes:
    """The bytes of ``latest.json``: the pointer and its signature in one envelope."""
    return seal_envelope("pointer", pointer.to_dict(), signing_key)


def read_pointer_unverified(data: bytes) -> Pointer:
    """Parse a ``latest.json`` envelope WITHOUT checking its signature.

    For writers (publish, pin) that need the current sequence and version to write the
    next pointer, whoever signed this one. Never decide what to run from it: agents use
    :func:`open_pointer`. FormatError when the envelope or pointer is malformed.
    """
    return Pointer.from_dict(envelope_payload(data, "pointer"))


def open_pointer(data: bytes, public_keys: Sequence[VerifyKey]) -> Pointer:
    """Verify a ``latest.json`` envelope and return its pointer.

    The signature is checked over the canonical JSON of the ``pointer`` object before
    the pointer's fields are trusted (:mod:`.signed_envelope`). Raises FormatError for a
    malformed envelope or pointer, VerificationError when no pinned key signed it.
    """
    return Pointer.from_dict(open_envelope(data, "pointer", public_keys))


__all__ = ["Pointer", "open_pointer", "read_pointer_unverified", "seal_pointer"]
