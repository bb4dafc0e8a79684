"""Walks the table in docs/bad-input.md: every row is a command line with a bad input, run
through ``bloomswarm.main.main`` in this process, and must exit with the row's code and
print exactly the row's message as ONE line on stderr, with no traceback.

Table cells (docs/bad-input.md explains them to readers too):

- "command line": ``bloomswarm ...`` in backticks, split like a shell would (shlex);
  leading ``NAME=value`` words are environment variables for that run. Placeholders in
  braces name files this module makes: see :class:`Fixtures`.
- "exit": the expected exit code.
- "message": the whole stderr line in backticks, placeholders substituted; ``...`` stands
  for any text (only where the text depends on the machine, such as an OS error string).
"""

from __future__ import annotations

import datetime
import io
import logging
import os
import re
import shlex
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from bloomswarm.commands import HELP
from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.delta import make_delta
from bloomswarm.common.delta_format import PAYLOAD_OFFSET
from bloomswarm.common.signing import write_keypair
from bloomswarm.common.tls_identity import issue_certificate, make_ca
from bloomswarm.main import main

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "bad-input.md"
_CELL_SPLIT = re.compile(r"(?<!\\)\|")
_PLACEHOLDER = re.compile(r"\{([a-z0-9_]+)\}")


@dataclass(frozen=True)
class Row:
    """One line of the table."""

    command: str
    input: str
    bad_value: str
    command_line: str
    exit_code: int
    message: str

    @property
    def id(self) -> str:
        return f"{self.command}: {self.input} = {self.bad_value}"


def _code(cell: str) -> str:
    """The text of a cell written as a code span (`x` or `` x ``), with \\| unescaped."""
    cell = cell.strip()
    match = re.fullmatch(r"(`+)\s?(.*?)\s?\1", cell)
    if match is None:
        raise ValueError(f"expected a code span, got {cell!r}")
    return match.group(2).replace("\\|", "|")


def parse_table(text: str) -> list[Row]:
    """The rows of every table whose header starts with "| command | input | bad value"."""
    rows: list[Row] = []
    in_table = False
    for line in text.splitlines():
        if line.startswith("| command | input | bad value"):
            in_table = True
            continue
        if not in_table:
            continue
        if not line.startswith("|"):
            in_table = False
            continue
        cells = [c.strip() for c in _CELL_SPLIT.split(line.strip())[1:-1]]
        if set("".join(cells)) <= set("-: "):
            continue  # the separator line
        if len(cells) != 6:
            raise ValueError(f"a bad-input row needs 6 cells, got {len(cells)}: {line}")
        command, input_, bad, command_line, code, message = cells
        rows.append(Row(command.strip("`"), input_, bad, _code(command_line), int(code), _code(message)))
    return rows


ROWS = parse_table(TABLE.read_text(encoding="utf-8"))


class Fixtures:
    """The files and ports placeholders name. Every one is made once per test session.

    {tmp} a scratch folder; {missing} a path that does not exist; {keys} a text file of
    keys; {empty} an empty file; {filter} a valid filter file; {junk} a file of text that
    is no filter; {truncated} a valid filter cut short; {corrupt} a valid filter with one
    body byte changed; {filter_next}, {delta}, {delta_truncated}, {delta_corrupt},
    {filter_resized}: see :meth:`_delta_files`; {fifo} a named pipe (FIFO), which no row may
    read or write; {priv} / {pub} an Ed25519 key pair; {priv_0644}, {priv_0640},
    {priv_0604} Ed25519 private keys with that mode; {rsa_priv} / {rsa_pub} an RSA
    pair; {toml_*} config files (see :meth:`_configs`); {certs_*} certificate directories (see
    :meth:`_certificate_dirs`); {busy_port} a loopback port this module listens on.
    """

    def __init__(self, root: Path) -> None:
        self.values: dict[str, str] = {"tmp": str(root), "missing": str(root / "missing")}
        keys = root / "keys.txt"
        keys.write_text("".join(f"key-{i}\n" for i in range(200)), encoding="utf-8")
        self._file("keys", keys)
        self._file("empty", root / "empty.txt", b"")
        os.mkfifo(root / "fifo")  # a named pipe: an output or whitelist there is refused
        self._file("fifo", root / "fifo")
        builder = FilterBuilder.for_capacity(200, 0.01)
        builder.add_many([f"key-{i}" for i in range(200)])
        good = root / "good.bsf"
        builder.write(good)
        data = good.read_bytes()
        self._file("filter", good)
        self._file("junk", root / "junk.bsf", b"this is not a filter file\n" * 200)
        self._file("truncated", root / "truncated.bsf", data[: len(data) - 100])
        self._file("corrupt", root / "corrupt.bsf", data[:-1] + bytes([data[-1] ^ 1]))
        self._delta_files(root, builder, good)
        write_keypair(root / "publisher.key", root / "publisher.pub")
        self._file("priv", root / "publisher.key")
        self._file("pub", root / "publisher.pub")
        for mode in (0o644, 0o640, 0o604):  # a private key others may read: refused
            open_key = root / f"publisher-{mode:04o}.key"
            write_keypair(open_key, root / f"publisher-{mode:04o}.pub")
            open_key.chmod(mode)
            self._file(f"priv_{mode:04o}", open_key)
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=1024)
        self._file("rsa_priv", root / "rsa.key", rsa_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
        self._file("rsa_pub", root / "rsa.pub", rsa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
        for name, text in self._configs().items():
            self._file(name, root / f"{name}.toml", text)
        self._certificate_dirs(root)
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen()
        self.values["busy_port"] = str(self._listener.getsockname()[1])

    def _certificate_dirs(self, root: Path) -> None:
        """{certs_empty} a directory with no certificate; {certs_mismatched} tls.crt with
        another certificate's key; {certs_expired} a certificate that expired days ago."""
        now = datetime.datetime.now(datetime.timezone.utc)
        ca = make_ca("fleet", days=30, now=now - datetime.timedelta(days=10))
        first, second = (issue_certificate(*ca, name=name, days=15, now=now) for name in ("a", "b"))
        expired = issue_certificate(*ca, name="a", days=2, now=now - datetime.timedelta(days=5))
        for name, pair in (("certs_empty", None), ("certs_mismatched", (first[0], second[1])),
                           ("certs_expired", expired)):
            directory = root / name
            directory.mkdir()
            if pair is not None:
                (directory / "tls.crt").write_bytes(pair[0])
                (directory / "tls.key").write_bytes(pair[1])
            self.values[name] = str(directory)

    def _configs(self) -> dict[str, bytes]:
        pub = self.values["pub"].encode()
        agent = b'data_dir = "' + self.values["tmp"].encode() + b'/data"\npublic_keys = ["' + pub + b'"]\n'
        return {
            "toml_invalid": b"bucket = \n",
            "toml_not_utf8": b'publisher_id = "caf\xe9"\n',
            "toml_unknown": b'colour = "red"\n',
            "toml_publisher_wrong_type": b'keep_versions = "five"\n[s3]\nbucket = "filters"\n',
            "toml_publisher_s3_plain": b's3 = "filters"\n',
            "toml_agent_wrong_type": agent + b'[s3]\nbucket = "filters"\n[watch]\npoll_interval_s = "fast"\n',
            "toml_agent_no_origin": agent,
            "toml_agent_two_origins": agent + b'[s3]\nbucket = "filters"\n[origin]\n'
                                              b'cdn_base_url = "https://cdn.example.com"\n',
            "toml_agent_swarm_unknown": agent + b'[s3]\nbucket = "filters"\n[swarm]\nturbo = true\n',
            "toml_agent_swarm_nan": agent + b'[s3]\nbucket = "filters"\n[swarm]\norigin_grace_s = nan\n',
            "toml_agent_swarm_inf": agent + b'[s3]\nbucket = "filters"\n[swarm]\norigin_starved_s = inf\n',
            "toml_agent_swarm_bool_text": agent + b'[s3]\nbucket = "filters"\n[swarm]\nenable_dht = "yes"\n',
            "toml_agent_watch_inf": agent + b'[s3]\nbucket = "filters"\n[watch]\nretry_max_s = -inf\n',
            "toml_publisher_nan": b'orphan_grace_s = nan\n[s3]\nbucket = "filters"\n',
            "toml_publisher_bool_text": b'[s3]\nbucket = "filters"\nchecksum_sha256 = "yes"\n',
            "toml_agent_filters_twice": agent + b'[s3]\nbucket = "filters"\n[[filters]]\nname = "blocklist"\n'
                                                b'[[filters]]\nname = "blocklist"\n',
            "toml_agent_filters_escape": agent + b'[s3]\nbucket = "filters"\n[[filters]]\nname = "../etc"\n',
            "toml_agent_filters_prefix_escape": agent + b'[s3]\nbucket = "filters"\n[[filters]]\n'
                                                        b'name = "a"\nprefix = "../other-fleet"\n',
            "toml_agent_filters_shared_prefix": agent + b'[s3]\nbucket = "filters"\n[[filters]]\nname = "a"\n'
                                                        b'prefix = "lists"\n[[filters]]\nname = "b"\n'
                                                        b'prefix = "lists/b"\n',
            "toml_agent_filters_unknown": agent + b'[s3]\nbucket = "filters"\n[[filters]]\nname = "a"\n'
                                                  b'keep = 3\n',
            "toml_agent_filters_keep_0": agent + b'[s3]\nbucket = "filters"\n[[filters]]\nname = "a"\n'
                                                 b'keep_versions = 0\n',
            "toml_agent_filters_plain": agent + b'filters = "blocklist"\n[s3]\nbucket = "filters"\n',
            "toml_agent_bad_pub": b'data_dir = "/tmp/x"\npublic_keys = ["' + self.values["keys"].encode()
                                  + b'"]\n[s3]\nbucket = "filters"\n',
        }

    def _delta_files(self, root: Path, builder: FilterBuilder, good: Path) -> None:
        """{filter_next} the next version of {filter}, {delta} the delta between them,
        {delta_truncated} / {delta_corrupt} that delta cut short / with a stream byte
        changed, {filter_resized} a filter of other parameters."""
        builder.add_many([f"next-{i}" for i in range(20)])
        builder.write(root / "next.bsf", version=2)
        self._file("filter_next", root / "next.bsf")
        make_delta(good, root / "next.bsf", root / "next.bsd")
        delta = (root / "next.bsd").read_bytes()
        self._file("delta", root / "next.bsd")
        self._file("delta_truncated", root / "truncated.bsd", delta[:-10])
        corrupt = bytearray(delta)
        corrupt[PAYLOAD_OFFSET] ^= 1  # the quotient stream's first bit: one flip more than it says
        self._file("delta_corrupt", root / "corrupt.bsd", bytes(corrupt))
        resized = FilterBuilder.for_capacity(400, 0.01)
        resized.write(root / "resized.bsf")
        self._file("filter_resized", root / "resized.bsf")

    def _file(self, name: str, path: Path, data: bytes | None = None) -> None:
        if data is not None:
            path.write_bytes(data)
        self.values[name] = str(path)

    def substitute(self, text: str) -> str:
        return _PLACEHOLDER.sub(lambda m: self.values[m.group(1)], text)

    def close(self) -> None:
        self._listener.close()


@pytest.fixture(scope="module")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fixtures]:
    made = Fixtures(tmp_path_factory.mktemp("bad-input"))
    yield made
    made.close()


def _matches(expected: str, line: str) -> bool:
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, line) is not None


def run_row(row: Row, fixtures: Fixtures, monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """Run the row's command line in this process; (exit code, stderr)."""
    words = shlex.split(fixtures.substitute(row.command_line))
    for name in [n for n in os.environ if n.startswith(("BLOOMSWARM_", "AWS_"))]:
        monkeypatch.delenv(name)
    for name in ("AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE"):
        monkeypatch.setenv(name, fixtures.values["missing"])
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, _, value = words.pop(0).partition("=")
        monkeypatch.setenv(name, value)
    assert words[0] == "bloomswarm", row.command_line
    monkeypatch.chdir(fixtures.values["tmp"])
    monkeypatch.setattr(logging.root, "handlers", [])  # so main's basicConfig logs to capsys
    capsys.readouterr()
    code = main(words[1:])
    return code, capsys.readouterr().err


def test_table_covers_every_command() -> None:
    commands = {row.command for row in ROWS}
    # Every command the CLI registers (from its own registry, so a new command needs rows).
    expected = ({"bloomswarm", "demo", "agent run", "agent status"}
                | {name for name in HELP if name != "agent"})
    assert expected <= commands, f"no rows for {sorted(expected - commands)}"


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_row(row: Row, fixtures: Fixtures, monkeypatch: pytest.MonkeyPatch,
             capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_row(row, fixtures, monkeypatch, capsys)
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {lines}"
    expected = fixtures.substitute(row.message)
    assert _matches(expected, lines[0]), f"\nexpected: {expected}\n     got: {lines[0]}"
    assert code == row.exit_code
