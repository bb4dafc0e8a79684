"""The delta coder's C and numpy paths write the same bytes and accept the same streams.

Random bodies and flip sets (empty, single bits at the body's ends, whole words flipped,
every bit flipped, any Rice parameter) are encoded by both engines and compared byte for
byte; decoding either encoding with either engine restores the target. Damaged streams
are refused (DeltaError) by both engines alike, or decode to the same body.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomswarm.common.delta import encode_bodies, patch_body
from bloomswarm.common.delta_format import (
    ENCODING_RICE_GAPS,
    MAX_RICE_K,
    DeltaHeader,
    streams_problem,
)
from bloomswarm.common.errors import DeltaError
from bloomswarm.common.fastpath import EXTENSION
from bloomswarm.common.rice import choose_rice_k

HAVE_C = EXTENSION is not None and hasattr(EXTENSION, "delta_apply")
needs_c = pytest.mark.skipif(not HAVE_C, reason="C extension without the delta coder")
ENGINES = ["python"] + (["c"] if HAVE_C else [])


def header_for(body_size: int, flips: int, rice_k: int, q: bytes, r: bytes) -> DeltaHeader:
    """A header carrying just what decoding needs (the rest is not consulted)."""
    return DeltaHeader(
        base_version=1, target_version=2, base_body_sha256=bytes(32), target_sha256=bytes(32),
        target_header=b"", encoding=ENCODING_RICE_GAPS, rice_k=rice_k, flips=flips,
        body_size=body_size, quotient_bytes=len(q), remainder_bytes=len(r),
    )


@st.composite
def body_pairs(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """A base body and a target differing by a drawn flip pattern."""
    size = draw(st.integers(1, 600))
    base = draw(st.binary(min_size=size, max_size=size))
    nbits = size * 8
    kind = draw(st.sampled_from(["none", "sparse", "ends", "words", "all", "random"]))
    diff = bytearray(size)
    if kind == "sparse":
        for pos in draw(st.sets(st.integers(0, nbits - 1), max_size=40)):
            diff[pos // 8] |= 1 << (pos % 8)
    elif kind == "ends":
        diff[0] |= 1
        diff[-1] |= 0x80
    elif kind == "words":
        for word in draw(st.sets(st.integers(0, (size - 1) // 8), max_size=10)):
            diff[word * 8:word * 8 + 8] = b"\xff" * len(diff[word * 8:word * 8 + 8])
    elif kind == "all":
        diff[:] = b"\xff" * size
    elif kind == "random":
        diff[:] = draw(st.binary(min_size=size, max_size=size))
    target = bytes(a ^ b for a, b in zip(base, diff, strict=True))
    return base, target


def roundtrip(base: bytes, target: bytes, rice_k: int | None) -> None:
    encodings = {engine: encode_bodies(base, target, engine=engine, rice_k=rice_k)  # type: ignore[arg-type]
                 for engine in ENGINES}
    first = encodings["python"]
    assert all(found == first for found in encodings.values()), "engines encode differently"
    q, r, flips, k = first
    expected_flips = int(np.bitwise_count(np.bitwise_xor(np.frombuffer(base, np.uint8),
                                                         np.frombuffer(target, np.uint8))).sum())
    assert flips == expected_flips
    assert streams_problem(flips, k, len(base) * 8, len(q), len(r)) is None
    for engine in ENGINES:
        body = bytearray(base)
        patch_body(body, header_for(len(base), flips, k, q, r), q, r, engine=engine)  # type: ignore[arg-type]
        assert body == target


@settings(max_examples=300, deadline=None)
@given(body_pairs())
def test_engines_agree_and_roundtrip(pair: tuple[bytes, bytes]) -> None:
    roundtrip(*pair, rice_k=None)


@settings(max_examples=200, deadline=None)
@given(body_pairs(), st.integers(0, MAX_RICE_K))
def test_any_rice_parameter_roundtrips(pair: tuple[bytes, bytes], rice_k: int) -> None:
    roundtrip(*pair, rice_k=rice_k)


def test_empty_delta_has_empty_streams() -> None:
    body = bytes(range(256)) * 4
    for engine in ENGINES:
        assert encode_bodies(body, body, engine=engine) == (b"", b"", 0, 0)  # type: ignore[arg-type]


def test_all_bits_flipped_uses_k_zero_and_one_bit_per_flip() -> None:
    base = bytes(64)
    q, r, flips, k = encode_bodies(base, b"\xff" * 64, engine="python")
    assert (flips, k, q, r) == (512, 0, b"\xff" * 64, b"")


def test_choose_rice_k_is_about_log2_of_069_over_p() -> None:
    assert choose_rice_k(0, 1000) == 0
    assert choose_rice_k(1000, 1000) == 0
    assert choose_rice_k(69, 10_000) == 7  # p = 0.69%: the design's measured case
    for p_exp in range(3, 20):
        k = choose_rice_k(1, 2**p_exp)
        assert abs(k - np.log2(0.69 * 2**p_exp)) <= 1


@st.composite
def damaged_streams(draw: st.DrawFn) -> tuple[bytes, bytes, bytes, int, int]:
    """(base, q, r, flips, k): a valid encoding with a drawn piece of damage."""
    base, target = draw(body_pairs())
    q, r, flips, k = encode_bodies(base, target, engine="python")
    damage = draw(st.sampled_from(["q_byte", "r_byte", "flips", "k", "q_extend", "q_cut"]))
    if damage == "q_byte" and q:
        at = draw(st.integers(0, len(q) - 1))
        q = q[:at] + bytes([q[at] ^ draw(st.integers(1, 255))]) + q[at + 1:]
    elif damage == "r_byte" and r:
        at = draw(st.integers(0, len(r) - 1))
        r = r[:at] + bytes([r[at] ^ draw(st.integers(1, 255))]) + r[at + 1:]
    elif damage == "flips":
        flips = draw(st.integers(0, flips + 3))
        r = r[:(flips * k + 7) // 8].ljust((flips * k + 7) // 8, b"\x00")
    elif damage == "k":
        k = draw(st.integers(0, MAX_RICE_K))
        r = r[:(flips * k + 7) // 8].ljust((flips * k + 7) // 8, b"\x00")
    elif damage == "q_extend":
        q = q + draw(st.binary(min_size=1, max_size=3))
    elif damage == "q_cut" and q:
        q = q[:-1]
    return base, q, r, flips, k


@needs_c
@settings(max_examples=500, deadline=None)
@given(damaged_streams())
def test_engines_refuse_the_same_damaged_streams(case: tuple[bytes, bytes, bytes, int, int]) -> None:
    base, q, r, flips, k = case
    header = header_for(len(base), flips, k, q, r)
    results: dict[str, bytes | None] = {}
    for engine in ENGINES:
        body = bytearray(base)
        try:
            patch_body(body, header, q, r, engine=engine)  # type: ignore[arg-type]
            results[engine] = bytes(body)
        except DeltaError:
            results[engine] = None
    assert results["c"] == results["python"]


@pytest.mark.parametrize("engine", ENGINES)
def test_a_position_beyond_the_body_is_refused(engine: str) -> None:
    # one flip, k = 0: gap 64 in an 8-byte body is position 64, one past the end
    q = bytes(8) + b"\x01"
    with pytest.raises(DeltaError, match="beyond the body"):
        patch_body(bytearray(8), header_for(8, 1, 0, q, b""), q, b"", engine=engine)  # type: ignore[arg-type]
    q = bytes(7) + b"\x80"  # gap 63: the last bit, accepted
    body = bytearray(8)
    patch_body(body, header_for(8, 1, 0, q, b""), q, b"", engine=engine)  # type: ignore[arg-type]
    assert body == bytes(7) + b"\x80"


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize(("streams", "flips", "k", "match"), [
    ((b"\x03", b""), 1, 0, "more flips"),
    ((b"\x01", b""), 2, 0, "fewer flips"),
    ((b"\x01\x00", b""), 1, 0, "after the quotient stream"),
    ((b"\x01", b"\xf0"), 1, 4, "padding"),
    ((b"\x01", b""), 1, 4, "remainder stream"),
])
def test_malformed_streams_are_refused(engine: str, streams: tuple[bytes, bytes], flips: int, k: int,
                                       match: str) -> None:
    q, r = streams
    with pytest.raises(DeltaError, match=match):
        patch_body(bytearray(64), header_for(64, flips, k, q, r), q, r, engine=engine)  # type: ignore[arg-type]
