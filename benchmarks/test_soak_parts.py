"""The soak benchmark's pure parts: key plan, false-negative rule, skips, log parsing, percentiles."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.soak_keys import KeyPlan, rolling_key, stable_key
from benchmarks.soak_probes import agent_log_events, disk_sample, skipped_versions
from benchmarks.soak_report import percentile


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
