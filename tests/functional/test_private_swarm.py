"""Functional: a private swarm (issue 14) and the peer allow-list, with real sessions.

Each agent is a swarm worker in its own process (:mod:`bloomswarm.sandbox.swarm_worker`),
the tracker is Debian's opentracker, and the outsiders are:

- a bare libtorrent session with no certificate;
- a bare libtorrent session with a certificate from another CA (a valid one, SAN "*");
- aria2c, given the torrent (the right info-hash) and the tracker (the agents' addresses).

Outsiders must get 0 payload bytes by their own counters, and the agents must count the
refusals. The allow-list test runs in a network namespace the test creates, with two
addresses on its loopback: the agents on one, the outsider on the other. Every
process is stopped by its PID; the namespace is deleted.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import ipaddress
import os
import shutil
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from bloomswarm.common.file_hash import file_sha256
from bloomswarm.common.tls_identity import issue_certificate, make_ca
from bloomswarm.sandbox.http_range import parse_range
from bloomswarm.sandbox.processes import free_port
from bloomswarm.sandbox.swarm_worker import WorkerProcess
from bloomswarm.sandbox.tracker import OpenTracker
from bloomswarm.sandbox.worker_swarm import MIB, TestTorrent, make_test_torrent, write_random_file
from tests.functional.netns import network_namespace

pytestmark = pytest.mark.timeout(240)

NOW = datetime.datetime.now(datetime.timezone.utc)
FILE_SIZE = 4 * MIB


def _identity(directory: Path, ca: tuple[bytes, bytes], name: str) -> Path:
    """``directory`` holding tls.crt and tls.key issued by ``ca`` (as a TLS Secret would)."""
    cert, key = issue_certificate(ca[0], ca[1], name=name, days=30, now=NOW)
    directory.mkdir(parents=True)
    (directory / "tls.crt").write_bytes(cert)
    (directory / "tls.key").write_bytes(key)
    return directory


@pytest.fixture
def workers() -> Iterator[Callable[..., WorkerProcess]]:
    """Start swarm workers; every one is stopped (by its PID) and cleaned up afterwards."""
    started: list[WorkerProcess] = []

    def start(spec: dict[str, Any], name: str, prefix: tuple[str, ...] = (),
              env: dict[str, str] | None = None) -> WorkerProcess:
        worker = WorkerProcess(spec, name=name, prefix=prefix, env=env)
        started.append(worker)
        return worker.start()

    yield start
    for worker in started:
        worker.stop()
        worker.cleanup()


def _swarm(address: str = "127.0.0.1", **settings: Any) -> dict[str, Any]:
    return {"listen_interfaces": f"{address}:0", "enable_dht": False, "trackers": [],
            "peer_rediscovery_s": 1.0, **settings}


def _spec(torrent: TestTorrent, directory: Path, swarm: dict[str, Any], mode: str,
          **extra: Any) -> dict[str, Any]:
    return {"swarm": swarm, "version": 1, "torrent": str(torrent.torrent_path), "dir": str(directory),
            "mode": mode, "origin_url": None, "poll_interval": 0.05, "report_interval": 0.3, **extra}


def _outsider_bytes(outsider: WorkerProcess) -> int:
    report = outsider.latest or {}
    return int(report.get("total_payload_download", -1))


# --- private mode ----------------------------------------------------------------------------


@pytest.fixture
def opentracker() -> Iterator[OpenTracker]:
    if shutil.which("opentracker") is None:
        pytest.skip("opentracker is not installed (scripts/test.sh installs it)")
    tracker = OpenTracker().start()
    try:
        yield tracker
    finally:
        tracker.stop()


def test_a_private_swarm_converges_and_outsiders_get_nothing(
    tmp_path: Path, opentracker: OpenTracker, workers: Callable[..., WorkerProcess]
) -> None:
    fleet_ca, other_ca = make_ca("fleet", days=60, now=NOW), make_ca("other", days=60, now=NOW)
    seed_dir = tmp_path / "seed"
    seed_dir.mkdir()
    write_random_file(seed_dir / "filter.bsf", FILE_SIZE)
    torrent = make_test_torrent(seed_dir / "filter.bsf", v1_only=True,
                                trackers=[opentracker.announce_url], root_cert=fleet_ca[0].decode())
    opentracker.allow(torrent.info_hash_v1)
    trackers = [opentracker.announce_url]

    seed = workers(_spec(torrent, seed_dir, _swarm(trackers=trackers, certificate_dirs=[
        str(_identity(tmp_path / "id-seed", fleet_ca, "agent-seed"))]), "seed"), "seed")
    assert seed.ssl_port > 0, "an agent with certificates listens for TLS"
    leecher = workers(_spec(torrent, tmp_path / "leecher", _swarm(trackers=trackers, certificate_dirs=[
        str(_identity(tmp_path / "id-leecher", fleet_ca, "agent-leecher"))]), "download"), "leecher")
    done = leecher.wait_finished(90)
    assert done["finished"] and done["bytes_from_peers"] == FILE_SIZE
    assert file_sha256(tmp_path / "leecher" / "filter.bsf") == torrent.sha256

    # The outsiders: every address and port the agents listen on.
    agent_ports = [["127.0.0.1", port] for w in (seed, leecher) for port in (w.port, w.ssl_port)]
    stranger = _identity(tmp_path / "id-stranger", other_ca, "stranger")
    outsiders = [
        workers(_spec(torrent, tmp_path / "no-cert", {}, "outsider", peers=agent_ports), "no-cert"),
        workers(_spec(torrent, tmp_path / "other-ca", {}, "outsider", peers=agent_ports,
                      certificate=str(stranger / "tls.crt"), key=str(stranger / "tls.key")), "other-ca"),
    ]
    aria2 = _run_aria2c(torrent, opentracker.announce_url, tmp_path / "aria2")
    for outsider in outsiders:
        outsider.wait_for(lambda r: int(r.get("attempts", 0)) >= 6, timeout=30)
        assert _outsider_bytes(outsider) == 0, f"{outsider.name} received payload"
    assert aria2.returncode != 0, "aria2c cannot complete a private swarm's download"
    assert not (tmp_path / "aria2" / "filter.bsf").exists() or not any(
        (tmp_path / "aria2" / "filter.bsf").read_bytes()), "aria2c received payload"

    refused = collections.Counter(_refused(seed)) + collections.Counter(_refused(leecher))
    assert refused["tls_handshake"] >= 2, refused  # no certificate, another CA, aria2c
    uploaded = sum(int((w.latest or {}).get("bytes_uploaded", 0)) for w in (seed, leecher))
    assert uploaded == FILE_SIZE, "the agents uploaded only to each other"


def _refused(worker: WorkerProcess) -> dict[str, int]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        refused = dict((worker.latest or {}).get("refused", {}))
        if refused:
            return refused
        time.sleep(0.3)
    return {}


def _run_aria2c(torrent: TestTorrent, tracker: str, out: Path) -> subprocess.CompletedProcess[bytes]:
    """aria2c fetching the private torrent with the agents from the tracker; it gives up
    after 12 s without progress."""
    aria2c = shutil.which("aria2c")
    if aria2c is None:
        pytest.skip("aria2c is not installed (scripts/test.sh installs it)")
    command = [aria2c, f"--dir={out}", f"--bt-tracker={tracker}", "--enable-dht=false",
               "--enable-dht6=false", "--bt-enable-lpd=false", "--enable-peer-exchange=false",
               f"--listen-port={free_port()}", "--interface=127.0.0.1", "--seed-time=0",
               "--bt-stop-timeout=12", "--console-log-level=warn", "--summary-interval=0",
               "--file-allocation=none", str(torrent.torrent_path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGKILL)
            output, _ = process.communicate(timeout=10)
    return subprocess.CompletedProcess(command, process.returncode, output)


# --- the allow-list ---------------------------------------------------------------------------


@pytest.fixture
def netns() -> Iterator[str]:
    """A fresh network namespace with 10.77.0.1 and 10.77.0.2 on its loopback."""
    with network_namespace("bsw-allow", [["addr", "add", "10.77.0.1/32", "dev", "lo"],
                                         ["addr", "add", "10.77.0.2/32", "dev", "lo"]]) as name:
        yield name


@pytest.mark.parametrize("private", [False, True], ids=["public", "private"])
def test_a_peer_outside_the_allowed_networks_is_refused(
    tmp_path: Path, netns: str, workers: Callable[..., WorkerProcess], private: bool
) -> None:
    """Agents on 10.77.0.1 allow only 10.77.0.1/32: a second agent there downloads, an
    outsider on 10.77.0.2 (with a valid certificate, in the private case) gets nothing."""
    inside = ("ip", "netns", "exec", netns)
    ca = make_ca("fleet", days=60, now=NOW)
    seed_dir = tmp_path / "seed"
    seed_dir.mkdir()
    write_random_file(seed_dir / "filter.bsf", FILE_SIZE)
    torrent = make_test_torrent(seed_dir / "filter.bsf", v1_only=True,
                                root_cert=ca[0].decode() if private else None)

    def agent_swarm(name: str) -> dict[str, Any]:
        certs = {"certificate_dirs": [str(_identity(tmp_path / f"id-{name}", ca, name))]} if private else {}
        return _swarm("10.77.0.1", allowed_peer_networks=["10.77.0.1/32"], **certs)

    seed = workers(_spec(torrent, seed_dir, agent_swarm("seed"), "seed"), "seed", inside)
    port = seed.ssl_port if private else seed.port
    leecher = workers(_spec(torrent, tmp_path / "leecher", agent_swarm("leecher"), "download",
                            peers=[["10.77.0.1", port]]), "leecher", inside)
    assert leecher.wait_finished(90)["bytes_from_peers"] == FILE_SIZE

    outsider_id = _identity(tmp_path / "outsider-id", ca, "outsider") if private else None
    outsider = workers(_spec(torrent, tmp_path / "outsider", {}, "outsider", address="10.77.0.2",
                             peers=[["10.77.0.1", port]],
                             **({"certificate": str(outsider_id / "tls.crt"),
                                 "key": str(outsider_id / "tls.key")} if outsider_id else {})),
                       "outsider", inside)
    outsider.wait_for(lambda r: int(r.get("attempts", 0)) >= 6, timeout=30)
    assert _outsider_bytes(outsider) == 0
    assert _refused(seed).get("address", 0) >= 1


# --- an HTTPS origin ------------------------------------------------------------------------


class _HttpsFile:
    """``path`` served with byte ranges over TLS on 127.0.0.1, under a certificate for
    127.0.0.1 from a CA of its own (``ca_file``, to be trusted through SSL_CERT_FILE)."""

    def __init__(self, path: Path, directory: Path) -> None:
        self.path = path
        self.sent = 0
        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test origin")])
        cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(NOW - datetime.timedelta(minutes=5))
                .not_valid_after(NOW + datetime.timedelta(days=2))
                .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                               critical=False)
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256()))
        self.ca_file = directory / "origin-ca.pem"
        self.ca_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file = directory / "origin-key.pem"
        key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca_file, key_file)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self._server.server_address[1]}/{self.path.name}"

    def __enter__(self) -> _HttpsFile:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        origin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                data = origin.path.read_bytes()
                span = parse_range(self.headers.get("Range"), len(data))
                first, last = span if span is not None else (0, len(data) - 1)
                self.send_response(206 if span is not None else 200)
                self.send_header("Content-Length", str(last - first + 1))
                if span is not None:
                    self.send_header("Content-Range", f"bytes {first}-{last}/{len(data)}")
                self.end_headers()
                self.wfile.write(data[first:last + 1])
                origin.sent += last - first + 1

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler


def test_a_private_version_downloads_from_an_https_origin(
    tmp_path: Path, workers: Callable[..., WorkerProcess]
) -> None:
    """libtorrent checks an HTTPS web seed of an SSL torrent against the torrent's CA, so
    the agent hands it the origin through its loopback relay (agent/origin_relay.py),
    which checks the origin's certificate against the trust store (here SSL_CERT_FILE)."""
    ca = make_ca("fleet", days=60, now=NOW)
    source = tmp_path / "source"
    source.mkdir()
    write_random_file(source / "filter.bsf", FILE_SIZE)
    torrent = make_test_torrent(source / "filter.bsf", v1_only=True, root_cert=ca[0].decode())
    with _HttpsFile(source / "filter.bsf", tmp_path) as origin:
        swarm = _swarm(certificate_dirs=[str(_identity(tmp_path / "id", ca, "agent"))],
                       allow_private_origin=True)
        agent = workers(_spec(torrent, tmp_path / "agent", swarm, "download", origin_url=origin.url,
                              origin_url_ttl=None), "agent", env={"SSL_CERT_FILE": str(origin.ca_file)})
        done = agent.wait_finished(90)
    assert done["bytes_from_origin"] == FILE_SIZE and done["error"] is None
    assert origin.sent >= FILE_SIZE
    assert file_sha256(tmp_path / "agent" / "filter.bsf") == torrent.sha256
