"""Manifest and pointer documents: canonical bytes, strict parsing, signatures, object keys."""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomswarm.common.bucket_layout import (
    LATEST_KEY,
    attempt_prefix,
    attempt_started_at,
    delta_key,
    delta_torrent_key,
    filter_key,
    manifest_key,
    new_attempt_id,
    parse_version_prefix,
    signature_key,
    torrent_key,
    version_prefix,
)
from bloomswarm.common.canonical_json import canonical_json
from bloomswarm.common.errors import FormatError, VerificationError
from bloomswarm.common.filter_summary import FilterSummary
from bloomswarm.common.header import FilterHeader
from bloomswarm.common.manifest import DeltaEntry, Manifest, sign_manifest, verify_manifest
from bloomswarm.common.params import FilterParams, Layout
from bloomswarm.common.pointer import Pointer, open_pointer, read_pointer_unverified, seal_pointer
from bloomswarm.common.signature_text import encode_signature
from bloomswarm.common.signing import (
    SigningKey,
    VerifyKey,
    generate_keypair,
    load_public_keys,
    parse_private_key,
)


def _keys() -> tuple[SigningKey, list[VerifyKey]]:
    private, public = generate_keypair()
    return parse_private_key(private), load_public_keys([public])


SIGNER, PUBLIC = _keys()
ATTEMPT = "20231114T221320Z-0a1b2c3d"
OTHER_SIGNER, OTHER_PUBLIC = _keys()

FILTER = FilterSummary(
    layout="blocked",
    num_bits=512 * 1000,
    num_probes=7,
    hash_seed=0,
    key_count=40_000,
    capacity=50_000,
    target_fpp=0.01,
)


def make_manifest(**changes: Any) -> Manifest:
    fields: dict[str, Any] = {
        "version": 3,
        "size": 4096 + 64_000,
        "sha256": "ab" * 32,
        "info_hash_v1": "cd" * 20,
        "info_hash_v2": "ef" * 32,
        "piece_size": 4 * 1024 * 1024,
        "filter": FILTER,
        "created_at": 1_700_000_000,
        "source_fingerprint": "sha256:0123",
        "publisher_id": "builder-1",
        "filter_key": filter_key(3, ATTEMPT),
        "torrent_key": torrent_key(3, ATTEMPT),
        "body_sha256": "00" * 32,
    }
    fields.update(changes)
    return Manifest(**fields)


def make_delta_entry(**changes: Any) -> DeltaEntry:
    base = changes.get("base_version", 2)
    base = base if base in (1, 2) and not isinstance(base, bool) else 2  # keys need a real one
    fields: dict[str, Any] = {
        "base_version": base,
        "size": 3_900,
        "sha256": "12" * 32,
        "info_hash_v1": "34" * 20,
        "info_hash_v2": "56" * 32,
        "key": delta_key(3, ATTEMPT, base),
        "torrent_key": delta_torrent_key(3, ATTEMPT, base),
    }
    fields.update(changes)
    return DeltaEntry(**fields)


def make_pointer(**changes: Any) -> Pointer:
    fields: dict[str, Any] = {
        "version": 3,
        "manifest_key": manifest_key(3),
        "sequence": 5,
        "issued_at": 1_700_000_100,
        "publisher_id": "builder-1",
    }
    fields.update(changes)
    return Pointer(**fields)


# --- keys -------------------------------------------------------------------------------


def test_object_keys() -> None:
    assert version_prefix(12) == "v12/"
    assert filter_key(12, ATTEMPT) == f"v12/{ATTEMPT}/filter.bsf"
    assert torrent_key(12, ATTEMPT) == f"v12/{ATTEMPT}/filter.torrent"
    assert manifest_key(12) == "v12/manifest.json"
    assert signature_key(12) == "v12/manifest.json.sig"
    assert delta_key(12, ATTEMPT, 9) == f"v12/{ATTEMPT}/delta-from-v9.bsd"
    assert delta_torrent_key(12, ATTEMPT, 9) == f"v12/{ATTEMPT}/delta-from-v9.torrent"
    for bad_base in (0, True):
        with pytest.raises(ValueError):
            delta_key(12, ATTEMPT, bad_base)
        with pytest.raises(ValueError):
            delta_torrent_key(12, ATTEMPT, bad_base)
    assert LATEST_KEY == "latest.json"
    for bad in (0, -1, True):
        with pytest.raises(ValueError):
            version_prefix(bad)
    for bad_attempt in ("", "x", "../x", "20231114T221320Z-0a1b2c3d/x", "20231399T221320Z-0a1b2c3d"):
        with pytest.raises(ValueError):
            attempt_prefix(1, bad_attempt)


def test_attempt_ids_carry_their_start_time() -> None:
    attempt = new_attempt_id(1_700_000_000.7)
    assert attempt.startswith("20231114T221320Z-") and attempt_started_at(attempt) == 1_700_000_000
    assert new_attempt_id(1_700_000_000) != new_attempt_id(1_700_000_000)
    assert attempt_started_at("manifest.json") is None


def test_writers_can_read_a_pointer_signed_by_any_key() -> None:
    sealed = seal_pointer(make_pointer(), OTHER_SIGNER)
    assert read_pointer_unverified(sealed) == make_pointer()
    with pytest.raises(FormatError):
        read_pointer_unverified(b'{"pointer": 3}')


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("v1/", 1), ("v12", 12), ("v10/manifest.json", 10), ("v012/", None), ("v0/", None),
        ("latest.json", None), ("v/", None), ("v1x/", None), ("x/v1/", None), ("v-1/", None),
        (f"v{2**63 - 1}/", 2**63 - 1), (f"v{2**63}/junk", None), ("v99999999999999999999/", None),
    ],
)
def test_parse_version_prefix(key: str, expected: int | None) -> None:
    assert parse_version_prefix(key) == expected


def test_version_listing_sorts_numerically() -> None:
    keys = [manifest_key(v) for v in (9, 10, 1, 100)]
    assert sorted(v for k in sorted(keys) if (v := parse_version_prefix(k))) == [1, 9, 10, 100]


# --- manifest ---------------------------------------------------------------------------


def test_manifest_round_trip_is_canonical() -> None:
    manifest = make_manifest()
    data = manifest.to_bytes()
    assert Manifest.from_bytes(data) == manifest
    obj = json.loads(data)
    assert data == json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()
    assert obj["schema"] == 1 and obj["filter"]["layout"] == "blocked"
    assert b" " not in data


def test_unknown_fields_are_kept_and_round_trip() -> None:
    obj = json.loads(make_manifest().to_bytes())
    obj["patches"] = [{"from": 2, "key": "v3/patch-2.zst", "sha256": "00" * 32}]
    obj["note"] = "ü"
    data = canonical_json(obj)
    manifest = Manifest.from_bytes(data)
    assert manifest.extra == {"patches": obj["patches"], "note": "ü"}
    assert manifest.to_bytes() == data
    assert dataclasses.replace(manifest, extra={}) == make_manifest()


def test_v1_only_manifest_has_no_v2_info_hash_field() -> None:
    manifest = make_manifest(info_hash_v2=None)
    assert manifest.torrent_format == "v1" and make_manifest().torrent_format == "hybrid"
    data = manifest.to_bytes()
    assert b"info_hash_v2" not in data
    assert Manifest.from_bytes(data) == manifest
    assert Manifest.from_bytes(data).to_bytes() == data


def test_hybrid_manifest_bytes_are_unchanged() -> None:
    """Manifests written before v1-only torrents existed parse and re-encode to the very
    bytes their signature covers (golden bytes of such a manifest)."""
    golden = (
        b'{"body_sha256":"' + b"00" * 32 + b'","created_at":1700000000,'
        b'"filter":{"capacity":50000,"hash":"murmur3_x64_128","hash_seed":0,"key_count":40000,'
        b'"layout":"blocked","num_bits":512000,"num_probes":7,"target_fpp":0.01},'
        b'"filter_key":"v3/' + ATTEMPT.encode() + b'/filter.bsf",'
        b'"info_hash_v1":"' + b"cd" * 20 + b'","info_hash_v2":"' + b"ef" * 32 + b'",'
        b'"piece_size":4194304,"publisher_id":"builder-1","schema":1,'
        b'"sha256":"' + b"ab" * 32 + b'","size":68096,"source_fingerprint":"sha256:0123",'
        b'"torrent_key":"v3/' + ATTEMPT.encode() + b'/filter.torrent","version":3}'
    )
    assert make_manifest().to_bytes() == golden
    assert Manifest.from_bytes(golden).to_bytes() == golden


# --- deltas -----------------------------------------------------------------------------


def test_manifest_with_deltas_round_trips() -> None:
    deltas = (make_delta_entry(base_version=2), make_delta_entry(base_version=1, info_hash_v2=None))
    manifest = make_manifest(deltas=deltas)
    data = manifest.to_bytes()
    obj = json.loads(data)
    assert [d["base_version"] for d in obj["deltas"]] == [2, 1]
    assert "info_hash_v2" in obj["deltas"][0] and "info_hash_v2" not in obj["deltas"][1]
    again = Manifest.from_bytes(data)
    assert again == manifest and again.to_bytes() == data and again.extra == {}
    assert again.delta_from(1) == deltas[1] and again.delta_from(3) is None


def test_a_manifest_without_deltas_has_no_deltas_field() -> None:
    assert b"deltas" not in make_manifest().to_bytes()
    obj = json.loads(make_manifest().to_bytes())
    obj["deltas"] = []
    assert Manifest.from_bytes(canonical_json(obj)) == make_manifest()


def test_the_signature_covers_the_deltas() -> None:
    data, sig = sign_manifest(make_manifest(deltas=(make_delta_entry(),)), SIGNER)
    assert verify_manifest(data, sig, PUBLIC).deltas == (make_delta_entry(),)
    changed = json.loads(data)
    changed["deltas"][0]["sha256"] = "99" * 32
    added = json.loads(data)
    added["deltas"].append(make_delta_entry(base_version=1).to_dict())
    removed = json.loads(data)
    del removed["deltas"]
    for obj in (changed, added, removed):
        with pytest.raises(VerificationError):
            verify_manifest(canonical_json(obj), sig, PUBLIC)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("base_version", 0), ("base_version", 3), ("base_version", 4), ("base_version", "2"),
        ("base_version", True), ("size", 0), ("size", 1.5), ("sha256", "AB" * 32),
        ("sha256", "12" * 31), ("sha256", "zz" * 32), ("info_hash_v1", "34" * 32),
        ("info_hash_v2", "56" * 20), ("info_hash_v2", None), ("key", "/abs"),
        ("key", "v3/../x"), ("key", ""), ("torrent_key", "a\\b"), ("torrent_key", 7),
        ("note", 1),
    ],
)
def test_bad_delta_entry_is_format_error(field: str, value: Any) -> None:
    obj = json.loads(make_manifest(deltas=(make_delta_entry(),)).to_bytes())
    obj["deltas"][0][field] = value
    with pytest.raises(FormatError, match="delta"):
        Manifest.from_bytes(canonical_json(obj))


@pytest.mark.parametrize("field", ["base_version", "size", "sha256", "key", "torrent_key"])
def test_a_delta_entry_field_is_required(field: str) -> None:
    obj = json.loads(make_manifest(deltas=(make_delta_entry(),)).to_bytes())
    del obj["deltas"][0][field]
    with pytest.raises(FormatError, match=field):
        Manifest.from_bytes(canonical_json(obj))


@pytest.mark.parametrize("value", [None, {}, [1], "x", [[]], 3])
def test_deltas_must_be_an_array_of_objects(value: object) -> None:
    obj = json.loads(make_manifest().to_bytes())
    obj["deltas"] = value
    with pytest.raises(FormatError, match="deltas"):
        Manifest.from_bytes(canonical_json(obj))


def test_duplicate_delta_base_is_refused() -> None:
    with pytest.raises(FormatError, match="repeat"):
        make_manifest(deltas=(make_delta_entry(), make_delta_entry(size=7)))
    with pytest.raises(FormatError, match="below 3"):
        make_manifest(deltas=(make_delta_entry(base_version=3),))
    with pytest.raises(FormatError, match="tuple of DeltaEntry"):
        make_manifest(deltas=[make_delta_entry()])
    with pytest.raises(FormatError, match="tuple of DeltaEntry"):
        make_manifest(deltas=(make_delta_entry().to_dict(),))


@pytest.mark.parametrize("value", [None, "", "ef" * 20, "EF" * 32])
def test_a_present_v2_info_hash_must_be_64_hex(value: object) -> None:
    obj = json.loads(make_manifest().to_bytes())
    obj["info_hash_v2"] = value
    with pytest.raises(FormatError, match="info_hash_v2"):
        Manifest.from_bytes(canonical_json(obj))


def test_unknown_schema_is_refused() -> None:
    obj = json.loads(make_manifest().to_bytes())
    obj["schema"] = 2
    obj["something_new"] = {}
    with pytest.raises(FormatError, match="schema 2"):
        Manifest.from_bytes(canonical_json(obj))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("version", 0), ("version", "3"), ("version", 3.0), ("version", True), ("size", -1),
        ("sha256", "AB" * 32), ("sha256", "ab" * 31), ("info_hash_v1", "cd" * 32),
        ("info_hash_v2", "zz" * 32), ("piece_size", 3 * 1024 * 1024), ("piece_size", 8192),
        ("created_at", -5), ("publisher_id", ""), ("filter_key", "/abs"),
        ("torrent_key", "../x"), ("filter", []), ("source_fingerprint", None),
        ("body_sha256", "00" * 31),
    ],
)
def test_bad_manifest_field_is_format_error(field: str, value: Any) -> None:
    obj = json.loads(make_manifest().to_bytes())
    obj[field] = value
    with pytest.raises(FormatError):
        Manifest.from_bytes(json.dumps(obj).encode())


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("layout", "xor"), ("num_bits", 513), ("num_probes", 0), ("num_probes", 11),
        ("hash_seed", 2**32), ("capacity", 0), ("target_fpp", 1.0), ("target_fpp", 0),
        ("target_fpp", True), ("hash", "xxh3"), ("extra_param", 1),
    ],
)
def test_bad_filter_field_is_format_error(field: str, value: Any) -> None:
    obj = json.loads(make_manifest().to_bytes())
    obj["filter"][field] = value
    with pytest.raises(FormatError):
        Manifest.from_bytes(json.dumps(obj).encode())


@pytest.mark.parametrize(
    "data",
    [
        b"", b"null", b"[]", b"{}", b"\xff\xfe", b'{"schema": 1', b'{"schema":1,"schema":1}',
        b'{"schema": NaN}', b'{"schema": 1e400}', b"1" * 5000, b"[" * 100_000,
    ],
)
def test_malformed_bytes_are_format_error(data: bytes) -> None:
    with pytest.raises(FormatError):
        Manifest.from_bytes(data)
    with pytest.raises(FormatError):
        Pointer.from_bytes(data)


def test_lone_surrogates_are_format_error() -> None:
    good = make_manifest().to_bytes()
    with pytest.raises(FormatError):
        Manifest.from_bytes(good.replace(b'"builder-1"', b'"\\ud800"'))
    with pytest.raises(FormatError):
        Manifest.from_bytes(good[:-1] + b',"x":"\\udfff"}')


def test_missing_field_is_named() -> None:
    obj = json.loads(make_manifest().to_bytes())
    del obj["sha256"]
    with pytest.raises(FormatError, match="sha256"):
        Manifest.from_bytes(canonical_json(obj))


def test_extra_may_not_shadow_known_fields() -> None:
    with pytest.raises(FormatError):
        make_manifest(extra={"version": 4})
    with pytest.raises(FormatError):
        make_manifest(extra={"x": float("nan")})


def test_header_mismatches() -> None:
    manifest = make_manifest()
    header = FilterHeader(
        params=FilterParams(Layout.BLOCKED, 512 * 1000, 7, 0),
        key_count=40_000,
        capacity=50_000,
        target_fpp=0.01,
        filter_version=3,
        created_at=1_700_000_000,
        body_sha256=bytes(32),
    )
    assert manifest.header_mismatches(header) == []
    assert FilterSummary.from_header(header) == FILTER
    assert FILTER.to_params() == header.params
    wrong = dataclasses.replace(header, filter_version=4, key_count=1)
    problems = manifest.header_mismatches(wrong)
    assert len(problems) == 2 and "version 4" in problems[0]
    other_body = dataclasses.replace(header, body_sha256=b"\x01" * 32)
    assert manifest.header_mismatches(other_body) == ["header body_sha256 differs from the manifest's"]


# --- hypothesis -------------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=20)
json_values = st.recursive(
    json_scalars
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
extra_names = st.text(min_size=1, max_size=12).filter(
    lambda s: s not in {f.name for f in dataclasses.fields(Manifest)}
)


def _hex(n: int) -> st.SearchStrategy[str]:
    return st.text("0123456789abcdef", min_size=n, max_size=n)


manifests = st.builds(
    Manifest,
    version=st.integers(1, 2**63 - 1),
    size=st.integers(4096, 2**50),
    sha256=_hex(64),
    info_hash_v1=_hex(40),
    info_hash_v2=st.none() | _hex(64),
    piece_size=st.integers(14, 28).map(lambda e: 2**e),
    filter=st.builds(
        FilterSummary,
        layout=st.just("standard"),
        num_bits=st.integers(1, 2**30).map(lambda n: n * 64),
        num_probes=st.integers(1, 32),
        hash_seed=st.integers(0, 2**32 - 1),
        key_count=st.integers(0, 2**40),
        capacity=st.integers(1, 2**40),
        target_fpp=st.floats(min_value=1e-12, max_value=0.999_999, exclude_min=True),
    ),
    created_at=st.integers(0, 2**40),
    source_fingerprint=st.text(max_size=40),
    publisher_id=st.text(min_size=1, max_size=20),
    filter_key=st.just(f"v1/{ATTEMPT}/filter.bsf"),
    torrent_key=st.just(f"v1/{ATTEMPT}/filter.torrent"),
    body_sha256=_hex(64),
    extra=st.dictionaries(extra_names, json_values, max_size=3),
)


@settings(max_examples=200, deadline=None)
@given(manifests)
def test_manifest_round_trips(manifest: Manifest) -> None:
    data = manifest.to_bytes()
    again = Manifest.from_bytes(data)
    assert again == manifest
    assert again.to_bytes() == data


def _with_deltas(manifest: Manifest) -> st.SearchStrategy[Manifest]:
    entries = st.builds(
        DeltaEntry,
        base_version=st.integers(1, max(manifest.version - 1, 1)),
        size=st.integers(1, 2**50),
        sha256=_hex(64),
        info_hash_v1=_hex(40),
        info_hash_v2=st.none() | _hex(64),
        key=st.just(f"v1/{ATTEMPT}/delta-from-v1.bsd"),
        torrent_key=st.just(f"v1/{ATTEMPT}/delta-from-v1.torrent"),
    )
    if manifest.version == 1:
        return st.just(manifest)
    unique = st.lists(entries, max_size=5, unique_by=lambda d: d.base_version)
    return unique.map(lambda ds: dataclasses.replace(manifest, deltas=tuple(ds)))


@settings(max_examples=200, deadline=None)
@given(manifests.flatmap(_with_deltas))
def test_any_manifest_with_deltas_round_trips(manifest: Manifest) -> None:
    data = manifest.to_bytes()
    again = Manifest.from_bytes(data)
    assert again == manifest and again.to_bytes() == data
    assert (b'"deltas"' in data) == bool(manifest.deltas)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_random_bytes_only_raise_format_error(data: bytes) -> None:
    for parse in (Manifest.from_bytes, Pointer.from_bytes):
        with contextlib.suppress(FormatError):
            parse(data)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_random_json_only_raises_format_error(value: Any) -> None:
    data = json.dumps(value).encode()
    with pytest.raises(FormatError):
        Manifest.from_bytes(data)


@settings(max_examples=500, deadline=None)
@given(st.sampled_from(sorted(json.loads(make_manifest().to_bytes()))), json_values)
def test_one_field_replaced_by_junk_only_raises_format_error(field: str, value: Any) -> None:
    obj = json.loads(make_manifest().to_bytes())
    obj[field] = value
    try:
        manifest = Manifest.from_bytes(json.dumps(obj).encode())
    except FormatError:
        return
    assert manifest.to_dict()[field] == value


def _outcome(make: Any) -> str | None:
    """The FormatError message ``make()`` raises, or None when it succeeds."""
    try:
        make()
    except FormatError as exc:
        return str(exc)
    return None


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(sorted(set(json.loads(make_manifest().to_bytes())) - {"filter"})),
    json_values,
)
def test_a_field_is_validated_once_parsed_or_constructed(field: str, value: Any) -> None:
    """Parsing and construction take one path per field: the same verdict, the same message."""
    if field == "info_hash_v2" and value is None:
        return  # None constructs a v1 manifest; a JSON null is refused (tested above)
    obj = json.loads(make_manifest().to_bytes())
    obj[field] = value
    parsed = _outcome(lambda: Manifest.from_bytes(json.dumps(obj).encode()))
    built = _outcome(lambda: make_manifest(**{field: value}))
    assert parsed == built


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(FILTER.to_dict())), json_values)
def test_a_filter_field_is_validated_once_parsed_or_constructed(field: str, value: Any) -> None:
    obj = FILTER.to_dict()
    obj[field] = value
    parsed = _outcome(lambda: FilterSummary.from_dict(json.loads(json.dumps(obj))))
    built = _outcome(lambda: dataclasses.replace(FILTER, **{field: value}))
    assert parsed == built


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(make_delta_entry().to_dict())), json_values)
def test_a_delta_field_is_validated_once_parsed_or_constructed(field: str, value: Any) -> None:
    if field == "info_hash_v2" and value is None:
        return  # None constructs a v1-torrent entry; a JSON null is refused (tested above)
    obj = make_delta_entry().to_dict()
    obj[field] = value
    parsed = _outcome(lambda: DeltaEntry.from_dict(json.loads(json.dumps(obj))))
    built = _outcome(lambda: make_delta_entry(**{field: value}))
    assert parsed == built


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(sorted(make_pointer().to_dict())), json_values)
def test_a_pointer_field_is_validated_once_parsed_or_constructed(field: str, value: Any) -> None:
    obj = make_pointer().to_dict()
    obj[field] = value
    parsed = _outcome(lambda: Pointer.from_bytes(json.dumps(obj).encode()))
    built = _outcome(lambda: make_pointer(**{field: value}))
    assert parsed == built


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_byte_flips_only_raise_format_error(data: st.DataObject) -> None:
    raw = bytearray(make_manifest().to_bytes())
    for _ in range(data.draw(st.integers(1, 4))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(FormatError):
        Manifest.from_bytes(bytes(raw))


# --- signatures -------------------------------------------------------------------------


def test_sign_and_verify_manifest() -> None:
    data, sig = sign_manifest(make_manifest(), SIGNER)
    assert sig.endswith(b"\n") and len(base64.b64decode(sig)) == 64
    assert verify_manifest(data, sig, PUBLIC, expected_version=3) == make_manifest()
    assert verify_manifest(data, sig, [*OTHER_PUBLIC, *PUBLIC]) == make_manifest()


def test_manifest_verification_failures() -> None:
    data, sig = sign_manifest(make_manifest(), SIGNER)
    with pytest.raises(VerificationError):
        verify_manifest(data, sig, OTHER_PUBLIC)
    with pytest.raises(VerificationError):
        verify_manifest(data.replace(b'"version":3', b'"version":4'), sig, PUBLIC)
    with pytest.raises(VerificationError, match="expected 4"):
        verify_manifest(data, sig, PUBLIC, expected_version=4)
    with pytest.raises(FormatError):
        verify_manifest(data, b"not base64!", PUBLIC)
    with pytest.raises(FormatError):
        verify_manifest(data, encode_signature(b"short"), PUBLIC)
    signed_junk, junk_sig = b"{}", encode_signature(SIGNER.key.sign(b"{}"))
    with pytest.raises(FormatError):
        verify_manifest(signed_junk, junk_sig, PUBLIC)


def test_pointer_round_trip_and_envelope() -> None:
    pointer = make_pointer(pinned=True, extra={"reason": "rollback"})
    assert Pointer.from_bytes(pointer.to_bytes()) == pointer
    sealed = seal_pointer(pointer, SIGNER)
    envelope = json.loads(sealed)
    assert set(envelope) == {"key_id", "pointer", "signature"}
    assert envelope["key_id"] == SIGNER.key_id
    assert open_pointer(sealed, PUBLIC) == pointer


def test_pointer_verification_failures() -> None:
    sealed = seal_pointer(make_pointer(), SIGNER)
    with pytest.raises(VerificationError):
        open_pointer(sealed, OTHER_PUBLIC)
    envelope = json.loads(sealed)
    envelope["pointer"]["version"] = 2
    with pytest.raises(VerificationError):
        open_pointer(canonical_json(envelope), PUBLIC)
    envelope = json.loads(sealed)
    envelope["pointer"]["pinned"] = True
    with pytest.raises(VerificationError):
        open_pointer(json.dumps(envelope, indent=2).encode(), PUBLIC)


def test_pointer_reformatted_envelope_still_verifies() -> None:
    """The signature covers the canonical pointer, not the envelope's whitespace."""
    sealed = seal_pointer(make_pointer(), SIGNER)
    pretty = json.dumps(json.loads(sealed), indent=2, ensure_ascii=True).encode()
    assert open_pointer(pretty, PUBLIC) == make_pointer()


@pytest.mark.parametrize(
    "envelope",
    [
        {}, {"pointer": {}, "signature": "!!"}, {"pointer": [], "signature": "AA=="},
        {"pointer": {"schema": 1}}, {"signature": base64.b64encode(bytes(64)).decode()},
    ],
)
def test_malformed_envelope_is_format_error(envelope: dict[str, Any]) -> None:
    with pytest.raises(FormatError):
        open_pointer(canonical_json(envelope), PUBLIC)


def test_signed_but_malformed_pointer_is_format_error() -> None:
    payload = {"schema": 1, "version": 0}
    envelope = {
        "pointer": payload,
        "signature": base64.b64encode(SIGNER.key.sign(canonical_json(payload))).decode(),
    }
    with pytest.raises(FormatError):
        open_pointer(canonical_json(envelope), PUBLIC)


@pytest.mark.parametrize(
    ("field", "value"),
    [("pinned", 1), ("sequence", 0), ("manifest_key", ""), ("schema", 2), ("issued_at", "now")],
)
def test_bad_pointer_field_is_format_error(field: str, value: Any) -> None:
    obj = make_pointer().to_dict()
    obj[field] = value
    with pytest.raises(FormatError):
        Pointer.from_bytes(json.dumps(obj).encode())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode()))
def test_open_pointer_fuzz(data: bytes) -> None:
    with pytest.raises((FormatError, VerificationError)):
        open_pointer(data, PUBLIC)


# --- private versions ---------------------------------------------------------------------


def test_private_manifest_bytes_pin_the_swarm_ca() -> None:
    """A private version's manifest carries the CA's fingerprint as one more sorted field
    (golden bytes); a public one has no such field (the golden bytes above)."""
    manifest = make_manifest(swarm_ca_sha256="5a" * 32)
    data = manifest.to_bytes()
    public = make_manifest().to_bytes()
    field = b'"swarm_ca_sha256":"' + b"5a" * 32 + b'",'
    assert data == public.replace(b'"torrent_key":', field + b'"torrent_key":')
    assert Manifest.from_bytes(data) == manifest and manifest.private
    assert not make_manifest().private and b"swarm_ca" not in make_manifest().to_bytes()


@pytest.mark.parametrize("bad", ["", "5A" * 32, "5a" * 31, None])
def test_a_malformed_swarm_ca_fingerprint_is_refused(bad: str | None) -> None:
    obj = json.loads(make_manifest().to_bytes())
    obj["swarm_ca_sha256"] = bad
    with pytest.raises(FormatError, match="swarm_ca_sha256"):
        Manifest.from_bytes(canonical_json(obj))


def test_the_signature_covers_the_swarm_ca() -> None:
    data, sig = sign_manifest(make_manifest(swarm_ca_sha256="5a" * 32), SIGNER)
    assert verify_manifest(data, sig, PUBLIC).private
    stripped = json.loads(data)
    del stripped["swarm_ca_sha256"]
    with pytest.raises(VerificationError):
        verify_manifest(canonical_json(stripped), sig, PUBLIC)
