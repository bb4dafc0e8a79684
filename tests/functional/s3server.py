"""Re-exports :mod:`bloomswarm.sandbox.s3server` for the functional tests."""

from bloomswarm.sandbox.s3server import FAKE_CREDENTIALS, MotoServer

__all__ = ["FAKE_CREDENTIALS", "MotoServer"]
