"""The many-filters benchmark: its pure parts (quantiles, per-filter times, summaries, the
targets, the arms), and a tiny run end to end (2 agents, 2 filters, v1 only, 2 arms) whose output
shape is checked, not its times."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from benchmarks.many_filters import (
    KIB,
    MIB,
    Arm,
    ArmSummary,
    PollRate,
    RoundPoint,
    checks,
    current_link,
    filter_last_seconds,
    main,
    nearest_rank,
    parse_sizes,
    plan_arms,
    swapped_to,
)
from bloomswarm.common.datadir import DataDir, filter_data_dir


def _round(number: int, last: list[float], origin: int = 100, uss: list[int] | None = None) -> RoundPoint:
    return RoundPoint(round=number, version=number + 1, filters=len(last), file_bytes=100, publish_s=1.0,
                      index_sync_s=0.5, filter_last_s=sorted(last), origin_bytes=origin,
                      uss_bytes=sorted(uss or [MIB]), cpu_busy=0.5, agents_cpu_s=0.2, peers=[10])


@pytest.mark.parametrize(("values", "q", "expected"), [
    ([3.0], 0.9, 3.0),
    ([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0], 0.9, 9.0),
    ([10.0, 1.0, 5.0], 0.5, 5.0),  # unsorted input
    ([1.0, 2.0], 1.0, 2.0),
])
def test_nearest_rank(values: list[float], q: float, expected: float) -> None:
    assert nearest_rank(values, q) == expected


def test_nearest_rank_refuses_nothing_and_bad_quantiles() -> None:
    with pytest.raises(ValueError):
        nearest_rank([], 0.5)
    with pytest.raises(ValueError):
        nearest_rank([1.0], 0.0)


def test_a_filter_s_time_is_its_last_agent_s() -> None:
    swaps = {("a0", "x"): 101.0, ("a1", "x"): 103.0, ("a0", "y"): 102.0, ("a1", "y"): 100.5}
    assert filter_last_seconds(swaps, 100.0) == [2.0, 3.0]
    # a filter some agent never swapped counts as the time waited (a lower bound)
    assert filter_last_seconds(swaps, 100.0, unfinished=["z"], waited_s=60.0) == [2.0, 3.0, 60.0]


def test_a_round_s_figures() -> None:
    point = _round(0, [1.0, 2.0, 3.0, 4.0], origin=250, uss=[3 * MIB, MIB, 2 * MIB])
    assert (point.last_s, point.p50_s, point.p90_s) == (4.0, 2.5, 4.0)
    assert point.origin_ratio == 2.5
    assert (point.uss_max, point.uss_median) == (3 * MIB, 2 * MIB)


def test_summary_over_rounds() -> None:
    summary = ArmSummary.of([_round(0, [9.0], origin=300), _round(1, [1.0], uss=[5 * MIB]),
                             _round(2, [2.0])])
    assert summary.median_last_s == 2.0 and summary.worst_last_s == 9.0
    assert summary.median_origin_ratio == 1.0 and summary.worst_origin_ratio == 3.0
    assert summary.max_uss_bytes == 5 * MIB and summary.incomplete_rounds == 0
    with pytest.raises(ValueError, match="no rounds"):
        ArmSummary.of([])


def _rate(gets: int, agents: int = 4, window: float = 10.0) -> PollRate:
    return PollRate("index.json", agents=agents, window_s=window, gets=gets, all_gets=gets)


def test_targets_are_judged_on_the_default_arm_at_their_shape() -> None:
    met = Arm("default", None, rounds=[_round(0, [4.0], uss=[99 * MIB]), _round(1, [5.0])],
              poll_rate=_rate(80))
    results = checks(met, _rate(80), on_target_shape=True)
    assert [c.passed for c in results] == [True, True, True, True, True]
    missed = Arm("default", None, rounds=[_round(0, [4.0]), _round(1, [6.0], uss=[101 * MIB])],
                 poll_rate=_rate(100))
    judged = checks(missed, _rate(80), on_target_shape=True)
    assert [c.passed for c in judged] == [True, False, False, False, True]
    starved = checks(missed, _rate(400), on_target_shape=False)  # 4x fewer GETs than one filter
    assert [c.passed for c in starved] == [True, False]
    # another shape: the index rate alone is judged
    assert [c.name for c in checks(missed, _rate(80), on_target_shape=False)] == [
        "index.json GETs per agent / one filter's latest.json GETs",
        "index.json GETs per agent / one filter's latest.json GETs (not starved)"]


def test_a_stalled_round_fails_the_time_target_as_a_lower_bound() -> None:
    stalled = RoundPoint(round=0, version=1, filters=2, file_bytes=100, publish_s=1.0,
                         index_sync_s=0.5, filter_last_s=[2.0, 90.0], origin_bytes=100, uss_bytes=[MIB],
                         cpu_busy=0.5, agents_cpu_s=0.2, peers=[500], missing_pairs=3)
    arm = Arm("default", None, rounds=[stalled])
    assert arm.as_dict()["rounds"][0]["complete"] is False
    assert arm.as_dict()["rounds"][0]["cpu_ms_per_install"] == pytest.approx(100.0)  # 0.2 s / (1 agent x 2)
    time_checks = checks(arm, None, on_target_shape=True)[:2]
    assert [c.passed for c in time_checks] == [False, False]
    assert all("lower bound" in c.note for c in time_checks)


def test_arms_skip_the_default_s_value() -> None:
    arms = plan_arms([0, 262144, 0], default=0)
    assert [(a.label, a.direct_max_bytes) for a in arms] == [
        ("default(0)", None), ("direct_max_bytes=262144", 262144)]
    assert arms[0].swarm_overrides == {} and arms[1].swarm_overrides == {"direct_max_bytes": 262144}
    assert parse_sizes("0, 65536") == [0, 65536]
    with pytest.raises(ValueError):
        parse_sizes("-1")


@pytest.mark.skipif(shutil.which("opentracker") is None, reason="opentracker is not installed")
def test_a_tiny_run_measures_every_arm_and_the_poll_rates(tmp_path: Path) -> None:
    pytest.importorskip("moto")
    out = tmp_path / "many.json"
    code = main(["--agents", "2", "--filters", "2", "--size-kib", "8", "--rounds", "0", "--idle-s", "1",
                 "--compare-direct-max-bytes", "65536", "--poll-interval-s", "0.5", "--no-targets",
                 "--json", str(out)])
    assert code == 0
    result = json.loads(out.read_text(encoding="utf-8"))
    assert result["benchmark"] == "many_filters" and result["failure"] is None
    assert result["settings"]["poll_interval_s"] == 0.5  # a 1 s idle window sees polls every 0.5-0.75 s
    assert [a["swarm_overrides"] for a in result["arms"]] == [{}, {"direct_max_bytes": 65536}]
    for arm in result["arms"]:
        assert [r["round"] for r in arm["rounds"]] == [0]
        for point in arm["rounds"]:
            times = point["filter_last_s"]
            assert len(times) == 2 and times == sorted(times) and point["complete"]
            # nobody holds a new version but the origin: at least one copy of each file leaves it
            assert point["origin_bytes"] >= point["file_bytes"] >= 2 * 8 * KIB
            assert len(point["uss_bytes"]) == 2 and point["uss_max"] > 0
        assert arm["index_poll_rate"]["key"] == "index.json" and arm["index_poll_rate"]["gets"] > 0
    assert result["single_filter_poll_rate"]["key"] == "latest.json"
    assert result["index_poll_ratio"] is not None
    assert not result["on_target_shape"]
    assert [c["name"] for c in result["checks"]] == [
        "index.json GETs per agent / one filter's latest.json GETs",
        "index.json GETs per agent / one filter's latest.json GETs (not starved)"]


def test_a_swap_is_read_from_the_current_link_and_its_time(tmp_path: Path) -> None:
    layout = DataDir(filter_data_dir(tmp_path, "f01"))
    link = current_link(tmp_path, "f01")
    assert swapped_to(link) == (None, 0.0)
    (layout.version_dir(3)).mkdir(parents=True)
    layout.filter_file(3).write_bytes(b"x")
    layout.flip_current(3)
    version, made_at = swapped_to(link)
    assert version == 3
    assert made_at == os.lstat(layout.current).st_mtime
