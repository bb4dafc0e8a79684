"""deploy/app/lookup_app.py, the example application of compose and Kubernetes, against a
real data directory laid out the way the agent lays it out."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from bloomswarm import FilterBuilder, LiveFilter
from bloomswarm.common.datadir import DataDir
from tests.deploy.deploy_tree import DEPLOY

APP = DEPLOY / "app" / "lookup_app.py"


def _app() -> ModuleType:
    spec = importlib.util.spec_from_file_location("lookup_app", APP)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _install(data_dir: Path, version: int, keys: list[str]) -> None:
    builder = FilterBuilder.for_capacity(1000, 0.01)
    builder.add_many(keys)
    target = DataDir(data_dir).version_dir(version)
    target.mkdir(parents=True)
    builder.write(DataDir(data_dir).filter_file(version), version=version)
    DataDir(data_dir).flip_current(version)


def test_report_waits_then_answers_from_the_installed_version(tmp_path: Path) -> None:
    app = _app()
    with LiveFilter(tmp_path, watch=False, poll_interval=0.05) as live:
        assert app.report(live, ["user:1"]).startswith("waiting for the first version")
        _install(tmp_path, 1, ["user:1", "user:2"])
        live.refresh()
        line = app.report(live, ["user:1", "user:0"], loop_s=0.01)
    assert line.startswith("version=1 user:1=True user:0=False lookups_per_s=")
    assert float(line.rsplit("=", 1)[1]) > 0


def test_the_script_runs_as_the_containers_run_it(tmp_path: Path) -> None:
    _install(tmp_path, 7, ["user:1"])
    result = subprocess.run(
        [sys.executable, str(APP), "--data-dir", str(tmp_path), "--key", "user:1", "--key", "nobody",
         "--interval", "0.01", "--count", "2"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and all(line.startswith("version=7 user:1=True nobody=False") for line in lines)
