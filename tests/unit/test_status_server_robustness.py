"""The agent's status endpoint against slow, silent, flooding and vanishing clients, and
``bloomswarm agent status`` against answers that are not an agent's status."""

from __future__ import annotations

import json
import logging
import socket
import struct
import threading
import time
import tracemalloc
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from bloomswarm.agent import status_server as status_server_module
from bloomswarm.agent.metrics import AgentMetrics
from bloomswarm.agent.status_server import StatusServer
from bloomswarm.main import main

# --- the status server ------------------------------------------------------------------------


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[], dict[str, Any]]], StatusServer]]:
    """Start a StatusServer on 127.0.0.1:0 with the given provider; stopped afterwards."""
    started: list[StatusServer] = []

    def start(provider: Callable[[], dict[str, Any]]) -> StatusServer:
        server = StatusServer(AgentMetrics(), provider, "127.0.0.1", 0)
        server.start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _address(server: StatusServer) -> tuple[str, int]:
    return server.host, server.port


def _closed_by_server(sock: socket.socket, wait: float) -> bool:
    """True when the server ended the connection (EOF or reset) within ``wait`` seconds."""
    sock.settimeout(wait)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _healthz(server: StatusServer) -> int:
    with urllib.request.urlopen(f"{server.url}/healthz", timeout=3) as response:
        return int(response.status)


def _handler_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if "process_request_thread" in t.name]


def test_a_silent_client_is_dropped_after_the_timeout(
    serve: Callable[..., StatusServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(status_server_module, "REQUEST_TIMEOUT_S", 0.5)
    server = serve(dict)
    with socket.create_connection(_address(server)) as silent:
        started = time.monotonic()
        assert _closed_by_server(silent, 5.0)
        assert time.monotonic() - started < 3.0
    assert _healthz(server) == 200


def test_a_request_dripped_a_byte_at_a_time_is_dropped_after_the_timeout(
    serve: Callable[..., StatusServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeout bounds the whole request, not each read (slowloris)."""
    monkeypatch.setattr(status_server_module, "REQUEST_TIMEOUT_S", 1.0)
    server = serve(dict)
    with socket.create_connection(_address(server)) as slow:
        slow.sendall(b"GET /status HTTP/1.1\r\n")
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < 5.0 and not closed:
            try:
                slow.sendall(b"X")
            except OSError:
                closed = True
                break
            closed = _closed_by_server(slow, 0.2)
        assert closed
        assert time.monotonic() - started < 4.0


def test_more_idle_connections_than_the_cap_do_not_stop_healthz(
    serve: Callable[..., StatusServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(status_server_module, "MAX_CONNECTIONS", 4)
    monkeypatch.setattr(status_server_module, "REQUEST_TIMEOUT_S", 60.0)
    server = serve(dict)
    idle = [socket.create_connection(_address(server)) for _ in range(20)]
    try:
        for sock in idle[::2]:
            sock.sendall(b"GET /status HTTP/1.1\r\n")  # half of them mid-request
        for _ in range(3):
            assert _healthz(server) == 200
        deadline = time.monotonic() + 5.0
        while len(_handler_threads()) > 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_handler_threads()) <= 4  # the server holds no more than its cap
        closed = sum(_closed_by_server(sock, 0.05) for sock in idle)
        assert closed >= 16
    finally:
        for sock in idle:
            sock.close()


def _wait_for_handlers(timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while _handler_threads() and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_client_gone_mid_response_leaves_no_traceback(
    serve: Callable[..., StatusServer], capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    closed = threading.Event()

    def provider() -> dict[str, Any]:
        closed.wait(5.0)
        return {"padding": "x" * (4 << 20)}  # more than any socket buffer holds

    server = serve(provider)
    for _ in range(3):
        client = socket.create_connection(_address(server))
        client.sendall(b"GET /status HTTP/1.0\r\n\r\n")
        time.sleep(0.1)  # the request read, the provider waiting
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.close()  # a reset, mid-response
        closed.set()
        _wait_for_handlers()
        closed.clear()
    assert _healthz(server) == 200
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_bug_in_the_handler_is_logged_once_with_its_traceback(
    serve: Callable[..., StatusServer], capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    def provider() -> dict[str, Any]:
        raise RuntimeError("the provider broke")

    server = serve(provider)
    with caplog.at_level(logging.DEBUG):
        with pytest.raises(urllib.error.HTTPError) as raised:
            urllib.request.urlopen(f"{server.url}/status", timeout=3)
        raised.value.close()
        _wait_for_handlers()
    assert raised.value.code == 500
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
    assert "the provider broke" in str(errors[0].exc_info[1])
    assert "Exception occurred" not in capfd.readouterr().err
    assert _healthz(server) == 200


# --- bloomswarm agent status against a fake server ------------------------------------------


def _json(doc: Any) -> bytes:
    return json.dumps(doc).encode()


BODIES: dict[str, bytes] = {
    "pointer": _json({"pointer": {"version": 1}}),
    "download": _json({"download": {"version": 2}}),
    "types": _json({"metrics": [], "installed_versions": 5}),
    "ts": _json({"current_version": 1,
                 "metrics": {"bloomswarm_agent_current_version_created_timestamp_seconds": 1e20}}),
    "errat": _json({"last_error": "x", "last_error_at": "soon"}),
    "filters": _json({"filters": 5}),
    "swap": _json({"last_swap": {"version": 1}}),
    "nan": b'{"current_version": 1, "metrics": {"bloomswarm_agent_current_version_age_seconds": NaN}}',
    "deep": b"[" * 100_000 + b"]" * 100_000,
    "list": b"[1, 2]",
    "html": b"<html>hello</html>",
    "binary": b"\xff\xfe\x00garbage",
}


class _Fake(BaseHTTPRequestHandler):
    stop: threading.Event

    def do_GET(self) -> None:
        case = self.path.strip("/").split("/")[0]
        try:
            if case in BODIES:
                body = BODIES[case]
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            elif case == "huge":  # 100 MiB, no length
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b'{"x": "')
                chunk = b"a" * (1 << 20)
                for _ in range(100):
                    self.wfile.write(chunk)
                self.wfile.write(b'"}')
            elif case == "huge-length":  # says 1 GB up front
                self.send_response(200)
                self.send_header("Content-Length", str(10**9))
                self.end_headers()
                self.wfile.write(b'{"x": "' + b"a" * (1 << 20))
                self.stop.wait(10)
            elif case in ("drip", "drip-headers"):  # one byte every 0.1 s for 10 s
                self.wfile.write(b"HTTP/1.0 200 OK\r\n")
                if case == "drip":
                    self.wfile.write(b"Content-Type: application/json\r\n\r\n{\"a\": \"")
                else:
                    self.wfile.write(b"X-Slow: ")
                self.wfile.flush()
                for _ in range(100):
                    if self.stop.wait(0.1):
                        return
                    self.wfile.write(b"x")
                    self.wfile.flush()
            elif case == "garbage":  # not HTTP
                self.wfile.write(b"hello there\r\n\r\n")
            else:
                self.send_error(404)
        except OSError:
            pass  # the client gave up

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _FakeServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


@pytest.fixture
def fake() -> Iterator[str]:
    stop = threading.Event()
    handler = type("Handler", (_Fake,), {"stop": stop})
    server = _FakeServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.1,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def _status(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, float]:
    started = time.monotonic()
    code = main(["agent", "status", *args])
    elapsed = time.monotonic() - started
    return code, capsys.readouterr().err.strip(), elapsed


def _assert_one_line(err: str) -> None:
    assert err and "\n" not in err and "Traceback" not in err and "internal error" not in err


NOT_JSON_OBJECTS = ["nan", "deep", "list", "html", "binary"]
"""The cases --json refuses too (the others are JSON objects, printed as they are)."""


@pytest.mark.parametrize(
    ("case", "as_json"),
    [(case, False) for case in sorted(BODIES)] + [(case, True) for case in NOT_JSON_OBJECTS],
)
def test_status_of_a_document_that_is_not_an_agents_status(
    fake: str, case: str, as_json: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{fake}/{case}"
    code, err, _ = _status(capsys, "--url", url, *(["--json"] if as_json else []))
    assert code == 1
    _assert_one_line(err)
    assert err.startswith(f"bloomswarm agent: error: {url} did not answer with an agent's status: ")


def test_status_of_a_server_that_does_not_speak_http(fake: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, _ = _status(capsys, "--url", f"{fake}/garbage")
    assert code == 1
    _assert_one_line(err)


@pytest.mark.parametrize("case", ["huge", "huge-length"])
def test_status_of_a_huge_answer_is_refused_without_reading_it_all(
    fake: str, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{fake}/{case}"
    tracemalloc.start()
    try:
        code, err, elapsed = _status(capsys, "--url", url, "--timeout", "5")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 1
    _assert_one_line(err)
    assert err.startswith(f"bloomswarm agent: error: {url} did not answer with an agent's status: ")
    assert peak < 48 << 20
    assert elapsed < 8.0


@pytest.mark.parametrize("case", ["drip", "drip-headers"])
def test_status_of_a_dripping_server_ends_at_the_timeout(
    fake: str, case: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{fake}/{case}"
    code, err, elapsed = _status(capsys, "--url", url, "--timeout", "1")
    assert code == 1
    _assert_one_line(err)
    assert err == f"bloomswarm agent: error: no agent answering at {url}: timed out"
    assert elapsed < 4.0


@pytest.mark.parametrize("url", ["http://127.0.0.1:1/a b", "http://127.0.0.1:port"])
def test_status_of_a_bad_url_is_one_line(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, err, _ = _status(capsys, "--url", url)
    assert code in (1, 2)
    _assert_one_line(err)
    assert err.startswith("bloomswarm agent")
