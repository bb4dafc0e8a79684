"""The publishing subcommands' command-line side that needs no bucket: keygen, usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from bloomswarm.common.signing import load_private_key, load_public_keys
from bloomswarm.main import main


def test_keygen_writes_a_private_key_0600_and_refuses_to_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    private = tmp_path / "publisher.key"
    assert main(["keygen", str(private)]) == 0
    public = tmp_path / "publisher.pub"
    assert private.stat().st_mode & 0o777 == 0o600
    key = load_private_key(private)
    assert load_public_keys([public])[0].key_id == key.key_id
    assert key.key_id in capsys.readouterr().out
    before = private.read_bytes()
    assert main(["keygen", str(private)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists" in err
    assert private.read_bytes() == before
    assert main(["keygen", str(tmp_path / "other.key"), "--public", str(public)]) == 1
    assert not (tmp_path / "other.key").exists()


def test_publish_needs_a_bucket_a_key_and_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("BLOOMSWARM_CONFIG", "BLOOMSWARM_S3_BUCKET", "BLOOMSWARM_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)
    assert main(["publish", "keys.txt"]) == 1
    assert "no bucket configured" in capsys.readouterr().err
    assert main(["publish", "keys.txt", "--bucket", "some-bucket"]) == 1
    assert "no signing key" in capsys.readouterr().err
    key = tmp_path / "k.key"
    assert main(["keygen", str(key)]) == 0
    assert main(["publish", "--bucket", "some-bucket", "--key", str(key)]) == 1
    assert "nothing to publish" in capsys.readouterr().err
    assert main(["publish", "--bucket", "some-bucket", "--fpp", "3"]) == 2
    config = tmp_path / "publisher.toml"
    config.write_text('[s3]\nbucket = "b-1"\nbukcet = "typo"\n')
    assert main(["versions", "--config", str(config)]) == 1
    assert "unknown setting 's3.bukcet'" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["publish", "keys.txt"], ["pin", "3"], ["unpin"]])
def test_a_signing_key_others_can_read_is_refused_in_one_line(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("BLOOMSWARM_CONFIG", "BLOOMSWARM_S3_BUCKET", "BLOOMSWARM_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    key = tmp_path / "publisher.key"
    assert main(["keygen", str(key)]) == 0
    key.chmod(0o644)
    capsys.readouterr()
    # no endpoint listens at port 1: the key must be refused before any S3 request
    argv = [*command, "--bucket", "filters", "--endpoint-url", "http://127.0.0.1:1", "--key", str(key)]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (f"bloomswarm {command[0]}: error: private key file {key} is accessible to "
                            f"group or others (mode 0644): run chmod 600 {key}\n")
    key.chmod(0o600)
    assert main(argv) == 1  # now the key passes and the unreachable endpoint is what fails
    assert "cannot reach S3 endpoint" in capsys.readouterr().err
