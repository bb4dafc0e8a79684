"""The libtorrent session's settings, tuned for a data centre as measured in design.md.

TCP only (uTP off), large send buffers, several connections per IP allowed, UPnP/NAT-PMP
off; peers from the configured trackers, the DHT (bootstrapped only from the configured
nodes, never from a public router), LSD when enabled, and PEX.
"""

from __future__ import annotations

from collections.abc import Mapping

import libtorrent as lt

from bloomswarm.common.errors import ConfigError
from bloomswarm.common.settings import INT32_MAX

from .config import SwarmConfig, with_tls_listeners

KIB = 1024

__all__ = ["check_fits_libtorrent", "session_settings", "with_tls_listeners"]


def check_fits_libtorrent(pack: Mapping[str, object]) -> None:
    """ConfigError naming the setting when one of the integers of ``pack`` does not
    fit the C ``int`` libtorrent stores it in (libtorrent would wrap it to 32 bits without
    a word: a 5e9 B/s rate limit becomes 705 MB/s, 2**32 none). :class:`SwarmConfig`
    refuses such values at load; this catches a setting added without its bound."""
    for key, value in pack.items():
        if isinstance(value, int) and not -INT32_MAX - 1 <= value <= INT32_MAX:
            raise ConfigError(f"libtorrent setting {key} must be within a 32-bit int, got {value}")


def session_settings(config: SwarmConfig) -> lt.settings_pack:
    """The libtorrent ``settings_pack`` for ``config`` (exposed for tests and docs)."""
    guarded = bool(config.certificate_dirs or config.allowed_peer_networks)
    pack: lt.settings_pack = {
        "listen_interfaces": (with_tls_listeners(config.listen_interfaces) if config.certificate_dirs
                              else config.listen_interfaces),
        "user_agent": config.user_agent,
        # A data centre: TCP only, big send buffers, many connections per address.
        "enable_outgoing_utp": False,
        "enable_incoming_utp": False,
        "enable_outgoing_tcp": True,
        "enable_incoming_tcp": True,
        "send_buffer_watermark": config.send_buffer_watermark,
        "send_buffer_low_watermark": min(64 * KIB, config.send_buffer_watermark),
        # A download whose wanted pieces are done while an origin stripe holds others at
        # priority 0 is "finished" for a tick: keep its connections to seeds.
        "close_redundant_connections": False,
        "max_out_request_queue": 1500,
        "allow_multiple_connections_per_ip": True,
        "connections_limit": config.connections_limit,
        "unchoke_slots_limit": config.unchoke_slots,
        "upload_rate_limit": config.upload_rate_limit,
        "download_rate_limit": config.download_rate_limit,
        "enable_upnp": False,
        "enable_natpmp": False,
        "announce_to_all_trackers": True,
        "announce_to_all_tiers": True,
        # Peer discovery.
        "enable_dht": config.enable_dht,
        "dht_bootstrap_nodes": ",".join(config.dht_bootstrap_nodes),
        "dht_restrict_routing_ips": config.dht_restrict_ips,
        "dht_restrict_search_ips": config.dht_restrict_ips,
        "dht_block_ratelimit": 5 if config.dht_restrict_ips else 1_000_000,
        "enable_lsd": config.enable_lsd,
        # The origin as web seed.
        "ssrf_mitigation": not config.allow_private_origin,
        "urlseed_max_request_bytes": config.origin_request_bytes,
        "urlseed_wait_retry": max(1, int(config.origin_retry_s)),
        # Events: errors, state, resume data, hash failures, tracker and DHT replies.
        "alert_mask": (
            lt.alert_category.error
            | lt.alert_category.status
            | lt.alert_category.storage
            | lt.alert_category.tracker
            | lt.alert_category.dht_operation
            # Refused peers (agent/peer_access.py), only when something refuses them.
            | (lt.alert_category.peer | lt.alert_category.connect | lt.alert_category.ip_block
               if guarded else 0)
        ),
        # The allow-list is for peers: trackers are configured, not discovered.
        "apply_ip_filter_to_trackers": False,
        "alert_queue_size": config.alert_queue_size,
    }
    check_fits_libtorrent(pack)
    return pack
