"""``versions`` lists the versions even when latest.json is malformed (then exits 1 saying
so), and ``unpin``'s "not pinned" line says which version latest.json names and why it was
left there."""

from __future__ import annotations

from pathlib import Path

import pytest

from bloomswarm.common.bucket_layout import LATEST_KEY, signature_key
from tests.unit import publishing_helpers
from tests.unit.publishing_helpers import key_file, published, run_cli_on

clean_env = publishing_helpers.clean_env  # a fixture


@pytest.mark.usefixtures("clean_env")
def test_versions_lists_the_versions_when_latest_json_is_malformed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key, _path = key_file(tmp_path)
    store = published(2, key)
    assert run_cli_on(monkeypatch, store, "versions") == 0
    assert "latest" in capsys.readouterr().out.splitlines()[1]
    store.put(LATEST_KEY, b"junk")
    assert run_cli_on(monkeypatch, store, "versions") == 1
    captured = capsys.readouterr()
    rows = captured.out.splitlines()
    assert rows[0].split()[:2] == ["VERSION", "STATE"]
    assert [row.split()[:2] for row in rows[1:]] == [["2", "complete"], ["1", "complete"]]
    assert captured.err.splitlines() == [
        "bloomswarm versions: error: latest.json is unreadable: pointer envelope is not valid JSON: "
        "Expecting value at offset 0 (versions listed without it; to replace it, delete it, then "
        "publish or pin)"]


@pytest.mark.usefixtures("clean_env")
def test_unpin_says_which_version_latest_json_names_and_why_it_was_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key, key_path = key_file(tmp_path)
    store = published(3, key)
    assert run_cli_on(monkeypatch, store, "unpin", "--key", str(key_path)) == 0
    assert capsys.readouterr().out == "not pinned: latest.json already names v3, the newest version\n"
    # v3's signature no longer matches (its files are being replaced): the newest valid
    # version is v2, older than what latest.json names, and unpin never moves it back.
    store.put(signature_key(3), store.get(signature_key(2)).data)  # type: ignore[union-attr]
    assert run_cli_on(monkeypatch, store, "unpin", "--key", str(key_path)) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("not pinned: latest.json names v3, left there although it does not check "
                           "out (")
    assert line.endswith("): unpin never moves latest.json back; the newest version that does is v2 "
                         "(`bloomswarm pin 2` moves the fleet there)")
