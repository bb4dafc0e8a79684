"""Tests of the C extension module itself (csrc/bloomfast.c).

Everything is checked against a small pure-Python reference written here from
docs/format.md (mmh3 + the probing formulas), independent of the package's own paths.
"""

from __future__ import annotations

import array
import gc
import mmap
import os
import random
import sys
import threading
from collections.abc import Sequence
from typing import Any

import mmh3
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

bf: Any = pytest.importorskip("bloomswarm.common._bloomfast")

BLOCKED = 1
STANDARD = 2
MASK64 = 2**64 - 1
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

# -- the reference (docs/format.md) ----------------------------------------------------


def encode(key: object) -> bytes:
    if isinstance(key, (bytes, bytearray, memoryview)):
        return bytes(key)
    if isinstance(key, str):
        return key.encode("utf-8")
    if isinstance(key, int):
        return key.to_bytes(8, "little", signed=True)
    raise TypeError(type(key).__name__)


def positions(layout: int, seed: int, k: int, num_bits: int, data: bytes) -> list[int]:
    h = mmh3.hash128(data, seed, signed=False)
    h1, h2 = h & MASK64, h >> 64
    if layout == BLOCKED:
        block = ((h >> 96) * (num_bits // 512)) >> 32
        return [block * 512 + ((h >> (9 * i)) & 511) for i in range(k)]
    return [((h1 + i * h2) & MASK64) % num_bits for i in range(k)]


def ref_add(body: bytearray, params: tuple[int, int, int, int], keys: Sequence[object]) -> None:
    for key in keys:
        for b in positions(*params, encode(key)):
            body[b >> 3] |= 1 << (b & 7)


def ref_contains(body: bytes | bytearray | mmap.mmap, params: tuple[int, int, int, int], key: object) -> bool:
    return all(body[b >> 3] >> (b & 7) & 1 for b in positions(*params, encode(key)))


def u64_bytes(value: int) -> bytes:
    return (value & MASK64).to_bytes(8, "little")


# A spread of parameter sets: (layout, seed, k, num_bits)
PARAMS = [
    (BLOCKED, 0, 6, 512 * 97),
    (BLOCKED, 2**32 - 1, 10, 512 * 13),
    (BLOCKED, 7, 1, 512),
    (BLOCKED, 12345, 3, 512 * 1000),
    (STANDARD, 0, 7, 64 * 1001),
    (STANDARD, 2**32 - 1, 32, 64 * 37),
    (STANDARD, 99, 1, 64),
    (STANDARD, 3, 4, 64 * 1024),
]
PARAM_IDS = [f"L{p[0]}-s{p[1]}-k{p[2]}-m{p[3]}" for p in PARAMS]

EDGE_KEYS: list[object] = [
    b"",
    "",
    b"\x00",
    b"a" * 15,
    b"b" * 16,
    b"c" * 17,
    os.urandom(1000),
    os.urandom(4099),
    "x" * 1500,
    "héllo wörld",
    "日本語のキー",
    "emoji \U0001f600",
    0,
    1,
    -1,
    INT64_MIN,
    INT64_MAX,
    2**32,
    True,
    False,
    bytearray(b"bytearray key"),
    memoryview(b"0123456789")[2:7],
]


def random_keys(rng: random.Random, n: int) -> list[object]:
    keys: list[object] = []
    for i in range(n):
        kind = i % 3
        if kind == 0:
            keys.append(rng.randbytes(rng.randrange(0, 40)))
        elif kind == 1:
            length = rng.randrange(0, 12)
            keys.append("".join(chr(rng.randrange(32, 0x3000)) for _ in range(length)))
        else:
            keys.append(rng.randrange(INT64_MIN, INT64_MAX + 1))
    return keys


def bound_probe(body: Any, params: tuple[int, int, int, int]) -> Any:
    probe = bf.Probe()
    probe._bind(body, *params)
    return probe


# -- hashing ---------------------------------------------------------------------------


@pytest.mark.parametrize("length", [*range(0, 48), 100, 1000, 4097])
@pytest.mark.parametrize("seed", [0, 1, 0x9747B28C, 2**32 - 1])
def test_murmur3_matches_mmh3(length: int, seed: int) -> None:
    data = os.urandom(length)
    assert bf.murmur3_x64_128(data, seed) == mmh3.hash64(data, seed, signed=False)


@given(st.binary(max_size=300), st.integers(0, 2**32 - 1))
def test_murmur3_matches_mmh3_hypothesis(data: bytes, seed: int) -> None:
    assert bf.murmur3_x64_128(data, seed) == mmh3.hash64(data, seed, signed=False)


def test_murmur3_accepts_buffers_and_checks_seed() -> None:
    data = b"some key bytes"
    expected = mmh3.hash64(data, 5, signed=False)
    assert bf.murmur3_x64_128(bytearray(data), 5) == expected
    assert bf.murmur3_x64_128(memoryview(b"xx" + data)[2:], 5) == expected
    with pytest.raises(ValueError):
        bf.murmur3_x64_128(data, -1)
    with pytest.raises(ValueError):
        bf.murmur3_x64_128(data, 2**32)
    with pytest.raises(TypeError):
        bf.murmur3_x64_128("text", 0)


# -- inserts and lookups against the reference -------------------------------------------


@pytest.mark.parametrize("params", PARAMS, ids=PARAM_IDS)
def test_add_keys_sets_the_reference_bits(params: tuple[int, int, int, int]) -> None:
    keys = EDGE_KEYS + random_keys(random.Random(params[3]), 600)
    body = bytearray(params[3] // 8)
    ref = bytearray(params[3] // 8)
    assert bf.add_keys(body, *params, keys) is None
    ref_add(ref, params, keys)
    assert body == ref


@pytest.mark.parametrize("params", PARAMS, ids=PARAM_IDS)
def test_lookups_match_the_reference(params: tuple[int, int, int, int]) -> None:
    rng = random.Random(params[1] ^ params[3])
    inserted = EDGE_KEYS + random_keys(rng, 300)
    body = bytearray(params[3] // 8)
    ref_add(body, params, inserted)
    probe = bound_probe(bytes(body), params)
    queries = inserted + random_keys(rng, 1500)
    expected = [ref_contains(body, params, key) for key in queries]
    assert [key in probe for key in queries] == expected
    assert all(key in probe for key in inserted)
    out = np.zeros(len(queries), dtype=np.bool_)
    assert probe._contains_keys(queries, out) is None
    assert out.tolist() == expected
    out_t = np.zeros(len(queries), dtype=np.uint8)
    probe._contains_keys(tuple(queries), out_t)
    assert out_t.tolist() == [int(e) for e in expected]


@pytest.mark.parametrize("params", PARAMS, ids=PARAM_IDS)
@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 33, 511, 2000])
def test_u64_batches_match_the_reference(params: tuple[int, int, int, int], n: int) -> None:
    gen = np.random.default_rng(n + params[3])
    keys = gen.integers(0, 2**64, size=n, dtype=np.uint64)
    keys[: min(n, 4)] = np.array([0, 2**63 - 1, 2**63, 2**64 - 1], dtype=np.uint64)[: min(n, 4)]
    body = bytearray(params[3] // 8)
    assert bf.add_u64(body, *params, keys) is None
    ref = bytearray(params[3] // 8)
    ref_add(ref, params, [u64_bytes(int(x)) for x in keys])
    assert body == ref

    probe = bound_probe(body, params)
    queries = np.concatenate([keys, gen.integers(0, 2**64, size=3 * n + 5, dtype=np.uint64)])
    out = np.zeros(len(queries), dtype=np.bool_)
    assert probe._contains_u64(queries, out) is None
    expected = [ref_contains(ref, params, u64_bytes(int(x))) for x in queries]
    assert out.tolist() == expected
    assert out[:n].all()


@pytest.mark.parametrize("params", PARAMS[:1] + PARAMS[4:5], ids=PARAM_IDS[:1] + PARAM_IDS[4:5])
def test_u64_keys_match_int_keys(params: tuple[int, int, int, int]) -> None:
    ints = [0, 1, -1, 2, INT64_MIN, INT64_MAX, 123456789, -987654321]
    signed = np.array(ints, dtype=np.int64)
    body_a = bytearray(params[3] // 8)
    body_b = bytearray(params[3] // 8)
    body_c = bytearray(params[3] // 8)
    bf.add_u64(body_a, *params, signed)
    bf.add_u64(body_b, *params, signed.view(np.uint64))
    bf.add_keys(body_c, *params, ints)
    assert body_a == body_b == body_c
    # array.array works as well as numpy
    body_d = bytearray(params[3] // 8)
    bf.add_u64(body_d, *params, array.array("q", ints))
    assert body_d == body_a
    probe = bound_probe(body_a, params)
    out = np.zeros(len(ints), dtype=np.bool_)
    probe._contains_u64(array.array("Q", [x & MASK64 for x in ints]), out)
    assert out.all()


keys_strategy = st.one_of(
    st.binary(max_size=1200),
    st.text(max_size=300),
    st.integers(INT64_MIN, INT64_MAX),
)
params_strategy = st.one_of(
    st.tuples(
        st.just(BLOCKED),
        st.integers(0, 2**32 - 1),
        st.integers(1, 10),
        st.integers(1, 64).map(lambda b: b * 512),
    ),
    st.tuples(
        st.just(STANDARD),
        st.integers(0, 2**32 - 1),
        st.integers(1, 32),
        st.integers(1, 512).map(lambda w: w * 64),
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(params_strategy, st.lists(keys_strategy, max_size=40), st.lists(keys_strategy, max_size=40))
def test_hypothesis_matches_reference(
    params: tuple[int, int, int, int], inserted: list[object], queries: list[object]
) -> None:
    body = bytearray(params[3] // 8)
    ref = bytearray(params[3] // 8)
    bf.add_keys(body, *params, inserted)
    ref_add(ref, params, inserted)
    assert body == ref
    probe = bound_probe(body, params)
    for key in inserted + queries:
        assert (key in probe) == ref_contains(ref, params, key)
    out = np.zeros(len(queries), dtype=np.bool_)
    probe._contains_keys(queries, out)
    assert out.tolist() == [ref_contains(ref, params, key) for key in queries]


@settings(max_examples=100, deadline=None)
@given(params_strategy, st.lists(st.integers(0, MASK64), max_size=64))
def test_hypothesis_u64_matches_reference(params: tuple[int, int, int, int], values: list[int]) -> None:
    keys = np.array(values, dtype=np.uint64)
    body = bytearray(params[3] // 8)
    ref = bytearray(params[3] // 8)
    bf.add_u64(body, *params, keys)
    ref_add(ref, params, [u64_bytes(v) for v in values])
    assert body == ref
    out = np.zeros(len(values), dtype=np.bool_)
    bound_probe(body, params)._contains_u64(keys, out)
    assert out.all()


def test_key_subclasses_encode_like_their_base() -> None:
    class B(bytes):
        pass

    class S(str):
        pass

    class I(int):  # noqa: E742
        pass

    params = PARAMS[0]
    body = bytearray(params[3] // 8)
    bf.add_keys(body, *params, [B(b"bytes-sub"), S("str-sub"), I(-42)])
    probe = bound_probe(body, params)
    assert b"bytes-sub" in probe
    assert "str-sub" in probe
    assert -42 in probe
    assert (True in probe) == ref_contains(body, params, 1)


def test_large_sparse_bodies() -> None:
    """Big num_bits (block index near 2**32 scale, 64-bit modulo) on a sparse mapping."""
    cases = [(BLOCKED, 11, 8, 512 * (2**24 - 3)), (STANDARD, 5, 9, 2**36 - 64 * 3)]
    for params in cases:
        try:
            body = mmap.mmap(-1, params[3] // 8)
        except (OSError, OverflowError, ValueError):
            pytest.skip("cannot map a large sparse buffer here")
        try:
            keys = random_keys(random.Random(1), 200)
            bf.add_keys(body, *params, keys)
            for key in keys:
                for b in positions(*params, encode(key)):
                    assert body[b >> 3] >> (b & 7) & 1
            probe = bound_probe(body, params)
            assert all(key in probe for key in keys)
            for key in random_keys(random.Random(2), 200):
                assert (key in probe) == ref_contains(body, params, key)
            probe._unbind()
        finally:
            body.close()


# -- key errors ------------------------------------------------------------------------

BAD_KEYS: list[tuple[object, type[BaseException]]] = [
    (2**63, OverflowError),
    (INT64_MIN - 1, OverflowError),
    (10**40, OverflowError),
    (-(10**40), OverflowError),
    (1.5, TypeError),
    (None, TypeError),
    ([1, 2], TypeError),
    ((b"a",), TypeError),
    (object(), TypeError),
    (np.uint64(5), TypeError),
    (array.array("B", b"abc"), TypeError),
    ("\ud800", UnicodeEncodeError),
    ("ok then lone \udfff", UnicodeEncodeError),
]


@pytest.mark.parametrize(("key", "exc"), BAD_KEYS)
def test_bad_keys_raise(key: object, exc: type[BaseException]) -> None:
    params = PARAMS[0]
    body = bytearray(params[3] // 8)
    probe = bound_probe(body, params)
    with pytest.raises(exc):
        _ = key in probe
    with pytest.raises(exc):
        probe._contains_keys([b"fine", key], np.zeros(2, dtype=np.bool_))
    with pytest.raises(exc):
        bf.add_keys(body, *params, [key])
    assert not any(body)


def test_add_keys_error_midway_keeps_earlier_keys() -> None:
    params = PARAMS[0]
    body = bytearray(params[3] // 8)
    before = [f"key{i}" for i in range(50)]  # crosses an internal chunk boundary
    with pytest.raises(TypeError):
        bf.add_keys(body, *params, [*before, 1.5, "after"])
    ref = bytearray(params[3] // 8)
    ref_add(ref, params, before)
    assert body == ref


# -- argument validation ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("layout", "seed", "k", "num_bits"),
    [
        (0, 0, 3, 512),
        (3, 0, 3, 512),
        (BLOCKED, 0, 0, 512),
        (BLOCKED, 0, 11, 512),
        (BLOCKED, 0, 3, 0),
        (BLOCKED, 0, 3, 500),
        (BLOCKED, 0, 3, 576),
        (BLOCKED, 0, 3, 512 * 2**32),
        (STANDARD, 0, 0, 64),
        (STANDARD, 0, 33, 64),
        (STANDARD, 0, 3, 0),
        (STANDARD, 0, 3, 100),
        (BLOCKED, -1, 3, 512),
        (BLOCKED, 2**32, 3, 512),
        (BLOCKED, 0, -3, 512),
        (BLOCKED, 0, 3, -512),
        (BLOCKED, 0, 3, 2**70),
    ],
)
def test_bad_params_raise_value_error(layout: int, seed: int, k: int, num_bits: int) -> None:
    body = bytearray(64)
    with pytest.raises(ValueError):
        bf.Probe()._bind(body, layout, seed, k, num_bits)
    with pytest.raises(ValueError):
        bf.add_keys(body, layout, seed, k, num_bits, [b"x"])
    with pytest.raises(ValueError):
        bf.add_u64(body, layout, seed, k, num_bits, np.zeros(1, dtype=np.uint64))


def test_param_types_and_body_checks() -> None:
    with pytest.raises(TypeError):
        bf.Probe()._bind(bytearray(64), 1.0, 0, 3, 512)
    with pytest.raises(TypeError):
        bf.Probe()._bind(bytearray(64), BLOCKED, 0, 3.0, 512)
    with pytest.raises(TypeError):
        bf.Probe()._bind(bytearray(64), BLOCKED, 0, 3)
    with pytest.raises(ValueError, match="body"):
        bf.Probe()._bind(bytearray(63), BLOCKED, 0, 3, 512)
    with pytest.raises(ValueError, match="body"):
        bf.add_keys(bytearray(128), BLOCKED, 0, 3, 512, [b"x"])
    with pytest.raises(TypeError):
        bf.Probe()._bind("not a buffer", BLOCKED, 0, 3, 512)
    # inserts need a writable body
    with pytest.raises((BufferError, TypeError)):
        bf.add_keys(bytes(64), BLOCKED, 0, 3, 512, [b"x"])
    with pytest.raises((BufferError, TypeError)):
        bf.add_u64(bytes(64), BLOCKED, 0, 3, 512, np.zeros(1, dtype=np.uint64))

    # an IntEnum-like int subclass is a fine layout
    class L(int):
        pass

    probe = bf.Probe()
    probe._bind(bytes(64), L(BLOCKED), 0, 3, 512)
    assert b"x" not in probe


def test_batch_buffer_checks() -> None:
    params = PARAMS[0]
    probe = bound_probe(bytearray(params[3] // 8), params)
    keys = np.arange(10, dtype=np.uint64)
    with pytest.raises(ValueError):
        probe._contains_u64(keys, np.zeros(9, dtype=np.bool_))
    with pytest.raises(ValueError):
        probe._contains_keys([b"a", b"b"], np.zeros(3, dtype=np.bool_))
    for bad in (keys.astype(np.float64), keys.astype(np.int32), keys.astype(np.uint8), b"12345678"):
        with pytest.raises(ValueError):
            probe._contains_u64(bad, np.zeros(len(bad), dtype=np.bool_))
        with pytest.raises(ValueError):
            bf.add_u64(bytearray(params[3] // 8), *params, bad)
    with pytest.raises((ValueError, BufferError)):
        probe._contains_u64(np.arange(20, dtype=np.uint64)[::2], np.zeros(10, dtype=np.bool_))
    big_endian = keys.astype(">u8")
    with pytest.raises(ValueError):
        probe._contains_u64(big_endian, np.zeros(10, dtype=np.bool_))
    readonly = np.zeros(10, dtype=np.bool_)
    readonly.flags.writeable = False
    with pytest.raises((BufferError, ValueError, TypeError)):
        probe._contains_u64(keys, readonly)
    with pytest.raises(TypeError):
        probe._contains_keys(12, np.zeros(0, dtype=np.bool_))
    with pytest.raises(TypeError):
        probe._contains_u64(keys)
    with pytest.raises(TypeError):
        bf.add_keys(bytearray(params[3] // 8), *params, 5)
    # empty batches are fine
    probe._contains_u64(np.zeros(0, dtype=np.uint64), np.zeros(0, dtype=np.bool_))
    probe._contains_keys([], np.zeros(0, dtype=np.bool_))
    bf.add_u64(bytearray(params[3] // 8), *params, np.zeros(0, dtype=np.int64))
    bf.add_keys(bytearray(params[3] // 8), *params, [])


# -- Probe lifetime --------------------------------------------------------------------


def test_unbound_probe_raises_value_error() -> None:
    probe = bf.Probe()
    with pytest.raises(ValueError, match="filter is closed"):
        _ = b"x" in probe
    with pytest.raises(ValueError, match="filter is closed"):
        probe._contains_u64(np.zeros(3, dtype=np.uint64), np.zeros(3, dtype=np.bool_))
    with pytest.raises(ValueError, match="filter is closed"):
        probe._contains_keys([b"x"], np.zeros(1, dtype=np.bool_))
    probe._bind(bytes(64), BLOCKED, 0, 3, 512)
    assert b"x" not in probe
    probe._unbind()
    probe._unbind()  # idempotent
    with pytest.raises(ValueError, match="filter is closed"):
        _ = b"x" in probe
    with pytest.raises(TypeError):
        bf.Probe(1)


def _resizable(buf: bytearray) -> bool:
    """A bytearray cannot be resized while a buffer export on it is alive."""
    try:
        buf.append(0)
    except BufferError:
        return False
    buf.pop()
    return True


def test_bind_unbind_and_dealloc_release_the_buffer() -> None:
    first, second = bytearray(64), bytearray(64)
    probe = bf.Probe()
    probe._bind(first, BLOCKED, 0, 3, 512)
    assert not _resizable(first)
    probe._bind(second, BLOCKED, 0, 3, 512)  # re-binding releases the first buffer
    assert _resizable(first)
    assert not _resizable(second)
    with pytest.raises(ValueError):
        probe._bind(bytearray(10), BLOCKED, 0, 3, 512)  # a failed bind keeps the old one
    assert not _resizable(second)
    assert b"x" not in probe
    probe._unbind()
    assert _resizable(second)
    probe._bind(second, BLOCKED, 0, 3, 512)
    del probe
    gc.collect()
    assert _resizable(second)


def test_body_from_memoryview_slice_and_mmap() -> None:
    params = PARAMS[0]
    nbytes = params[3] // 8
    keys = random_keys(random.Random(3), 100)
    raw = bytearray(4096 + nbytes)
    bf.add_keys(memoryview(raw)[4096:], *params, keys)
    ref = bytearray(nbytes)
    ref_add(ref, params, keys)
    assert raw[4096:] == ref and not any(raw[:4096])
    with mmap.mmap(-1, 4096 + nbytes) as mm:
        mm[4096:] = bytes(ref)
        view = memoryview(mm)[4096:]
        probe = bound_probe(view, params)
        assert all(key in probe for key in keys)
        out = np.zeros(len(keys), dtype=np.bool_)
        probe._contains_keys(keys, out)
        assert out.all()
        with pytest.raises(BufferError):
            mm.close()  # the probe holds an export
        probe._unbind()
        view.release()


def test_subclass_with_dict_and_direct_contains_slot() -> None:
    class F(bf.Probe):  # type: ignore[misc]
        pass

    class PyBase:
        def __contains__(self, key: object) -> bool:
            raise AssertionError("the Python __contains__ must not run")

        def __init__(self, name: str) -> None:
            self.name = name

    class G(bf.Probe, PyBase):  # type: ignore[misc]
        pass

    # `in` resolves to the C slot, not to a Python-level method
    assert "__contains__" not in F.__dict__
    assert F.__contains__ is bf.Probe.__contains__
    assert G.__contains__ is bf.Probe.__contains__
    assert type(bf.Probe.__contains__).__name__ == "wrapper_descriptor"

    params = PARAMS[0]
    body = bytearray(params[3] // 8)
    bf.add_keys(body, *params, [b"present"])
    f = F()
    f.attribute = 123
    f._bind(body, *params)
    assert f.attribute == 123
    assert f.__dict__ == {"attribute": 123}
    assert b"present" in f
    assert b"absent" not in f

    g = G("named")  # Probe.__new__ accepts a subclass's arguments; PyBase.__init__ runs
    assert g.name == "named"
    g._bind(body, *params)
    assert b"present" in g
    g._unbind()
    with pytest.raises(ValueError, match="filter is closed"):
        _ = b"present" in g

    import weakref

    ref = weakref.ref(f)
    del f
    gc.collect()
    assert ref() is None
    assert _resizable(body)


# -- reference counts ------------------------------------------------------------------


def test_no_reference_leaks() -> None:
    params = PARAMS[0]
    body = bytearray(params[3] // 8)
    probe = bound_probe(body, params)
    keys: list[object] = [
        b"bytes key",
        "str key",
        "ünïcode",
        2**40 + 12345,
        bytearray(b"ba"),
        memoryview(b"mv"),
    ]
    keys_list = list(keys)
    out = np.zeros(len(keys), dtype=np.bool_)
    u64 = np.arange(1000, dtype=np.uint64)
    out_u64 = np.zeros(1000, dtype=np.bool_)
    bad = [2**64, 1.5, "\ud800"]
    tracked = [*keys, keys_list, out, u64, out_u64, body, probe, *bad]

    def exercise() -> None:
        for key in keys:
            _ = key in probe
        probe._contains_keys(keys_list, out)
        bf.add_keys(body, *params, keys_list)
        probe._contains_u64(u64, out_u64)
        bf.add_u64(body, *params, u64)
        for key in bad:
            with pytest.raises((OverflowError, TypeError, UnicodeEncodeError)):
                _ = key in probe
            with pytest.raises((OverflowError, TypeError, UnicodeEncodeError)):
                bf.add_keys(body, *params, [key])
            with pytest.raises((OverflowError, TypeError, UnicodeEncodeError)):
                probe._contains_keys([key], out[:1])
        bf.murmur3_x64_128(b"abc", 1)

    exercise()
    gc.collect()
    before = [sys.getrefcount(obj) for obj in tracked]
    for _ in range(2000):
        exercise()
    probe._unbind()
    probe._bind(body, *params)
    gc.collect()  # the last exceptions' tracebacks hold the bad keys in reference cycles
    after = [sys.getrefcount(obj) for obj in tracked]
    assert after == before


# -- threads ---------------------------------------------------------------------------


def test_batches_are_safe_with_concurrent_unbind() -> None:
    params = (BLOCKED, 0, 6, 512 * 4096)
    body = bytearray(params[3] // 8)
    keys = np.random.default_rng(0).integers(0, 2**64, size=50_000, dtype=np.uint64)
    bf.add_u64(body, *params, keys)
    probe = bound_probe(body, params)
    errors: list[BaseException] = []
    stop = threading.Event()

    def worker() -> None:
        out = np.zeros(len(keys), dtype=np.bool_)
        while not stop.is_set():
            try:
                probe._contains_u64(keys, out)
            except ValueError:
                continue  # unbound at that moment
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)
                return
            if not out.all():
                errors.append(AssertionError("a present key was reported absent"))
                return

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for _ in range(300):
            probe._unbind()
            probe._bind(body, *params)
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert errors == []
