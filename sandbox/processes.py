"""Child processes and loopback ports for the sandbox's servers and agents.

Every child is stopped by its own PID (``Popen.send_signal`` / ``kill``), never by name.
:class:`Service` gives a helper with ``start()`` / ``stop()`` the context-manager protocol.
"""

from __future__ import annotations

import contextlib
import http.client
import signal
import socket
import subprocess
import time
from types import TracebackType
from typing import Any, TypeVar

_HANDED_OUT: set[int] = set()
"""Ports :func:`free_port` returned in this process: never returned twice, since the
process it was for may not have bound it yet (16 agents' ports picked in a row drew the
same port twice: one agent failed to start, and the other answered its health check)."""


def free_port(host: str = "127.0.0.1", *, udp: bool = False) -> int:
    """A TCP port that was free a moment ago on ``host`` and that this process has not
    handed out before; with ``udp``, free for UDP too (RuntimeError when none is found
    after 50 tries)."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as tcp:
            tcp.bind((host, 0))
            port = int(tcp.getsockname()[1])
            if port in _HANDED_OUT:
                continue
            if udp:
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as datagram:
                    try:
                        datagram.bind((host, port))
                    except OSError:
                        continue
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError("no free TCP+UDP port")


def wait_for_http(
    host: str,
    port: int,
    *,
    path: str = "/",
    process: subprocess.Popen[Any] | None = None,
    timeout_s: float = 30.0,
    interval_s: float = 0.1,
) -> bool:
    """Poll ``GET path`` on ``host:port`` until the server answers (any status below 500):
    True then; False after ``timeout_s``, or as soon as ``process`` (the server) exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            return False
        with contextlib.suppress(OSError, http.client.HTTPException):
            conn = http.client.HTTPConnection(host, port, timeout=1.0)
            try:
                conn.request("GET", path)
                response = conn.getresponse()
                response.read()
                if response.status < 500:
                    return True
            finally:
                conn.close()
        time.sleep(interval_s)
    return False


def stop_process(
    process: subprocess.Popen[Any], *, sig: int | None = signal.SIGTERM, timeout_s: float = 10.0
) -> bool:
    """Stop ``process`` by its PID: send ``sig`` (None: it was already told to exit, e.g.
    its stdin closed), wait up to ``timeout_s``, then SIGKILL it and wait again.

    True when it exited by itself (or had already), False when it had to be killed.
    """
    if process.poll() is not None:
        return True
    if sig is not None:
        process.send_signal(sig)
    try:
        process.wait(timeout=timeout_s)
        return True
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)
        return False


_S = TypeVar("_S", bound="Service")


class Service:
    """A helper that runs something (a process, a server thread) between ``start()`` and
    ``stop()``; ``with helper:`` starts it and stops it on the way out."""

    def start(self) -> object:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self: _S) -> _S:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
