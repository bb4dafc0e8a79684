"""LiveFilter over an agent data directory: hot swaps, refusals, callbacks, watching, release.

The data directory has the agent's layout (common/datadir.py): ``versions/vN/filter.bsf``
and a ``current`` symlink flipped atomically by ``DataDir.flip_current``.
"""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.errors import NotReadyError
from bloomswarm.common.fastpath import EXTENSION
from bloomswarm.common.header import HEADER_SIZE
from bloomswarm.common.live import LiveFilter
from bloomswarm.common.reader import Filter

ENGINES = [
    "python",
    pytest.param("c", marks=pytest.mark.skipif(EXTENSION is None, reason="C extension not built")),
]

COMMON = [f"common-{i}" for i in range(2000)]
A_ONLY = [f"a-only-{i}" for i in range(300)]
B_ONLY = [f"b-only-{i}" for i in range(300)]

QUIET = {"watch": False, "poll_interval": 3600.0}
"""No watchdog, no effective polling: only explicit refresh() calls swap."""


def install(data_dir: Path, version: int, keys: Sequence[str], *, flip: bool = False) -> Path:
    """Write ``keys`` as version ``version`` of ``data_dir``; optionally point ``current`` at it."""
    builder = FilterBuilder.for_capacity(max(len(keys), 1), 0.01, engine="python")
    builder.add_many(keys)
    path = DataDir(data_dir).filter_file(version)
    path.parent.mkdir(parents=True, exist_ok=True)
    builder.write(path, version=version)
    if flip:
        DataDir(data_dir).flip_current(version)
    return path


def wait_until(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``condition`` until it is true or ``timeout`` seconds passed; return its last value."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def answers(path: Path, keys: Sequence[str]) -> npt.NDArray[np.bool_]:
    """The membership vector of ``keys`` in the filter file at ``path``."""
    with Filter.open(path, engine="python") as f:
        return f.contains_many(list(keys)).copy()


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    return d


@pytest.fixture
def two_versions(data_dir: Path) -> tuple[Path, Path]:
    """v1 = COMMON + A_ONLY, v2 = COMMON + B_ONLY; ``current`` -> v1."""
    a = install(data_dir, 1, COMMON + A_ONLY)
    b = install(data_dir, 2, COMMON + B_ONLY, flip=False)
    DataDir(data_dir).flip_current(1)
    return a, b


# -- hot swap -------------------------------------------------------------------------


@pytest.mark.parametrize("engine", ENGINES)
def test_hot_swap_under_concurrent_lookups(
    data_dir: Path, two_versions: tuple[Path, Path], engine: str
) -> None:
    path_a, path_b = two_versions
    batch = A_ONLY + B_ONLY
    vec_a, vec_b = answers(path_a, batch), answers(path_b, batch)
    assert vec_a[: len(A_ONLY)].all() and vec_b[len(A_ONLY):].all()
    assert not np.array_equal(vec_a, vec_b)  # otherwise a torn answer could go unnoticed

    stop = threading.Event()
    errors: list[BaseException] = []
    seen: list[set[str]] = [set() for _ in range(4)]
    lookups = [0] * 4

    def worker(index: int, live: LiveFilter) -> None:
        try:
            while not stop.is_set():
                for key in COMMON[index::40]:
                    if key not in live:
                        raise AssertionError(f"false negative for {key!r}")
                got = live.contains_many(batch)
                if np.array_equal(got, vec_a):
                    seen[index].add("a")
                elif np.array_equal(got, vec_b):
                    seen[index].add("b")
                else:
                    raise AssertionError("contains_many answered from a mixture of versions")
                lookups[index] += 1
        except BaseException as exc:
            errors.append(exc)

    with LiveFilter(data_dir, poll_interval=0.05, engine=engine) as live:  # type: ignore[arg-type]
        assert live.version == 1
        threads = [threading.Thread(target=worker, args=(i, live)) for i in range(4)]
        for t in threads:
            t.start()
        try:
            for flip in range(50):
                version = 2 if flip % 2 == 0 else 1
                DataDir(data_dir).flip_current(version)
                live.refresh()  # the watchdog may have swapped already; either way:
                assert live.version == version
                time.sleep(0.01)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
        assert errors == []
        # Every flip changed the serving version, so each needed at least one swap.
        assert live.swap_count >= 51
        assert all(n > 0 for n in lookups)
        assert set().union(*seen) == {"a", "b"}
        assert live.filter.engine == engine


def _child_lookups(
    data_dir: str, keys: list[str], stop: Any, results: Any
) -> None:  # pragma: no cover - runs in the spawned child
    """Spawned child: look up ``keys`` in a LiveFilter until ``stop``; report counts."""
    errors = lookups = false_negatives = 0
    seen: set[int | None] = set()
    first_error = ""
    live = LiveFilter(data_dir, poll_interval=0.01, wait=10)
    results.put(("ready", os.getpid(), live.version))
    try:
        while not stop.is_set():
            for key in keys:
                try:
                    if key not in live:
                        false_negatives += 1
                except Exception as exc:
                    errors += 1
                    first_error = first_error or repr(exc)
                lookups += 1
            seen.add(live.version)
    finally:
        live.close()
        results.put(
            ("done", {"errors": errors, "false_negatives": false_negatives, "lookups": lookups,
                      "seen": sorted(v for v in seen if v is not None), "first_error": first_error})
        )


def test_hot_swap_seen_from_another_process(
    data_dir: Path, two_versions: tuple[Path, Path]
) -> None:
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    results = ctx.Queue()
    child = ctx.Process(
        target=_child_lookups, args=(str(data_dir), COMMON[::10], stop, results), daemon=True
    )
    child.start()
    try:
        tag, pid, first_version = results.get(timeout=60)
        assert (tag, pid, first_version) == ("ready", child.pid, 1)
        for flip in range(50):
            DataDir(data_dir).flip_current(2 if flip % 2 == 0 else 1)
            time.sleep(0.05)
        stop.set()
        tag, report = results.get(timeout=60)
        assert tag == "done"
        child.join(timeout=30)
        assert child.exitcode == 0
    finally:
        stop.set()
        if child.is_alive():
            child.terminate()
            child.join(timeout=10)
        if child.is_alive():
            child.kill()
            child.join(timeout=10)
        results.close()
        results.join_thread()
    assert report["errors"] == 0, report["first_error"]
    assert report["false_negatives"] == 0
    assert report["lookups"] > 0
    assert report["seen"] == [1, 2]


# -- refusing bad files ---------------------------------------------------------------


def _truncate(path: Path) -> None:
    os.chmod(path, 0o644)
    os.truncate(path, path.stat().st_size - 64)


def _break_header_crc(path: Path) -> None:
    os.chmod(path, 0o644)
    with open(path, "r+b") as fh:
        fh.seek(64)  # created_at: still a plausible header, only the CRC disagrees
        byte = fh.read(1)
        fh.seek(64)
        fh.write(bytes([byte[0] ^ 0xFF]))


def _corrupt_body(path: Path) -> None:
    os.chmod(path, 0o644)
    with open(path, "r+b") as fh:
        fh.seek(HEADER_SIZE + 10)
        byte = fh.read(1)
        fh.seek(HEADER_SIZE + 10)
        fh.write(bytes([byte[0] ^ 0x01]))


@pytest.mark.parametrize(
    ("damage", "verify", "message"),
    [
        (_truncate, False, "truncated"),
        (_break_header_crc, False, "CRC-32"),
        (_corrupt_body, True, "SHA-256"),
    ],
    ids=["truncated", "bad-header-crc", "corrupt-body-verified"],
)
def test_bad_new_file_is_refused_and_old_keeps_serving(
    data_dir: Path, damage: Callable[[Path], None], verify: bool, message: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    install(data_dir, 1, COMMON, flip=True)
    bad = install(data_dir, 2, COMMON + B_ONLY)
    damage(bad)
    with LiveFilter(data_dir, verify=verify, **QUIET) as live:  # type: ignore[arg-type]
        assert live.version == 1
        DataDir(data_dir).flip_current(2)
        with caplog.at_level(logging.ERROR, logger="bloomswarm.live"):
            assert live.refresh() is False
        assert live.version == 1
        assert live.swap_count == 1
        assert live.rejected_count == 1
        assert live.last_error is not None
        assert message in live.last_error
        assert "v2" in live.last_error or str(data_dir) in live.last_error
        assert any("refusing" in r.getMessage() for r in caplog.records)
        assert all(k in live for k in COMMON[:200])
        assert live.contains_many(COMMON[:200]).all()
        # The same bad file is not retried (and not counted) on every poll.
        assert live.refresh() is False
        assert live.rejected_count == 1

        install(data_dir, 3, COMMON + A_ONLY, flip=True)
        assert live.refresh() is True
        assert live.version == 3
        assert live.swap_count == 2
        assert live.rejected_count == 1
        assert all(k in live for k in A_ONLY)


def test_missing_current_file_keeps_old_version(data_dir: Path) -> None:
    install(data_dir, 1, COMMON, flip=True)
    with LiveFilter(data_dir, **QUIET) as live:  # type: ignore[arg-type]
        os.unlink(data_dir / "current")
        assert live.refresh() is False
        assert live.version == 1
        assert COMMON[0] in live
        assert live.rejected_count == 0


# -- callbacks ----------------------------------------------------------------------


def test_on_swap_receives_old_and_new(data_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    calls: list[tuple[int | None, int]] = []

    def broken(old: Filter | None, new: Filter) -> None:
        raise RuntimeError("callback bug")

    def record(old: Filter | None, new: Filter) -> None:
        assert COMMON[0] in new
        calls.append((None if old is None else old.version, new.version))

    with LiveFilter(data_dir, **QUIET) as live:  # type: ignore[arg-type]
        live.on_swap(broken)
        live.on_swap(record)
        install(data_dir, 1, COMMON, flip=True)
        with caplog.at_level(logging.ERROR, logger="bloomswarm.live"):
            assert live.refresh() is True
        assert calls == [(None, 1)]
        assert any("on_swap callback failed" in r.getMessage() for r in caplog.records)
        install(data_dir, 2, COMMON, flip=True)
        assert live.refresh() is True
        install(data_dir, 3, COMMON, flip=True)
        assert live.refresh() is True
        DataDir(data_dir).flip_current(1)
        assert live.refresh() is True
        assert calls == [(None, 1), (1, 2), (2, 3), (3, 1)]
        assert live.version == 1
        assert live.swap_count == 4


# -- before the first version ----------------------------------------------------------


def test_not_ready_before_any_version(data_dir: Path) -> None:
    with LiveFilter(data_dir, **QUIET) as live:  # type: ignore[arg-type]
        assert live.version is None
        assert live.swap_count == 0
        with pytest.raises(NotReadyError):
            _ = "key" in live
        with pytest.raises(NotReadyError):
            live.contains_many(["key"])
        with pytest.raises(NotReadyError):
            _ = live.filter
        assert live.refresh() is False
        install(data_dir, 1, COMMON, flip=True)
        assert live.refresh() is True
        assert COMMON[5] in live
        assert live.filter.version == 1


def test_wait_gives_up_quietly_when_nothing_appears(data_dir: Path) -> None:
    with LiveFilter(data_dir, wait=0.2, **QUIET) as live:  # type: ignore[arg-type]
        assert live.version is None


def test_wait_picks_up_a_version_that_appears_later(data_dir: Path) -> None:
    errors: list[BaseException] = []

    def publish() -> None:
        try:
            time.sleep(0.3)
            install(data_dir, 7, COMMON, flip=True)
        except BaseException as exc:
            errors.append(exc)

    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        with LiveFilter(data_dir, wait=20, **QUIET) as live:  # type: ignore[arg-type]
            assert live.version == 7
            assert COMMON[0] in live
    finally:
        publisher.join(timeout=30)
    assert errors == []


# -- noticing flips by themselves -------------------------------------------------------------


def test_watchdog_alone_notices_a_flip(data_dir: Path) -> None:
    install(data_dir, 1, COMMON, flip=True)
    install(data_dir, 2, COMMON)
    with LiveFilter(data_dir, watch=True, poll_interval=3600) as live:
        assert live.version == 1
        DataDir(data_dir).flip_current(2)
        assert wait_until(lambda: live.version == 2, timeout=10), "watchdog did not notice the flip"
        DataDir(data_dir).flip_current(1)
        assert wait_until(lambda: live.version == 1, timeout=10)


def test_stat_polling_alone_notices_a_flip(data_dir: Path) -> None:
    install(data_dir, 1, COMMON, flip=True)
    install(data_dir, 2, COMMON)
    with LiveFilter(data_dir, watch=False, poll_interval=0.05) as live:
        assert live.version == 1
        DataDir(data_dir).flip_current(2)
        assert wait_until(lambda: live.version == 2, timeout=10), "polling did not notice the flip"
        DataDir(data_dir).flip_current(1)
        assert wait_until(lambda: live.version == 1, timeout=10)


def test_close_stops_following(data_dir: Path) -> None:
    install(data_dir, 1, COMMON, flip=True)
    install(data_dir, 2, COMMON)
    live = LiveFilter(data_dir, watch=True, poll_interval=0.02)
    live.close()
    live.close()  # idempotent
    DataDir(data_dir).flip_current(2)
    time.sleep(0.3)
    assert live.version == 1
    assert COMMON[0] in live  # the current filter stays usable after close


# -- releasing old mappings --------------------------------------------------------------


def _mapped_paths() -> set[str]:
    paths = set()
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            if len(fields) == 6:
                paths.add(fields[5].strip())
    return paths


@pytest.fixture
def mapped_paths() -> Iterator[Callable[[], set[str]]]:
    if not os.path.exists("/proc/self/maps"):
        pytest.skip("needs /proc/self/maps")
    yield _mapped_paths


@pytest.mark.parametrize("engine", ENGINES)
def test_old_mapping_released_after_swap(
    data_dir: Path, mapped_paths: Callable[[], set[str]], engine: str
) -> None:
    v1 = os.path.realpath(install(data_dir, 1, COMMON, flip=True))
    v2 = os.path.realpath(install(data_dir, 2, COMMON))
    with LiveFilter(data_dir, engine=engine, **QUIET) as live:  # type: ignore[arg-type]
        assert live.contains_many(COMMON[:50]).all()
        assert v1 in mapped_paths()
        DataDir(data_dir).flip_current(2)
        assert live.refresh() is True
        assert live.contains_many(COMMON[:50]).all()
        gc.collect()
        maps = mapped_paths()
        assert v2 in maps
        assert v1 not in maps, "the swapped-out version is still mapped"


def test_old_mapping_kept_while_a_snapshot_is_held(
    data_dir: Path, mapped_paths: Callable[[], set[str]]
) -> None:
    v1 = os.path.realpath(install(data_dir, 1, COMMON, flip=True))
    install(data_dir, 2, COMMON + B_ONLY)
    with LiveFilter(data_dir, **QUIET) as live:  # type: ignore[arg-type]
        snapshot: Filter | None = live.filter
        DataDir(data_dir).flip_current(2)
        assert live.refresh() is True
        gc.collect()
        assert v1 in mapped_paths()
        assert snapshot is not None and snapshot.version == 1
        assert COMMON[0] in snapshot  # still answers from v1 after the swap
        snapshot = None
        gc.collect()
        assert v1 not in mapped_paths()


def test_contains_many_accepts_numpy_arrays(data_dir: Path) -> None:
    builder = FilterBuilder.for_capacity(1000, 0.001, engine="python")
    ints = np.arange(1000, dtype=np.uint64) * 7919
    builder.add_many(ints)
    path = DataDir(data_dir).filter_file(1)
    path.parent.mkdir(parents=True)
    builder.write(path, version=1)
    DataDir(data_dir).flip_current(1)
    with LiveFilter(data_dir, **QUIET) as live:  # type: ignore[arg-type]
        assert live.contains_many(ints).all()
        assert int(ints[3]) in live
        assert live.contains_many(ints + np.uint64(1)).sum() < 50



@pytest.mark.parametrize("watch", [False, True])
def test_a_forked_child_follows_swaps_on_its_own(data_dir: Path, two_versions: tuple[Path, Path],
                                                 watch: bool) -> None:
    """A pre-fork server's workers: the threads that follow ``current`` do not survive a
    fork, so the child starts its own and sees the next swap as the parent does."""
    with LiveFilter(data_dir, watch=watch, poll_interval=0.05) as live:
        assert live.version == 1
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report whether it saw v2 within 10 s, then leave at once
            os.close(read_end)
            seen = wait_until(lambda: live.version == 2 and B_ONLY[0] in live, timeout=10.0)
            os.write(write_end, b"1" if seen else b"0")
            os._exit(0)
        os.close(write_end)
        try:
            DataDir(data_dir).flip_current(2)
            assert wait_until(lambda: live.version == 2)
            assert os.read(read_end, 1) == b"1"  # blocks until the child answered
        finally:
            os.close(read_end)
            os.waitpid(pid, 0)


def _mapped_deleted(root: Path) -> int:
    """Mappings of this process into files under ``root`` that were deleted."""
    with open("/proc/self/maps") as maps:
        return sum(1 for line in maps if str(root) in line and "(deleted)" in line)


@pytest.mark.parametrize("engine", ENGINES)
def test_old_versions_are_unmapped_once_dropped_without_a_collection(data_dir: Path, engine: str) -> None:
    """A swapped-out version's mapping goes when its last user drops it, not at the next
    garbage collection (the Python engine's generated test referred back to its bits)."""
    import gc
    import shutil

    install(data_dir, 1, COMMON, flip=True)
    gc.disable()
    try:
        with LiveFilter(data_dir, engine=engine, **QUIET) as live:  # type: ignore[arg-type]
            for version in range(2, 8):
                install(data_dir, version, [*COMMON, f"v{version}"], flip=True)
                assert live.refresh() and live.version == version
                shutil.rmtree(DataDir(data_dir).version_dir(version - 1))
            assert _mapped_deleted(data_dir) == 0
            closed = Filter.open(DataDir(data_dir).filter_file(7), engine=engine)  # type: ignore[arg-type]
            closed.close()
            with open("/proc/self/maps") as maps:
                assert sum(str(DataDir(data_dir).filter_file(7)) in line for line in maps) == 1  # live's
    finally:
        gc.enable()
