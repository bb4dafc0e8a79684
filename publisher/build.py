"""The local build: stream the full data set into a filter sized for it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.fastpath import Engine
from bloomswarm.common.keys import Key
from bloomswarm.common.params import Layout

from .progress import Progress
from .sources import SourceSpec, iter_keys

log = logging.getLogger("bloomswarm.build")

BATCH_KEYS = 65536
"""Keys read and inserted per step: memory is the bit array plus one batch."""


@dataclass(frozen=True)
class BuildSpec:
    """How to size and build a filter."""

    target_fpp: float = 0.01
    layout: Layout = Layout.BLOCKED
    hash_seed: int = 0
    expected_keys: int | None = None
    """Size for this many keys; None counts the input first (a second pass over it)."""
    engine: Engine = "auto"
    progress: bool = True


def count_keys(source: SourceSpec, *, progress: bool = True) -> int:
    """Count the keys of ``source`` (one streaming pass)."""
    count = 0
    with Progress("counting keys", enabled=progress) as bar:
        for chunk in _batches(iter_keys(source)):
            count += len(chunk)
            bar.advance(len(chunk))
    return count


def build_filter(source: SourceSpec, spec: BuildSpec) -> FilterBuilder:
    """Build a filter from every key of ``source``, sized by ``spec``.

    Logs a warning when the input holds more keys than ``spec.expected_keys``: the
    filter then exceeds its target false-positive rate.
    """
    capacity = spec.expected_keys
    if capacity is None:
        capacity = count_keys(source, progress=spec.progress)
    builder = FilterBuilder.for_capacity(
        max(capacity, 1), spec.target_fpp, layout=spec.layout, seed=spec.hash_seed, engine=spec.engine
    )
    with Progress("adding keys", total=capacity or None, enabled=spec.progress) as bar:
        for chunk in _batches(iter_keys(source)):
            builder.add_many(chunk)
            bar.advance(len(chunk))
    if builder.key_count > capacity:
        log.warning(
            "input has %d keys but the filter was sized for %d: its false-positive rate "
            "will exceed the %.3g target (raise --expected-keys)",
            builder.key_count, capacity, spec.target_fpp,
        )
    return builder


def _batches(keys: Iterator[Key]) -> Iterator[list[Key]]:
    while chunk := list(islice(keys, BATCH_KEYS)):
        yield chunk
