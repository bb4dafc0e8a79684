"""Shared pieces of the agent's unit tests: keys, publishing into a memory store, agents
driven step by step over an in-memory origin and transfer (no sockets, no sleeps), and,
for the tests of the HTTP code itself (DirectTransfer, HttpAnnouncements), an HTTP server
in front of the store (the "CDN").

A test module takes the ``store``, ``origin``, ``server`` and ``daemons`` fixtures by
naming them at its top level (an assignment, not an import: the tests' parameters of the
same name would shadow it)::

    store, origin, daemons = agent_helpers.store, agent_helpers.origin, agent_helpers.daemons
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import socket
import tempfile
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Protocol

import pytest

from bloomswarm.agent.announcements import AnnouncementSource, ObjectStoreAnnouncements
from bloomswarm.agent.config import (
    AgentConfig,
    DirectConfig,
    InstallConfig,
    OriginConfig,
    StatusConfig,
    WatchConfig,
)
from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.memory_transfer import MemoryOrigin, MemoryTransfer
from bloomswarm.agent.metrics import AgentMetrics
from bloomswarm.agent.transfer import Transfer
from bloomswarm.common.bucket_layout import delta_file_name, manifest_key, signature_key_of
from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.errors import ObjectNotFound
from bloomswarm.common.manifest import Manifest, sign_manifest
from bloomswarm.common.pointer import Pointer
from bloomswarm.common.signing import SigningKey, VerifyKey, generate_keypair, parse_private_key
from bloomswarm.common.storage import MemoryObjectStore, S3Config
from bloomswarm.publisher.config import DeltaConfig, PublisherConfig
from bloomswarm.publisher.latest import Target, swap_latest
from bloomswarm.publisher.publish import publish_filter
from bloomswarm.publisher.torrent import make_torrent


def _keypair() -> tuple[SigningKey, bytes]:
    private, public = generate_keypair()
    return parse_private_key(private), public


KEY, PUBLIC_PEM = _keypair()
"""The publisher's key, trusted by the agents in these tests."""
ROGUE_KEY, ROGUE_PEM = _keypair()
"""A key no agent trusts."""
PUBLIC = [KEY.public_key()]
PUBLISHER = PublisherConfig(s3=S3Config(bucket="unit-test"), publisher_id="unit-test",
                            deltas=DeltaConfig(max_bases=0))
"""Publishes full versions only: the agent tests of the file's path stay on it."""
DELTA_PUBLISHER = dataclasses.replace(PUBLISHER, deltas=DeltaConfig(max_share=1.0))
"""Publishes a delta from every recent version (however large: unit-test filters are
small, and a delta carries the target's 4 KiB header)."""


def make_builder(keys: list[str], *, capacity: int = 1000) -> FilterBuilder:
    builder = FilterBuilder.for_capacity(capacity, 0.01)
    builder.add_many(keys)
    return builder


def stage_file(data_dir: Path, version: int, data: bytes) -> Path:
    """``data`` written as version ``version``'s staged download in ``data_dir``."""
    staging = DataDir(data_dir).staging_dir(version)
    staging.mkdir(parents=True)
    path = staging / "filter.bsf"
    path.write_bytes(data)
    return path


def install_fake_versions(data_dir: Path, *versions: int) -> None:
    """Install ``versions`` into ``data_dir`` as the agent would (a staged file renamed in,
    its documents beside it), each file holding a few bytes: what garbage collection sees."""
    from bloomswarm.agent.install import InstalledDocuments, install_version

    documents = InstalledDocuments(manifest=b"{}", manifest_signature=b"sig", torrent=b"t")
    for version in versions:
        staging = DataDir(data_dir).staging_dir(version)
        staging.mkdir(parents=True, exist_ok=True)
        (staging / "filter.bsf").write_bytes(f"v{version}".encode())
        install_version(data_dir, version, staging / "filter.bsf", documents)
        staging.rmdir()


def publish(
    store: MemoryObjectStore, keys: list[str], *, capacity: int = 1000, key: SigningKey = KEY,
    deltas: bool = False,
) -> Manifest:
    """Publish a filter of ``keys`` as the next version with the real publisher; with
    ``deltas``, with a delta from each recent version of the same parameters."""
    config = DELTA_PUBLISHER if deltas else PUBLISHER
    result = publish_filter(store, config, make_builder(keys, capacity=capacity), key,
                            "unit-test", force=True, progress=False)
    return result.manifest


def resign_delta(
    store: MemoryObjectStore, version: int, base: int, data: bytes, *, piece_size: int | None = None
) -> Manifest:
    """Replace ``version``'s delta from ``base`` with ``data`` *and sign it*: the object, a
    fresh torrent of it (``piece_size``: the publisher's choice by default) and the
    manifest entry's size, SHA-256 and info-hashes (a publisher that signed a bad delta;
    or, with the genuine bytes, a torrent of smaller pieces)."""
    stored = store.get(manifest_key(version))
    assert stored is not None
    manifest = Manifest.from_bytes(stored.data)
    entry = manifest.delta_from(base)
    assert entry is not None, f"v{version} has no delta from v{base}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / delta_file_name(base)
        path.write_bytes(data)
        torrent = make_torrent(path, piece_size=piece_size, progress=False,
                               torrent_format="v1" if manifest.info_hash_v2 is None else "hybrid")
    store.put(entry.key, data)
    store.put(entry.torrent_key, torrent.data)
    new_entry = dataclasses.replace(entry, size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                                    info_hash_v1=torrent.info_hash_v1, info_hash_v2=torrent.info_hash_v2)
    deltas = tuple(new_entry if d.base_version == base else d for d in manifest.deltas)
    document, signature = sign_manifest(dataclasses.replace(manifest, deltas=deltas), KEY)
    store.put(manifest_key(version), document)
    store.put(signature_key_of(manifest_key(version)), signature)
    return Manifest.from_bytes(document)


def point_latest(
    store: MemoryObjectStore, version: int, *, pinned: bool = False, key: SigningKey = KEY
) -> Pointer:
    """Move latest.json to ``version`` whatever it names (a downgrade, a pin)."""
    outcome = swap_latest(store, lambda _current: Target(version, pinned=pinned), key, "unit-test")
    assert outcome.pointer is not None
    return outcome.pointer


_RANGE = re.compile(r"bytes=(\d+)-(\d*)")


class StoreServer:
    """An HTTP server on 127.0.0.1 serving a MemoryObjectStore's objects at ``/{key}``.

    Answers ETag / If-None-Match (304) and single byte ranges, counts the payload bytes it
    served per key, and can be told to fail every request (``failing``, 503) or to ignore
    ranges (``ignore_range``). Runs in a thread of the test process; :meth:`stop` closes it.
    """

    def __init__(self, store: MemoryObjectStore) -> None:
        self.store = store
        self.failing = False
        self.ignore_range = False
        self.served: Counter[str] = Counter()
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> StoreServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                key = urllib.parse.unquote(self.path.lstrip("/").split("?", 1)[0])
                outer.requests.append((key, dict(self.headers.items())))
                if outer.failing:
                    return self._reply(503, b"unavailable")
                try:
                    obj = outer.store.get(key)
                except (ObjectNotFound, ValueError):
                    return self._reply(404, b"not found")
                assert obj is not None
                if self.headers.get("If-None-Match") == obj.etag:
                    return self._reply(304, b"", etag=obj.etag)
                match = _RANGE.fullmatch(self.headers.get("Range", ""))
                if match is None or outer.ignore_range:
                    outer.served[key] += len(obj.data)
                    return self._reply(200, obj.data, etag=obj.etag)
                start = int(match.group(1))
                end = int(match.group(2)) + 1 if match.group(2) else len(obj.data)
                if start >= len(obj.data):
                    return self._reply(416, b"", extra={"Content-Range": f"bytes */{len(obj.data)}"})
                body = obj.data[start:end]
                outer.served[key] += len(body)
                return self._reply(206, body, etag=obj.etag, extra={
                    "Content-Range": f"bytes {start}-{start + len(body) - 1}/{len(obj.data)}"})

            def _reply(self, code: int, body: bytes, *, etag: str | None = None,
                       extra: dict[str, str] | None = None) -> None:
                self.send_response(code)
                if etag:
                    self.send_header("ETag", etag)
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body) if code != 304 else 0))
                self.end_headers()
                if code != 304:
                    self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def store() -> MemoryObjectStore:
    """An empty in-memory object store."""
    return MemoryObjectStore()


@pytest.fixture
def origin(store: MemoryObjectStore) -> MemoryOrigin:
    """The in-memory origin in front of ``store``."""
    return MemoryOrigin(store)


@pytest.fixture
def server(store: MemoryObjectStore) -> Iterator[StoreServer]:
    """A running StoreServer in front of ``store``, stopped at the end of the test."""
    server = StoreServer(store).start()
    yield server
    server.stop()


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test on any socket opened or ``time.sleep`` called: the agent's tests over
    the in-memory origin and transfer need neither (a module takes it with
    ``pytestmark = pytest.mark.usefixtures("offline")``)."""

    def refuse(what: str) -> Callable[..., Any]:
        def refused(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError(f"{what} called in a test that must not use it")

        return refused

    monkeypatch.setattr(socket, "socket", refuse("socket.socket"))
    monkeypatch.setattr(socket, "create_connection", refuse("socket.create_connection"))
    monkeypatch.setattr(time, "sleep", refuse("time.sleep"))


class Serving(Protocol):
    """An origin that counts the payload bytes it served by key (StoreServer, MemoryOrigin)."""

    served: Counter[str]


def served_filter_bytes(origin: Serving) -> int:
    """Bytes of filter files the origin sent."""
    return sum(n for key, n in origin.served.items() if key.endswith("/filter.bsf"))


def served_delta_bytes(origin: Serving) -> int:
    """Bytes of delta files the origin sent."""
    return sum(n for key, n in origin.served.items() if key.endswith(".bsd"))


class TickingClock:
    """A monotonic clock that moves ``tick`` seconds at every reading, from ``start`` (an
    agent stepped in a loop sees time pass as it runs, and no test waits for real time).
    It starts near zero, as on a machine that booted a second ago."""

    def __init__(self, start: float = 1.0, tick: float = 0.01) -> None:
        self.now = start
        self.tick = tick

    def __call__(self) -> float:
        self.now += self.tick
        return self.now


def agent_config(tmp_path: Path, base_url: str | None = None, **changes: Any) -> AgentConfig:
    """A fast agent configuration with tight intervals. Its origin is the bucket (``[s3]``),
    or the HTTP server at ``base_url`` with a direct transfer (the daemon itself reads
    neither: the test hands it its source, transfer and origin)."""
    public = tmp_path / "publisher.pub"
    if not public.exists():
        public.write_bytes(PUBLIC_PEM)
    where: dict[str, Any] = (
        {"s3": S3Config(bucket="unit-test")} if base_url is None
        else {"origin": OriginConfig(cdn_base_url=base_url, http_timeout_s=5.0)}
    )
    fields: dict[str, Any] = {
        "data_dir": tmp_path / "data",
        "public_keys": (public,),
        "transfer": "direct",
        "resume_save_interval_s": 0.05,
        **where,
        "watch": WatchConfig(poll_interval_s=0.02, poll_jitter_s=0.0, retry_initial_s=0.02,
                             retry_max_s=0.1),
        "install": InstallConfig(disk_margin_bytes=0),
        "status": StatusConfig(port=0),
        "direct": DirectConfig(timeout_s=5.0),
    }
    fields.update(changes)
    return AgentConfig(**fields)


def make_daemon(
    config: AgentConfig,
    origin: MemoryOrigin,
    public_keys: Sequence[VerifyKey] = PUBLIC,
    *,
    transfer: Transfer | None = None,
    source: AnnouncementSource | None = None,
    **options: Any,
) -> AgentDaemon:
    """An agent pinning ``public_keys`` that reads announcements through ``origin`` and
    downloads from it with a MemoryTransfer (or ``source``, ``transfer``), on a
    TickingClock; started. ``options`` go to AgentDaemon (``wall_clock``, ...)."""
    keys = list(public_keys)
    daemon = AgentDaemon(config, source or ObjectStoreAnnouncements(origin, keys),
                         transfer or MemoryTransfer(origin), origin, keys,
                         metrics=AgentMetrics(), clock=TickingClock(), **options)
    daemon.start()
    return daemon


@pytest.fixture
def daemons() -> Iterator[list[AgentDaemon]]:
    """Agents made by a test; each is shut down (transfer closed) at the end."""
    made: list[AgentDaemon] = []
    yield made
    for daemon in made:
        daemon.shutdown()


def installed(daemon: AgentDaemon, version: int) -> bool:
    """Whether ``daemon``'s ``current`` link names ``version``."""
    return daemon.layout.current_version() == version


def run_until(daemon: AgentDaemon, condition: Callable[[], bool], *, max_steps: int = 1000) -> None:
    """Step ``daemon`` until ``condition()`` holds; AssertionError (with the agent's status)
    when it does not within ``max_steps`` steps."""
    for _ in range(max_steps):
        if condition():
            return
        daemon.step()
    if not condition():
        raise AssertionError(f"condition not reached in {max_steps} steps; agent status: {daemon.status()}")


def metric(daemon: AgentDaemon, name: str, **labels: str) -> float:
    """A sample of the agent's registry (0 when absent)."""
    value = daemon.metrics.registry.get_sample_value(f"bloomswarm_agent_{name}", labels or None)
    return float(value or 0.0)


def stepping(daemon: AgentDaemon, steps: int) -> Iterator[int]:
    """Step the daemon ``steps`` times, yielding the step number."""
    for number in range(steps):
        daemon.step()
        yield number
