"""An agent as a separate process (``python -m bloomswarm agent run``) on loopback.

:class:`AgentProcess` writes the agent's TOML config, starts it, reads its /status and
/metrics, and stops it by PID: SIGTERM (graceful), or SIGKILL to simulate a crash.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bloomswarm.common.storage import S3Config
from bloomswarm.sandbox.processes import free_port, stop_process


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))


class AgentProcess:
    """One agent process with its own data directory and status port on 127.0.0.1, on the
    agent's default settings but for the bucket, the status port and ``tables`` (config
    tables by name; ``""`` holds top-level settings such as ``resume_save_interval_s``)."""

    def __init__(
        self,
        root: Path,
        s3: S3Config,
        public_key: Path,
        *,
        tables: dict[str, dict[str, object]] | None = None,
        transfer: str = "direct",
        filters: Sequence[str] = (),
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.data_dir = root / "data"
        self.port = free_port()
        self.log_path = root / "agent.log"
        top_level: dict[str, object] = {"data_dir": self.data_dir, "public_keys": [public_key],
                                         "transfer": transfer}
        settings: dict[str, dict[str, object]] = {
            "s3": {"bucket": s3.bucket, "prefix": s3.prefix, "region": s3.region or "us-east-1"},
            "status": {"port": self.port},
        }
        if s3.endpoint_url:
            settings["s3"]["endpoint_url"] = s3.endpoint_url
        for table, values in (tables or {}).items():
            (top_level if table == "" else settings.setdefault(table, {})).update(values)
        lines = [f"{key} = {_toml(value)}" for key, value in top_level.items()] + [""]
        for table, values in settings.items():
            lines.append(f"[{table}]")
            lines.extend(f"{key} = {_toml(value)}" for key, value in values.items())
            lines.append("")
        for name in filters:  # named filters: one [[filters]] table each, their default prefix
            lines.extend(["[[filters]]", f"name = {_toml(name)}", ""])
        self.config_path = root / "agent.toml"
        self.config_path.write_text("\n".join(lines))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> AgentProcess:
        """Start the process (returns at once; use :meth:`wait_for`)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("BLOOMSWARM_AGENT_")}
        env["PYTHONUNBUFFERED"] = "1"
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bloomswarm", "agent", "run", "--config", str(self.config_path)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
            )
        return self

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20.0) -> int:
        """Send ``sig`` to the process by PID and wait for it; kill it after ``timeout``."""
        process, self.process = self.process, None
        if process is None:
            return 0
        if not stop_process(process, sig=sig, timeout_s=timeout):
            raise AssertionError(f"agent did not stop on {sig}; log:\n{self.log()}")
        return int(process.returncode)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def get(self, path: str) -> tuple[int, bytes]:
        """GET ``path`` of the status endpoint: the HTTP status code and the body."""
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            with exc:
                return exc.code, exc.read()

    def http_status(self, path: str) -> int:
        """The HTTP status code of GET ``path`` (e.g. /readyz)."""
        return self.get(path)[0]

    def status(self) -> dict[str, Any]:
        """The agent's /status JSON."""
        code, body = self.get("/status")
        assert code == 200, body
        result: dict[str, Any] = json.loads(body)
        return result

    def metric(self, name: str, **labels: str) -> float:
        """One sample of /metrics (0 when absent)."""
        key = f"bloomswarm_agent_{name}"
        if labels:
            key += "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"
        return float(self.status()["metrics"].get(key, 0.0))

    def wait_for(self, what: str, condition: Callable[[AgentProcess], bool], limit_s: float = 60.0) -> None:
        """Poll until ``condition(self)`` holds; AssertionError with the log after ``limit_s``
        (a safety bound, not a timing assertion) or when the process exits."""
        deadline = time.monotonic() + limit_s
        while True:
            if self.process is not None and self.process.poll() is not None:
                code = self.process.returncode
                raise AssertionError(f"agent exited ({code}) waiting for {what}:\n{self.log()}")
            try:
                if condition(self):
                    return
            except (OSError, urllib.error.URLError):
                pass  # not listening yet
            if time.monotonic() > deadline:
                raise AssertionError(f"agent never reached: {what}\n{self.log()[-4000:]}")
            time.sleep(0.1)

    def current_version(self) -> int | None:
        """The installed version, or None (also before the agent's first status report)."""
        value: int | None = self.status().get("current_version")
        return value
