"""PresignedPollReader: latest.json and index.json by a conditional GET on a presigned URL each,
the rest via the store."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from bloomswarm.agent.announcements import PresignedPollReader
from bloomswarm.common.bucket_layout import INDEX_KEY, LATEST_KEY
from bloomswarm.common.errors import ObjectNotFound, StorageError
from bloomswarm.common.storage import StoredObject


class _Server:
    """Answers GET with ``self.code`` (200: body "pointer", ETag "e1"; 304 when
    If-None-Match is "e1"), recording each request's path."""

    def __init__(self) -> None:
        self.code = 200
        self.paths: list[str] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.paths.append(self.path)
                unchanged = server.code == 200 and self.headers.get("If-None-Match") == "e1"
                code = 304 if unchanged else server.code
                body = b"pointer" if code == 200 else b""
                self.send_response(code)
                self.send_header("ETag", "e1")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()
        self.base = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def server() -> Iterator[_Server]:
    running = _Server()
    yield running
    running.httpd.shutdown()
    running.httpd.server_close()


class _Store:
    def __init__(self, base: str) -> None:
        self.base = base
        self.signed: list[str] = []
        self.gets: list[str] = []

    def presigned_get_url(self, key: str, expires_s: int) -> str:
        self.signed.append(key)
        return f"{self.base}/{key}?X-Amz-Signature=secret{len(self.signed)}"

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None:
        self.gets.append(key)
        return StoredObject(data=b"from-store", etag="s1")


def test_latest_is_polled_on_one_presigned_url_until_half_its_lifetime(server: _Server) -> None:
    store = _Store(server.base)
    now = [0.0]
    reader = PresignedPollReader(store, expiry_s=100, clock=lambda: now[0])
    assert reader.get(LATEST_KEY) == StoredObject(data=b"pointer", etag="e1")
    assert reader.get(LATEST_KEY, if_none_match="e1") is None  # 304
    now[0] = 49.0
    reader.get(LATEST_KEY)
    assert store.signed == [LATEST_KEY] and store.gets == []
    now[0] = 50.0
    reader.get(LATEST_KEY)
    assert store.signed == [LATEST_KEY, LATEST_KEY]
    assert [p.split("=")[-1] for p in server.paths] == ["secret1", "secret1", "secret1", "secret2"]


def test_the_index_is_polled_on_its_own_presigned_url(server: _Server) -> None:
    store = _Store(server.base)
    reader = PresignedPollReader(store)
    assert reader.get(INDEX_KEY) == StoredObject(data=b"pointer", etag="e1")
    assert reader.get(INDEX_KEY, if_none_match="e1") is None  # 304
    reader.get(LATEST_KEY)
    assert store.signed == [INDEX_KEY, LATEST_KEY] and store.gets == []
    assert [p.split("?")[0] for p in server.paths] == [f"/{INDEX_KEY}"] * 2 + [f"/{LATEST_KEY}"]


def test_other_documents_go_through_the_store(server: _Server) -> None:
    store = _Store(server.base)
    assert PresignedPollReader(store).get("v1/manifest.json") == StoredObject(b"from-store", "s1")
    assert store.gets == ["v1/manifest.json"] and server.paths == []


def test_a_refused_url_is_dropped_and_the_store_answers(server: _Server) -> None:
    store = _Store(server.base)
    reader = PresignedPollReader(store)
    server.code = 403
    assert reader.get(LATEST_KEY) == StoredObject(b"from-store", "s1")
    server.code = 200
    reader.get(LATEST_KEY)
    assert len(store.signed) == 2  # signed again after the 403


@pytest.mark.parametrize(("code", "error"), [(404, ObjectNotFound), (503, StorageError)])
def test_errors_name_the_key_not_the_signature(server: _Server, code: int, error: type[Exception]) -> None:
    server.code = code
    with pytest.raises(error) as caught:
        PresignedPollReader(_Store(server.base)).get(LATEST_KEY)
    assert LATEST_KEY in str(caught.value) and "secret" not in str(caught.value)
