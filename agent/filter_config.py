"""The agent's named filters: the ``[[filters]]`` tables of its config file.

One agent may follow several filters of one bucket (or CDN base). Each is a
:class:`FilterConfig`; the agent runs one daemon per filter on the config
:func:`filter_agent_config` derives, sharing the rest (origin, swarm, status)::

    [[filters]]
    name = "blocklist"                 # required: the filter's name (common/filter_names.py)

    [[filters]]
    name = "fraud"
    prefix = "teams/risk/fraud"        # its layout, relative to s3.prefix / the CDN base
    public_keys = ["/etc/bloomswarm/risk.pub"]   # instead of the agent's public_keys
    keep_versions = 4                  # instead of install.keep_versions

Filters come from the file only: an environment variable cannot list tables.

Refused, each with a :class:`~bloomswarm.common.errors.ConfigError` of one line naming the
filter: ``filters`` that is not an array of tables; a table without a name, with an unknown
key or a value of the wrong type; an invalid name (one that could leave the data directory:
``..``, ``/``, empty); a prefix that is absolute, empty, or has an empty, ``.`` or ``..``
segment; two filters of one name; two filters whose prefixes are equal or one inside the
other (their buckets folders would mix).
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bloomswarm.common.datadir import filter_data_dir
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.filter_names import check_filter_name, filter_prefix
from bloomswarm.common.settings import int_value, path_value, str_value

if TYPE_CHECKING:
    from .config import AgentConfig

FILTERS_KEY = "filters"
"""The config file's key of the filter tables (``[[filters]]``)."""


@dataclass(frozen=True)
class FilterConfig:
    """One filter the agent follows (a ``[[filters]]`` table). Checked at construction."""

    name: str
    """The filter's name: its data directory ``DATA_DIR/filters/NAME``, its metric label,
    its entry in the bucket's index.json."""
    prefix: str | None = None
    """Where its single-filter layout (latest.json, vN/...) is, relative to ``s3.prefix`` or
    ``origin.cdn_base_url``; None: ``filters/NAME``, where ``publish --filter NAME`` puts it.
    Only ``filters/NAME`` is in ``index.json``: a filter elsewhere is polled on its own
    ``latest.json`` (:attr:`follows_index`)."""
    public_keys: tuple[Path, ...] = ()
    """Publisher keys accepted for this filter; empty: the agent's ``public_keys``."""
    keep_versions: int | None = None
    """Installed versions kept for this filter; None: ``install.keep_versions``."""

    def __post_init__(self) -> None:
        try:
            check_filter_name(self.name)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        label = f"filter {self.name!r}"
        if self.prefix is not None:
            problem = prefix_problem(self.prefix)
            if problem:
                raise ConfigError(f"{label}: prefix {self.prefix!r} {problem}")
        if not isinstance(self.public_keys, tuple) or not all(
            isinstance(key, Path) for key in self.public_keys
        ):
            raise ConfigError(f"{label}: public_keys must be a tuple of paths, got {self.public_keys!r:.80}")
        if self.keep_versions is not None and (
            isinstance(self.keep_versions, bool)
            or not isinstance(self.keep_versions, int)
            or self.keep_versions < 1
        ):
            raise ConfigError(f"{label}: keep_versions must be at least 1, got {self.keep_versions!r}")

    @property
    def store_prefix(self) -> str:
        """The filter's folder relative to the store prefix or CDN base, without leading or
        trailing "/": ``prefix``, or ``filters/NAME`` when it is None."""
        if self.prefix is None:
            return filter_prefix(self.name)
        return self.prefix.rstrip("/")

    @property
    def follows_index(self) -> bool:
        """Whether the filter's news comes from ``index.json`` (its folder is
        ``filters/NAME``, which the index lists); else from its own ``latest.json``."""
        return self.store_prefix == filter_prefix(self.name)


def prefix_problem(prefix: str) -> str | None:
    """Why ``prefix`` cannot be a filter's folder (text that reads after it), None when it
    can: it must be relative, non-empty, and made of segments other than "", "." and ".."
    (one trailing "/" is allowed); backslashes are refused (some clients read them as "/")."""
    if not isinstance(prefix, str):
        return "must be a string"
    if prefix.startswith("/"):
        return "is absolute: give it relative to s3.prefix or the CDN base URL"
    if "\\" in prefix:
        return "must not contain '\\'"
    trimmed = prefix[:-1] if prefix.endswith("/") else prefix
    if not trimmed:
        return "is empty"
    for segment in trimmed.split("/"):
        if not segment:
            return "has an empty segment ('//')"
        if segment in (".", ".."):
            return f"must not have a {segment!r} segment"
    return None


def check_filters(filters: Sequence[FilterConfig]) -> None:
    """ConfigError when two filters share a name, or a folder: equal store prefixes, or one
    inside the other."""
    seen: set[str] = set()
    for entry in filters:
        if entry.name in seen:
            raise ConfigError(f"filter {entry.name!r} is listed twice")
        seen.add(entry.name)
    # Sorted by segments, a folder's subfolders come right after it: neighbours suffice.
    by_folder = sorted(filters, key=lambda entry: entry.store_prefix.split("/"))
    for outer, inner in itertools.pairwise(by_folder):
        if inner.store_prefix == outer.store_prefix:
            raise ConfigError(
                f"filters {outer.name!r} and {inner.name!r} share the prefix {inner.store_prefix!r}"
            )
        if inner.store_prefix.startswith(outer.store_prefix + "/"):
            raise ConfigError(
                f"filter {inner.name!r}: prefix {inner.store_prefix!r} is inside the prefix "
                f"{outer.store_prefix!r} of filter {outer.name!r}"
            )


_KEYS = tuple(field.name for field in dataclasses.fields(FilterConfig))


def filters_from_toml(value: object, where: str) -> tuple[FilterConfig, ...]:
    """The filters of a config file's ``filters`` value (an array of tables), checked one by
    one and together; ConfigError prefixed with ``where`` ("config file PATH")."""
    if not isinstance(value, list) or not all(isinstance(table, dict) for table in value):
        raise ConfigError(
            f"{where}: filters must be an array of tables ([[filters]] name = ...), got {value!r:.80}"
        )
    filters = tuple(_filter_from_table(table, number, where) for number, table in enumerate(value, 1))
    try:
        check_filters(filters)
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    return filters


def _filter_from_table(table: Mapping[str, object], number: int, where: str) -> FilterConfig:
    """One ``[[filters]]`` table (the ``number``-th, from 1) as a FilterConfig."""
    if "name" not in table:
        raise ConfigError(f"{where}: [[filters]] table {number} has no name")
    name = table["name"]
    if not isinstance(name, str):
        raise ConfigError(f"{where}: [[filters]] table {number}: name must be a string, got {name!r:.80}")
    try:
        check_filter_name(name)
    except ValueError as exc:
        raise ConfigError(f"{where}: {exc}") from None
    label = f"{where}: filter {name!r}"
    unknown = [key for key in table if key not in _KEYS]
    if unknown:
        raise ConfigError(f"{label}: unknown key {unknown[0]!r} (known: {', '.join(_KEYS)})")
    values: dict[str, object] = {"name": name}
    checks = {"prefix": str_value, "keep_versions": int_value, "public_keys": _paths}
    for key, check in checks.items():
        if key in table:
            try:
                values[key] = check(table[key])
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{label}: {key} {exc}, got {table[key]!r:.80}") from None
    try:
        return FilterConfig(**values)  # type: ignore[arg-type]
    except ConfigError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _paths(value: object) -> object:
    """A list of paths, or one path as a list of one, read like the top-level public_keys
    (``~`` expanded; a relative path stays relative to the working directory)."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise TypeError("must be a list of paths")
    if not value:
        raise ValueError("must list at least one path (leave it out to use the agent's)")
    try:
        return tuple(path_value(item) for item in value)
    except TypeError:
        raise TypeError("must be a list of paths") from None


def filter_agent_config(config: AgentConfig, entry: FilterConfig) -> AgentConfig:
    """The config of the daemon that runs filter ``entry`` of ``config``: data_dir
    ``DATA_DIR/filters/NAME``, the filter's public_keys and keep_versions where it sets
    them, and no filters of its own. Everything else (origin, swarm, status, watch) is
    ``config``'s: the filter's prefix is applied to the store by the caller."""
    install = config.install
    if entry.keep_versions is not None:
        install = dataclasses.replace(install, keep_versions=entry.keep_versions)
    return dataclasses.replace(
        config,
        data_dir=filter_data_dir(config.data_dir, entry.name),
        public_keys=entry.public_keys or config.public_keys,
        install=install,
        filters=(),
    )


__all__ = [
    "FILTERS_KEY",
    "FilterConfig",
    "check_filters",
    "filter_agent_config",
    "filters_from_toml",
    "prefix_problem",
]
