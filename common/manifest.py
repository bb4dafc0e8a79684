"""The manifest of one filter version (``vN/manifest.json`` and its detached ``.sig``).

A manifest is written once and never changes, so a detached signature object beside it
is simple and signs the stored bytes exactly (the pointer, which moves, carries its
signature inside: see :mod:`bloomswarm.common.pointer`). What is stored and signed is the
manifest's canonical JSON (:mod:`bloomswarm.common.canonical_json`); its object keys are
in :mod:`bloomswarm.common.bucket_layout`.

A manifest may list deltas (:class:`DeltaEntry`): files that turn an older version's
filter into this one (:mod:`bloomswarm.common.delta`). The list is omitted from the JSON
when empty, so a manifest without deltas has the bytes it had before deltas existed.

Timestamps (``created_at``) are integer seconds since the Unix epoch, UTC, like the filter
header's creation time, so the two compare directly. Field rules and forward
compatibility (``schema``, ``extra``): :mod:`bloomswarm.common.document_fields`.
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
    check_hex,
    check_int,
    check_key,
    check_schema,
    check_str,
    require,
)
from .errors import FormatError, VerificationError
from .filter_summary import FilterSummary
from .header import HEADER_SIZE, FilterHeader
from .signature_text import decode_signature, encode_signature
from .signing import SigningKey, VerifyKey, sign, verify

MIN_PIECE_SIZE = 16 * 1024
"""BitTorrent v2 pieces are powers of two of at least 16 KiB."""


@dataclass(frozen=True)
class DeltaEntry:
    """One delta a manifest lists: it turns version ``base_version``'s filter into the
    manifest's version, and is shared over a torrent of its own.

    Construction validates every field and raises FormatError on a bad value. Strict:
    unknown fields are refused (a delta this code cannot describe is one it cannot use).
    """

    base_version: int
    """The version the delta applies to, >= 1 and below the manifest's version."""
    size: int
    """Size of the delta file in bytes, >= 1."""
    sha256: str
    """SHA-256 of the whole delta file, 64 lower-case hex characters."""
    info_hash_v1: str
    """BitTorrent v1 info-hash of the delta's torrent, 40 lower-case hex characters."""
    info_hash_v2: str | None
    """BitTorrent v2 info-hash of a hybrid torrent, 64 lower-case hex characters; None for
    a v1-only torrent (no ``info_hash_v2`` field in the JSON)."""
    key: str
    """Object key of the delta file, relative to the store prefix."""
    torrent_key: str
    """Object key of the delta's torrent, relative to the store prefix."""

    def __post_init__(self) -> None:
        check_int(self.base_version, "delta base_version", 1)
        check_int(self.size, "delta size", 1)
        check_hex(self.sha256, 64, "delta sha256")
        check_hex(self.info_hash_v1, 40, "delta info_hash_v1")
        if self.info_hash_v2 is not None:
            check_hex(self.info_hash_v2, 64, "delta info_hash_v2")
        check_key(self.key, "delta key")
        check_key(self.torrent_key, "delta torrent_key")

    def to_dict(self) -> dict[str, Any]:
        """The JSON object form; no ``info_hash_v2`` for a v1 torrent."""
        obj = {name: getattr(self, name) for name in _DELTA_FIELDS}
        if obj["info_hash_v2"] is None:
            del obj["info_hash_v2"]
        return obj

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> DeltaEntry:
        """Parse the JSON object form strictly; FormatError on any fault."""
        r = Fields(obj, "manifest delta")
        if "info_hash_v2" in obj and obj["info_hash_v2"] is None:  # null is not "absent"
            check_hex(None, 64, "delta info_hash_v2")
        values = {
            name: r.value(name)
            for name in _DELTA_FIELDS
            if name != "info_hash_v2" or "info_hash_v2" in obj
        }
        unknown = sorted(r.rest())
        require(not unknown, f"manifest delta: unknown fields {unknown!r:.100}")
        return cls(**{"info_hash_v2": None, **values})


@dataclass(frozen=True)
class Manifest:
    """Everything an agent needs to fetch, verify and accept one filter version.

    Construction validates every field and raises FormatError on a bad value.
    """

    version: int
    """The filter version, an integer >= 1; equals the header's filter_version."""
    size: int
    """Size of the filter file in bytes."""
    sha256: str
    """SHA-256 of the whole filter file, 64 lower-case hex characters."""
    info_hash_v1: str
    """BitTorrent v1 info-hash (SHA-1), 40 lower-case hex characters."""
    info_hash_v2: str | None
    """BitTorrent v2 info-hash (SHA-256), 64 lower-case hex characters, of a hybrid v1+v2
    torrent; None for a v1-only torrent, whose manifest has no ``info_hash_v2`` field."""
    piece_size: int
    """Torrent piece size in bytes: a power of two, at least 16 KiB."""
    filter: FilterSummary
    """Filter parameters; equal to the file's header."""
    created_at: int
    """Creation time, Unix seconds UTC; equal to the header's created_at."""
    source_fingerprint: str
    """Identifies the input data set (publisher-defined, e.g. a hash of input listings)."""
    publisher_id: str
    """Who published this version (host or service name)."""
    filter_key: str
    """Object key of the filter file, relative to the store prefix."""
    torrent_key: str
    """Object key of the torrent, relative to the store prefix."""
    body_sha256: str
    """SHA-256 of the filter's body (the bit array), 64 lower-case hex characters; equal to
    the header's. Unlike ``sha256`` it does not change with the version number, so the
    publisher compares it to tell an unchanged filter."""
    deltas: tuple[DeltaEntry, ...] = ()
    """Deltas from older versions to this one, at most one per base version; omitted
    from the JSON when empty."""
    swarm_ca_sha256: str | None = None
    """A private version: SHA-256 (lower-case hex) of the DER of the fleet CA certificate
    that its torrents (the file's and every delta's) carry, so that only peers with a
    certificate from that CA may join their swarms (docs/private-swarm.md). None for a
    public version, whose manifest has no such field. Signed with the rest, so the CA
    cannot be stripped from a torrent or swapped unnoticed."""
    schema: int = SCHEMA_VERSION
    """Document schema; only 1 exists."""
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Unknown top-level fields, kept so they round-trip."""

    def __post_init__(self) -> None:
        check_schema(self.schema, "manifest")
        check_int(self.version, "manifest version", 1)
        check_int(self.size, "manifest size", HEADER_SIZE)
        check_hex(self.sha256, 64, "manifest sha256")
        check_hex(self.info_hash_v1, 40, "manifest info_hash_v1")
        if self.info_hash_v2 is not None:
            check_hex(self.info_hash_v2, 64, "manifest info_hash_v2")
        check_int(self.piece_size, "manifest piece_size", MIN_PIECE_SIZE)
        require(
            self.piece_size & (self.piece_size - 1) == 0,
            f"manifest piece_size must be a power of two, got {self.piece_size}",
        )
        require(isinstance(self.filter, FilterSummary), "manifest filter must be a FilterSummary")
        check_int(self.created_at, "manifest created_at")
        check_str(self.source_fingerprint, "manifest source_fingerprint")
        check_str(self.publisher_id, "manifest publisher_id", nonempty=True)
        check_key(self.filter_key, "manifest filter_key")
        check_key(self.torrent_key, "manifest torrent_key")
        check_hex(self.body_sha256, 64, "manifest body_sha256")
        if self.swarm_ca_sha256 is not None:
            check_hex(self.swarm_ca_sha256, 64, "manifest swarm_ca_sha256")
        self._check_deltas()
        object.__setattr__(self, "extra", check_extra(self.extra, _MANIFEST_FIELDS, "manifest"))
        self.to_bytes()  # FormatError for anything JSON cannot carry exactly

    def _check_deltas(self) -> None:
        require(
            isinstance(self.deltas, tuple)
            and all(isinstance(d, DeltaEntry) for d in self.deltas),
            "manifest deltas must be a tuple of DeltaEntry",
        )
        bases = [d.base_version for d in self.deltas]
        require(len(set(bases)) == len(bases), f"manifest deltas repeat a base version: {bases}")
        require(
            all(base < self.version for base in bases),
            f"manifest deltas must have base versions below {self.version}, got {bases}",
        )

    def delta_from(self, base_version: int) -> DeltaEntry | None:
        """The delta from ``base_version`` to this version; None when there is none."""
        return next((d for d in self.deltas if d.base_version == base_version), None)

    @property
    def torrent_format(self) -> str:
        """"hybrid" when the torrent is v1+v2 (a v2 info-hash is recorded), else "v1"."""
        return "v1" if self.info_hash_v2 is None else "hybrid"

    def to_dict(self) -> dict[str, Any]:
        """The JSON object form, ``extra`` merged in; no ``info_hash_v2`` for a v1 torrent."""
        obj = {name: getattr(self, name) for name in _MANIFEST_FIELDS}
        for optional in ("info_hash_v2", "swarm_ca_sha256"):
            if obj[optional] is None:
                del obj[optional]
        obj["filter"] = self.filter.to_dict()
        if self.deltas:
            obj["deltas"] = [d.to_dict() for d in self.deltas]
        else:
            del obj["deltas"]
        obj.update(self.extra)
        return obj

    def to_bytes(self) -> bytes:
        """Canonical JSON bytes: what is stored and signed."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse and validate manifest bytes; FormatError on anything malformed."""
        return cls.from_dict(load_object(data, "manifest"))

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Manifest:
        """Validate a parsed JSON object; FormatError on anything malformed."""
        r = Fields(obj, "manifest")
        check_schema(r.value("schema"), "manifest")  # first: another schema may lack fields
        for optional in ("info_hash_v2", "swarm_ca_sha256"):
            if optional in obj and obj[optional] is None:  # null is not "absent"
                check_hex(None, 64, f"manifest {optional}")
        return cls(
            schema=r.value("schema"),
            version=r.value("version"),
            size=r.value("size"),
            sha256=r.value("sha256"),
            info_hash_v1=r.value("info_hash_v1"),
            info_hash_v2=r.value("info_hash_v2") if "info_hash_v2" in obj else None,
            piece_size=r.value("piece_size"),
            filter=FilterSummary.from_dict(r.mapping("filter")),
            created_at=r.value("created_at"),
            source_fingerprint=r.value("source_fingerprint"),
            publisher_id=r.value("publisher_id"),
            filter_key=r.value("filter_key"),
            torrent_key=r.value("torrent_key"),
            body_sha256=r.value("body_sha256"),
            deltas=(
                tuple(DeltaEntry.from_dict(d) for d in r.objects("deltas"))
                if "deltas" in obj
                else ()
            ),
            swarm_ca_sha256=r.value("swarm_ca_sha256") if "swarm_ca_sha256" in obj else None,
            extra=r.rest(),
        )

    @property
    def private(self) -> bool:
        """Whether only holders of a certificate from the fleet CA may join its swarms."""
        return self.swarm_ca_sha256 is not None

    def header_mismatches(self, header: FilterHeader) -> list[str]:
        """Describe each way ``header`` disagrees with this manifest; empty when they agree."""
        problems: list[str] = []
        if header.filter_version != self.version:
            problems.append(f"header version {header.filter_version} != manifest {self.version}")
        if header.file_size != self.size:
            problems.append(f"header file size {header.file_size} != manifest {self.size}")
        if header.created_at != self.created_at:
            problems.append(
                f"header created_at {header.created_at} != manifest {self.created_at}"
            )
        if header.body_sha256.hex() != self.body_sha256:
            problems.append("header body_sha256 differs from the manifest's")
        try:
            summary = FilterSummary.from_header(header)
        except FormatError as exc:
            return [*problems, f"header parameters invalid: {exc}"]
        if summary != self.filter:
            problems.append(f"header parameters {summary} != manifest {self.filter}")
        return problems


_MANIFEST_FIELDS = tuple(f.name for f in fields(Manifest) if f.name != "extra")
"""The manifest's fields in their order (``extra`` aside)."""
_DELTA_FIELDS = tuple(f.name for f in fields(DeltaEntry))


def sign_manifest(manifest: Manifest, signing_key: SigningKey) -> tuple[bytes, bytes]:
    """Return (manifest bytes, ``.sig`` object bytes) to store at manifest_key/signature_key."""
    data = manifest.to_bytes()
    return data, encode_signature(sign(signing_key, data))


def verify_manifest(
    manifest_bytes: bytes,
    signature_bytes: bytes,
    public_keys: Sequence[VerifyKey],
    *,
    expected_version: int | None = None,
) -> Manifest:
    """Check the detached signature over the exact stored bytes, then parse the manifest.

    Raises VerificationError when no pinned key signed these bytes, or when the manifest
    is for another version than ``expected_version`` (a manifest replayed under another
    key); FormatError when the signature object or the manifest is malformed.
    """
    signature = decode_signature(signature_bytes, "manifest signature")
    verify(public_keys, bytes(manifest_bytes), signature)
    manifest = Manifest.from_bytes(manifest_bytes)
    if expected_version is not None and manifest.version != expected_version:
        raise VerificationError(
            f"manifest is for version {manifest.version}, expected {expected_version}"
        )
    return manifest


__all__ = ["MIN_PIECE_SIZE", "DeltaEntry", "Manifest", "sign_manifest", "verify_manifest"]
