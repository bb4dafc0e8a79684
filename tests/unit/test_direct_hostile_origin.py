"""DirectTransfer against origins whose responses do not match the file: a response that
ends before the end of the file is continued with a Range request (never reported
finished), and one longer than the file is refused without writing past the file's size.
Every origin here is a loopback HTTP server of the test."""

from __future__ import annotations

import contextlib
import hashlib
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.agent.announcements import HttpAnnouncements
from bloomswarm.agent.config import DirectConfig
from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.direct import DirectTransfer
from bloomswarm.agent.metrics import AgentMetrics
from bloomswarm.agent.origin import CdnOrigin
from bloomswarm.agent.transfer import OriginURL, TransferStatus
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import PUBLIC, StoreServer, agent_config, installed, metric, publish

store = agent_helpers.store  # the shared pytest fixture

_RANGE = re.compile(r"bytes=(\d+)-")

Reply = Callable[[BaseHTTPRequestHandler, bytes, int], None]
"""Answers a GET: the handler, the file, the first byte asked for (0 without a Range)."""


@dataclass
class _Origin:
    """A loopback server that answers every GET with ``reply``; records the Range asked."""

    data: bytes
    reply: Reply
    ranges: list[str | None] = field(default_factory=list)

    def __post_init__(self) -> None:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                asked = self.headers.get("Range")
                outer.ranges.append(asked)
                match = _RANGE.fullmatch(asked or "")
                with contextlib.suppress(OSError):  # the client hung up (it had all it wanted)
                    outer.reply(self, outer.data, int(match.group(1)) if match else 0)
                self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/filter.bsf"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


def _cut_after(limit: int, *, honour_range: bool = True) -> Reply:
    """Announce the whole rest of the file, send at most ``limit`` bytes of it, hang up."""

    def reply(handler: BaseHTTPRequestHandler, data: bytes, start: int) -> None:
        start = start if honour_range else 0
        handler.send_response(206 if start else 200)
        if start:
            handler.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        handler.send_header("Content-Length", str(len(data) - start))
        handler.end_headers()
        handler.wfile.write(data[start:start + limit])
        handler.wfile.flush()
        handler.connection.shutdown(socket.SHUT_RDWR)

    return reply


def _then_more(extra: int) -> Reply:
    """The whole file, then ``extra`` more bytes; no Content-Length (ends by closing)."""

    def reply(handler: BaseHTTPRequestHandler, data: bytes, start: int) -> None:
        handler.send_response(200)
        handler.send_header("Connection", "close")
        handler.end_headers()
        handler.wfile.write(data)
        for _ in range(extra // 65536):
            handler.wfile.write(b"\0" * 65536)

    return reply


def _claiming(headers: Callable[[bytes, int], dict[str, str]], status: int = 200) -> Reply:
    """The file (from ``start``) under the given headers, which claim more than it."""

    def reply(handler: BaseHTTPRequestHandler, data: bytes, start: int) -> None:
        handler.send_response(status)
        for name, value in headers(data, start).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data[start:])

    return reply


@pytest.fixture
def origin_server() -> Iterator[Callable[[bytes, Reply], _Origin]]:
    started: list[_Origin] = []

    def start(data: bytes, reply: Reply) -> _Origin:
        started.append(_Origin(data, reply))
        return started[-1]

    yield start
    for server in started:
        server.stop()


@pytest.fixture
def transfer() -> Iterator[DirectTransfer]:
    transfer = DirectTransfer(DirectConfig(timeout_s=5.0, chunk_size=16 * 1024))
    yield transfer
    transfer.close()


def _file(store: MemoryObjectStore) -> tuple[Manifest, bytes, bytes]:
    manifest = publish(store, ["a"], capacity=200_000)
    data, torrent = store.get(manifest.filter_key), store.get(manifest.torrent_key)
    assert data is not None and torrent is not None
    return manifest, data.data, torrent.data


def _wait(transfer: DirectTransfer, version: int) -> TransferStatus:
    """The status once the download finished or failed."""
    deadline = time.monotonic() + 30
    while True:
        status = transfer.status(version)
        assert status is not None
        if status.state in ("seeding", "error"):
            return status
        assert time.monotonic() < deadline, f"not reached: {status}"
        time.sleep(0.01)


def test_responses_cut_short_are_continued_with_ranges_until_the_file_is_complete(
    tmp_path: Path, store: MemoryObjectStore, transfer: DirectTransfer,
    origin_server: Callable[[bytes, Reply], _Origin],
) -> None:
    manifest, data, torrent = _file(store)
    cut = 50_000  # more responses than the attempts a failing download has: each brings bytes
    origin = origin_server(data, _cut_after(cut))
    transfer.start_download(1, torrent, tmp_path, lambda: OriginURL(origin.url))
    status = _wait(transfer, 1)
    assert (status.state, status.finished, status.error) == ("seeding", True, None)
    assert hashlib.sha256((tmp_path / "filter.bsf").read_bytes()).hexdigest() == manifest.sha256
    expected = [None] + [f"bytes={start}-" for start in range(cut, len(data), cut)]
    assert origin.ranges == expected
    assert status.bytes_from_origin == len(data)


def test_a_short_response_that_brings_nothing_new_is_an_error_not_a_finished_file(
    tmp_path: Path, store: MemoryObjectStore, transfer: DirectTransfer,
    origin_server: Callable[[bytes, Reply], _Origin],
) -> None:
    _, data, torrent = _file(store)
    origin = origin_server(data, _cut_after(len(data) // 2, honour_range=False))
    transfer.start_download(1, torrent, tmp_path, lambda: OriginURL(origin.url))
    status = _wait(transfer, 1)
    assert (status.state, status.finished) == ("error", False)
    assert status.error is not None and f"ended at byte {len(data) // 2} of {len(data)}" in status.error
    assert status.progress < 1.0
    assert (tmp_path / "filter.bsf").read_bytes() == data[:len(data) // 2]
    # The first response brought bytes; then the attempts, each resuming (and ignored).
    assert origin.ranges == [None] + [f"bytes={len(data) // 2}-"] * 3


def test_a_response_longer_than_the_file_is_refused_and_nothing_past_the_file_is_written(
    tmp_path: Path, store: MemoryObjectStore, transfer: DirectTransfer,
    origin_server: Callable[[bytes, Reply], _Origin],
) -> None:
    _, data, torrent = _file(store)
    origin = origin_server(data, _then_more(8 << 20))
    transfer.start_download(1, torrent, tmp_path, lambda: OriginURL(origin.url))
    status = _wait(transfer, 1)
    assert (status.state, status.finished) == ("error", False)
    assert status.error is not None and "more than the file's" in status.error
    assert (tmp_path / "filter.bsf").stat().st_size == 0  # the suspect bytes are not kept
    assert len(origin.ranges) == 1  # not retried at once: the origin does not serve this file


@pytest.mark.parametrize("headers, status", [
    (lambda data, start: {"Content-Length": str(len(data) + 1)}, 200),
    (lambda data, start: {"Content-Length": str(len(data) - start),
                          "Content-Range": f"bytes {start}-{len(data)}/{len(data) + 1}"}, 206),
    (lambda data, start: {"Content-Length": str(len(data) - start),
                          "Content-Range": f"bytes {start + 1}-{len(data) - 1}/{len(data)}"}, 206),
], ids=["content-length", "content-range-beyond", "content-range-elsewhere"])
def test_headers_that_claim_more_than_the_file_fail_before_a_byte_is_written(
    tmp_path: Path, store: MemoryObjectStore, transfer: DirectTransfer, *,
    origin_server: Callable[[bytes, Reply], _Origin],
    headers: Callable[[bytes, int], dict[str, str]], status: int,
) -> None:
    _, data, torrent = _file(store)
    on_disk = data[:1000]
    (tmp_path / "filter.bsf").write_bytes(on_disk)
    origin = origin_server(data, _claiming(headers, status))
    transfer.start_download(1, torrent, tmp_path, lambda: OriginURL(origin.url))
    result = _wait(transfer, 1)
    assert (result.state, result.finished) == ("error", False)
    assert result.error is not None and "the origin" in result.error
    assert (tmp_path / "filter.bsf").read_bytes() == on_disk  # untouched
    assert result.bytes_from_origin == 0


def test_a_file_on_disk_longer_than_the_file_is_started_over(
    tmp_path: Path, store: MemoryObjectStore, transfer: DirectTransfer,
) -> None:
    manifest, data, torrent = _file(store)
    (tmp_path / "filter.bsf").write_bytes(data + b"junk past the end")
    server = StoreServer(store).start()
    try:
        url = OriginURL(f"{server.url}/{manifest.filter_key}")
        transfer.start_download(1, torrent, tmp_path, lambda: url)
        status = _wait(transfer, 1)
        assert status.state == "seeding"
        assert server.requests[-1][1].get("Range") is None  # from byte 0
    finally:
        server.stop()
    assert (tmp_path / "filter.bsf").read_bytes() == data


class _CuttingStoreServer(StoreServer):
    """A StoreServer whose answers for filter files break off after ``CUT`` bytes (the
    Content-Length still announcing all of them): a proxy cutting long responses."""

    CUT = 100_000

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        base = super()._handler()
        cut = self.CUT

        class Handler(base):  # type: ignore[valid-type, misc]
            def _reply(self, code: int, body: bytes, *, etag: str | None = None,
                       extra: dict[str, str] | None = None) -> None:
                if not self.path.endswith("filter.bsf") or code not in (200, 206):
                    return super()._reply(code, body, etag=etag, extra=extra)  # type: ignore[no-any-return]
                self.send_response(code)
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body[:cut])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)

        return Handler


def test_the_daemon_installs_a_file_its_origin_sends_in_cut_responses(
    tmp_path: Path, store: MemoryObjectStore,
) -> None:
    manifest = publish(store, ["a"], capacity=200_000)
    assert manifest.size > 2 * _CuttingStoreServer.CUT
    server = _CuttingStoreServer(store).start()
    config = agent_config(tmp_path, server.url)
    daemon = AgentDaemon(config, HttpAnnouncements(server.url, PUBLIC, timeout_s=5.0),
                         DirectTransfer(config.direct), CdnOrigin(server.url), PUBLIC,
                         metrics=AgentMetrics())
    try:
        daemon.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not installed(daemon, 1):
            daemon.step()
            time.sleep(0.005)
        assert installed(daemon, 1)
        assert metric(daemon, "verification_failures_total", check="size") == 0
        ranges = [headers.get("Range") for key, headers in server.requests if key.endswith("filter.bsf")]
        assert ranges == [None, f"bytes={_CuttingStoreServer.CUT}-", f"bytes={2 * _CuttingStoreServer.CUT}-"]
    finally:
        daemon.shutdown()
        server.stop()
