"""This agent's certificates for private versions: loaded at start, followed while it runs.

A private version's torrent carries the fleet CA (:mod:`bloomswarm.common.tls_identity`);
the agent presents the certificate that CA issued (:meth:`CertificateStore.for_ca`), so
that during a CA rotation it holds one identity per CA and each version's swarm gets the
right one (docs/private-swarm.md).

- **At start** every identity in ``swarm.certificate_dirs`` must load: a missing,
  unreadable, mismatched or expired certificate or key raises CertificateError, and the
  agent refuses to start with that one line.
- **While running** the files are looked at every :data:`REFRESH_S` seconds; renewed
  files (cert-manager rewrites its Secret) are loaded and given to the torrents. Files
  that no longer load are reported (once, and again only when the error changes) and the
  identities held are kept; also when loading raises an error other than CertificateError
  (a bug), which is logged once with its traceback instead of breaking the agent's poll.
- **Expiry** is reported, never acted on: :meth:`CertificateStore.states` gives each
  identity's seconds left (metrics, /status), and the log warns once a day within
  :data:`EXPIRY_WARNING_S` of the end and once an hour after it. The agent keeps
  serving: peers refuse new handshakes with an expired certificate, but the installed
  version stays current and the origin still serves the agent.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bloomswarm.common.errors import CertificateError
from bloomswarm.common.tls_identity import TlsIdentity, identity_for, load_identities

log = logging.getLogger("bloomswarm.swarm")

REFRESH_S = 30.0
"""Seconds between two looks at the certificate files."""
EXPIRY_WARNING_S = 7 * 86400.0
"""A certificate this close to its end is warned about (once a day)."""

_WARN_EVERY_S, _ERROR_EVERY_S = 86400.0, 3600.0


@dataclass(frozen=True)
class CertificateState:
    """One identity as reported: which file, whose, how long it has left."""

    certificate: str
    subject: str
    expires_in_s: float
    """Negative once expired."""


class CertificateStore:
    """The identities in ``dirs``. ``wall_clock`` gives Unix seconds (certificate validity
    is wall time); ``clock`` is monotonic (when to look at the files again)."""

    def __init__(self, dirs: Sequence[Path], *, wall_clock: Callable[[], float] = time.time,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._dirs = tuple(dirs)
        self._wall_clock = wall_clock
        self._clock = clock
        self.identities: tuple[TlsIdentity, ...] = load_identities(self._dirs, now=self._now())
        self._files = self._file_stamps()
        self._next_look = clock() + REFRESH_S
        self._reported: dict[str, float] = {}  # certificate path -> monotonic time of its last line
        self._broken: str | None = None

    def for_ca(self, ca_pem: bytes) -> TlsIdentity | None:
        """The identity ``ca_pem`` issued (the latest to expire), or None."""
        return identity_for(self.identities, ca_pem)

    def states(self) -> list[CertificateState]:
        """Every identity's seconds left, soonest first."""
        now = self._now()
        return sorted((CertificateState(str(i.certificate), i.subject, i.expires_in(now))
                       for i in self.identities), key=lambda s: s.expires_in_s)

    def refresh(self) -> bool:
        """Every :data:`REFRESH_S`: reload the identities if their files changed (True when
        they did and loaded), and log what is expiring. When a directory does not load, all
        the identities held are kept and the error is logged once (again when it changes);
        this raises nothing, whatever loading raised."""
        now = self._clock()
        if now < self._next_look:
            return False
        self._next_look = now + REFRESH_S
        self._report_expiry(now)
        stamps = self._file_stamps()
        if stamps == self._files:
            return False
        identities, problems, unexpected = self._load()
        if problems:
            broken = "; ".join(problems)
            if broken != self._broken:
                self._broken = broken
                log.error("certificates changed but do not load (%s); keeping the ones loaded", broken,
                          exc_info=unexpected)
            return False
        self._files, self._broken = stamps, None
        self.identities = identities
        log.info("certificates reloaded: %s",
                 ", ".join(f"{i.subject} until {i.not_after:%Y-%m-%d %H:%M}Z" for i in identities))
        return True

    def _load(self) -> tuple[tuple[TlsIdentity, ...], list[str], Exception | None]:
        """The identities of every directory, what stopped those that did not load (one
        line each) and the first error that was no CertificateError, for its traceback."""
        now = self._now()
        identities: list[TlsIdentity] = []
        problems: list[str] = []
        unexpected: Exception | None = None
        for directory in self._dirs:
            try:
                identities += load_identities([directory], now=now)
            except CertificateError as exc:
                problems.append(str(exc))
            except Exception as exc:  # a bug: must not stop the agent's poll every REFRESH_S
                reason = " ".join(str(exc).split())
                problems.append(f"certificate directory {directory}: {type(exc).__name__}: {reason}")
                unexpected = unexpected or exc
        return tuple(identities), problems, unexpected

    def _now(self) -> datetime.datetime:
        return datetime.datetime.fromtimestamp(self._wall_clock(), tz=datetime.timezone.utc)

    def _file_stamps(self) -> tuple[tuple[str, int, int], ...]:
        stamps = []
        for directory in self._dirs:
            try:
                paths = sorted(p for p in directory.iterdir() if p.suffix in (".crt", ".key"))
                for path in paths:
                    stat = path.stat()
                    stamps.append((str(path), stat.st_mtime_ns, stat.st_size))
            except OSError:
                stamps.append((str(directory), -1, -1))
        return tuple(stamps)

    def _report_expiry(self, now: float) -> None:
        for state in self.states():
            if state.expires_in_s > EXPIRY_WARNING_S:
                continue
            expired = state.expires_in_s <= 0
            last = self._reported.get(state.certificate)
            if last is not None and now - last < (_ERROR_EVERY_S if expired else _WARN_EVERY_S):
                continue
            self._reported[state.certificate] = now
            if expired:
                log.error("certificate %s (%s) expired %.0f s ago: peers refuse new connections "
                          "to this agent; renew it (still serving the installed version)",
                          state.certificate, state.subject, -state.expires_in_s)
            else:
                log.warning("certificate %s (%s) expires in %.1f days", state.certificate,
                            state.subject, state.expires_in_s / 86400)
