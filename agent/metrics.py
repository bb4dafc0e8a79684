"""The agent's metrics (Prometheus, in its own registry).

Metrics, all prefixed ``bloomswarm_agent_``:

==========================================  =========  ======================================
name                                        type       meaning
==========================================  =========  ======================================
``ready``                                   gauge      1 once a verified version is installed
``current_version``                         gauge      version ``current`` points at (0: none)
``current_version_created_timestamp_seconds``  gauge   its creation time (manifest), Unix s
``current_version_age_seconds``             gauge      now minus that creation time
``pointer_age_seconds``                     gauge      now minus ``issued_at`` of the newest
                                                       verified latest.json seen (0: none yet)
``pointer_issued_timestamp_seconds``        gauge      that ``issued_at``, Unix s (0: none yet)
``pointer_stale``                           gauge      1 while that age exceeds
                                                       ``watch.max_pointer_age_s`` (> 0)
``download_version``                        gauge      version being downloaded (0: none)
``download_progress``                       gauge      its verified fraction, 0..1
``peers``                                   gauge      connected peers over all transfers
``bytes_from_peers_total``                  counter    payload bytes received from agents
``bytes_from_origin_total``                 counter    payload bytes received from the origin
``bytes_uploaded_total``                    counter    payload bytes sent to agents
``hash_failures_total``                     counter    pieces that failed their hash check
``verification_failures_total{check}``      counter    announcements or downloads refused by
                                                       a failed check (verify.py's labels)
``refusals_total{reason}``                  counter    pointers or downloads refused by
                                                       policy: replay, downgrade,
                                                       file_too_large, disk_space
``origin_errors_total``                     counter    failed reads of the announcement source
``transfer_errors_total``                   counter    downloads the transfer reported failed
``swaps_total``                             counter    flips of ``current``
``swap_latency_seconds``                    histogram  announcement first seen -> ``current``
                                                       flipped
``delta_bytes_total``                       counter    payload bytes of deltas received (from
                                                       agents and the origin; also counted
                                                       in the two ``bytes_from_*`` above)
``delta_installs_total``                    counter    versions installed from a delta
``delta_fallbacks_total{reason}``           counter    deltas given up for the full file:
                                                       base_missing, missing, delta_hash,
                                                       base_modified, corrupt, wrong_result,
                                                       stalled, no_room (see deltas.py)
==========================================  =========  ======================================

A dedicated :class:`~prometheus_client.CollectorRegistry` keeps these apart from any
other metrics of the process (and lets tests build one agent after another).

The endpoint that serves them is :mod:`.status_server`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .transfer import TransferKey, TransferStatus, key_version

if TYPE_CHECKING:
    from .certificates import CertificateState

PREFIX = "bloomswarm_agent_"
SWAP_LATENCY_BUCKETS = (0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
"""Seconds; from a small file over a fast network to a large file over a slow one."""


class AgentMetrics:
    """The agent's metrics. Methods are thread-safe (prometheus_client's are)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._clock = clock
        self._created_at: float | None = None
        self.ready = Gauge(PREFIX + "ready", "1 once a verified version is installed", registry=r)
        self.current_version = Gauge(
            PREFIX + "current_version", "Version current points at (0: none)", registry=r
        )
        self.current_created = Gauge(
            PREFIX + "current_version_created_timestamp_seconds",
            "Creation time of the current version (from its manifest), Unix seconds",
            registry=r,
        )
        self.current_age = Gauge(
            PREFIX + "current_version_age_seconds",
            "Seconds since the current version was created (0: none installed)",
            registry=r,
        )
        self.current_age.set_function(self._age)
        self.pointer_age = Gauge(
            PREFIX + "pointer_age_seconds",
            "Seconds since the newest verified latest.json seen was issued (0: none seen yet)",
            registry=r,
        )
        self.pointer_issued = Gauge(
            PREFIX + "pointer_issued_timestamp_seconds",
            "issued_at of the newest verified latest.json seen, Unix seconds (0: none seen yet)",
            registry=r,
        )
        self.pointer_stale = Gauge(
            PREFIX + "pointer_stale",
            "1 while the newest verified latest.json is older than watch.max_pointer_age_s",
            registry=r,
        )
        self.download_version = Gauge(
            PREFIX + "download_version", "Version being downloaded (0: none)", registry=r
        )
        self.download_progress = Gauge(
            PREFIX + "download_progress", "Verified fraction of the download, 0..1", registry=r
        )
        self.peers = Gauge(PREFIX + "peers", "Connected peers over all transfers", registry=r)
        self.bytes_from_peers = Counter(
            PREFIX + "bytes_from_peers", "Payload bytes received from other agents", registry=r
        )
        self.bytes_from_origin = Counter(
            PREFIX + "bytes_from_origin", "Payload bytes received from the origin", registry=r
        )
        self.bytes_uploaded = Counter(
            PREFIX + "bytes_uploaded", "Payload bytes sent to other agents", registry=r
        )
        self.hash_failures = Counter(
            PREFIX + "hash_failures", "Pieces that failed their hash check", registry=r
        )
        self.verification_failures = Counter(
            PREFIX + "verification_failures",
            "Announcements or downloads refused because a check failed",
            ["check"],
            registry=r,
        )
        self.refusals = Counter(
            PREFIX + "refusals",
            "Pointers or downloads refused by policy (replay, downgrade, size, disk space)",
            ["reason"],
            registry=r,
        )
        self.origin_errors = Counter(
            PREFIX + "origin_errors", "Failed reads of the announcement source", registry=r
        )
        self.transfer_errors = Counter(
            PREFIX + "transfer_errors", "Downloads the transfer reported as failed", registry=r
        )
        self.swaps = Counter(PREFIX + "swaps", "Flips of the current link", registry=r)
        self.swap_latency = Histogram(
            PREFIX + "swap_latency_seconds",
            "Seconds from an announcement first seen to current flipped to it",
            buckets=SWAP_LATENCY_BUCKETS,
            registry=r,
        )
        self.delta_bytes = Counter(
            PREFIX + "delta_bytes",
            "Payload bytes of deltas received from agents and the origin",
            registry=r,
        )
        self.delta_installs = Counter(
            PREFIX + "delta_installs", "Versions installed from a delta", registry=r
        )
        self.delta_fallbacks = Counter(
            PREFIX + "delta_fallbacks",
            "Deltas given up for the full file, by reason",
            ["reason"],
            registry=r,
        )
        self.refused_peers = Counter(
            PREFIX + "refused_peers",
            "Peers refused: outside the allowed networks (address), or failing a private "
            "version's TLS handshake (tls_handshake, plaintext)",
            ["reason"],
            registry=r,
        )
        self.certificate_expiry = Gauge(
            PREFIX + "certificate_expiry_seconds",
            "Seconds until this agent's certificate for private versions expires "
            "(negative once expired), by certificate file",
            ["certificate"],
            registry=r,
        )
        self._seen: dict[TransferKey, TransferStatus] = {}
        self._refused_seen: dict[str, int] = {}
        self._certificates_seen: set[str] = set()
        self._lock = threading.Lock()
        self._ready = False

    @property
    def is_ready(self) -> bool:
        """A verified version is installed (what /readyz answers)."""
        return self._ready

    def _age(self) -> float:
        created = self._created_at
        return max(self._clock() - created, 0.0) if created is not None else 0.0

    def set_current(self, version: int | None, created_at: float | None) -> None:
        """Record the installed version (None: nothing installed) and its creation time."""
        installed = version is not None
        self.current_version.set(version or 0)
        self.ready.set(1 if installed else 0)
        self._ready = installed
        self._created_at = created_at if installed else None
        self.current_created.set(self._created_at or 0)

    def set_pointer_freshness(self, issued_at: float | None, age_s: float | None, stale: bool) -> None:
        """Record the newest verified pointer's issue time and age (None: none seen yet)."""
        self.pointer_issued.set(issued_at or 0)
        self.pointer_age.set(age_s or 0.0)
        self.pointer_stale.set(1 if stale else 0)

    def record_swap(self, latency_s: float) -> None:
        """Count one flip of ``current`` and its latency."""
        self.swaps.inc()
        self.swap_latency.observe(max(latency_s, 0.0))

    def account(self, status: TransferStatus) -> None:
        """Count a transfer's bytes and hash failures since its previous snapshot.

        Totals in a status grow from the transfer's start; the counters grow by the
        difference to the previous snapshot of the same version (a smaller total means
        the transfer restarted: all of it is new).
        """
        with self._lock:
            old = self._seen.get(status.key)
            received = 0
            for counter, attr in (
                (self.bytes_from_peers, "bytes_from_peers"),
                (self.bytes_from_origin, "bytes_from_origin"),
                (self.bytes_uploaded, "bytes_uploaded"),
                (self.hash_failures, "hash_failures"),
            ):
                new_total = getattr(status, attr)
                old_total = getattr(old, attr) if old is not None else 0
                delta = new_total - old_total if new_total >= old_total else new_total
                if delta > 0:
                    counter.inc(delta)
                    if attr.startswith("bytes_from_"):
                        received += delta
            if status.base is not None and received > 0:
                self.delta_bytes.inc(received)
            self._seen[status.key] = status

    def forget(self, key: TransferKey) -> None:
        """The transfer of ``key`` was removed: a later one starts counting from zero."""
        with self._lock:
            self._seen.pop(key, None)

    def observe_transfers(
        self, statuses: Iterable[TransferStatus], downloading: TransferKey | None
    ) -> None:
        """Update every transfer metric from fresh snapshots of all transfers."""
        statuses = list(statuses)
        for status in statuses:
            self.account(status)
        with self._lock:
            for key in set(self._seen) - {s.key for s in statuses}:
                del self._seen[key]
        self.peers.set(sum(s.peers for s in statuses))
        progress = next((s.progress for s in statuses if s.key == downloading), 0.0)
        self.download_version.set(key_version(downloading) if downloading is not None else 0)
        self.download_progress.set(progress if downloading is not None else 0.0)

    def observe_peer_access(self, refused: Mapping[str, int],
                            certificates: Iterable[CertificateState]) -> None:
        """Count the refusals since the last call (``refused``: totals by reason) and set
        each certificate's seconds left; a certificate no longer held loses its series."""
        with self._lock:
            for reason, total in refused.items():
                new = total - self._refused_seen.get(reason, 0)
                if new > 0:
                    self.refused_peers.labels(reason).inc(new)
                self._refused_seen[reason] = total
        held = {state.certificate: state.expires_in_s for state in certificates}
        with self._lock:
            for gone in self._certificates_seen - held.keys():  # removed or renamed: no stale alert
                self.certificate_expiry.remove(gone)
            self._certificates_seen = set(held)
        for certificate, seconds in held.items():
            self.certificate_expiry.labels(certificate).set(seconds)

    def samples(self) -> dict[str, float]:
        """Every sample as ``name{label="value"}`` -> value (for /status and the CLI)."""
        result: dict[str, float] = {}
        for family in self.registry.collect():
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                result[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return result


__all__ = ["PREFIX", "SWAP_LATENCY_BUCKETS", "AgentMetrics"]
