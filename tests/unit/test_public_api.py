"""The public names: sorted, complete and importable."""

from __future__ import annotations

import bloomswarm
from bloomswarm import common


def test_common_all_is_sorted_and_importable() -> None:
    assert common.__all__ == sorted(common.__all__)
    for name in common.__all__:
        assert getattr(common, name) is not None


def test_top_level_reexports() -> None:
    assert bloomswarm.__all__ == sorted(bloomswarm.__all__)
    assert bloomswarm.LiveFilter is common.LiveFilter
    assert bloomswarm.Filter is common.Filter


def test_errors_derive_from_one_base() -> None:
    errors = [getattr(common, n) for n in common.__all__ if n.endswith(("Error", "NotFound", "Failed"))]
    assert errors and all(issubclass(e, common.BloomswarmError) for e in errors)


def test_lazy_names_are_the_defining_modules_classes() -> None:
    """Filter, FilterBuilder and LiveFilter load on first use (no numpy for ``--help``)."""
    from bloomswarm.common.builder import FilterBuilder
    from bloomswarm.common.live import LiveFilter
    from bloomswarm.common.reader import Filter

    for package in (bloomswarm, common):
        assert package.Filter is Filter
        assert package.FilterBuilder is FilterBuilder
        assert package.LiveFilter is LiveFilter
    for name in bloomswarm.__all__:
        assert getattr(bloomswarm, name) is not None


def test_unknown_names_still_raise_attribute_error() -> None:
    for package in (bloomswarm, common):
        assert not hasattr(package, "NoSuchName")
