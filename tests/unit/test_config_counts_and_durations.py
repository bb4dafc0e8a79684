"""Counts, sizes and durations the agent and the publisher refuse when they load.

The agent's ``[direct]`` table and the ``[s3]`` table (agent and publisher alike) used to
take counts and sizes of 0, below 0 or far too large (an S3 client with no connection, a
read buffer of petabytes, retries for ever), and a bad ``[direct]`` value was refused
with a message naming another setting. The publisher's intervals (``tracker.interval_s``,
``watch_debounce_s``) had no upper bound: ``1e300`` overflowed the tracker-sync timer or
never published. Each is now one ConfigError naming the setting, tested from both sides:
the value at the limit loads, the next one is refused.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from bloomswarm.agent.config import DirectConfig
from bloomswarm.agent.config import env_name as agent_env_name
from bloomswarm.agent.config import load_config as load_agent_config
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.storage import S3Config
from bloomswarm.main import main
from bloomswarm.publisher.config import PublisherConfig, TrackerConfig
from bloomswarm.publisher.config import env_name as publisher_env_name
from bloomswarm.publisher.config import load_config as load_publisher_config

AGENT = {"data_dir": "/d", "public_keys": "/k.pub", "s3.bucket": "bucket-a"}
DAY = 86_400
MIB = 1024 * 1024


def _agent(setting: str, value: str) -> object:
    environ = {agent_env_name(name): text for name, text in {**AGENT, setting: value}.items()}
    return load_agent_config(None, environ=environ)


def _agent_refused(setting: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _agent(setting, value)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def _publisher(setting: str, value: str) -> PublisherConfig:
    environ = {publisher_env_name("s3.bucket"): "bucket-a", publisher_env_name(setting): value}
    return load_publisher_config(None, environ=environ)


def _publisher_refused(setting: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _publisher(setting, value)
    assert message in str(caught.value) and "\n" not in str(caught.value)


# --- the agent's [direct] table ----------------------------------------------------------------

DIRECT_REFUSED = [
    ("direct.chunk_size", "0", "direct.chunk_size must be at least 4096, got 0"),
    ("direct.chunk_size", "-1", "direct.chunk_size must be at least 4096, got -1"),
    ("direct.chunk_size", "4095", "direct.chunk_size must be at least 4096, got 4095"),
    ("direct.chunk_size", str(64 * MIB + 1),
     f"direct.chunk_size must be at most {64 * MIB} (64 MiB, read into memory at once per "
     f"download), got {64 * MIB + 1}"),
    ("direct.concurrency", "0", "direct.concurrency must be at least 1, got 0"),
    ("direct.concurrency", "-8", "direct.concurrency must be at least 1, got -8"),
    ("direct.concurrency", "1025",
     "direct.concurrency must be at most 1024 (one thread per download), got 1025"),
    ("direct.rate_limit_bytes_per_s", "-1",
     "direct.rate_limit_bytes_per_s must be 0 (no limit) or positive, got -1"),
    ("direct.timeout_s", "0", "direct.timeout_s must be positive, got 0.0"),
    ("direct.timeout_s", "-2", "direct.timeout_s must be positive, got -2.0"),
]


@pytest.mark.parametrize(("setting", "value", "message"), DIRECT_REFUSED,
                         ids=[f"{s}={v}" for s, v, _ in DIRECT_REFUSED])
def test_a_direct_count_or_size_out_of_range_is_refused_naming_it(
    setting: str, value: str, message: str
) -> None:
    _agent_refused(setting, value, message)


@pytest.mark.parametrize(("setting", "value"), [
    ("direct.chunk_size", "4096"), ("direct.chunk_size", str(64 * MIB)),
    ("direct.concurrency", "1"), ("direct.concurrency", "1024"),
    ("direct.rate_limit_bytes_per_s", "0"), ("direct.timeout_s", str(DAY)),
])
def test_direct_values_at_the_limits_load(setting: str, value: str) -> None:
    _agent(setting, value)


def test_direct_dataclass_refuses_nan_and_bool_counts() -> None:
    with pytest.raises(ConfigError, match=re.escape("direct.timeout_s must be positive, got nan")):
        DirectConfig(timeout_s=math.nan)
    with pytest.raises(ConfigError, match=re.escape("direct.chunk_size must be at least 4096, got True")):
        DirectConfig(chunk_size=True)


# --- [s3], in the agent and the publisher ----------------------------------------------------

S3_REFUSED = [
    ("s3.max_attempts", "0", "S3 max_attempts must be at least 1, got 0"),
    ("s3.max_attempts", "-1", "S3 max_attempts must be at least 1, got -1"),
    ("s3.part_attempts", "0", "S3 part_attempts must be at least 1, got 0"),
    ("s3.max_attempts", "101", "S3 max_attempts must be at most 100 ("),
    ("s3.part_attempts", "1000000", "S3 part_attempts must be at most 100 ("),
    ("s3.max_pool_connections", "0", "S3 max_pool_connections must be at least 1, got 0"),
    ("s3.max_pool_connections", "-4", "S3 max_pool_connections must be at least 1, got -4"),
    ("s3.max_pool_connections", "1025",
     "S3 max_pool_connections must be at most 1024 (one socket each), got 1025"),
]


@pytest.mark.parametrize(("setting", "value", "message"), S3_REFUSED,
                         ids=[f"{s}={v}" for s, v, _ in S3_REFUSED])
def test_an_s3_count_out_of_range_is_refused_in_agent_and_publisher(
    setting: str, value: str, message: str
) -> None:
    _agent_refused(setting, value, message)
    _publisher_refused(setting, value, message)


@pytest.mark.parametrize(("setting", "value"), [
    ("s3.max_attempts", "1"), ("s3.max_attempts", "100"), ("s3.part_attempts", "100"),
    ("s3.max_pool_connections", "1"), ("s3.max_pool_connections", "1024"),
])
def test_s3_counts_at_the_limits_load(setting: str, value: str) -> None:
    _agent(setting, value)
    _publisher(setting, value)


def test_s3_config_refuses_a_pool_without_connections() -> None:
    with pytest.raises(ConfigError, match="S3 max_pool_connections must be at least 1"):
        S3Config(bucket="bucket-a", max_pool_connections=0)


# --- the publisher's durations ---------------------------------------------------------------

PUBLISHER_REFUSED = [
    ("tracker.interval_s", "1e300", "tracker.interval_s must be at most 86400 (1 day), got 1e+300"),
    ("tracker.interval_s", str(DAY + 1), "tracker.interval_s must be at most 86400 (1 day), got 86401.0"),
    ("tracker.interval_s", "0", "tracker.interval_s must be positive, got 0.0"),
    ("watch_debounce_s", "1e300", "watch_debounce_s must be at most 86400 (1 day), got 1e+300"),
    ("watch_debounce_s", str(DAY + 1), "watch_debounce_s must be at most 86400 (1 day), got 86401.0"),
    ("watch_debounce_s", "-1", "watch_debounce_s must not be negative, got -1.0"),
    ("orphan_grace_s", "-1", "orphan_grace_s must not be negative, got -1.0"),
    ("orphan_grace_s", "inf", "orphan_grace_s must be a finite number, got inf"),
]


@pytest.mark.parametrize(("setting", "value", "message"), PUBLISHER_REFUSED,
                         ids=[f"{s}={v}" for s, v, _ in PUBLISHER_REFUSED])
def test_a_publisher_duration_out_of_range_is_refused_naming_it(
    setting: str, value: str, message: str
) -> None:
    _publisher_refused(setting, value, message)


@pytest.mark.parametrize(("setting", "value"), [
    ("tracker.interval_s", str(DAY)), ("tracker.interval_s", "0.5"),
    ("watch_debounce_s", "0"), ("watch_debounce_s", str(DAY)),
    ("orphan_grace_s", "0"), ("orphan_grace_s", str(30 * DAY)),  # retention may wait longer
])
def test_publisher_durations_at_the_limits_load(setting: str, value: str) -> None:
    _publisher(setting, value)


def test_publisher_dataclasses_refuse_non_finite_durations_given_directly() -> None:
    s3 = S3Config(bucket="bucket-a")
    with pytest.raises(ConfigError, match="orphan_grace_s must be a finite number, got nan"):
        PublisherConfig(s3=s3, orphan_grace_s=math.nan)
    with pytest.raises(ConfigError, match="watch_debounce_s must be a finite number, got inf"):
        PublisherConfig(s3=s3, watch_debounce_s=math.inf)
    with pytest.raises(ConfigError, match=re.escape("tracker.interval_s must be positive, got nan")):
        TrackerConfig(interval_s=math.nan)
    with pytest.raises(ConfigError, match=re.escape("tracker.interval_s must be at most 86400")):
        TrackerConfig(interval_s=math.inf)


def test_tracker_sync_with_a_huge_interval_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BLOOMSWARM_CONFIG", raising=False)
    capsys.readouterr()
    code = main(["tracker-sync", "--bucket", "filters", "--whitelist", str(tmp_path / "wl"),
                 "--watch", "--interval", "1e300"])
    err = capsys.readouterr().err
    assert code == 1
    assert err == ("bloomswarm tracker-sync: error: tracker.interval_s must be at most 86400 "
                   "(1 day), got 1e+300\n")
    assert not (tmp_path / "wl").exists()


def test_publish_watch_with_a_huge_debounce_is_one_line_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("BLOOMSWARM_CONFIG", raising=False)
    monkeypatch.setenv("BLOOMSWARM_WATCH_DEBOUNCE_S", "1e300")
    capsys.readouterr()
    code = main(["publish", "--watch", str(tmp_path), "--bucket", "filters",
                 "--key", str(tmp_path / "missing.key")])
    err = capsys.readouterr().err
    assert code == 1
    assert err == "bloomswarm publish: error: watch_debounce_s must be at most 86400 (1 day), got 1e+300\n"
