"""How ``bloomswarm`` reports what escapes a command: one stderr line and an exit code.

The project's errors and ``OSError`` are the user's to fix (exit 1); a command line that
does not parse exits 2; anything else is a bug, reported as an internal error that names
the exception (exit 70), with the traceback above it under ``--debug`` or
``BLOOMSWARM_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import errno
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomswarm import filter_commands
from bloomswarm.common import errors
from bloomswarm.main import (
    DEBUG_ENV,
    EXIT_BROKEN_PIPE,
    EXIT_FAILURE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    debug_requested,
    main,
    report_error,
)


def _failing_inspect(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    """Make ``bloomswarm inspect`` raise ``exc``."""
    def handler(_args: argparse.Namespace) -> int:
        raise exc

    monkeypatch.setattr(filter_commands, "run_inspect", handler)
    monkeypatch.delenv(DEBUG_ENV, raising=False)


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    code = main(argv)
    return code, capsys.readouterr().err.splitlines()


@pytest.mark.parametrize(
    "exc",
    [ZeroDivisionError("division by zero"), ValueError("bad value"), TypeError("bad type"),
     OverflowError("too big"), KeyError("k"), AttributeError("no attribute")],
    ids=lambda exc: type(exc).__name__,
)
def test_an_unexpected_exception_is_one_internal_error_line(
    exc: Exception, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _failing_inspect(monkeypatch, exc)
    code, lines = _run(["inspect", "f.bsf"], capsys)
    assert code == EXIT_INTERNAL == 70
    assert len(lines) == 1, lines
    line = lines[0]
    assert line.startswith("bloomswarm inspect: internal error")
    assert f"{type(exc).__name__}: " in line
    assert "--debug" in line and f"{DEBUG_ENV}=1" in line
    assert "Traceback" not in line


def test_an_exception_without_a_message_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _failing_inspect(monkeypatch, RuntimeError())
    code, lines = _run(["inspect", "f.bsf"], capsys)
    assert code == EXIT_INTERNAL
    assert "internal error (a bug in bloomswarm): RuntimeError (run again with --debug" in lines[0]


@pytest.mark.parametrize("how", ["flag", "environment"])
def test_debug_shows_the_traceback_above_the_line(
    how: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _failing_inspect(monkeypatch, ZeroDivisionError("division by zero"))
    argv = ["inspect", "f.bsf"]
    if how == "flag":
        argv.insert(0, "--debug")
    else:
        monkeypatch.setenv(DEBUG_ENV, "1")
    code, lines = _run(argv, capsys)
    assert code == EXIT_INTERNAL
    assert lines[0] == "Traceback (most recent call last):"
    assert any("in handler" in line for line in lines)  # the frame that raised
    assert lines[-2] == "ZeroDivisionError: division by zero"
    assert lines[-1].startswith("bloomswarm inspect: internal error")


@pytest.mark.parametrize(
    "exc",
    [errors.FormatError("bad magic"), errors.CheckFailed("sha256", "digest differs"),
     errors.ConfigError("no bucket"), errors.DownloadRefused("disk_space", "no space"),
     errors.FleetError("did not converge"),
     FileNotFoundError(errno.ENOENT, "No such file or directory", "f.bsf")],
    ids=lambda exc: type(exc).__name__,
)
def test_project_errors_and_os_errors_are_user_errors(
    exc: Exception, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _failing_inspect(monkeypatch, exc)
    code, lines = _run(["inspect", "f.bsf"], capsys)
    assert code == EXIT_FAILURE
    assert len(lines) == 1 and lines[0].startswith("bloomswarm inspect: error: ")
    assert "internal" not in lines[0]


def test_project_errors_show_a_traceback_only_under_debug(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _failing_inspect(monkeypatch, errors.FormatError("bad magic"))
    code, lines = _run(["--debug", "inspect", "f.bsf"], capsys)
    assert code == EXIT_FAILURE
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-1] == "bloomswarm inspect: error: bad magic"


def test_usage_errors_and_interrupts_keep_their_codes(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _failing_inspect(monkeypatch, errors.UsageError("bloomswarm inspect: argument file: bad"))
    assert _run(["inspect", "f.bsf"], capsys) == (EXIT_USAGE, ["bloomswarm inspect: argument file: bad"])
    _failing_inspect(monkeypatch, KeyboardInterrupt())
    assert _run(["inspect", "f.bsf"], capsys) == (EXIT_INTERRUPTED, ["bloomswarm: interrupted"])


def test_help_documents_the_exit_codes_and_debug(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--debug" in out and f"{DEBUG_ENV}=1" in out
    for code in (EXIT_FAILURE, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE):
        assert f"\n  {code:<4} " in out, code


@pytest.mark.parametrize(
    ("value", "expected"),
    [("", False), ("0", False), ("false", False), ("No", False), ("1", True), ("yes", True)],
)
def test_debug_environment_values(value: str, expected: bool) -> None:
    assert debug_requested({DEBUG_ENV: value}) is expected
    assert debug_requested({}) is False


@given(message=st.text(), internal=st.booleans())
def test_the_report_is_always_one_line(message: str, internal: bool) -> None:
    exc: Exception = ValueError(message) if internal else errors.InputError(message)
    code, line = report_error("build", exc)
    assert code == (EXIT_INTERNAL if internal else EXIT_FAILURE)
    assert len(line.splitlines()) == 1
    assert line.startswith("bloomswarm build: ")


def test_internal_error_through_the_real_entry_point(tmp_path: Path) -> None:
    """``python -m bloomswarm``'s exit status and stderr, with a handler that has a bug."""
    script = (
        "import sys\n"
        "from bloomswarm import filter_commands\n"
        "def broken(args):\n"
        "    return 1 / 0\n"
        "filter_commands.run_inspect = broken\n"
        "from bloomswarm.main import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    for argv, traceback in ((["inspect", "x"], False), (["--debug", "inspect", "x"], True)):
        done = subprocess.run([sys.executable, "-c", script, *argv], capture_output=True, text=True,
                              cwd=tmp_path, timeout=120, check=False,
                              env={k: v for k, v in os.environ.items() if k != DEBUG_ENV})
        assert done.returncode == EXIT_INTERNAL, done.stderr
        assert ("Traceback (most recent call last):" in done.stderr) is traceback
        assert done.stderr.splitlines()[-1].startswith(
            "bloomswarm inspect: internal error (a bug in bloomswarm): ZeroDivisionError: division by zero")


# --- a reader that closes stdout early (`| head`) ------------------------------------------


def _printing_inspect(monkeypatch: pytest.MonkeyPatch, lines: int) -> None:
    """Make ``bloomswarm inspect`` print ``lines`` lines to stdout."""
    def handler(_args: argparse.Namespace) -> int:
        for i in range(lines):
            print(f"line {i}")
        return 0

    monkeypatch.setattr(filter_commands, "run_inspect", handler)
    monkeypatch.delenv(DEBUG_ENV, raising=False)


@pytest.mark.parametrize("lines", [1, 100_000], ids=["buffered", "written"])
def test_a_closed_stdout_ends_the_command_quietly_with_141(
    lines: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pipe whose reader is gone: a broken pipe while printing (many lines) or at the
    final flush (one line, still buffered) is no error line, exit 141 (128 + SIGPIPE)."""
    _printing_inspect(monkeypatch, lines)
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, "w", encoding="utf-8") as closed:
        monkeypatch.setattr(sys, "stdout", closed)
        code = main(["inspect", "f.bsf"])
        print("after the command: discarded, no error")
        closed.flush()  # stdout now writes to /dev/null: the interpreter's exit flush passes
    assert code == EXIT_BROKEN_PIPE == 141
    assert capsys.readouterr().err == ""


def test_a_broken_pipe_elsewhere_is_an_error_like_any_other(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """stdout still open: a broken pipe from a socket is the user's failure, exit 1."""
    _failing_inspect(monkeypatch, BrokenPipeError(errno.EPIPE, "Broken pipe"))
    assert _run(["inspect", "f.bsf"], capsys) == (EXIT_FAILURE, ["bloomswarm inspect: error: Broken pipe"])


@pytest.mark.parametrize("command", ["query", "inspect", "help"])
def test_head_closing_the_real_entry_points_stdout_is_no_error(command: str, tmp_path: Path) -> None:
    """``python -m bloomswarm ... | head -1``: whatever the command, no stderr and no
    traceback (query: exit 141; --help: argparse drops what it cannot write, exit 0)."""
    from bloomswarm.common.builder import FilterBuilder

    builder = FilterBuilder.for_capacity(100, 0.01)
    builder.add_many([f"key-{i}" for i in range(100)])
    builder.write(tmp_path / "f.bsf")
    argv = {"query": ["query", "f.bsf", *(f"key-{i}" for i in range(20_000))],
            "inspect": ["inspect", "f.bsf", "--verify"], "help": ["--help"]}[command]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BLOOMSWARM_")}
    with subprocess.Popen([sys.executable, "-m", "bloomswarm", *argv], cwd=tmp_path, env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as child:
        assert child.stdout is not None and child.stderr is not None
        child.stdout.readline()
        child.stdout.close()  # as head does after its line
        stderr = child.stderr.read().decode()
        code = child.wait(timeout=120)
    assert stderr == ""
    assert code in ((EXIT_BROKEN_PIPE,) if command == "query" else (0, EXIT_BROKEN_PIPE))
