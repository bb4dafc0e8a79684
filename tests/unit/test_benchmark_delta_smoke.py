"""Smoke test of benchmarks/delta.py: the quick run completes and writes well-formed JSON.

Not a timing test: it asserts that the script exits 0 and that every figure it reports
exists and is positive, whatever the machine's speed; and the two size properties that do
not depend on the machine: a direct delta grows with the versions behind, and stays below a
chain of one-version deltas.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "delta.py"


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def test_quick_run_writes_well_formed_json(tmp_path: Path) -> None:
    out = tmp_path / "delta.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out), "--work", str(tmp_path / "work")],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    assert {"command", "machine", "config", "sizes", "behind", "speeds", "checks"} <= data.keys()
    assert data["config"]["quick"] is True

    assert {(row["filter"], row["churn"]) for row in data["sizes"]} == {
        ("200k keys", 0.01), ("200k keys", 0.001), ("16.00 MiB filter", 0.01)}
    for row in data["sizes"] + data["behind"]:
        assert _positive(row["delta_bytes"]) and _positive(row["file_bytes"]) and _positive(row["flips"]), row
        assert row["delta_bytes"] < row["file_bytes"]
    shares = [row["percent_of_file"] for row in sorted(data["behind"], key=lambda r: r["behind"])]
    assert [row["behind"] for row in sorted(data["behind"], key=lambda r: r["behind"])] == [1, 2, 4, 8]
    assert shares == sorted(shares) and shares[-1] < 8 * shares[0]

    assert len(data["speeds"]) == 2
    for speed in data["speeds"]:
        for figures in speed["engines"].values():
            for kind in ("patch", "patch_sha256"):
                assert _positive(figures[kind]["gb_per_s"]) and _positive(figures[kind]["best_s"])
        assert _positive(speed["apply_delta_file_to_file"]["gb_per_s"])
    assert not [f for f in (tmp_path / "work").iterdir()], "the run left files behind"
    assert len(data["checks"]) == 4
    assert all(check["status"] in {"PASS", "FAIL", "SKIP"} for check in data["checks"])
