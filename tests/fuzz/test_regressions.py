"""Regression tests for the bugs fuzzing found, one per bug, stated as the contract it broke."""

from __future__ import annotations

from pathlib import Path

import pytest

from bloomswarm.agent.config import load_config as load_agent_config
from bloomswarm.common.errors import ConfigError
from bloomswarm.publisher.config import load_config as load_publisher_config


@pytest.mark.parametrize("load", [load_agent_config, load_publisher_config])
def test_config_file_that_is_not_utf8_is_a_config_error(tmp_path: Path, load: object) -> None:
    """tomllib decodes the whole file before parsing and raised UnicodeDecodeError."""
    path = tmp_path / "bad.toml"
    path.write_bytes(b'data_dir = "/var/lib/\xa2"\n')
    with pytest.raises(ConfigError, match=r"bad.toml is not UTF-8: invalid start byte at byte 21"):
        load(path)  # type: ignore[operator]


def test_a_path_under_an_unknown_users_home_is_a_config_error(tmp_path: Path) -> None:
    """Path.expanduser raised RuntimeError for "~nosuchuser/..." (found by fuzzing)."""
    environ = {"BLOOMSWARM_AGENT_DATA_DIR": "~no-such-user-here/data",
               "BLOOMSWARM_AGENT_PUBLIC_KEYS": "/a.pub", "BLOOMSWARM_AGENT_S3_BUCKET": "filters"}
    with pytest.raises(ConfigError, match="DATA_DIR: data_dir starts with ~ but names no known home"):
        load_agent_config(None, environ=environ)
