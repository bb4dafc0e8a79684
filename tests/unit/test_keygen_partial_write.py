"""``keygen`` writes both key files or neither: a public key path that cannot be written no
longer leaves a lone private key behind, and a public path that names the private key's
file another way (``adir/../kp.pem``) is refused before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest

from bloomswarm.common import signing
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.signing import write_keypair
from bloomswarm.main import main


def _one_error(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_a_public_path_naming_the_private_file_is_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "adir").mkdir()
    assert main(["keygen", "kp.pem", "--public", "adir/../kp.pem"]) == 1
    assert _one_error(capsys) == ("bloomswarm keygen: error: the public key needs another file name "
                                  "than kp.pem")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]
    with pytest.raises(ConfigError, match="needs another file name"):
        write_keypair(tmp_path / "kp.pem", tmp_path / "adir" / ".." / "kp.pem")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir"]


def test_a_public_key_that_cannot_be_written_leaves_no_private_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain").write_text("a file, so no folder can be made under it\n")
    assert main(["keygen", "kq.pem", "--public", "plain/kq.pub"]) == 1
    assert _one_error(capsys).startswith("bloomswarm keygen: error: cannot write plain/kq.pub: ")
    assert not (tmp_path / "kq.pem").exists()
    assert main(["-q", "keygen", "kq.pem"]) == 0  # nothing was left to refuse the retry
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kq.pem", "kq.pub", "plain"]


def test_only_the_private_file_this_call_wrote_is_removed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When another process replaced the private key file between the two writes, the
    cleanup leaves that file alone."""
    private, public = tmp_path / "k.pem", tmp_path / "k.pub"
    real = signing._write_atomic

    def replaced_then_failing(path: Path, data: bytes, mode: int, *, overwrite: bool) -> None:
        if path == public:
            private.unlink()
            private.write_text("someone else's\n")
            raise ConfigError(f"cannot write {path}: No space left on device")
        real(path, data, mode, overwrite=overwrite)

    monkeypatch.setattr(signing, "_write_atomic", replaced_then_failing)
    with pytest.raises(ConfigError, match="No space left"):
        write_keypair(private, public)
    assert private.read_text() == "someone else's\n"


def test_an_existing_key_is_refused_in_cli_words(tmp_path: Path) -> None:
    write_keypair(tmp_path / "k.pem", tmp_path / "k.pub")
    with pytest.raises(ConfigError) as refused:
        write_keypair(tmp_path / "k.pem", tmp_path / "other.pub")
    assert str(refused.value) == f"{tmp_path / 'k.pem'} already exists: refusing to overwrite a key"
    assert "overwrite=True" not in str(refused.value)
