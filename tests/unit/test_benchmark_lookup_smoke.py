"""Smoke test of benchmarks/lookup.py: the quick run completes and writes sane JSON.

Not a timing test: it asserts that the script exits 0 and that the numbers it reports
exist and are positive, whatever the machine's speed, with or without the C extension
and with or without the competitor libraries installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "lookup.py"


def _run_quick(tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "lookup.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    return data


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def test_quick_run_writes_positive_numbers(tmp_path: Path) -> None:
    data = _run_quick(tmp_path)
    assert {"machine", "config", "c_extension", "small", "big", "checks"} <= data.keys()
    assert _positive(data["machine"]["nproc"])
    assert data["machine"]["python"] and data["machine"]["date"]

    small = data["small"]
    assert _positive(small["empty_loop"]["per_s"])
    rows = {row["name"]: row for row in small["subjects"]}
    python_row = rows["bloomswarm Python/numpy, blocked"]
    for key in ("present_per_s", "absent_per_s", "batch_u64_per_s", "batch_bytes_per_s"):
        assert _positive(python_row[key]), key
    assert python_row["false_negatives"] == 0
    c_row = rows["bloomswarm C, blocked"]
    if data["c_extension"]:
        assert _positive(c_row["present_per_s"]) and _positive(c_row["batch_u64_per_s"])
    else:
        assert c_row["status"].startswith("unavailable")
    for row in small["subjects"]:
        if row["status"] == "ok":
            assert _positive(row["present_per_s"]) and _positive(row["absent_per_s"]), row["name"]

    big = data["big"]
    assert _positive(big["file_bytes"]) and _positive(big["keys_inserted"])
    assert _positive(big["open"]["python"]["median_ms"])
    assert _positive(big["batch_u64"]["numpy"]["per_s"])
    shared = big["shared"]
    assert len(shared["processes"]) == 4
    for proc in shared["processes"]:
        assert _positive(proc["rss"]) and _positive(proc["pss"])
    assert _positive(shared["pss_sum"])

    statuses = {check["status"] for check in data["checks"]}
    assert len(data["checks"]) == 8 and statuses <= {"PASS", "FAIL", "SKIP"}
