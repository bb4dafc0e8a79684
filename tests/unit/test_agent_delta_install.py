"""Installing a version by delta cheaply and robustly (issue 13, the agent's side).

- The result's SHA-256 is computed once, by the apply: the gate is handed it as a
  :class:`~bloomswarm.agent.verify.HashedFile` and does not read the file again for it
  (unless the file changed since).
- With background work (what ``bloomswarm agent run`` uses) the apply runs on a worker
  thread: the loop keeps ticking and the status says ``applying``. What an apply left
  when the agent stopped is deleted at the restart, and the delta is applied again.
- A transient failure to fetch the delta's torrent is retried a few times before the
  agent falls back to the full file; a permanent one falls back at once, counted and
  logged once.

In-process (memory store, MemoryOrigin, MemoryTransfer): no socket, no sleep (a retry's
waits go to a recorder); worker threads are waited for with events and joins.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from bloomswarm.agent import daemon as daemon_module
from bloomswarm.agent import deltas, verify
from bloomswarm.agent.announcements import Announcement, ObjectStoreAnnouncements
from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.deltas import FALLBACK_REASONS, DeltaFallback, FetchRetry, plan_delta
from bloomswarm.agent.memory_transfer import MemoryOrigin, MemoryTransfer
from bloomswarm.agent.verify import CheckFailed, HashedFile, check_file
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.errors import ObjectNotFound, StorageError
from bloomswarm.common.file_hash import file_sha256
from bloomswarm.common.manifest import DeltaEntry, Manifest
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import (
    PUBLIC,
    agent_config,
    installed,
    make_daemon,
    metric,
    publish,
    run_until,
)

store, origin, daemons = agent_helpers.store, agent_helpers.origin, agent_helpers.daemons  # fixtures
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")  # no sockets, no sleeps

APPLY = f"{daemon_module.__name__}.apply_fetched_delta"
"""What the daemon calls to apply a delta (replaced by the tests that gate it)."""
KEYS_1 = [f"key-{i}" for i in range(300)]
KEYS_2 = KEYS_1[5:] + [f"new-{i}" for i in range(5)]


class CountingTransfer(MemoryTransfer):
    """A MemoryTransfer that counts the loop's ticks (calls to poll())."""

    ticks = 0

    def poll(self) -> None:
        self.ticks += 1
        super().poll()


class FlakySource:
    """The real announcement source, whose ``document()`` (the delta's torrent) fails with
    ``error`` for its first ``failures`` calls."""

    def __init__(self, real: ObjectStoreAnnouncements, failures: int, error: Exception) -> None:
        self.real, self.failures, self.error = real, failures, error
        self.calls = 0

    def latest(self) -> Announcement | None:
        return self.real.latest()

    def document(self, key: str) -> bytes:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.real.document(key)


class GatedApply:
    """Stands in for the daemon's ``apply_fetched_delta``: notes the thread it runs on,
    blocks until the test opens ``gate`` (refuses at once on the main thread: the loop's),
    then applies for real (or gives up, when ``cancelled``)."""

    def __init__(self) -> None:
        self.real = deltas.apply_fetched_delta
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.returned = threading.Event()
        self.cancelled = False
        self.threads: list[threading.Thread] = []

    def __call__(self, *args: Any) -> HashedFile:
        self.threads.append(threading.current_thread())
        self.entered.set()
        if threading.current_thread() is threading.main_thread():  # fail fast, do not block the test
            raise AssertionError("the delta is applied on the loop's thread")
        try:
            if not self.gate.wait(30):
                raise AssertionError("the test never opened the gate")
            if self.cancelled:
                raise DeltaFallback("missing", "cancelled by the test")
            return self.real(*args)
        finally:
            self.returned.set()


def _fallbacks(daemon: AgentDaemon) -> dict[str, float]:
    counts = {r: metric(daemon, "delta_fallbacks_total", reason=r) for r in FALLBACK_REASONS}
    return {r: n for r, n in counts.items() if n}


def _serves(daemon: AgentDaemon, manifest: Manifest) -> bool:
    return (installed(daemon, manifest.version)
            and hashlib.sha256(daemon.layout.current_filter.read_bytes()).hexdigest() == manifest.sha256)


def _join_threads(name: str) -> None:
    """Wait until every thread called ``name`` has returned."""
    for thread in threading.enumerate():
        if thread.name == name:
            thread.join(30)
            assert not thread.is_alive(), f"a {name} thread never returned"


def _settled(condition: Callable[[], bool]) -> Callable[[], bool]:
    """``condition``, checked after every background poll has returned (so that stepping
    an agent with background polls until it holds needs no sleep)."""
    def check() -> bool:
        _join_threads("bloomswarm-poll")
        return condition()
    return check


def _agent(directory: Path, origin: MemoryOrigin, daemons: list[AgentDaemon], **options: Any) -> AgentDaemon:
    directory.mkdir(parents=True, exist_ok=True)
    daemon = make_daemon(agent_config(directory), origin, **options)
    daemons.append(daemon)
    return daemon


@pytest.fixture
def retries(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The waits between torrent fetch attempts, recorded instead of slept."""
    waits: list[float] = []
    monkeypatch.setattr(deltas, "TORRENT_RETRY", FetchRetry(sleep=waits.append))
    return waits


# -- hash once ----------------------------------------------------------------------------


def test_the_gate_does_not_hash_a_file_the_delta_apply_wrote(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hashed: list[Path] = []

    def counting(path: Path, **kwargs: Any) -> str:
        hashed.append(path)
        return file_sha256(path, **kwargs)

    monkeypatch.setattr(f"{verify.__name__}.file_sha256", counting)
    publish(store, KEYS_1, deltas=True)
    daemon = _agent(tmp_path, origin, daemons)
    run_until(daemon, lambda: installed(daemon, 1))
    assert len(hashed) == 1  # a downloaded file: the gate hashes it
    v2 = publish(store, KEYS_2, deltas=True)
    run_until(daemon, lambda: installed(daemon, 2))
    assert _serves(daemon, v2) and metric(daemon, "delta_installs_total") == 1
    assert len(hashed) == 1  # applied from the delta: not hashed a second time


def _written(tmp_path: Path, store: MemoryObjectStore) -> tuple[Manifest, Path]:
    """A published v1 and its file on disk."""
    manifest = publish(store, KEYS_1)
    stored = store.get(manifest.filter_key)
    assert stored is not None
    path = tmp_path / "filter.bsf"
    path.write_bytes(stored.data)
    return manifest, path


def test_the_gate_takes_the_writers_digest_for_the_file_as_it_was(
    tmp_path: Path, store: MemoryObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    manifest, path = _written(tmp_path, store)
    assert check_file(manifest, HashedFile.of(path, manifest.sha256)).filter_version == 1
    with pytest.raises(CheckFailed) as caught:  # the digest is the one compared: a wrong one fails
        check_file(manifest, HashedFile.of(path, "0" * 64))
    assert caught.value.check == "sha256"

    def refuse(*_args: object, **_kwargs: object) -> str:
        raise AssertionError("the gate read the file to hash it")

    monkeypatch.setattr(f"{verify.__name__}.file_sha256", refuse)
    check_file(manifest, HashedFile.of(path, manifest.sha256))


def test_the_gate_hashes_a_file_changed_since_its_writer_hashed_it(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    manifest, path = _written(tmp_path, store)
    written = HashedFile.of(path, manifest.sha256)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01  # the body changes, the header does not
    replacement = tmp_path / "other.bsf"
    replacement.write_bytes(bytes(data))
    os.replace(replacement, path)  # another file under the same name
    with pytest.raises(CheckFailed) as caught:
        check_file(manifest, written)
    assert caught.value.check == "sha256"
    with pytest.raises(CheckFailed) as caught:  # the size is checked all the same
        check_file(manifest, HashedFile(tmp_path / "missing.bsf", manifest.sha256, (0, 0, 0, 0)))
    assert caught.value.check == "size"


# -- off the loop -------------------------------------------------------------------------


def test_the_loop_keeps_ticking_while_a_delta_is_applied(
    *, tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    apply = GatedApply()
    monkeypatch.setattr(APPLY, apply)
    caplog.set_level(logging.INFO, logger="bloomswarm.agent")
    transfer = CountingTransfer(origin)
    publish(store, KEYS_1, deltas=True)
    daemon = _agent(tmp_path, origin, daemons, transfer=transfer, background_polls=True)
    try:
        run_until(daemon, _settled(lambda: installed(daemon, 1)))
        v2 = publish(store, KEYS_2, deltas=True)
        run_until(daemon, _settled(apply.entered.is_set))
        ticks = transfer.ticks
        for _ in range(20):
            daemon.step()
        assert transfer.ticks >= ticks + 20  # the loop went on while the apply was blocked
        assert apply.threads[0] is not threading.main_thread()
        download = daemon.status()["download"]
        assert download["state"] == "applying" and download["delta_from"] == 1
        assert daemon.layout.current_version() == 1  # still serving v1
        assert any("event=delta_applying" in m and "version=2" in m for m in caplog.messages)
        apply.gate.set()
        assert apply.returned.wait(30)
        _join_threads("bloomswarm-apply")
        run_until(daemon, lambda: installed(daemon, 2))
        assert _serves(daemon, v2) and metric(daemon, "delta_installs_total") == 1
        assert _fallbacks(daemon) == {}
        assert any("event=delta_applied" in m for m in caplog.messages)
    finally:
        apply.gate.set()


def test_an_apply_cut_short_by_a_shutdown_is_done_again_after_the_restart(
    *, tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    apply = GatedApply()
    monkeypatch.setattr(APPLY, apply)
    publish(store, KEYS_1, deltas=True)
    first = _agent(tmp_path, origin, daemons, background_polls=True)
    try:
        run_until(first, _settled(lambda: installed(first, 1)))
        v2 = publish(store, KEYS_2, deltas=True)
        run_until(first, _settled(apply.entered.is_set))
        first.shutdown()  # while the apply is under way
        daemons.remove(first)
        layout = DataDir(first.data_dir)
        # What a process killed while applying leaves: a temporary file and, had the
        # rename happened, a result nobody vouched for (here a wrong one).
        (layout.staging_dir(2) / f".tmp-{layout.staged_file(2).name}.x1y2z3").write_bytes(b"half")
        layout.staged_file(2).write_bytes(b"not the result")
        monkeypatch.setattr(APPLY, apply.real)
        caplog.set_level(logging.INFO, logger="bloomswarm.agent")

        again = _agent(tmp_path, origin, daemons)
        assert again.target_version == 2 and again.status()["download"]["delta_from"] == 1
        assert [p.name for p in layout.staging_dir(2).iterdir() if p.name.startswith(".tmp-")] == []
        assert any("event=delta_apply_discarded" in m for m in caplog.messages)
        run_until(again, lambda: installed(again, 2))
        assert _serves(again, v2) and metric(again, "delta_installs_total") == 1
        assert _fallbacks(again) == {}
    finally:
        apply.cancelled = True
        apply.gate.set()
        _join_threads("bloomswarm-apply")


# -- retry before falling back --------------------------------------------------------------


def _v2_with_a_failing_torrent_get(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    caplog: pytest.LogCaptureFixture, *, error: Exception,
) -> tuple[AgentDaemon, FlakySource, Manifest]:
    """An agent on v1 whose first fetch of v2's delta torrent raises ``error``; returns it
    once it installed v2 (by delta or in full), its source, and v2's manifest."""
    publish(store, KEYS_1, deltas=True)
    source = FlakySource(ObjectStoreAnnouncements(origin, list(PUBLIC)), failures=1, error=error)
    daemon = _agent(tmp_path, origin, daemons, source=source)
    run_until(daemon, lambda: installed(daemon, 1))
    caplog.set_level(logging.INFO, logger="bloomswarm.agent")
    v2 = publish(store, KEYS_2, deltas=True)
    run_until(daemon, lambda: installed(daemon, 2))
    return daemon, source, v2


def test_a_transient_failure_to_fetch_the_delta_torrent_is_retried(
    *, tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    retries: list[float], caplog: pytest.LogCaptureFixture,
) -> None:
    daemon, source, v2 = _v2_with_a_failing_torrent_get(
        tmp_path, store, origin, daemons, caplog,
        error=StorageError("GET v2 torrent: HTTP 503 SlowDown (test)"))
    assert _serves(daemon, v2) and metric(daemon, "delta_installs_total") == 1
    assert _fallbacks(daemon) == {} and origin.served[v2.filter_key] == 0
    assert source.calls == 2 and len(retries) == 1 and 0 < retries[0] <= 1.0
    assert sum("event=delta_torrent_retry" in m for m in caplog.messages) == 1


def test_a_missing_delta_torrent_falls_back_at_once_counted_and_logged_once(
    *, tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon],
    retries: list[float], caplog: pytest.LogCaptureFixture,
) -> None:
    daemon, source, v2 = _v2_with_a_failing_torrent_get(
        tmp_path, store, origin, daemons, caplog, error=ObjectNotFound("GET v2 torrent: HTTP 404 (test)"))
    assert _serves(daemon, v2) and origin.served[v2.filter_key] == v2.size
    assert _fallbacks(daemon) == {"missing": 1} and metric(daemon, "delta_installs_total") == 0
    assert source.calls == 1 and retries == []
    assert sum("event=delta_fallback" in m for m in caplog.messages) == 1


def _planning(store: MemoryObjectStore, tmp_path: Path) -> tuple[Manifest, DeltaEntry, DataDir]:
    """v2 with a delta from v1, and a data directory where v1 is installed."""
    v1 = publish(store, KEYS_1, deltas=True)
    v2 = publish(store, KEYS_2, deltas=True)
    entry = v2.delta_from(1)
    assert entry is not None
    layout = DataDir(tmp_path)
    layout.version_dir(1).mkdir(parents=True)
    stored = store.get(v1.filter_key)
    assert stored is not None
    layout.filter_file(1).write_bytes(stored.data)
    return v2, entry, layout


@pytest.mark.parametrize(("failures", "error", "reason", "fetches"), [
    (2, StorageError("HTTP 503 (test)"), None, 3),  # the third attempt succeeds
    (3, StorageError("HTTP 503 (test)"), "missing", 3),  # every attempt fails
    (3, OSError("connection reset (test)"), "missing", 3),
    (1, ObjectNotFound("HTTP 404 (test)"), "missing", 1),  # not found: final at once
])
def test_plan_delta_retries_transient_failures_only(
    *, tmp_path: Path, store: MemoryObjectStore, failures: int, error: Exception, reason: str | None,
    fetches: int,
) -> None:
    v2, entry, layout = _planning(store, tmp_path)
    calls: list[str] = []
    waits: list[float] = []

    def fetch(key: str) -> bytes:
        calls.append(key)
        if len(calls) <= failures:
            raise error
        stored = store.get(key)
        assert stored is not None
        return stored.data

    retry = FetchRetry(attempts=3, initial_s=0.5, maximum_s=1.0, sleep=waits.append)
    if reason is None:
        plan = plan_delta(v2, layout, fetch, retry=retry)
        assert plan is not None and plan.entry == entry
    else:
        with pytest.raises(DeltaFallback) as caught:
            plan_delta(v2, layout, fetch, retry=retry)
        assert caught.value.reason == reason
    assert calls == [entry.torrent_key] * fetches
    assert len(waits) == fetches - 1
    assert all(0.25 <= w <= 0.5 for w in waits[:1]) and all(0.5 <= w <= 1.0 for w in waits[1:])


def test_a_torrent_that_is_not_the_signed_one_falls_back_at_once(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    v2, _entry, layout = _planning(store, tmp_path)
    waits: list[float] = []
    other = store.get(v2.torrent_key)  # a valid torrent, of another file
    assert other is not None
    with pytest.raises(DeltaFallback) as caught:
        plan_delta(v2, layout, lambda _key: other.data, retry=FetchRetry(sleep=waits.append))
    assert caught.value.reason == "delta_hash" and waits == []


def test_a_retry_needs_an_attempt() -> None:
    with pytest.raises(ValueError, match="attempts"):
        FetchRetry(attempts=0)
