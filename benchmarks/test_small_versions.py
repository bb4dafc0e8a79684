"""The small-version benchmark: its summary rule, and a tiny run end to end (2 agents, 2
versions) whose output shape is checked, not its times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.small_versions import MIB, Summary, VersionPoint, main


def _point(version: int, last_s: float, origin_bytes: int, size: int = MIB) -> VersionPoint:
    return VersionPoint(version=version, size_bytes=size, seconds=[last_s / 2, last_s],
                        origin_bytes=origin_bytes, cpu_busy=0.1)


@pytest.mark.parametrize(("points", "median", "worst"), [
    ([_point(1, 2.0, MIB)], 2.0, 1.0),
    ([_point(1, 9.0, MIB), _point(2, 1.0, 2 * MIB), _point(3, 1.2, MIB)], 1.2, 2.0),  # median, not mean
    ([_point(1, 1.0, MIB), _point(2, 3.0, MIB // 2)], 2.0, 1.0),  # even count: the middle two's mean
])
def test_summary_is_the_median_last_swap_and_the_worst_origin_ratio(
        points: list[VersionPoint], median: float, worst: float) -> None:
    summary = Summary.of(points)
    assert summary == Summary(median_last_s=median, max_origin_ratio=worst)


def test_targets_judge_the_median_and_every_version_s_origin() -> None:
    met = Summary(median_last_s=1.5, max_origin_ratio=1.2).checks()
    assert [c.passed for c in met] == [True, True]
    missed = Summary(median_last_s=1.6, max_origin_ratio=1.3).checks()
    assert [c.passed for c in missed] == [False, False]


def test_no_versions_is_an_error() -> None:
    with pytest.raises(ValueError, match="no versions"):
        Summary.of([])


def test_a_tiny_run_writes_every_version_and_the_summary(tmp_path: Path) -> None:
    pytest.importorskip("moto")
    out = tmp_path / "small.json"
    code = main(["--agents", "2", "--versions", "2", "--discovery", "auto", "--no-targets",
                 "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "small_versions" and result["failure"] is None
    assert result["settings"]["swarm_overrides"] == {}
    assert result["settings"]["agent_origin_defaults"]  # the defaults it ran on, recorded
    versions = result["versions"]
    assert [v["version"] for v in versions] == [1, 2]
    for version in versions:
        assert len(version["seconds"]) == 2 and version["seconds"] == sorted(version["seconds"])
        # nobody holds a new version but the origin: at least one whole copy leaves it
        assert version["origin_bytes"] >= version["size_bytes"] >= MIB
        assert version["origin_ratio"] == version["origin_bytes"] / version["size_bytes"]
    assert set(result["summary"]) == {"median_last_s", "max_origin_ratio"}
    assert [c["name"] for c in result["checks"]] == [
        "publish -> last swap, median over the versions", "origin egress / file size, worst version"]
