"""One agent's libtorrent session in its own process, for the swarm tests and the
origin-policy benchmark.

Run as ``python -m bloomswarm.sandbox.swarm_worker SPEC_JSON``. The process builds a
:class:`~bloomswarm.agent.swarm.Swarm` from the spec, starts one version (download, or
seed an existing file), polls it, and writes one JSON object per line on stdout:

- ``{"event": "ready", "port": P, "ssl_port": S}`` once the session listens (S: the TLS
  port of private versions, 0 without certificates);
- ``{"event": "status", ...}`` every ``report_interval`` seconds and at once when the
  download finishes (the fields of ``TransferStatus`` plus ``origin_in_use``, ``t``);
- ``{"event": "resume_saved", "path": ..., "bytes": N}`` after each save of resume data;
- ``{"event": "stopped"}`` just before it exits.

It keeps seeding until it reads ``stop`` on stdin (or stdin closes). ``save`` on stdin
saves resume data to ``resume_out`` at once. Logs go to stderr.

Spec keys: ``swarm`` (SwarmConfig fields), ``version``, ``torrent`` (path of the
.torrent), ``dir``, ``mode`` ("download", "seed", "evil-seed": a raw session that
claims every piece of a file without hashing it, to serve corrupt data, or "outsider": a
raw session on ``address`` (default 127.0.0.1) that keeps trying to download from the
``peers`` given, with the ``certificate`` and ``key`` files given if any), ``peers``
(``[[address, port], ...]`` connected to every second until the download is done, besides
the trackers), ``origin_url``
(or null), ``origin_url_ttl`` (seconds, or null for a URL that does not expire),
``resume`` (a resume-data file to start from), ``resume_out`` and ``save_resume_every``
(seconds), ``poll_interval``, ``report_interval``. ``SWARM_DEBUG=1`` in the environment
logs every libtorrent alert the swarm receives.

The :class:`WorkerProcess` class is the parent's side: it starts the process, reads its
reports in a thread, and stops it by its own PID.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

Report = dict[str, Any]

# --- the child ------------------------------------------------------------------------------


def _emit(report: Report) -> None:
    sys.stdout.write(json.dumps(report) + "\n")
    sys.stdout.flush()


def _stdin_commands() -> queue.Queue[str]:
    """Lines read from stdin by a daemon thread; "stop" when stdin closes."""
    commands: queue.Queue[str] = queue.Queue()

    def read() -> None:
        for line in sys.stdin:
            commands.put(line.strip())
        commands.put("stop")

    threading.Thread(target=read, daemon=True).start()
    return commands


def _run_evil_seed(spec: Report) -> None:
    """Serve the (tampered) file in ``dir`` while claiming every piece is good."""
    import libtorrent as lt

    from bloomswarm.agent.config import swarm_config
    from bloomswarm.agent.swarm import session_settings

    config = swarm_config(spec.get("swarm", {}), where="worker spec")
    session = lt.session(session_settings(config))
    info = lt.torrent_info(Path(spec["torrent"]).read_bytes())
    params = lt.add_torrent_params()
    params.ti = info
    params.save_path = spec["dir"]
    # Resume data that says "all pieces present": libtorrent trusts it and never hashes.
    params.have_pieces = [True] * info.num_pieces()
    params.flags &= ~lt.torrent_flags.auto_managed
    params.flags &= ~lt.torrent_flags.paused
    for url in config.trackers:
        params.trackers = [*list(params.trackers), url]
    session.add_torrent(params)
    _emit({"event": "ready", "port": int(session.listen_port()), "pid": os.getpid()})
    commands = _stdin_commands()
    while True:
        try:
            if commands.get(timeout=0.2) == "stop":
                break
        except queue.Empty:
            session.pop_alerts()
    _emit({"event": "stopped"})


def _run_outsider(spec: Report) -> None:
    """A bare libtorrent session that tries to download ``torrent`` from the ``peers``
    (``[[address, port], ...]``) again and again, presenting the ``certificate`` and
    ``key`` files if given (any CA), and reports its own byte counter."""
    import libtorrent as lt

    address = str(spec.get("address", "127.0.0.1"))
    session = lt.session({"listen_interfaces": f"{address}:0,{address}:0s",
                          "outgoing_interfaces": address, "enable_dht": False,
                          "enable_lsd": False, "enable_upnp": False, "enable_natpmp": False,
                          "enable_outgoing_utp": False, "enable_incoming_utp": False,
                          "allow_multiple_connections_per_ip": True})
    params = lt.add_torrent_params()
    params.ti = lt.torrent_info(Path(spec["torrent"]).read_bytes())
    params.save_path = spec["dir"]
    handle = session.add_torrent(params)
    if spec.get("certificate"):
        handle.set_ssl_certificate(spec["certificate"], spec["key"], "")
    peers = [(str(address), int(port)) for address, port in spec.get("peers", [])]
    _emit({"event": "ready", "port": int(session.listen_port()), "pid": os.getpid()})
    commands = _stdin_commands()
    attempts = 0
    while True:
        for peer in peers:
            handle.connect_peer(peer)
        attempts += 1
        status = handle.status()
        _emit({"event": "status", "total_payload_download": int(status.total_payload_download),
               "total_download": int(status.total_download), "attempts": attempts,
               "finished": bool(status.is_seeding)})
        try:
            if commands.get(timeout=0.5) == "stop":
                break
        except queue.Empty:
            session.pop_alerts()
    _emit({"event": "stopped"})


def _run(spec: Report) -> None:
    from bloomswarm.agent.config import swarm_config
    from bloomswarm.agent.swarm import Swarm
    from bloomswarm.agent.transfer import OriginURL

    config = swarm_config(spec.get("swarm", {}), where="worker spec")
    version = int(spec.get("version", 1))
    torrent = Path(spec["torrent"]).read_bytes()
    directory = Path(spec["dir"])
    poll_interval = float(spec.get("poll_interval", 0.1))
    report_interval = float(spec.get("report_interval", 0.5))
    save_every = spec.get("save_resume_every")
    resume_out = Path(spec["resume_out"]) if spec.get("resume_out") else None
    started = time.monotonic()

    swarm = Swarm(config)
    _emit({"event": "ready", "port": swarm.listen_port(), "ssl_port": swarm.ssl_listen_port(),
           "pid": os.getpid()})
    if spec.get("mode", "download") == "seed":
        swarm.seed(version, torrent, directory)
    else:
        origin = None
        url = spec.get("origin_url")
        if url:
            ttl = spec.get("origin_url_ttl")

            def origin() -> OriginURL:
                # A fresh "presigned" URL each time, like S3's, that the test origin
                # refuses once expired.
                if not ttl:
                    return OriginURL(url)
                expires = time.time() + float(ttl)
                return OriginURL(f"{url}?expires={expires:.3f}&signature={time.time_ns()}", expires)

        resume = Path(spec["resume"]).read_bytes() if spec.get("resume") else None
        swarm.start_download(version, torrent, directory, origin, resume_data=resume)

    def save() -> None:
        if resume_out is None:
            return
        data = swarm.save_resume_data(timeout=5.0).get(version)
        if data is not None:
            tmp = resume_out.with_suffix(".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, resume_out)
            _emit({"event": "resume_saved", "path": str(resume_out), "bytes": len(data)})

    def report() -> bool:
        status = swarm.status(version)
        if status is None:
            return False
        fields = asdict(status)
        fields.update(event="status", origin_in_use=swarm.origin_in_use(version),
                      t=time.monotonic() - started, refused=dict(swarm.refusals.totals))
        _emit(fields)
        return status.finished

    commands = _stdin_commands()
    last_report = last_save = last_connect = time.monotonic()
    peers = [(str(address), int(port)) for address, port in spec.get("peers", [])]
    for peer in peers:
        swarm.connect(version, peer)
    was_finished = False
    try:
        while True:
            swarm.poll()
            now = time.monotonic()
            if peers and not was_finished and now - last_connect >= 1.0:
                last_connect = now
                for peer in peers:
                    swarm.connect(version, peer)
            with contextlib.suppress(queue.Empty):
                command = commands.get_nowait()
                if command == "stop":
                    break
                if command == "save":
                    save()
                    last_save = now
            if save_every and not was_finished and now - last_save >= float(save_every):
                save()
                last_save = now
            if now - last_report >= report_interval:
                was_finished = report()
                last_report = now
            elif not was_finished:
                status = swarm.status(version)
                if status is not None and status.finished:
                    was_finished = report()
                    last_report = now
            time.sleep(poll_interval)
        report()
    finally:
        swarm.close()
    _emit({"event": "stopped"})


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m bloomswarm.sandbox.swarm_worker SPEC_JSON``."""
    args = sys.argv[1:] if argv is None else argv
    spec = json.loads(args[0])
    logging.basicConfig(
        level=logging.DEBUG if os.environ.get("SWARM_DEBUG") else logging.INFO, stream=sys.stderr,
        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s",
    )
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    if spec.get("mode") == "evil-seed":
        _run_evil_seed(spec)
    elif spec.get("mode") == "outsider":
        _run_outsider(spec)
    else:
        _run(spec)
    return 0


# --- the parent -----------------------------------------------------------------------------


class WorkerProcess:
    """A swarm worker child process, seen from the test.

    ``start()`` launches ``python -m bloomswarm.sandbox.swarm_worker`` (a fresh interpreter:
    nothing is forked from a process that runs libtorrent) and waits for its "ready"
    report. Reports are read by a thread; ``latest`` is the last status report.
    ``stop()`` asks it to stop, then terminates and finally kills it, always by its own
    PID; ``kill()`` sends SIGKILL at once. stderr goes to a log file (``log_tail()``).
    ``prefix`` is put before the command, e.g. ``["ip", "netns", "exec", NAME]`` to run
    the worker in a network namespace (a prefix that execs the command keeps its PID);
    ``env`` adds environment variables (e.g. ``SSL_CERT_FILE`` for a test's HTTPS origin).
    """

    def __init__(self, spec: Report, *, name: str = "worker", cwd: Path | None = None,
                 prefix: Sequence[str] = (), env: dict[str, str] | None = None) -> None:
        self.spec = spec
        self.env = dict(env or {})
        self.name = name
        self.cwd = cwd
        self.prefix = list(prefix)
        self.port = 0
        self.ssl_port = 0
        self.latest: Report | None = None
        self.reports: list[Report] = []
        self._process: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._reader: threading.Thread | None = None

    @property
    def pid(self) -> int:
        """The child's process id (only after start())."""
        if self._process is None:
            raise RuntimeError(f"{self.name} is not started")
        return self._process.pid

    def start(self, timeout: float = 30.0) -> WorkerProcess:
        """Launch the child and wait until its session listens."""
        self.launch()
        self.wait_ready(timeout)
        return self

    def launch(self) -> None:
        """Launch the child without waiting (see :meth:`wait_ready`)."""
        fd, log_name = tempfile.mkstemp(prefix=f"swarm-{self.name}-", suffix=".log")
        self._log = Path(log_name)
        with os.fdopen(fd, "wb") as log:
            self._process = subprocess.Popen(
                [*self.prefix, sys.executable, "-m", "bloomswarm.sandbox.swarm_worker",
                 json.dumps(self.spec)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                cwd=self.cwd,
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env},
            )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def wait_ready(self, timeout: float = 30.0) -> int:
        """Wait for the child's "ready" report; return its listening port."""
        ready = self.wait_for(lambda r: r.get("event") == "ready", timeout)
        self.port = int(ready["port"])
        self.ssl_port = int(ready.get("ssl_port", 0))
        return self.port

    def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        for line in self._process.stdout:
            try:
                report = json.loads(line)
            except ValueError:
                continue
            with self._changed:
                self.reports.append(report)
                if report.get("event") == "status":
                    self.latest = report
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[Report], bool], timeout: float) -> Report:
        """The first report (past or future) that satisfies ``predicate``; TimeoutError
        (with the log's tail) when none comes within ``timeout`` or the child exits."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self._changed:
            while True:
                for report in self.reports[seen:]:
                    if predicate(report):
                        return report
                seen = len(self.reports)
                left = deadline - time.monotonic()
                exited = self._process is not None and self._process.poll() is not None
                if left <= 0 or (exited and not (self._reader and self._reader.is_alive())):
                    raise TimeoutError(
                        f"{self.name}: no matching report within {timeout:.0f}s "
                        f"(last: {self.latest}); log tail:\n{self.log_tail()}"
                    )
                self._changed.wait(min(left, 0.5))

    def wait_finished(self, timeout: float) -> Report:
        """The first status report with ``finished`` true."""
        return self.wait_for(lambda r: r.get("event") == "status" and bool(r.get("finished")), timeout)

    def send(self, command: str) -> None:
        """Write one command line ("stop", "save") to the child's stdin."""
        if self._process is None or self._process.stdin is None:
            raise RuntimeError(f"{self.name} is not started")
        self._process.stdin.write(command.encode() + b"\n")
        self._process.stdin.flush()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the child: "stop" on stdin, then SIGTERM, then SIGKILL, by its PID."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            with contextlib.suppress(OSError):
                self.send("stop")
            try:
                process.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                process.send_signal(signal.SIGTERM)  # by PID; a no-op once reaped
                try:
                    process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait(timeout=timeout)
        self._finish()

    def kill(self) -> None:
        """SIGKILL the child by its PID and reap it."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()  # SIGKILL, by PID
        process.wait(timeout=10.0)
        self._finish()

    def _finish(self) -> None:
        # The child has exited: its stdout reaches EOF and the reader ends on its own.
        if self._reader is not None:
            self._reader.join(timeout=5.0)
        if self._process is not None:
            for pipe in (self._process.stdin, self._process.stdout):
                with contextlib.suppress(OSError, ValueError):
                    if pipe is not None:
                        pipe.close()

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the child's stderr."""
        if self._log is None or not self._log.exists():
            return ""
        return self._log.read_text(errors="replace")[-chars:]

    def cleanup(self) -> None:
        """Stop the child if needed and delete its log."""
        self.stop()
        if self._log is not None:
            with contextlib.suppress(OSError):
                self._log.unlink()


if __name__ == "__main__":
    sys.exit(main())
