"""Fuzz targets: the parsers that read bytes an attacker or a careless operator controls.

Every target takes one ``bytes`` input and returns True (accepted as valid) or False
(rejected with the error type its contract names). Any other exception escapes: that is
a finding. The long coverage-guided runs (benchmarks/fuzz.py, atheris) and the bounded CI
runs (tests/fuzz/, hypothesis) call the same functions, and tests/fuzz/corpus/<target>/
replays every input that once broke one.

The first byte of an input usually selects a mode (which entry point, whether to repair
the CRC or re-sign the bytes), so that one corpus reaches past the checks random bytes
never pass: a header CRC, an Ed25519 signature.

Targets and their contracts:

- ``header``: FilterHeader.unpack -> FormatError; an accepted header packs back to the
  same bytes.
- ``filter_file``: Filter.open (optionally verify=True) on a whole file -> FormatError;
  an opened filter answers lookups.
- ``manifest``: manifest, pointer envelope and signature parsing and verification ->
  FormatError or VerificationError; bytes not signed by the pinned key are never
  accepted; accepted documents round-trip through their canonical bytes.
- ``index``: ``index.json`` (the signed index of every named filter) as writers read it
  (unverified), as agents open it (signature checked), through the agent's IndexPoller
  and each entry's verification, and through the publisher's sync_index -> FormatError
  or VerificationError (and StorageError where the agent fetches a torrent the index does
  not carry); an index not signed by the pinned key is never accepted, nor is an entry
  whose pointer or manifest that key did not sign; accepted indexes round-trip through their
  canonical bytes; a writer keeps every other entry, readable or not, as it found it.
- ``config``: the agent's and the publisher's config loaders (TOML file, environment)
  and PEM public keys -> ConfigError.
- ``delta``: DeltaHeader.unpack and the decoding of a delta's streams onto a body ->
  DeltaError; an accepted header packs back to the same bytes, and the C and numpy
  decoders accept exactly the same streams and flip exactly the same bits.
"""

from __future__ import annotations

import atexit
import base64
import functools
import json
import logging
import os
import shutil
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bloomswarm.agent import config as agent_config
from bloomswarm.agent.filter_index_source import IndexedAnnouncements, IndexPoller
from bloomswarm.common.bucket_layout import INDEX_KEY
from bloomswarm.common.canonical_json import canonical_json, load_object
from bloomswarm.common.delta import patch_body
from bloomswarm.common.delta_format import FIXED_SIZE, PAYLOAD_OFFSET, DeltaHeader
from bloomswarm.common.errors import (
    ConfigError,
    DeltaError,
    FormatError,
    StorageError,
    VerificationError,
)
from bloomswarm.common.fastpath import EXTENSION
from bloomswarm.common.filter_index import FilterIndex, open_index, read_index_unverified, seal_index
from bloomswarm.common.header import HEADER_SIZE, FilterHeader
from bloomswarm.common.manifest import Manifest, verify_manifest
from bloomswarm.common.memory_store import MemoryObjectStore
from bloomswarm.common.pointer import Pointer, open_pointer, read_pointer_unverified
from bloomswarm.common.reader import Filter
from bloomswarm.common.signature_text import decode_signature
from bloomswarm.common.signing import (
    SigningKey,
    VerifyKey,
    generate_keypair,
    load_public_keys,
    parse_private_key,
    sign,
)
from bloomswarm.publisher import config as publisher_config
from bloomswarm.publisher.filter_index import sync_index

Target = Callable[[bytes], bool]
"""Returns True for an accepted input, False for one rejected with the contract's error."""

_BODY_LIMIT = 1 << 20
"""filter_file pads or cuts its body to what the header claims only up to this size."""
_CRC_OFFSET = HEADER_SIZE - 4
_BODY_LENGTH_OFFSET = 8 + 2 + 1 + 1 + 4 + 4 + 4 + 8 * 3 + 8 + 8 + 8 + 8
"""Byte offset of the header's body_length field (docs/format.md)."""


class _Keys:
    """The fuzzing key pair: the "publisher" whose key the parsers pin. Made on first use."""

    _pair: tuple[SigningKey, list[VerifyKey], bytes] | None = None

    @classmethod
    def get(cls) -> tuple[SigningKey, list[VerifyKey], bytes]:
        if cls._pair is None:
            private_pem, public_pem = generate_keypair()
            signing = parse_private_key(private_pem)
            cls._pair = (signing, [signing.public_key()], public_pem)
        return cls._pair


SCRATCH_ENV = "BLOOMSWARM_FUZZ_SCRATCH"
"""A folder for the scratch files, made and removed by whoever sets it (benchmarks/fuzz.py:
libFuzzer ends its worker without running Python's exit handlers)."""


def tmpfs() -> str | None:
    """/dev/shm when it is writable (scratch files then never touch a disk), else None."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


@functools.cache
def _scratch_dir() -> Path:
    """The scratch folder: $BLOOMSWARM_FUZZ_SCRATCH, or a per-process one removed at exit."""
    given = os.environ.get(SCRATCH_ENV)
    if given:
        return Path(given)
    path = Path(tempfile.mkdtemp(prefix="bloomswarm-fuzz-", dir=tmpfs()))
    atexit.register(shutil.rmtree, path, True)
    return path


def _scratch_file(name: str, data: bytes) -> Path:
    """Write ``data`` to the scratch file ``name``."""
    path = _scratch_dir() / name
    path.write_bytes(data)
    return path


# --- header and whole files -------------------------------------------------------------------


def _header_bytes(flags: int, data: bytes) -> bytes:
    """Header bytes from a fuzz input: padded with zeros to 4096 (flag 4) and the CRC
    recomputed (flag 1), so mutations reach the checks behind the CRC."""
    if flags & 4:
        data = data[:HEADER_SIZE].ljust(HEADER_SIZE, b"\0")
    if flags & 1 and len(data) >= HEADER_SIZE:
        head = data[:_CRC_OFFSET]
        data = head + struct.pack("<I", zlib.crc32(head)) + data[HEADER_SIZE:]
    return data


def _claimed_size(header: bytes) -> int:
    if len(header) < _BODY_LENGTH_OFFSET + 8:
        return len(header)
    (body_length,) = struct.unpack_from("<Q", header, _BODY_LENGTH_OFFSET)
    return HEADER_SIZE + int(body_length)


def header(data: bytes) -> bool:
    """FilterHeader.unpack. Input: flags byte, size-delta byte (int8), header bytes.

    Flags: 1 recompute the CRC, 2 pass a file size (the one the header claims plus the
    delta), 4 pad to 4096 bytes. Accepted headers must pack back to the same 4096 bytes.
    """
    if len(data) < 2:
        return False
    flags, delta = data[0], struct.unpack("<b", data[1:2])[0]
    raw = _header_bytes(flags, data[2:])
    file_size = _claimed_size(raw) + delta if flags & 2 else None
    try:
        parsed = FilterHeader.unpack(raw, file_size)
    except FormatError:
        return False
    if parsed.pack() != raw[:HEADER_SIZE]:
        raise AssertionError("an accepted header does not pack back to its own bytes")
    return True


def filter_file(data: bytes) -> bool:
    """Filter.open on a whole file. Input: flags byte, 2-byte header length n, n header
    bytes (as in :func:`header`), then the body.

    Flags 1 and 4 as in :func:`header`; 8: cut or zero-pad the body to the length the
    header claims (up to 1 MiB), so a valid header opens; 16: open with verify=True.
    """
    if len(data) < 3:
        return False
    flags = data[0]
    (length,) = struct.unpack("<H", data[1:3])
    raw = _header_bytes(flags, data[3 : 3 + length])
    body = data[3 + length :]
    if flags & 8 and len(raw) >= HEADER_SIZE:
        claimed = _claimed_size(raw) - HEADER_SIZE
        if 0 <= claimed <= _BODY_LIMIT:
            body = body[:claimed].ljust(claimed, b"\0")
    path = _scratch_file("filter.bsf", raw[:HEADER_SIZE] + body if len(raw) >= HEADER_SIZE else raw)
    try:
        opened = Filter.open(path, verify=bool(flags & 16))
    except FormatError:
        return False
    try:
        answers = [b"fuzz" in opened, "fuzz" in opened, 42 in opened]
        if not all(isinstance(a, bool) for a in answers):
            raise AssertionError("a lookup did not answer a bool")
    finally:
        opened.close()
    return True


# --- delta files -------------------------------------------------------------------------------


_DELTA_ENGINES: tuple[str, ...] = ("python", "c") if EXTENSION is not None and hasattr(
    EXTENSION, "delta_apply") else ("python",)


def _delta_bytes(flags: int, data: bytes) -> bytes:
    """Delta bytes from a fuzz input: the target header's CRC (flag 4) and then the delta
    header's (flag 1) recomputed, so mutations reach the checks behind both CRCs."""
    if flags & 4 and len(data) >= PAYLOAD_OFFSET:
        target = data[FIXED_SIZE:PAYLOAD_OFFSET - 4]
        data = data[:FIXED_SIZE] + target + struct.pack("<I", zlib.crc32(target)) + data[PAYLOAD_OFFSET:]
    if flags & 1 and len(data) >= FIXED_SIZE:
        head = data[:FIXED_SIZE - 4]
        data = head + struct.pack("<I", zlib.crc32(head)) + data[FIXED_SIZE:]
    return data


def delta(data: bytes) -> bool:
    """A delta file's header and streams. Input: flags byte, then the delta's bytes.

    Flags 1 and 4 recompute the CRCs (see :func:`_delta_bytes`); 2: check the size against
    the input's length (as a reader of a file does). An accepted header must pack back to
    its own bytes; its streams are then decoded onto a zero body (up to 1 MiB) by every
    engine, which must all refuse (DeltaError) or all flip exactly the same bits, and
    exactly ``flips`` of them.
    """
    if not data:
        return False
    flags, raw = data[0], _delta_bytes(data[0], data[1:])
    try:
        header = DeltaHeader.unpack(raw, len(raw) if flags & 2 else None)
    except DeltaError:
        return False
    if header.pack() != raw[:PAYLOAD_OFFSET]:
        raise AssertionError("an accepted delta header does not pack back to its own bytes")
    if header.body_size > _BODY_LIMIT:
        return True
    streams = raw[PAYLOAD_OFFSET:]
    quotients = streams[:header.quotient_bytes]
    remainders = streams[header.quotient_bytes:header.quotient_bytes + header.remainder_bytes]
    results: set[bytes | None] = set()
    for engine in _DELTA_ENGINES:
        body = bytearray(header.body_size)
        try:
            patch_body(body, header, quotients, remainders, engine=engine)  # type: ignore[arg-type]
            results.add(bytes(body))
        except DeltaError:
            results.add(None)
    if len(results) != 1:
        raise AssertionError("the delta engines disagree on a delta's streams")
    (patched,) = results
    if patched is None:
        return False
    if sum(bin(byte).count("1") for byte in patched) != header.flips:
        raise AssertionError("accepted streams did not flip exactly `flips` bits")
    return True


# --- manifest, pointer, signatures ------------------------------------------------------------


def _roundtrip_manifest(manifest: Manifest) -> None:
    if Manifest.from_bytes(manifest.to_bytes()) != manifest:
        raise AssertionError("a manifest does not survive its own canonical bytes")


def _roundtrip_pointer(pointer: Pointer) -> None:
    if Pointer.from_bytes(pointer.to_bytes()) != pointer:
        raise AssertionError("a pointer does not survive its own canonical bytes")


def _forged(what: str) -> AssertionError:
    return AssertionError(f"{what} not signed by the pinned key was accepted")


def _manifest_modes(mode: int, body: bytes) -> bool:
    signing, public, _pem = _Keys.get()
    if mode == 0:  # bare parse
        _roundtrip_manifest(Manifest.from_bytes(body))
        return True
    if mode == 1:  # signed by the pinned key: verify then parse, same answer as the bare parse
        manifest = verify_manifest(body, base64.b64encode(sign(signing, body)), public)
        _roundtrip_manifest(manifest)
        return True
    if mode == 2:  # 88 bytes of signature object, then the manifest
        document, signature = body[88:], body[:88]
        _roundtrip_manifest(verify_manifest(document, signature, public))
        if decode_signature(signature) != sign(signing, document):  # Ed25519 is deterministic
            raise _forged("a manifest")
        return True
    if mode == 3:  # a latest.json envelope as found
        pointer = open_pointer(body, public)
        _roundtrip_pointer(pointer)
        if decode_signature(json.loads(body)["signature"]) != sign(signing, pointer.to_bytes()):
            raise _forged("a pointer")
        return True
    if mode == 4:  # an envelope around a fuzzed pointer object, signed by the pinned key
        payload = _json_object(body)
        if payload is None:
            return False
        envelope = {"key_id": signing.key_id, "pointer": payload,
                    "signature": base64.b64encode(sign(signing, canonical_json(payload))).decode()}
        pointer = open_pointer(canonical_json(envelope), public)
        _roundtrip_pointer(pointer)
        return True
    if mode == 5:  # what writers read: the envelope without its signature, or a bare pointer
        _roundtrip_pointer(read_pointer_unverified(body))
        return True
    if mode == 6:
        _roundtrip_pointer(Pointer.from_bytes(body))
        return True
    decode_signature(body)
    return True


def _json_object(body: bytes) -> dict[str, Any] | None:
    """``body`` as a JSON object made canonical-safe, or None (the harness's own parse)."""
    try:
        obj = json.loads(body.decode("utf-8"))
        canonical_json(obj)
    except (ValueError, RecursionError, FormatError):
        return None
    return obj if isinstance(obj, dict) else None


def manifest(data: bytes) -> bool:
    """Manifest, pointer and signature parsing and verification. Input: mode byte, document.

    Modes (first byte mod 8): 0 Manifest.from_bytes; 1 verify_manifest with a valid
    signature by the pinned key; 2 verify_manifest with a fuzzed signature; 3 open_pointer
    on a fuzzed envelope (2 and 3 accept only the pinned key's own signature of exactly
    those bytes: Ed25519 signatures are deterministic); 4 open_pointer on an
    envelope around a fuzzed pointer, validly signed; 5 read_pointer_unverified; 6
    Pointer.from_bytes; 7 decode_signature.
    """
    if not data:
        return False
    try:
        return _manifest_modes(data[0] % 8, data[1:])
    except (FormatError, VerificationError):
        return False


# --- index.json ---------------------------------------------------------------------------------


_INDEX_FILTER = "fuzz"
"""The filter the publisher of the ``index`` target's writer mode syncs into a fuzzed index."""


def _roundtrip_index(index: FilterIndex) -> None:
    signing, public, _pem = _Keys.get()
    again = FilterIndex.from_dict(load_object(index.to_bytes(), "index"))
    if again != index or again.to_bytes() != index.to_bytes():
        raise AssertionError("an index does not survive its own canonical bytes")
    sealed = seal_index(index, signing)
    if read_index_unverified(sealed) != index or open_index(sealed, public) != index:
        raise AssertionError("an index does not survive being sealed and opened")


def _signed_by_pinned_key(envelope: bytes, field: str) -> bool:
    """Whether ``envelope``'s signature is the pinned key's own signature of the canonical
    JSON of its ``field`` object (Ed25519 is deterministic: there is exactly one)."""
    signing, _public, _pem = _Keys.get()
    obj = json.loads(envelope)
    return decode_signature(obj["signature"]) == sign(signing, canonical_json(obj[field]))


def _sealed_object(body: bytes) -> bytes | None:
    """An envelope around the JSON object ``body``, validly signed by the pinned key; None
    when ``body`` is not a JSON object (the harness's own parse)."""
    signing, _public, _pem = _Keys.get()
    payload = _json_object(body)
    if payload is None:
        return None
    return canonical_json({"key_id": signing.key_id, "index": payload,
                           "signature": base64.b64encode(sign(signing, canonical_json(payload))).decode()})


def _agent_reads_index(sealed: bytes) -> bool:
    """The agent's path: IndexPoller.refresh on ``sealed``, then every listed filter's
    entry verified by IndexedAnnouncements (as a daemon following the index does)."""
    signing, public, _pem = _Keys.get()
    store = MemoryObjectStore()
    store.put(INDEX_KEY, sealed)
    poller = IndexPoller(store, public)
    index = poller.refresh().index
    if index is None:
        raise AssertionError("IndexPoller.refresh read an index but holds none")
    _roundtrip_index(index)
    for name in [*index.filters, *index.unreadable]:
        try:
            announcement = IndexedAnnouncements(poller, name, store, public).latest()
        except (FormatError, VerificationError, StorageError):
            continue  # the entry is refused (or leads to a torrent the store lacks)
        if announcement is None:
            raise AssertionError(f"a first read of entry {name!r} announced nothing")
        documents = announcement.documents
        if not _signed_by_pinned_key(documents.pointer_envelope, "pointer"):
            raise _forged("an index entry's pointer")
        if decode_signature(documents.manifest_signature) != sign(signing, documents.manifest):
            raise _forged("an index entry's manifest")
    return True


@contextmanager
def _quiet(logger: str) -> Iterator[None]:
    """``logger`` silenced (the writer logs every carried-over unreadable entry)."""
    log = logging.getLogger(logger)
    disabled, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = disabled


@functools.cache
def _writer_folder() -> tuple[tuple[str, bytes], ...]:
    """The objects of filter ``fuzz``'s folder after two publishes (its pointer is at
    sequence 2): what the writer mode syncs into a fuzzed index. Made on first use."""
    from bloomswarm.common.builder import FilterBuilder
    from bloomswarm.common.filter_names import filter_prefix
    from bloomswarm.common.prefixed_store import PrefixedStore
    from bloomswarm.common.storage import S3Config
    from bloomswarm.publisher.config import PublisherConfig
    from bloomswarm.publisher.publish import publish_filter

    signing, _public, _pem = _Keys.get()
    root = MemoryObjectStore()
    folder = PrefixedStore(root, filter_prefix(_INDEX_FILTER))
    publisher = PublisherConfig(s3=S3Config(bucket="fuzz"), publisher_id="fuzz")
    for _ in range(2):
        builder = FilterBuilder.for_capacity(100, 0.01)
        builder.add_many([f"key-{i}" for i in range(50)])
        publish_filter(folder, publisher, builder, signing, "fuzz", force=True, progress=False)
    return tuple((key, stored.data) for key in root.list() if (stored := root.get(key)) is not None)


def _writer_syncs_index(body: bytes) -> bool:
    """The publisher's path: sync_index of filter ``fuzz`` into ``body`` as index.json."""
    signing, public, _pem = _Keys.get()
    store = MemoryObjectStore()
    for key, data in _writer_folder():
        store.put(key, data)
    store.put(INDEX_KEY, body)
    with _quiet("bloomswarm.filter_index"):
        written = sync_index(store, [_INDEX_FILTER], signing, "fuzz-writer", now=lambda: 1_700_000_000,
                             sleep=lambda _s: None)
    current = read_index_unverified(body)  # it parsed for sync_index: it parses here
    if written is None:  # nothing to change: the index already has the entry, or a newer one
        if _INDEX_FILTER not in current.filters:
            raise AssertionError("the writer left out a filter the index lacks")
        return True
    stored, latest = store.get(INDEX_KEY), store.get(f"filters/{_INDEX_FILTER}/latest.json")
    assert stored is not None and latest is not None
    if written.filters[_INDEX_FILTER].pointer != latest.data:
        raise AssertionError("the index written does not hold the filter's latest.json")
    if open_index(stored.data, public) != written:
        raise AssertionError("the index written is not the index sync_index returned")
    _roundtrip_index(written)
    if written.sequence != current.sequence + 1:
        raise AssertionError("the index written does not follow the one it replaced")
    kept = {n: e for n, e in written.filters.items() if n != _INDEX_FILTER}
    if kept != {n: e for n, e in current.filters.items() if n != _INDEX_FILTER}:
        raise AssertionError("the writer changed another filter's entry")
    if written.unreadable != {n: b for n, b in current.unreadable.items() if n != _INDEX_FILTER}:
        raise AssertionError("the writer did not carry the unreadable entries over unchanged")
    if written.extra != current.extra:
        raise AssertionError("the writer did not carry the index's unknown fields over unchanged")
    return True


def _index_modes(mode: int, body: bytes) -> bool:
    _signing, public, _pem = _Keys.get()
    if mode == 0:  # what writers read: the envelope, its signature not checked
        _roundtrip_index(read_index_unverified(body))
        return True
    if mode == 1:  # an index.json envelope as found
        index = open_index(body, public)
        _roundtrip_index(index)
        if not _signed_by_pinned_key(body, "index"):
            raise _forged("an index")
        return True
    if mode == 4:
        return _writer_syncs_index(body)
    sealed = _sealed_object(body)
    if sealed is None:
        return False
    if mode == 2:  # a fuzzed index object, validly signed
        _roundtrip_index(open_index(sealed, public))
        return True
    return _agent_reads_index(sealed)  # mode 3


def index(data: bytes) -> bool:
    """``index.json`` parsing, verification, the agent's and the writer's use of it. Input:
    mode byte, document.

    Modes (first byte mod 5): 0 read_index_unverified; 1 open_index on a fuzzed envelope
    (accepted only with the pinned key's own signature of exactly its index object); 2
    open_index on an envelope around a fuzzed index object, validly signed; 3 the agent:
    IndexPoller.refresh on such an envelope, then IndexedAnnouncements.latest for every
    entry (an announcement must come from a pointer and manifest the pinned key signed);
    4 the publisher: sync_index of a published filter into the document as index.json
    (every other entry, readable or not, and the index's unknown fields must be kept as
    they were). Accepted indexes must round-trip through their canonical bytes and
    through seal_index/open_index.
    """
    if not data:
        return False
    try:
        return _index_modes(data[0] % 5, data[1:])
    except (FormatError, VerificationError):
        return False


# --- configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Loader:
    name: str
    load: Callable[..., object]
    file_name: str


_LOADERS = (
    _Loader("agent", agent_config.load_config, "agent.toml"),
    _Loader("publisher", publisher_config.load_config, "publisher.toml"),
)


def _environ(body: bytes, prefix: str) -> dict[str, str]:
    """NAME=value lines as an environment, each NAME behind the loader's prefix."""
    environ: dict[str, str] = {}
    for line in body.decode("utf-8", "replace").splitlines():
        name, _sep, value = line.partition("=")
        environ[prefix + name.strip().upper()] = value
    return environ


def config(data: bytes) -> bool:
    """Config loading. Input: mode byte, document.

    Modes (first byte mod 6): 0/1 the agent's / publisher's loader on a TOML file; 2/3 the
    same on an environment of ``NAME=value`` lines (``NAME`` after the prefix); 4 the
    agent's loader on a file whose public key file holds the document (PEM parsing);
    5 load_public_keys on the document as PEM bytes.
    """
    if not data:
        return False
    mode, body = data[0] % 6, data[1:]
    try:
        if mode in (0, 1):
            loader = _LOADERS[mode]
            loader.load(_scratch_file(loader.file_name, body))
        elif mode in (2, 3):
            loader = _LOADERS[mode - 2]
            prefix = agent_config.ENV_PREFIX if mode == 2 else publisher_config.ENV_PREFIX
            loader.load(None, environ=_environ(body, prefix))
        elif mode == 4:
            pem = _scratch_file("publisher.pub", body)
            loaded = agent_config.load_config(
                None, environ={"BLOOMSWARM_AGENT_DATA_DIR": "/nonexistent/data",
                               "BLOOMSWARM_AGENT_PUBLIC_KEYS": str(pem),
                               "BLOOMSWARM_AGENT_S3_BUCKET": "fuzz-bucket"})
            load_public_keys(loaded.public_keys)
        else:
            load_public_keys([body])
    except ConfigError:
        return False
    return True


TARGETS: Mapping[str, Target] = {
    "header": header,
    "filter_file": filter_file,
    "manifest": manifest,
    "config": config,
    "delta": delta,
    "index": index,
}
"""Every fuzz target by name."""


# --- seeds: valid inputs made by the project's own code ---------------------------------------


def seeds() -> dict[str, list[bytes]]:
    """Valid inputs for every target, built with the builder and the real publisher."""
    from bloomswarm.common.bucket_layout import LATEST_KEY, manifest_key
    from bloomswarm.common.builder import FilterBuilder
    from bloomswarm.common.params import Layout
    from bloomswarm.common.storage import MemoryObjectStore, S3Config
    from bloomswarm.publisher.config import PublisherConfig
    from bloomswarm.publisher.publish import publish_filter

    signing, _public, public_pem = _Keys.get()
    store = MemoryObjectStore()
    publisher = PublisherConfig(s3=S3Config(bucket="fuzz"), publisher_id="fuzz")
    files: list[bytes] = []
    for layout, capacity in ((Layout.BLOCKED, 200), (Layout.STANDARD, 300)):
        builder = FilterBuilder.for_capacity(capacity, 0.01, layout=layout)
        builder.add_many([f"key-{i}" for i in range(capacity // 2)])
        result = publish_filter(store, publisher, builder, signing, "fuzz", force=True, progress=False)
        stored = store.get(result.manifest.filter_key)
        assert stored is not None
        files.append(stored.data)
    manifests = [store.get(manifest_key(v)) for v in (1, 2)]
    latest = store.get(LATEST_KEY)
    assert latest is not None and all(m is not None for m in manifests)
    manifest_bytes = [m.data for m in manifests if m is not None]
    envelope = json.loads(latest.data)
    pointer = canonical_json(envelope["pointer"])
    sig = base64.b64encode(sign(signing, manifest_bytes[0]))
    header_seeds = [bytes([flags, 0]) + f[:HEADER_SIZE] for f in files for flags in (0, 3)]
    header_seeds += [bytes([7, 0]) + f[:_BODY_LENGTH_OFFSET + 40] for f in files]
    file_seeds = [bytes([flags]) + struct.pack("<H", HEADER_SIZE) + f for f in files for flags in (0, 16)]
    file_seeds += [bytes([13]) + struct.pack("<H", 160) + f[:160] for f in files]
    manifest_seeds = [bytes([mode]) + m for m in manifest_bytes for mode in (0, 1)]
    manifest_seeds += [bytes([2]) + sig + manifest_bytes[0], bytes([3]) + latest.data,
                       bytes([4]) + pointer, bytes([5]) + latest.data, bytes([6]) + pointer,
                       bytes([7]) + sig]
    agent_toml = _agent_toml()
    publisher_toml = _publisher_toml()
    config_seeds = [b"\0" + agent_toml, b"\1" + publisher_toml,
                    b"\2" + b"DATA_DIR=/var/lib/b\nPUBLIC_KEYS=/a.pub,/b.pub\nS3_BUCKET=fuzz-bucket\n"
                    b"SWARM_CONNECTIONS_LIMIT=100\nWATCH_POLL_INTERVAL_S=2.5\n",
                    b"\3" + b"S3_BUCKET=fuzz-bucket\nKEEP_VERSIONS=3\nTRACKERS=http://t/announce\nBUILD_FPP=0.01\n",
                    b"\4" + public_pem, b"\5" + public_pem]
    return {"header": header_seeds, "filter_file": file_seeds, "manifest": manifest_seeds,
            "config": config_seeds, "delta": _delta_seeds(), "index": _index_seeds()}


def _index_seeds() -> list[bytes]:
    """index.json as the publisher writes it for two named filters (torrents inline), and
    one with a torrent not inline, an entry that does not parse and an unknown field."""
    from bloomswarm.common.builder import FilterBuilder
    from bloomswarm.common.filter_names import filter_prefix
    from bloomswarm.common.params import Layout
    from bloomswarm.common.prefixed_store import PrefixedStore
    from bloomswarm.common.storage import S3Config
    from bloomswarm.publisher.config import PublisherConfig
    from bloomswarm.publisher.publish import publish_filter

    signing, _public, _pem = _Keys.get()
    root = MemoryObjectStore()
    publisher = PublisherConfig(s3=S3Config(bucket="fuzz"), publisher_id="fuzz")
    for name, layout in ((_INDEX_FILTER, Layout.BLOCKED), ("seen-urls", Layout.STANDARD)):
        builder = FilterBuilder.for_capacity(100, 0.01, layout=layout)
        builder.add_many([f"{name}-{i}" for i in range(50)])
        publish_filter(PrefixedStore(root, filter_prefix(name)), publisher, builder, signing, "fuzz",
                       force=True, progress=False)
    with _quiet("bloomswarm.filter_index"):
        sync_index(root, [_INDEX_FILTER, "seen-urls"], signing, "fuzz", now=lambda: 1_700_000_000)
    stored = root.get(INDEX_KEY)
    assert stored is not None
    payload = dict(json.loads(stored.data)["index"])
    payload["filters"] = dict(payload["filters"])
    payload["filters"]["seen-urls"] = {k: v for k, v in payload["filters"]["seen-urls"].items()
                                       if k != "torrent"}
    payload["filters"]["not/a-name"] = {"pointer": 1}
    payload["future"] = {"field": [1, "two"]}
    other = FilterIndex.from_dict(payload)
    envelopes = [stored.data, seal_index(other, signing)]
    objects = [canonical_json(json.loads(stored.data)["index"]), other.to_bytes()]
    return ([bytes([0]) + e for e in envelopes] + [bytes([1]) + e for e in envelopes]
            + [bytes([mode]) + o for o in objects for mode in (2, 3)]
            + [bytes([4]) + e for e in envelopes])


def _delta_seeds() -> list[bytes]:
    """Deltas between two versions of a blocked and a standard filter, and an empty one."""
    from bloomswarm.common.builder import FilterBuilder
    from bloomswarm.common.delta import make_delta
    from bloomswarm.common.params import Layout

    found: list[bytes] = []
    for layout in (Layout.BLOCKED, Layout.STANDARD):
        versions = []
        for version, keys in ((1, range(0, 150)), (2, range(15, 165))):
            builder = FilterBuilder.for_capacity(200, 0.01, layout=layout)
            builder.add_many([f"key-{i}" for i in keys])
            path = _scratch_dir() / f"seed-{layout.label}-v{version}.bsf"
            path.unlink(missing_ok=True)
            builder.write(path, version=version, created_at=1_700_000_000 + version)
            versions.append(path)
        for base, target in ((versions[0], versions[1]), (versions[1], versions[1])):
            out = _scratch_dir() / "seed.bsd"
            out.unlink(missing_ok=True)
            make_delta(base, target, out)
            found += [bytes([flags]) + out.read_bytes() for flags in (0, 7)]
    return found


def _publisher_toml() -> bytes:
    """A publisher configuration with every table (the installed package has no deploy/)."""
    return b"""publisher_id = "builder-1"
signing_key = "/etc/bloomswarm/publisher.key"
keep_versions = 5
orphan_grace_s = 21600.0
trackers = ["http://tracker-1:6969/announce"]
torrent_format = "v1"
watch_debounce_s = 5.0

[s3]
bucket = "bloomswarm-filters"
prefix = "fleet-a"
read_timeout_s = 60.0
part_size = 67108864
checksum_sha256 = true

[build]
key_type = "str"
fpp = 0.01
layout = "blocked"
seed = 0

[sizing]
headroom = 0.2
fpp_margin = 0.1
shrink_below = 0.5

[deltas]
max_bases = 8
max_share = 0.5

[tracker]
whitelist = "/etc/opentracker/whitelist.txt"
pid_file = "/run/opentracker.pid"
interval_s = 30.0
"""


def _agent_toml() -> bytes:
    return b"""data_dir = "/var/lib/bloomswarm"
public_keys = ["/etc/bloomswarm/publisher.pub", "/etc/bloomswarm/publisher-next.pub"]
transfer = "swarm"
resume_save_interval_s = 30.0

[s3]
bucket = "filters"
prefix = "fleet-a"
endpoint_url = "http://127.0.0.1:9000"

[origin]
presign_expiry_s = 3600
http_timeout_s = 10.0

[watch]
poll_interval_s = 2.0
poll_jitter_s = 0.5
retry_initial_s = 1.0
retry_max_s = 60.0

[install]
keep_versions = 2
max_file_size = 68719476736
disk_margin_bytes = 1073741824

[status]
host = "127.0.0.1"
port = 9731

[direct]
chunk_size = 1048576
timeout_s = 30.0
rate_limit_bytes_per_s = 0

[swarm]
trackers = ["http://tracker-1:6969/announce"]
dht_bootstrap_nodes = ["10.0.0.5:6881"]
"""


__all__ = [
    "SCRATCH_ENV", "TARGETS", "Target", "config", "delta", "filter_file", "header", "index", "manifest",
    "seeds", "tmpfs",
]
