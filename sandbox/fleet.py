"""A whole bloomswarm deployment on 127.0.0.1: object store, tracker, publisher, N agents.

:class:`LocalFleet` starts moto's S3 server with a bucket (or uses a bucket it is given),
an :class:`~bloomswarm.sandbox.origin.Origin` in front of it (the agents' view of the
origin: counted, optionally capped or faulty), opentracker (or uses one it is given; or,
with ``discovery="dht"``, the agents' DHT bootstrapped from the first agent), an ed25519
key pair (or the key it is given), and N agents as ``bloomswarm agent run`` processes
moving bytes with the swarm or the direct transfer, each with its own data directory,
BitTorrent port and status port; more agents join with :meth:`LocalFleet.add_agent`.
:meth:`LocalFleet.publish` publishes a version with the publisher's own code
(whitelisting it on the tracker before ``latest.json`` moves), :meth:`LocalFleet.point_latest`
and :meth:`LocalFleet.hold_latest` move or pin ``latest.json``;
:meth:`LocalFleet.wait_for_version` follows the agents until all have swapped to a
version. Everything the fleet started is stopped by :meth:`LocalFleet.stop`, by PID;
what it was given is left running.

The demo, the swarm and soak benchmarks and the functional tests drive a fleet with it.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import shutil
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import boto3
from cryptography.hazmat.primitives import serialization

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.errors import FleetError
from bloomswarm.common.file_hash import file_sha256
from bloomswarm.common.filter_names import filter_prefix
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.prefixed_store import PrefixedStore
from bloomswarm.common.signing import SigningKey, generate_keypair, parse_private_key
from bloomswarm.common.storage import S3Config, S3ObjectStore
from bloomswarm.common.tls_identity import issue_certificate, make_ca
from bloomswarm.publisher.config import DeltaConfig, PublisherConfig, TorrentFormat
from bloomswarm.publisher.filter_index import sync_index
from bloomswarm.publisher.latest import Target, swap_latest
from bloomswarm.publisher.pinning import pin
from bloomswarm.publisher.publish import publish_filter
from bloomswarm.sandbox.agent_process import AgentProcess
from bloomswarm.sandbox.origin import Origin
from bloomswarm.sandbox.processes import Service, free_port
from bloomswarm.sandbox.s3server import FAKE_CREDENTIALS, MotoServer
from bloomswarm.sandbox.tracker import OpenTracker

Discovery = Literal["tracker", "dht", "auto"]
ORIGIN_HOST = "127.0.0.2"
"""The origin proxy's loopback address: apart from the agents' 127.0.0.1, as the object
store is in production, so the agents' origin peer class holds the origin alone."""
BUCKET = "bloomswarm-sandbox"
PREFIX = "fleet"
PUBLISHER_ID = "sandbox-publisher"
PORT_RETRIES = 3
"""Times an agent whose port was taken before it could bind it is started again."""
_PORT_TAKEN = "Address already in use"


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


@dataclass(frozen=True)
class FleetSpec:
    """How to lay out a fleet. Rates are bytes/s; 0 means unlimited."""

    agents: int = 8
    """Agents started by :meth:`LocalFleet.start` (0: none; add them with ``add_agent``)."""
    discovery: Discovery = "auto"
    """"tracker" (opentracker must be installed), "dht", or "auto": the tracker where
    the ``opentracker`` binary is found, else the DHT."""
    transfer: Literal["swarm", "direct"] = "swarm"
    """"direct": every agent downloads the whole file from the origin (no P2P)."""
    piece_size: int | None = None
    """Torrent piece size; None lets the publisher choose from the file size."""
    torrent_format: TorrentFormat = "v1"
    """The publisher's torrents: v1 (its default) or hybrid v1+v2."""
    upload_rate_limit: int = 0
    """Each agent's BitTorrent upload cap (applies to loopback peers too)."""
    download_rate_limit: int = 0
    """Each agent's download cap (BitTorrent and, with the direct transfer, HTTP)."""
    origin_rate_limit: int = 0
    """The origin's total egress (one budget all its connections share)."""
    origin_connection_rate: int = 0
    """Each origin connection's own pace, like S3's bounded per-connection throughput."""
    origin_fault_rate: float = 0.0
    """Fraction of origin requests that fail (503 or a stall), see :class:`Origin`."""
    origin_cache_files: bool = True
    """The origin keeps a copy of each filter file; False: every request goes to the S3
    server (for tests that change an object in place)."""
    poll_interval_s: float | None = 0.5
    """How often agents poll latest.json (jitter: half of it); None: the agent's default
    (``[watch]`` left out)."""
    keep_versions: int = 2
    """Versions each agent keeps installed."""
    publisher_keep_versions: int | None = None
    """Versions the publisher keeps in the bucket; None: ``keep_versions`` (at least 2)."""
    swarm: Mapping[str, object] = field(default_factory=dict)
    """Extra ``[swarm]`` settings for every agent (override the fleet's)."""
    agent_tables: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    """Extra settings per config table for every agent, e.g. ``{"watch": {...}}`` (``""``:
    top-level settings). Without them an agent runs on the agent's defaults but for its
    addresses, discovery, rate caps, ``allow_private_origin``, the poll interval and
    ``keep_versions``."""
    private: bool = False
    """A private swarm: the fleet makes a CA (``root/pki``), the publisher puts it into
    every torrent, and each agent gets a certificate from it and ``require_private``."""
    filters: tuple[str, ...] = ()
    """Named filters every agent follows (one ``[[filters]]`` table each, default prefix);
    empty: the single filter of the prefix. Publish them with :meth:`LocalFleet.publish_filters`."""

    def __post_init__(self) -> None:
        if self.agents < 0:
            raise ValueError("a fleet cannot have fewer than no agents")
        if self.discovery not in ("tracker", "dht", "auto"):
            raise ValueError(f"unknown discovery {self.discovery!r}")


@dataclass(frozen=True)
class Published:
    """A version the fleet's publisher published."""

    manifest: Manifest
    announced_at: float
    """Wall-clock time (``time.time()``) just before latest.json moved to it."""

    @property
    def version(self) -> int:
        return self.manifest.version


@dataclass(frozen=True)
class FiltersPublished:
    """Versions of named filters the fleet's publisher published together."""

    manifests: Mapping[str, Manifest]
    announced_at: float
    """Wall-clock time index.json had moved to list them (``sync_index`` returned)."""
    index_sync_s: float = 0.0
    """How long the sync took: reading every filter's entry back, then the CAS write."""


@dataclass
class AgentView:
    """One agent as seen by one poll of its /status (``status`` None: not answering)."""

    name: str
    status: dict[str, Any] | None
    alive: bool

    @property
    def version(self) -> int | None:
        return None if self.status is None else self.status.get("current_version")

    def metric(self, name: str) -> float:
        """A /metrics sample by its full name without the ``bloomswarm_agent_`` prefix; for
        an agent following named filters, the sum over its filters."""
        if self.status is None:
            return 0.0
        if "filters" in self.status:
            return sum(self.filter(n).metric(name) for n in self.filter_names)
        return float(self.status.get("metrics", {}).get(f"bloomswarm_agent_{name}", 0.0))

    @property
    def filter_names(self) -> list[str]:
        """The named filters this agent's /status lists, sorted ([] for a single filter)."""
        return sorted((self.status or {}).get("filters") or {})

    def filter(self, name: str) -> AgentView:
        """Named filter ``name`` of this agent as a single-filter view (its ``version``,
        ``swapped_at``, ``progress``...; ``status`` None when /status does not list it)."""
        filters = (self.status or {}).get("filters") or {}
        return AgentView(self.name, filters.get(name), self.alive)

    @property
    def progress(self) -> float:
        download = (self.status or {}).get("download") or {}
        return float(download.get("progress") or 0.0)

    @property
    def peers(self) -> int:
        return int(self.metric("peers"))

    @property
    def bytes_from_peers(self) -> float:
        return self.metric("bytes_from_peers_total")

    @property
    def bytes_from_origin(self) -> float:
        return self.metric("bytes_from_origin_total")

    def _swap_to(self, version: int) -> dict[str, Any]:
        """This agent's last swap when it installed ``version``, else {}."""
        last = (self.status or {}).get("last_swap") or {}
        return last if last.get("version") == version else {}

    def swapped_by_delta(self, version: int) -> bool:
        """Whether this agent's last swap installed ``version`` by applying a delta."""
        return self._swap_to(version).get("delta_from") is not None

    def apply_seconds(self, version: int) -> float | None:
        """How long the apply of the delta took, when this agent's last swap installed
        ``version`` by delta (None otherwise)."""
        seconds = self._swap_to(version).get("apply_s")
        return None if seconds is None else float(seconds)

    def swapped_at(self, version: int) -> float | None:
        """When this agent swapped to ``version`` (its own clock), if its last swap was it."""
        at = self._swap_to(version).get("at")
        return None if at is None else float(at)


class LocalFleet(Service):
    """The deployment; use as a context manager or call :meth:`start` / :meth:`stop`.

    Given ``s3`` (a bucket that exists, e.g. on a moto server a test runs), the fleet
    starts no S3 server and sets no credentials; otherwise, while it runs, fake AWS
    credentials are set in this process's environment (moto accepts any) and
    :meth:`stop` restores the previous values. Given ``tracker`` (running), the agents
    announce to it and the fleet starts none. ``signing_key`` is the publisher's key
    (default: a new one).
    """

    def __init__(self, root: Path, spec: FleetSpec | None = None, *, s3: S3Config | None = None,
                 tracker: OpenTracker | None = None, signing_key: SigningKey | None = None) -> None:
        self.root = Path(root)
        self.spec = spec or FleetSpec()
        self.discovery: Literal["tracker", "dht"] = self._discovery(self.spec.discovery, tracker is not None)
        self.s3_server = MotoServer() if s3 is None else None
        self.tracker: OpenTracker | None = tracker
        self._own_tracker = tracker is None
        self.proxy: Origin | None = None
        self.agents: list[AgentProcess] = []
        self._agent_tables: dict[str, Mapping[str, Mapping[str, object]]] = {}
        self.s3: S3Config | None = s3
        self._store: S3ObjectStore | None = None
        self.signing_key: SigningKey | None = signing_key
        self.public_key_path = self.root / "publisher.pub"
        self._saved_env: dict[str, str | None] = {}
        self._bootstrap_port = 0

    @staticmethod
    def _discovery(requested: Discovery, given_tracker: bool) -> Literal["tracker", "dht"]:
        has_tracker = given_tracker or shutil.which("opentracker") is not None
        if requested == "auto":
            return "tracker" if has_tracker else "dht"
        if requested == "tracker" and not has_tracker:
            raise FleetError("opentracker is not installed (apt-get install opentracker), "
                             "or use the DHT")
        return requested

    @property
    def store(self) -> S3ObjectStore:
        """The bucket, as the publisher sees it (not through the origin)."""
        if self._store is None:
            raise FleetError("the fleet is not started")
        return self._store

    # --- life cycle -------------------------------------------------------------------------

    def start(self, on_step: Callable[[str], None] | None = None) -> LocalFleet:
        """Start the store, the tracker and the agents (agents start in the background:
        see :meth:`wait_until_up`). ``on_step`` is told what starts next. On failure,
        whatever had started is stopped and the error is raised."""
        step = on_step or (lambda _what: None)
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if self.s3_server is not None:
                self._set_credentials()
                step("S3 server (moto)")
                endpoint = self.s3_server.start()
                self.s3 = S3Config(bucket=BUCKET, prefix=PREFIX, endpoint_url=endpoint, region="us-east-1",
                                   connect_timeout_s=2.0, read_timeout_s=60.0)
                s3_client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
                s3_client.create_bucket(Bucket=BUCKET)
            if self.s3 is None or self.s3.endpoint_url is None:
                raise FleetError("a fleet's bucket needs an endpoint URL")
            self._store = S3ObjectStore(self.s3)
            spec = self.spec
            self.proxy = Origin(upstream=self.s3.endpoint_url, rate_limit=spec.origin_rate_limit,
                                connection_rate=spec.origin_connection_rate,
                                fault_rate=spec.origin_fault_rate, cache_files=spec.origin_cache_files,
                                host=ORIGIN_HOST).start()
            if self.spec.private:
                self._make_ca()
            if self.signing_key is None:
                self.signing_key = parse_private_key(generate_keypair()[0])
            self.public_key_path.write_bytes(self.signing_key.key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
            if self.discovery == "tracker" and self.spec.transfer == "swarm" and self.tracker is None:
                step("tracker (opentracker)")
                self.tracker = OpenTracker().start()
            step(f"{self.spec.agents} agents")
            for index in range(self.spec.agents):
                self.add_agent(index)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop every agent (SIGTERM to all, then wait; SIGKILL stragglers), the tracker,
        the origin and the S3 server (those the fleet started), each by its PID; restore
        the environment."""
        for agent in self.agents:
            if agent.process is not None and agent.process.poll() is None:
                agent.process.send_signal(signal.SIGTERM)
        for agent in self.agents:
            with contextlib.suppress(AssertionError):  # killed after the timeout: stopped all the same
                agent.stop(signal.SIGTERM, timeout=20)
        if self.tracker is not None and self._own_tracker:
            self.tracker.stop()
            self.tracker = None
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None
        if self.s3_server is not None:
            self.s3_server.stop()
        self._restore_credentials()

    def _set_credentials(self) -> None:
        values = dict(FAKE_CREDENTIALS, AWS_EC2_METADATA_DISABLED="true",
                      AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
                      NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
        for name in (*values, "AWS_PROFILE"):
            self._saved_env.setdefault(name, os.environ.get(name))
        os.environ.pop("AWS_PROFILE", None)
        os.environ.update(values)

    def _restore_credentials(self) -> None:
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env.clear()

    # --- agents -----------------------------------------------------------------------------

    def agent_settings(self, index: int) -> dict[str, dict[str, object]]:
        """Agent ``index``'s config tables (beyond what AgentProcess sets itself): addresses,
        discovery, rate caps and the spec's poll interval and versions kept; the agent's
        defaults for the rest."""
        spec = self.spec
        port = free_port(udp=True)
        if index == 0:
            self._bootstrap_port = port
        swarm: dict[str, object] = {
            "listen_interfaces": f"127.0.0.1:{port}",
            "allow_private_origin": True,  # the origin (the proxy) is on loopback
            "upload_rate_limit": spec.upload_rate_limit,
            "download_rate_limit": spec.download_rate_limit,
            "enable_lsd": False,
        }
        if self.discovery == "tracker" and self.tracker is not None:
            swarm.update(trackers=[self.tracker.announce_url], enable_dht=False)
        else:
            swarm.update(trackers=[], enable_dht=True, dht_restrict_ips=False,
                         dht_bootstrap_nodes=[] if index == 0 else [f"127.0.0.1:{self._bootstrap_port}"])
        if spec.private:
            swarm.update(certificate_dirs=[str(self._agent_identity(index))], require_private=True)
        swarm.update(spec.swarm)
        # Everything else is the agent's default: what a deployment gets is what is measured.
        tables: dict[str, dict[str, object]] = {
            "swarm": swarm,
            "watch": ({} if spec.poll_interval_s is None else
                      {"poll_interval_s": spec.poll_interval_s, "poll_jitter_s": spec.poll_interval_s / 2}),
            "install": {"keep_versions": spec.keep_versions},
            "direct": {"rate_limit_bytes_per_s": spec.download_rate_limit},
        }
        for table, values in spec.agent_tables.items():
            tables.setdefault(table, {}).update(values)
        return tables

    @property
    def ca_certificate(self) -> Path:
        """The private fleet's CA certificate (``FleetSpec.private``)."""
        return self.root / "pki" / "ca.crt"

    def _make_ca(self) -> None:
        """The fleet CA in root/pki: the one already there (a fleet restarted on its root:
        the agents' certificates stay valid), else a new one."""
        pki = self.ca_certificate.parent
        if self.ca_certificate.is_file() and (pki / "ca.key").is_file():
            return
        cert, key = make_ca("bloomswarm local fleet CA", days=30, now=_utc_now())
        pki.mkdir(parents=True, exist_ok=True)
        self.ca_certificate.write_bytes(cert)
        (pki / "ca.key").write_bytes(key)
        (pki / "ca.key").chmod(0o600)

    def _agent_identity(self, index: int) -> Path:
        """Agent ``index``'s certificate directory (tls.crt, tls.key), made on first use."""
        directory = self.root / "pki" / f"agent{index}"
        if not (directory / "tls.crt").is_file():
            pki = self.ca_certificate.parent
            cert, key = issue_certificate(self.ca_certificate.read_bytes(), (pki / "ca.key").read_bytes(),
                                          name=f"agent{index}", days=29, now=_utc_now())
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "tls.key").write_bytes(key)
            (directory / "tls.key").chmod(0o600)
            (directory / "tls.crt").write_bytes(cert)
        return directory

    def add_agent(self, index: int | None = None, *, name: str | None = None,
                  tables: Mapping[str, Mapping[str, object]] | None = None) -> AgentProcess:
        """Start one more agent (named ``name``, default ``agent<index>``) and return it;
        ``tables`` adds to (or overrides) its config tables."""
        if self.proxy is None or self.s3 is None:
            raise FleetError("the fleet is not started")
        index = len(self.agents) if index is None else index
        name = name or f"agent{index}"
        self._agent_tables[name] = tables or {}
        agent = AgentProcess(self.root / name, self._agent_s3(), self.public_key_path,
                             tables=self._settings(index, name), transfer=self.spec.transfer,
                             filters=self.spec.filters)
        agent.start()
        self.agents.append(agent)
        return agent

    def _settings(self, index: int, name: str) -> dict[str, dict[str, object]]:
        """Agent ``index``'s tables, with those it was added with."""
        tables = self.agent_settings(index)
        for table, values in self._agent_tables.get(name, {}).items():
            tables.setdefault(table, {}).update(values)
        return tables

    def _agent_s3(self) -> S3Config:
        """The agents' view of the bucket: through the origin."""
        if self.proxy is None or self.s3 is None:
            raise FleetError("the fleet is not started")
        return S3Config(bucket=self.s3.bucket, prefix=self.s3.prefix, endpoint_url=self.proxy.endpoint,
                        region=self.s3.region or "us-east-1")

    def _replace_agent(self, index: int) -> AgentProcess:
        """A new process for agent ``index`` on new ports (its old one has exited)."""
        old = self.agents[index]
        old.stop(signal.SIGKILL, timeout=5)
        (old.root / "agent.log").replace(old.root / f"agent.log.port-taken-{time.time_ns()}")
        agent = AgentProcess(old.root, self._agent_s3(), self.public_key_path,
                             tables=self._settings(index, old.root.name), transfer=self.spec.transfer,
                             filters=self.spec.filters)
        agent.start()
        self.agents[index] = agent
        return agent

    def restart_agent(self, agent: AgentProcess, sig: int = signal.SIGKILL) -> None:
        """Stop ``agent`` with ``sig`` (SIGKILL: a crash) and start it again, same config."""
        agent.stop(sig, timeout=20)
        agent.start()

    def views(self) -> list[AgentView]:
        """Every agent's /status, polled now."""
        views = []
        for agent in self.agents:
            alive = agent.process is not None and agent.process.poll() is None
            status: dict[str, Any] | None = None
            if alive:
                try:
                    status = agent.status() or None
                except (OSError, AssertionError, ValueError):
                    status = None
            views.append(AgentView(agent.root.name, status, alive))
        return views

    def wait_until_up(self, limit_s: float = 120.0) -> None:
        """Wait until every agent answers /healthz; FleetError naming the first that does not.

        An agent that exits at start because one of its ports was taken meanwhile (ports
        are picked free, then bound by the agent: another process may take one in between)
        is started again on new ports, up to :data:`PORT_RETRIES` times."""
        deadline = time.monotonic() + limit_s
        for index in range(len(self.agents)):
            retries = 0
            while True:
                agent = self.agents[index]
                if agent.process is None or agent.process.poll() is not None:
                    if retries < PORT_RETRIES and _PORT_TAKEN in agent.log():
                        retries += 1
                        self._replace_agent(index)
                        continue
                    raise FleetError(f"{agent.root.name} exited at start:\n{agent.log()[-2000:]}")
                try:
                    if agent.http_status("/healthz") == 200:
                        break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise FleetError(f"{agent.root.name} did not come up:\n{agent.log()[-2000:]}")
                time.sleep(0.1)

    # --- publishing -------------------------------------------------------------------------

    def publisher_config(self, deltas: DeltaConfig | None = None) -> PublisherConfig:
        """The fleet's publisher; ``deltas`` replaces the default :class:`DeltaConfig`."""
        if self.s3 is None:
            raise FleetError("the fleet is not started")
        trackers = (self.tracker.announce_url,) if self.tracker is not None else ()
        keep = self.spec.publisher_keep_versions or max(self.spec.keep_versions, 2)
        return PublisherConfig(s3=self.s3, publisher_id=PUBLISHER_ID, trackers=trackers,
                               piece_size=self.spec.piece_size, torrent_format=self.spec.torrent_format,
                               keep_versions=keep, work_dir=self.root, deltas=deltas or DeltaConfig(),
                               swarm_ca=self.ca_certificate if self.spec.private else None)

    def publish(self, builder: FilterBuilder, *, progress: bool = False,
                deltas: DeltaConfig | None = None) -> Published:
        """Publish ``builder``'s filter as the next version; the tracker (if any) learns its
        info-hashes before latest.json moves, so agents can announce it at once. ``deltas``:
        the publisher's delta settings for this version (default: :class:`DeltaConfig`'s)."""
        key = self._key()
        announced: list[float] = []

        def announce(manifest: Manifest) -> None:
            if self.tracker is not None:
                self.tracker.allow(manifest.info_hash_v1, manifest.info_hash_v2)
                for delta in manifest.deltas:  # as tracker-sync: deltas are torrents too
                    self.tracker.allow(delta.info_hash_v1, delta.info_hash_v2)
            announced.append(time.time())

        result = publish_filter(self.store, self.publisher_config(deltas), builder, key,
                                f"sandbox-{time.time_ns()}", force=True, progress=progress,
                                before_announce=announce)
        if result.status != "published" or not announced:
            raise FleetError(f"publish did not produce a version: {result.status}")
        return Published(result.manifest, announced[0])

    def publish_filters(self, builders: Mapping[str, FilterBuilder], *,
                        deltas: DeltaConfig | None = None) -> FiltersPublished:
        """Publish each named filter's next version (its own ``latest.json`` under
        ``filters/NAME/``), then move ``index.json`` once for all of them: agents learn of
        every one at that moment (``announced_at``, just after the write)."""
        key = self._key()
        manifests: dict[str, Manifest] = {}
        torrents: list[tuple[str, str | None]] = []  # whitelisted at once, before index.json moves

        def allow(manifest: Manifest) -> None:
            torrents.append((manifest.info_hash_v1, manifest.info_hash_v2))
            torrents.extend((delta.info_hash_v1, delta.info_hash_v2) for delta in manifest.deltas)

        for name, builder in builders.items():
            folder = PrefixedStore(self.store, filter_prefix(name))
            result = publish_filter(folder, self.publisher_config(deltas), builder, key,
                                    f"sandbox-{time.time_ns()}", force=True, progress=False,
                                    before_announce=allow)
            if result.status != "published":
                raise FleetError(f"publish of filter {name!r} did not produce a version: {result.status}")
            manifests[name] = result.manifest
        if self.tracker is not None and torrents:
            self.tracker.allow_all(torrents)
        synced_from = time.time()
        sync_index(self.store, list(builders), key, PUBLISHER_ID)
        announced_at = time.time()  # index.json moved: its write was sync_index's last request
        return FiltersPublished(manifests, announced_at, index_sync_s=announced_at - synced_from)

    def _key(self) -> SigningKey:
        if self._store is None or self.signing_key is None:
            raise FleetError("the fleet is not started")
        return self.signing_key

    def point_latest(self, version: int, *, pinned: bool = False, key: SigningKey | None = None) -> None:
        """Move latest.json to ``version`` whatever it names, signed by ``key`` (default:
        the fleet's publisher key; another key makes a pointer no agent trusts)."""
        signing_key = key or self._key()
        swap_latest(self.store, lambda _current: Target(version, pinned=pinned), signing_key, PUBLISHER_ID)

    def hold_latest(self, version: int) -> None:
        """Pin latest.json to ``version`` (the publisher's ``pin``): publishing does not
        move it, and agents drop a download of any other version."""
        key = self._key()
        pin(self.store, version, key, [key.public_key()], PUBLISHER_ID)

    # --- following a rollout ----------------------------------------------------------------

    def origin_bytes(self) -> int:
        """Filter-file bytes the origin has sent so far (counted at the origin)."""
        return self.proxy.filter_bytes if self.proxy is not None else 0

    def agents_origin_bytes(self) -> float:
        """The agents' own count of payload bytes from the origin, summed."""
        return sum(agent.metric("bytes_from_origin_total") for agent in self.agents)

    def wait_all(self, what: str, condition: Callable[[AgentProcess], bool], *,
                 limit_s: float = 90.0) -> None:
        """Wait until ``condition(agent)`` holds for every agent (a safety bound, not a
        timing assertion); FleetError with :meth:`describe` otherwise."""
        deadline = time.monotonic() + limit_s
        for agent in self.agents:
            try:
                agent.wait_for(what, condition, limit_s=max(1.0, deadline - time.monotonic()))
            except AssertionError as exc:
                raise FleetError(f"{agent.root.name}: {exc}\n\nfleet:\n{self.describe()}") from None

    def wait_all_on(self, version: int, what: str, *, limit_s: float = 90.0) -> None:
        """Wait until every agent's current version is ``version`` (lower ones too: a
        rollback), as :meth:`wait_all`."""
        # .get: /status is {} until the agent's first loop iteration
        self.wait_all(what, lambda a: a.status().get("current_version") == version, limit_s=limit_s)

    def check_installed(self, manifest: Manifest) -> None:
        """Every agent holds ``manifest``'s version with its SHA-256; FleetError if not."""
        for agent in self.agents:
            installed = DataDir(agent.data_dir).filter_file(manifest.version)
            if file_sha256(installed) != manifest.sha256:
                raise FleetError(f"{agent.root.name}: {installed} is not v{manifest.version}'s file")

    def wait_for_version(
        self,
        version: int,
        *,
        limit_s: float = 600.0,
        interval_s: float = 0.25,
        on_poll: Callable[[Sequence[AgentView]], None] | None = None,
        agents: Sequence[AgentProcess] | None = None,
    ) -> dict[str, float]:
        """Poll until every agent (or those in ``agents``) serves ``version`` or newer;
        return each agent's swap time (``time.time()``; the poll time when its last swap
        was a later version). ``on_poll`` sees every poll. FleetError after ``limit_s``
        or when an agent process exits."""
        names = {a.root.name for a in (agents if agents is not None else self.agents)}
        swapped: dict[str, float] = {}
        deadline = time.monotonic() + limit_s
        while True:
            views = [v for v in self.views() if v.name in names]
            if on_poll is not None:
                on_poll(views)
            for view in views:
                if not view.alive:
                    agent = next(a for a in self.agents if a.root.name == view.name)
                    raise FleetError(f"{view.name} exited:\n{agent.log()[-3000:]}")
                current = view.version
                if view.name not in swapped and current is not None and current >= version:
                    swapped[view.name] = view.swapped_at(version) or time.time()
            if len(swapped) == len(names):
                return swapped
            if time.monotonic() > deadline:
                missing = sorted(names - set(swapped))
                raise FleetError(f"v{version} did not reach {len(missing)} agents in {limit_s:.0f} s: "
                                 f"{', '.join(missing[:8])}")
            time.sleep(interval_s)

    def describe(self) -> str:
        """Every agent's status and log tail, for error messages."""
        parts = []
        if self.proxy is not None:
            counts = self.proxy.snapshot()
            parts.append(f"origin: {counts.filter_bytes} filter bytes in {counts.filter_requests} GETs, "
                         f"{counts.faults} injected faults")
        for agent, view in zip(self.agents, self.views(), strict=True):
            parts.append(f"--- {view.name}: {view.status}\n{agent.log()[-2000:]}")
        return "\n".join(parts)



__all__ = ["AgentView", "Discovery", "FleetError", "FleetSpec", "LocalFleet", "Published"]
