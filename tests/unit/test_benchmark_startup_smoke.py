"""Smoke test of benchmarks/startup.py: one run with this checkout as its own baseline.

Not a timing test: it asserts that the script exits 0, times every subject and command,
and writes positive numbers and a PASS/FAIL status for every check, whatever the
machine's speed. The checkout stands in for ``--baseline`` so that the package-tree path
(a checkout laid out by its own scripts/package_tree.py) runs too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "startup.py"


def test_one_run_writes_every_subject_and_check(tmp_path: Path) -> None:
    out = tmp_path / "startup.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1", "--baseline", str(ROOT), "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "baseline/current" in done.stdout
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    rows = {(row["command"], row["subject"]): row for row in data["results"]}
    assert set(rows) == {(command, subject) for command in ("--help", "query FILE KEY")
                         for subject in ("current", "baseline", "installed")}
    for row in rows.values():
        assert len(row["samples_s"]) == 1
        assert 0 < row["best_s"] <= row["median_s"] < 120
    for command in ("--help", "query FILE KEY"):
        assert rows[command, "current"]["baseline_over_current"] > 0
    assert [check["status"] in ("PASS", "FAIL") for check in data["checks"]] == [True] * 4


def test_a_folder_that_is_no_checkout_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--runs", "1", "--baseline", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert done.returncode != 0
    assert "is not a bloomswarm checkout" in done.stderr
