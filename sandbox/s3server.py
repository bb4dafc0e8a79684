"""Run moto's S3 server as a child process on a free loopback port.

Real HTTP, real boto3 client: the demo, the benchmarks and the functional tests talk to
it exactly as to S3. Needs ``moto[server]`` (the ``demo`` or ``dev`` extra). The server
is stopped by its own PID, never by name.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bloomswarm.sandbox.processes import Service, free_port, stop_process, wait_for_http

FAKE_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""Environment for boto3 clients talking to moto (moto accepts any credentials)."""


class MotoServer(Service):
    """moto's S3 server (``python -m moto.server``) as a child process on 127.0.0.1.

    ``start()`` returns once the server answers HTTP; ``stop()`` terminates it (then
    kills it if it does not exit) by PID. Usable as a context manager.
    """

    def __init__(self, host: str = "127.0.0.1", port: int | None = None) -> None:
        self.host = host
        self.port = port
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def endpoint(self) -> str:
        """The server's base URL, e.g. "http://127.0.0.1:41234"."""
        if self.port is None or self._process is None:
            raise RuntimeError("MotoServer is not running")
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The server process id while it runs."""
        return self._process.pid if self._process is not None else None

    def start(self, timeout_s: float = 30.0, attempts: int = 3) -> str:
        """Start the server and wait until it answers; return its endpoint URL."""
        if self._process is not None:
            return self.endpoint
        fixed_port = self.port is not None
        last_error = "not started"
        for _ in range(attempts):
            port = self.port if fixed_port and self.port is not None else free_port(self.host)
            fd, log_name = tempfile.mkstemp(prefix="moto-s3-", suffix=".log")
            self._log = Path(log_name)
            with os.fdopen(fd, "wb") as log:
                process = subprocess.Popen(  # the log stays open in the child
                    [sys.executable, "-m", "moto.server", "-H", self.host, "-p", str(port)],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env={**os.environ, "PYTHONUNBUFFERED": "1"},
                )
            self._process, self.port = process, port
            if wait_for_http(self.host, port, process=process, timeout_s=timeout_s):
                return self.endpoint
            last_error = self._log.read_text(errors="replace")[-2000:]
            self.stop()
            if fixed_port:
                break
        raise RuntimeError(f"moto S3 server did not start: {last_error}")

    def stop(self, timeout_s: float = 10.0) -> None:
        """Terminate the server process (kill it after ``timeout_s``) and remove its log."""
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, timeout_s=timeout_s)
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.unlink()
            self._log = None
