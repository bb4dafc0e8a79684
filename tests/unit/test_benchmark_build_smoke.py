"""Smoke test of benchmarks/build.py: the quick run completes and writes well-formed JSON.

Not a timing test: it asserts that the script exits 0 and that every number it reports
exists and is positive, whatever the machine's speed. The script starts moto's S3 server
and two Dask LocalClusters itself and stops them before it exits.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "build.py"


def _positive(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def test_quick_run_writes_well_formed_json(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    out = tmp_path / "build.json"
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    assert {"machine", "config", "c_extension", "kernel", "text", "dask", "upload", "checks"} <= data.keys()
    assert data["config"]["quick"] is True

    rows = data["kernel"] + data["text"] + data["dask"]
    names = {row["name"] for row in rows}
    assert "local pure Python, 16-byte bytes keys" in names and "local pure Python, text file" in names
    if data["c_extension"]:
        assert {"local C, 16-byte bytes keys", "local C, uint64 arrays", "local C, text files"} <= names
    for row in rows:
        assert _positive(row["keys"]) and _positive(row["keys_per_s"]) and _positive(row["best_s"]), row
    assert len(data["dask"]) == 2 and data["dask_identical"] == [True, True]
    assert {row["keys"] for row in data["dask"]} == {200_000}

    upload = data["upload"]
    assert _positive(upload["file_bytes"]) and _positive(upload["ratio"])
    for name in ("store_upload", "boto3_upload_file"):
        assert _positive(upload[name]["best_s"]) and _positive(upload[name]["bytes_per_s"])
    status = upload["publish"]["status"]
    assert status == "ok" or status.startswith(("skipped", "failed"))

    checks = data["checks"]
    assert len(checks) == 4
    assert all(check["status"] in {"PASS", "FAIL", "SKIP"} for check in checks)
    assert "PASS" in proc.stdout or "FAIL" in proc.stdout
