"""Network namespaces the functional tests make for themselves (LSD's multicast, the
allow-list's second address): created with ``ip netns add``, set up, deleted afterwards.
Nothing a test sends there leaves the namespace."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence

import pytest


def ip(*args: str) -> None:
    """Run ``ip ARGS``; AssertionError with its stderr when it fails."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=False)
    if result.returncode != 0:
        raise AssertionError(f"ip {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")


@contextlib.contextmanager
def network_namespace(prefix: str, setup: Sequence[Sequence[str]]) -> Iterator[str]:
    """A fresh namespace named ``prefix-XXXXXXXX``, its loopback up, then each ``setup``
    command run as ``ip -n NAME ...``; deleted on exit. Skips the test without root or
    iproute2."""
    if os.geteuid() != 0:
        pytest.skip("creating a network namespace needs root")
    if shutil.which("ip") is None:
        pytest.skip("iproute2's ip is not installed (apt-get install iproute2)")
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    ip("netns", "add", name)
    try:
        ip("-n", name, "link", "set", "lo", "up")
        for command in setup:
            ip("-n", name, *command)
        yield name
    finally:
        ip("netns", "delete", name)
