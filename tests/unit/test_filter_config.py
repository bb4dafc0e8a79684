"""The agent's named filters: ``[[filters]]`` tables, their checks, the per-filter config and data dir."""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomswarm.agent.config import AgentConfig, OriginConfig, load_config
from bloomswarm.agent.filter_config import (
    FilterConfig,
    check_filters,
    filter_agent_config,
    filters_from_toml,
    prefix_problem,
)
from bloomswarm.agent_filters import filter_folder_url
from bloomswarm.common.datadir import FILTERS_DIR, filter_data_dir
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.filter_names import MAX_FILTER_NAME

TOP = """
data_dir = "/var/lib/bloomswarm"
public_keys = ["/etc/bloomswarm/a.pub"]

[s3]
bucket = "filters"
prefix = "fleet-a"

[install]
keep_versions = 3
"""

TWO_FILTERS = TOP + """
[[filters]]
name = "blocklist"

[[filters]]
name = "fraud"
prefix = "teams/risk/fraud/"
public_keys = ["/etc/bloomswarm/risk.pub", "~/risk-next.pub"]
keep_versions = 5
"""

NAMES = st.from_regex(r"[a-z0-9][a-z0-9_.-]{0,62}", fullmatch=True).filter(lambda n: ".." not in n)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return path


def _cdn_config(**fields: object) -> AgentConfig:
    return AgentConfig(data_dir=Path("/d"), public_keys=(Path("/k.pub"),),
                       origin=OriginConfig(cdn_base_url="https://cdn.example.com"), **fields)  # type: ignore[arg-type]


def _refused(tmp_path: Path, text: str) -> str:
    """The one-line message of the ConfigError that loading ``text`` raises."""
    with pytest.raises(ConfigError) as caught:
        load_config(_write(tmp_path, text), environ={})
    message = str(caught.value)
    assert "\n" not in message
    return message


# --- happy paths ------------------------------------------------------------------------------


def test_a_config_without_filters_has_none(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, TOP), environ={})
    assert config.filters == ()


def test_two_filters_from_the_file(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, TWO_FILTERS), environ={})
    blocklist, fraud = config.filters
    assert blocklist == FilterConfig("blocklist")
    assert blocklist.store_prefix == "filters/blocklist"
    assert fraud.prefix == "teams/risk/fraud/" and fraud.store_prefix == "teams/risk/fraud"
    # Read like the top-level public_keys: "~" expanded, relative paths left as they are.
    assert fraud.public_keys == (Path("/etc/bloomswarm/risk.pub"), Path("~/risk-next.pub").expanduser())
    assert fraud.keep_versions == 5


def test_public_keys_are_read_like_the_top_level_ones(tmp_path: Path) -> None:
    text = TOP.replace('["/etc/bloomswarm/a.pub"]', '"keys/a.pub"') + (
        '[[filters]]\nname = "x"\npublic_keys = "keys/a.pub"\n'
    )
    config = load_config(_write(tmp_path, text), environ={})
    assert config.filters[0].public_keys == config.public_keys == (Path("keys/a.pub"),)


def test_inline_array_of_tables_and_an_empty_array(tmp_path: Path) -> None:
    text = TOP.replace("\n[s3]", 'filters = [{ name = "a" }, { name = "b", prefix = "x" }]\n\n[s3]')
    assert [f.name for f in load_config(_write(tmp_path, text), environ={}).filters] == ["a", "b"]
    text = TOP.replace("\n[s3]", "filters = []\n\n[s3]")
    assert load_config(_write(tmp_path, text), environ={}).filters == ()


def test_environment_and_flags_still_apply_beside_filters(tmp_path: Path) -> None:
    config = load_config(
        _write(tmp_path, TWO_FILTERS),
        environ={"BLOOMSWARM_AGENT_WATCH_POLL_INTERVAL_S": "7"},
        overrides={"status.port": 0},
    )
    assert config.watch.poll_interval_s == 7.0 and config.status.port == 0
    assert len(config.filters) == 2


def test_filter_agent_config(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, TWO_FILTERS), environ={})
    blocklist, fraud = config.filters
    plain = filter_agent_config(config, blocklist)
    assert plain.data_dir == Path("/var/lib/bloomswarm/filters/blocklist")
    assert plain.public_keys == config.public_keys
    assert plain.install == config.install and plain.install.keep_versions == 3
    assert plain.filters == ()
    assert (plain.s3, plain.swarm, plain.watch, plain.status) == (config.s3, config.swarm, config.watch,
                                                                  config.status)
    own = filter_agent_config(config, fraud)
    assert own.data_dir == Path("/var/lib/bloomswarm/filters/fraud")
    assert own.public_keys == fraud.public_keys
    assert own.install == dataclasses.replace(config.install, keep_versions=5)


def test_programmatic_agent_config_is_checked_too() -> None:
    base = _cdn_config()
    with pytest.raises(ConfigError, match="filter 'a' is listed twice"):
        dataclasses.replace(base, filters=(FilterConfig("a"), FilterConfig("a")))
    with pytest.raises(ConfigError, match="filters must be a tuple of FilterConfig"):
        dataclasses.replace(base, filters=("a",))  # type: ignore[arg-type]


# --- bad input: each one line, naming the filter ----------------------------------------------


@pytest.mark.parametrize(("tables", "message"), [
    ('[[filters]]\nname = "a"\n[[filters]]\nname = "b"\n[[filters]]\nname = "a"\n',
     "filter 'a' is listed twice"),
    ('[[filters]]\nname = ".."\n', "filter name '..': must not contain '..'"),
    ('[[filters]]\nname = "a/b"\n', "filter name 'a/b': use lower-case letters"),
    ('[[filters]]\nname = "../etc"\n', "filter name '../etc': must not contain '..'"),
    ('[[filters]]\nname = ""\n', "filter name '': must not be empty"),
    ('[[filters]]\nname = "Upper"\n', "filter name 'Upper': use lower-case letters"),
    ('[[filters]]\nname = 5\n', "[[filters]] table 1: name must be a string, got 5"),
    ('[[filters]]\nname = "a"\n[[filters]]\nprefix = "x"\n', "[[filters]] table 2 has no name"),
    ('[[filters]]\nname = "a"\nprefix = "../b"\n', "filter 'a': prefix '../b' must not have a '..' segment"),
    ('[[filters]]\nname = "a"\nprefix = "x/../../b"\n',
     "filter 'a': prefix 'x/../../b' must not have a '..' segment"),
    ('[[filters]]\nname = "a"\nprefix = "/abs"\n', "filter 'a': prefix '/abs' is absolute"),
    ('[[filters]]\nname = "a"\nprefix = ""\n', "filter 'a': prefix '' is empty"),
    ('[[filters]]\nname = "a"\nprefix = "x//y"\n', "filter 'a': prefix 'x//y' has an empty segment"),
    ('[[filters]]\nname = "a"\nprefix = "./x"\n', "filter 'a': prefix './x' must not have a '.' segment"),
    ('[[filters]]\nname = "a"\nprefix = "x\\\\y"\n', "filter 'a': prefix 'x\\\\y' must not contain"),
    ('[[filters]]\nname = "a"\nprefix = 3\n', "filter 'a': prefix must be a string, got 3"),
    ('[[filters]]\nname = "a"\nprefix = "shared"\n[[filters]]\nname = "b"\nprefix = "shared/"\n',
     "filters 'a' and 'b' share the prefix 'shared'"),
    ('[[filters]]\nname = "a"\nprefix = "t/x"\n[[filters]]\nname = "b"\nprefix = "t"\n',
     "filter 'a': prefix 't/x' is inside the prefix 't' of filter 'b'"),
    ('[[filters]]\nname = "a"\n[[filters]]\nname = "b"\nprefix = "filters"\n',
     "filter 'a': prefix 'filters/a' is inside the prefix 'filters' of filter 'b'"),
    ('[[filters]]\nname = "a"\n[[filters]]\nname = "b"\nprefix = "filters/a"\n',
     "filters 'a' and 'b' share the prefix 'filters/a'"),
    ('[[filters]]\nname = "a"\ncolour = "red"\n', "filter 'a': unknown key 'colour'"),
    ('[[filters]]\nname = "a"\nkeep_versions = 0\n', "filter 'a': keep_versions must be at least 1, got 0"),
    ('[[filters]]\nname = "a"\nkeep_versions = "two"\n',
     "filter 'a': keep_versions must be an integer, got 'two'"),
    ('[[filters]]\nname = "a"\nkeep_versions = true\n',
     "filter 'a': keep_versions must be an integer, got True"),
    ('[[filters]]\nname = "a"\npublic_keys = 7\n', "filter 'a': public_keys must be a list of paths, got 7"),
    ('[[filters]]\nname = "a"\npublic_keys = ["k.pub", 7]\n',
     "filter 'a': public_keys must be a list of paths, got ['k.pub', 7]"),
    ('[[filters]]\nname = "a"\npublic_keys = []\n', "filter 'a': public_keys must list at least one path"),
    ('[filters]\nname = "a"\n', "filters must be an array of tables ([[filters]] name = ...), got {'name'"),
    ('filters = "a"\n', "filters must be an array of tables ([[filters]] name = ...), got 'a'"),
    ('filters = ["a", "b"]\n', "filters must be an array of tables ([[filters]] name = ...), got ['a'"),
], ids=lambda v: v if len(v) < 40 else None)
def test_bad_filters_are_refused_in_one_line(tmp_path: Path, tables: str, message: str) -> None:
    # Tables go last in the file; a plain "filters = ..." must come before the first table.
    text = TOP + "\n" + tables if tables.startswith("[") else tables + TOP
    got = _refused(tmp_path, text)
    path = tmp_path / "agent.toml"
    assert got.startswith(f"config file {path}: "), got
    assert message in got, got


def test_filters_cannot_come_from_the_environment(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=re.escape(
        "BLOOMSWARM_AGENT_FILTERS: filters cannot come from the environment; "
        "list them as [[filters]] tables in the config file")):
        load_config(_write(tmp_path, TOP), environ={"BLOOMSWARM_AGENT_FILTERS": "a,b"})


def test_filters_are_no_setting_for_flags(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="command line: unknown setting 'filters'"):
        load_config(_write(tmp_path, TOP), environ={}, overrides={"filters": ("a",)})


def test_filter_config_checks_its_fields() -> None:
    with pytest.raises(ConfigError, match=r"^filter name '\.\.': must not contain"):
        FilterConfig("..")
    with pytest.raises(ConfigError, match=r"^filter 'a': prefix '/x' is absolute"):
        FilterConfig("a", prefix="/x")
    with pytest.raises(ConfigError, match=r"^filter 'a': public_keys must be a tuple of paths"):
        FilterConfig("a", public_keys=["k.pub"])  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^filter 'a': keep_versions must be at least 1, got 0"):
        FilterConfig("a", keep_versions=0)
    with pytest.raises(ConfigError, match=r"^filter 'a': keep_versions must be at least 1, got True"):
        FilterConfig("a", keep_versions=True)


def test_check_filters_finds_nesting_past_unrelated_neighbours() -> None:
    # "t-x" sorts between "t" and "t/y" as a string, not as segments.
    filters = [FilterConfig("a", prefix="t"), FilterConfig("b", prefix="t-x"),
               FilterConfig("c", prefix="t/y")]
    inside = "filter 'c': prefix 't/y' is inside the prefix 't' of filter 'a'"
    with pytest.raises(ConfigError, match=f"^{re.escape(inside)}$"):
        check_filters(filters)
    check_filters([FilterConfig("a", prefix="t"), FilterConfig("b", prefix="t-x"),
                   FilterConfig("c", prefix="tt")])


def test_filters_from_toml_names_where() -> None:
    with pytest.raises(ConfigError, match=r"^somewhere: filter 'a' is listed twice$"):
        filters_from_toml([{"name": "a"}, {"name": "a"}], "somewhere")


# --- properties -------------------------------------------------------------------------------


@given(NAMES)
def test_any_valid_name_is_a_folder_inside_the_data_dir(name: str) -> None:
    root = Path("/var/lib/bloomswarm")
    path = filter_data_dir(root, name)
    assert path == root / FILTERS_DIR / name and path.name == name
    assert Path(os.path.normpath(path)).is_relative_to(root / FILTERS_DIR)
    entry = FilterConfig(name)
    assert entry.store_prefix == f"filters/{name}" and prefix_problem(entry.store_prefix) is None


@given(st.text(max_size=MAX_FILTER_NAME + 2))
def test_a_name_is_accepted_only_when_it_stays_inside(name: str) -> None:
    root = Path("/r")
    try:
        path = filter_data_dir(root, name)
    except ValueError as exc:
        assert str(exc).startswith("filter name ")
        with pytest.raises(ConfigError):
            FilterConfig(name)
        return
    assert os.path.normpath(path).startswith("/r/filters/") and "/" not in name and name not in (".", "..")


@given(st.lists(NAMES, min_size=1, max_size=8, unique=True))
def test_distinct_names_with_default_prefixes_never_clash(names: list[str]) -> None:
    filters = [FilterConfig(name) for name in names]
    check_filters(filters)
    config = _cdn_config(filters=tuple(filters))
    dirs = {filter_agent_config(config, entry).data_dir for entry in config.filters}
    assert len(dirs) == len(names)


@given(st.lists(st.sampled_from(["a", "b", "a/b", "a/c", "b/a", "ab", "a-b", "a/b/c"]),
                min_size=2, max_size=5, unique=True))
def test_prefix_clashes_match_a_brute_force_check(prefixes: list[str]) -> None:
    filters = [FilterConfig(f"f{i}", prefix=p) for i, p in enumerate(prefixes)]
    clash = any(p != q and q.startswith(p + "/") for p in prefixes for q in prefixes)
    if clash:
        with pytest.raises(ConfigError, match="is inside the prefix"):
            check_filters(filters)
    else:
        check_filters(filters)


@pytest.mark.parametrize(
    ("prefix", "url"),
    [
        (None, "https://cdn.example/fleet/filters/fraud"),
        ("teams/risk/fraud/", "https://cdn.example/fleet/teams/risk/fraud"),
        ("team?x=1", "https://cdn.example/fleet/team%3Fx%3D1"),
        ("team#x", "https://cdn.example/fleet/team%23x"),
        ("%2e%2e/other", "https://cdn.example/fleet/%252e%252e/other"),
        ("caf\u00e9 x", "https://cdn.example/fleet/caf%C3%A9%20x"),
    ],
)
def test_a_filters_cdn_folder_is_its_prefix_percent_encoded(prefix: str | None, url: str) -> None:
    """A prefix is a key prefix, as the S3 API reads it: none of its characters may turn
    into a query, a fragment or a ".." of the URL."""
    assert filter_folder_url("https://cdn.example/fleet/", FilterConfig("fraud", prefix=prefix)) == url


def test_only_a_filter_under_filters_name_follows_the_index() -> None:
    assert FilterConfig("fraud").follows_index
    assert FilterConfig("fraud", prefix="filters/fraud/").follows_index
    assert not FilterConfig("fraud", prefix="teams/risk/fraud").follows_index
    assert not FilterConfig("fraud", prefix="filters/other").follows_index
