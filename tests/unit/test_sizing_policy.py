"""The sizing policy: keep the previous version's parameters, or resize with headroom."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.filter_summary import FilterSummary
from bloomswarm.common.params import Layout
from bloomswarm.common.sizing import expected_fpp
from bloomswarm.publisher.build import BuildSpec, plan_sizing
from bloomswarm.publisher.config import SizingConfig
from bloomswarm.publisher.sizing_policy import SizingDecision, SizingTarget, decide_sizing

TARGET = SizingTarget(0.01, Layout.BLOCKED, 0)
POLICY = SizingConfig()


def _summary(decision: SizingDecision, key_count: int) -> FilterSummary:
    """The manifest's filter summary of a version published with ``decision``."""
    return FilterSummary(
        layout=decision.params.layout.label,
        num_bits=decision.params.num_bits,
        num_probes=decision.params.num_probes,
        hash_seed=decision.params.hash_seed,
        key_count=key_count,
        capacity=decision.capacity,
        target_fpp=decision.target_fpp,
    )


def test_the_first_version_is_sized_with_headroom() -> None:
    decision = decide_sizing(None, 100_000, TARGET, POLICY)
    assert decision.action == "resized" and decision.capacity == 120_000
    assert "no previous version" in decision.reason
    assert decision.params == FilterBuilder.for_capacity(120_000, 0.01).params


def test_growth_within_the_headroom_keeps_the_parameters() -> None:
    first = decide_sizing(None, 100_000, TARGET, POLICY)
    previous = _summary(first, 100_000)
    for count in (60_000, 100_000, 119_999, 120_000):
        kept = decide_sizing(previous, count, TARGET, POLICY)
        assert (kept.action, kept.params, kept.capacity) == ("kept", first.params, 120_000)
    grown = decide_sizing(previous, 120_001, TARGET, POLICY)
    assert grown.action == "resized" and "exceed the capacity 120,000" in grown.reason
    assert grown.capacity == math.ceil(120_001 * 1.2)
    shrunk = decide_sizing(previous, 59_999, TARGET, POLICY)
    assert shrunk.action == "resized" and "below 50%" in shrunk.reason
    never_shrinks = SizingConfig(shrink_below=0.0)
    assert decide_sizing(previous, 1, TARGET, never_shrinks).action == "kept"


@pytest.mark.parametrize(
    ("target", "action", "reason"),
    [
        (SizingTarget(0.01, Layout.STANDARD, 0), "resized", "layout or seed changed"),
        (SizingTarget(0.01, Layout.BLOCKED, 7), "resized", "layout or seed changed"),
        (SizingTarget(0.001, Layout.BLOCKED, 0), "resized", "above"),
        (SizingTarget(0.0095, Layout.BLOCKED, 0), "kept", "kept"),  # within the 10% margin
        (SizingTarget(0.02, Layout.BLOCKED, 0), "kept", "kept"),  # a laxer target keeps
    ],
)
def test_changed_build_settings(target: SizingTarget, action: str, reason: str) -> None:
    previous = _summary(decide_sizing(None, 100_000, TARGET, POLICY), 110_000)
    decision = decide_sizing(previous, 110_000, target, POLICY)
    assert decision.action == action and reason in decision.reason
    if action == "resized":
        assert (decision.params.layout, decision.params.hash_seed) == (target.layout, target.seed)


def test_the_margin_lets_a_filter_sized_for_fewer_keys_carry_a_few_more() -> None:
    exact = SizingDecision("resized", FilterBuilder.for_capacity(100_000, 0.01).params,
                           100_000, 0.01, "")
    strict = SizingConfig(fpp_margin=0.0)
    previous = _summary(exact, 100_000)
    assert decide_sizing(previous, 100_000, TARGET, strict).action == "kept"
    over = decide_sizing(previous, 100_001, TARGET, strict)
    assert over.action == "resized"  # beyond the capacity


def test_plan_sizing_without_a_policy_sizes_for_the_exact_count() -> None:
    spec = BuildSpec(progress=False)
    exact = plan_sizing(1000, spec)
    assert exact.capacity == 1000 and exact.params == FilterBuilder.for_capacity(1000).params
    assert exact.action == "resized" and plan_sizing(0, spec).capacity == 1
    again = BuildSpec(progress=False, previous=_summary(exact, 1000))
    assert plan_sizing(1000, again).action == "kept"
    with_policy = BuildSpec(progress=False, sizing=POLICY, previous=_summary(exact, 1000))
    assert plan_sizing(900, with_policy).params == exact.params
    fixed = BuildSpec(progress=False, sizing=POLICY, expected_keys=5000)
    assert plan_sizing(5000, fixed).capacity == 5000  # the operator's size, no headroom
    with pytest.raises(ConfigError):
        plan_sizing(10**12, BuildSpec(progress=False, sizing=POLICY))


@pytest.mark.parametrize(
    "changes",
    [{"headroom": -0.1}, {"fpp_margin": -1.0}, {"shrink_below": 1.0}, {"shrink_below": -0.1}],
)
def test_bad_sizing_settings_are_refused(changes: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        SizingConfig(**changes)


# --- properties -------------------------------------------------------------------------

policies = st.builds(
    SizingConfig,
    headroom=st.floats(0.0, 1.0),
    fpp_margin=st.floats(0.0, 0.5),
    shrink_below=st.floats(0.0, 0.45),
)
targets = st.builds(
    SizingTarget,
    target_fpp=st.sampled_from([0.1, 0.01, 0.001]),
    layout=st.sampled_from(list(Layout)),
    seed=st.integers(0, 3),
)
counts = st.integers(0, 2_000_000)


@settings(max_examples=150, deadline=None)
@given(policies, targets, counts, counts, targets)
def test_every_decision_meets_the_target(
    policy: SizingConfig, target: SizingTarget, first: int, second: int, earlier: SizingTarget
) -> None:
    """Kept: the previous parameters, still within capacity, margin and shrink bound.
    Resized: the target's layout and seed, sized for the count plus headroom."""
    previous = _summary(decide_sizing(None, first, earlier, policy), first)
    decision = decide_sizing(previous, second, target, policy)
    if decision.action == "kept":
        assert decision.params == previous.to_params()
        assert decision.capacity == previous.capacity and second <= previous.capacity
        assert expected_fpp(decision.params, second) <= target.target_fpp * (1 + policy.fpp_margin)
        assert second >= policy.shrink_below * previous.capacity
    else:
        assert decision.capacity == max(1, math.ceil(second * (1 + policy.headroom)))
        assert (decision.params.layout, decision.params.hash_seed) == (target.layout, target.seed)
        assert expected_fpp(decision.params, decision.capacity) <= target.target_fpp
        assert decision.target_fpp == target.target_fpp


@settings(max_examples=100, deadline=None)
@given(policies, targets, st.integers(1, 2_000_000), st.floats(0.0, 1.0))
def test_after_a_resize_the_same_or_grown_key_set_keeps_the_parameters(
    policy: SizingConfig, target: SizingTarget, count: int, growth: float
) -> None:
    """The point of headroom: every later count between the shrink bound and the capacity
    keeps the parameters, so those versions can be deltas."""
    first = decide_sizing(None, count, target, policy)
    later = min(first.capacity, int(count * (1 + growth * policy.headroom)))
    assume(later >= policy.shrink_below * first.capacity)
    decision = decide_sizing(_summary(first, count), later, target, policy)
    assert (decision.action, decision.params) == ("kept", first.params)


@settings(max_examples=100, deadline=None)
@given(policies, targets, counts)
def test_the_decision_is_a_pure_function(policy: SizingConfig, target: SizingTarget, count: int) -> None:
    assert decide_sizing(None, count, target, policy) == decide_sizing(None, count, target, policy)
