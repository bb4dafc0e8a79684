"""Filter.close() and queries: after close, and while one runs in another thread.

Every query on a closed filter raises ``ValueError("filter is closed")`` with either
engine (the C extension's error); a query under way when the filter is closed either
finishes with the right answer or raises that ValueError — never IndexError, NameError,
TypeError or a crash. The pure-Python engine used to fail the batch paths: a parallel
array batch read the emptied body (IndexError), a sequence batch and ``in`` ran the
generated test after its namespace was cleared (NameError, TypeError).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from bloomswarm.common import batch
from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.fastpath import EXTENSION
from bloomswarm.common.params import Layout
from bloomswarm.common.reader import _PARALLEL_MIN_KEYS, Filter

ENGINES = [
    "python",
    pytest.param("c", marks=pytest.mark.skipif(EXTENSION is None, reason="C extension not built")),
]
LAYOUTS = [Layout.BLOCKED, Layout.STANDARD]
PRESENT = np.arange(0, 2000, dtype=np.uint64)


def _write(tmp_path: Path, layout: Layout) -> Path:
    builder = FilterBuilder.for_capacity(len(PRESENT), 0.01, layout=layout, engine="python")
    builder.add_many(PRESENT)
    builder.add_many([f"key-{i}" for i in range(100)])
    path = tmp_path / f"{layout.label}.bsf"
    builder.write(path)
    return path


class _ClosingKey(str):
    """A str key whose encoding closes the filter: a close() that lands mid-query."""

    target: Filter | None = None

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        if _ClosingKey.target is not None:
            _ClosingKey.target.close()
        return str(self).encode(encoding, errors)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.label)
def test_every_query_on_a_closed_filter_raises_filter_is_closed(
    tmp_path: Path, engine: str, layout: Layout
) -> None:
    f = Filter.open(_write(tmp_path, layout), engine=engine)  # type: ignore[arg-type]
    assert "key-1" in f
    f.close()
    f.close()  # idempotent
    assert f.closed
    many = np.arange(_PARALLEL_MIN_KEYS, dtype=np.uint64)
    queries = [
        lambda: "key-1" in f,
        lambda: f.contains_many(["key-1", "key-2"]),
        lambda: f.contains_many(PRESENT),
        lambda: f.contains_many(many, threads=4),
        f.fill_ratio,
        f.expected_fpp,
    ]
    for query in queries:
        with pytest.raises(ValueError, match=r"^filter is closed$"):
            query()


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.label)
def test_closing_during_a_python_sequence_batch_raises_filter_is_closed(
    tmp_path: Path, layout: Layout
) -> None:
    f = Filter.open(_write(tmp_path, layout), engine="python")
    keys = ["key-1", "key-2", _ClosingKey("key-3"), "key-4"]
    _ClosingKey.target = f
    try:
        with pytest.raises(ValueError, match=r"^filter is closed$"):
            f.contains_many(keys)
    finally:
        _ClosingKey.target = None
    assert f.closed


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.label)
def test_closing_during_a_python_membership_test_raises_filter_is_closed(
    tmp_path: Path, layout: Layout
) -> None:
    f = Filter.open(_write(tmp_path, layout), engine="python")
    _ClosingKey.target = f
    try:
        with pytest.raises(ValueError, match=r"^filter is closed$"):
            _ = _ClosingKey("key-3") in f
    finally:
        _ClosingKey.target = None
    with pytest.raises(ValueError, match=r"^filter is closed$"):
        _ = "key-3" in f


@pytest.mark.parametrize("layout", LAYOUTS, ids=lambda layout: layout.label)
def test_closing_during_a_parallel_python_batch_finishes_it(
    tmp_path: Path, layout: Layout, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _write(tmp_path, layout)
    keys = np.arange(4 * _PARALLEL_MIN_KEYS, dtype=np.uint64)
    with Filter.open(path, engine="python") as reference:
        expected = reference.contains_many(keys)
    f = Filter.open(path, engine="python")
    original = batch.contains_u64
    calls: list[int] = []

    def close_on_first_call(
        body: npt.NDArray[np.uint8], chunk: batch.U64Array, params: object
    ) -> npt.NDArray[np.bool_]:
        if not calls:  # (close() is idempotent: a race to here closes it once all the same)
            f.close()  # the other threads' shares are still to come
        calls.append(len(chunk))
        return original(body, chunk, params)  # type: ignore[arg-type]

    monkeypatch.setattr(batch, "contains_u64", close_on_first_call)
    result = f.contains_many(keys, threads=4)
    assert len(calls) == 4 and f.closed
    np.testing.assert_array_equal(result, expected)
    assert result[: len(PRESENT)].all()
    with pytest.raises(ValueError, match=r"^filter is closed$"):
        f.contains_many(keys, threads=4)
