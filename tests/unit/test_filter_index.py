"""index.json: canonical bytes (golden), strict parsing, signatures, round trips."""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomswarm.common.canonical_json import canonical_json
from bloomswarm.common.errors import FormatError, VerificationError
from bloomswarm.common.filter_index import (
    INLINE_TORRENT_MAX,
    FilterIndex,
    IndexEntry,
    open_index,
    read_index_unverified,
    seal_index,
)
from bloomswarm.common.signed_envelope import envelope_payload
from bloomswarm.common.signing import SigningKey, VerifyKey, generate_keypair, parse_private_key
from tests.unit.publishing_helpers import GOLDEN_KEY, GOLDEN_PUBLIC


def _other_key() -> tuple[SigningKey, list[VerifyKey]]:
    private, _ = generate_keypair()
    key = parse_private_key(private)
    return key, [key.public_key()]


def make_entry(**changes: Any) -> IndexEntry:
    fields: dict[str, Any] = {
        "pointer": b'{"key_id":"k","pointer":{"sequence":5},"signature":"s"}',
        "manifest": b'{"version":3}',
        "manifest_signature": b"c2lnbmF0dXJl\n",
        "torrent": b"d8:announce0:e\x00\xff",
    }
    fields.update(changes)
    return IndexEntry(**fields)


def make_index(**changes: Any) -> FilterIndex:
    fields: dict[str, Any] = {
        "sequence": 7,
        "issued_at": 1_700_000_000,
        "publisher_id": "builder-1",
        "filters": {"blocklist": make_entry(), "seen-urls": make_entry(torrent=None)},
    }
    fields.update(changes)
    return FilterIndex(**fields)


# --- golden bytes -------------------------------------------------------------------------

GOLDEN_PAYLOAD = (
    b'{"filters":{"blocklist":{"manifest":"{\\"version\\":3}","manifest_signature":"c2lnbmF0dXJl\\n",'
    b'"pointer":"{\\"key_id\\":\\"k\\",\\"pointer\\":{\\"sequence\\":5},\\"signature\\":\\"s\\"}",'
    b'"torrent":"ZDg6YW5ub3VuY2UwOmUA/w=="},'
    b'"seen-urls":{"manifest":"{\\"version\\":3}","manifest_signature":"c2lnbmF0dXJl\\n",'
    b'"pointer":"{\\"key_id\\":\\"k\\",\\"pointer\\":{\\"sequence\\":5},\\"signature\\":\\"s\\"}"}},'
    b'"issued_at":1700000000,"publisher_id":"builder-1","schema":1,"sequence":7}'
)
GOLDEN_SEALED_SHA256 = "7ebb766ac50d60c9217038a698b7364bb08d2b67973d0b9c241adf2f79c4836c"


def test_golden_index_bytes() -> None:
    """The bytes an index is signed over, and the sealed envelope, must not drift: agents
    of every release read what any publisher wrote."""
    index = make_index()
    assert index.to_bytes() == GOLDEN_PAYLOAD
    sealed = seal_index(index, GOLDEN_KEY)
    assert hashlib.sha256(sealed).hexdigest() == GOLDEN_SEALED_SHA256
    assert open_index(sealed, GOLDEN_PUBLIC) == index
    envelope = json.loads(sealed)
    assert sorted(envelope) == ["index", "key_id", "signature"]
    assert envelope["key_id"] == GOLDEN_KEY.key_id


# --- round trips ---------------------------------------------------------------------------

_names = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,12}", fullmatch=True)
_unicode = st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=40)
"""Text UTF-8 can encode (no lone surrogates)."""
_text = _unicode.map(lambda t: t.encode("utf-8"))
_entries = st.builds(IndexEntry, pointer=_text, manifest=_text, manifest_signature=_text,
                     torrent=st.none() | st.binary(max_size=64))
_indexes = st.builds(
    FilterIndex,
    sequence=st.integers(1, 2**63 - 1),
    issued_at=st.integers(0, 2**63 - 1),
    publisher_id=_unicode,
    filters=st.dictionaries(_names, _entries, max_size=5),
    extra=st.dictionaries(st.sampled_from(["future", "note"]), st.integers(-(2**63), 2**63) | _unicode,
                          max_size=2),
)


@settings(max_examples=60, deadline=None)
@given(_indexes)
def test_seal_then_open_round_trips(index: FilterIndex) -> None:
    sealed = seal_index(index, GOLDEN_KEY)
    opened = open_index(sealed, GOLDEN_PUBLIC)
    assert opened == index
    assert dict(opened.filters) == dict(index.filters) and dict(opened.extra) == dict(index.extra)
    assert read_index_unverified(sealed) == index
    assert seal_index(opened, GOLDEN_KEY) == sealed  # canonical: one byte string per index


@settings(max_examples=60, deadline=None)
@given(_indexes)
def test_bytes_round_trip(index: FilterIndex) -> None:
    assert FilterIndex.from_dict(json.loads(index.to_bytes())).to_bytes() == index.to_bytes()


def test_entries_are_kept_sorted_by_name_and_the_torrent_is_optional() -> None:
    index = make_index(filters={"b": make_entry(), "a": make_entry(torrent=None)})
    assert list(index.filters) == ["a", "b"]
    payload = json.loads(index.to_bytes())
    assert "torrent" not in payload["filters"]["a"]
    assert base64.b64decode(payload["filters"]["b"]["torrent"]) == make_entry().torrent
    assert make_index(filters={}).filters == {}


def test_unknown_fields_round_trip_at_the_top_and_are_ignored_in_entries() -> None:
    obj = json.loads(make_index().to_bytes())
    obj["future"] = {"x": 1}
    obj["filters"]["blocklist"]["delta"] = "later"
    index = FilterIndex.from_dict(obj)
    assert index.extra == {"future": {"x": 1}}
    assert index.filters["blocklist"] == make_entry()
    assert json.loads(index.to_bytes())["future"] == {"x": 1}


def test_inline_torrent_limit() -> None:
    assert INLINE_TORRENT_MAX == 64 * 1024


# --- malformed: FormatError -----------------------------------------------------------------


def _sealed_with(mutate: Any) -> bytes:
    """A validly signed envelope whose payload ``mutate(payload)`` changed first."""
    payload = json.loads(make_index().to_bytes())
    mutate(payload)
    data = canonical_json(payload)
    signature = GOLDEN_KEY.key.sign(data)
    return canonical_json({"key_id": GOLDEN_KEY.key_id, "index": payload,
                           "signature": base64.b64encode(signature).decode()})


def _drop(*path: str) -> Any:
    def mutate(obj: dict[str, Any]) -> None:
        for part in path[:-1]:
            obj = obj[part]
        del obj[path[-1]]
    return mutate


def _set(value: Any, *path: str) -> Any:
    def mutate(obj: dict[str, Any]) -> None:
        for part in path[:-1]:
            obj = obj[part]
        obj[path[-1]] = value
    return mutate


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_drop("sequence"), "missing field 'sequence'"),
        (_drop("filters"), "missing field 'filters'"),
        (_drop("publisher_id"), "missing field 'publisher_id'"),
        (_set(2, "schema"), "unsupported index schema 2"),
        (_set(0, "sequence"), "index sequence must be an integer"),
        (_set(True, "sequence"), "index sequence must be an integer"),
        (_set(-1, "issued_at"), "index issued_at must be an integer"),
        (_set("", "publisher_id"), "index publisher_id must be a non-empty string"),
        (_set([], "filters"), "filters must be an object"),
    ],
)
def test_malformed_payloads_raise_format_error(mutate: Any, message: str) -> None:
    data = _sealed_with(mutate)
    with pytest.raises(FormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
        open_index(data, GOLDEN_PUBLIC)
    with pytest.raises(FormatError):
        read_index_unverified(data)


def _add(name: str, value: Any) -> Any:
    def mutate(obj: dict[str, Any]) -> None:
        obj["filters"][name] = value
    return mutate


@pytest.mark.parametrize(
    ("mutate", "name", "message"),
    [
        (_drop("filters", "blocklist", "pointer"), "blocklist", "missing field 'pointer'"),
        (_drop("filters", "blocklist", "manifest_signature"), "blocklist",
         "missing field 'manifest_signature'"),
        (_add("../etc", {}), "../etc", "must not contain '..'"),
        (_add("A", {}), "A", "filter name 'A'"),
        (_add("a/b", {}), "a/b", "filter name 'a/b'"),
        (_add("", {}), "", "must not be empty"),
        (_set("x", "filters", "blocklist"), "blocklist", "index filter 'blocklist' must be an object"),
        (_set(5, "filters", "blocklist", "pointer"), "blocklist", "pointer must be a non-empty string"),
        (_set("", "filters", "blocklist", "manifest"), "blocklist", "manifest must be a non-empty string"),
        (_set("not base64!", "filters", "blocklist", "torrent"), "blocklist", "torrent is not valid base64"),
        (_set(7, "filters", "blocklist", "torrent"), "blocklist", "torrent must be a string"),
    ],
)
def test_a_malformed_entry_is_set_apart_and_the_others_are_read(mutate: Any, name: str, message: str) -> None:
    """One entry that does not parse leaves the index and its other entries readable: it
    is kept apart with its reason, and written back byte for byte."""
    data = _sealed_with(mutate)
    index = open_index(data, GOLDEN_PUBLIC)
    assert name not in index.filters
    assert message in index.unreadable[name].problem
    good = make_index()
    assert {n: e for n, e in good.filters.items() if n != name} == index.filters
    assert canonical_json(index.to_dict()) == canonical_json(envelope_payload(data, "index"))
    assert read_index_unverified(data) == index


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"[]",
        b'{"index":{}}',
        b'{"key_id":"k","signature":"AA=="}',
        b'{"index":[],"signature":"AA=="}',
        b"\xff\xfe{}",
        b'{"index":{"schema":1},"index":{"schema":1}}',
        b'{"index":{},"signature":5}',
        b'{"index":{},"signature":"not base64!"}',
        b'{"index":{},"signature":"AAAA"}',
        b'{"index":{"sequence":NaN}}',
    ],
)
def test_malformed_envelopes_raise_format_error(data: bytes) -> None:
    with pytest.raises(FormatError):
        open_index(data, GOLDEN_PUBLIC)


def test_a_lone_surrogate_in_an_entry_is_a_format_error() -> None:
    payload = json.loads(make_index().to_bytes())
    text = canonical_json(payload).decode().replace('"manifest":"{', '"manifest":"\\ud800{', 1)
    with pytest.raises(FormatError):
        read_index_unverified(b'{"index":' + text.encode() + b',"signature":"x"}')


def test_entries_validate_their_bytes() -> None:
    with pytest.raises(FormatError, match="not UTF-8"):
        make_entry(pointer=b"\xff")
    with pytest.raises(FormatError, match="non-empty bytes"):
        make_entry(manifest=b"")
    with pytest.raises(FormatError, match="non-empty bytes"):
        make_entry(manifest_signature="text")
    with pytest.raises(FormatError, match="torrent must be bytes"):
        make_entry(torrent="text")


def test_construction_validates() -> None:
    with pytest.raises(FormatError, match="filter name"):
        make_index(filters={"..": make_entry()})
    with pytest.raises(FormatError, match="not an IndexEntry"):
        make_index(filters={"a": "entry"})
    with pytest.raises(FormatError, match="extra repeats known fields"):
        make_index(extra={"sequence": 1})
    with pytest.raises(FormatError):
        make_index(extra={"x": float("nan")})


# --- signatures: VerificationError ------------------------------------------------------------


def test_another_key_or_a_changed_payload_fails_verification() -> None:
    sealed = seal_index(make_index(), GOLDEN_KEY)
    other, other_public = _other_key()
    with pytest.raises(VerificationError):
        open_index(sealed, other_public)
    assert open_index(sealed, [*other_public, *GOLDEN_PUBLIC]) == make_index()  # any pinned key
    tampered = sealed.replace(b'"sequence":7', b'"sequence":8')
    with pytest.raises(VerificationError):
        open_index(tampered, GOLDEN_PUBLIC)
    assert read_index_unverified(tampered).sequence == 8  # writers read it anyway
    resigned = seal_index(make_index(), other)
    with pytest.raises(VerificationError):
        open_index(resigned, GOLDEN_PUBLIC)
    with pytest.raises(VerificationError):
        open_index(sealed, [])
