"""The agent cost benchmark's pure parts, and a smoke run of the whole benchmark."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.agent_cost import (
    ALLOWED_SETTINGS,
    agent_toml,
    checks,
    core_percent,
    cpu_ticks,
    idle_row,
    main,
    rollout_row,
    uss_bytes,
)

MIB = 1024 * 1024


def test_cpu_ticks_are_utime_plus_stime_whatever_the_command_name() -> None:
    rest = "S 1 2 3 4 5 6 7 8 9 10 111 222 13 14"  # fields 3..17: utime 111, stime 222
    assert cpu_ticks(f"42 (python) {rest}") == 333
    assert cpu_ticks(f"42 (a) (b c) {rest}") == 333


def test_uss_is_private_clean_plus_private_dirty() -> None:
    assert uss_bytes({"Rss": 100, "Private_Clean": 3, "Private_Dirty": 4, "Shared_Clean": 50}) == 7
    assert uss_bytes({}) == 0


def test_core_percent() -> None:
    assert core_percent(30, 30.0, 100.0) == pytest.approx(1.0)
    assert core_percent(5, 0.0, 100.0) == 0.0


def test_agent_toml_refuses_any_setting_but_addresses_and_caps() -> None:
    text = agent_toml({"": {"data_dir": "/d"}, "swarm": {"upload_rate_limit": 5, "trackers": ["http://t"]}})
    assert 'data_dir = "/d"' in text and "[swarm]" in text and 'trackers = ["http://t"]' in text
    with pytest.raises(ValueError, match=r"watch\.poll_interval_s"):
        agent_toml({"watch": {"poll_interval_s": 0.2}})
    with pytest.raises(ValueError, match=r"swarm\.origin_grace_s"):
        agent_toml({"swarm": {"origin_grace_s": 0.0}})
    assert "watch" not in ALLOWED_SETTINGS


def test_rows_and_checks() -> None:
    idle = idle_row(2, 30.0, [0.1, 0.3], [40 * MIB, 60 * MIB], None)
    assert (idle.cpu_pct_mean, idle.cpu_pct_max) == (0.2, 0.3)
    assert (idle.uss_mib_mean, idle.uss_mib_max) == (50.0, 60.0)
    rollout = rollout_row(2, 64, 10.0, 1.28, None)
    assert rollout.cpu_ms_per_mib == 10.0
    found = {c.name: c for c in checks(idle, rollout, {"rollout": {"cpu_ms_per_mib": 25.0}})}
    assert found["idle agent CPU (mean)"].passed and found["idle agent USS (mean)"].passed
    assert found["rollout CPU per MiB / baseline"].value == pytest.approx(0.4)
    assert found["rollout CPU per MiB / baseline"].passed
    assert checks(idle, rollout, None)[-1].passed is None  # no baseline: skipped


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("opentracker") is None, reason="opentracker is not installed")
def test_smoke_run_writes_both_rows(tmp_path: Path) -> None:
    out = tmp_path / "agent_cost.json"
    assert main(["--smoke", "--json", str(out), "--baseline"]) == 0
    data = json.loads(out.read_text())
    assert data["baseline"] == data["current"]
    assert data["current"]["idle"]["agents"] == 2 and data["current"]["idle"]["uss_mib_mean"] > 0
    assert data["current"]["rollout"]["size_mib"] == 2 and data["current"]["rollout"]["cpu_s"] > 0
