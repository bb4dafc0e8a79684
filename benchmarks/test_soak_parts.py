"""The soak benchmark's pure parts: key plan, false-negative rule, skips, log parsing, percentiles,
delta counts and catch-ups."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from benchmarks.soak_deltas import (
    agent_delta_summary,
    catch_ups,
    delta_log,
    metrics_disagreement,
    total_delta_summary,
)
from benchmarks.soak_keys import KeyPlan, rolling_key, stable_key
from benchmarks.soak_probes import agent_log_events, disk_sample, skipped_versions
from benchmarks.soak_report import percentile, render_deltas


def test_consecutive_versions_share_exactly_the_common_keys() -> None:
    plan = KeyPlan(stable=5, window=10, churn=3)
    for version in range(1, 6):
        this, following = set(plan.keys(version)), set(plan.keys(version + 1))
        common = {stable_key(i) for i in range(5)} | {rolling_key(j) for j in plan.common_rolling(version)}
        assert this & following == common
        assert len(this) == plan.keys_per_version == 15


def test_a_miss_is_a_false_negative_only_when_every_version_in_between_holds_the_key() -> None:
    plan = KeyPlan(stable=5, window=10, churn=3)
    assert plan.held_by_all(stable_key(4), 1, 9)
    assert not plan.held_by_all(stable_key(5), 1, 1)  # not a stable key of this plan
    key = rolling_key(plan.common_rolling(2)[0])  # held by v2 and v3 ...
    assert plan.held_by_all(key, 2, 3)
    assert not plan.held_by_all(key, 2, 6)  # ... but dropped before v6 (a jump past v3)


@pytest.mark.parametrize(("stable", "window", "churn"), [(0, 10, 3), (5, 3, 3), (5, 10, 0)])
def test_key_plans_without_common_keys_are_refused(stable: int, window: int, churn: int) -> None:
    with pytest.raises(ValueError, match="must"):
        KeyPlan(stable, window, churn)


def test_skips_are_excused_only_by_downtime_while_the_version_was_latest() -> None:
    announced = {1: 0.0, 2: 20.0, 3: 40.0, 4: 60.0}
    skips = skipped_versions({1, 4}, announced, end=80.0, down=[(35.0, 38.0)])
    assert [(s.version, s.excused) for s in skips] == [(2, True), (3, False)]
    assert "down from 35.0 s" in skips[0].why and "up the whole time" in skips[1].why
    assert skipped_versions({1, 2, 3, 4}, announced, end=80.0, down=[]) == []


def test_agent_log_events_reads_swaps_starts_and_errors() -> None:
    text = "\n".join([
        "2026-11-21 08:04:50,981 INFO bloomswarm.agent: event=listening url=http://x transfer=swarm pid=7",
        "2026-11-21 08:05:23,689 INFO bloomswarm.agent: event=swapped version=1 latency_s=1.000",
        "2026-11-21 08:05:24,000 WARNING bloomswarm.agent: event=origin_error error=boom retry_in_s=1.0",
        "2026-11-21 08:05:24,500 INFO bloomswarm.agent: event=announcement version=2 sequence=2 installed=1",
        "2026-11-21 08:05:25,000 WARNING bloomswarm.swarm: v2: origin failed: url seed (http://x) 503",
        "2026-11-21 08:05:59,231 INFO bloomswarm.agent: event=swapped version=2 previous=1",
        "2026-11-21 08:06:00,000 ERROR bloomswarm.agent: event=internal_error error=KeyError",
        "Traceback (most recent call last):",
    ])
    log = agent_log_events(text)
    assert log.swapped == [1, 2] and log.starts == 1
    assert log.swapped_at[2] - log.swapped_at[1] == pytest.approx(35.542)
    assert log.swapped_at[2] - log.seen_at[2] == pytest.approx(34.731) and 1 not in log.seen_at
    assert log.errors == {"origin_error": 1, "swarm: origin failed": 1, "internal_error": 1}
    assert len(log.internal_errors) == 2


def test_disk_sample_counts_versions_staging_and_current(tmp_path: Path) -> None:
    (tmp_path / "versions" / "v1").mkdir(parents=True)
    (tmp_path / "versions" / "v1" / "filter.bsf").write_bytes(b"x" * 10_000)
    (tmp_path / "versions" / "v2").mkdir()  # no filter file: not a version
    (tmp_path / "staging" / "v3").mkdir(parents=True)
    (tmp_path / "current").symlink_to("versions/v1")
    sample = disk_sample(tmp_path, at=1.0)
    assert (sample.versions, sample.staging, sample.current) == (1, 1, 1)
    assert sample.bytes >= 10_000


def test_percentile_is_nearest_rank() -> None:
    values = list(range(1, 101))
    assert percentile(values, 0.99) == 99 and percentile(values, 0.5) == 50
    assert percentile(values, 1.0) == 100 and percentile([], 0.99) is None


_AGENT = "2026-11-23 23:00:00,000 INFO bloomswarm.agent: "
_DELTA_LOG = "\n".join(_AGENT + line for line in [
    "event=listening url=http://x transfer=swarm pid=7",
    "event=swapped version=1 latency_s=1.000 downloaded=true pinned=false",
    "event=swapped version=2 previous=1 latency_s=1.000 downloaded=true delta_from=1 pinned=false",
    "event=delta_fallback version=3 delta_from=2 reason=missing error=boom detail=\"fetching the full file\"",
    "event=swapped version=3 previous=2 latency_s=1.000 downloaded=true pinned=false",
    "event=listening url=http://x transfer=swarm pid=8",  # restart 1: caught up by delta
    "event=swapped version=4 previous=3 latency_s=1.000 downloaded=true delta_from=3 pinned=false",
    "event=listening url=http://x transfer=swarm pid=9",  # restart 2: fell back, then in full
    "event=delta_fallback version=6 delta_from=4 reason=corrupt error=bad",
    "event=swapped version=6 previous=4 latency_s=1.000 downloaded=true pinned=false",
    "event=delta_fallback version=7 delta_from=6 reason=missing error=gone",
    "event=listening url=http://x transfer=swarm pid=10",  # restart 3: a version already on disk
    "event=swapped version=6 previous=7 latency_s=0.100 downloaded=false pinned=true",
    "event=listening url=http://x transfer=swarm pid=11",  # restart 4: no swap
])


def test_delta_log_counts_installs_by_way_and_fallbacks_by_reason() -> None:
    log = delta_log(_DELTA_LOG)
    assert log.starts == 5
    assert (log.installs("delta"), log.installs("full"), log.installs("installed")) == (2, 3, 1)
    assert log.fallback_reasons() == {"corrupt": 1, "missing": 2}
    assert [s.process for s in log.swaps] == [1, 1, 1, 2, 3, 4]


def test_each_restart_caught_up_by_its_first_swap() -> None:
    ups = catch_ups(delta_log(_DELTA_LOG))
    assert [(c.process, c.way, c.version, c.delta_from, c.fallbacks) for c in ups] == [
        (2, "delta", 4, 3, ()),
        (3, "full", 6, None, ("corrupt",)),  # the later fallback (v7) is not this catch-up's
        (4, "installed", 6, None, ()),
        (5, "none", None, None, ()),
    ]
    assert catch_ups(delta_log(_AGENT + "event=listening pid=1")) == []


def test_totals_add_up_the_agents() -> None:
    one = agent_delta_summary(delta_log(_DELTA_LOG))
    assert one["catch_up_ways"] == {"delta": 1, "full": 1, "installed": 1, "none": 1}
    empty = agent_delta_summary(delta_log(""))
    totals = total_delta_summary([one, one, empty])
    assert totals["installs_by_delta"] == 4 and totals["installs_in_full"] == 6
    assert totals["delta_share"] == pytest.approx(0.4)
    assert totals["fallbacks"] == {"corrupt": 2, "missing": 4}
    assert totals["catch_up_ways"] == {"delta": 2, "full": 2, "installed": 2, "none": 2}
    assert total_delta_summary([empty])["delta_share"] is None


def test_metrics_are_checked_against_the_last_process_only() -> None:
    text = _DELTA_LOG.rsplit("\n", 1)[0]  # the last process is the one of restart 3
    log = delta_log(text)
    agreeing = {"bloomswarm_agent_delta_installs_total": 0.0, "bloomswarm_agent_swaps_total": 1.0,
                'bloomswarm_agent_delta_fallbacks_total{reason="missing"}': 0.0}
    assert metrics_disagreement(log, agreeing) == []
    wrong = {**agreeing, 'bloomswarm_agent_delta_fallbacks_total{reason="corrupt"}': 1.0}
    assert metrics_disagreement(log, wrong) == [
        'bloomswarm_agent_delta_fallbacks_total{reason="corrupt"}: /metrics 1, log 0']
    assert metrics_disagreement(log, {}) == ["bloomswarm_agent_swaps_total: /metrics 0, log 1"]


def test_the_deltas_section_reports_sizes_ways_and_catch_ups() -> None:
    summary = agent_delta_summary(delta_log(_DELTA_LOG))
    agent: dict[str, Any] = {"name": "agent0", "deltas": summary}
    result = {
        "deltas": total_delta_summary([summary]),
        "versions": [{"version": 1, "size": 1000, "deltas": []},
                     {"version": 2, "size": 1000, "deltas": [{"base": 1, "size": 100}]},
                     {"version": 3, "size": 1000, "deltas": [{"base": 1, "size": 190},
                                                             {"base": 2, "size": 110}]}],
        "agents": [agent],
        "origin": {"filter_bytes": 2500, "filter_requests": 4},
    }
    text = "\n".join(render_deltas(result))
    assert "2 of 2 versions after v1, 10.0% to 11.0% of the file" in text
    assert "**2 by delta**, **3 in full** (40.0% by delta)" in text
    assert "2.44 KiB in 4 requests, 2.5 files' worth" in text
    assert "corrupt 1, missing 2" in text
    assert "delta 1, full 1, installed 1, none 1" in text
    assert "#2: delta v4 from v3; #3: full v6 after fallback (corrupt); #4: installed v6; #5: none" in text
    assert render_deltas({"versions": [], "agents": []}) == []


def test_the_report_says_when_the_agents_ran_on_their_default_timings() -> None:
    from benchmarks.soak_report import _swarm_settings_line

    assert "the agent's defaults" in _swarm_settings_line({})
    assert "`origin_stagger_s = 1.0`" in _swarm_settings_line({"origin_stagger_s": 1.0})
