"""Every file in deploy/ parses; the reference configs mirror the configuration dataclasses;
every configuration key, variable and flag used anywhere in deploy/ exists."""

from __future__ import annotations

import configparser
import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bloomswarm.agent import config as agent_config
from bloomswarm.common.settings import SettingsLoader
from bloomswarm.publisher import config as publisher_config
from tests.deploy.deploy_tree import DEPLOY, ROOT, SYSTEMD, load_yaml, yaml_files

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REFERENCES = {
    DEPLOY / "agent.toml": agent_config,
    DEPLOY / "publisher.toml": publisher_config,
}
PROCESS_SWITCHES = {
    "BLOOMSWARM_CONFIG": "the publisher's config file",
    "BLOOMSWARM_AGENT_CONFIG": "the agent's config file",
    "BLOOMSWARM_REQUIRE_EXTENSION": "setup.py: the C extension must build",
    "BLOOMSWARM_NO_EXTENSION": "setup.py: skip the C extension",
    "BLOOMSWARM_PURE_PYTHON": "run time: no C extension",
    "BLOOMSWARM_DEBUG": "run time: tracebacks",
}
"""BLOOMSWARM_* variables that are not settings."""


def test_every_yaml_file_parses_without_duplicate_keys() -> None:
    files = yaml_files()
    assert len(files) >= 8
    for path in files:
        assert load_yaml(path), f"{path} is empty"


def test_every_toml_file_parses() -> None:
    files = sorted(DEPLOY.rglob("*.toml"))
    assert len(files) >= 6
    for path in files:
        with path.open("rb") as fh:
            assert tomllib.load(fh), f"{path} is empty"


def _unit(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",),
                                       comment_prefixes=("#", ";"))
    parser.optionxform = str  # type: ignore[assignment, method-assign]
    parser.read(path, encoding="utf-8")
    return parser


def test_systemd_units_parse_and_are_hardened() -> None:
    for name in ("bloomswarm-agent.service", "bloomswarm-publisher.service"):
        unit = _unit(SYSTEMD / name)
        service = unit["Service"]
        assert service["User"].startswith("bloomswarm"), name
        assert service["ProtectSystem"] == "strict"
        assert service["NoNewPrivileges"] == "yes"
        assert service["CapabilityBoundingSet"] == ""
        state = service.get("StateDirectory") or service["CacheDirectory"]
        base = "/var/lib/" if "StateDirectory" in service else "/var/cache/"
        assert service["ReadWritePaths"].split() == [base + state], "only the data directory"
        assert service["ExecStart"].split()[0] == "/opt/bloomswarm/bin/bloomswarm"
    timer = _unit(SYSTEMD / "bloomswarm-publisher.timer")
    assert timer["Timer"]["Unit"] == "bloomswarm-publisher.service"
    assert timer["Install"]["WantedBy"] == "timers.target"


def _units_with_real_binary(tmp_path: Path) -> list[Path]:
    """Copies of the units whose ExecStart names this environment's bloomswarm."""
    binary = Path(sys.executable).parent / "bloomswarm"
    assert binary.is_file(), binary
    copies = []
    for path in sorted(SYSTEMD.glob("*.service")) + sorted(SYSTEMD.glob("*.timer")):
        copy = tmp_path / path.name
        copy.write_text(path.read_text().replace("/opt/bloomswarm/bin/bloomswarm", str(binary)))
        copies.append(copy)
    return copies


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_analyze_verify_reports_nothing(tmp_path: Path) -> None:
    units = _units_with_real_binary(tmp_path)
    result = subprocess.run(["systemd-analyze", "verify", *map(str, units)], capture_output=True,
                            text=True, timeout=60, check=False, cwd=tmp_path)
    assert result.returncode == 0 and not result.stderr.strip() and not result.stdout.strip(), (
        result.stdout + result.stderr
    )


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_services_exposure_is_low(tmp_path: Path) -> None:
    services = [u for u in _units_with_real_binary(tmp_path) if u.suffix == ".service"]
    # --threshold is on systemd's 0..100 scale: 20 is an overall exposure of 2.0 ("OK").
    result = subprocess.run(["systemd-analyze", "security", "--offline=yes", "--threshold=20",
                             "--no-pager", *map(str, services)],
                            capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr


# --- the reference configurations ---------------------------------------------------------


ARRAY_EXAMPLE = re.compile(r"#\s*\[\[([a-z0-9_]+)\]\]")
"""A commented-out array of tables (``# [[filters]]``): an example, its keys no settings."""


def _documented_settings(path: Path) -> tuple[set[str], set[str]]:
    """(set, commented-out) dotted settings of a reference file, before any commented-out
    array of tables (:data:`ARRAY_EXAMPLE`)."""
    table = ""
    active: set[str] = set()
    commented: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if ARRAY_EXAMPLE.match(line):
            break
        if match := re.match(r"\[([a-z0-9_]+)\]", line):
            table = match.group(1) + "."
        elif match := re.match(r"([a-z0-9_]+)\s*=", line):
            active.add(table + match.group(1))
        elif match := re.match(r"#\s*([a-z0-9_]+)\s*=", line):
            commented.add(table + match.group(1))
    return active, commented


@pytest.mark.parametrize("path", list(REFERENCES), ids=lambda p: p.name)
def test_reference_config_mirrors_the_dataclasses_key_for_key(path: Path) -> None:
    module = REFERENCES[path]
    settings = set(module.SETTINGS)
    active, commented = _documented_settings(path)
    assert not active & commented, f"set and commented out: {sorted(active & commented)}"
    documented = active | commented
    assert documented == settings, (
        f"missing: {sorted(settings - documented)}, unknown: {sorted(documented - settings)}"
    )
    module.load_config(path, environ={})  # the real loader: types, ranges, required keys


def test_reference_agent_config_filters_example_loads_when_uncommented(tmp_path: Path) -> None:
    """deploy/agent.toml's commented-out ``[[filters]]`` example, uncommented, is what
    docs/agent.md describes, and loads through the real loader."""
    lines = (DEPLOY / "agent.toml").read_text(encoding="utf-8").splitlines()
    start = next(i for i, line in enumerate(lines) if ARRAY_EXAMPLE.match(line))
    example = [re.sub(r"^#\s?", "", line) for line in lines[start:]]
    assert all(line.startswith("#") for line in lines[start:]), "the example is commented out"
    uncommented = tmp_path / "agent.toml"
    uncommented.write_text("\n".join(lines[:start] + example) + "\n", encoding="utf-8")
    config = agent_config.load_config(uncommented, environ={})
    blocklist, fraud = config.filters
    assert (blocklist.name, blocklist.prefix, blocklist.public_keys, blocklist.keep_versions) == (
        "blocklist", None, (), None)
    assert (fraud.name, fraud.prefix, fraud.keep_versions) == ("fraud", "teams/risk/fraud", 4)
    assert fraud.public_keys == (Path("/etc/bloomswarm/risk.pub"),)
    documented = {f.name for f in dataclasses.fields(fraud)}
    assert documented == {"name", "prefix", "public_keys", "keep_versions"}, "every filter key shown"


@pytest.mark.parametrize("path", list(REFERENCES), ids=lambda p: p.name)
def test_reference_config_shows_the_defaults_unless_marked(path: Path) -> None:
    module = REFERENCES[path]
    loader: SettingsLoader = module._LOADER
    defaults = module.load_config(None, environ={}, overrides=_required_overrides(module))
    values = loader.read_file(path)
    lines = {}
    table = ""
    for line in path.read_text(encoding="utf-8").splitlines():
        if match := re.match(r"\[([a-z0-9_]+)\]", line):
            table = match.group(1) + "."
        elif match := re.match(r"([a-z0-9_]+)\s*=", line):
            lines[table + match.group(1)] = line
    for name, value in values.items():
        marked = re.search(r"#.*\b(default:|required|no default)", lines[name])
        if marked:
            continue
        default = _value(defaults, name)
        assert _normal(value) == _normal(default), f"{path.name}: {name} = {value!r}, default {default!r}"


def _required_overrides(module: object) -> dict[str, object]:
    if module is agent_config:
        return {"data_dir": Path("/d"), "public_keys": (Path("/k.pub"),), "s3.bucket": "bucket"}
    return {"s3.bucket": "bucket"}


def _value(config: object, name: str) -> object:
    for part in name.split("."):
        config = getattr(config, part)
    return config


def _normal(value: object) -> object:
    if isinstance(value, tuple | list):
        return [_normal(v) for v in value]
    if hasattr(value, "value"):  # enums (Layout)
        return value.value
    return str(value) if isinstance(value, Path) else value


# --- every variable named anywhere ----------------------------------------------------------


def test_every_bloomswarm_variable_in_deploy_and_docs_is_a_setting_or_a_known_switch() -> None:
    known = set(PROCESS_SWITCHES)
    known |= {agent_config.env_name(s) for s in agent_config.SETTINGS}
    known |= {publisher_config.env_name(s) for s in publisher_config.SETTINGS}
    texts = [p for p in DEPLOY.rglob("*") if p.is_file()] + [ROOT / "docs" / "operations.md"]
    found: dict[str, Path] = {}
    for path in texts:
        for name in re.findall(r"\bBLOOMSWARM_[A-Z0-9_]*[A-Z0-9]\b", path.read_text(encoding="utf-8")):
            found.setdefault(name, path)
    assert len(found) >= 10
    unknown = {name: str(path.relative_to(ROOT)) for name, path in found.items() if name not in known}
    assert not unknown, f"variables that name no setting: {unknown}"
