"""Bounds of the agent's settings, checked when the configuration is loaded.

Values that used to pass the check and then fail on every poll (or at the start) are
refused with one ConfigError line: base URLs that cannot have ``/latest.json`` appended
(no host, bad port, a query, credentials, spaces), timeouts and intervals that overflow a
socket or a timer (a day at most; presigned URLs 7 days, S3's limit), and integers that
libtorrent would silently wrap to 32 bits. Every bound is tested from both sides: the
value at the limit loads, the next one is refused.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from bloomswarm.agent.config import (
    AgentConfig,
    OriginConfig,
    SwarmConfig,
    WatchConfig,
    env_name,
    load_config,
)
from bloomswarm.agent.session_settings import check_fits_libtorrent, session_settings
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.storage import S3Config
from bloomswarm.main import main

HEAD = 'data_dir = "/d"\npublic_keys = ["/k.pub"]\n'
S3 = '[s3]\nbucket = "bucket-a"\n'
CDN = '[origin]\ncdn_base_url = "http://127.0.0.1:1/x"\n'
INT32_MAX = 2**31 - 1
DAY = 86_400


def _load(tmp_path: Path, text: str) -> AgentConfig:
    path = tmp_path / "agent.toml"
    path.write_text(text, encoding="utf-8")
    return load_config(path, environ={})


def _toml(text: str) -> str:
    """A TOML basic string holding ``text``."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t") + '"'


def _refused(tmp_path: Path, text: str, message: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, text)
    error = str(caught.value)
    assert message in error and "\n" not in error
    return error


# --- URLs ------------------------------------------------------------------------------------

BAD_URLS = [
    ("http://", "origin.cdn_base_url must name a host"),
    ("https:///fleet", "origin.cdn_base_url must name a host"),
    ("http://h\\x/", "origin.cdn_base_url must name a host"),
    ("http://127.0.0.1:99999/x", "origin.cdn_base_url is not a valid URL (Port out of range 0-65535)"),
    ("http://127.0.0.1:0/x", "origin.cdn_base_url port must be in 1..65535"),
    ("http://cdn:http/x", "origin.cdn_base_url is not a valid URL (Port could not be cast"),
    ("http://[::1/x", "origin.cdn_base_url is not a valid URL (Invalid IPv6 URL)"),
    ("http://[::1]x/", "origin.cdn_base_url must be http(s)://HOST[:PORT][/PATH]"),
    ("http://[v1.fe]/x", "origin.cdn_base_url has an invalid IPv6 address"),
    ("http://127.0.0.1:1/x?a=b", "origin.cdn_base_url must have no query or fragment"),
    ("http://127.0.0.1:1/x?", "origin.cdn_base_url must have no query or fragment"),
    ("http://127.0.0.1:1/x#top", "origin.cdn_base_url must have no query or fragment"),
    ("http://127.0.0.1:1/a b", "origin.cdn_base_url must not contain ' ' (only printable ASCII"),
    ("http://127.0.0.1:1/a\tb", "origin.cdn_base_url must not contain '\\t'"),
    ("http://127.0.0.1:1/x ", "origin.cdn_base_url must not contain ' '"),
    ("http://127.0.0.1:1/caf\u00e9", "origin.cdn_base_url must not contain '\u00e9'"),
]


@pytest.mark.parametrize(("url", "message"), BAD_URLS, ids=[u for u, _ in BAD_URLS])
def test_a_bad_cdn_base_url_is_refused_at_load(tmp_path: Path, url: str, message: str) -> None:
    _refused(tmp_path, HEAD + f"[origin]\ncdn_base_url = {_toml(url)}\n", message)


CREDENTIALS = ["http://user:secret@127.0.0.1:1/x", "https://user@cdn.example.com/x",
               "http://user:secret@[::1]:8080/x", "ftp://user:secret@cdn.example.com/",
               "user:secret@cdn.example.com/x", "http://user:secret@cdn/a b?q#f"]


@pytest.mark.parametrize("url", CREDENTIALS)
def test_credentials_in_the_cdn_url_are_refused_without_echoing_them(tmp_path: Path, url: str) -> None:
    error = _refused(tmp_path, HEAD + f"[origin]\ncdn_base_url = {_toml(url)}\n",
                     "origin.cdn_base_url must not hold credentials (user:password@): "
                     "credentials do not belong in the URL")
    assert "secret" not in error and "user" not in error.replace("(user:password@)", "")


# (accepted, the refused neighbour): both sides of each rule.
URL_PAIRS = [
    ("http://c", "http://"),
    ("https://cdn.example.com/fleet-a", "https://cdn.example.com/fleet-a?v=1"),
    ("https://cdn.example.com/fleet-a/", "https://cdn.example.com/fleet-a/#v1"),
    ("http://127.0.0.1:65535/x", "http://127.0.0.1:65536/x"),
    ("http://127.0.0.1:1/x", "http://127.0.0.1:0/x"),
    ("http://cdn.example.com:/x", "http://cdn.example.com:x/x"),
    ("http://[::1]:8080/x", "http://[::1:8080/x"),
    ("http://127.0.0.1:1/a%20b", "http://127.0.0.1:1/a b"),
    ("https://cdn.example.com./a/b_c~d-e", "https://cdn.example.com./a/b_c~d e"),
    ("https://cdn.example.com/x@y", "https://x@cdn.example.com/y"),
]


@pytest.mark.parametrize(("good", "bad"), URL_PAIRS, ids=[g for g, _ in URL_PAIRS])
def test_cdn_base_url_boundaries(tmp_path: Path, good: str, bad: str) -> None:
    config = _load(tmp_path, HEAD + f"[origin]\ncdn_base_url = {_toml(good)}\n")
    assert config.origin.cdn_base_url == good
    _refused(tmp_path, HEAD + f"[origin]\ncdn_base_url = {_toml(bad)}\n", "origin.cdn_base_url ")


def test_a_bad_cdn_base_url_from_the_environment_or_a_flag_is_refused(tmp_path: Path) -> None:
    environ = {env_name("data_dir"): "/d", env_name("public_keys"): "/k.pub",
               env_name("origin.cdn_base_url"): "http://127.0.0.1:1/x?a=b"}
    with pytest.raises(ConfigError, match=re.escape("origin.cdn_base_url must have no query or fragment")):
        load_config(None, environ=environ)
    environ[env_name("origin.cdn_base_url")] = "http://127.0.0.1:1/x"
    with pytest.raises(ConfigError, match=re.escape("must not hold credentials")):
        load_config(None, environ=environ, overrides={"origin.cdn_base_url": "http://u:p@127.0.0.1:1/x"})


@pytest.mark.parametrize("key", ["endpoint_url", "public_base_url"])
@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("http://127.0.0.1:9000", "http://127.0.0.1:99999", "is not a valid URL (Port out of range"),
        ("http://minio:9000", "http://minio:9000/?x=1", "must have no query or fragment"),
        ("https://s3.example.com/", "https://s3.example .com/", "must not contain ' '"),
        ("http://[::1]:9000", "http://[::1:9000", "is not a valid URL (Invalid IPv6 URL)"),
        ("https://s3.example.com", "https://key:secret@s3.example.com", "must not hold credentials"),
        ("http://minio:9000", "minio:9000", "must be http(s)://"),
        ("http://minio:9000", "http://:9000", "must name a host"),
    ],
)
def test_s3_urls_are_checked_like_the_cdn_url(tmp_path: Path, key: str, good: str, bad: str,
                                              message: str) -> None:
    config = _load(tmp_path, HEAD + S3 + f"{key} = {_toml(good)}\n")
    assert getattr(config.s3, key) == good
    error = _refused(tmp_path, HEAD + S3 + f"{key} = {_toml(bad)}\n", f"S3 {key} {message}")
    assert "secret" not in error


def test_s3_credentials_point_to_the_aws_chain() -> None:
    with pytest.raises(ConfigError, match=re.escape("they come from the AWS credential chain") + "$"):
        S3Config(bucket="bucket-a", endpoint_url="http://AKIA:secret@127.0.0.1:9000")


# --- durations and timeouts --------------------------------------------------------------------

# (setting, the file's tables up to the setting's own, opened last; the limit): the limit
# loads, just above it is refused.
DURATIONS = [
    ("origin.http_timeout_s", CDN, DAY),
    ("origin.presign_expiry_s", S3 + "[origin]\n", 604_800),
    ("s3.connect_timeout_s", S3, DAY),
    ("s3.read_timeout_s", S3, DAY),
    ("watch.poll_interval_s", CDN + "[watch]\n", DAY),
    ("watch.poll_jitter_s", CDN + "[watch]\n", DAY),
    ("watch.retry_max_s", CDN + "[watch]\n", DAY),
    ("watch.max_pointer_age_s", CDN + "[watch]\n", 365 * DAY),
    ("install.delta_stall_s", CDN + "[install]\n", DAY),
    ("direct.timeout_s", CDN + "[direct]\n", DAY),
    *[(f"swarm.{name}", CDN + "[swarm]\n", DAY) for name in (
        "origin_grace_s", "origin_stagger_s", "origin_max_delay_s", "origin_starved_s",
        "origin_retry_s", "origin_url_refresh_s", "peer_rediscovery_s")],
]


def _setting_text(setting: str, prefix: str, value: object) -> str:
    return HEAD + prefix + f"{setting.split('.', 1)[1]} = {value}\n"


@pytest.mark.parametrize(("setting", "prefix", "limit"), DURATIONS, ids=[d[0] for d in DURATIONS])
def test_durations_have_an_upper_bound(tmp_path: Path, setting: str, prefix: str, limit: int) -> None:
    table, key = setting.split(".", 1)
    config = _load(tmp_path, _setting_text(setting, prefix, limit))
    assert getattr(getattr(config, table), key) == limit
    over = limit + 1 if setting == "origin.presign_expiry_s" else limit + 0.5
    why = "7 days, S3's limit" if setting == "origin.presign_expiry_s" else (
        "1 year" if key == "max_pointer_age_s" else "1 day")
    label = f"S3 {key}" if table == "s3" else setting
    _refused(tmp_path, _setting_text(setting, prefix, over),
             f"{label} must be at most {limit} ({why}), got {over!r}")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # The reviewer's cases: each failed on every poll, or stopped the agent as a bug.
        (HEAD + CDN.rstrip() + "\nhttp_timeout_s = 1e10\n",
         "origin.http_timeout_s must be at most 86400 (1 day), got 10000000000.0"),
        (HEAD + S3 + 'endpoint_url = "http://127.0.0.1:1"\nread_timeout_s = 1e300\n',
         "S3 read_timeout_s must be at most 86400 (1 day), got 1e+300"),
        (HEAD + S3 + "[origin]\npresign_expiry_s = 100000000000000000000\n",
         "origin.presign_expiry_s must be at most 604800 (7 days, S3's limit), got 100000000000000000000"),
        (HEAD + CDN + "[swarm]\norigin_retry_s = 1e300\n",
         "swarm.origin_retry_s must be at most 86400 (1 day), got 1e+300"),
        (HEAD + CDN + "[watch]\nretry_initial_s = 1e300\nretry_max_s = 1e308\n",
         "watch.retry_initial_s must be at most 86400 (1 day), got 1e+300"),
        (HEAD + 'resume_save_interval_s = 1e300\n' + CDN,
         "resume_save_interval_s must be at most 86400 (1 day), got 1e+300"),
    ],
)
def test_huge_durations_are_refused_at_load(tmp_path: Path, text: str, message: str) -> None:
    _refused(tmp_path, text, message)


def test_resume_save_interval_boundary(tmp_path: Path) -> None:
    assert _load(tmp_path, HEAD + f"resume_save_interval_s = {DAY}\n" + CDN)
    _refused(tmp_path, HEAD + f"resume_save_interval_s = {DAY + 1}\n" + CDN,
             "resume_save_interval_s must be at most 86400 (1 day), got 86401")


def test_nan_is_refused_by_the_dataclasses_too() -> None:
    """The loader refuses nan; a dataclass built in code (a test, a benchmark) must too,
    since nan passes every ``< 0`` and ``<= 0`` check."""
    nan = float("nan")
    with pytest.raises(ConfigError, match=re.escape("origin.http_timeout_s must be a finite number")):
        OriginConfig(cdn_base_url="http://c", http_timeout_s=nan)
    with pytest.raises(ConfigError, match=re.escape("watch.poll_jitter_s must be a finite number, got nan")):
        WatchConfig(poll_jitter_s=nan)
    with pytest.raises(ConfigError, match=re.escape("swarm.origin_retry_s must be a finite number, got nan")):
        SwarmConfig(origin_retry_s=nan)
    with pytest.raises(ConfigError,
                       match=re.escape("swarm.origin_grace_s must be at most 86400 (1 day), got inf")):
        SwarmConfig(origin_grace_s=float("inf"))


# --- libtorrent's 32-bit integers --------------------------------------------------------------

# [swarm] setting -> the settings_pack key it becomes (None: the origin's peer class limit).
LIBTORRENT_INTS = {
    "upload_rate_limit": "upload_rate_limit", "download_rate_limit": "download_rate_limit",
    "origin_rate_limit": None, "origin_request_bytes": "urlseed_max_request_bytes",
    "connections_limit": "connections_limit", "unchoke_slots": "unchoke_slots_limit",
    "send_buffer_watermark": "send_buffer_watermark", "alert_queue_size": "alert_queue_size",
}


@pytest.mark.parametrize("name", LIBTORRENT_INTS)
def test_libtorrent_integers_fit_32_bits(tmp_path: Path, name: str) -> None:
    config = _load(tmp_path, HEAD + CDN + f"[swarm]\n{name} = {INT32_MAX}\n")
    assert getattr(config.swarm, name) == INT32_MAX
    key = LIBTORRENT_INTS[name]
    if key is not None:
        assert session_settings(config.swarm)[key] == INT32_MAX  # type: ignore[literal-required]
    for value in (INT32_MAX + 1, 3_000_000_000, 4_294_967_301, 5_000_000_000):
        _refused(tmp_path, HEAD + CDN + f"[swarm]\n{name} = {value}\n",
                 f"swarm.{name} must be at most 2147483647 (libtorrent takes a 32-bit int), got {value}")


def test_a_rate_limit_from_the_environment_is_bounded_too(tmp_path: Path) -> None:
    environ = {env_name("data_dir"): "/d", env_name("public_keys"): "/k.pub",
               env_name("origin.cdn_base_url"): "http://127.0.0.1:1/x",
               env_name("swarm.download_rate_limit"): "5000000000"}
    with pytest.raises(ConfigError, match=re.escape("swarm.download_rate_limit must be at most 2147483647")):
        load_config(None, environ=environ)


def test_the_settings_pack_refuses_an_integer_libtorrent_would_wrap() -> None:
    check_fits_libtorrent({"download_rate_limit": INT32_MAX, "unchoke_slots_limit": -1, "enable_dht": True})
    message = "libtorrent setting connections_limit must be within a 32-bit int"
    for value in (INT32_MAX + 1, -(2**31) - 1):
        with pytest.raises(ConfigError, match=re.escape(message)):
            check_fits_libtorrent({"connections_limit": value})


# --- the command line: one line, exit 1 ----------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ('[origin]\ncdn_base_url = "http://user:secret@127.0.0.1:1/x"\n',
         "origin.cdn_base_url must not hold credentials (user:password@): credentials do not belong "
         "in the URL, which is shown in logs and status; the origin needs none"),
        ('[origin]\ncdn_base_url = "http://127.0.0.1:1/x"\nhttp_timeout_s = 1e10\n',
         "origin.http_timeout_s must be at most 86400 (1 day), got 10000000000.0"),
        ('[origin]\ncdn_base_url = "http://127.0.0.1:1/x"\n[swarm]\ndownload_rate_limit = 5000000000\n',
         "swarm.download_rate_limit must be at most 2147483647 (libtorrent takes a 32-bit int), "
         "got 5000000000"),
    ],
    ids=["url", "duration", "libtorrent-int"],
)
def test_agent_run_with_an_out_of_bounds_config_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    extra: str, message: str,
) -> None:
    for name in [n for n in os.environ if n.startswith("BLOOMSWARM_")]:
        monkeypatch.delenv(name)
    config = tmp_path / "agent.toml"
    # A key file that does not exist: should the configuration pass, the run stops there
    # (exit 1, another message) instead of starting an agent.
    config.write_text(f'data_dir = "{tmp_path}/data"\npublic_keys = ["{tmp_path}/missing.pub"]\n'
                      'transfer = "direct"\n' + extra, encoding="utf-8")
    capsys.readouterr()
    assert main(["agent", "run", "--config", str(config)]) == 1
    err = capsys.readouterr().err
    assert err == f"bloomswarm agent: error: {message}\n"
    assert "secret" not in err
