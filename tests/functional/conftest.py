"""Fixtures for functional tests: real servers on 127.0.0.1 (moto S3, opentracker)."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bloomswarm.common.storage import S3Config
from bloomswarm.sandbox.s3server import FAKE_CREDENTIALS, MotoServer
from bloomswarm.sandbox.tracker import OpenTracker
from tests.functional.live_reader import LiveReader

_LOOPBACK = "127.0.0.1,localhost"


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """Start moto's S3 server once per session; yield its endpoint URL.

    Sets fake AWS credentials and keeps loopback traffic away from any HTTP proxy for
    the session; the previous environment is restored afterwards.
    """
    with pytest.MonkeyPatch.context() as mp:
        for name, value in FAKE_CREDENTIALS.items():
            mp.setenv(name, value)
        for name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
            mp.delenv(name, raising=False)
        mp.setenv("AWS_CONFIG_FILE", "/dev/null")
        mp.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        mp.setenv("AWS_EC2_METADATA_DISABLED", "true")
        for name in ("NO_PROXY", "no_proxy"):
            mp.setenv(name, _LOOPBACK)
        server = MotoServer()
        server.start()
        try:
            yield server.endpoint
        finally:
            server.stop()


@pytest.fixture
def s3_bucket(s3_server: str) -> Iterator[S3Config]:
    """A fresh, uniquely named bucket on the moto server; yields its S3Config."""
    import boto3

    name = f"bsw-test-{uuid.uuid4().hex[:16]}"
    client = boto3.client("s3", endpoint_url=s3_server, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    yield S3Config(
        bucket=name,
        prefix="fleet-a",
        endpoint_url=s3_server,
        region="us-east-1",
        connect_timeout_s=2.0,
        read_timeout_s=30.0,
    )


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


@pytest.fixture
def live_reader() -> Iterator[Callable[[Path], LiveReader]]:
    """Starts a LiveFilter process on a data directory; every one is stopped (by PID)
    when the test ends."""
    readers: list[LiveReader] = []

    def start(data_dir: Path) -> LiveReader:
        readers.append(LiveReader(data_dir))
        return readers[-1]

    yield start
    for reader in readers:
        reader.stop()
