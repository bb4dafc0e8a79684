"""One agent, many filters: a daemon per filter, one session, one poll, one loop.

:class:`FilterSet` runs an :class:`~.daemon.AgentDaemon` for every ``[[filters]]``
entry of the configuration, all on one thread::

    every poll interval (+ jitter):  IndexPoller.refresh()  (one conditional GET of
                                     index.json, on a worker thread) -> the daemons of
                                     the filters whose entry changed poll at once
    every tick:                      transfer.poll() (the one shared session), then
                                     daemon.step() for each filter

Each daemon is the single-filter agent unchanged: its own data directory
(``data_dir/filters/NAME``), state, retention, verification and metrics; it sees the
shared transfer through a :class:`~.scoped_transfer.ScopedTransfer` and the index
through an :class:`~.filter_index_source.IndexedAnnouncements`, both made by the
``make_daemon`` factory the caller injects. A failure of one filter (a bad entry, a
download that fails its checks) is that daemon's to retry; the others go on.

A filter whose ``prefix`` is not ``filters/NAME`` is not in the index: its daemon polls
its own ``latest.json`` at the agent's interval
(:func:`~.filter_index_source.filter_announcements`).

:meth:`FilterSet.reconfigure` (the CLI calls it on SIGHUP) starts the filters added to
the configuration, stops the ones removed (their resume data saved, their torrents
removed from the session) and replaces the changed ones, each new daemon built before
anything stops; the others keep their downloads and peers. Other settings need a
restart, which it logs. Filters the index lists but no configured filter follows there
are ignored, logged once each and reported in /status.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import Metric

from bloomswarm.common.bucket_layout import INDEX_KEY
from bloomswarm.common.errors import BloomswarmError, CheckFailed, ObjectNotFound

from .background_call import BackgroundCall
from .backoff import Backoff
from .config import AgentConfig
from .daemon import IDLE_TICK_S, MIN_TICK_S, OBSERVE_S, TICK_S, wait_for_next_tick
from .filter_config import FilterConfig, filter_agent_config
from .filter_index_source import IndexNews, IndexPoller
from .filter_metrics import filter_registry
from .logfmt import log_event, logfmt
from .metrics import PREFIX, AgentMetrics

if TYPE_CHECKING:
    from bloomswarm.common.filter_index import FilterIndex
    from bloomswarm.common.signing import VerifyKey

    from .daemon import AgentDaemon
    from .peer_access import PeerAccess
    from .transfer import Transfer

log = logging.getLogger("bloomswarm.agent")

FILTER_POLL_S = 60.0
"""How often a filter's daemon re-reads its index entry unprompted (no request is made:
the entry is in memory). News of the index makes it read the entry at once; this only
bounds how long a daemon that missed nothing waits to retry on its own."""

OBSERVES_PER_S = 25.0
"""Periodic refreshes of the filters' metrics and /status per second, over all filters
(a refresh on a change of state is not counted): each daemon refreshes at most every
``max(OBSERVE_S, filters / OBSERVES_PER_S)`` seconds (4 s for 100 filters, 40 s for
1,000: a scrape every 15-60 s sees a download's progress move), so that a hundred filters
do not spend the loop rebuilding their status sections 4 times a second each."""

FILTER_START_ERRORS = (BloomswarmError, OSError, ValueError)
"""What building or starting one filter may raise that is that filter's problem alone (a
key file unreadable or named with a NUL, a malformed state.json, a full disk)."""

DaemonFactory = Callable[[FilterConfig, AgentConfig], "AgentDaemon"]
"""Builds the daemon of one filter from its entry and its per-filter configuration
(:func:`~.filter_config.filter_agent_config`, with :data:`FILTER_POLL_S`)."""


MIN_TICK_PER_BUSY_FILTER_S = 0.001
"""While filters fetch, the loop ticks at most once per this many seconds per busy filter
(at least every MIN_TICK_S, at most TICK_S apart): a tick steps every busy filter's daemon
(some tens of microseconds each), and with a hundred direct downloads finishing one after
another every finish would start a tick of all of them. One of 100 busy filters then
waits at most 0.1 s longer to be installed."""


def min_tick(busy_filters: int) -> float:
    """The shortest time between two ticks while ``busy_filters`` filters fetch."""
    return min(max(MIN_TICK_S, busy_filters * MIN_TICK_PER_BUSY_FILTER_S), TICK_S)


def observe_interval(filters: int) -> float:
    """Each filter's longest time between two periodic refreshes of its metrics and
    /status when ``filters`` run on one loop (see :data:`OBSERVES_PER_S`)."""
    return max(OBSERVE_S, filters / OBSERVES_PER_S)


class IndexMetrics:
    """The agent-wide series of the index poll (unlabelled)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.sequence = Gauge(PREFIX + "index_sequence",
                              "Sequence of the newest verified index.json (0: none)", registry=r)
        self.errors = Counter(PREFIX + "index_errors_total",
                              "Failed polls of index.json by reason: origin, or the check that failed",
                              ["reason"], registry=r)
        self.filters = Gauge(PREFIX + "filters", "Filters in the configuration", registry=r)
        self.unknown = Gauge(PREFIX + "index_unknown_filters",
                             "Filters index.json lists that the configuration does not (ignored)", registry=r)


@dataclass
class _Running:
    entry: FilterConfig
    daemon: AgentDaemon
    stepped_at: float = float("-inf")
    """When the loop last stepped the daemon (its clock)."""


class FilterSet:
    """The agent of a configuration with ``[[filters]]`` (see the module docstring).

    ``transfer`` is the one shared session (closed by :meth:`shutdown`); ``peer_access``
    its guard, when it has one (refusals and certificates are the session's);
    ``index_keys`` gives the keys ``index.json`` may be signed with under a configuration
    (every filter's and the agent's), given to ``poller`` again after each reload.
    Construct, then :meth:`run` until ``stop`` is set, or drive it with :meth:`start`,
    :meth:`step` and :meth:`shutdown`.
    """

    def __init__(
        self,
        config: AgentConfig,
        transfer: Transfer,
        poller: IndexPoller,
        make_daemon: DaemonFactory,
        *,
        peer_access: PeerAccess | None = None,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
        background_polls: bool = False,
        index_keys: Callable[[AgentConfig], Sequence[VerifyKey]],
    ) -> None:
        if not config.filters:
            raise ValueError("a FilterSet runs the configuration's [[filters]]: none are listed")
        self.config = config
        self.transfer = transfer
        self.poller = poller
        self.peer_access = peer_access
        self._make_daemon = make_daemon
        self._clock = clock
        self._rng = rng or random.Random()
        self._background_polls = background_polls
        self._index_keys = index_keys
        self._running: dict[str, _Running] = {}
        self._backoff = Backoff(config.watch.retry_initial_s, config.watch.retry_max_s, rng=self._rng)
        self._next_poll = 0.0
        self._pending: BackgroundCall[IndexNews] | None = None
        self._unknown: frozenset[str] = frozenset()
        self._no_index_logged = False
        self._last_error: str | None = None
        self._reload_error: str | None = None
        """Why the last reload was not applied in full (None: it was, or none yet)."""
        self._not_started: dict[str, str] = {}
        """Configured filters that could not start, and why (retried on a reload)."""
        self._started = False
        self.index_metrics = IndexMetrics()
        self._session_metrics = AgentMetrics()
        self.registry = filter_registry(self._registries, self._agent_families)
        """What /metrics serves: every filter's series labelled, then the agent's."""

    # -- lifecycle -----------------------------------------------------------------------

    def run(self, stop: threading.Event, *, reload: threading.Event | None = None,
            load_config: Callable[[], AgentConfig] | None = None) -> None:
        """Start, loop until ``stop`` is set, then shut down. Each time ``reload`` is set,
        apply ``load_config()`` (a configuration that does not load is logged, and the
        running one kept)."""
        try:
            self.start()
            while not stop.is_set():
                if reload is not None and reload.is_set() and load_config is not None:
                    reload.clear()
                    self._reload(load_config)
                self.step()
                wait_for_next_tick(stop, self.transfer, busy=self.busy,
                                   until_due_s=self._next_poll - self._clock(),
                                   min_tick_s=min_tick(self._busy_filters()))
        finally:
            self.shutdown()

    def start(self) -> None:
        """Start every configured filter's daemon (each recovers what it holds)."""
        for entry in self.config.filters:
            try:
                self._start(entry, self._build(entry))
            except FILTER_START_ERRORS as exc:  # e.g. its state.json malformed
                self._not_startable(entry.name, exc)
        self.index_metrics.filters.set(len(self._running))
        self._spread_observes()
        self._started = True
        log_event(log, logging.INFO, "filters_started", filters=len(self._running))

    def shutdown(self) -> None:
        """Stop every daemon (resume data saved), then close the shared transfer."""
        for name in list(self._running):
            self._remove(name)
        self.transfer.close()

    def step(self) -> None:
        """One iteration: take or start the index poll, poll the shared transfer, step
        every daemon. Never raises for a failure of the index, the transfer or a filter."""
        if not self._started:
            raise RuntimeError("call start() first")
        now = self._clock()
        pending = self._pending
        if pending is not None and pending.done():
            self._pending = None
            self._take_news(pending.result, now)
        if now >= self._next_poll and self._pending is None:
            self._next_poll = now + self._poll_interval()
            call = BackgroundCall(self.poller.refresh, started_at=now, name="bloomswarm-index",
                                  thread=self._background_polls)
            if self._background_polls:
                self._pending = call
            else:
                self._take_news(call.result, now)
        try:
            self.transfer.poll()
        except Exception as exc:  # the contract says it does not raise; a bug must not stop the agent
            log.exception("%s", logfmt("internal_error", error=f"{type(exc).__name__}: {exc}"))
            self._last_error = f"internal error: {exc}"
        for running in list(self._running.values()):
            daemon = running.daemon
            # An idle filter (nothing to fetch, no poll due) has only its metrics and status
            # to refresh: once per IDLE_TICK_S is enough, so a thousand idle filters cost
            # little while a few fetch.
            if daemon.busy or daemon.poll_due() or now - running.stepped_at >= IDLE_TICK_S:
                daemon.step()
                running.stepped_at = now
        self._observe_session()

    @property
    def busy(self) -> bool:
        """Some filter is fetching, or a poll is under way: tick often."""
        return self._pending is not None or any(r.daemon.busy for r in self._running.values())

    def _busy_filters(self) -> int:
        return sum(1 for r in self._running.values() if r.daemon.busy)

    # -- configuration -------------------------------------------------------------------

    def reconfigure(self, config: AgentConfig) -> None:
        """Run ``config``'s filters: start the added, stop the removed, replace the changed;
        leave the others alone. Other settings need a restart (logged when they differ).

        Every added or changed filter's daemon is built (its keys loaded) before anything
        stops: a filter that cannot be built is reported and, when it was running, keeps
        running as it was. The index's keys follow the filters that run.
        """
        if not config.filters:
            self._reload_failed("the new configuration lists no [[filters]]: restart to run a single filter")
            return
        if replace(config, filters=()) != replace(self.config, filters=()):
            log_event(log, logging.WARNING, "reload_partial",
                      reason="only [[filters]] change on reload; restart the agent for the other settings")
        wanted = {entry.name: entry for entry in config.filters}
        built, problems = self._build_changed(config.filters)
        stopped = [name for name in self._running if name not in wanted or name in built]
        for name in stopped:
            self._remove(name)
        for entry, daemon in built.values():
            try:
                self._start(entry, daemon)
            except FILTER_START_ERRORS as exc:
                problems.append(self._not_startable(entry.name, exc))
        for name in [n for n in self._not_started if n not in wanted]:
            del self._not_started[name]
        order = list(wanted) + [name for name in self._running if name not in wanted]
        self.config = replace(self.config, filters=tuple(
            self._running[name].entry for name in order if name in self._running))
        problems.extend(self._refresh_index_keys())
        self.index_metrics.filters.set(len(self._running))
        self._spread_observes()
        self._note_unknown(self.poller.index)
        started = ",".join(name for name in built if name in self._running)
        log_event(log, logging.INFO, "reloaded", filters=len(self._running),
                  stopped=",".join(stopped) or None, started=started or None)
        self._reload_error = "; ".join(problems) or None

    def _build_changed(
        self, entries: Iterable[FilterConfig]
    ) -> tuple[dict[str, tuple[FilterConfig, AgentDaemon]], list[str]]:
        """The daemons of ``entries`` that are new or changed, built but not started, by
        name; and what could not be built (a changed filter that cannot be keeps running)."""
        built: dict[str, tuple[FilterConfig, AgentDaemon]] = {}
        problems: list[str] = []
        for entry in entries:
            running = self._running.get(entry.name)
            if running is not None and running.entry == entry:
                continue
            try:
                built[entry.name] = (entry, self._build(entry))
            except FILTER_START_ERRORS as exc:  # e.g. a key file unreadable
                problems.append(self._not_startable(entry.name, exc, running=running is not None))
        return built, problems

    def _not_startable(self, name: str, exc: BaseException, *, running: bool = False) -> str:
        """Log that filter ``name`` could not start and note it (unless it keeps running as
        it was); the line for /status."""
        log_event(log, logging.ERROR, "filter_not_started", filter=name, error=exc, kept=running or None)
        if running:
            return f"filter {name!r} not started (keeps running as it was): {exc}"
        self._not_started[name] = str(exc)
        return f"filter {name!r} not started: {exc}"

    def _reload(self, load_config: Callable[[], AgentConfig]) -> None:
        """Apply ``load_config()``. Whatever it raises (ConfigError for a bad file; any
        other exception is a bug, logged with its traceback) is logged as reload_failed
        and the running configuration kept: a reload never ends the agent."""
        try:
            config = load_config()
        except BloomswarmError as exc:
            self._reload_failed(str(exc))
            return
        except Exception as exc:  # a bug in loading: not worth the running agent
            log.error("reload: loading the configuration failed unexpectedly", exc_info=exc)
            self._reload_failed(f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())}")
            return
        self.reconfigure(config)

    def _reload_failed(self, reason: str) -> None:
        log_event(log, logging.ERROR, "reload_failed", error=reason, keeping="the running configuration")
        self._reload_error = f"reload failed: {reason}"

    def _refresh_index_keys(self) -> list[str]:
        """Give the poller the keys of the filters that run; the problem, if any."""
        try:
            self.poller.set_keys(self._index_keys(self.config))
        except FILTER_START_ERRORS as exc:
            log_event(log, logging.ERROR, "index_keys_kept", error=exc)
            return [f"the index's keys were kept: {exc}"]
        return []

    def _spread_observes(self) -> None:
        interval = observe_interval(len(self._running))
        for running in self._running.values():
            running.daemon.observe_interval_s = interval

    def _build(self, entry: FilterConfig) -> AgentDaemon:
        """Filter ``entry``'s daemon, not started. A filter that follows the index re-reads
        its entry unprompted only every FILTER_POLL_S (news of the index prompts it); one
        with its own ``latest.json`` polls it at the agent's interval."""
        per_filter = filter_agent_config(self.config, entry)
        if entry.follows_index:
            slow = max(FILTER_POLL_S, per_filter.watch.poll_interval_s)
            per_filter = replace(per_filter, watch=replace(per_filter.watch, poll_interval_s=slow))
        return self._make_daemon(entry, per_filter)

    def _start(self, entry: FilterConfig, daemon: AgentDaemon) -> None:
        daemon.start()
        self._running[entry.name] = _Running(entry, daemon)
        self._not_started.pop(entry.name, None)
        name = entry.name
        if entry.follows_index and (self.poller.entry(name) is not None or self.poller.problem(name)):
            daemon.poll_now()

    def _remove(self, name: str) -> None:
        running = self._running.pop(name)
        running.daemon.shutdown()  # saves its resume data, removes its torrents from the session

    # -- the index -----------------------------------------------------------------------

    def _poll_interval(self) -> float:
        watch = self.config.watch
        return watch.poll_interval_s + self._rng.uniform(0.0, watch.poll_jitter_s)

    def _take_news(self, refresh: Callable[[], IndexNews], now: float) -> None:
        try:
            news = refresh()
        except ObjectNotFound as exc:
            self._backoff.reset()
            if not self._no_index_logged:
                log_event(log, logging.INFO, "nothing_published", detail=exc)
                self._no_index_logged = True
            return
        except CheckFailed as exc:
            self._failed(now, exc.check, exc)
            return
        except (BloomswarmError, OSError) as exc:
            self._failed(now, "origin", exc)
            return
        self._no_index_logged = False
        if self._backoff.failures:
            log_event(log, logging.INFO, "origin_recovered", after_failures=self._backoff.failures)
            self._backoff.reset()
        self._last_error = None
        if news.index is not None:
            self.index_metrics.sequence.set(news.index.sequence)
            self._note_unknown(news.index)
        for name in sorted(news.changed):
            running = self._running.get(name)
            if running is not None and running.entry.follows_index:
                running.daemon.poll_now()

    def _failed(self, now: float, reason: str, exc: BaseException) -> None:
        self.index_metrics.errors.labels(reason).inc()
        delay = self._backoff.next_delay()
        self._next_poll = now + delay
        self._last_error = f"{INDEX_KEY}: {exc}"
        log_event(log, logging.WARNING if reason == "origin" else logging.ERROR, "index_poll_failed",
                  reason=reason, error=exc, retry_in_s=delay)

    def _note_unknown(self, index: FilterIndex | None) -> None:
        listed = frozenset(index.filters) | frozenset(index.unreadable) if index is not None else frozenset()
        unknown = listed - frozenset(n for n, r in self._running.items() if r.entry.follows_index)
        for name in sorted(unknown - self._unknown):
            log_event(log, logging.WARNING, "unknown_filter", filter=name,
                      detail=f"{INDEX_KEY} lists it, no configured filter follows it there: ignored")
        self._unknown = unknown
        self.index_metrics.unknown.set(len(unknown))

    # -- metrics and status --------------------------------------------------------------

    def _registries(self) -> Mapping[str, CollectorRegistry]:
        return {name: running.daemon.metrics.registry for name, running in list(self._running.items())}

    def _agent_families(self) -> Iterable[Metric]:
        yield from self.index_metrics.registry.collect()
        if self.peer_access is not None:
            keep = (PREFIX + "refused_peers", PREFIX + "certificate_expiry_seconds")
            yield from (f for f in self._session_metrics.registry.collect() if f.name in keep)

    def _observe_session(self) -> None:
        access = self.peer_access
        if access is not None:
            states = access.certificates.states() if access.certificates is not None else []
            self._session_metrics.observe_peer_access(access.refusals.totals, states)

    @property
    def is_ready(self) -> bool:
        """Every configured filter runs and has a verified version installed (/readyz)."""
        return (bool(self._running) and not self._not_started
                and all(r.daemon.metrics.is_ready for r in self._running.values()))

    def status(self) -> dict[str, Any]:
        """/status: each filter's daemon status, and the index's."""
        index = self.poller.index
        return {
            "ready": self.is_ready,
            "filters": {name: running.daemon.status() for name, running in sorted(self._running.items())},
            "index": {
                "sequence": index.sequence if index is not None else None,
                "issued_at": index.issued_at if index is not None else None,
                "unknown_filters": sorted(self._unknown),
                "last_error": self._last_error,
            },
            "reload_error": self._reload_error,
            "not_started": dict(sorted(self._not_started.items())),
            "peer_access": self._peer_access_status(),
        }

    def _peer_access_status(self) -> dict[str, Any] | None:
        access = self.peer_access
        if access is None:
            return None
        states = access.certificates.states() if access.certificates is not None else []
        return {"refused_peers": dict(access.refusals.totals),
                "certificates": [dataclasses.asdict(s) for s in states]}


__all__ = ["FILTER_POLL_S", "DaemonFactory", "FilterSet", "IndexMetrics"]
