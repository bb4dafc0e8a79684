"""``bloomswarm certs``: init-ca -> issue -> show, end to end in-process through
``bloomswarm.main.main``; no file replaced without --force; every refusal one stderr line,
exit code 1 or 2, and nothing written."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import pytest

from bloomswarm.common.tls_identity import ca_fingerprint, identity_for, load_identities
from bloomswarm.main import main


def run(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): (b"" if p.is_dir() else p.read_bytes())
            for p in sorted(root.rglob("*"))}


@pytest.fixture
def ca(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """tmp_path/ca, made by ``certs init-ca``; tmp_path is the working directory."""
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["certs", "init-ca", "--out", "ca"], capsys)
    assert (code, err) == (0, "")
    assert out == "wrote ca/ca.crt and ca/ca.key (keep ca.key offline: it signs agent certificates)\n"
    return tmp_path / "ca"


def test_init_ca_then_issue_then_show(ca: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sorted(p.name for p in ca.iterdir()) == ["ca.crt", "ca.key"]
    assert (ca / "ca.key").stat().st_mode & 0o777 == 0o600
    assert (ca / "ca.crt").stat().st_mode & 0o777 == 0o644

    code, out, err = run(["certs", "issue", "--ca", "ca", "--name", "node-1", "--out", "agent"], capsys)
    assert (code, err) == (0, "")
    assert out == "wrote agent/tls.crt, agent/tls.key and agent/ca.crt for 'node-1'\n"
    agent = tmp_path / "agent"
    assert sorted(p.name for p in agent.iterdir()) == ["ca.crt", "tls.crt", "tls.key"]
    assert (agent / "tls.key").stat().st_mode & 0o777 == 0o600
    assert (agent / "ca.crt").read_bytes() == (ca / "ca.crt").read_bytes()

    # the directory is what the agent reads: one identity, issued by the CA it carries
    now = dt.datetime.now(dt.timezone.utc)
    (identity,) = load_identities([agent], now=now)
    assert identity_for([identity], (ca / "ca.crt").read_bytes()) is identity
    assert 364 * 86400 < identity.expires_in(now) <= 365 * 86400

    code, out, err = run(["certs", "show", "agent/tls.crt"], capsys)
    assert (code, err) == (0, "")
    lines = dict(line.split(":", 1) for line in out.splitlines())
    assert {k: v.strip() for k, v in lines.items() if k not in ("not before", "not after")} == {
        "subject": "CN=node-1",
        "issuer": "CN=bloomswarm fleet CA",
        "SAN": "DNS:*",
        "key": "EC secp256r1",
        "SHA-256": ca_fingerprint((agent / "tls.crt").read_bytes()),
        "CA": "no",
    }
    code, out, _ = run(["certs", "show", "ca/ca.crt"], capsys)
    assert code == 0
    assert "CA:         yes (path length 0)\n" in out
    assert f"SHA-256:    {ca_fingerprint((ca / 'ca.crt').read_bytes())}\n" in out


def test_init_ca_name_and_days(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = run(["certs", "init-ca", "--out", "deep/er/ca", "--name", "prod CA", "--days", "30"],
                       capsys)
    assert (code, err) == (0, "")
    code, out, _ = run(["certs", "show", "deep/er/ca/ca.crt"], capsys)
    assert "subject:    CN=prod CA\n" in out
    values = dict(line.split(": ", 1) for line in out.splitlines())
    before = dt.datetime.fromisoformat(values["not before"].strip().replace("Z", "+00:00"))
    after = dt.datetime.fromisoformat(values["not after"].strip().replace("Z", "+00:00"))
    assert after - before == dt.timedelta(days=30, minutes=5)


def test_nothing_is_replaced_without_force(ca: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    before = _tree(tmp_path)
    code, out, err = run(["certs", "init-ca", "--out", "ca"], capsys)
    assert (code, out) == (1, "")
    assert err == "bloomswarm certs: error: ca/ca.crt exists: give --force to replace it\n"
    assert _tree(tmp_path) == before

    assert run(["certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent"], capsys)[0] == 0
    before = _tree(tmp_path)
    code, _, err = run(["certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent"], capsys)
    assert code == 1
    assert err == "bloomswarm certs: error: agent/tls.crt exists: give --force to replace it\n"
    assert _tree(tmp_path) == before

    # one existing file of the three is enough to refuse, and the others are not written
    (tmp_path / "partial").mkdir()
    (tmp_path / "partial" / "ca.crt").write_bytes(b"mine")
    code, _, err = run(["certs", "issue", "--ca", "ca", "--name", "n", "--out", "partial"], capsys)
    assert code == 1 and err == "bloomswarm certs: error: partial/ca.crt exists: give --force to replace it\n"
    assert sorted(p.name for p in (tmp_path / "partial").iterdir()) == ["ca.crt"]


def test_force_replaces(ca: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old = (ca / "ca.crt").read_bytes()
    assert run(["certs", "init-ca", "--out", "ca", "--force"], capsys)[0] == 0
    assert (ca / "ca.crt").read_bytes() != old
    assert (ca / "ca.key").stat().st_mode & 0o777 == 0o600
    assert run(["certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent"], capsys)[0] == 0
    first = (tmp_path / "agent" / "tls.crt").read_bytes()
    assert run(["certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent", "--force"], capsys)[0] == 0
    assert (tmp_path / "agent" / "tls.crt").read_bytes() != first
    assert not [p for p in (tmp_path / "agent").iterdir() if p.name.startswith(".tmp-")]


def _junk_ca(root: Path) -> Path:
    (root / "junk").mkdir()
    (root / "junk" / "ca.crt").write_text("not a certificate\n")
    (root / "junk" / "ca.key").write_text("not a key\n")
    return root / "junk"


def _mismatched_ca(root: Path) -> Path:
    main(["certs", "init-ca", "--out", str(root / "one")])
    main(["certs", "init-ca", "--out", str(root / "two")])
    (root / "mixed").mkdir()
    (root / "mixed" / "ca.crt").write_bytes((root / "one" / "ca.crt").read_bytes())
    (root / "mixed" / "ca.key").write_bytes((root / "two" / "ca.key").read_bytes())
    return root / "mixed"


def _leaf_as_ca(root: Path) -> Path:
    main(["certs", "init-ca", "--out", str(root / "real")])
    main(["certs", "issue", "--ca", str(root / "real"), "--name", "n", "--out", str(root / "leaf")])
    (root / "leaf" / "ca.crt").write_bytes((root / "leaf" / "tls.crt").read_bytes())
    (root / "leaf" / "ca.key").write_bytes((root / "leaf" / "tls.key").read_bytes())
    return root / "leaf"


def _bundled_ca(root: Path, *, key_first: bool = False) -> Path:
    """A CA directory whose ca.crt holds the CA key too (a cert+key bundle)."""
    main(["certs", "init-ca", "--out", str(root / "bundle")])
    cert, key = (root / "bundle" / "ca.crt").read_bytes(), (root / "bundle" / "ca.key").read_bytes()
    (root / "bundle" / "ca.crt").write_bytes(key + cert if key_first else cert + key)
    return root / "bundle"


def _two_cas(root: Path) -> Path:
    main(["certs", "init-ca", "--out", str(root / "two-cas")])
    main(["certs", "init-ca", "--out", str(root / "other")])
    with (root / "two-cas" / "ca.crt").open("ab") as out:
        out.write((root / "other" / "ca.crt").read_bytes())
    return root / "two-cas"


BUNDLE = "{ca}/ca.crt: holds a private key: give the CA certificate alone (the key stays apart)"


@pytest.mark.parametrize(("make", "message"), [
    (lambda root: root / "missing", "cannot read the CA: {ca}/ca.crt: No such file or directory"),
    (lambda root: (root / "empty").mkdir() or root / "empty",
     "cannot read the CA: {ca}/ca.crt: No such file or directory"),
    (_junk_ca, "the CA certificate is not a PEM certificate"),
    (_mismatched_ca, "the CA key does not match the CA certificate"),
    (_leaf_as_ca, "not a CA certificate (CN=n: no BasicConstraints ca=True)"),
    (_bundled_ca, BUNDLE),
    (lambda root: _bundled_ca(root, key_first=True), BUNDLE),
    (_two_cas, "{ca}/ca.crt: holds 2 certificates: give the CA certificate alone"),
], ids=["missing", "empty", "junk", "mismatched key", "a leaf", "cert+key", "key+cert", "two CAs"])
def test_a_bad_ca_directory_is_one_line_exit_1_and_no_files(
    make: object, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    ca_dir = make(tmp_path)  # type: ignore[operator]
    capsys.readouterr()
    before = _tree(tmp_path)
    code, out, err = run(["certs", "issue", "--ca", str(ca_dir), "--name", "n", "--out",
                          str(tmp_path / "out")], capsys)
    assert (code, out) == (1, "")
    assert err == f"bloomswarm certs: error: {message.format(ca=ca_dir)}\n"
    assert _tree(tmp_path) == before


@pytest.mark.parametrize(("argv", "code", "message"), [
    (["certs", "issue", "--ca", "ca", "--name", "", "--out", "agent"], 1,
     "bloomswarm certs: error: the certificate name must not be empty"),
    (["certs", "issue", "--ca", "ca", "--name", "n" * 65, "--out", "agent"], 1,
     "bloomswarm certs: error: the certificate name must be at most 64 characters, got 65"),
    (["certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent", "--days", "0"], 2,
     "bloomswarm certs issue: argument --days: must be at least 1, got 0"),
    (["certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent", "--days", "4000"], 1,
     "bloomswarm certs: error: the certificate would outlive the CA, which expires at ...: give fewer days, "
     "or rotate the CA (docs/private-swarm.md)"),
    (["certs", "issue", "--ca", "ca", "--name", "n", "--out", "ca"], 1,
     "bloomswarm certs: error: --out ca is the CA's directory: agents must not get the CA key"),
    (["certs", "issue", "--ca", "ca", "--name", "n"], 2,
     "bloomswarm certs issue: the following arguments are required: --out"),
    (["certs", "show", "ca/ca.key"], 1,
     "bloomswarm certs: error: ca/ca.key: the file is not a PEM certificate"),
    (["certs", "show", "nothing.crt"], 1, "bloomswarm certs: error: No such file or directory: nothing.crt"),
    (["certs", "frob"], 2, "bloomswarm certs: argument ACTION: invalid choice: 'frob' "
                           "(choose from 'init-ca', 'issue', 'show')"),
], ids=["empty name", "long name", "days 0", "outlives the CA", "out is the CA", "no --out", "show a key",
        "show a missing file", "unknown action"])
def test_refusals_are_one_line_and_write_nothing(
    argv: list[str], code: int, message: str, *, ca: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = _tree(tmp_path)
    got, out, err = run(argv, capsys)
    assert (got, out) == (code, "")
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    prefix, _, suffix = message.partition("...")
    assert err.startswith(prefix) and err.rstrip("\n").endswith(suffix), err
    assert _tree(tmp_path) == before


def test_the_agent_gets_the_ca_certificate_alone(ca: Path, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """agent/ca.crt is the re-serialised certificate: text around it in the CA's file is
    left out."""
    cert = (ca / "ca.crt").read_bytes()
    (ca / "ca.crt").write_bytes(b"subject=CN = bloomswarm fleet CA\n" + cert + b"trailing junk\n")
    assert run(["certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent"], capsys)[0] == 0
    assert (tmp_path / "agent" / "ca.crt").read_bytes() == cert


def _fail_call(monkeypatch: pytest.MonkeyPatch, name: str, failing_call: int) -> list[Path]:
    """Make call number ``failing_call`` of ``cert_commands.<name>`` fail (the disk is full);
    returns the paths it was called with."""
    from bloomswarm import cert_commands

    real = getattr(cert_commands, name)
    calls: list[Path] = []

    def failing(*args: object, **kwargs: object) -> object:
        path = args[0] if name == "_write_temporary" else args[1]
        calls.append(path)  # type: ignore[arg-type]
        if len(calls) == failing_call:
            raise OSError(28, "No space left on device", str(path))
        return real(*args, **kwargs)

    monkeypatch.setattr(cert_commands, name, failing)
    return calls


def test_a_write_that_fails_halfway_leaves_nothing(ca: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The third file fails (here: the disk is full): the temporaries written are removed,
    and the directory the command created too."""
    calls = _fail_call(monkeypatch, "_write_temporary", 3)
    before = _tree(tmp_path)
    code, _, err = run(["certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent"], capsys)
    assert code == 1 and err == "bloomswarm certs: error: No space left on device: agent/ca.crt\n"
    assert [p.name for p in calls] == ["tls.key", "tls.crt", "ca.crt"], "keys first"
    assert _tree(tmp_path) == before


@pytest.mark.parametrize("argv", [
    ["certs", "init-ca", "--out", "ca", "--force"],
    ["certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent", "--force"],
], ids=["init-ca", "issue"])
def test_with_force_a_failure_halfway_keeps_every_old_file(
    argv: list[str], ca: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """All or nothing: the second file fails, and the first is not renamed over its old
    one either (a new ca.crt beside the old ca.key would lose the CA)."""
    assert run(["certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent"], capsys)[0] == 0
    _fail_call(monkeypatch, "_write_temporary", 2)
    before = _tree(tmp_path)
    code, out, err = run(argv, capsys)
    assert (code, out) == (1, "") and err.startswith("bloomswarm certs: error: No space left on device: ")
    assert _tree(tmp_path) == before


def test_a_rename_that_fails_removes_the_new_files_placed(ca: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Without --force every target is new: when the second rename fails, the first file
    placed and the temporaries are removed."""
    calls = _fail_call(monkeypatch, "_place", 2)
    before = _tree(tmp_path)
    code, _, err = run(["certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent"], capsys)
    assert code == 1 and err == "bloomswarm certs: error: No space left on device: agent/tls.crt\n"
    assert [p.name for p in calls] == ["tls.key", "tls.crt"]
    assert _tree(tmp_path) == before
