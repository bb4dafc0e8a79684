"""Many filters in one bucket against moto's S3 server: ``publish --filter NAME`` writes
``filters/NAME/`` and index.json; a single-filter publish writes no index.json."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from bloomswarm.common.bucket_layout import INDEX_KEY, LATEST_KEY
from bloomswarm.common.filter_index import open_index
from bloomswarm.common.pointer import open_pointer
from bloomswarm.common.prefixed_store import PrefixedStore
from bloomswarm.common.signing import load_private_key, write_keypair
from bloomswarm.common.storage import S3Config, S3ObjectStore
from bloomswarm.main import main
from tests.unit.publishing_helpers import check_version


@pytest.fixture
def config_file(s3_bucket: S3Config, tmp_path: Path) -> Iterator[Path]:
    """A publisher config for the test bucket (prefix "fleet-a"), with its key pair."""
    write_keypair(tmp_path / "publisher.key", tmp_path / "publisher.pub")
    path = tmp_path / "publisher.toml"
    path.write_text(
        f"publisher_id = \"functional\"\n"
        f"signing_key = {json.dumps(str(tmp_path / 'publisher.key'))}\n"
        f"trackers = [\"http://127.0.0.1:6969/announce\"]\n"
        f"[s3]\n"
        f"bucket = {json.dumps(s3_bucket.bucket)}\n"
        f"prefix = {json.dumps(s3_bucket.prefix)}\n"
        f"endpoint_url = {json.dumps(s3_bucket.endpoint_url)}\n"
        f"region = \"us-east-1\"\n"
        f"connect_timeout_s = 2.0\n"
    )
    yield path
    store = S3ObjectStore(s3_bucket)
    store.delete(store.list())  # moto keeps every bucket in memory for the session


def _keys(tmp_path: Path, name: str, count: int = 200) -> str:
    path = tmp_path / f"{name}.txt"
    path.write_text("".join(f"{name}-{i}\n" for i in range(count)))
    return str(path)


def test_two_named_filters_are_indexed_and_a_single_filter_bucket_has_no_index(
    s3_bucket: S3Config, config_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = ["--config", str(config_file)]
    key = load_private_key(tmp_path / "publisher.key")
    public = [key.public_key()]
    root = S3ObjectStore(s3_bucket)

    assert main(["-q", "publish", _keys(tmp_path, "single"), *config]) == 0
    assert root.exists(LATEST_KEY) and not root.exists(INDEX_KEY)

    assert main(["-q", "publish", _keys(tmp_path, "a1"), *config, "--filter", "blocklist"]) == 0
    assert main(["-q", "publish", _keys(tmp_path, "a2"), *config, "--filter", "blocklist"]) == 0
    assert main(["-q", "publish", _keys(tmp_path, "b1"), *config, "--filter", "seen-urls"]) == 0
    out = capsys.readouterr().out
    assert "index.json -> sequence 3 (2 filters), filter seen-urls updated" in out
    stored = root.get(INDEX_KEY)
    assert stored is not None
    index = open_index(stored.data, public)
    assert sorted(index.filters) == ["blocklist", "seen-urls"] and index.sequence == 3
    versions = {name: open_pointer(entry.pointer, public).version for name, entry in index.filters.items()}
    assert versions == {"blocklist": 2, "seen-urls": 1}
    for name, version in versions.items():
        folder = PrefixedStore(root, f"filters/{name}")
        assert check_version(folder, version, public).publisher_id == "functional"
        latest = folder.get(LATEST_KEY)
        assert latest is not None and index.filters[name].pointer == latest.data
        assert index.filters[name].torrent is not None  # a small filter's torrent rides along
    assert open_pointer(root.get(LATEST_KEY).data, public).version == 1  # type: ignore[union-attr]

    assert main(["-q", "pin", "1", *config, "--filter", "blocklist"]) == 0
    assert main(["-q", "index", "sync", *config]) == 0  # every filter: already up to date
    assert main(["-q", "index", "show", *config, "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("index.json up to date (blocklist, seen-urls;") for line in lines)
    shown = json.loads("\n".join(lines[lines.index("{"):]))
    rows = {row["name"]: row for row in shown["filters"]}
    assert shown["sequence"] == 4
    assert (rows["blocklist"]["version"], rows["blocklist"]["pinned"]) == (1, True)
    assert rows["seen-urls"]["version"] == 1
    assert main(["-q", "versions", *config, "--filter", "blocklist"]) == 0
    assert "latest, pinned" in capsys.readouterr().out
    assert main(["-q", "index", "show", *config]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("index.json: sequence 4, issued ")
    assert table[0].endswith("by functional, 2 filters")
    assert table[2].split()[:3] == ["blocklist", "1", "3"] and "pinned, torrent inline" in table[2]
    assert table[3].split()[:3] == ["seen-urls", "1", "1"]

    # A job publishing many filters leaves the index to one sync at the end.
    for name in ("fraud", "tenant-7"):
        assert main(["-q", "publish", _keys(tmp_path, name), *config, "--filter", name, "--no-index"]) == 0
    stored = root.get(INDEX_KEY)
    assert stored is not None
    assert sorted(open_index(stored.data, public).filters) == ["blocklist", "seen-urls"]
    assert main(["-q", "index", "sync", *config]) == 0
    stored = root.get(INDEX_KEY)
    assert stored is not None
    index = open_index(stored.data, public)
    assert sorted(index.filters) == ["blocklist", "fraud", "seen-urls", "tenant-7"] and index.sequence == 5
