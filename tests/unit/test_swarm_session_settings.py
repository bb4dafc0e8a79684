"""The libtorrent settings a ``[swarm]`` table maps to."""

from __future__ import annotations

from bloomswarm.agent.config import SwarmConfig
from bloomswarm.agent.session_settings import session_settings

MIB = 1024 * 1024


def test_session_is_tuned_for_a_data_centre() -> None:
    settings = session_settings(SwarmConfig())
    assert settings["enable_outgoing_utp"] is False
    assert settings["enable_incoming_utp"] is False
    assert settings["send_buffer_watermark"] == 8 * MIB
    assert settings["allow_multiple_connections_per_ip"] is True
    assert settings["ssrf_mitigation"] is True
    assert settings["dht_bootstrap_nodes"] == ""  # never a public router
    assert settings["connections_limit"] == 500  # docs/security.md: a connection flood is capped
    assert settings["dht_restrict_routing_ips"] is True and settings["dht_restrict_search_ips"] is True
    loopback = session_settings(SwarmConfig(allow_private_origin=True, dht_restrict_ips=False))
    assert loopback["ssrf_mitigation"] is False
    assert loopback["dht_restrict_routing_ips"] is False
    assert loopback["dht_restrict_search_ips"] is False
