"""WorkerPool: bounded, reused threads, calls started in the order submitted; BackgroundCall
on a pool."""

from __future__ import annotations

import functools
import threading
import time

import pytest

from bloomswarm.agent.worker_pool import WorkerPool


def _until(condition: object, limit_s: float = 10.0) -> None:
    assert callable(condition)
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, "not reached"
        time.sleep(0.005)


def test_at_most_size_calls_run_at_once_and_all_run_in_order() -> None:
    pool = WorkerPool(3, name="test")
    gate = threading.Event()
    lock = threading.Lock()
    running, peak, order = [0], [0], []

    def call(n: int) -> None:
        with lock:
            order.append(n)
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        gate.wait(10)
        with lock:
            running[0] -= 1

    for n in range(10):
        pool.submit(functools.partial(call, n))
    _until(lambda: len(order) == 3)
    assert pool.waiting == 7 and pool.threads == 3
    gate.set()
    _until(lambda: len(order) == 10 and running[0] == 0)
    assert peak[0] == 3
    assert order[:3] == sorted(order[:3]) and order[3:] == list(range(3, 10))


def test_threads_are_reused_and_end_when_idle() -> None:
    pool = WorkerPool(4, name="test", idle_s=0.2)
    names: list[str] = []
    done = threading.Event()

    def call() -> None:
        names.append(threading.current_thread().name)
        done.set()

    for _ in range(20):  # one at a time: one thread does them all
        done.clear()
        pool.submit(call)
        assert done.wait(10)
        _until(lambda: pool.idle == 1)  # back waiting: the next call is its
    assert set(names) == {"test-1"}
    _until(lambda: pool.threads == 0)


def test_a_failing_call_is_logged_and_the_worker_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    pool = WorkerPool(1, name="test")
    done = threading.Event()

    def fail() -> None:
        raise RuntimeError("boom")

    pool.submit(fail)
    pool.submit(done.set)
    assert done.wait(10)
    assert "boom" in caplog.text
    assert pool.threads == 1


def test_a_pool_needs_a_thread() -> None:
    with pytest.raises(ValueError):
        WorkerPool(0, name="test")


def test_background_calls_can_share_a_pool() -> None:
    from bloomswarm.agent.background_call import BackgroundCall

    pool = WorkerPool(2, name="polls")
    calls = [BackgroundCall(functools.partial(pow, n, 2), started_at=0.0, pool=pool) for n in range(20)]
    assert all(call.wait(10) for call in calls)
    assert [call.result() for call in calls] == [n * n for n in range(20)]
    assert pool.threads <= 2

    def fail() -> int:
        raise ValueError("bad answer")

    failed = BackgroundCall(fail, started_at=0.0, pool=pool)
    assert failed.wait(10)
    with pytest.raises(ValueError, match="bad answer"):
        failed.result()
    inline = BackgroundCall(lambda: 7, started_at=0.0, thread=False, pool=pool)
    assert inline.done() and inline.result() == 7
