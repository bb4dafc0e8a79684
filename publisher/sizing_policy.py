"""The sizing policy: keep the previous version's filter parameters, or resize.

A delta from one version to the next is small only when both have the same parameters
(m, k, layout, seed): then a changed key flips a few bits, whereas a filter grown by 0.1%
flips half of them. Sizing every version for its exact key count would make every
version a resize, so :func:`decide_sizing` keeps the previous parameters while they
still serve the target, and resizes with headroom when they no longer do. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from bloomswarm.common.filter_summary import FilterSummary
from bloomswarm.common.params import FilterParams, Layout
from bloomswarm.common.sizing import expected_fpp, size_filter

from .config import SizingConfig

SizingAction = Literal["kept", "resized"]
""""kept": the previous version's parameters (deltas possible); "resized": new ones."""


@dataclass(frozen=True)
class SizingTarget:
    """What the operator asks of the filter (the ``[build]`` settings)."""

    target_fpp: float
    layout: Layout
    seed: int


@dataclass(frozen=True)
class SizingDecision:
    """The parameters of the next version and why."""

    action: SizingAction
    params: FilterParams
    capacity: int
    """Keys the filter is sized for (recorded in the header)."""
    target_fpp: float
    """False-positive rate it is sized for (recorded in the header)."""
    reason: str
    """One line for the log and the CLI."""


def decide_sizing(
    previous: FilterSummary | None, key_count: int, target: SizingTarget, config: SizingConfig
) -> SizingDecision:
    """Keep ``previous``'s parameters when all of these hold, else resize:

    - it has the target's layout and seed;
    - ``key_count`` fits its capacity;
    - its expected false-positive rate at ``key_count`` is at most
      ``target.target_fpp * (1 + config.fpp_margin)``;
    - ``key_count`` is at least ``config.shrink_below`` of its capacity.

    A resize sizes for ``ceil(key_count * (1 + config.headroom))`` keys (at least 1).
    ValueError when no filter of the target's layout fits that many keys.
    """
    problem = (
        "no previous version" if previous is None
        else _keep_problem(previous, key_count, target, config)
    )
    if previous is not None and problem is None:
        return SizingDecision(
            "kept", previous.to_params(), previous.capacity, previous.target_fpp,
            f"kept the previous parameters: {key_count:,} keys of capacity "
            f"{previous.capacity:,}, expected fpp "
            f"{expected_fpp(previous.to_params(), key_count):.3g}",
        )
    capacity = max(1, math.ceil(key_count * (1.0 + config.headroom)))
    num_bits, num_probes = size_filter(capacity, target.target_fpp, target.layout)
    return SizingDecision(
        "resized",
        FilterParams(target.layout, num_bits, num_probes, target.seed),
        capacity,
        target.target_fpp,
        f"resized for {capacity:,} keys ({key_count:,} + {config.headroom:.0%} headroom): "
        f"{problem}",
    )


def _keep_problem(
    previous: FilterSummary, key_count: int, target: SizingTarget, config: SizingConfig
) -> str | None:
    """Why ``previous``'s parameters cannot be kept, or None when they can."""
    if previous.layout != target.layout.label or previous.hash_seed != target.seed:
        return (
            f"layout or seed changed ({previous.layout}, seed {previous.hash_seed} -> "
            f"{target.layout.label}, seed {target.seed})"
        )
    if key_count > previous.capacity:
        return f"{key_count:,} keys exceed the capacity {previous.capacity:,}"
    fpp = expected_fpp(previous.to_params(), key_count)
    limit = target.target_fpp * (1.0 + config.fpp_margin)
    if fpp > limit:
        return f"expected fpp {fpp:.3g} above {limit:.3g} (target + {config.fpp_margin:.0%})"
    if key_count < config.shrink_below * previous.capacity:
        return (
            f"{key_count:,} keys are below {config.shrink_below:.0%} of the capacity "
            f"{previous.capacity:,}"
        )
    return None


__all__ = ["SizingAction", "SizingDecision", "SizingTarget", "decide_sizing"]
