"""Shared pieces of the publisher's unit tests: keys, configs, small filters, store checks."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import libtorrent as lt
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bloomswarm.common.bucket_layout import LATEST_KEY
from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.delta import apply_delta
from bloomswarm.common.header import FilterHeader
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.pointer import Pointer, open_pointer
from bloomswarm.common.signing import SigningKey, VerifyKey, generate_keypair, parse_private_key
from bloomswarm.common.storage import MemoryObjectStore, ObjectStore, S3Config
from bloomswarm.publisher.config import PublisherConfig
from bloomswarm.publisher.publish import publish_filter
from bloomswarm.publisher.versions import read_manifest, read_verified_manifest

GOLDEN_KEY = SigningKey(Ed25519PrivateKey.from_private_bytes(bytes(range(32))), source="golden")
"""A fixed key: Ed25519 signatures are deterministic, so the bytes it seals are too (the
golden tests of test_filter_index.py and test_golden_documents.py)."""
GOLDEN_PUBLIC = [GOLDEN_KEY.public_key()]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No configuration from the machine (no BLOOMSWARM_* or AWS_* settings, no AWS config
    files, no instance metadata) and fake credentials, for moto and for CLI runs."""
    for name in list(os.environ):
        if name.startswith(("BLOOMSWARM_", "AWS_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def new_key() -> SigningKey:
    private, _public = generate_keypair()
    return parse_private_key(private)


def key_file(tmp_path: Path) -> tuple[SigningKey, Path]:
    """A new key, and its private PEM written as ``tmp_path/publisher.key`` (mode 0600)."""
    private, _public = generate_keypair()
    path = tmp_path / "publisher.key"
    path.write_bytes(private)
    path.chmod(0o600)
    return parse_private_key(private), path


def make_config(**changes: Any) -> PublisherConfig:
    fields: dict[str, Any] = {
        "s3": S3Config(bucket="unit-test"),
        "publisher_id": "unit-test",
        "trackers": ("http://127.0.0.1:6969/announce",),
    }
    fields.update(changes)
    return PublisherConfig(**fields)


def make_builder(keys: list[str], *, capacity: int = 1000) -> FilterBuilder:
    builder = FilterBuilder.for_capacity(capacity, 0.01)
    builder.add_many(keys)
    return builder


def published(count: int, key: SigningKey, config: PublisherConfig | None = None) -> MemoryObjectStore:
    """A store holding versions 1 to ``count`` of filter ``f`` (version n+1 with the one
    key ``k{n}``), signed with ``key``; ``config``: :func:`make_config`'s by default."""
    config = config if config is not None else make_config()
    store = MemoryObjectStore()
    for n in range(count):
        publish_filter(store, config, make_builder([f"k{n}"]), key, "f", progress=False)
    return store


def run_cli_on(monkeypatch: pytest.MonkeyPatch, store: ObjectStore, *argv: str) -> int:
    """Run ``bloomswarm -q ARGV --bucket filters`` with the publisher commands' store
    replaced by ``store``; the exit code."""
    import bloomswarm.index_commands  # noqa: F401 (binds the real _open_store before the patch)
    from bloomswarm.main import main

    monkeypatch.setattr("bloomswarm.publish_commands._open_store", lambda _config: store)
    return main(["-q", *argv, "--bucket", "filters"])


def latest_pointer(store: ObjectStore, public_keys: list[VerifyKey]) -> Pointer:
    stored = store.get(LATEST_KEY)
    assert stored is not None
    return open_pointer(stored.data, public_keys)


def check_version(store: ObjectStore, version: int, public_keys: list[VerifyKey]) -> Manifest:
    """Assert that ``version`` is complete and consistent; return its manifest."""
    manifest = read_verified_manifest(store, version, public_keys)
    data = store.get(manifest.filter_key)
    torrent = store.get(manifest.torrent_key)
    assert data is not None and torrent is not None
    assert len(data.data) == manifest.size
    assert hashlib.sha256(data.data).hexdigest() == manifest.sha256
    header = FilterHeader.unpack(data.data[:4096], file_size=len(data.data))
    assert manifest.header_mismatches(header) == []
    info = lt.torrent_info(torrent.data)
    hashes = info.info_hashes()
    v2 = str(hashes.v2) if hashes.has_v2() else None
    assert (str(hashes.v1), v2) == (manifest.info_hash_v1, manifest.info_hash_v2)
    assert info.piece_length() == manifest.piece_size
    assert info.total_size() == manifest.size
    return manifest


def write_keys(path: Path, keys: list[str]) -> Path:
    path.write_text("".join(f"{k}\n" for k in keys))
    return path


def churned_keys(count: int, version: int, churn: float = 0.01) -> list[str]:
    """``count`` keys of ``version``: each version drops the oldest ``churn`` share of the
    previous version's keys and adds as many new ones."""
    step = int(count * churn)
    start = (version - 1) * step
    return [f"key-{i}" for i in range(start, start + count)]


def check_deltas(store: ObjectStore, manifest: Manifest, tmp_path: Path) -> None:
    """Assert that every delta ``manifest`` lists is stored as described (size, SHA-256,
    torrent info-hashes) and turns its base version's file into this version's, byte
    for byte."""
    target = store.get(manifest.filter_key)
    assert target is not None
    for entry in manifest.deltas:
        delta, torrent = store.get(entry.key), store.get(entry.torrent_key)
        base_manifest = read_manifest(store, entry.base_version)
        base = store.get(base_manifest.filter_key)
        assert delta is not None and torrent is not None and base is not None
        assert len(delta.data) == entry.size
        assert hashlib.sha256(delta.data).hexdigest() == entry.sha256
        hashes = lt.torrent_info(torrent.data).info_hashes()
        v2 = str(hashes.v2) if hashes.has_v2() else None
        assert (str(hashes.v1), v2) == (entry.info_hash_v1, entry.info_hash_v2)
        paths = [tmp_path / f"{manifest.version}-{entry.base_version}-{n}" for n in range(3)]
        paths[0].write_bytes(base.data)
        paths[1].write_bytes(delta.data)
        apply_delta(paths[0], paths[1], paths[2], expected_sha256=bytes.fromhex(manifest.sha256))
        assert paths[2].read_bytes() == target.data
