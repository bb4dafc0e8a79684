"""Golden tests of the documents and small files around the filter file, and the round trips
of their codecs.

tests/unit/test_golden.py pins the filter file, its header and the delta file;
test_filter_index.py pins index.json; test_manifest.py pins a plain manifest. This file
pins the rest of what the publisher writes and the agent reads — a manifest with deltas
and its ``.sig`` object, ``latest.json`` (plain and pinned), the ``.torrent`` files (v1,
hybrid, private), the tracker whitelist — and what the agent writes for itself
(``state.json``), each built from fixed inputs with a fixed Ed25519 key (its signatures
are deterministic). If one of these fails, a format changed: agents of every release
read what any publisher wrote, so that needs a new schema, not a new golden value.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import re
from pathlib import Path
from typing import Any

import libtorrent as lt
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.x509.oid import NameOID
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomswarm.agent.install import read_last_sequence, write_last_sequence
from bloomswarm.agent.verify import read_torrent
from bloomswarm.common.bucket_layout import (
    delta_key,
    delta_torrent_key,
    filter_key,
    manifest_key,
    torrent_key,
)
from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.delta_format import ENCODING_RICE_GAPS, MAX_RICE_K, DeltaHeader
from bloomswarm.common.filter_summary import FilterSummary
from bloomswarm.common.header import FilterHeader
from bloomswarm.common.manifest import DeltaEntry, Manifest, sign_manifest, verify_manifest
from bloomswarm.common.params import FilterParams, Layout
from bloomswarm.common.pointer import Pointer, open_pointer, read_pointer_unverified, seal_pointer
from bloomswarm.common.signature_text import decode_signature, encode_signature
from bloomswarm.common.signing import key_id
from bloomswarm.common.storage import MemoryObjectStore, S3Config
from bloomswarm.common.tls_identity import ca_certificate_pem, ca_fingerprint
from bloomswarm.publisher.config import PublisherConfig
from bloomswarm.publisher.publish import publish_filter
from bloomswarm.publisher.torrent import make_torrent, read_info_hashes
from bloomswarm.publisher.tracker_sync import sync_whitelist
from tests.unit.publishing_helpers import GOLDEN_KEY, GOLDEN_PUBLIC

ATTEMPT = "20231114T221320Z-0a1b2c3d"


# --- the key: its id and its public PEM ----------------------------------------------------------


def test_golden_key_id_and_public_pem() -> None:
    """``key_id`` (in every envelope) is the first 16 hex of SHA-256 of the raw public key;
    the public key file is SubjectPublicKeyInfo PEM."""
    public = GOLDEN_KEY.public_key()
    assert key_id(public) == GOLDEN_KEY.key_id == "56475aa75463474c"
    pem = public.key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    assert pem == (
        b"-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAA6EHv/POEL4dcN0Y50vAmWfk1jCbpQ1fHdyGZBJVMbg=\n"
        b"-----END PUBLIC KEY-----\n"
    )


# --- a manifest with deltas, and its .sig object --------------------------------------------------


def golden_manifest() -> Manifest:
    """A v1-torrent version 43 with a hybrid delta from v42 and a v1 delta from v41."""
    return Manifest(
        version=43, size=4096 + 2560, sha256="ab" * 32, info_hash_v1="cd" * 20, info_hash_v2=None,
        piece_size=16384,
        filter=FilterSummary(layout="standard", num_bits=64 * 320, num_probes=7, hash_seed=0xB100F,
                             key_count=1607, capacity=1500, target_fpp=0.01),
        created_at=1_700_003_600, source_fingerprint="sha256:0123", publisher_id="builder-1",
        filter_key=filter_key(43, ATTEMPT), torrent_key=torrent_key(43, ATTEMPT), body_sha256="00" * 32,
        deltas=(
            DeltaEntry(base_version=42, size=4400, sha256="12" * 32, info_hash_v1="34" * 20,
                       info_hash_v2="56" * 32, key=delta_key(43, ATTEMPT, 42),
                       torrent_key=delta_torrent_key(43, ATTEMPT, 42)),
            DeltaEntry(base_version=41, size=4500, sha256="78" * 32, info_hash_v1="9a" * 20,
                       info_hash_v2=None, key=delta_key(43, ATTEMPT, 41),
                       torrent_key=delta_torrent_key(43, ATTEMPT, 41)),
        ),
    )


GOLDEN_MANIFEST = (
    b'{"body_sha256":"' + b"00" * 32 + b'","created_at":1700003600,'
    b'"deltas":[{"base_version":42,"info_hash_v1":"' + b"34" * 20 + b'","info_hash_v2":"' + b"56" * 32 + b'",'
    b'"key":"v43/20231114T221320Z-0a1b2c3d/delta-from-v42.bsd","sha256":"' + b"12" * 32 + b'","size":4400,'
    b'"torrent_key":"v43/20231114T221320Z-0a1b2c3d/delta-from-v42.torrent"},'
    b'{"base_version":41,"info_hash_v1":"' + b"9a" * 20 + b'",'
    b'"key":"v43/20231114T221320Z-0a1b2c3d/delta-from-v41.bsd","sha256":"' + b"78" * 32 + b'","size":4500,'
    b'"torrent_key":"v43/20231114T221320Z-0a1b2c3d/delta-from-v41.torrent"}],'
    b'"filter":{"capacity":1500,"hash":"murmur3_x64_128","hash_seed":725007,"key_count":1607,'
    b'"layout":"standard","num_bits":20480,"num_probes":7,"target_fpp":0.01},'
    b'"filter_key":"v43/20231114T221320Z-0a1b2c3d/filter.bsf","info_hash_v1":"' + b"cd" * 20 + b'",'
    b'"piece_size":16384,"publisher_id":"builder-1","schema":1,"sha256":"' + b"ab" * 32 + b'",'
    b'"size":6656,"source_fingerprint":"sha256:0123",'
    b'"torrent_key":"v43/20231114T221320Z-0a1b2c3d/filter.torrent","version":43}'
)
"""The manifest: canonical JSON, sorted keys; deltas in the manifest's order; a v1-only
torrent or delta has no ``info_hash_v2`` field."""
GOLDEN_MANIFEST_SIG = (
    b"5ritaTovHjdL+iQSNfwbvSTl0I17uBbndt21fxoo0RsOJXYDgP9ICMvvIXyJ54Z9TP67ERaVHVwLyzTa1jE1Cw==\n"
)
"""``manifest.json.sig``: base64 of the 64-byte Ed25519 signature of the manifest's bytes,
and a newline."""


def test_golden_manifest_with_deltas_and_its_signature() -> None:
    data, signature = sign_manifest(golden_manifest(), GOLDEN_KEY)
    assert data == GOLDEN_MANIFEST
    assert signature == GOLDEN_MANIFEST_SIG
    verified = verify_manifest(GOLDEN_MANIFEST, GOLDEN_MANIFEST_SIG, GOLDEN_PUBLIC, expected_version=43)
    assert verified == golden_manifest()
    assert Manifest.from_bytes(GOLDEN_MANIFEST).to_bytes() == GOLDEN_MANIFEST


# --- latest.json ------------------------------------------------------------------------------------

GOLDEN_POINTER = (
    b'{"issued_at":1700003700,"manifest_key":"v43/manifest.json","pinned":false,'
    b'"publisher_id":"builder-1","schema":1,"sequence":57,"version":43}'
)
GOLDEN_LATEST = (
    b'{"key_id":"56475aa75463474c","pointer":' + GOLDEN_POINTER + b','
    b'"signature":"02CDd0Me6ko4TwvBDjlP86X+a+ZMoW7mCYkIpHlVPOULAWGVx1z3vtWo3/otSrFP9WwYFasmnZwrIZpjc9EkAw=="}'
)
GOLDEN_PINNED_POINTER = (
    b'{"issued_at":1700003800,"manifest_key":"v41/manifest.json","pinned":true,'
    b'"publisher_id":"op\xc3\xa9rateur","reason":"rollback","schema":1,"sequence":58,"version":41}'
)
"""A pinned rollback: an unknown field, sorted in among the known ones, and non-ASCII text
as raw UTF-8 (no \\u escapes)."""
GOLDEN_PINNED_LATEST = (
    b'{"key_id":"56475aa75463474c","pointer":' + GOLDEN_PINNED_POINTER + b','
    b'"signature":"wpIkweUoTCXiWpXtp/Scg6WVhaWmACu2sady7Nb81YD4JiaIAqiIZY7DBX3yq8Z7xkiQc92NU6uLhLRyTajpDw=="}'
)


@pytest.mark.parametrize(
    ("pointer", "payload", "sealed"),
    [
        (Pointer(version=43, manifest_key=manifest_key(43), sequence=57, issued_at=1_700_003_700,
                 publisher_id="builder-1"), GOLDEN_POINTER, GOLDEN_LATEST),
        (Pointer(version=41, manifest_key=manifest_key(41), sequence=58, issued_at=1_700_003_800,
                 publisher_id="opérateur", pinned=True, extra={"reason": "rollback"}),
         GOLDEN_PINNED_POINTER, GOLDEN_PINNED_LATEST),
    ],
    ids=["latest", "pinned-rollback"],
)
def test_golden_latest_json(pointer: Pointer, payload: bytes, sealed: bytes) -> None:
    """The pointer's canonical bytes (what the signature covers) and the whole signed
    envelope."""
    assert pointer.to_bytes() == payload
    assert seal_pointer(pointer, GOLDEN_KEY) == sealed
    signature = decode_signature(json.loads(sealed)["signature"])
    assert GOLDEN_PUBLIC[0].key.verify(signature, payload) is None
    assert open_pointer(sealed, GOLDEN_PUBLIC) == pointer == read_pointer_unverified(sealed)


# --- .torrent files ------------------------------------------------------------------------------


def golden_ca() -> bytes:
    """A fixed fleet CA certificate (Ed25519, fixed serial and validity), as
    load_swarm_ca re-serialises it."""
    key = Ed25519PrivateKey.from_private_bytes(bytes(range(32, 64)))
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "golden fleet CA")])
    start = dt.datetime(2023, 11, 14, tzinfo=dt.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(0x601DE).not_valid_before(start).not_valid_after(start + dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, None)
    )
    return ca_certificate_pem(cert.public_bytes(serialization.Encoding.PEM))


GOLDEN_CA_SHA256 = "76256e2818dec7a02c91c402ff97590c6115b4d7e4abb6b6c3ba2df5f689d8b6"
TRACKERS = ["http://tracker-1:6969/announce", "udp://tracker-2:6969"]
CREATION_DATE = re.compile(rb"13:creation datei[0-9]+e")
"""libtorrent stamps each torrent with the time it was made: the one field the golden
bytes leave out (it is outside the info dict, so no info-hash depends on it)."""
TORRENT_HEAD = (
    b"d8:announce30:http://tracker-1:6969/announce"
    b"13:announce-listll30:http://tracker-1:6969/announce20:udp://tracker-2:6969ee"
    b"10:created by10:bloomswarm13:creation datei0e4:infod"
)
"""Every torrent's bytes up to its info dict: the first tracker, all of them in one tier,
the creator; no web seed (agents add the origin's URL at run time)."""

GOLDEN_TORRENTS = {
    # format, private: SHA-256 of the bytes with creation date 0, info-hash v1, info-hash v2
    ("v1", False): ("b528391e425d2fc9dcc71fe9db06459fec5da72d6d495a6fc34c149e2d452738",
                    "cddce77c2ac3ffb2d596162a097395e483f09901", None),
    ("hybrid", False): ("59634eb7d50f28218f913f757d3ec796fadc3ec75c47f6e48569c09fb3ae287c",
                        "35e82d1e5793b435aec89562daf7c4ba3c0ba49c",
                        "5aa7ac9576269c8ea31fe6f620480d932f6e8b5ce05606de61718b2b6b14c5f1"),
    ("hybrid", True): ("d1ac7f6487e9b088a11de7ea43a2811b4e83df4b1ccd2cd0687a8721f9409863",
                       "3a25bc353b205332b43213dd09d03ce7871a2d54",
                       "c033edb5c21c49ffea5b3434d6d025961a4ed19c55b9070804f15d52b265c7bc"),
}


def golden_file(tmp_path: Path) -> Path:
    """40,000 fixed bytes (three 16 KiB pieces, the last one short) named filter.bsf."""
    path = tmp_path / "filter.bsf"
    path.write_bytes(b"".join(hashlib.sha256(i.to_bytes(4, "little")).digest() for i in range(1250)))
    return path


@pytest.mark.parametrize(("torrent_format", "private"), sorted(GOLDEN_TORRENTS), ids=str)
def test_golden_torrent(tmp_path: Path, torrent_format: Any, private: bool) -> None:
    ca = golden_ca()
    assert ca_fingerprint(ca) == GOLDEN_CA_SHA256
    torrent = make_torrent(golden_file(tmp_path), trackers=TRACKERS, piece_size=16384,
                           torrent_format=torrent_format, root_cert=ca.decode() if private else None,
                           progress=False)
    masked, dates = CREATION_DATE.subn(b"13:creation datei0e", torrent.data)
    assert dates == 1
    sha256, v1, v2 = GOLDEN_TORRENTS[(torrent_format, private)]
    assert masked.startswith(TORRENT_HEAD)
    assert (torrent.info_hash_v1, torrent.info_hash_v2) == (v1, v2) == read_info_hashes(torrent.data)
    assert hashlib.sha256(masked).hexdigest() == sha256
    decoded: Any = lt.bdecode(torrent.data)
    info = decoded[b"info"]
    assert hashlib.sha1(lt.bencode(info)).hexdigest() == v1  # the info dict is canonical bencoding
    assert (info[b"name"], info[b"piece length"]) == (b"filter.bsf", 16384)
    assert info.get(b"ssl-cert") == (ca if private else None)
    summary = read_torrent(torrent.data)
    assert (summary.file_name, summary.total_size, summary.piece_size) == ("filter.bsf", 40_000, 16384)
    assert summary.ca_sha256 == (GOLDEN_CA_SHA256 if private else None)


# --- the tracker whitelist --------------------------------------------------------------------------


GOLDEN_WHITELIST = (
    b"2fb86b8a92f0c162c69d29819e86f40ba4cb1897\n"  # v2's v1 info-hash (a hybrid torrent)
    b"acf7744fd96e36d575722f8f7ea72dee9eac69d4\n"  # v2's v2 info-hash, its first 40 hex
    b"d0fcef4cd6835cb322323a3003fb9f642ffb5e52\n"  # v1's info-hash (a v1 torrent)
)
"""opentracker's whitelist: one 40-hex hash a line, sorted, each line ending in a newline."""


def test_golden_whitelist_of_published_versions(tmp_path: Path) -> None:
    """Two versions published from fixed keys at fixed times (a v1 torrent, then a hybrid
    one): their info-hashes are those of the same filter files every time, and the
    whitelist holds exactly these bytes."""
    store = MemoryObjectStore()
    for n, torrent_format in enumerate(("v1", "hybrid")):
        config = PublisherConfig(s3=S3Config(bucket="golden"), publisher_id="golden",
                                 torrent_format=torrent_format)  # type: ignore[arg-type]
        builder = FilterBuilder(FilterParams(Layout.BLOCKED, 512 * 8, 7, hash_seed=0xB100F),
                                capacity=300, target_fpp=0.01)
        builder.add_many([f"key-{n}-{i}" for i in range(200)])
        publish_filter(store, config, builder, GOLDEN_KEY, "golden", force=True, progress=False,
                       now=lambda n=n: 1_700_000_000 + 60 * n)  # type: ignore[misc]
    whitelist = tmp_path / "whitelist.txt"
    sync_whitelist(store, whitelist, public_keys=GOLDEN_PUBLIC)
    assert whitelist.read_bytes() == GOLDEN_WHITELIST


# --- the agent's state.json ---------------------------------------------------------------------------


@pytest.mark.parametrize(("sequence", "golden"), [(57, b'{"last_sequence": 57}\n'),
                                                  (None, b'{"last_sequence": null}\n')])
def test_golden_state_json(tmp_path: Path, sequence: int | None, golden: bytes) -> None:
    """The agent's replay guard: one JSON object, ``": "`` after the key, and a newline."""
    write_last_sequence(tmp_path, sequence)
    assert (tmp_path / "state.json").read_bytes() == golden
    assert read_last_sequence(tmp_path) == sequence


# --- round trips ------------------------------------------------------------------------------------

_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
"""Text UTF-8 can encode (no lone surrogates)."""
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | _text
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
    max_leaves=8,
)
_pointer_fields = {"schema", "version", "manifest_key", "sequence", "issued_at", "publisher_id", "pinned"}
pointers = st.builds(
    Pointer,
    version=st.integers(1, 2**63 - 1),
    manifest_key=st.integers(1, 2**63 - 1).map(manifest_key),
    sequence=st.integers(1, 2**63 - 1),
    issued_at=st.integers(0, 2**63 - 1),
    publisher_id=_text.filter(bool),
    pinned=st.booleans(),
    extra=st.dictionaries(_text.filter(lambda k: k not in _pointer_fields), _json, max_size=3),
)


@settings(max_examples=150, deadline=None)
@given(pointers)
def test_pointer_round_trips(pointer: Pointer) -> None:
    data = pointer.to_bytes()
    again = Pointer.from_bytes(data)
    assert again == pointer and again.to_bytes() == data and dict(again.extra) == dict(pointer.extra)
    sealed = seal_pointer(pointer, GOLDEN_KEY)
    assert open_pointer(sealed, GOLDEN_PUBLIC) == pointer == read_pointer_unverified(sealed)
    assert seal_pointer(again, GOLDEN_KEY) == sealed  # canonical: one byte string per pointer


@settings(max_examples=100, deadline=None)
@given(st.binary(min_size=64, max_size=64))
def test_signature_text_round_trips(signature: bytes) -> None:
    text = encode_signature(signature)
    assert text.endswith(b"\n") and decode_signature(text) == signature
    assert decode_signature(text.decode("ascii").strip()) == signature


@st.composite
def delta_headers(draw: st.DrawFn) -> DeltaHeader:
    """Any valid delta header: a valid target header and stream sizes that can hold
    ``flips`` flips (delta_format.streams_problem)."""
    words = draw(st.integers(1, 2**20))
    layout = draw(st.sampled_from([Layout.BLOCKED, Layout.STANDARD]))
    num_bits = 512 * words if layout == Layout.BLOCKED else 64 * words
    target = FilterHeader(
        FilterParams(layout, num_bits, draw(st.integers(1, 10)), draw(st.integers(0, 2**32 - 1))),
        key_count=draw(st.integers(0, 2**64 - 1)), capacity=draw(st.integers(0, 2**64 - 1)),
        target_fpp=draw(st.floats(min_value=1e-12, max_value=0.999999)),
        filter_version=draw(st.integers(1, 2**64 - 1)), created_at=draw(st.integers(-(2**63), 2**63 - 1)),
        body_sha256=draw(st.binary(min_size=32, max_size=32)),
    )
    rice_k = draw(st.integers(0, MAX_RICE_K))
    flips = draw(st.integers(0, min(num_bits, 2**40)))
    q_low, q_high = (flips + 7) // 8, (flips + (num_bits >> rice_k) + 7) // 8
    return DeltaHeader(
        base_version=draw(st.integers(0, 2**64 - 1)), target_version=target.filter_version,
        base_body_sha256=draw(st.binary(min_size=32, max_size=32)),
        target_sha256=draw(st.binary(min_size=32, max_size=32)), target_header=target.pack(),
        encoding=ENCODING_RICE_GAPS, rice_k=rice_k, flips=flips, body_size=num_bits // 8,
        quotient_bytes=draw(st.integers(q_low, q_high)) if flips else 0,
        remainder_bytes=(flips * rice_k + 7) // 8,
    )


@settings(max_examples=200, deadline=None)
@given(delta_headers())
def test_delta_header_round_trips(header: DeltaHeader) -> None:
    data = header.pack()
    assert DeltaHeader.unpack(data, header.file_size) == header
    assert DeltaHeader.unpack(data + b"\0" * 7).pack() == data


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.none() | st.integers(0, 2**63 - 1))
def test_state_json_round_trips(tmp_path: Path, sequence: int | None) -> None:
    write_last_sequence(tmp_path, sequence)
    assert read_last_sequence(tmp_path) == sequence


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(size=st.integers(1, 200_000), piece_exponent=st.integers(14, 18),
       torrent_format=st.sampled_from(["v1", "hybrid"]), seed=st.binary(min_size=1, max_size=8))
def test_torrent_reads_back_what_it_was_made_of(
    tmp_path: Path, size: int, piece_exponent: int, torrent_format: Any, seed: bytes
) -> None:
    """What the agent reads from a torrent (read_torrent) is what the publisher made it of."""
    path = tmp_path / "filter.bsf"
    path.write_bytes((hashlib.sha256(seed).digest() * (size // 32 + 1))[:size])
    torrent = make_torrent(path, trackers=TRACKERS, piece_size=1 << piece_exponent,
                           torrent_format=torrent_format, progress=False)
    summary = read_torrent(torrent.data)
    made_of = ("filter.bsf", size, 1 << piece_exponent)
    assert (summary.file_name, summary.total_size, summary.piece_size) == made_of
    assert (summary.info_hash_v1, summary.info_hash_v2) == (torrent.info_hash_v1, torrent.info_hash_v2)
    assert (torrent.info_hash_v2 is None) == (torrent_format == "v1")
    assert base64.b16decode(torrent.info_hash_v1.upper())  # 40 lower-case hex
