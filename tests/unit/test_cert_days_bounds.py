"""``certs init-ca`` / ``certs issue`` ``--days``: at most 100 years, refused when the
command line is parsed (exit code 2, one line), and the library refuses more with
ValueError, never OverflowError (which the CLI reported as an internal error, exit 70)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from bloomswarm import cert_commands
from bloomswarm.common import tls_identity
from bloomswarm.common.tls_identity import issue_certificate, make_ca
from bloomswarm.main import main

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def test_the_cli_bound_is_the_librarys() -> None:
    assert cert_commands.MAX_DAYS == tls_identity.MAX_DAYS == 36_500


@pytest.mark.parametrize("argv", [
    ["certs", "init-ca", "--out", "ca", "--days", "99999999"],
    ["certs", "init-ca", "--out", "ca", "--days", "36501"],
    ["certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent", "--days", "3000000"],
])
def test_too_many_days_is_a_usage_error_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], argv: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [f"bloomswarm certs {argv[1]}: argument --days: must be at most 36,500, got {argv[-1]}"]
    assert list(tmp_path.iterdir()) == []


def test_a_hundred_years_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["-q", "certs", "init-ca", "--out", "ca", "--days", "36500"]) == 0
    assert main(["-q", "certs", "issue", "--ca", "ca", "--name", "n", "--out", "agent",
                 "--days", "36000"]) == 0
    assert capsys.readouterr().err == ""


def test_the_library_refuses_out_of_range_days_with_value_error() -> None:
    with pytest.raises(ValueError, match="days must be at most 36,500"):
        make_ca("fleet", days=99_999_999, now=NOW)
    ca = make_ca("fleet", days=365, now=NOW)
    with pytest.raises(ValueError, match="days must be at most 36,500"):
        issue_certificate(*ca, name="a", days=36_501, now=NOW)
    late = dt.datetime(9950, 1, 1, tzinfo=dt.timezone.utc)  # 100 years on is past year 9999
    with pytest.raises(ValueError, match="past the year 9999"):
        make_ca("fleet", days=36_500, now=late)
