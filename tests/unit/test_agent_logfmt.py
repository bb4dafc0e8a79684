"""Structured log lines parse back into their fields."""

from __future__ import annotations

import logging
import shlex
from pathlib import Path

import pytest

from bloomswarm.agent.logfmt import log_event, logfmt


def test_fields_in_order_with_quoting_and_parse_back() -> None:
    line = logfmt("swapped", version=3, latency_s=1.23456, path=Path("/a b/c"), error='say "x"',
                  pinned=False, skipped=None, empty="")
    assert line.startswith("event=swapped version=3 latency_s=1.235 ")
    fields = dict(part.split("=", 1) for part in shlex.split(line))
    assert fields == {"event": "swapped", "version": "3", "latency_s": "1.235",
                      "path": "/a b/c", "error": 'say "x"', "pinned": "false", "empty": ""}


def test_log_event_logs_one_line(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("bloomswarm.test.logfmt")
    with caplog.at_level(logging.INFO, logger=logger.name):
        log_event(logger, logging.INFO, "started", data_dir="/x", error="two\nlines")
    assert caplog.records[0].getMessage() == 'event=started data_dir=/x error="two\\nlines"'
