"""A pytest fixture for Debian's opentracker (:class:`bloomswarm.sandbox.tracker.OpenTracker`).

Use the fixture from a test module with::

    from tests.functional.tracker import opentracker  # noqa: F401  (pytest fixture)
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from bloomswarm.sandbox.tracker import WHITELIST, OpenTracker

__all__ = ["WHITELIST", "OpenTracker", "opentracker"]


@pytest.fixture
def opentracker() -> Iterator[OpenTracker]:
    """A running opentracker on 127.0.0.1 (skips when the binary is not installed)."""
    if shutil.which("opentracker") is None:
        pytest.skip("opentracker is not installed (apt-get install opentracker; "
                    "scripts/test.sh installs it)")
    tracker = OpenTracker().start()
    try:
        yield tracker
    finally:
        tracker.stop()
