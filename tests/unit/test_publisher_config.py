"""Publisher configuration: file < environment < flags, strict keys and types."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bloomswarm.common.errors import ConfigError
from bloomswarm.common.params import Layout
from bloomswarm.publisher.config import SETTINGS, PublisherConfig, env_name, load_config

FILE = """
publisher_id = "builder-1"
signing_key = "/keys/publisher.key"
keep_versions = 3
trackers = ["http://t1:6969/announce", "udp://t2:6969"]

[s3]
bucket = "from-file"
prefix = "fleet-a"
endpoint_url = "http://minio:9000"
part_size = 8388608

[build]
fpp = 0.001
layout = "standard"
key_type = "int"

[tracker]
whitelist = "/etc/opentracker/whitelist.txt"
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "publisher.toml"
    path.write_text(text)
    return path


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    path = _write(tmp_path, FILE)
    config = load_config(path, environ={})
    assert config.publisher_id == "builder-1" and config.keep_versions == 3
    assert config.signing_key == Path("/keys/publisher.key")
    assert config.trackers == ("http://t1:6969/announce", "udp://t2:6969")
    assert (config.s3.bucket, config.s3.prefix, config.s3.part_size) == ("from-file", "fleet-a", 8 << 20)
    assert (config.build.fpp, config.build.layout, config.build.key_type) == (0.001, Layout.STANDARD, "int")
    assert config.tracker.whitelist == Path("/etc/opentracker/whitelist.txt")
    assert config.orphan_grace_s == PublisherConfig(s3=config.s3).orphan_grace_s  # default

    environ = {"BLOOMSWARM_S3_BUCKET": "from-env", "BLOOMSWARM_KEEP_VERSIONS": "7",
               "BLOOMSWARM_TRACKERS": "http://a/announce, http://b/announce",
               "BLOOMSWARM_S3_CHECKSUM_SHA256": "false", "BLOOMSWARM_BUILD_LAYOUT": "blocked",
               "BLOOMSWARM_DEBUG": "1"}
    config = load_config(path, environ=environ)
    assert (config.s3.bucket, config.keep_versions) == ("from-env", 7)
    assert config.trackers == ("http://a/announce", "http://b/announce")
    assert config.s3.checksum_sha256 is False and config.build.layout is Layout.BLOCKED
    assert config.s3.endpoint_url == "http://minio:9000"  # file value kept

    config = load_config(path, environ=environ,
                         overrides={"s3.bucket": "from-flag", "keep_versions": None,
                                    "build.layout": Layout.STANDARD})
    assert (config.s3.bucket, config.keep_versions) == ("from-flag", 7)
    assert config.build.layout is Layout.STANDARD


def test_every_setting_has_a_regular_environment_name() -> None:
    assert env_name("s3.endpoint_url") == "BLOOMSWARM_S3_ENDPOINT_URL"
    assert len({env_name(name) for name in SETTINGS}) == len(SETTINGS)
    assert {"s3.bucket", "signing_key", "trackers", "piece_size", "build.expected_keys",
            "watch_debounce_s", "tracker.whitelist", "tracker.pid_file"} <= set(SETTINGS)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('[s3]\nbucet = "x"\n', "unknown setting 's3.bucet'"),
        ('[s3]\nbucket = "bkt"\n[bild]\nfpp = 0.1\n', "unknown setting 'bild'"),
        ('keep_versions = "five"\n[s3]\nbucket = "bkt"\n', "keep_versions must be an integer"),
        ('keep_versions = true\n[s3]\nbucket = "bkt"\n', "keep_versions must be an integer"),
        ('trackers = "http://a"\n[s3]\nbucket = "bkt"\n', "trackers must be a list"),
        ('[s3]\nbucket = "bkt"\n[build]\nkey_type = "float"\n', "key_type must be one of"),
        ('[s3]\nbucket = "bkt"\n[build]\nlayout = "fancy"\n', "layout must be blocked or standard"),
        ('[s3]\nbucket = "bkt"\n[build]\nfpp = 2\n', "fpp must be between 0 and 1"),
        ('piece_size = 20000\n[s3]\nbucket = "bkt"\n', "power of two"),
        ('trackers = ["ftp://t"]\n[s3]\nbucket = "bkt"\n', "tracker URL"),
        ('keep_versions = 0\n[s3]\nbucket = "bkt"\n', "keep_versions must be at least 1"),
        ('[s3]\nbucket = "Not_A_Bucket"\n', "invalid S3 bucket name"),
        ('[s3]\nbucket = "bkt"\n[s3.extra]\n', "s3.extra"),
        ("keep_versions = 3\n", "no bucket configured"),
        ('orphan_grace_s = inf\n[s3]\nbucket = "bkt"\n', "orphan_grace_s must be a finite number, got inf"),
        ('[s3]\nbucket = "bkt"\n[build]\nfpp = nan\n', "build.fpp must be a finite number, got nan"),
        ('[s3]\nbucket = "bkt"\n[tracker]\ninterval_s = -inf\n',
         "tracker.interval_s must be a finite number, got -inf"),
        ('[s3]\nbucket = "bkt"\nconnect_timeout_s = nan\n', "s3.connect_timeout_s must be a finite number"),
        ('[s3]\nbucket = "bkt"\nchecksum_sha256 = "yes"\n',
         "s3.checksum_sha256 must be true or false, got 'yes'"),
        ("this is not toml", "not valid TOML"),
    ],
)
def test_bad_file_is_a_config_error_naming_the_setting(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(_write(tmp_path, text), environ={})


def test_bad_environment_value_names_the_variable() -> None:
    message = re.escape("BLOOMSWARM_S3_MAX_ATTEMPTS: s3.max_attempts must be an integer")
    with pytest.raises(ConfigError, match=message):
        load_config(environ={"BLOOMSWARM_S3_BUCKET": "abc", "BLOOMSWARM_S3_MAX_ATTEMPTS": "many"})
    with pytest.raises(ConfigError, match="must be true or false"):
        load_config(environ={"BLOOMSWARM_S3_BUCKET": "abc", "BLOOMSWARM_S3_CHECKSUM_SHA256": "maybe"})


@pytest.mark.parametrize(
    ("text", "expected"), [("true", True), ("FALSE", False), ("yes", True), ("0", False)]
)
def test_a_bool_from_the_environment_is_a_word(text: str, expected: bool) -> None:
    config = load_config(environ={"BLOOMSWARM_S3_BUCKET": "abc", "BLOOMSWARM_S3_CHECKSUM_SHA256": text})
    assert config.s3.checksum_sha256 is expected


def test_non_finite_environment_and_flag_values_are_refused() -> None:
    message = re.escape("BLOOMSWARM_BUILD_FPP: build.fpp must be a finite number, got nan")
    with pytest.raises(ConfigError, match=message):
        load_config(environ={"BLOOMSWARM_S3_BUCKET": "abc", "BLOOMSWARM_BUILD_FPP": "nan"})
    message = re.escape("command line: watch_debounce_s must be a finite number, got inf")
    with pytest.raises(ConfigError, match=message):
        load_config(environ={"BLOOMSWARM_S3_BUCKET": "abc"}, overrides={"watch_debounce_s": float("inf")})


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", environ={})


def test_unknown_override_is_refused() -> None:
    with pytest.raises(ConfigError, match="unknown setting 'colour'"):
        load_config(environ={"BLOOMSWARM_S3_BUCKET": "abc"}, overrides={"colour": "red"})


def test_the_deploy_example_loads_and_names_every_setting() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy" / "publisher.toml"
    config = load_config(example, environ={})
    assert config.s3.bucket == "bloomswarm-filters" and config.tracker.interval_s == 30.0
    text = example.read_text()
    for name in SETTINGS:
        assert f"{name.rsplit('.', 1)[-1]} = " in text, f"deploy/publisher.toml lacks {name}"


def test_torrent_format_is_v1_by_default_and_takes_hybrid(tmp_path: Path) -> None:
    path = tmp_path / "publisher.toml"
    path.write_text('[s3]\nbucket = "filters"\n')
    assert load_config(path, environ={}).torrent_format == "v1"
    env = {"BLOOMSWARM_TORRENT_FORMAT": "hybrid"}
    assert load_config(path, environ=env).torrent_format == "hybrid"
    assert load_config(path, environ=env, overrides={"torrent_format": "v1"}).torrent_format == "v1"
    path.write_text('torrent_format = "v2"\n[s3]\nbucket = "filters"\n')
    with pytest.raises(ConfigError, match="torrent_format must be one of v1, hybrid"):
        load_config(path, environ={})
