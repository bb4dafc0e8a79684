"""common/settings.py: one check per type, the same in every table of both components and
from every source (TOML file, environment, flags)."""

from __future__ import annotations

import json
import math
import re
import string
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomswarm.agent import config as agent_config
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.settings import BOOL_WORDS, SettingsLoader, float_value, from_text, optional_inner
from bloomswarm.publisher import config as publisher_config

COMPONENTS: tuple[ModuleType, ...] = (agent_config, publisher_config)


def _settings_of(kind: Any) -> list[tuple[ModuleType, str]]:
    """(component, dotted setting) for every setting of type ``kind`` (or ``kind | None``)."""
    return [(module, name) for module in COMPONENTS
            for name, setting_kind in module.SETTINGS.items() if optional_inner(setting_kind) is kind]


FLOAT_SETTINGS = _settings_of(float)
BOOL_SETTINGS = _settings_of(bool)
NON_FINITE = st.sampled_from([math.nan, math.inf, -math.inf])
SOURCES = st.sampled_from(["file", "environment", "command line"])


def _toml(name: str, literal: str) -> str:
    """A file that sets one dotted setting to a TOML literal."""
    table, _, key = name.rpartition(".")
    return f"[{table}]\n{key} = {literal}\n" if table else f"{name} = {literal}\n"


def _toml_float(value: float) -> str:
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _load(
    module: ModuleType, directory: Path, name: str, source: str, *, value: object, literal: str
) -> None:
    """Load ``module``'s configuration with one setting, ``value`` (written as ``literal`` in a
    file), from ``source``."""
    if source == "file":
        path = directory / "config.toml"
        path.write_text(_toml(name, literal), encoding="utf-8")
        module.load_config(path, environ={})
    elif source == "environment":
        module.load_config(None, environ={module.env_name(name): str(value)})
    else:
        module.load_config(None, environ={}, overrides={name: value})


def _where(module: ModuleType, directory: Path, name: str, source: str) -> str:
    if source == "file":
        return f"config file {directory / 'config.toml'}"
    return str(module.env_name(name)) if source == "environment" else "command line"


def test_both_components_have_float_and_bool_settings_in_tables() -> None:
    names = [name for _, name in FLOAT_SETTINGS]
    assert any("." in name for name in names) and any("." not in name for name in names)
    assert {module for module, _ in FLOAT_SETTINGS} == set(COMPONENTS)
    assert {module for module, _ in BOOL_SETTINGS} == set(COMPONENTS)
    assert ("swarm.origin_grace_s" in {name for _, name in FLOAT_SETTINGS})
    assert ("swarm.enable_dht" in {name for _, name in BOOL_SETTINGS})


@given(setting=st.sampled_from(FLOAT_SETTINGS), value=NON_FINITE, source=SOURCES)
def test_every_float_setting_refuses_non_finite_values_from_every_source(
    tmp_path_factory: pytest.TempPathFactory, setting: tuple[ModuleType, str], value: float, source: str
) -> None:
    module, name = setting
    directory = tmp_path_factory.mktemp("float")
    where = _where(module, directory, name, source)
    message = f"{where}: {name} must be a finite number, got {value!r}"
    with pytest.raises(ConfigError, match=re.escape(message)):
        _load(module, directory, name, source, value=value, literal=_toml_float(value))


@given(setting=st.sampled_from(BOOL_SETTINGS),
       text=st.one_of(st.sampled_from(sorted(BOOL_WORDS)), st.text(string.printable, max_size=8)))
def test_every_bool_setting_refuses_a_string_in_the_file(
    tmp_path_factory: pytest.TempPathFactory, setting: tuple[ModuleType, str], text: str
) -> None:
    module, name = setting
    directory = tmp_path_factory.mktemp("bool")
    literal = json.dumps(text)  # ASCII with JSON escapes: a TOML basic string
    with pytest.raises(ConfigError, match=re.escape(f"{name} must be true or false, got ")):
        _load(module, directory, name, "file", value=text, literal=literal)


@given(setting=st.sampled_from(BOOL_SETTINGS), value=st.one_of(st.text(max_size=8), st.integers()))
def test_every_bool_setting_refuses_a_non_bool_flag(setting: tuple[ModuleType, str], value: object) -> None:
    module, name = setting
    with pytest.raises(ConfigError, match=re.escape(f"command line: {name} must be true or false")):
        module.load_config(None, environ={}, overrides={name: value})


@given(setting=st.sampled_from(BOOL_SETTINGS),
       text=st.text(max_size=8).filter(lambda t: t.strip().lower() not in BOOL_WORDS))
def test_every_bool_setting_refuses_other_environment_text(
    setting: tuple[ModuleType, str], text: str
) -> None:
    module, name = setting
    variable = module.env_name(name)
    with pytest.raises(ConfigError, match=re.escape(f"{variable}: {name} must be true or false")):
        module.load_config(None, environ={variable: text})


@pytest.mark.parametrize(("text", "expected"), [
    ("true", True), ("false", False), ("TRUE", True), (" False ", False), ("1", True), ("0", False),
    ("yes", True), ("no", False), ("On", True), ("off", False),
])
def test_environment_words_for_a_bool(text: str, expected: bool) -> None:
    assert from_text(bool, text) is expected
    assert from_text(bool | None, text) is expected


def test_environment_text_is_converted_before_the_check() -> None:
    assert from_text(int, "1_000") == 1000
    assert from_text(float, "2.5") == 2.5
    assert math.isnan(float(str(from_text(float, "nan"))))  # converted, then refused by the check
    assert from_text(float, "soon") == "soon"
    assert from_text(tuple[str, ...], " a, b ,,c ") == ["a", "b", "c"]
    assert from_text(bool, "maybe") == "maybe"


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 10**400])
def test_float_value_refuses_what_is_not_a_finite_float(value: float) -> None:
    with pytest.raises(ValueError, match="must be a finite number"):
        float_value(value)


# --- a loader on a small tree ---------------------------------------------------------------


@dataclass(frozen=True)
class _Table:
    ratio: float = 0.5
    on: bool = False
    names: tuple[str, ...] = ()
    mode: Literal["a", "b"] = "a"


@dataclass(frozen=True)
class _Root:
    top: float = 1.0
    table: _Table = field(default_factory=_Table)


LOADER = SettingsLoader(_Root, env_prefix="T_", strict=True)


def test_a_table_is_built_from_every_source_by_one_check(tmp_path: Path) -> None:
    path = tmp_path / "t.toml"
    path.write_text('top = 2\n[table]\nratio = 0.25\non = true\nnames = ["x"]\nmode = "b"\n')
    root = _Root(**LOADER.fields(LOADER.load(path)))  # type: ignore[arg-type]
    assert root == _Root(top=2.0, table=_Table(ratio=0.25, on=True, names=("x",), mode="b"))
    environ = {"T_TABLE_ON": "no", "T_TABLE_NAMES": "p, q", "T_TABLE_RATIO": "0.75"}
    root = _Root(**LOADER.fields(LOADER.load(path, environ=environ, overrides={"table.mode": "a"})))  # type: ignore[arg-type]
    assert root.table == _Table(ratio=0.75, on=False, names=("p", "q"), mode="a")


def test_load_table_checks_like_the_file() -> None:
    assert LOADER.load_table("table", {"ratio": 1, "on": True}, "spec") == _Table(ratio=1.0, on=True)
    with pytest.raises(ConfigError, match=re.escape("spec: table.ratio must be a finite number, got inf")):
        LOADER.load_table("table", {"ratio": math.inf}, "spec")
    with pytest.raises(ConfigError, match=re.escape("spec: table.on must be true or false, got 'yes'")):
        LOADER.load_table("table", {"on": "yes"}, "spec")
    with pytest.raises(ConfigError, match=re.escape("spec: unknown table 'nope'")):
        LOADER.load_table("nope", {}, "spec")
