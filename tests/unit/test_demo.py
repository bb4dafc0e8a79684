"""The README's run command: `bloomswarm demo` completes and reports a clean swap."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_demo_runs_and_reports_no_errors(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bloomswarm", "demo", "--keys", "20000", "--rounds", "3",
         "--dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL, check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 versions" in result.stdout
    assert "0 errors, 0 false negatives -> OK" in result.stdout
    assert (tmp_path / "data" / "current").resolve().name == "v3"
