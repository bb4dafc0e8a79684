"""The publisher's configuration: one frozen dataclass tree, from a file, the environment, flags.

Precedence, lowest first: the defaults written on the dataclasses below (the only place
defaults live), a TOML file, ``BLOOMSWARM_*`` environment variables, command-line flags.

Every setting has a dotted name. The file uses it as table and key, the environment
upper-cases it with ``_`` for ``.`` behind ``BLOOMSWARM_``, the CLI passes it by name::

    # publisher.toml                               # the same from the environment
    publisher_id = "builder-1"                     # BLOOMSWARM_PUBLISHER_ID
    signing_key = "/etc/bloomswarm/publisher.key"  # BLOOMSWARM_SIGNING_KEY
    keep_versions = 5                              # BLOOMSWARM_KEEP_VERSIONS
    trackers = ["http://tracker-1:6969/announce"]  # BLOOMSWARM_TRACKERS (comma-separated)
    torrent_format = "v1"                          # BLOOMSWARM_TORRENT_FORMAT

    [s3]
    bucket = "filters"                             # BLOOMSWARM_S3_BUCKET
    prefix = "fleet-a"                             # BLOOMSWARM_S3_PREFIX
    endpoint_url = "http://minio:9000"             # BLOOMSWARM_S3_ENDPOINT_URL

    [build]
    fpp = 0.001                                    # BLOOMSWARM_BUILD_FPP
    expected_keys = 100_000_000                    # BLOOMSWARM_BUILD_EXPECTED_KEYS

    [sizing]
    headroom = 0.2                                 # BLOOMSWARM_SIZING_HEADROOM

    [deltas]
    max_bases = 8                                  # BLOOMSWARM_DELTAS_MAX_BASES

    [tracker]
    whitelist = "/etc/opentracker/whitelist.txt"   # BLOOMSWARM_TRACKER_WHITELIST
    pid_file = "/run/opentracker.pid"              # BLOOMSWARM_TRACKER_PID_FILE

The ``[s3]`` table takes every field of :class:`~bloomswarm.common.storage.S3Config`.
No secret belongs here: boto3's standard credential chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``, ``AWS_PROFILE`` or ``s3.profile``, shared files, instance and
pod roles) supplies credentials. An unknown setting in the file or a value of the wrong
type (nan or inf where a number belongs, a string where a bool does) raises ConfigError
naming it; unknown ``BLOOMSWARM_*`` variables are ignored (other components use the prefix
too). :mod:`bloomswarm.common.settings` does the reading and checking for both components,
the same way in every table.
"""

from __future__ import annotations

import math
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bloomswarm.common.errors import ConfigError
from bloomswarm.common.manifest import MIN_PIECE_SIZE
from bloomswarm.common.params import Layout
from bloomswarm.common.s3_config import check_utf8
from bloomswarm.common.settings import MAX_INTERVAL_S, ONE_DAY, SettingsLoader, check_at_most
from bloomswarm.common.storage import S3Config

from .sources import KeyType

ENV_PREFIX = "BLOOMSWARM_"

TorrentFormat = Literal["v1", "hybrid"]
"""The torrent the publisher makes: "v1" (SHA-1 pieces, one info-hash; every client reads
it) or "hybrid" (v1 plus v2 SHA-256 merkle trees, two info-hashes)."""
_TRACKER_SCHEMES = ("http://", "https://", "udp://")


@dataclass(frozen=True)
class BuildDefaults:
    """How ``publish`` builds the filter when no flag says otherwise."""

    key_type: KeyType = "str"
    """How input lines become keys: "str" (UTF-8), "bytes" or "int" (decimal, 64-bit)."""
    csv_column: str | None = None
    """Read keys from this CSV column instead of whole lines."""
    parquet_column: str | None = None
    """Read keys from this column of Parquet inputs (None: a Parquet file's only column)."""
    fpp: float = 0.01
    """Target false-positive rate, in (0, 1)."""
    layout: Layout = Layout.BLOCKED
    """Filter layout: "blocked" (one cache line per lookup) or "standard"."""
    seed: int = 0
    """MurmurHash3 seed, 0 .. 2**32-1."""
    expected_keys: int | None = None
    """Size the filter for this many keys; None counts the input first (a second pass)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.fpp < 1.0:
            raise ConfigError(f"build.fpp must be between 0 and 1, got {self.fpp}")
        if not 0 <= self.seed < 2**32:
            raise ConfigError(f"build.seed must be in 0 .. 2**32-1, got {self.seed}")
        if self.expected_keys is not None and self.expected_keys < 1:
            raise ConfigError(f"build.expected_keys must be at least 1, got {self.expected_keys}")


@dataclass(frozen=True)
class SizingConfig:
    """When ``publish`` keeps the previous version's filter parameters and when it resizes.

    Deltas need equal parameters (m, k, layout, seed); a resize is a version without
    deltas. docs/publishing.md ("Sizing and deltas") weighs the settings.
    """

    headroom: float = 0.2
    """On a resize, size for this many more keys than the input holds (0.2: 20% growth
    fits before the next resize)."""
    fpp_margin: float = 0.1
    """Keep the parameters only while their expected false-positive rate at the new key
    count is at most the target times (1 + fpp_margin)."""
    shrink_below: float = 0.5
    """Resize when the input holds fewer keys than this share of the capacity (the file
    would be over twice the size it needs); 0 never shrinks."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.headroom <= 10.0:
            raise ConfigError(f"sizing.headroom must be in [0, 10], got {self.headroom}")
        if not 0.0 <= self.fpp_margin <= 10.0:
            raise ConfigError(f"sizing.fpp_margin must be in [0, 10], got {self.fpp_margin}")
        if not 0.0 <= self.shrink_below < 1.0:
            raise ConfigError(f"sizing.shrink_below must be in [0, 1), got {self.shrink_below}")


@dataclass(frozen=True)
class DeltaConfig:
    """Which deltas ``publish`` makes for a new version (docs/publishing.md, "Deltas")."""

    max_bases: int = 8
    """A direct delta from each of this many newest retained versions that share the new
    version's parameters; 0 makes no deltas."""
    max_share: float = 0.5
    """Skip a delta larger than this share of the filter file (past it, the full file is
    the better download)."""
    cache_dir: Path | None = None
    """Keep the files of the ``max_bases`` newest published versions here (that much
    disk), so the next publish need not download its base versions from the bucket; None
    downloads them each time (one at a time, into ``work_dir``). One publisher per
    directory."""

    def __post_init__(self) -> None:
        if self.max_bases < 0:
            raise ConfigError(f"deltas.max_bases must not be negative, got {self.max_bases}")
        if not 0.0 < self.max_share <= 1.0:
            raise ConfigError(f"deltas.max_share must be in (0, 1], got {self.max_share}")


@dataclass(frozen=True)
class TrackerConfig:
    """Where ``tracker-sync`` keeps opentracker's whitelist and how it finds the tracker."""

    whitelist: Path | None = None
    """The whitelist file opentracker reads (``access.whitelist``); written atomically."""
    pid_file: Path | None = None
    """File holding the tracker's PID, to send it SIGHUP after a change."""
    interval_s: float = 30.0
    """Seconds between two syncs in ``tracker-sync --watch``: more than 0, at most a day."""

    def __post_init__(self) -> None:
        if not self.interval_s > 0:  # NaN too: the loader refuses it, a direct caller may not
            raise ConfigError(f"tracker.interval_s must be positive, got {self.interval_s}")
        check_at_most("tracker.interval_s", self.interval_s, MAX_INTERVAL_S, ONE_DAY)


@dataclass(frozen=True)
class PublisherConfig:
    """Everything the publisher and its maintenance commands need."""

    s3: S3Config
    """The bucket and prefix the fleet reads, and how to reach them."""
    signing_key: Path | None = None
    """Ed25519 private key (PKCS#8 PEM) that signs manifests and latest.json."""
    accepted_public_keys: tuple[Path, ...] = ()
    """Public keys the fleet trusts besides the signing key's own (during a key rotation):
    ``pin`` and ``versions`` accept versions signed by any of them."""
    publisher_id: str = field(default_factory=socket.gethostname)
    """Recorded in every manifest and pointer; defaults to the host name."""
    keep_versions: int = 5
    """Retention keeps this many newest complete versions (plus latest and a pinned one)."""
    orphan_grace_s: float = 6 * 3600.0
    """Age after which objects of unfinished publish attempts are garbage. Must exceed the
    longest publish (upload time), or retention may delete a running publisher's upload.
    Any finite number of seconds >= 0 (it may well exceed a day)."""
    trackers: tuple[str, ...] = ()
    """Announce URLs put into every torrent (one tier; http, https or udp)."""
    piece_size: int | None = None
    """Torrent piece size in bytes (a power of two, at least 16 KiB); None picks one from the
    file size."""
    torrent_format: TorrentFormat = "v1"
    """"v1": SHA-1 pieces and one info-hash, readable by every BitTorrent client; "hybrid":
    v1+v2, pieces also hashed with SHA-256, two info-hashes, not readable by some clients
    (Debian's aria2 1.36). Agents check the whole file's signed SHA-256 either way;
    docs/publishing.md weighs the two."""
    swarm_ca: Path | None = None
    """Private versions: the fleet CA certificate (PEM). Every torrent (the file's and the
    deltas') carries it, so that only agents with a certificate from this CA can join
    the swarm, and the manifest records its fingerprint (docs/private-swarm.md). None:
    public versions."""
    work_dir: Path | None = None
    """Where the filter file is written before upload; None uses the system temp dir."""
    watch_debounce_s: float = 5.0
    """``publish --watch``: seconds of quiet after the last change before publishing; 0 .. a
    day (a longer wait would never publish a directory that changes daily)."""
    build: BuildDefaults = field(default_factory=BuildDefaults)
    """Build defaults (``[build]`` table)."""
    sizing: SizingConfig = field(default_factory=SizingConfig)
    """When to keep the previous parameters and when to resize (``[sizing]`` table)."""
    deltas: DeltaConfig = field(default_factory=DeltaConfig)
    """Deltas from older versions (``[deltas]`` table)."""
    tracker: TrackerConfig = field(default_factory=TrackerConfig)
    """opentracker whitelist sync (``[tracker]`` table)."""

    def __post_init__(self) -> None:
        if not self.publisher_id:
            raise ConfigError("publisher_id must not be empty")
        check_utf8(self.publisher_id, "publisher_id")  # signed into manifests: refused before any upload
        if self.keep_versions < 1:
            raise ConfigError(f"keep_versions must be at least 1, got {self.keep_versions}")
        for name in ("orphan_grace_s", "watch_debounce_s"):
            value = getattr(self, name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"{name} must be a finite number, got {value!r}")
            if value < 0:
                raise ConfigError(f"{name} must not be negative, got {value!r}")
        check_at_most("watch_debounce_s", self.watch_debounce_s, MAX_INTERVAL_S, ONE_DAY)
        if self.piece_size is not None and (
            self.piece_size < MIN_PIECE_SIZE or self.piece_size & (self.piece_size - 1)
        ):
            raise ConfigError(
                f"piece_size must be a power of two of at least 16 KiB, got {self.piece_size}"
            )
        if self.torrent_format not in ("v1", "hybrid"):
            raise ConfigError(f"torrent_format must be v1 or hybrid, got {self.torrent_format!r}")
        for url in self.trackers:
            check_utf8(url, "tracker URL")
            if not url.startswith(_TRACKER_SCHEMES):
                raise ConfigError(f"tracker URL must be http(s):// or udp://, got {url!r}")


# --- loading ------------------------------------------------------------------------------


def _layout_value(value: object) -> object:
    if isinstance(value, Layout):
        return value
    if not isinstance(value, str):
        raise TypeError("must be a string")
    try:
        return Layout.parse(value)
    except ValueError:
        raise ValueError("must be blocked or standard") from None


_LOADER = SettingsLoader(PublisherConfig, env_prefix=ENV_PREFIX, coercers={Layout: _layout_value})

SETTINGS: dict[str, Any] = _LOADER.settings
"""Dotted setting name -> the type its value must have."""


def env_name(setting: str) -> str:
    """The environment variable of a setting: "s3.bucket" -> "BLOOMSWARM_S3_BUCKET"."""
    return _LOADER.env_name(setting)


def load_config(
    path: Path | None = None,
    *,
    environ: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
) -> PublisherConfig:
    """Assemble the configuration from ``path`` (TOML), ``environ`` and ``overrides``.

    ``overrides`` maps dotted names to values from flags; None values are ignored (the
    flag was not given). Raises ConfigError for an unreadable or invalid file, an unknown
    setting, a value of the wrong type, or a missing ``s3.bucket``.
    """
    return _assemble(_LOADER.load(path, environ=environ, overrides=overrides))


def _assemble(values: Mapping[str, object]) -> PublisherConfig:
    if "s3.bucket" not in values:
        raise ConfigError(
            "no bucket configured: set s3.bucket in the config file, "
            f"{env_name('s3.bucket')} or --bucket"
        )
    fields = _LOADER.fields(values)  # [s3] always has values: its bucket
    return PublisherConfig(**fields)  # type: ignore[arg-type]  # values were type-checked above


__all__ = [
    "ENV_PREFIX",
    "SETTINGS",
    "BuildDefaults",
    "DeltaConfig",
    "PublisherConfig",
    "SizingConfig",
    "TorrentFormat",
    "TrackerConfig",
    "env_name",
    "load_config",
]
