"""Metrics in their own registry, and the HTTP endpoint: /healthz, /readyz, /metrics, /status."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from bloomswarm.agent.metrics import AgentMetrics
from bloomswarm.agent.status_server import StatusServer
from bloomswarm.agent.transfer import DeltaKey, TransferStatus


def _status(version: int, *, peers: int = 0, origin: int = 0, from_peers: int = 0, uploaded: int = 0,
            hash_failures: int = 0, progress: float = 0.5, base: int | None = None) -> TransferStatus:
    return TransferStatus(version=version, state="downloading", progress=progress, total_bytes=100,
                          bytes_from_peers=from_peers, bytes_from_origin=origin, bytes_uploaded=uploaded,
                          peers=peers, hash_failures=hash_failures, finished=False, base=base)


def _value(metrics: AgentMetrics, name: str, **labels: str) -> float:
    return float(metrics.registry.get_sample_value(f"bloomswarm_agent_{name}", labels or None) or 0.0)


def test_registries_are_separate() -> None:
    one, two = AgentMetrics(), AgentMetrics()
    one.swaps.inc()
    assert _value(one, "swaps_total") == 1 and _value(two, "swaps_total") == 0


def test_transfer_totals_become_counters() -> None:
    metrics = AgentMetrics()
    metrics.observe_transfers([_status(1, origin=10, from_peers=5, peers=2)], downloading=1)
    metrics.observe_transfers([_status(1, origin=30, from_peers=5, peers=3, hash_failures=1),
                               _status(2, uploaded=7, peers=1, progress=1.0)], downloading=1)
    assert _value(metrics, "bytes_from_origin_total") == 30
    assert _value(metrics, "bytes_from_peers_total") == 5
    assert _value(metrics, "bytes_uploaded_total") == 7
    assert _value(metrics, "hash_failures_total") == 1
    assert _value(metrics, "peers") == 4
    assert _value(metrics, "download_version") == 1 and _value(metrics, "download_progress") == 0.5
    metrics.forget(1)  # removed, then started again: its totals restart at zero
    metrics.observe_transfers([_status(1, origin=4)], downloading=None)
    assert _value(metrics, "bytes_from_origin_total") == 34
    assert _value(metrics, "download_version") == 0 and _value(metrics, "download_progress") == 0


def test_a_delta_is_counted_apart_from_its_versions_file() -> None:
    metrics = AgentMetrics()
    delta = DeltaKey(3, 2)
    metrics.observe_transfers([_status(3, origin=6, from_peers=4, base=2), _status(2, uploaded=9)],
                              downloading=delta)
    assert _value(metrics, "download_version") == 3 and _value(metrics, "download_progress") == 0.5
    metrics.observe_transfers([_status(3, origin=8, from_peers=4, base=2),  # the delta: +2
                               _status(3, origin=50)], downloading=3)  # v3's file, a transfer of its own
    assert _value(metrics, "delta_bytes_total") == 12
    assert _value(metrics, "bytes_from_origin_total") == 58 and _value(metrics, "bytes_from_peers_total") == 4
    metrics.forget(delta)
    metrics.observe_transfers([_status(3, origin=1, base=2)], downloading=None)
    assert _value(metrics, "delta_bytes_total") == 13


def test_current_version_and_age() -> None:
    now = [1_000_000.0]
    metrics = AgentMetrics(clock=lambda: now[0])
    assert not metrics.is_ready and _value(metrics, "ready") == 0
    metrics.set_current(4, 999_000.0)
    now[0] += 60
    assert metrics.is_ready and _value(metrics, "current_version") == 4
    assert _value(metrics, "current_version_age_seconds") == 1060.0
    assert _value(metrics, "current_version_created_timestamp_seconds") == 999_000.0
    metrics.record_swap(2.5)
    assert _value(metrics, "swap_latency_seconds_count") == 1
    assert _value(metrics, "swap_latency_seconds_bucket", le="5.0") == 1
    assert _value(metrics, "swap_latency_seconds_bucket", le="2.0") == 0
    samples = metrics.samples()
    assert samples["bloomswarm_agent_swaps_total"] == 1
    assert samples['bloomswarm_agent_swap_latency_seconds_bucket{le="5.0"}'] == 1


@pytest.fixture
def endpoint() -> Iterator[tuple[AgentMetrics, str]]:
    metrics = AgentMetrics()
    server = StatusServer(metrics, lambda: {"current_version": 7, "ready": metrics.is_ready},
                          "127.0.0.1", 0)
    url = server.start()
    yield metrics, url
    server.stop()


def _get(url: str) -> tuple[int, str, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read().decode(), dict(exc.headers)


def test_health_readiness_metrics_status(endpoint: tuple[AgentMetrics, str]) -> None:
    metrics, url = endpoint
    assert _get(f"{url}/healthz")[0] == 200
    code, body, _ = _get(f"{url}/readyz")
    assert code == 503 and "no verified version" in body
    metrics.set_current(7, 1.0)
    metrics.verification_failures.labels("sha256").inc()
    assert _get(f"{url}/readyz")[0] == 200
    code, body, headers = _get(f"{url}/metrics")
    assert code == 200 and headers["Content-Type"].startswith("text/plain")
    assert "bloomswarm_agent_current_version 7.0" in body
    assert 'bloomswarm_agent_verification_failures_total{check="sha256"} 1.0' in body
    assert "python_gc" not in body  # not the global registry
    code, body, _ = _get(f"{url}/status")
    assert code == 200 and json.loads(body) == {"current_version": 7, "ready": True}
    assert _get(f"{url}/nope")[0] == 404


def test_stop_releases_the_port() -> None:
    server = StatusServer(AgentMetrics(), dict, "127.0.0.1", 0)
    url = server.start()
    server.stop()
    again = StatusServer(AgentMetrics(), dict, "127.0.0.1", server.port)
    assert again.start() == url
    again.stop()


def test_a_certificate_no_longer_held_loses_its_expiry_series() -> None:
    from bloomswarm.agent.certificates import CertificateState

    metrics = AgentMetrics()
    metrics.observe_peer_access({}, [CertificateState("/c/old.crt", "CN=a", 100.0),
                                     CertificateState("/c/new.crt", "CN=a", 9e6)])
    metrics.observe_peer_access({}, [CertificateState("/c/new.crt", "CN=a", 9e6 - 1)])
    samples = metrics.samples()
    assert 'bloomswarm_agent_certificate_expiry_seconds{certificate="/c/old.crt"}' not in samples
    assert samples['bloomswarm_agent_certificate_expiry_seconds{certificate="/c/new.crt"}'] == 9e6 - 1
