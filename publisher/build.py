"""Building a filter from the full data set: in this process, or on a Dask cluster.

:func:`build_filter` is the one entry point. Both engines size the filter the same way
(``expected_keys``, or an exact count from a first pass over the input) and insert the
same keys, so their files are bit-identical (the header differs in its creation time
only).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.fastpath import Engine
from bloomswarm.common.params import Layout

from .progress import Progress
from .sources import SourceSpec, iter_key_batches

log = logging.getLogger("bloomswarm.build")

BuildEngine = Literal["local", "dask"]


@dataclass(frozen=True)
class BuildSpec:
    """How to size and build a filter."""

    target_fpp: float = 0.01
    layout: Layout = Layout.BLOCKED
    hash_seed: int = 0
    expected_keys: int | None = None
    """Size for this many keys; None counts the input first (a second pass over it)."""
    engine: BuildEngine = "local"
    """Build in this process, or on a Dask cluster (partial filters merged by a tree of ORs)."""
    scheduler: str | None = None
    """Dask scheduler address; None starts a LocalCluster for the build and closes it after."""
    workers: int | None = None
    """Worker processes of that LocalCluster; None: one per CPU."""
    kernel: Engine = "auto"
    """Which implementation inserts keys: the C extension or the pure-Python path."""
    progress: bool = True


def build_filter(source: SourceSpec, spec: BuildSpec) -> FilterBuilder:
    """Build a filter from every key of ``source``, sized and placed by ``spec``.

    Logs a warning when the input holds more keys than ``spec.expected_keys``: the
    filter then exceeds its target false-positive rate. InputError for unreadable input,
    ConfigError for a bad engine or an unusable Dask setup.
    """
    if spec.engine == "dask":
        from .distributed import build_filter_dask

        return build_filter_dask(source, spec)
    if spec.engine != "local":
        raise ConfigError(f"unknown build engine {spec.engine!r}: expected 'local' or 'dask'")
    capacity = spec.expected_keys
    if capacity is None:
        capacity = count_keys(source, progress=spec.progress)
    builder = empty_builder(capacity, spec)
    with Progress("adding keys", total=capacity or None, enabled=spec.progress) as bar:
        for batch in iter_key_batches(source):
            builder.add_many(batch)
            bar.advance(len(batch))
    warn_if_over_capacity(builder, capacity)
    return builder


def count_keys(source: SourceSpec, *, progress: bool = True) -> int:
    """Count the keys of ``source`` (one streaming pass, which also validates them)."""
    count = 0
    with Progress("counting keys", enabled=progress) as bar:
        for batch in iter_key_batches(source):
            count += len(batch)
            bar.advance(len(batch))
    return count


def empty_builder(capacity: int, spec: BuildSpec) -> FilterBuilder:
    """The empty filter both engines fill: sized for ``capacity`` keys (at least 1).

    ConfigError when no filter fits (too many keys for the layout, a rate outside (0, 1)).
    """
    try:
        return FilterBuilder.for_capacity(
            max(capacity, 1), spec.target_fpp, layout=spec.layout, seed=spec.hash_seed, engine=spec.kernel
        )
    except ValueError as exc:  # size_filter's refusal of the user's key count or rate
        raise ConfigError(str(exc)) from exc


def warn_if_over_capacity(builder: FilterBuilder, capacity: int) -> None:
    """Log a warning when ``builder`` holds more keys than it was sized for."""
    if builder.key_count > capacity:
        log.warning(
            "input has %d keys but the filter was sized for %d: its false-positive rate "
            "will exceed the %.3g target (raise --expected-keys)",
            builder.key_count, capacity, builder.target_fpp,
        )
