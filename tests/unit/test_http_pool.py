"""HttpPool: GETs on kept-alive connections against a real HTTP/1.1 server on loopback."""

from __future__ import annotations

import threading
import urllib.error
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from bloomswarm.agent.http_pool import MAX_REDIRECTS, HttpPool


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.connections = 0
        self.paths: list[str] = []
        self.close_after_answer = False
        self.lock = threading.Lock()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        with self.server.lock:
            self.server.connections += 1

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        with self.server.lock:
            self.server.paths.append(self.path)
        path = self.path.split("?", 1)[0]
        if path.startswith("/redirect/"):
            left = int(path.rsplit("/", 1)[1])
            self._answer(302, b"", location=f"/redirect/{left - 1}" if left else "/file")
        elif path == "/loop":
            self._answer(302, b"", location="/loop")
        elif path == "/missing":
            self._answer(404, b"no such key")
        elif path == "/etag" and self.headers.get("If-None-Match") == '"v1"':
            self._answer(304, b"")
        else:
            self._answer(200, b"x" * 1000, etag='"v1"')
        if self.server.close_after_answer:
            self.close_connection = True

    def _answer(self, status: int, body: bytes, *, location: str | None = None,
                etag: str | None = None) -> None:
        self.send_response(status)
        if location is not None:
            self.send_header("Location", location)
        if etag is not None:
            self.send_header("ETag", etag)
        if status != 304:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if status != 304:
            self.wfile.write(body)


@pytest.fixture
def server() -> Iterator[_Server]:
    srv = _Server()
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)


def _fetch(pool: HttpPool, url: str, **headers: str) -> bytes:
    with pool.get(url, headers, timeout=5) as response:
        return response.read()


def test_sequential_gets_share_one_connection(server: _Server) -> None:
    with HttpPool() as pool:
        for _ in range(5):
            assert _fetch(pool, f"{server.base}/file") == b"x" * 1000
        assert server.connections == 1
        assert pool.connections_opened == 1
        assert pool.idle_connections() == 1
    assert pool.idle_connections() == 0


def test_not_modified_and_not_found_raise_http_error_and_keep_the_connection(server: _Server) -> None:
    with HttpPool() as pool:
        with pytest.raises(urllib.error.HTTPError) as not_modified:
            _fetch(pool, f"{server.base}/etag", **{"If-None-Match": '"v1"'})
        assert not_modified.value.code == 304
        with pytest.raises(urllib.error.HTTPError) as missing:
            _fetch(pool, f"{server.base}/missing")
        assert missing.value.code == 404
        assert missing.value.read() == b"no such key"
        assert _fetch(pool, f"{server.base}/file") == b"x" * 1000
    assert server.connections == 1


def test_a_response_left_unread_closes_its_connection(server: _Server) -> None:
    with HttpPool() as pool:
        with pool.get(f"{server.base}/file", timeout=5) as response:
            assert response.read(10) == b"x" * 10
        assert pool.idle_connections() == 0
        assert _fetch(pool, f"{server.base}/file") == b"x" * 1000
        assert pool.connections_opened == 2


def test_a_connection_the_server_closed_is_replaced_once(server: _Server) -> None:
    server.close_after_answer = True  # answers keep-alive, then closes: the kept one is dead
    with HttpPool() as pool:
        for _ in range(3):
            assert _fetch(pool, f"{server.base}/file") == b"x" * 1000
    assert server.connections == 3


def test_redirects_are_followed_up_to_the_limit(server: _Server) -> None:
    with HttpPool() as pool:
        assert _fetch(pool, f"{server.base}/redirect/3") == b"x" * 1000
        assert server.paths[-5:] == ["/redirect/3", "/redirect/2", "/redirect/1", "/redirect/0", "/file"]
        with pytest.raises(urllib.error.URLError, match="redirects"):
            _fetch(pool, f"{server.base}/loop")
        assert server.paths.count("/loop") == MAX_REDIRECTS + 1


def test_connection_refused_is_a_url_error() -> None:
    idle = _Server()
    port = idle.server_address[1]
    idle.server_close()  # nothing listens there now
    with HttpPool() as pool, pytest.raises(urllib.error.URLError):
        _fetch(pool, f"http://127.0.0.1:{port}/file")


def test_a_connection_idle_too_long_is_not_reused(server: _Server) -> None:
    now = [0.0]
    with HttpPool(idle_timeout_s=10, clock=lambda: now[0]) as pool:
        _fetch(pool, f"{server.base}/file")
        now[0] = 9.0
        _fetch(pool, f"{server.base}/file")
        assert pool.connections_opened == 1
        now[0] = 19.5
        _fetch(pool, f"{server.base}/file")
        assert pool.connections_opened == 2


def test_at_most_max_idle_connections_are_kept(server: _Server) -> None:
    with HttpPool(max_idle=0) as pool:
        _fetch(pool, f"{server.base}/file")
        _fetch(pool, f"{server.base}/file")
        assert pool.idle_connections() == 0
    assert server.connections == 2


def test_threads_share_the_pool(server: _Server) -> None:
    errors: list[BaseException] = []
    with HttpPool(max_idle=4) as pool:
        def work() -> None:
            try:
                for _ in range(20):
                    assert _fetch(pool, f"{server.base}/file") == b"x" * 1000
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert not errors
        assert pool.connections_opened <= 4 + 4 * 20 // 2  # mostly reused
        assert server.connections == pool.connections_opened


def test_a_proxy_from_the_environment_is_used(server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("http_proxy", server.base)  # the test server answers as the proxy
    with HttpPool() as pool:
        assert _fetch(pool, "http://example.invalid/file") == b"x" * 1000
        assert server.paths[-1] == "http://example.invalid/file"  # the proxy's absolute form
        assert pool.connections_opened == 0


def test_not_an_http_url_is_refused() -> None:
    with HttpPool() as pool, pytest.raises(ValueError, match="http"):
        _fetch(pool, "ftp://127.0.0.1/file")


def test_no_proxy_hosts_are_fetched_directly_and_pooled(
        server: _Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # nothing answers there
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    with HttpPool() as pool:
        assert _fetch(pool, f"{server.base}/file") == b"x" * 1000
        assert pool.connections_opened == 1
