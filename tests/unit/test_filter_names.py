"""Filter names: the alphabet, the length limit, and that no name escapes its folder."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomswarm.common.filter_names import MAX_FILTER_NAME, check_filter_name, filter_prefix


@pytest.mark.parametrize(
    "name", ["a", "0", "blocklist", "tenant-42", "seen_urls", "v1.2", "a" * 63, "a.b-c_d"])
def test_valid_names(name: str) -> None:
    assert check_filter_name(name) == name
    assert filter_prefix(name) == f"filters/{name}"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("", "must not be empty"),
        (".", "use lower-case"),
        ("..", "must not contain '..'"),
        ("a..b", "must not contain '..'"),
        ("../etc", "must not contain '..'"),
        ("a/b", "use lower-case"),
        ("/a", "use lower-case"),
        ("a\\b", "use lower-case"),
        ("A", "use lower-case"),
        ("-a", "use lower-case"),
        ("_a", "use lower-case"),
        (".hidden", "use lower-case"),
        ("a b", "use lower-case"),
        ("a\n", "use lower-case"),
        ("é", "use lower-case"),
        ("a" * 64, "64 characters, at most 63"),
    ],
)
def test_invalid_names(name: str, why: str) -> None:
    with pytest.raises(ValueError, match=re.escape(why)) as info:
        check_filter_name(name)
    assert str(info.value).startswith("filter name ")
    with pytest.raises(ValueError):
        filter_prefix(name)


def test_a_long_name_is_shortened_in_the_message() -> None:
    with pytest.raises(ValueError) as info:
        check_filter_name("x" * 10_000)
    assert len(str(info.value)) < 100


@given(st.text(max_size=80))
def test_a_valid_name_is_one_safe_path_component(name: str) -> None:
    try:
        check_filter_name(name)
    except ValueError:
        return
    assert 1 <= len(name) <= MAX_FILTER_NAME
    assert "/" not in name and "\\" not in name and ".." not in name
    assert name not in (".", "..") and name == name.lower() and name.isascii()
