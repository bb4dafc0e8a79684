"""The agent's configuration: one frozen dataclass per component, from a file, the environment, flags.

Precedence, lowest first: the defaults written on the dataclasses below (the only place
defaults live), a TOML file, ``BLOOMSWARM_AGENT_*`` environment variables, command-line
flags. Every setting has a dotted name; the file uses it as table and key, the
environment upper-cases it with ``_`` for ``.`` behind ``BLOOMSWARM_AGENT_``::

    # agent.toml                                        # the same from the environment
    data_dir = "/var/lib/bloomswarm"                    # BLOOMSWARM_AGENT_DATA_DIR
    public_keys = ["/etc/bloomswarm/publisher.pub"]     # BLOOMSWARM_AGENT_PUBLIC_KEYS (a,b)

    [s3]                                                # the origin: S3 ...
    bucket = "filters"                                  # BLOOMSWARM_AGENT_S3_BUCKET
    prefix = "fleet-a"                                  # BLOOMSWARM_AGENT_S3_PREFIX

    [origin]                                            # ... or a CDN in front of it
    cdn_base_url = "https://cdn.example.com/fleet-a"    # BLOOMSWARM_AGENT_ORIGIN_CDN_BASE_URL

    [watch]
    poll_interval_s = 2.0                               # BLOOMSWARM_AGENT_WATCH_POLL_INTERVAL_S

The ``[s3]`` table takes every field of :class:`~bloomswarm.common.storage.S3Config`;
credentials come from boto3's standard chain, never from here. ``[swarm]`` is handed to
:class:`~.swarm.SwarmConfig`, which checks its own values. docs/agent.md
lists every setting. An unknown setting — in the file or as a ``BLOOMSWARM_AGENT_*``
variable — or a value of the wrong type raises ConfigError naming it.
:mod:`bloomswarm.common.settings` does the reading and checking for both components.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bloomswarm.common.errors import ConfigError
from bloomswarm.common.settings import SettingsLoader
from bloomswarm.common.storage import S3Config

from .swarm import SwarmConfig

ENV_PREFIX = "BLOOMSWARM_AGENT_"
CONFIG_ENV = "BLOOMSWARM_AGENT_CONFIG"
"""Environment variable naming the config file when ``--config`` is not given."""

MIB = 1024 * 1024
GIB = 1024 * MIB
TransferKind = Literal["swarm", "direct"]


@dataclass(frozen=True)
class OriginConfig:
    """Where the origin is when it is not the S3 API, and how the web seed URL is made."""

    cdn_base_url: str | None = None
    """Plain HTTP(S) URL in front of the bucket prefix (a CDN): ``{cdn_base_url}/latest.json``
    is the pointer. Exclusive with ``[s3]``; needs no credentials."""
    presign_expiry_s: int = 3600
    """Lifetime of the presigned S3 URL given to the transfer as web seed; the transfer asks
    for a fresh one before it expires."""
    http_timeout_s: float = 10.0
    """Seconds to wait for a connection or a response byte from the CDN."""

    def __post_init__(self) -> None:
        if self.cdn_base_url is not None and not self.cdn_base_url.startswith(
            ("http://", "https://")
        ):
            raise ConfigError(f"origin.cdn_base_url must be http(s)://, got {self.cdn_base_url!r}")
        if self.presign_expiry_s < 60:
            raise ConfigError(f"origin.presign_expiry_s must be at least 60, got {self.presign_expiry_s}")
        if self.http_timeout_s <= 0:
            raise ConfigError("origin.http_timeout_s must be positive")


@dataclass(frozen=True)
class WatchConfig:
    """How often the agent looks for a new version, and how it backs off after failures."""

    poll_interval_s: float = 2.0
    """Seconds between two conditional GETs of latest.json."""
    poll_jitter_s: float = 0.5
    """A uniform random 0..jitter seconds added to every interval, so a fleet started at
    once does not poll in lock-step."""
    retry_initial_s: float = 1.0
    """First delay after a failure (origin unreachable, verification failed); doubled after
    each further failure in a row."""
    retry_max_s: float = 60.0
    """Longest delay between two attempts."""
    max_pointer_age_s: float = 0.0
    """Freeze detection: the newest verified latest.json seen is *stale* once its
    ``issued_at`` is older than this many seconds by the agent's clock (a CDN or a man in
    the middle serving an old signed pointer for ever). Stale is reported (metrics, log,
    /status), never acted on. 0 turns it off. Set it above the publisher's refresh
    interval plus clock skew (agent/freshness.py)."""

    def __post_init__(self) -> None:
        if self.poll_interval_s <= 0 or self.retry_initial_s <= 0:
            raise ConfigError("watch.poll_interval_s and watch.retry_initial_s must be positive")
        if self.max_pointer_age_s < 0:
            raise ConfigError(
                f"watch.max_pointer_age_s must not be negative (0 turns it off), got {self.max_pointer_age_s}"
            )
        if self.poll_jitter_s < 0:
            raise ConfigError("watch.poll_jitter_s must not be negative")
        if self.retry_max_s < self.retry_initial_s:
            raise ConfigError("watch.retry_max_s must be at least watch.retry_initial_s")


@dataclass(frozen=True)
class InstallConfig:
    """What the agent accepts to download, and how many versions it keeps installed."""

    keep_versions: int = 2
    """Installed (and seeded) versions kept: the current one plus the newest others."""
    max_file_size: int = 64 * GIB
    """A version whose file is larger is refused before any download."""
    disk_margin_bytes: int = 1 * GIB
    """Free space that must remain on the data directory's file system after a download;
    a version that does not fit is refused before any download."""

    def __post_init__(self) -> None:
        if self.keep_versions < 1:
            raise ConfigError(f"install.keep_versions must be at least 1, got {self.keep_versions}")
        if self.max_file_size < 1 or self.disk_margin_bytes < 0:
            raise ConfigError("install.max_file_size must be positive, disk_margin_bytes >= 0")


@dataclass(frozen=True)
class StatusConfig:
    """The HTTP endpoint with /healthz, /readyz, /metrics and /status."""

    host: str = "127.0.0.1"
    """Address to listen on; loopback by default (the scraper runs on the instance)."""
    port: int = 9731
    """TCP port; 0 picks a free one."""

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"status.port must be in 0..65535, got {self.port}")


@dataclass(frozen=True)
class DirectConfig:
    """The plain-HTTP transfer (``transfer = "direct"``): no peers, the file from the origin."""

    chunk_size: int = 1 * MIB
    """Bytes read and written at a time."""
    timeout_s: float = 30.0
    """Seconds to wait for a connection or a response byte."""
    rate_limit_bytes_per_s: int = 0
    """Download rate cap; 0 for none."""

    def __post_init__(self) -> None:
        if self.chunk_size < 4096 or self.timeout_s <= 0 or self.rate_limit_bytes_per_s < 0:
            raise ConfigError(
                "direct.chunk_size must be >= 4096, timeout_s positive, rate_limit >= 0"
            )


@dataclass(frozen=True)
class AgentConfig:
    """Everything ``bloomswarm agent run`` needs."""

    data_dir: Path
    """The data directory applications read through LiveFilter (see common/datadir.py)."""
    public_keys: tuple[Path, ...]
    """Ed25519 public keys (PEM) of the publisher; a signature by any one is accepted, so
    a new key can be shipped before the publisher switches to it."""
    transfer: TransferKind = "swarm"
    """How bytes move: "swarm" (libtorrent, peers + web seed) or "direct" (HTTP from the
    origin only: tests and the no-P2P baseline)."""
    resume_save_interval_s: float = 30.0
    """Seconds between two saves of the unfinished download's resume data (also saved on
    SIGTERM)."""
    s3: S3Config | None = None
    """The bucket, when the origin is the S3 API (``[s3]`` table)."""
    origin: OriginConfig = field(default_factory=OriginConfig)
    """CDN origin and web seed URLs (``[origin]`` table)."""
    watch: WatchConfig = field(default_factory=WatchConfig)
    """Polling and retries (``[watch]`` table)."""
    install: InstallConfig = field(default_factory=InstallConfig)
    """Size limits and retention (``[install]`` table)."""
    status: StatusConfig = field(default_factory=StatusConfig)
    """Health, metrics and status endpoint (``[status]`` table)."""
    direct: DirectConfig = field(default_factory=DirectConfig)
    """The direct transfer's settings (``[direct]`` table)."""
    swarm: SwarmConfig = field(default_factory=SwarmConfig)
    """The libtorrent transfer's settings (``[swarm]`` table; agent/swarm.py documents
    them and checks their values)."""

    def __post_init__(self) -> None:
        if not self.public_keys:
            raise ConfigError("no public_keys: pin at least one publisher key")
        if (self.s3 is None) == (self.origin.cdn_base_url is None):
            raise ConfigError(
                "configure exactly one origin: an [s3] bucket or origin.cdn_base_url"
            )
        if self.resume_save_interval_s <= 0:
            raise ConfigError("resume_save_interval_s must be positive")


# --- loading ----------------------------------------------------------------------------------

_LOADER = SettingsLoader(
    AgentConfig, env_prefix=ENV_PREFIX, strict=True, ignore_env=(CONFIG_ENV,), scalar_lists=True
)

TABLES: dict[str, Any] = _LOADER.tables
"""Table name -> the dataclass it builds. A dataclass with a ``from_mapping`` classmethod
(SwarmConfig) checks and converts its own values, from TOML or from environment strings."""

SETTINGS: dict[str, Any] = _LOADER.settings
"""Dotted setting name -> the type its value must have."""


def env_name(setting: str) -> str:
    """The environment variable of a setting: "s3.bucket" -> "BLOOMSWARM_AGENT_S3_BUCKET"."""
    return _LOADER.env_name(setting)


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> AgentConfig:
    """Assemble the configuration from ``path`` (TOML), ``environ`` and ``overrides``.

    ``overrides`` maps dotted names to flag values; None values are ignored (the flag was
    not given). Raises ConfigError for an unreadable or invalid file, an unknown setting
    (file, ``BLOOMSWARM_AGENT_*`` variable or override), a value of the wrong type, or a
    missing required setting.
    """
    return _assemble(_LOADER.load(path, environ=environ, overrides=overrides))


def _assemble(values: Mapping[str, object]) -> AgentConfig:
    for required in ("data_dir", "public_keys"):
        if required not in values:
            raise ConfigError(
                f"missing setting {required}: set it in the config file or {env_name(required)}"
            )
    if _LOADER.table_values(values, "s3") and "s3.bucket" not in values:
        raise ConfigError(f"[s3] needs a bucket ({env_name('s3.bucket')})")
    fields = _LOADER.fields(values)
    try:
        return AgentConfig(**fields)  # type: ignore[arg-type]
    except TypeError as exc:  # a dataclass refusing a value it cannot take
        raise ConfigError(f"invalid agent configuration: {exc}") from exc


__all__ = [
    "CONFIG_ENV",
    "ENV_PREFIX",
    "SETTINGS",
    "AgentConfig",
    "DirectConfig",
    "InstallConfig",
    "OriginConfig",
    "StatusConfig",
    "WatchConfig",
    "env_name",
    "load_config",
]
