"""Sizing math: properties of the formulas, and the sizes they choose."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from bloomswarm.common.params import FilterParams, Layout
from bloomswarm.common.sizing import expected_fpp, fpp_blocked, fpp_standard, size_filter

capacities = st.integers(1, 10**9)
rates = st.floats(1e-6, 0.5)


@settings(max_examples=200, deadline=None)
@given(capacity=capacities, target=rates, layout=st.sampled_from(list(Layout)))
def test_size_meets_target_and_is_minimal(capacity: int, target: float, layout: Layout) -> None:
    num_bits, k = size_filter(capacity, target, layout)
    params = FilterParams(layout, num_bits, k)  # valid parameters
    assert expected_fpp(params, capacity) <= target
    unit = 512 if layout == Layout.BLOCKED else 64
    if num_bits > unit:  # one unit less fails the target for every k
        fpp = fpp_blocked if layout == Layout.BLOCKED else fpp_standard
        max_k = 10 if layout == Layout.BLOCKED else 32
        assert all(fpp(num_bits - unit, kk, capacity) > target for kk in range(1, max_k + 1))


@given(bits_per_key=st.floats(4, 40), k=st.integers(1, 10), n=st.integers(1000, 10**8))
def test_blocked_is_never_better_than_standard(bits_per_key: float, k: int, n: int) -> None:
    """In the useful range (k up to about the optimum): blocks fill unevenly, never better."""
    assume(k <= 0.7 * bits_per_key + 1)
    m = 512 * max(1, round(bits_per_key * n / 512))
    assert fpp_blocked(m, k, n) >= fpp_standard(m, k, n) * 0.999


@given(n=st.integers(1, 10**7), k=st.integers(1, 10), blocks=st.integers(1, 10**6))
def test_fpp_grows_with_keys(n: int, k: int, blocks: int) -> None:
    blocks = max(blocks, n // 1000 + 1)  # at most ~1000 keys a block: a full filter's fpp is ~1
    m = 512 * blocks
    assert fpp_blocked(m, k, n) <= fpp_blocked(m, k, n * 2) * (1 + 1e-9)
    assert fpp_standard(m, k, n) <= fpp_standard(m, k, n * 2) + 1e-12
    assert 0.0 <= fpp_blocked(m, k, n) <= 1.0


def test_known_sizes() -> None:
    """The classic figures: about 9.6 bits/key at 1% (standard), a bit more blocked."""
    m, k = size_filter(1_000_000, 0.01, Layout.STANDARD)
    assert (round(m / 1e6, 1), k) == (9.6, 7)
    assert m / 1e6 == pytest.approx(-math.log(0.01) / math.log(2) ** 2, rel=0.01)
    m, k = size_filter(1_000_000, 0.01, Layout.BLOCKED)
    assert (round(m / 1e6, 1), k) == (9.9, 6)
    m, k = size_filter(1_000_000, 0.001, Layout.BLOCKED)
    assert (round(m / 1e6, 1), k) == (15.5, 9)


@pytest.mark.parametrize(("capacity", "fpp"), [(0, 0.01), (10, 0.0), (10, 1.0), (10, -1.0)])
def test_bad_sizing_arguments(capacity: int, fpp: float) -> None:
    with pytest.raises(ValueError):
        size_filter(capacity, fpp, Layout.BLOCKED)


def test_blocked_limit_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="shard"):
        size_filter(10**12, 1e-6, Layout.BLOCKED)


def test_zero_keys_have_zero_fpp() -> None:
    assert fpp_blocked(512, 3, 0) == 0.0 == fpp_standard(64, 3, 0)
