"""Debian's opentracker as a child process on 127.0.0.1.

Debian builds opentracker in whitelist mode: it answers announces only for info-hashes
listed in its whitelist file (``access.whitelist`` in its config), and re-reads the file
on SIGHUP. A hybrid v1+v2 torrent is announced under its v1 info-hash and under the
first 40 hex characters of its v2 info-hash, so :meth:`OpenTracker.allow` lists both.

The tracker runs in a private temporary directory (``-d``: as root it chroots there and
drops to ``nobody``, so the directory is world-readable and the whitelist path is
relative to it). It is stopped by its own PID, never by name.

:func:`tracker_accepts` is the one whitelist probe every test uses (the compose test
too). It percent-encodes every byte of the info-hash, as libtorrent does: ``urlencode``
sends a 0x20 byte as ``+``, which opentracker keeps as 0x2b, so it looks up another hash
and refuses it however often the whitelist is reloaded (about 7.5% of random hashes
have a 0x20 byte). That, not a lost SIGHUP, was the "missed reload" flake: opentracker
re-reads the file in a thread that waits for SIGHUP with ``sigwait``, and the signal is
blocked in every thread from start-up on, so a pending one waits for that thread.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from bloomswarm.sandbox.processes import Service, free_port, stop_process, wait_for_http

WHITELIST = "whitelist.txt"


def announce_path(info_hash_hex: str, *, peer_port: int = 9, stopped: bool = False) -> str:
    """The path of an HTTP announce of a seeding peer on ``peer_port`` for the 40-hex-digit
    ``info_hash_hex``, every byte of the hash sent as ``%XX`` (see the module doc); with
    ``stopped``, that peer's ``event=stopped``."""
    quoted = "".join(f"%{b:02x}" for b in bytes.fromhex(info_hash_hex))
    return (f"/announce?info_hash={quoted}&peer_id=-PROBE-0000000000000&port={peer_port}"
            f"&uploaded=0&downloaded=0&left=0&compact=1{'&event=stopped' if stopped else ''}")


def tracker_accepts(host: str, port: int, info_hash_hex: str) -> bool:
    """Whether the tracker on ``host:port`` accepts an announce for the hash now (False
    also when it does not answer). It announces a fake peer (port 9) and, when accepted,
    that peer's ``event=stopped`` at once, so no peer is left in the swarm. (A "stopped"
    announce alone proves nothing: opentracker answers it for any hash.)"""
    answer = _get(host, port, announce_path(info_hash_hex))
    if answer is None or b"failure reason" in answer:
        return False
    _get(host, port, announce_path(info_hash_hex, stopped=True))
    return True


def _get(host: str, port: int, path: str) -> bytes | None:
    """The body of the answer to GET ``path``; None when the server does not answer."""
    with contextlib.suppress(OSError, http.client.HTTPException):
        conn = http.client.HTTPConnection(host, port, timeout=1.0)
        try:
            conn.request("GET", path)
            return conn.getresponse().read()
        finally:
            conn.close()
    return None


class OpenTracker(Service):
    """An ``opentracker`` process on ``host`` (a free port) with an empty whitelist.

    ``announce_url`` is what torrents and agents announce to. ``allow()`` whitelists a
    torrent and returns once the tracker answers for it.
    """

    def __init__(self, host: str = "127.0.0.1", binary: str = "opentracker") -> None:
        self.host = host
        self.binary = binary
        self.port = 0
        self._dir: Path | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._hashes: list[str] = []

    @property
    def announce_url(self) -> str:
        """The HTTP announce URL, e.g. ``http://127.0.0.1:41234/announce``."""
        return f"http://{self.host}:{self.port}/announce"

    @property
    def whitelist(self) -> Path:
        """The whitelist file the tracker reads on SIGHUP (only while running): what
        :meth:`allow` writes, or ``bloomswarm tracker-sync --whitelist``."""
        if self._dir is None:
            raise RuntimeError("opentracker is not running")
        return self._dir / WHITELIST

    @property
    def pid(self) -> int:
        """The tracker's process id (only while running)."""
        if self._process is None:
            raise RuntimeError("opentracker is not running")
        return self._process.pid

    def start(self, timeout: float = 10.0, attempts: int = 3) -> OpenTracker:
        """Start the tracker and wait until it answers HTTP; RuntimeError with its output
        when it does not."""
        if self._process is not None:
            return self
        directory = Path(tempfile.mkdtemp(prefix="opentracker-"))
        directory.chmod(0o755)  # readable after it drops privileges to nobody
        (directory / "opentracker.conf").write_text(f"access.whitelist {WHITELIST}\n")
        self._write_whitelist(directory)
        self._dir = directory
        output = ""
        for _ in range(attempts):
            self.port = free_port(self.host, udp=True)
            log = directory / "opentracker.log"
            with log.open("wb") as out:
                self._process = subprocess.Popen(
                    [self.binary, "-f", "opentracker.conf", "-i", self.host,
                     "-p", str(self.port), "-P", str(self.port), "-d", str(directory)],
                    cwd=directory,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
            if wait_for_http(self.host, self.port, path="/scrape", process=self._process,
                             timeout_s=timeout, interval_s=0.05):
                return self
            output = log.read_text(errors="replace")
            self._terminate()
        self.stop()
        raise RuntimeError(f"opentracker did not start: {output[-2000:]}")

    def _write_whitelist(self, directory: Path) -> None:
        path = directory / WHITELIST
        tmp = directory / (WHITELIST + ".tmp")
        tmp.write_text("".join(f"{h}\n" for h in self._hashes))
        tmp.chmod(0o644)
        os.replace(tmp, path)

    def allow(self, info_hash_v1: str, info_hash_v2: str | None = None, timeout: float = 10.0) -> None:
        """Whitelist a torrent (its v1 hex info-hash and the first 40 hex characters of
        its v2 one), SIGHUP the tracker and wait until it accepts announces for it."""
        self.allow_all([(info_hash_v1, info_hash_v2)], timeout=timeout)

    def allow_all(self, torrents: Iterable[tuple[str, str | None]], timeout: float = 10.0) -> None:
        """Whitelist many torrents (v1, v2-or-None hex info-hashes, as :meth:`allow`) with
        one rewrite of the list and one SIGHUP, and wait until announces for each are
        accepted: a publisher of many filters makes one reload, not one per filter."""
        if self._process is None or self._dir is None:
            raise RuntimeError("opentracker is not running")
        wanted = list(torrents)
        known = set(self._hashes)
        for info_hash_v1, info_hash_v2 in wanted:
            for value in (info_hash_v1, info_hash_v2[:40] if info_hash_v2 else None):
                if value and value.lower() not in known:
                    known.add(value.lower())
                    self._hashes.append(value.lower())
        self._write_whitelist(self._dir)
        os.kill(self._process.pid, signal.SIGHUP)  # one is enough (see the module doc)
        deadline = time.monotonic() + timeout
        for info_hash_v1, _ in wanted:
            while not self.accepts(info_hash_v1):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"opentracker did not whitelist {info_hash_v1}")
                time.sleep(0.05)

    def accepts(self, info_hash_hex: str) -> bool:
        """Whether an announce for the hash is accepted now (:func:`tracker_accepts`)."""
        return tracker_accepts(self.host, self.port, info_hash_hex)

    def _terminate(self, timeout: float = 5.0) -> None:
        process, self._process = self._process, None
        if process is not None:
            stop_process(process, timeout_s=timeout)

    def stop(self) -> None:
        """Stop the tracker by its PID and delete its directory."""
        self._terminate()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
