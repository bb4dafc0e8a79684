"""Unit: the allow-list's ip_filter, refusal reasons and their rate-limited log, the TLS
listeners added for private versions, and the certificate store's follow-up of its files."""

from __future__ import annotations

import datetime
import ipaddress
import logging
import os
import warnings
from pathlib import Path

import libtorrent as lt
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomswarm.agent.certificates import REFRESH_S, CertificateStore
from bloomswarm.agent.config import SwarmConfig
from bloomswarm.agent.peer_access import RefusalLog, allowed_ranges, make_ip_filter
from bloomswarm.agent.session_settings import session_settings, with_tls_listeners
from bloomswarm.agent.swarm import FFDHE2048_PEM
from bloomswarm.common.errors import CertificateError, ConfigError
from bloomswarm.common.tls_identity import issue_certificate, make_ca

BLOCKED = 1

# --- the allow-list -----------------------------------------------------------------------------


@pytest.mark.parametrize(("networks", "address", "blocked"), [
    (["10.0.0.0/8"], "10.1.2.3", False),
    (["10.0.0.0/8"], "11.0.0.1", True),
    (["10.0.0.0/8"], "::1", True),
    (["10.77.0.1/32"], "10.77.0.2", True),
    (["10.77.0.1"], "10.77.0.1", False),
    (["fd00::/8", "192.168.1.0/24"], "fd12::5", False),
    (["fd00::/8", "192.168.1.0/24"], "192.168.2.1", True),
])
def test_the_ip_filter_lets_only_the_allowed_networks_through(networks: list[str], address: str,
                                                              blocked: bool) -> None:
    assert bool(make_ip_filter(networks).access(address) & BLOCKED) is blocked


def test_the_origin_addresses_are_let_through_the_filter() -> None:
    rules = make_ip_filter(["10.0.0.0/8"], ["203.0.113.7"])
    assert not rules.access("203.0.113.7") & BLOCKED
    assert rules.access("203.0.113.8") & BLOCKED


@given(st.ip_addresses(), st.integers(0, 32), st.ip_addresses(v=4))
def test_allowed_ranges_are_exactly_the_networks(base: ipaddress.IPv4Address | ipaddress.IPv6Address,
                                                 prefix: int, probe: ipaddress.IPv4Address) -> None:
    network = ipaddress.ip_network(f"{base}/{prefix if base.version == 4 else prefix * 4}", strict=False)
    ((first, last),) = allowed_ranges([str(network)])
    assert (first, last) == (str(network[0]), str(network[-1]))
    if base.version == 4:
        assert (not make_ip_filter([str(network)]).access(str(probe)) & BLOCKED) is (probe in network)


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "not-a-network", "10.0.0.300"])
def test_a_bad_network_is_a_config_error(bad: str) -> None:
    with pytest.raises(ConfigError, match="allowed_peer_networks"):
        SwarmConfig(allowed_peer_networks=(bad,))


def test_require_private_needs_certificates() -> None:
    with pytest.raises(ConfigError, match="certificate_dirs"):
        SwarmConfig(require_private=True)


# --- refusals ------------------------------------------------------------------------------------


def test_refusals_are_logged_once_per_interval_with_the_count_since() -> None:
    log = RefusalLog(interval_s=60.0)
    assert log.record("address", 0.0) == 1  # the first one at once
    assert [log.record("address", t) for t in (1.0, 2.0, 59.0)] == [None, None, None]
    assert log.record("tls_handshake", 3.0) == 1  # each reason on its own
    assert log.record("address", 60.5) == 4  # three unlogged plus this one
    assert log.totals == {"address": 5, "tls_handshake": 1}


# --- TLS listeners -------------------------------------------------------------------------------


@pytest.mark.parametrize(("given_interfaces", "expected"), [
    ("0.0.0.0:6881,[::]:6881", "0.0.0.0:6881,[::]:6881,0.0.0.0:6882s,[::]:6882s"),
    ("127.0.0.1:0", "127.0.0.1:0,127.0.0.1:0s"),
    ("10.0.0.1:7000,10.0.0.1:7443s", "10.0.0.1:7000,10.0.0.1:7443s"),  # the operator's choice
])
def test_tls_listeners_are_added_beside_the_plain_ones(given_interfaces: str, expected: str) -> None:
    assert with_tls_listeners(given_interfaces) == expected


def test_only_an_agent_with_certificates_listens_for_tls_and_counts_refusals(tmp_path: Path) -> None:
    plain = session_settings(SwarmConfig())
    assert plain["listen_interfaces"] == SwarmConfig().listen_interfaces
    assert not int(plain["alert_mask"]) & int(lt.alert_category.peer)
    private = session_settings(SwarmConfig(certificate_dirs=(tmp_path,)))
    assert str(private["listen_interfaces"]).endswith(":6882s")
    assert int(private["alert_mask"]) & int(lt.alert_category.ip_block)
    assert plain["apply_ip_filter_to_trackers"] is False


def test_the_dh_parameters_are_rfc_7919_ffdhe2048() -> None:
    with warnings.catch_warnings():  # cryptography deprecates finite-field DH: only parsed here
        warnings.simplefilter("ignore")
        from cryptography.hazmat.primitives.serialization import load_pem_parameters

        numbers = load_pem_parameters(FFDHE2048_PEM.encode()).parameter_numbers()
    assert numbers.g == 2 and numbers.p.bit_length() == 2048
    assert hex(numbers.p).startswith("0xffffffffffffffffadf85458a2bb4a9aafdc5620273d3cf1")
    assert hex(numbers.p).endswith("886b423861285c97ffffffffffffffff")


# --- the certificate store -----------------------------------------------------------------------


NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc)


class Clocks:
    def __init__(self) -> None:
        self.wall = NOW.timestamp()
        self.mono = 1.0  # a machine booted a second ago

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def _issue(directory: Path, ca: tuple[bytes, bytes], name: str, days: int, stem: str = "tls") -> None:
    cert, key = issue_certificate(ca[0], ca[1], name=name, days=days, now=NOW)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{stem}.key").write_bytes(key)
    (directory / f"{stem}.crt").write_bytes(cert)


def test_the_store_picks_the_identity_of_each_torrents_ca(tmp_path: Path) -> None:
    old, new = make_ca("old", days=400, now=NOW), make_ca("new", days=400, now=NOW)
    _issue(tmp_path / "ids", old, "agent-old", 30, "old")
    _issue(tmp_path / "ids", new, "agent-new", 30, "new")
    store = CertificateStore([tmp_path / "ids"], wall_clock=NOW.timestamp)
    identity_old, identity_new = store.for_ca(old[0]), store.for_ca(new[0])
    assert identity_old is not None and identity_old.subject == "CN=agent-old"
    assert identity_new is not None and identity_new.subject == "CN=agent-new"
    assert store.for_ca(make_ca("third", days=10, now=NOW)[0]) is None


def test_the_store_refuses_to_start_on_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(CertificateError, match=str(tmp_path / "nowhere")):
        CertificateStore([tmp_path / "nowhere"])


def _followed_store(tmp_path: Path) -> tuple[tuple[bytes, bytes], Clocks, CertificateStore]:
    """A store of one identity (10 days left) on clocks the test moves."""
    ca = make_ca("fleet", days=400, now=NOW)
    _issue(tmp_path / "ids", ca, "agent", 10)
    clocks = Clocks()
    return ca, clocks, CertificateStore([tmp_path / "ids"], wall_clock=lambda: clocks.wall,
                                        clock=lambda: clocks.mono)


def test_renewed_files_are_reloaded_and_expiry_is_reported(tmp_path: Path,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    ca, clocks, store = _followed_store(tmp_path)
    assert store.states()[0].expires_in_s == pytest.approx(10 * 86400, abs=1)
    assert not store.refresh()  # not yet time to look

    caplog.set_level(logging.WARNING, "bloomswarm.swarm")
    clocks.advance(4 * 86400)  # 6 days left: warned
    assert not store.refresh()
    assert "expires in 6.0 days" in caplog.text

    clocks.advance(7 * 86400)  # expired: reported, still held
    caplog.clear()
    assert not store.refresh()
    assert "expired" in caplog.text and store.states()[0].expires_in_s < 0
    caplog.clear()
    clocks.advance(REFRESH_S)
    store.refresh()
    assert "expired" not in caplog.text  # at most once an hour

    renewed_at = datetime.datetime.fromtimestamp(clocks.wall, tz=datetime.timezone.utc)
    cert, key = issue_certificate(ca[0], ca[1], name="agent", days=30, now=renewed_at)
    (tmp_path / "ids" / "tls.key").write_bytes(key)
    (tmp_path / "ids" / "tls.crt").write_bytes(cert)
    os.utime(tmp_path / "ids" / "tls.crt", ns=(1, 1))  # a different stamp, whatever the clock
    clocks.advance(REFRESH_S)
    assert store.refresh()
    assert store.states()[0].expires_in_s == pytest.approx(30 * 86400, abs=REFRESH_S + 1)


def test_renewed_files_that_do_not_load_keep_the_identities_held(tmp_path: Path,
                                                                 caplog: pytest.LogCaptureFixture) -> None:
    ca, clocks, store = _followed_store(tmp_path)
    (tmp_path / "ids" / "tls.key").write_bytes(b"garbage")
    clocks.advance(REFRESH_S)
    assert not store.refresh()
    assert "do not load" in caplog.text
    assert len(store.identities) == 1 and store.for_ca(ca[0]) is not None
