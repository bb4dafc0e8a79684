"""The private-swarm benchmark: its ratios and target, and a smoke run end to end (2
agents, 4 MiB, public then private) whose output shape is checked, not its times."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from benchmarks.private_swarm import MIB, Rollout, checks, main, ratios


def _rollout(mode: str, max_s: float, cpu_s: float) -> Rollout:
    return Rollout(mode=mode, round=0, agents=2, size_bytes=4 * MIB, max_s=max_s,  # type: ignore[arg-type]
                   minimum_s=1.0, cpu_s=cpu_s, origin_copies=1.0, load=None)


def test_ratios_are_private_over_public_means_and_the_target_is_ten_percent() -> None:
    found = ratios([_rollout("public", 10.0, 1.0), _rollout("private", 10.5, 1.2),
                    _rollout("private", 11.5, 1.2), _rollout("public", 10.0, 1.0)])
    assert found["time"] == pytest.approx(1.1) and found["cpu_per_mib"] == pytest.approx(1.2)
    assert [c.passed for c in checks(found)] == [True]
    assert [c.passed for c in checks({"time": 1.11, "cpu_per_mib": 1.0})] == [False]
    assert ratios([_rollout("public", 1.0, 1.0)]) == {} and checks({}) == []


def test_a_smoke_run_measures_both_modes(tmp_path: Path) -> None:
    pytest.importorskip("moto")
    if shutil.which("opentracker") is None:
        pytest.skip("opentracker is not installed (scripts/test.sh installs it)")
    out = tmp_path / "private.json"
    assert main(["--smoke", "--json", str(out)]) == 0
    result = json.loads(out.read_text(encoding="utf-8"))
    assert [r["mode"] for r in result["rollouts"]] == ["public", "private"]
    assert all(r["max_s"] > 0 and r["cpu_ms_per_mib"] > 0 for r in result["rollouts"])
    assert set(result["ratios"]) == {"time", "cpu_per_mib"}
