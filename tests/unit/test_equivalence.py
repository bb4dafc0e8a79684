"""Every code path gives the same bits and the same answers (docs/format.md).

The pure-Python reference (probing.bit_indexes), the numpy batch path and the C
extension are compared on random keys: empty, long and unicode keys, ints at their
bounds. And whatever was inserted is found: no false negatives, ever.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from bitarray import bitarray
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bloomswarm.common import FilterBuilder, FilterParams, Layout
from bloomswarm.common.batch import bit_indexes_u64, hash_u64
from bloomswarm.common.fastpath import EXTENSION
from bloomswarm.common.probing import bit_indexes, key_hash

HAVE_C = EXTENSION is not None
ENGINES = ["python"] + (["c"] if HAVE_C else [])

keys_strategy = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=100),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from([b"", "", 0, -1, -(2**63), 2**63 - 1, "\U0010ffff" * 50, b"\xff" * 1000]),
)

params_strategy = st.one_of(
    st.builds(
        lambda blocks, k, seed: FilterParams(Layout.BLOCKED, 512 * blocks, k, seed),
        st.integers(1, 5000), st.integers(1, 10), st.integers(0, 2**32 - 1),
    ),
    st.builds(
        lambda words, k, seed: FilterParams(Layout.STANDARD, 64 * words, k, seed),
        st.integers(1, 50000), st.integers(1, 32), st.integers(0, 2**32 - 1),
    ),
)

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def reference_body(params: FilterParams, keys: list[object]) -> bytes:
    bits = bitarray(params.num_bits, endian="little")
    bits.setall(0)
    for key in keys:
        for i in bit_indexes(key, params):  # type: ignore[arg-type]
            bits[i] = 1
    return bits.tobytes()


@SETTINGS
@given(params=params_strategy, keys=st.lists(keys_strategy, max_size=60))
def test_builders_are_bit_identical_to_the_reference(params: FilterParams, keys: list[object]) -> None:
    expected = reference_body(params, keys)
    for engine in ENGINES:
        builder = FilterBuilder(params, engine=engine)  # type: ignore[arg-type]
        builder.add_many(keys)  # type: ignore[arg-type]
        assert bytes(builder.body) == expected, engine
        assert builder.key_count == len(keys)


@SETTINGS
@given(params=params_strategy, values=st.lists(st.integers(0, 2**64 - 1), max_size=60))
def test_u64_batches_equal_int_keys(params: FilterParams, values: list[int]) -> None:
    """A uint64 array element hashes like the int with the same 8 little-endian bytes."""
    as_ints = [v - 2**64 if v >= 2**63 else v for v in values]
    expected = reference_body(params, as_ints)  # type: ignore[arg-type]
    array = np.array(values, dtype=np.uint64)
    for engine in ENGINES:
        builder = FilterBuilder(params, engine=engine)  # type: ignore[arg-type]
        builder.add_many(array)
        assert bytes(builder.body) == expected, engine
        builder_i64 = FilterBuilder(params, engine=engine)  # type: ignore[arg-type]
        builder_i64.add_many(array.view(np.int64))
        assert bytes(builder_i64.body) == expected, engine


@SETTINGS
@given(params=params_strategy, values=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40))
def test_numpy_indexes_equal_reference_indexes(params: FilterParams, values: list[int]) -> None:
    array = np.array(values, dtype=np.uint64)
    got = bit_indexes_u64(array, params)
    for row, value in zip(got, values, strict=True):
        assert [int(x) for x in row] == bit_indexes(value - 2**64 if value >= 2**63 else value, params)


@given(values=st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=40), seed=st.integers(0, 2**32 - 1))
def test_numpy_murmur_equals_mmh3(values: list[int], seed: int) -> None:
    h1, h2 = hash_u64(np.array(values, dtype=np.uint64), seed)
    for a, b, value in zip(h1, h2, values, strict=True):
        assert (int(b) << 64) | int(a) == key_hash(value.to_bytes(8, "little"), seed)


@pytest.mark.parametrize("engine", ENGINES)
@SETTINGS
@given(params=params_strategy, keys=st.lists(keys_strategy, min_size=1, max_size=80),
       probes=st.lists(keys_strategy, max_size=80))
def test_answers_agree_and_no_false_negatives(
    engine: str,
    params: FilterParams,
    keys: list[Any],
    probes: list[Any],
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    from bloomswarm.common import Filter

    builder = FilterBuilder(params, engine=engine)  # type: ignore[arg-type]
    builder.add_many(keys)
    path = tmp_path_factory.mktemp("eq") / "f.bsf"
    builder.write(path)
    reference = reference_body(params, keys)
    ref_bits = bitarray(endian="little")
    ref_bits.frombytes(reference)
    with Filter.open(path, engine=engine) as f:  # type: ignore[arg-type]
        assert all(key in f for key in keys)  # no false negatives
        assert f.contains_many(keys).all()
        expected = [all(ref_bits[i] for i in bit_indexes(p, params)) for p in probes]
        assert [p in f for p in probes] == expected
        assert f.contains_many(probes).tolist() == expected


@pytest.mark.parametrize("engine", ENGINES)
def test_u64_batch_answers_agree_across_engines(engine: str, tmp_path: Path) -> None:
    from bloomswarm.common import Filter

    rng = np.random.default_rng(7)
    inserted = rng.integers(0, 2**64 - 1, size=20000, dtype=np.uint64)
    queried = np.concatenate([inserted, rng.integers(0, 2**64 - 1, size=50000, dtype=np.uint64)])
    for layout in Layout:
        builder = FilterBuilder.for_capacity(20000, 0.05, layout=layout, engine=engine)  # type: ignore[arg-type]
        builder.add_many(inserted)
        path = tmp_path / f"{layout.label}.bsf"
        builder.write(path)
        with Filter.open(path, engine=engine) as f, Filter.open(path, engine="python") as ref:  # type: ignore[arg-type]
            got = f.contains_many(queried)
            assert got[:20000].all()
            assert np.array_equal(f.contains_many(queried, threads=3), got)
            assert np.array_equal(got, ref.contains_many(queried))
            sample = [int(v) - 2**64 if v >= 2**63 else int(v) for v in queried[::97]]
            assert [s in ref for s in sample] == got[::97].tolist()


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(
    ("key", "error"),
    [(2**63, OverflowError), (-(2**63) - 1, OverflowError), (1.5, TypeError), (None, TypeError),
     ("\ud800", UnicodeEncodeError)],
    ids=["int-too-big", "int-too-small", "float", "none", "lone-surrogate"],
)
def test_bad_keys_raise_the_same_error_on_every_path(
    engine: str, key: object, error: type[Exception], tmp_path: Path
) -> None:
    from bloomswarm.common import Filter

    builder = FilterBuilder(FilterParams(Layout.BLOCKED, 512, 3), engine=engine)  # type: ignore[arg-type]
    with pytest.raises(error):
        builder.add(key)  # type: ignore[arg-type]
    path = tmp_path / "f.bsf"
    builder.write(path)
    with Filter.open(path, engine=engine) as f:  # type: ignore[arg-type]
        with pytest.raises(error):
            _ = key in f  # type: ignore[operator]
        with pytest.raises(error):
            f.contains_many([b"ok", key])  # type: ignore[list-item]
