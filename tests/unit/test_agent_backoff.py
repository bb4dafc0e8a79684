"""Exponential backoff with jitter."""

from __future__ import annotations

import random

import pytest

from bloomswarm.agent.backoff import Backoff


def test_delays_double_up_to_the_maximum_within_the_jitter_band() -> None:
    backoff = Backoff(1.0, 10.0, rng=random.Random(7))
    ceilings = [1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    for ceiling in ceilings:
        delay = backoff.next_delay()
        assert ceiling / 2 <= delay <= ceiling
    assert backoff.failures == len(ceilings)


def test_reset_starts_over() -> None:
    backoff = Backoff(0.5, 60.0, rng=random.Random(1))
    for _ in range(5):
        backoff.next_delay()
    backoff.reset()
    assert backoff.failures == 0
    assert backoff.next_delay() <= 0.5


def test_huge_failure_counts_do_not_overflow() -> None:
    backoff = Backoff(1.0, 30.0)
    assert backoff.ceiling(10_000) == 30.0 and backoff.ceiling(0) == 0.0


@pytest.mark.parametrize(("initial", "maximum"), [(0.0, 1.0), (2.0, 1.0), (-1.0, 5.0)])
def test_bad_parameters(initial: float, maximum: float) -> None:
    with pytest.raises(ValueError):
        Backoff(initial, maximum)
