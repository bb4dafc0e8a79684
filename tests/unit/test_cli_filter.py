"""The ``build``, ``inspect`` and ``query`` commands, end to end.

Most cases call ``bloomswarm.main.main`` in-process (fast); a few run ``python -m
bloomswarm`` in a subprocess to check the real entry point, exit codes and stderr.
Every failure must be exactly one line on stderr, never a traceback: exit code 2 for a bad
command line, 1 for a failure while running.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import zstandard

from bloomswarm.common.header import HEADER_SIZE
from bloomswarm.common.params import Layout
from bloomswarm.common.reader import Filter
from bloomswarm.main import main
from bloomswarm.publisher.source_text import MAX_CSV_FIELD_CHARS

KEYS = [f"user-{i:05d}" for i in range(1000)]
ABSENT = [f"nobody-{i}" for i in range(20)]


def run(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the CLI in-process; return (exit code, stdout, stderr)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def set_stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


def write_lines(path: Path, lines: Sequence[str], *, ending: str = "\n") -> Path:
    path.write_bytes("".join(line + ending for line in lines).encode())
    return path


def build(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> Path:
    """Build ``tmp_path/f.bsf`` from KEYS (plain text) with extra ``args``; return its path."""
    src = write_lines(tmp_path / "keys.txt", KEYS)
    out = tmp_path / "f.bsf"
    code, _, err = run(["build", str(src), "-o", str(out), *args], capsys)
    assert code == 0, err
    return out


# -- building from every kind of input -------------------------------------------------


def _plain(d: Path) -> list[str]:
    return [str(write_lines(d / "keys.txt", KEYS))]


def _gzip(d: Path) -> list[str]:
    path = d / "keys.txt.gz"
    path.write_bytes(gzip.compress("".join(k + "\n" for k in KEYS).encode()))
    return [str(path)]


def _zstd(d: Path) -> list[str]:
    path = d / "keys.zst"
    path.write_bytes(zstandard.ZstdCompressor().compress("".join(k + "\n" for k in KEYS).encode()))
    return [str(path)]


def _zstd_misnamed(d: Path) -> list[str]:
    path = d / "keys.txt"  # the compression is detected from the bytes, not the name
    path.write_bytes(zstandard.ZstdCompressor().compress("".join(k + "\n" for k in KEYS).encode()))
    return [str(path)]


def _crlf(d: Path) -> list[str]:
    return [str(write_lines(d / "keys.txt", KEYS, ending="\r\n"))]


def _csv(d: Path) -> list[str]:
    path = d / "keys.csv"
    with open(path, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["id", "key", "note"])
        for i, k in enumerate(KEYS):
            writer.writerow([i, k, "a, quoted \"note\""])
    return [str(path), "--csv-column", "key"]


def _directory(d: Path) -> list[str]:
    parts = d / "parts"
    parts.mkdir()
    write_lines(parts / "a.txt", KEYS[:400])
    (parts / "b.gz").write_bytes(gzip.compress("".join(k + "\n" for k in KEYS[400:]).encode()))
    return [str(parts)]


def _glob_and_file(d: Path) -> list[str]:
    write_lines(d / "part-1.txt", KEYS[:300])
    write_lines(d / "part-2.txt", KEYS[300:600])
    extra = write_lines(d / "extra.keys", KEYS[600:])
    return [str(d / "part-*.txt"), str(extra)]


@pytest.mark.parametrize(
    "make_inputs",
    [_plain, _gzip, _zstd, _zstd_misnamed, _crlf, _csv, _directory, _glob_and_file],
    ids=["plain", "gzip", "zstd", "zstd-misnamed", "crlf", "csv", "directory", "glob+file"],
)
def test_build_from_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make_inputs: object
) -> None:
    assert callable(make_inputs)
    args: list[str] = make_inputs(tmp_path)
    out = tmp_path / "out" / "f.bsf"
    out.parent.mkdir()
    code, stdout, err = run(["build", *args, "-o", str(out), "--fpp", "0.000001"], capsys)
    assert code == 0, err
    assert err == ""
    assert stdout.startswith(f"wrote {out}: 1,000 keys, blocked layout")
    with Filter.open(out, verify=True) as f:
        assert f.key_count == len(KEYS)
        assert f.contains_many(KEYS).all()
        assert not any(k + "\r" in f for k in KEYS[:50])  # line endings were stripped
    assert out.stat().st_mode & 0o777 == 0o444


def test_build_options_reach_the_header(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = build(tmp_path, capsys, "--layout", "standard", "--seed", "4294967295",
                "--filter-version", "1_234", "--fpp", "0.001", "--expected-keys", "5,000")
    with Filter.open(out) as f:
        assert f.params.layout == Layout.STANDARD
        assert f.params.hash_seed == 2**32 - 1
        assert f.version == 1234
        assert f.header.capacity == 5000
        assert f.header.target_fpp == 0.001
        assert f.contains_many(KEYS).all()


def test_build_with_too_small_expected_keys_still_has_every_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    out = build(tmp_path, capsys, "--expected-keys", "10")
    assert any("sized for 10" in r.getMessage() for r in caplog.records)
    with Filter.open(out) as f:
        assert f.header.capacity == 10
        assert f.key_count == len(KEYS)
        assert f.contains_many(KEYS).all()


# -- inspect ---------------------------------------------------------------------------


def test_inspect_text(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = build(tmp_path, capsys, "--filter-version", "42", "--seed", "7")
    code, stdout, err = run(["inspect", str(out)], capsys)
    assert (code, err) == (0, "")
    fields = dict(line.split(None, 1) for line in stdout.splitlines())
    assert fields["filter_version"] == "42"
    assert fields["hash_seed"] == "7"
    assert fields["key_count"] == "1000"
    assert fields["layout"] == "blocked"
    assert fields["file_size"] == str(out.stat().st_size)
    assert "verified" not in fields


@pytest.mark.parametrize("verify", [False, True], ids=["plain", "verify"])
def test_inspect_json(tmp_path: Path, capsys: pytest.CaptureFixture[str], verify: bool) -> None:
    out = build(tmp_path, capsys, "--filter-version", "3", "--layout", "standard")
    extra = ["--verify"] if verify else []
    code, stdout, err = run(["inspect", "--json", str(out), *extra], capsys)
    assert (code, err) == (0, "")
    info = json.loads(stdout)
    assert info["filter_version"] == 3
    assert info["layout"] == "standard"
    assert info["key_count"] == len(KEYS)
    assert info["file_size"] == out.stat().st_size
    assert 0.0 < info["fill_ratio"] < 1.0
    assert 0.0 < info["expected_fpp"] < 0.05
    assert len(info["body_sha256"]) == 64
    assert info.get("verified", False) is verify


def test_inspect_without_verify_does_not_read_the_body_checksum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = build(tmp_path, capsys)
    _flip_body_byte(out)
    code, _, err = run(["inspect", str(out)], capsys)
    assert (code, err) == (0, "")
    code, _, err = run(["inspect", "--verify", str(out)], capsys)
    assert code == 1
    assert "SHA-256" in err


# -- query ---------------------------------------------------------------------------------


def test_query_arguments(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = build(tmp_path, capsys, "--fpp", "0.000001")
    code, stdout, err = run(["query", str(out), KEYS[0], ABSENT[0], KEYS[999]], capsys)
    assert (code, err) == (0, "")
    assert stdout.splitlines() == [
        f"present\t{KEYS[0]}", f"absent\t{ABSENT[0]}", f"present\t{KEYS[999]}",
    ]


def test_query_stdin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = build(tmp_path, capsys, "--fpp", "0.000001")
    queried = KEYS[:5] + ABSENT[:5]
    set_stdin(monkeypatch, "".join(k + "\r\n" for k in queried).encode())
    code, stdout, err = run(["query", str(out)], capsys)
    assert (code, err) == (0, "")
    assert stdout.splitlines() == (
        [f"present\t{k}" for k in KEYS[:5]] + [f"absent\t{k}" for k in ABSENT[:5]]
    )


def test_int_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    ints = [-(2**63), -1, 0, 1, 42, 2**63 - 1, *range(1000, 1100)]
    src = write_lines(tmp_path / "ints.txt", [str(i) for i in ints])
    out = tmp_path / "ints.bsf"
    code, _, err = run(
        ["build", "--key-type", "int", str(src), "-o", str(out), "--fpp", "1e-6"], capsys
    )
    assert code == 0, err
    with Filter.open(out) as f:
        assert f.contains_many(ints).all()
        assert "42" not in f  # stored as 8-byte integers, not as text
    code, stdout, err = run(["query", "--key-type", "int", str(out), "42", "-1", "7"], capsys)
    assert (code, err) == (0, "")
    assert stdout.splitlines() == ["present\t42", "present\t-1", "absent\t7"]
    set_stdin(monkeypatch, b"9223372036854775807\n-9223372036854775808\n")
    code, stdout, err = run(["query", "--key-type", "int", str(out)], capsys)
    assert (code, err) == (0, "")
    assert stdout.splitlines() == ["present\t9223372036854775807", "present\t-9223372036854775808"]


def test_bytes_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    raw_keys = [b"\xff\xfe-binary", b"caf\xc3\xa9", b"plain"]
    src = tmp_path / "raw.bin"
    src.write_bytes(b"\n".join(raw_keys) + b"\n")
    out = tmp_path / "raw.bsf"
    code, _, err = run(
        ["build", "--key-type", "bytes", str(src), "-o", str(out), "--fpp", "1e-6"], capsys
    )
    assert code == 0, err
    with Filter.open(out) as f:
        assert f.contains_many(raw_keys).all()
        assert "café" in f  # the same UTF-8 bytes
    # Command-line arguments arrive surrogate-escaped; --key-type bytes takes the raw bytes.
    code, stdout, err = run(
        ["query", "--key-type", "bytes", str(out), "\udcff\udcfe-binary", "nope"], capsys
    )
    assert (code, err) == (0, "")
    assert stdout.splitlines() == ["present\t\\xff\\xfe-binary", "absent\tnope"]
    set_stdin(monkeypatch, b"\xff\xfe-binary\ncaf\xc3\xa9\n")
    code, stdout, err = run(["query", "--key-type", "bytes", str(out)], capsys)
    assert (code, err) == (0, "")
    assert stdout.splitlines() == ["present\t\\xff\\xfe-binary", "present\tcafé"]


# -- bad input: one line on stderr, the right exit code ------------------------------------


def _flip_body_byte(path: Path) -> None:
    os.chmod(path, 0o644)  # filter files are written read-only
    with open(path, "r+b") as fh:
        fh.seek(HEADER_SIZE + 3)
        byte = fh.read(1)
        fh.seek(HEADER_SIZE + 3)
        fh.write(bytes([byte[0] ^ 0x10]))


@pytest.fixture
def bad_inputs(tmp_path: Path) -> Path:
    """A directory with one file for each kind of bad input."""
    d = tmp_path
    write_lines(d / "keys.txt", KEYS[:100])
    write_lines(d / "bad_int.txt", ["1", "two", "3"])
    write_lines(d / "big_int.txt", ["1", "2", str(2**63)])
    (d / "latin1.txt").write_bytes(b"ok\ncaf\xe9\n")
    (d / "corrupt.zst").write_bytes(b"\x28\xb5\x2f\xfd" + b"definitely not zstd" * 20)
    with open(d / "wrong.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([["id", "name"], ["1", "x"]])
    with open(d / "huge.csv", "w", newline="") as fh:
        csv.writer(fh).writerows([["key"], ["x" * (MAX_CSV_FIELD_CHARS + 1)]])
    (d / "empty").mkdir()
    (d / "not_a_filter.bin").write_bytes(b"\x00" * 8192)
    (d / "short.bin").write_bytes(b"BLMSWRM\x00 too short")
    from bloomswarm.common.builder import FilterBuilder

    builder = FilterBuilder.for_capacity(1000, 0.01)
    builder.add_many(KEYS)
    for name in ("good.bsf", "truncated.bsf", "corrupt_body.bsf"):
        builder.write(d / name, version=1)
    os.chmod(d / "truncated.bsf", 0o644)
    os.truncate(d / "truncated.bsf", (d / "truncated.bsf").stat().st_size - 1)
    _flip_body_byte(d / "corrupt_body.bsf")
    return d


BAD_CASES = [
    # (id, argv with {d} for the bad_inputs directory, exit code, expected text on stderr)
    ("no-args", [], 2, "required: COMMAND"),
    ("unknown-subcommand", ["frobnicate"], 2, "invalid choice: 'frobnicate'"),
    ("build-no-inputs", ["build", "-o", "{d}/o.bsf"], 2, "required: INPUT"),
    ("build-no-output", ["build", "{d}/keys.txt"], 2, "-o/--output"),
    ("missing-input", ["build", "{d}/missing.txt", "-o", "{d}/o.bsf"], 1,
     "input not found: {d}/missing.txt"),
    ("glob-matches-nothing", ["build", "{d}/*.nothing", "-o", "{d}/o.bsf"], 1, "no files match"),
    ("empty-directory", ["build", "{d}/empty", "-o", "{d}/o.bsf"], 1, "no input files"),
    ("fpp-0", ["build", "{d}/keys.txt", "-o", "{d}/o.bsf", "--fpp", "0"], 2, "argument --fpp"),
    ("fpp-1", ["build", "{d}/keys.txt", "-o", "{d}/o.bsf", "--fpp", "1"], 2, "argument --fpp"),
    ("fpp-abc", ["build", "{d}/keys.txt", "-o", "{d}/o.bsf", "--fpp", "abc"], 2,
     "argument --fpp: not a number: 'abc'"),
    ("fpp-nan", ["build", "{d}/keys.txt", "-o", "{d}/o.bsf", "--fpp", "nan"], 2, "argument --fpp"),
    ("seed-negative", ["build", "{d}/keys.txt", "-o", "{d}/o.bsf", "--seed", "-1"], 2,
     "argument --seed: must not be negative"),
    ("seed-2**32", ["build", "{d}/keys.txt", "-o", "{d}/o.bsf", "--seed", str(2**32)], 2,
     "argument --seed: must be below 2**32"),
    ("layout-nope", ["build", "{d}/keys.txt", "-o", "{d}/o.bsf", "--layout", "nope"], 2,
     "unknown layout 'nope'"),
    ("expected-keys-negative",
     ["build", "{d}/keys.txt", "-o", "{d}/o.bsf", "--expected-keys", "-5"], 2,
     "argument --expected-keys: must not be negative"),
    ("key-type-nope", ["build", "{d}/keys.txt", "-o", "{d}/o.bsf", "--key-type", "float"], 2,
     "argument --key-type"),
    ("engine-nope", ["build", "{d}/keys.txt", "-o", "{d}/o.bsf", "--engine", "gpu"], 2,
     "argument --engine"),
    ("int-key-not-integer", ["build", "{d}/bad_int.txt", "-o", "{d}/o.bsf", "--key-type", "int"], 1,
     "{d}/bad_int.txt:2: not an integer"),
    ("int-key-out-of-range", ["build", "{d}/big_int.txt", "-o", "{d}/o.bsf", "--key-type", "int"],
     1, "{d}/big_int.txt:3: integer 9223372036854775808 outside the 64-bit signed range"),
    ("str-key-invalid-utf8", ["build", "{d}/latin1.txt", "-o", "{d}/o.bsf"], 1,
     "{d}/latin1.txt:2: not valid UTF-8"),
    ("corrupt-zstd", ["build", "{d}/corrupt.zst", "-o", "{d}/o.bsf"], 1,
     "cannot read {d}/corrupt.zst"),
    ("csv-wrong-column", ["build", "{d}/wrong.csv", "-o", "{d}/o.bsf", "--csv-column", "key"], 1,
     "no column 'key'; columns are id, name"),
    ("csv-huge-field", ["build", "{d}/huge.csv", "-o", "{d}/o.bsf", "--csv-column", "key"], 1,
     "cannot read {d}/huge.csv"),
    ("output-dir-missing", ["build", "{d}/keys.txt", "-o", "{d}/no/such/dir/o.bsf"], 1,
     "output directory does not exist"),
    ("inspect-not-a-filter", ["inspect", "{d}/not_a_filter.bin"], 1, "bad magic"),
    ("inspect-short-file", ["inspect", "{d}/short.bin"], 1, "too short"),
    ("inspect-truncated", ["inspect", "{d}/truncated.bsf"], 1, "truncated"),
    ("inspect-missing", ["inspect", "{d}/missing.bsf"], 1,
     "No such file or directory: {d}/missing.bsf"),
    ("inspect-directory", ["inspect", "{d}/empty"], 1, "Is a directory"),
    ("inspect-verify-corrupt-body", ["inspect", "--verify", "{d}/corrupt_body.bsf"], 1, "SHA-256"),
    ("inspect-no-file", ["inspect"], 2, "required: file"),
    ("query-no-keys", ["query", "{d}/good.bsf"], 1, "no keys given"),
    ("query-missing-filter", ["query", "{d}/missing.bsf", "k"], 1, "No such file or directory"),
    ("query-not-a-filter", ["query", "{d}/not_a_filter.bin", "k"], 1, "bad magic"),
    ("query-int-not-integer", ["query", "--key-type", "int", "{d}/good.bsf", "12", "x"], 1,
     "argument:2: not an integer"),
    ("query-int-out-of-range", ["query", "--key-type", "int", "{d}/good.bsf", str(-(2**63) - 1)], 1,
     "outside the 64-bit signed range"),
]


@pytest.mark.parametrize(
    "case", [pytest.param(case[1:], id=case[0]) for case in BAD_CASES]
)
def test_bad_input(
    bad_inputs: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    case: tuple[list[str], int, str],
) -> None:
    argv, exit_code, message = case
    set_stdin(monkeypatch, b"")
    d = str(bad_inputs)
    code, stdout, err = run([a.replace("{d}", d) for a in argv], capsys)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert message.replace("{d}", d) in lines[0]
    assert lines[0].startswith("bloomswarm")
    assert code == exit_code
    assert stdout == ""
    assert not (bad_inputs / "o.bsf").exists()


def test_usage_error_messages_name_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(["build", "x", "-o", "y", "--fpp", "2"], capsys)
    assert code == 2
    assert err.startswith("bloomswarm build: argument --fpp: must be between 0 and 1")


# -- through the real entry point ------------------------------------------------------------


def cli(*args: str, stdin_data: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m bloomswarm ARGS`` with stdin closed (or fed ``stdin_data``)."""
    command = [sys.executable, "-m", "bloomswarm", *args]
    env = {k: v for k, v in os.environ.items() if k != "BLOOMSWARM_DEBUG"}
    if stdin_data is None:
        return subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                              env=env, timeout=120, check=False)
    return subprocess.run(command, capture_output=True, text=True, input=stdin_data, env=env,
                          timeout=120, check=False)


def test_subprocess_build_inspect_query(tmp_path: Path) -> None:
    src = tmp_path / "keys.txt.gz"
    src.write_bytes(gzip.compress("".join(k + "\n" for k in KEYS).encode()))
    out = tmp_path / "f.bsf"
    done = cli("build", str(src), "-o", str(out), "--fpp", "0.000001", "--filter-version", "9")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"wrote {out}: 1,000 keys")
    assert "Traceback" not in done.stderr

    done = cli("inspect", "--json", "--verify", str(out))
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert (info["filter_version"], info["key_count"], info["verified"]) == (9, 1000, True)

    done = cli("query", str(out), stdin_data=f"{KEYS[7]}\n{ABSENT[0]}\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"present\t{KEYS[7]}", f"absent\t{ABSENT[0]}"]


@pytest.mark.parametrize(
    ("args", "exit_code", "message"),
    [
        ([], 2, "the following arguments are required"),
        (["build", "{d}/missing.txt", "-o", "{d}/o.bsf"], 1, "input not found"),
        (["query", "{d}/missing.bsf"], 1, "no keys given"),
        (["inspect", "{d}/missing.bsf"], 1, "No such file or directory"),
    ],
    ids=["no-args", "missing-input", "query-empty-stdin", "inspect-missing"],
)
def test_subprocess_errors_are_one_line(
    tmp_path: Path, args: list[str], exit_code: int, message: str
) -> None:
    done = cli(*(a.replace("{d}", str(tmp_path)) for a in args))
    assert done.returncode == exit_code
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert message in lines[0]
    assert done.stdout == ""
