"""Building a filter from the full data set: in this process, or on a Dask cluster.

:func:`build_filter` is the one entry point. Both engines size the filter the same way
(:func:`plan_sizing`: ``expected_keys``, or a count from a first pass over the input,
exact or through the sizing policy) and insert the same keys, so their files are
bit-identical (the header differs in its creation time only). The build is deterministic:
the same keys with the same parameters give the same bits in any order, which is what
keeps a delta between two versions small.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.errors import ConfigError, InputError
from bloomswarm.common.fastpath import Engine
from bloomswarm.common.filter_summary import FilterSummary
from bloomswarm.common.params import FilterParams, Layout
from bloomswarm.common.sizing import size_filter

from .config import SizingConfig
from .progress import Progress
from .sizing_policy import SizingDecision, SizingTarget, decide_sizing
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
    sizing: SizingConfig | None = None
    """None sizes for the exact key count (``bloomswarm build``); a policy may keep the
    ``previous`` version's parameters instead (``bloomswarm publish``)."""
    previous: FilterSummary | None = None
    """The newest published version's filter, for the sizing policy."""


def build_filter(source: SourceSpec, spec: BuildSpec) -> FilterBuilder:
    """Build a filter from every key of ``source``, sized and placed by ``spec``.

    Logs a warning when the input holds more keys than ``spec.expected_keys``: the
    filter then exceeds its target false-positive rate. Without ``expected_keys`` the input
    is read twice (count, then insert): InputError when the two reads differ (a pipe, files
    changed meanwhile), never a filter missing keys. InputError for unreadable input,
    ConfigError for a bad engine or an unusable Dask setup.
    """
    if spec.engine == "dask":
        from .distributed import build_filter_dask

        return build_filter_dask(source, spec)
    if spec.engine != "local":
        raise ConfigError(f"unknown build engine {spec.engine!r}: expected 'local' or 'dask'")
    capacity = spec.expected_keys
    counted = capacity is None
    if capacity is None:
        capacity = count_keys(source, progress=spec.progress)
    builder = empty_builder(capacity, spec)
    with Progress("adding keys", total=capacity or None, enabled=spec.progress) as bar:
        for batch in iter_key_batches(source):
            builder.add_many(batch)
            bar.advance(len(batch))
    if counted and builder.key_count != capacity:
        raise InputError(
            f"the input changed between the two passes over it: {capacity:,} keys counted, then "
            f"{builder.key_count:,} read (a pipe or stdin can be read once: pass --expected-keys "
            "to build in one pass; or files changed while building)"
        )
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
    """The empty filter both engines fill, sized by :func:`plan_sizing` for ``capacity``
    keys (``expected_keys``, or the input's count); logs the sizing decision (at INFO
    when a sizing policy made it).

    ConfigError when no filter fits (too many keys for the layout, a rate outside (0, 1)).
    """
    decision = plan_sizing(capacity, spec)
    log.log(logging.INFO if spec.sizing else logging.DEBUG, "sizing: %s", decision.reason)
    try:
        return FilterBuilder(
            decision.params, capacity=decision.capacity, target_fpp=decision.target_fpp,
            engine=spec.kernel,
        )
    except MemoryError:
        raise ConfigError(
            f"a filter of {decision.params.num_bytes:,} bytes for {decision.capacity:,} keys does not "
            "fit in this machine's memory: lower --expected-keys, raise --fpp, or shard the key set"
        ) from None


def plan_sizing(key_count: int, spec: BuildSpec) -> SizingDecision:
    """The parameters of the filter for ``key_count`` keys.

    With ``spec.sizing`` and no ``expected_keys``, the sizing policy decides
    (:func:`~bloomswarm.publisher.sizing_policy.decide_sizing`); otherwise the filter is
    sized for exactly ``key_count`` keys (at least 1), and the decision says "kept" when
    that gives ``spec.previous``'s parameters. ConfigError when no filter fits.
    """
    target = SizingTarget(spec.target_fpp, spec.layout, spec.hash_seed)
    try:
        if spec.sizing is not None and spec.expected_keys is None:
            return decide_sizing(spec.previous, key_count, target, spec.sizing)
        capacity = max(key_count, 1)
        num_bits, num_probes = size_filter(capacity, spec.target_fpp, spec.layout)
        params = FilterParams(spec.layout, num_bits, num_probes, spec.hash_seed)
    except ValueError as exc:  # size_filter's refusal of the user's key count or rate
        raise ConfigError(str(exc)) from exc
    kept = spec.previous is not None and spec.previous.to_params() == params
    how = "expected_keys" if spec.expected_keys is not None else "the exact key count"
    return SizingDecision(
        "kept" if kept else "resized", params, capacity, spec.target_fpp,
        f"sized for {capacity:,} keys ({how}); "
        + ("the previous version's parameters" if kept else "new parameters"),
    )


def warn_if_over_capacity(builder: FilterBuilder, capacity: int) -> None:
    """Log a warning when ``builder`` holds more keys than it was sized for."""
    if builder.key_count > capacity:
        log.warning(
            "input has %d keys but the filter was sized for %d: its false-positive rate "
            "will exceed the %.3g target (raise --expected-keys)",
            builder.key_count, capacity, builder.target_fpp,
        )
