"""Smoke test of benchmarks/fleet_model.py: the quick run completes and writes well-formed
JSON (one calibration point beside its measurement, small fleets predicted).

Not an accuracy test: it asserts that the script exits 0, that every figure exists and is
positive, and the model's invariants that hold whatever the machine: nobody converges
before one link could carry the file, and the origin sends at least one copy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "fleet_model.py"


def test_quick_run_writes_well_formed_json(tmp_path: Path) -> None:
    out = tmp_path / "fleet.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out), "--plots", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    assert {"command", "machine", "settings", "calibration", "predictions", "plots"} <= data.keys()
    assert data["quick"] is True
    [point] = data["calibration"]
    assert point["agents"] == 8 and point["model"]["max_s"] > 16.0
    assert point["model"]["origin_copies"] >= 0.99
    assert len(data["predictions"]) == 4
    for row in data["predictions"]:
        assert row["p50_s"] <= row["p99_s"] <= row["max_s"]
        assert row["max_s"] >= row["minimum_s"]
        assert row["origin_copies"] >= 0.99
        assert row["latest_json_gets_per_s"] > 0 and row["peak_tracker_announces_per_s"] > 0
    for name in data["plots"]:
        assert (tmp_path / name).stat().st_size > 1000
