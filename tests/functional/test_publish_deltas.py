"""Deltas against moto's S3 server over real HTTP: ``bloomswarm publish`` keeps the
parameters at 1% churn, uploads a delta that turns v1 into v2 byte for byte, lists it in
the signed manifest; ``versions`` shows it and ``tracker-sync`` whitelists it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bloomswarm.common.delta import apply_delta
from bloomswarm.common.signing import load_private_key, write_keypair
from bloomswarm.common.storage import S3Config, S3ObjectStore
from bloomswarm.main import main
from bloomswarm.publisher.versions import read_verified_manifest
from tests.unit.publishing_helpers import check_deltas, churned_keys


@pytest.fixture
def config_file(s3_bucket: S3Config, tmp_path: Path) -> Iterator[Path]:
    key_file = tmp_path / "publisher.key"
    write_keypair(key_file, tmp_path / "publisher.pub")
    path = tmp_path / "publisher.toml"
    path.write_text(
        f"publisher_id = \"functional\"\n"
        f"signing_key = {json.dumps(str(key_file))}\n"
        f"trackers = [\"http://127.0.0.1:6969/announce\"]\n"
        f"[s3]\n"
        f"bucket = {json.dumps(s3_bucket.bucket)}\n"
        f"prefix = {json.dumps(s3_bucket.prefix)}\n"
        f"endpoint_url = {json.dumps(s3_bucket.endpoint_url)}\n"
        f"region = \"us-east-1\"\n"
        f"[tracker]\n"
        f"whitelist = {json.dumps(str(tmp_path / 'whitelist.txt'))}\n"
    )
    yield path
    store = S3ObjectStore(s3_bucket)
    store.delete(store.list())  # moto keeps every bucket in memory for the session


def test_a_version_at_one_percent_churn_ships_a_delta_that_rebuilds_it(
    s3_bucket: S3Config, config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ["--config", str(config_file)]
    for version in (1, 2):
        keys = tmp_path / f"keys-{version}.txt"
        keys.write_text("".join(f"{k}\n" for k in churned_keys(50_000, version)))
        assert main(["-q", "publish", str(keys), *config]) == 0
    out = capsys.readouterr().out
    assert "sizing: resized" in out and "sizing: kept the parameters of v1; deltas from v1 (" in out

    store = S3ObjectStore(s3_bucket)
    public = [load_private_key(tmp_path / "publisher.key").public_key()]
    v1, v2 = (read_verified_manifest(store, v, public) for v in (1, 2))
    assert v1.deltas == () and v2.filter.to_params() == v1.filter.to_params()
    (entry,) = v2.deltas
    assert entry.base_version == 1 and entry.key.startswith("v2/")
    assert entry.size < 0.15 * v2.size  # ~6% of the body plus the 4 KiB target header
    check_deltas(store, v2, tmp_path)  # size, SHA-256, torrent, apply == v2 byte for byte

    base, delta, result = tmp_path / "v1.bsf", tmp_path / "delta.bsd", tmp_path / "v2.bsf"
    store.download_file(v1.filter_key, base)
    store.download_file(entry.key, delta)
    apply_delta(base, delta, result)
    stored = store.get(v2.filter_key)
    assert stored is not None and result.read_bytes() == stored.data

    assert main(["-q", "versions", *config]) == 0
    listing = capsys.readouterr().out.splitlines()
    assert listing[0].endswith("DELTAS FROM")
    assert listing[1].split()[0] == "2" and listing[1].endswith(f"v1 ({entry.size:,})")
    assert main(["-q", "tracker-sync", *config]) == 0
    whitelist = (tmp_path / "whitelist.txt").read_text().split()
    assert sorted(whitelist) == sorted([v1.info_hash_v1, v2.info_hash_v1, entry.info_hash_v1])
