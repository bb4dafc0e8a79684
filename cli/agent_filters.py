"""``bloomswarm agent run`` with ``[[filters]]``: wiring one agent that follows many filters.

One libtorrent session (or direct transfer), one S3 client or CDN base, one poll of
``index.json``, one status endpoint; per filter a daemon reading its own folder of the
bucket through the shared client (:class:`~bloomswarm.common.prefixed_store.PrefixedStore`).
See :mod:`bloomswarm.agent.filter_set`.
"""

from __future__ import annotations

import datetime as dt
import urllib.parse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bloomswarm.agent.config import AgentConfig
from bloomswarm.agent.filter_config import FilterConfig
from bloomswarm.common.errors import ConfigError

if TYPE_CHECKING:
    from bloomswarm.agent.announcements import DocumentReader
    from bloomswarm.agent.daemon import AgentDaemon
    from bloomswarm.agent.filter_set import FilterSet
    from bloomswarm.agent.origin import Origin
    from bloomswarm.agent.peer_access import PeerAccess
    from bloomswarm.agent.transfer import Transfer
    from bloomswarm.common.signing import VerifyKey


def all_public_keys(config: AgentConfig) -> list[VerifyKey]:
    """Every key the configuration pins: the agent's and each filter's (the index may be
    signed by any of them)."""
    from bloomswarm.common.signing import load_public_keys

    paths = list(config.public_keys)
    for entry in config.filters:
        paths.extend(p for p in entry.public_keys if p not in paths)
    return load_public_keys(tuple(paths))


POLL_WORKERS = 4
"""Threads the filters' daemons share for their polls (each reads its entry of the index
in memory; a filter whose torrent is not in the index, or with a delta to plan, fetches
documents from the origin there)."""


def build_filter_set(config: AgentConfig, transfer: Transfer, peer_access: PeerAccess | None) -> FilterSet:
    """The agent of ``config``'s filters over the shared ``transfer``."""
    from bloomswarm.agent.announcements import HttpDocumentReader, PresignedPollReader
    from bloomswarm.agent.daemon import AgentDaemon
    from bloomswarm.agent.filter_index_source import IndexPoller, filter_announcements
    from bloomswarm.agent.metrics import AgentMetrics
    from bloomswarm.agent.origin import CdnOrigin, S3Origin
    from bloomswarm.agent.scoped_transfer import ScopedTransfer
    from bloomswarm.agent.worker_pool import WorkerPool
    from bloomswarm.common.prefixed_store import PrefixedStore
    from bloomswarm.common.signing import load_public_keys
    from bloomswarm.common.storage import S3ObjectStore

    index_reader: DocumentReader
    if config.s3 is not None:
        store = S3ObjectStore(config.s3)
        read_timeout_s = config.s3.read_timeout_s
        index_reader = PresignedPollReader(store, expiry_s=config.origin.presign_expiry_s,
                                           timeout_s=read_timeout_s)

        def filter_origin(entry: FilterConfig) -> tuple[DocumentReader, Origin]:
            folder = PrefixedStore(store, entry.store_prefix)
            reader = PresignedPollReader(folder, expiry_s=config.origin.presign_expiry_s,
                                         timeout_s=read_timeout_s)
            return reader, S3Origin(folder, config.origin.presign_expiry_s)
    else:
        base = config.origin.cdn_base_url
        if base is None:  # AgentConfig guarantees one origin
            raise ConfigError("no origin configured")
        timeout = config.origin.http_timeout_s
        index_reader = HttpDocumentReader(base, timeout_s=timeout)

        def filter_origin(entry: FilterConfig) -> tuple[DocumentReader, Origin]:
            url = filter_folder_url(base, entry)
            return HttpDocumentReader(url, timeout_s=timeout), CdnOrigin(url)

    poller = IndexPoller(index_reader, all_public_keys(config))
    polls = WorkerPool(POLL_WORKERS, name="bloomswarm-poll")  # not a thread per filter per poll

    def make_daemon(entry: FilterConfig, per_filter: AgentConfig) -> AgentDaemon:
        keys: Sequence[VerifyKey] = load_public_keys(per_filter.public_keys)
        reader, origin = filter_origin(entry)
        source = filter_announcements(entry, poller, reader, keys)
        return AgentDaemon(per_filter, source, ScopedTransfer(transfer, entry.name), origin, keys,
                           metrics=AgentMetrics(), background_polls=True, poll_pool=polls,
                           name=entry.name)

    from bloomswarm.agent.filter_set import FilterSet

    return FilterSet(config, transfer, poller, make_daemon, peer_access=peer_access, background_polls=True,
                     index_keys=all_public_keys)


def filter_folder_url(base_url: str, entry: FilterConfig) -> str:
    """The URL of filter ``entry``'s folder under the CDN ``base_url``: its store prefix
    percent-encoded, so that "?", "#" or "%" in it are part of the path, as the S3 API
    reads them."""
    return f"{base_url.rstrip('/')}/{urllib.parse.quote(entry.store_prefix, safe='/')}"


def format_filters_status(url: str, status: dict[str, Any]) -> str:
    """/status of an agent of many filters, for a person: the index, then one line a filter."""
    index = status.get("index") or {}
    filters: dict[str, dict[str, Any]] = status.get("filters") or {}
    ready = sum(1 for s in filters.values() if s.get("ready"))
    lines = [f"agent        {url} ({len(filters)} filters, {ready} ready)"]
    if index.get("sequence") is None:
        lines.append("index        none read yet")
    else:
        issued_at = dt.datetime.fromtimestamp(index["issued_at"], dt.timezone.utc)
        issued = issued_at.strftime("%Y-%m-%d %H:%M:%S UTC")
        lines.append(f"index        sequence {index['sequence']}, issued {issued}")
    if index.get("unknown_filters"):
        unknown = ", ".join(index["unknown_filters"])
        lines.append(f"ignored      {unknown} (in the index, not in the configuration)")
    if index.get("last_error"):
        lines.append(f"index error  {index['last_error']}")
    if status.get("reload_error"):
        lines.append(f"reload error {status['reload_error']}")
    for name, error in (status.get("not_started") or {}).items():
        lines.append(f"not started  {name}: {error}")
    width = max((len(name) for name in filters), default=0)
    for name, filter_status in filters.items():
        lines.append(f"  {name:<{width}}  {_filter_line(filter_status)}")
    return "\n".join(lines)


def _filter_line(status: dict[str, Any]) -> str:
    current = status.get("current_version")
    parts = [f"v{current}" if current is not None else "none",
             "ready" if status.get("ready") else "not ready"]
    download = status.get("download")
    if download:
        parts.append(f"fetching v{download['version']} {download['state']} {download['progress']:.0%}")
    if status.get("last_error"):
        parts.append(f"last error: {status['last_error']}")
    return ", ".join(parts)


__all__ = ["all_public_keys", "build_filter_set", "filter_folder_url", "format_filters_status"]
