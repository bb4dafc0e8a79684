"""The swarm's pure parts: the origin policy's decisions, the origin/peer byte split, the
``[swarm]`` settings and the libtorrent settings they map to. The real sessions are in
tests/functional/test_swarm.py."""

from __future__ import annotations

import pytest

from bloomswarm.agent.swarm import (
    STALL_FACTOR,
    ByteAccounting,
    SwarmConfig,
    peers_hold_needed,
    session_settings,
    want_origin,
)
from bloomswarm.common.errors import ConfigError

MIB = 1024 * 1024


# --- the policy ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("idle", "holding", "expected"),
    [
        (0.0, False, False),  # peers just delivered: not starved
        (1.9, False, False),
        (2.0, False, True),  # nothing for starved_s and no peer has what we need
        (2.0, True, False),  # a peer has needed pieces: wait for it
        (STALL_FACTOR * 2.0 - 0.1, True, False),
        (STALL_FACTOR * 2.0, True, True),  # ... unless it delivers nothing for long
    ],
)
def test_off_turns_on_only_when_starved(idle: float, holding: bool, expected: bool) -> None:
    assert want_origin(origin_on=False, idle_s=idle, starved_s=2.0, peers_hold_needed=holding) is expected


@pytest.mark.parametrize(
    ("idle", "holding", "expected"),
    [
        (0.0, False, True),  # the origin is the only source of what we need: keep it
        (10.0, False, True),
        (0.0, True, False),  # a peer has what we need (a collision): back off
        (STALL_FACTOR * 2.0, True, True),  # ... but it does not deliver
    ],
)
def test_on_backs_off_when_a_peer_holds_needed_pieces(idle: float, holding: bool, expected: bool) -> None:
    assert want_origin(origin_on=True, idle_s=idle, starved_s=2.0, peers_hold_needed=holding) is expected


def test_peers_hold_needed() -> None:
    have = [True, False, False]
    assert not peers_hold_needed(have, [])
    assert not peers_hold_needed(have, [(False, [True, False, False])])  # only what we have
    assert peers_hold_needed(have, [(False, [False, False, True])])
    assert peers_hold_needed(have, [(True, [])])  # a seed holds everything
    assert not peers_hold_needed(have, [(False, [True])])  # short bitfield: nothing beyond
    assert not peers_hold_needed([True, True], [(True, [])])  # nothing needed


# --- byte accounting ----------------------------------------------------------------------


def test_live_connections_are_counted_by_their_growth() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("o",), True, 100, 10), (("p",), False, 50, 5)])
    acc.update(150, [(("o",), True, 300, 10), (("p",), False, 60, 5)])
    assert (acc.origin, acc.peers) == (300, 60)


def test_a_closed_connection_tail_is_recovered_from_the_total() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("o",), True, 100, 10), (("p",), False, 100, 10)])
    # The web seed closed after receiving 40 more bytes; only the total knows.
    acc.update(240, [(("p",), False, 100, 10)])
    assert (acc.origin, acc.peers) == (140, 100)


def test_unexplained_bytes_are_split_by_last_rates() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("o",), True, 0, 300), (("p",), False, 0, 100)])
    acc.update(400, [])
    assert (acc.origin, acc.peers) == (300, 100)


def test_a_reused_key_is_a_new_connection() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("p",), False, 500, 1)])
    acc.update(500, [(("p",), False, 20, 1)])  # counter went back: reconnected
    assert acc.peers == 520


def test_a_lagging_total_is_given_to_the_last_closed_connections_when_it_catches_up() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("o",), True, 100, 1), (("p",), False, 100, 1)])
    acc.update(150, [(("p",), False, 100, 1)])  # the web seed closed; the total lags
    assert (acc.origin, acc.peers) == (100, 100)
    acc.update(260, [(("p",), False, 100, 1)])  # it catches up: the web seed's tail
    assert (acc.origin, acc.peers) == (160, 100)


def test_a_total_that_lags_the_counters_takes_nothing_back() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("o",), True, 1000, 1)])
    acc.update(10, [])  # libtorrent's total lags; never negative attribution
    assert (acc.origin, acc.peers) == (1000, 0)



def test_a_web_seed_connection_unseen_between_snapshots_is_the_origins() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("p",), False, 0, 1)], origin_attached=True)
    # The web seed connected, sent the whole file and closed between two snapshots.
    acc.update(5000, [(("p",), False, 0, 1)], origin_attached=True)
    assert (acc.origin, acc.peers) == (5000, 0)


def test_unexplained_bytes_without_the_origin_attached_are_not_the_origins() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("p",), False, 0, 1)])
    acc.update(300, [])  # the peer closed after 300 more bytes
    assert (acc.origin, acc.peers) == (0, 300)


def test_a_peer_connection_unseen_between_snapshots_is_the_peers() -> None:
    acc = ByteAccounting()
    acc.update(0, [])
    # A peer connected, sent the whole file and closed between two snapshots (both seeds).
    acc.update(4096, [])
    assert (acc.origin, acc.peers) == (0, 4096)


def test_unseen_bytes_just_after_the_origin_was_removed_are_the_origins() -> None:
    acc = ByteAccounting()
    acc.update(0, [], origin_attached=True)
    acc.update(100, [])  # the origin was removed since: what arrived was still its tail
    assert (acc.origin, acc.peers) == (100, 0)
    acc.update(150, [])  # attached at neither snapshot: a peer came and went
    assert (acc.origin, acc.peers) == (100, 50)

# --- settings -----------------------------------------------------------------------------


def test_from_mapping_accepts_toml_values_and_environment_strings() -> None:
    config = SwarmConfig.from_mapping({
        "listen_interfaces": "127.0.0.1:0",
        "trackers": "http://a/announce, http://b/announce",
        "enable_dht": "false",
        "dht_bootstrap_nodes": ["10.0.0.1:6881"],
        "upload_rate_limit": "1048576",
        "origin_grace_s": 3,
        "origin_policy": "always",
    })
    assert config.trackers == ("http://a/announce", "http://b/announce")
    assert config.enable_dht is False
    assert config.dht_bootstrap_nodes == ("10.0.0.1:6881",)
    assert config.upload_rate_limit == MIB
    assert config.origin_grace_s == 3.0
    assert config.origin_policy == "always"


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"no_such": 1}, "unknown setting swarm.no_such"),
        ({"enable_dht": "maybe"}, "swarm.enable_dht"),
        ({"upload_rate_limit": True}, "swarm.upload_rate_limit"),
        ({"upload_rate_limit": -1}, "swarm.upload_rate_limit"),
        ({"origin_policy": "sometimes"}, "swarm.origin_policy"),
        ({"dht_bootstrap_nodes": ["nohost"]}, "host:port"),
        ({"origin_request_bytes": 1000}, "origin_request_bytes"),
    ],
)
def test_bad_settings_are_refused_by_name(values: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        SwarmConfig.from_mapping(values)


def test_session_is_tuned_for_a_data_centre() -> None:
    settings = session_settings(SwarmConfig())
    assert settings["enable_outgoing_utp"] is False
    assert settings["enable_incoming_utp"] is False
    assert settings["send_buffer_watermark"] == 8 * MIB
    assert settings["allow_multiple_connections_per_ip"] is True
    assert settings["ssrf_mitigation"] is True
    assert settings["dht_bootstrap_nodes"] == ""  # never a public router
    loopback = session_settings(SwarmConfig(allow_private_origin=True, dht_restrict_ips=False))
    assert loopback["ssrf_mitigation"] is False
    assert loopback["dht_restrict_routing_ips"] is False
    assert loopback["dht_restrict_search_ips"] is False
