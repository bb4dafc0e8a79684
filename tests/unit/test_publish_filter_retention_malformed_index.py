"""``publish --filter NAME`` with a malformed ``index.json``: the version goes out, the
index sync fails (exit 1, naming index.json and ``--replace-malformed``), and retention
of the filter's own versions runs all the same, so retries do not pile versions up."""

from __future__ import annotations

from pathlib import Path

import pytest

from bloomswarm.common.bucket_layout import INDEX_KEY
from bloomswarm.common.filter_names import filter_prefix
from bloomswarm.common.prefixed_store import PrefixedStore
from bloomswarm.common.storage import MemoryObjectStore
from bloomswarm.publisher.versions import read_latest, scan_versions
from tests.unit import publishing_helpers
from tests.unit.publishing_helpers import key_file, write_keys

clean_env = publishing_helpers.clean_env  # a fixture

MALFORMED = b'{"x":'


def _patch_stores(monkeypatch: pytest.MonkeyPatch, root: MemoryObjectStore) -> None:
    """The CLI's stores are ``root``: the filter's (``_open_store``, prefix filters/NAME)
    and the bucket's the index sync opens (``S3ObjectStore``)."""
    import bloomswarm.index_commands  # noqa: F401 (binds the real _open_store before the patch)

    monkeypatch.setattr("bloomswarm.publish_commands._open_store",
                        lambda config: PrefixedStore(root, config.s3.prefix))
    monkeypatch.setattr("bloomswarm.common.storage.S3ObjectStore", lambda _s3: root)


@pytest.mark.usefixtures("clean_env")
def test_retention_runs_when_the_index_sync_fails_on_a_malformed_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bloomswarm.main import main

    _key, key_path = key_file(tmp_path)
    root = MemoryObjectStore()
    root.put(INDEX_KEY, MALFORMED)
    _patch_stores(monkeypatch, root)
    alpha = PrefixedStore(root, filter_prefix("alpha"))
    for run in range(1, 4):
        keys = write_keys(tmp_path / f"keys{run}.txt", [f"run{run}-{i}" for i in range(20)])
        code = main(["-q", "publish", str(keys), "--filter", "alpha", "--bucket", "filters",
                     "--key", str(key_path), "--keep", "2"])
        captured = capsys.readouterr()
        assert code == 1
        assert f"published v{run}: " in captured.out
        err = captured.err.splitlines()
        assert err[-1].startswith("bloomswarm publish: error: index.json is malformed (")
        assert "--replace-malformed" in err[-1]
        assert "Traceback" not in captured.err
        assert sorted(scan_versions(alpha)) == list(range(max(1, run - 1), run + 1))
        if run == 3:  # v1 is beyond keep=2: deleted on this run, before the error
            assert "retention: deleted " in captured.out and "(versions 1)" in captured.out
        latest = read_latest(alpha)
        assert latest is not None and latest.pointer.version == run
    assert root.get(INDEX_KEY).data == MALFORMED  # type: ignore[union-attr]  # left as it was


@pytest.mark.usefixtures("clean_env")
def test_retention_still_follows_a_successful_index_sync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bloomswarm.main import main

    _key, key_path = key_file(tmp_path)
    root = MemoryObjectStore()
    _patch_stores(monkeypatch, root)
    for run in range(1, 4):
        keys = write_keys(tmp_path / f"keys{run}.txt", [f"run{run}-{i}" for i in range(20)])
        assert main(["-q", "publish", str(keys), "--filter", "alpha", "--bucket", "filters",
                     "--key", str(key_path), "--keep", "2"]) == 0
    out = capsys.readouterr().out
    assert "filter alpha updated" in out and "(versions 1)" in out
    assert sorted(scan_versions(PrefixedStore(root, filter_prefix("alpha")))) == [2, 3]
