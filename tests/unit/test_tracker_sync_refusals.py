"""tracker-sync never empties a whitelist by mistake, and never reads or replaces a file that
is not a regular one.

A wrong ``--public-key`` (every version left out) or a mistyped ``--prefix`` (no versions
at all) used to rewrite a good whitelist with zero hashes and exit 0: every tracker then
refuses every announce. Both are refused, one line and exit code 1, the file left as it
was, unless ``--allow-empty``. A FIFO at the whitelist's path used to block the sync
forever (reading it), and a device or a socket was replaced by a regular file.
"""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from bloomswarm.common.errors import ConfigError
from bloomswarm.common.signing import SigningKey
from bloomswarm.common.storage import MemoryObjectStore
from bloomswarm.publisher.tracker_sync import sync_whitelist
from bloomswarm.publisher.versions import read_manifest
from tests.unit import publishing_helpers
from tests.unit.publishing_helpers import key_file, published

clean_env = publishing_helpers.clean_env  # a fixture


def _keys(tmp_path: Path) -> tuple[SigningKey, Path]:
    """A key pair written as files (:func:`key_file`'s private PEM, 0600, and the public
    PEM): (the private key, the public PEM's path)."""
    key, _private_file = key_file(tmp_path)
    public_file = tmp_path / "publisher.pub"
    public = key.key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo)
    public_file.write_bytes(public)
    return key, public_file


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, store: MemoryObjectStore, *extra: str) -> int:
    import bloomswarm.index_commands  # noqa: F401 (binds the real _open_store before the patch)
    from bloomswarm.main import main

    monkeypatch.setattr("bloomswarm.publish_commands._open_store", lambda _config: store)
    return main(["-q", "tracker-sync", "--bucket", "filters", "--whitelist", str(tmp_path / "wl.txt"),
                 *extra])


@pytest.mark.usefixtures("clean_env")
def test_a_public_key_that_matches_no_version_leaves_the_whitelist_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key, public = _keys(tmp_path)
    store = published(2, key)
    whitelist = tmp_path / "wl.txt"
    assert _run(tmp_path, monkeypatch, store, "--public-key", str(public)) == 0
    good = whitelist.read_bytes()
    assert len(good.splitlines()) == 2
    (tmp_path / "other").mkdir()
    _, wrong = _keys(tmp_path / "other")
    capsys.readouterr()
    assert _run(tmp_path, monkeypatch, store, "--public-key", str(wrong)) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("bloomswarm tracker-sync: error: none of the 2 versions in the bucket "
                              "verified with the public keys given (v1: ")
    assert "--allow-empty" in err[-1] and "Traceback" not in "".join(err)
    assert whitelist.read_bytes() == good
    assert _run(tmp_path, monkeypatch, store, "--public-key", str(wrong), "--allow-empty") == 0
    assert whitelist.read_bytes() == b""


@pytest.mark.usefixtures("clean_env")
def test_a_bucket_or_prefix_without_versions_does_not_empty_a_whitelist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key, _public = _keys(tmp_path)
    whitelist = tmp_path / "wl.txt"
    assert _run(tmp_path, monkeypatch, published(2, key)) == 0
    good = whitelist.read_bytes()
    capsys.readouterr()
    assert _run(tmp_path, monkeypatch, MemoryObjectStore(), "--prefix", "fleet-typo") == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    assert err[0] == (f"bloomswarm tracker-sync: error: no versions in the bucket: not replacing whitelist "
                      f"{whitelist} (2 hashes) with an empty one, which would make the tracker refuse "
                      "every version (wrong --bucket or --prefix? --allow-empty writes it)")
    assert whitelist.read_bytes() == good
    assert _run(tmp_path, monkeypatch, MemoryObjectStore(), "--allow-empty") == 0
    assert whitelist.read_bytes() == b""
    assert _run(tmp_path, monkeypatch, MemoryObjectStore()) == 0  # empty already: nothing lost


def test_a_new_whitelist_of_an_empty_bucket_is_written(tmp_path: Path) -> None:
    """Nothing to lose: a first sync of a bucket with no versions yet writes an empty file."""
    result = sync_whitelist(MemoryObjectStore(), tmp_path / "wl.txt")
    assert result.changed and (tmp_path / "wl.txt").read_bytes() == b""


def test_a_fifo_whitelist_is_refused_without_blocking(tmp_path: Path) -> None:
    store = published(1, _keys(tmp_path)[0])
    fifo = tmp_path / "wl.fifo"
    os.mkfifo(fifo)
    released = threading.Event()

    def release_a_blocked_reader() -> None:
        # Before the fix the sync blocked opening the FIFO; a writer coming and going lets
        # it go on (reading nothing), so that this test fails instead of hanging.
        if not released.wait(10):
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK) if stat.S_ISFIFO(os.lstat(fifo).st_mode) else -1
            if fd >= 0:
                os.close(fd)

    opener = threading.Thread(target=release_a_blocked_reader, daemon=True)
    opener.start()
    try:
        with pytest.raises(ConfigError, match=r"is a FIFO, not a regular file"):
            sync_whitelist(store, fifo)
    finally:
        released.set()
        opener.join(timeout=20)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)  # not replaced by a regular file


def test_a_symbolic_link_or_a_directory_is_neither_read_nor_replaced(tmp_path: Path) -> None:
    store = published(1, _keys(tmp_path)[0])
    target = tmp_path / "real.txt"
    target.write_text("kept\n")
    link = tmp_path / "wl-link.txt"
    link.symlink_to(target)
    with pytest.raises(ConfigError, match="is a symbolic link, not a regular file"):
        sync_whitelist(store, link)
    assert link.is_symlink() and target.read_text() == "kept\n"
    with pytest.raises(ConfigError, match="is a directory, not a regular file"):
        sync_whitelist(store, tmp_path)
    expected = [read_manifest(store, 1).info_hash_v1]
    assert list(sync_whitelist(store, tmp_path / "wl.txt").hashes) == expected  # a file: fine
