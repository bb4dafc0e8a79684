"""Agent configuration: defaults, file, environment, flags (in that precedence) and bad input."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bloomswarm.agent.config import (
    SETTINGS,
    AgentConfig,
    InstallConfig,
    OriginConfig,
    SwarmConfig,
    WatchConfig,
    env_name,
    load_config,
    swarm_config,
)
from bloomswarm.common.errors import ConfigError

BASIC = """
data_dir = "/var/lib/bloomswarm"
public_keys = ["/etc/bloomswarm/a.pub", "/etc/bloomswarm/b.pub"]

[s3]
bucket = "filters"
prefix = "fleet-a"
endpoint_url = "http://127.0.0.1:9000"

[watch]
poll_interval_s = 5

[swarm]
trackers = ["http://127.0.0.1:6969/announce"]
origin_grace_s = 3.5
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "agent.toml"
    path.write_text(text)
    return path


def test_file_values_and_defaults(tmp_path: Path) -> None:
    config = load_config(_write(tmp_path, BASIC), environ={})
    assert config.data_dir == Path("/var/lib/bloomswarm")
    assert config.public_keys == (Path("/etc/bloomswarm/a.pub"), Path("/etc/bloomswarm/b.pub"))
    assert config.s3 is not None and (config.s3.bucket, config.s3.prefix) == ("filters", "fleet-a")
    assert config.watch.poll_interval_s == 5.0 and config.watch.poll_jitter_s == WatchConfig().poll_jitter_s
    assert config.install == InstallConfig() and config.install.keep_versions == 2
    assert config.status.host == "127.0.0.1" and config.transfer == "swarm"
    assert isinstance(config.swarm, SwarmConfig)
    assert config.swarm.trackers == ("http://127.0.0.1:6969/announce",)
    assert config.swarm.origin_grace_s == 3.5


def test_environment_overrides_file_and_flags_override_both(tmp_path: Path) -> None:
    environ = {
        env_name("watch.poll_interval_s"): "0.5",
        env_name("s3.prefix"): "fleet-b",
        env_name("install.keep_versions"): "3",
        env_name("public_keys"): "/k/one.pub, /k/two.pub",
        env_name("swarm.enable_dht"): "false",
        "BLOOMSWARM_AGENT_CONFIG": "/ignored/here.toml",
        "BLOOMSWARM_SIGNING_KEY": "/not/ours",  # another component's variable
    }
    overrides = {"watch.poll_interval_s": 0.25, "s3.region": None, "transfer": "direct"}
    config = load_config(_write(tmp_path, BASIC), environ=environ, overrides=overrides)
    assert config.watch.poll_interval_s == 0.25
    assert config.s3 is not None and config.s3.prefix == "fleet-b" and config.s3.region is None
    assert config.install.keep_versions == 3
    assert config.public_keys == (Path("/k/one.pub"), Path("/k/two.pub"))
    assert config.swarm.enable_dht is False and config.transfer == "direct"


def test_cdn_origin_without_s3(tmp_path: Path) -> None:
    config = load_config(None, environ={
        env_name("data_dir"): str(tmp_path),
        env_name("public_keys"): "/k.pub",
        env_name("origin.cdn_base_url"): "https://cdn.example.com/fleet-a",
    })
    assert config.s3 is None and config.origin.cdn_base_url == "https://cdn.example.com/fleet-a"


HEAD = 'data_dir = "/d"\npublic_keys = ["/k.pub"]\n'
S3 = '[s3]\nbucket = "bucket-a"\n'


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (HEAD + "bogus = 1\n" + S3, "unknown setting 'bogus'"),
        (HEAD + S3 + "[watch]\npoll_every = 3\n", "unknown setting 'watch.poll_every'"),
        (HEAD + S3 + "[swarm]\nnot_a_setting = 3\n", "swarm.not_a_setting"),
        (HEAD + S3 + '[watch]\npoll_interval_s = "fast"\n', "watch.poll_interval_s must be a number"),
        (HEAD + S3 + "[install]\nkeep_versions = 0\n", "keep_versions must be at least 1"),
        (HEAD + 'transfer = "carrier-pigeon"\n' + S3, "transfer must be one of swarm, direct"),
        (HEAD + "watch = 3\n" + S3, "watch must be a table"),
        (HEAD + '[s3]\nprefix = "x"\n', "[s3] needs a bucket"),
        (HEAD + S3 + '[origin]\ncdn_base_url = "https://cdn"\n', "exactly one origin"),
        (HEAD, "exactly one origin"),
        (HEAD + S3 + '[swarm]\norigin_policy = "sometimes"\n', "origin_policy"),
        (HEAD + S3 + "[swarm]\norigin_stripes = 0\n", "swarm.origin_stripes must be at least 1"),
        (HEAD + S3 + "[swarm]\norigin_stripes_per_agent_up_to = -1\n",
         "swarm.origin_stripes_per_agent_up_to must not be negative"),
        (HEAD + '[s3]\nbucket = "Not_A_Bucket"\n', "invalid S3 bucket name"),
        ("this is not toml", "not valid TOML"),
    ],
)
def test_bad_files_name_the_problem(tmp_path: Path, text: str, message: str) -> None:
    load_config(_write(tmp_path, HEAD + S3), environ={})  # the base is fine
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(_write(tmp_path, text), environ={})


def test_unknown_environment_variable_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="BLOOMSWARM_AGENT_POLL_INTERVAL"):
        load_config(_write(tmp_path, BASIC), environ={"BLOOMSWARM_AGENT_POLL_INTERVAL": "1"})
    with pytest.raises(ConfigError, match="BLOOMSWARM_AGENT_WATCH_POLL_INTERVAL_S"):
        load_config(_write(tmp_path, BASIC), environ={env_name("watch.poll_interval_s"): "soon"})


def test_missing_file_and_missing_required_settings(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.toml", environ={})
    with pytest.raises(ConfigError, match="missing setting data_dir"):
        load_config(None, environ={env_name("public_keys"): "/k.pub"})
    with pytest.raises(ConfigError, match="missing setting public_keys"):
        load_config(None, environ={env_name("data_dir"): "/d"})


def test_every_setting_has_an_environment_name_and_is_documented() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "agent.md").read_text()
    for name in SETTINGS:
        assert env_name(name).startswith("BLOOMSWARM_AGENT_")
        assert f"`{name}`" in doc and env_name(name) in doc, name


def test_dataclasses_check_their_values() -> None:
    with pytest.raises(ConfigError):
        OriginConfig(cdn_base_url="ftp://x")
    with pytest.raises(ConfigError):
        WatchConfig(retry_initial_s=10, retry_max_s=1)
    with pytest.raises(ConfigError, match="public_keys"):
        AgentConfig(data_dir=Path("/d"), public_keys=(), origin=OriginConfig(cdn_base_url="http://c"))


# --- [swarm]: the same loader as every other table ------------------------------------------


def test_swarm_nan_in_the_file_is_refused(tmp_path: Path) -> None:
    text = HEAD + S3 + "[swarm]\norigin_grace_s = nan\n"
    with pytest.raises(ConfigError, match=re.escape("swarm.origin_grace_s must be a finite number, got nan")):
        load_config(_write(tmp_path, text), environ={})


@pytest.mark.parametrize(
    ("swarm", "message"),
    [
        ("origin_starved_s = inf", "swarm.origin_starved_s must be a finite number, got inf"),
        ("origin_max_delay_s = -inf", "swarm.origin_max_delay_s must be a finite number, got -inf"),
        ('enable_dht = "yes"', "swarm.enable_dht must be true or false, got 'yes'"),
        ('allow_private_origin = "true"', "swarm.allow_private_origin must be true or false, got 'true'"),
        ("enable_lsd = 1", "swarm.enable_lsd must be true or false, got 1"),
        ('upload_rate_limit = "1048576"', "swarm.upload_rate_limit must be an integer, got '1048576'"),
        ("upload_rate_limit = true", "swarm.upload_rate_limit must be an integer, got True"),
        ("upload_rate_limit = -1", "swarm.upload_rate_limit must be 0 (unlimited) or positive"),
        ('origin_grace_s = "5"', "swarm.origin_grace_s must be a number, got '5'"),
        ('origin_policy = "sometimes"', "swarm.origin_policy must be one of fallback, always"),
        ("trackers = [1]", "swarm.trackers must be a string, got [1]"),
        ('dht_bootstrap_nodes = ["nohost"]', "swarm.dht_bootstrap_nodes: 'nohost' is not host:port"),
        ("origin_request_bytes = 1000", "swarm.origin_request_bytes must be at least 16384"),
        ("listen_interfaces = 6881", "swarm.listen_interfaces must be a string, got 6881"),
    ],
)
def test_bad_swarm_values_in_the_file_are_refused_by_name(tmp_path: Path, swarm: str, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(_write(tmp_path, HEAD + S3 + f"[swarm]\n{swarm}\n"), environ={})


def test_swarm_table_takes_toml_values(tmp_path: Path) -> None:
    text = HEAD + S3 + (
        "[swarm]\n"
        'trackers = ["http://a/announce", "http://b/announce"]\n'
        'dht_bootstrap_nodes = ["10.0.0.1:6881"]\n'
        "enable_dht = false\n"
        "upload_rate_limit = 1048576\n"
        "origin_grace_s = 3\n"  # an int where a float belongs
        'origin_policy = "always"\n'
    )
    config = load_config(_write(tmp_path, text), environ={}).swarm
    assert config.trackers == ("http://a/announce", "http://b/announce")
    assert config.dht_bootstrap_nodes == ("10.0.0.1:6881",)
    assert config.enable_dht is False and config.upload_rate_limit == 1048576
    assert config.origin_grace_s == 3.0 and isinstance(config.origin_grace_s, float)
    assert config.origin_policy == "always"


def test_swarm_table_takes_environment_strings(tmp_path: Path) -> None:
    environ = {
        env_name("swarm.trackers"): "http://a/announce, http://b/announce",
        env_name("swarm.dht_bootstrap_nodes"): "10.0.0.1:6881,10.0.0.2:6881",
        env_name("swarm.enable_dht"): "false",
        env_name("swarm.enable_lsd"): "TRUE",
        env_name("swarm.upload_rate_limit"): "1048576",
        env_name("swarm.origin_grace_s"): "3",
        env_name("swarm.origin_policy"): "always",
        env_name("swarm.listen_interfaces"): "127.0.0.1:0",
    }
    config = load_config(_write(tmp_path, BASIC), environ=environ).swarm
    assert config.trackers == ("http://a/announce", "http://b/announce")
    assert config.dht_bootstrap_nodes == ("10.0.0.1:6881", "10.0.0.2:6881")
    assert config.enable_dht is False and config.enable_lsd is True
    assert config.upload_rate_limit == 1048576 and config.origin_grace_s == 3.0
    assert config.origin_policy == "always" and config.listen_interfaces == "127.0.0.1:0"


@pytest.mark.parametrize(
    ("setting", "text", "message"),
    [
        ("swarm.origin_grace_s", "nan", "swarm.origin_grace_s must be a finite number, got nan"),
        ("swarm.origin_starved_s", "inf", "swarm.origin_starved_s must be a finite number, got inf"),
        ("swarm.origin_retry_s", "-inf", "swarm.origin_retry_s must be a finite number, got -inf"),
        ("swarm.enable_dht", "maybe", "swarm.enable_dht must be true or false, got 'maybe'"),
        ("swarm.connections_limit", "many", "swarm.connections_limit must be an integer, got 'many'"),
        ("swarm.origin_policy", "sometimes", "swarm.origin_policy must be one of fallback, always"),
    ],
)
def test_bad_swarm_environment_values_name_the_variable(
    tmp_path: Path, setting: str, text: str, message: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"{env_name(setting)}: {message}")):
        load_config(_write(tmp_path, BASIC), environ={env_name(setting): text})


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("swarm.origin_grace_s", float("nan"), "swarm.origin_grace_s must be a finite number, got nan"),
        ("watch.poll_interval_s", float("inf"), "watch.poll_interval_s must be a finite number, got inf"),
        ("swarm.enable_dht", "yes", "swarm.enable_dht must be true or false, got 'yes'"),
    ],
)
def test_bad_overrides_are_refused_by_name(tmp_path: Path, setting: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(f"command line: {message}")):
        load_config(_write(tmp_path, BASIC), environ={}, overrides={setting: value})


def test_swarm_config_checks_a_table_like_the_file() -> None:
    config = swarm_config({"trackers": ["http://a/announce"], "enable_dht": False, "origin_grace_s": 1})
    assert config == SwarmConfig(trackers=("http://a/announce",), enable_dht=False, origin_grace_s=1.0)
    assert swarm_config({}) == SwarmConfig()
    with pytest.raises(ConfigError, match=re.escape("spec: swarm.origin_grace_s must be a finite number")):
        swarm_config({"origin_grace_s": float("nan")}, where="spec")
    with pytest.raises(ConfigError, match=re.escape("[swarm]: unknown setting 'swarm.turbo'")):
        swarm_config({"turbo": True})
    with pytest.raises(ConfigError, match=re.escape("swarm.enable_dht must be true or false")):
        swarm_config({"enable_dht": "yes"})


def test_swarm_config_has_no_coercion_of_its_own() -> None:
    assert not hasattr(SwarmConfig, "from_mapping")
