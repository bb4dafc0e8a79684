"""What the operator docs state that the code decides (piece sizes, log events), checked
against the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from bloomswarm.publisher.torrent import choose_piece_size
from tests.deploy.deploy_tree import ROOT

UNITS = {"byte": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
SIZE = r"([\d.]+) (KiB|MiB|GiB)"


def size(number: str, unit: str) -> int:
    return int(float(number) * UNITS[unit])


def leading_size(cell: str) -> int:
    match = re.match(SIZE, cell)
    assert match, cell
    return size(*match.groups())


def piece_size_table() -> list[tuple[str, str]]:
    """(file size, piece size) cells of docs/operations.md's table under "## Piece size"."""
    text = (ROOT / "docs" / "operations.md").read_text()
    section = text.split("\n## Piece size\n", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| ")]
    return [(left.strip(), right.strip()) for left, right in rows[1:]]  # rows[0]: the header


def test_the_piece_size_table_is_choose_piece_size() -> None:
    rows = piece_size_table()
    assert len(rows) >= 7, rows
    upper_bounds = []
    for file_size, piece in rows:
        piece_size = leading_size(piece)
        over = re.search(r"over " + SIZE, file_size)
        up_to = re.search(r"up to " + SIZE, file_size)
        if over:  # the smallest file of the row gets the row's piece size
            assert choose_piece_size(size(*over.groups()) + 1) == piece_size, file_size
        if up_to:  # so does the largest; one byte more gets the next row's
            largest = size(*up_to.groups())
            assert choose_piece_size(largest) == piece_size, file_size
            assert choose_piece_size(largest + 1) == 2 * piece_size, file_size
            upper_bounds.append(largest)
        else:  # the last row: no larger piece size at any size
            assert choose_piece_size(1 << 45) == piece_size, file_size
        for number, unit, extra, pieces in re.findall(SIZE + r"( \+ 1 byte)? → (\d+) pieces", piece):
            example = size(number, unit) + (1 if extra else 0)
            assert choose_piece_size(example) == piece_size, piece
            assert -(-example // piece_size) == int(pieces), piece
    assert choose_piece_size(0) == leading_size(rows[0][1])
    assert upper_bounds == sorted(upper_bounds)


LOGGING_CALLS = {"log_event": 2, "_log_event": 1, "logfmt": 0, "_retry_poll": 1, "_fail": 2}
"""Calls whose argument at this index is an event name (``_retry_poll`` and ``_fail`` pass
theirs on to ``_log_event``)."""


def logged_events() -> set[str]:
    """Every event name the agent and its CLI log, read from the source."""
    events: set[str] = set()
    for path in [*(ROOT / "agent").rglob("*.py"), *(ROOT / "cli").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            index = LOGGING_CALLS.get(name)
            if index is None or len(node.args) <= index:
                continue
            event = node.args[index]
            if isinstance(event, ast.Constant) and isinstance(event.value, str):
                events.add(event.value)
            else:  # only the wrappers pass a variable on
                assert isinstance(event, ast.Name) and event.id == "event", f"{path}:{node.lineno}"
    return events


def test_the_agent_s_events_list_is_complete() -> None:
    text = (ROOT / "docs" / "agent.md").read_text()
    section = text.split("\nEvents (every one the agent logs):\n", 1)[1].split("\nValues with spaces", 1)[0]
    names = re.sub(r"\([^()]*\)", "", section)  # the explanations in parentheses name no event
    documented = set(re.findall(r"`([a-z_]+)`", names))
    events = logged_events()
    assert {"started", "internal_error", "verification_failed", "seeding"} <= events
    assert events == documented, (f"logged, not listed: {sorted(events - documented)}; "
                                  f"listed, not logged: {sorted(documented - events)}")


KEY_COMMANDS = {
    "publish": ["publish", "keys.txt"], "pin": ["pin", "3"], "unpin": ["unpin"], "refresh": ["refresh"],
    "index sync": ["index", "sync"], "index show": ["index", "show"], "tracker-sync": ["tracker-sync"],
    "versions": ["versions"],
}
"""Commands that could load the signing key, as run in the test (``--bucket`` etc. added)."""


def refusing_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      capsys: pytest.CaptureFixture[str]) -> set[str]:
    """The commands that refuse a signing key others can read, found by running them."""
    from bloomswarm.common.storage import MemoryObjectStore
    from bloomswarm.main import main

    for name in ("BLOOMSWARM_CONFIG", "BLOOMSWARM_S3_BUCKET", "BLOOMSWARM_SIGNING_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    key = tmp_path / "publisher.key"
    assert main(["-q", "keygen", str(key)]) == 0
    key.chmod(0o644)
    monkeypatch.setenv("BLOOMSWARM_SIGNING_KEY", str(key))  # the configured key (no --key needed)
    # no S3: a command that reads the bucket first (tracker-sync) reads an empty one
    monkeypatch.setattr("bloomswarm.publish_commands._open_store", lambda _config: MemoryObjectStore())
    capsys.readouterr()
    refusing = set()
    for name, command in KEY_COMMANDS.items():
        main([*command, "--bucket", "filters", "--endpoint-url", "http://127.0.0.1:1",
              *(["--whitelist", str(tmp_path / "whitelist.txt")] if name == "tracker-sync" else [])])
        if f"private key file {key} is accessible to group or others" in capsys.readouterr().err:
            refusing.add(name)
    return refusing


def commands_named_before(text: str, phrase: str) -> set[str]:
    """The commands of KEY_COMMANDS named in the sentence (or table cell) that says ``phrase``."""
    assert phrase in text, phrase
    start = max(text.rfind(mark, 0, text.index(phrase)) for mark in (". ", "; ", "| ", "\n\n"))
    named = set(re.findall(r"`([a-z -]+)`", text[start:text.index(phrase)]))
    return named & set(KEY_COMMANDS)


def test_the_docs_name_every_command_that_refuses_an_open_signing_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    refusing = refusing_commands(tmp_path, monkeypatch, capsys)
    assert {"publish", "pin", "unpin", "refresh", "index sync"} <= refusing, refusing
    assert "versions" not in refusing
    publishing = (ROOT / "docs" / "publishing.md").read_text()
    security = (ROOT / "docs" / "security.md").read_text()
    assert commands_named_before(publishing, "refuse a\nprivate key file") == refusing
    assert commands_named_before(security, "refuse (like ssh) a key file") == refusing
    assert commands_named_before(security, "refuse a key file open to group or others") == refusing
