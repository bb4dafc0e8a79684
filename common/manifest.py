"""The signed documents in the bucket: each version's manifest and the ``latest.json`` pointer.

Object keys (relative to the store's prefix)::

    v{N}/{attempt}/filter.bsf      the filter file, uploaded by one publish attempt
    v{N}/{attempt}/filter.torrent  its torrent (v1, or hybrid v1+v2)
    v{N}/manifest.json             the Manifest, canonical JSON; claims vN (IfNoneMatch='*')
                                   and names the attempt's two objects
    v{N}/manifest.json.sig         detached Ed25519 signature over those exact bytes (base64)
    latest.json                    signed Pointer envelope; moved by compare-and-swap (IfMatch)

The file and torrent live in a folder only one publish attempt writes, because two
publishers racing for vN both upload before either claims it: under fixed names the
loser would overwrite the winner's file. The claim (the manifest) decides which attempt
is vN; a loser's folder is garbage that retention removes. Attempt ids are
``YYYYmmddTHHMMSSZ-<8 hex>`` (UTC start time, random): the time lets retention tell an
attempt still uploading from an abandoned one without object timestamps.
docs/publishing.md gives the whole protocol.

Version folders are plain ``v{N}`` (no zero padding), so a listing sorts "v10" before
"v9": use :func:`parse_version_prefix` and sort numerically.

Why two signature styles: a manifest is written once and never changes, so a detached
``.sig`` object beside it is simple and signs the stored bytes exactly. ``latest.json``
changes by compare-and-swap on its ETag, and a detached signature could not move in the
same atomic step, so the pointer travels in one envelope object::

    {"key_id": "<16 hex>", "pointer": {...}, "signature": "<base64 of 64 bytes>"}

where the signature covers the canonical JSON of the ``pointer`` object.

Canonical JSON (what is signed): ``json.dumps(obj, sort_keys=True, separators=(",", ":"),
ensure_ascii=False, allow_nan=False)`` encoded as UTF-8.

Timestamps (``created_at``, ``issued_at``) are integer seconds since the Unix epoch, UTC,
like the filter header's creation time, so the two compare directly.

Forward compatibility: both documents carry ``schema`` (1). A reader refuses an unknown
schema with FormatError, and keeps unknown top-level fields in ``extra`` (they round-trip
and are otherwise ignored), which is how a future ``deltas`` field can join schema 1.
Parsing is strict: every malformed input raises FormatError, and nothing else.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import FormatError, VerificationError
from .header import HEADER_SIZE, FilterHeader
from .params import FilterParams, HashId, Layout, params_problem
from .signing import SIGNATURE_SIZE, SigningKey, VerifyKey, sign, verify

SCHEMA_VERSION = 1
"""The manifest and pointer schema this code writes and reads."""

LATEST_KEY = "latest.json"
"""Key of the signed pointer to the current version."""

MIN_PIECE_SIZE = 16 * 1024
"""BitTorrent v2 pieces are powers of two of at least 16 KiB."""

HASH_NAME = "murmur3_x64_128"
_MAX_INT = 2**63 - 1
_HEX = re.compile(r"[0-9a-f]*")
_VERSION_PREFIX = re.compile(r"v([1-9][0-9]*)(?:/|$)")
_ATTEMPT = re.compile(r"([0-9]{8}T[0-9]{6}Z)-[0-9a-f]{8}")
_ATTEMPT_TIME = "%Y%m%dT%H%M%SZ"
FILTER_FILE_NAME = "filter.bsf"
"""Name of the filter file inside an attempt folder (and inside its torrent)."""


# --- object keys --------------------------------------------------------------------------


def _check_version(version: int) -> int:
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= _MAX_INT:
        raise ValueError(f"version numbers are integers >= 1, got {version!r}")
    return version


def version_prefix(version: int) -> str:
    """The folder of version ``version``: "v{N}/"."""
    return f"v{_check_version(version)}/"


def new_attempt_id(now: float) -> str:
    """A fresh publish-attempt id for Unix time ``now``: "YYYYmmddTHHMMSSZ-<8 hex>"."""
    stamp = dt.datetime.fromtimestamp(int(now), dt.timezone.utc).strftime(_ATTEMPT_TIME)
    return f"{stamp}-{secrets.token_hex(4)}"


def attempt_started_at(attempt: str) -> int | None:
    """The Unix time encoded in an attempt id; None when ``attempt`` is not one."""
    match = _ATTEMPT.fullmatch(attempt)
    if match is None:
        return None
    try:
        stamp = dt.datetime.strptime(match.group(1), _ATTEMPT_TIME)
    except ValueError:
        return None
    return int(stamp.replace(tzinfo=dt.timezone.utc).timestamp())


def attempt_prefix(version: int, attempt: str) -> str:
    """The folder of one publish attempt for ``version``: "v{N}/{attempt}/"."""
    if attempt_started_at(attempt) is None:
        raise ValueError(f"not a publish attempt id: {attempt!r}")
    return f"{version_prefix(version)}{attempt}/"


def filter_key(version: int, attempt: str) -> str:
    """Key of the filter file uploaded by ``attempt`` for ``version``."""
    return attempt_prefix(version, attempt) + FILTER_FILE_NAME


def torrent_key(version: int, attempt: str) -> str:
    """Key of the torrent uploaded by ``attempt`` for ``version``."""
    return attempt_prefix(version, attempt) + "filter.torrent"


def manifest_key(version: int) -> str:
    """Key of the manifest of ``version``."""
    return version_prefix(version) + "manifest.json"


def signature_key(version: int) -> str:
    """Key of the detached signature of the manifest of ``version``."""
    return manifest_key(version) + ".sig"


def parse_version_prefix(key: str) -> int | None:
    """Return N when ``key`` is "vN" or lies under "vN/" (no leading zeros); else None."""
    match = _VERSION_PREFIX.match(key)
    return int(match.group(1)) if match else None


# --- canonical JSON and strict field reading -----------------------------------------------


def canonical_json(obj: Mapping[str, Any]) -> bytes:
    """The canonical JSON bytes of ``obj`` (sorted keys, no whitespace, UTF-8).

    Raises FormatError when ``obj`` holds something JSON cannot carry exactly (NaN,
    infinities, lone surrogates, non-JSON types).
    """
    try:
        text = json.dumps(
            obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        return text.encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise FormatError(f"cannot encode as canonical JSON: {exc}") from exc


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise FormatError(f"duplicate JSON field {name!r}")
        result[name] = value
    return result


def _reject_constant(name: str) -> Any:
    raise FormatError(f"JSON constant {name} is not allowed")


def _load_object(data: bytes, what: str) -> dict[str, Any]:
    """Parse ``data`` as one UTF-8 JSON object; FormatError for anything else."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise FormatError(f"{what} must be bytes, got {type(data).__name__}")
    try:
        text = bytes(data).decode("utf-8")
        obj = json.loads(
            text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
        )
    except FormatError as exc:
        raise FormatError(f"{what}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise FormatError(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{what} is not valid JSON: {exc.msg} at offset {exc.pos}") from None
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise FormatError(f"{what} must be a JSON object, got {type(obj).__name__}")
    return obj


class _Fields:
    """Reads typed, range-checked fields out of a parsed JSON object; FormatError on any fault."""

    def __init__(self, obj: Mapping[str, Any], what: str) -> None:
        self._obj = obj
        self._what = what
        self._used: set[str] = set()

    def _get(self, name: str) -> Any:
        if name not in self._obj:
            raise FormatError(f"{self._what}: missing field {name!r}")
        self._used.add(name)
        return self._obj[name]

    def integer(self, name: str, low: int = 0, high: int = _MAX_INT) -> int:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int):
            raise FormatError(f"{self._what}: {name} must be an integer, got {value!r:.60}")
        if not low <= value <= high:
            raise FormatError(f"{self._what}: {name} must be in [{low}, {high}], got {value}")
        return value

    def number(self, name: str) -> float:
        value = self._get(name)
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise FormatError(f"{self._what}: {name} must be a number, got {value!r:.60}")
        return float(value)

    def text(self, name: str) -> str:
        value = self._get(name)
        if not isinstance(value, str):
            raise FormatError(f"{self._what}: {name} must be a string, got {value!r:.60}")
        return value

    def flag(self, name: str) -> bool:
        value = self._get(name)
        if not isinstance(value, bool):
            raise FormatError(f"{self._what}: {name} must be true or false, got {value!r:.60}")
        return value

    def mapping(self, name: str) -> Mapping[str, Any]:
        value = self._get(name)
        if not isinstance(value, dict):
            raise FormatError(f"{self._what}: {name} must be an object, got {value!r:.60}")
        return value

    def rest(self) -> dict[str, Any]:
        """The fields not read so far."""
        return {k: v for k, v in self._obj.items() if k not in self._used}


def _schema(obj: Mapping[str, Any], what: str) -> None:
    schema = _Fields(obj, what).integer("schema", 0)
    if schema != SCHEMA_VERSION:
        raise FormatError(f"unsupported {what} schema {schema} (this reader knows 1)")


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise FormatError(message)


def _check_hex(value: object, length: int, what: str) -> None:
    _require(
        isinstance(value, str) and len(value) == length and _HEX.fullmatch(value) is not None,
        f"{what} must be {length} lower-case hex characters, got {value!r:.80}",
    )


def _check_int(value: object, what: str, low: int = 0, high: int = _MAX_INT) -> None:
    _require(
        isinstance(value, int) and not isinstance(value, bool) and low <= value <= high,
        f"{what} must be an integer in [{low}, {high}], got {value!r:.60}",
    )


def _check_key(value: object, what: str) -> None:
    _require(
        isinstance(value, str)
        and bool(value)
        and not value.startswith("/")
        and "\\" not in value
        and ".." not in value.split("/"),
        f"{what} must be a relative object key, got {value!r:.80}",
    )


def _check_str(value: object, what: str, *, nonempty: bool = False) -> None:
    _require(
        isinstance(value, str) and (bool(value) or not nonempty),
        f"{what} must be a {'non-empty ' if nonempty else ''}string, got {value!r:.60}",
    )


def _check_extra(extra: Mapping[str, Any], known: set[str], what: str) -> dict[str, Any]:
    _require(isinstance(extra, Mapping), f"{what} extra must be a mapping")
    clash = sorted(known.intersection(extra))
    _require(not clash, f"{what} extra repeats known fields: {clash}")
    _require(all(isinstance(k, str) for k in extra), f"{what} extra keys must be strings")
    return dict(extra)


# --- FilterSummary ------------------------------------------------------------------------


@dataclass(frozen=True)
class FilterSummary:
    """The filter's parameters as recorded in the manifest; must equal the file's header.

    Strict: unknown fields are refused, because a filter parameter this code does not
    know means it cannot read the filter (that change comes with a new header format).
    """

    layout: str
    """"blocked" or "standard"."""
    num_bits: int
    num_probes: int
    hash_seed: int
    key_count: int
    """Keys actually inserted."""
    capacity: int
    """Keys the filter was sized for."""
    target_fpp: float
    """False-positive rate the filter was sized for, in (0, 1)."""
    hash: str = HASH_NAME
    """The hash function; only "murmur3_x64_128" exists."""

    def __post_init__(self) -> None:
        _require(self.layout in ("blocked", "standard"), f"unknown layout {self.layout!r:.40}")
        _require(self.hash == HASH_NAME, f"unknown hash {self.hash!r:.40}")
        for name in ("num_bits", "num_probes", "hash_seed", "key_count"):
            _check_int(getattr(self, name), f"filter.{name}")
        _check_int(self.capacity, "filter.capacity", 1)
        _require(
            isinstance(self.target_fpp, float) and 0.0 < self.target_fpp < 1.0,
            f"filter.target_fpp must be a number in (0, 1), got {self.target_fpp!r:.40}",
        )
        layout = Layout.parse(self.layout)
        problem = params_problem(layout, self.num_bits, self.num_probes, self.hash_seed)
        _require(problem is None, f"filter: {problem}")

    def to_params(self) -> FilterParams:
        """The :class:`FilterParams` these values describe."""
        return FilterParams(
            Layout.parse(self.layout),
            self.num_bits,
            self.num_probes,
            self.hash_seed,
            HashId.MURMUR3_X64_128,
        )

    @classmethod
    def from_header(cls, header: FilterHeader) -> FilterSummary:
        """The summary of a filter file's header."""
        return cls(
            layout=header.params.layout.label,
            num_bits=header.params.num_bits,
            num_probes=header.params.num_probes,
            hash_seed=header.params.hash_seed,
            key_count=header.key_count,
            capacity=header.capacity,
            target_fpp=header.target_fpp,
            hash=header.params.hash_id.name.lower(),
        )

    def to_dict(self) -> dict[str, Any]:
        """The JSON object form."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> FilterSummary:
        """Parse the JSON object form strictly; FormatError on any fault."""
        r = _Fields(obj, "manifest filter")
        summary = cls(
            layout=r.text("layout"),
            num_bits=r.integer("num_bits"),
            num_probes=r.integer("num_probes"),
            hash_seed=r.integer("hash_seed"),
            key_count=r.integer("key_count"),
            capacity=r.integer("capacity", 1),
            target_fpp=r.number("target_fpp"),
            hash=r.text("hash"),
        )
        unknown = sorted(r.rest())
        _require(not unknown, f"manifest filter: unknown fields {unknown!r:.100}")
        return summary


# --- Manifest -----------------------------------------------------------------------------


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
    schema: int = SCHEMA_VERSION
    """Document schema; only 1 exists."""
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """Unknown top-level fields, kept so they round-trip (e.g. a future ``deltas``)."""

    def __post_init__(self) -> None:
        _require(
            type(self.schema) is int and self.schema == SCHEMA_VERSION,
            f"unsupported manifest schema {self.schema!r}",
        )
        _check_int(self.version, "manifest version", 1)
        _check_int(self.size, "manifest size", HEADER_SIZE)
        _check_hex(self.sha256, 64, "manifest sha256")
        _check_hex(self.info_hash_v1, 40, "manifest info_hash_v1")
        if self.info_hash_v2 is not None:
            _check_hex(self.info_hash_v2, 64, "manifest info_hash_v2")
        _check_int(self.piece_size, "manifest piece_size", MIN_PIECE_SIZE)
        _require(
            self.piece_size & (self.piece_size - 1) == 0,
            f"manifest piece_size must be a power of two, got {self.piece_size}",
        )
        _require(isinstance(self.filter, FilterSummary), "manifest filter must be a FilterSummary")
        _check_int(self.created_at, "manifest created_at")
        _check_str(self.source_fingerprint, "manifest source_fingerprint")
        _check_str(self.publisher_id, "manifest publisher_id", nonempty=True)
        _check_key(self.filter_key, "manifest filter_key")
        _check_key(self.torrent_key, "manifest torrent_key")
        _check_hex(self.body_sha256, 64, "manifest body_sha256")
        object.__setattr__(self, "extra", _check_extra(self.extra, _MANIFEST_FIELDS, "manifest"))
        self.to_bytes()  # FormatError for anything JSON cannot carry exactly

    @property
    def torrent_format(self) -> str:
        """"hybrid" when the torrent is v1+v2 (a v2 info-hash is recorded), else "v1"."""
        return "v1" if self.info_hash_v2 is None else "hybrid"

    def to_dict(self) -> dict[str, Any]:
        """The JSON object form, ``extra`` merged in; no ``info_hash_v2`` for a v1 torrent."""
        obj = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        if obj["info_hash_v2"] is None:
            del obj["info_hash_v2"]
        obj["filter"] = self.filter.to_dict()
        obj.update(self.extra)
        return obj

    def to_bytes(self) -> bytes:
        """Canonical JSON bytes: what is stored and signed."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_bytes(cls, data: bytes) -> Manifest:
        """Parse and validate manifest bytes; FormatError on anything malformed."""
        return cls.from_dict(_load_object(data, "manifest"))

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Manifest:
        """Validate a parsed JSON object; FormatError on anything malformed."""
        _schema(obj, "manifest")
        r = _Fields(obj, "manifest")
        return cls(
            schema=r.integer("schema"),
            version=r.integer("version", 1),
            size=r.integer("size"),
            sha256=r.text("sha256"),
            info_hash_v1=r.text("info_hash_v1"),
            info_hash_v2=r.text("info_hash_v2") if "info_hash_v2" in obj else None,
            piece_size=r.integer("piece_size"),
            filter=FilterSummary.from_dict(r.mapping("filter")),
            created_at=r.integer("created_at"),
            source_fingerprint=r.text("source_fingerprint"),
            publisher_id=r.text("publisher_id"),
            filter_key=r.text("filter_key"),
            torrent_key=r.text("torrent_key"),
            body_sha256=r.text("body_sha256"),
            extra=r.rest(),
        )

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


_MANIFEST_FIELDS = {f.name for f in fields(Manifest) if f.name != "extra"}


# --- Pointer ------------------------------------------------------------------------------


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
        _require(
            type(self.schema) is int and self.schema == SCHEMA_VERSION,
            f"unsupported pointer schema {self.schema!r}",
        )
        _check_int(self.version, "pointer version", 1)
        _check_key(self.manifest_key, "pointer manifest_key")
        _check_int(self.sequence, "pointer sequence", 1)
        _check_int(self.issued_at, "pointer issued_at")
        _check_str(self.publisher_id, "pointer publisher_id", nonempty=True)
        _require(isinstance(self.pinned, bool), "pointer pinned must be a bool")
        object.__setattr__(self, "extra", _check_extra(self.extra, _POINTER_FIELDS, "pointer"))
        self.to_bytes()  # FormatError for anything JSON cannot carry exactly

    def to_dict(self) -> dict[str, Any]:
        """The JSON object form, ``extra`` merged in."""
        obj = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "extra"}
        obj.update(self.extra)
        return obj

    def to_bytes(self) -> bytes:
        """Canonical JSON bytes: what the envelope's signature covers."""
        return canonical_json(self.to_dict())

    @classmethod
    def from_bytes(cls, data: bytes) -> Pointer:
        """Parse and validate bare pointer bytes (no envelope); FormatError on faults."""
        return cls.from_dict(_load_object(data, "pointer"))

    @classmethod
    def from_dict(cls, obj: Mapping[str, Any]) -> Pointer:
        """Validate a parsed JSON object; FormatError on anything malformed."""
        _schema(obj, "pointer")
        r = _Fields(obj, "pointer")
        return cls(
            schema=r.integer("schema"),
            version=r.integer("version", 1),
            manifest_key=r.text("manifest_key"),
            sequence=r.integer("sequence", 1),
            issued_at=r.integer("issued_at"),
            publisher_id=r.text("publisher_id"),
            pinned=r.flag("pinned"),
            extra=r.rest(),
        )


_POINTER_FIELDS = {f.name for f in fields(Pointer) if f.name != "extra"}


# --- signatures ---------------------------------------------------------------------------


def encode_signature(signature: bytes) -> bytes:
    """The ``.sig`` object's bytes: base64 of the raw signature and a newline."""
    return base64.b64encode(signature) + b"\n"


def decode_signature(data: bytes | str, what: str = "signature") -> bytes:
    """Decode a base64 signature (surrounding whitespace allowed); FormatError if malformed."""
    try:
        text = data.strip() if isinstance(data, str) else bytes(data).decode("ascii").strip()
        raw = base64.b64decode(text, validate=True)
    except (UnicodeDecodeError, binascii.Error, ValueError, TypeError) as exc:
        raise FormatError(f"{what} is not valid base64") from exc
    if len(raw) != SIGNATURE_SIZE:
        raise FormatError(f"{what} is {len(raw)} bytes, an Ed25519 signature is {SIGNATURE_SIZE}")
    return raw


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


def seal_pointer(pointer: Pointer, signing_key: SigningKey) -> bytes:
    """The bytes of ``latest.json``: the pointer and its signature in one envelope."""
    signature = sign(signing_key, pointer.to_bytes())
    return canonical_json(
        {
            "key_id": signing_key.key_id,
            "pointer": pointer.to_dict(),
            "signature": base64.b64encode(signature).decode("ascii"),
        }
    )


def read_pointer_unverified(data: bytes) -> Pointer:
    """Parse a ``latest.json`` envelope WITHOUT checking its signature.

    For writers (publish, pin) that need the current sequence and version to write the
    next pointer, whoever signed this one. Never decide what to run from it: agents use
    :func:`open_pointer`. FormatError when the envelope or pointer is malformed.
    """
    envelope = _Fields(_load_object(data, "pointer envelope"), "pointer envelope")
    return Pointer.from_dict(envelope.mapping("pointer"))


def open_pointer(data: bytes, public_keys: Sequence[VerifyKey]) -> Pointer:
    """Verify a ``latest.json`` envelope and return its pointer.

    The signature is checked over the canonical JSON of the ``pointer`` object before
    the pointer's fields are trusted. ``key_id`` is informational; every pinned key is
    tried. Raises FormatError for a malformed envelope or pointer, VerificationError
    when no pinned key signed it. Unknown envelope fields are ignored.
    """
    envelope = _Fields(_load_object(data, "pointer envelope"), "pointer envelope")
    payload = envelope.mapping("pointer")
    signature = decode_signature(envelope.text("signature"), "pointer signature")
    verify(public_keys, canonical_json(payload), signature)
    return Pointer.from_dict(payload)


__all__ = [
    "FILTER_FILE_NAME",
    "LATEST_KEY",
    "SCHEMA_VERSION",
    "FilterSummary",
    "Manifest",
    "Pointer",
    "attempt_prefix",
    "attempt_started_at",
    "canonical_json",
    "decode_signature",
    "encode_signature",
    "filter_key",
    "manifest_key",
    "new_attempt_id",
    "open_pointer",
    "parse_version_prefix",
    "read_pointer_unverified",
    "seal_pointer",
    "sign_manifest",
    "signature_key",
    "torrent_key",
    "verify_manifest",
    "version_prefix",
]
