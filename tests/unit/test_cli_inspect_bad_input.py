"""``bloomswarm inspect`` on valid but extreme headers and on crafted deltas.

A ``created_at`` that datetime cannot represent is still a valid header: ``inspect``
shows it as out of range and succeeds. ``inspect --verify`` of a delta decodes the
streams without a body, so a small delta declaring a huge body costs no memory, and it
refuses (one stderr line, exit 1) exactly the streams that ``patch_body`` refuses with
either engine.
"""

from __future__ import annotations

import dataclasses
import json
import re
import tracemalloc
from collections.abc import Sequence
from pathlib import Path

import pytest

import bloomswarm.common.rice  # noqa: F401  (imported now, so tracemalloc sees no import)
from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.delta import patch_body, read_delta_header
from bloomswarm.common.delta_format import PAYLOAD_OFFSET, DeltaHeader
from bloomswarm.common.errors import DeltaError
from bloomswarm.common.fastpath import EXTENSION
from bloomswarm.common.header import HEADER_SIZE
from bloomswarm.common.params import FilterParams, Layout
from bloomswarm.filter_commands import format_unix_time
from bloomswarm.main import main

PARAMS = FilterParams(Layout.BLOCKED, 512 * 64, 7, hash_seed=5)
ENGINES = ["python"] + (["c"] if EXTENSION is not None and hasattr(EXTENSION, "delta_apply") else [])
OUT_OF_RANGE = [253_402_300_800, -62_135_596_801, 10**13, 2**63 - 1, -(2**63)]
"""Year 10000, year 0, year 318857 and the int64 extremes: none is a datetime."""


def run(argv: Sequence[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_filter(path: Path, keys: range, *, version: int, created_at: int) -> None:
    builder = FilterBuilder(PARAMS, capacity=3000, target_fpp=0.01)
    builder.add_many([f"key-{i}" for i in keys])
    builder.write(path, version=version, created_at=created_at)


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """v1.bsf, v2.bsf and d.bsd (the delta from v1 to v2); the working directory."""
    monkeypatch.chdir(tmp_path)
    write_filter(tmp_path / "v1.bsf", range(3000), version=1, created_at=1_700_000_000)
    write_filter(tmp_path / "v2.bsf", range(30, 3030), version=2, created_at=1_700_003_600)
    assert run(["diff", "v1.bsf", "v2.bsf", "-o", "d.bsd"], capsys)[0] == 0
    return tmp_path


def rewrite_delta(src: Path, dst: Path, *, num_bits: int | None = None, layout: Layout | None = None,
                  flips: int | None = None, rice_k: int | None = None,
                  q: bytes | None = None, r: bytes | None = None) -> DeltaHeader:
    """Copy delta ``src`` to ``dst`` with fields or streams replaced; headers and CRCs stay valid."""
    header = read_delta_header(src)
    with open(src, "rb") as fh:
        fh.seek(PAYLOAD_OFFSET)
        old_q, old_r = fh.read(header.quotient_bytes), fh.read(header.remainder_bytes)
    q = old_q if q is None else q
    r = old_r if r is None else r
    target = header.target
    params = dataclasses.replace(target.params, num_bits=num_bits or target.params.num_bits,
                                 layout=layout or target.params.layout)
    target = dataclasses.replace(target, params=params)
    header = dataclasses.replace(
        header, target_header=target.pack(), body_size=params.num_bytes,
        flips=header.flips if flips is None else flips, rice_k=header.rice_k if rice_k is None else rice_k,
        quotient_bytes=len(q), remainder_bytes=len(r),
    )
    dst.write_bytes(header.pack() + q + r)
    assert read_delta_header(dst) == header  # a valid header: only the streams may be wrong
    return header


# -- created_at out of datetime's range --------------------------------------------------


@pytest.mark.parametrize(("seconds", "shown"), [
    (0, "1970-01-01T00:00:00+00:00"),
    (-1, "1969-12-31T23:59:59+00:00"),
    (1_700_000_000, "2023-11-14T22:13:20+00:00"),
    (253_402_300_799, "9999-12-31T23:59:59+00:00"),
    (-62_135_596_800, "0001-01-01T00:00:00+00:00"),
    *((s, f"out of range ({s} s since the epoch)") for s in OUT_OF_RANGE),
])
def test_format_unix_time(seconds: int, shown: str) -> None:
    assert format_unix_time(seconds) == shown


@pytest.mark.parametrize("seconds", OUT_OF_RANGE)
@pytest.mark.parametrize("as_json", [False, True])
def test_inspect_filter_with_created_at_out_of_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], seconds: int, as_json: bool
) -> None:
    write_filter(tmp_path / "f.bsf", range(100), version=1, created_at=seconds)
    code, out, err = run(["inspect", "--verify", str(tmp_path / "f.bsf"), *(["--json"] if as_json else [])],
                         capsys)
    assert (code, err) == (0, "")
    shown = f"out of range ({seconds} s since the epoch)"
    if as_json:
        info = json.loads(out)
        assert info["created_at"] == shown and info["verified"] is True
    else:
        assert re.search(rf"^created_at +{re.escape(shown)}$", out, re.MULTILINE)


@pytest.mark.parametrize("seconds", OUT_OF_RANGE)
def test_inspect_delta_with_target_created_at_out_of_range(
    folder: Path, capsys: pytest.CaptureFixture[str], seconds: int
) -> None:
    write_filter(folder / "v3.bsf", range(60, 3060), version=3, created_at=seconds)
    assert run(["diff", "v2.bsf", "v3.bsf", "-o", "d23.bsd"], capsys)[0] == 0
    code, out, err = run(["inspect", "--json", "--verify", "d23.bsd"], capsys)
    assert (code, err) == (0, "")
    info = json.loads(out)
    assert info["target_created_at"] == f"out of range ({seconds} s since the epoch)"
    assert info["kind"] == "delta" and info["verified"] is True


# -- inspect --verify of a delta ---------------------------------------------------------


def test_verify_of_a_normal_delta(folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["inspect", "--json", "--verify", "d.bsd"], capsys)
    assert (code, err) == (0, "")
    info = json.loads(out)
    assert info["verified"] is True and info["flips"] > 0
    assert info["target_created_at"] == "2023-11-14T23:13:20+00:00"


HUGE = [
    pytest.param((Layout.BLOCKED, 2**39), id="blocked-64GiB"),
    pytest.param((Layout.STANDARD, 2**63), id="standard-1EiB"),
]
"""(layout, num_bits) of a declared body that ``bytearray`` would fail on or take long to fill."""


@pytest.mark.parametrize("huge", HUGE)
@pytest.mark.parametrize("streams", [
    pytest.param((0, b"", True), id="no-flips"),
    pytest.param((1, b"\x01", True), id="bit-0"),
    pytest.param((2, b"\x01", False), id="one-flip-short"),
    pytest.param((1, b"\x03", False), id="one-flip-too-many"),
    pytest.param((1, b"\x01\x00", False), id="byte-after-last-flip"),
])
def test_verify_of_a_delta_declaring_a_huge_body_allocates_no_body(
    folder: Path, capsys: pytest.CaptureFixture[str],
    huge: tuple[Layout, int], streams: tuple[int, bytes, bool],
) -> None:
    (layout, num_bits), (flips, q, verified) = huge, streams
    header = rewrite_delta(folder / "d.bsd", folder / "huge.bsd", num_bits=num_bits, layout=layout,
                           flips=flips, rice_k=0, q=q, r=b"")
    assert header.file_size < 2 * PAYLOAD_OFFSET and header.body_size == num_bits // 8
    tracemalloc.start()
    try:
        code, out, err = run(["inspect", "--verify", "huge.bsd"], capsys)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, f"inspect --verify allocated {peak:,} bytes"
    if verified:
        assert (code, err) == (0, "")
        assert re.search(rf"^num_bits +{num_bits}$", out, re.MULTILINE)
        assert re.search(r"^verified +True$", out, re.MULTILINE)
    else:
        assert (code, out) == (1, "")
        assert err.startswith("bloomswarm inspect: error: corrupt delta: ") and len(err.splitlines()) == 1


def _damaged(header: DeltaHeader, q: bytes, r: bytes, damage: str) -> dict[str, object]:
    """rewrite_delta arguments for one kind of damage to a real delta's streams."""
    k, flips, body_bits = header.rice_k, header.flips, header.body_size * 8
    resized = {f: r[:(f * k + 7) // 8].ljust((f * k + 7) // 8, b"\x00") for f in (flips - 1, flips + 1)}
    cases: dict[str, dict[str, object]] = {
        "intact": {},
        "q_extra_flip": {"q": q + b"\x01"},
        "q_trailing_zero": {"q": q + b"\x00"},
        "q_cut": {"q": q[:-1]},
        "header_one_flip_fewer": {"flips": flips - 1, "r": resized[flips - 1]},
        "header_one_flip_more": {"flips": flips + 1, "r": resized[flips + 1]},
        "last_bit": {"flips": 1, "rice_k": 0, "q": bytes(body_bits // 8 - 1) + b"\x80", "r": b""},
        "one_past_the_body": {"flips": 1, "rice_k": 0, "q": bytes(body_bits // 8) + b"\x01", "r": b""},
        "remainder_ok": {"flips": 1, "rice_k": 4, "q": b"\x01", "r": b"\x0f"},
        "remainder_padding": {"flips": 1, "rice_k": 4, "q": b"\x01", "r": b"\xf0"},
    }
    return cases[damage]


@pytest.mark.parametrize(("damage", "accepted"), [
    ("intact", True),
    ("q_extra_flip", False),
    ("q_trailing_zero", False),
    ("q_cut", False),
    ("header_one_flip_fewer", False),
    ("header_one_flip_more", False),
    ("last_bit", True),
    ("one_past_the_body", False),
    ("remainder_ok", True),
    ("remainder_padding", False),
])
def test_verify_refuses_what_patch_refuses(
    folder: Path, capsys: pytest.CaptureFixture[str], damage: str, accepted: bool
) -> None:
    original = read_delta_header(folder / "d.bsd")
    data = (folder / "d.bsd").read_bytes()
    q = data[PAYLOAD_OFFSET:PAYLOAD_OFFSET + original.quotient_bytes]
    r = data[PAYLOAD_OFFSET + original.quotient_bytes:]
    assert original.rice_k > 0 and len(r) == original.remainder_bytes  # the cases need remainders
    header = rewrite_delta(folder / "d.bsd", folder / "x.bsd", **_damaged(original, q, r, damage))  # type: ignore[arg-type]
    stored = (folder / "x.bsd").read_bytes()
    new_q = stored[PAYLOAD_OFFSET:PAYLOAD_OFFSET + header.quotient_bytes]
    new_r = stored[PAYLOAD_OFFSET + header.quotient_bytes:]

    code, _, err = run(["inspect", "--verify", "x.bsd"], capsys)
    assert code == (0 if accepted else 1)
    if not accepted:
        assert err.startswith("bloomswarm inspect: error: corrupt delta: ") and len(err.splitlines()) == 1
    base_body = (folder / "v1.bsf").read_bytes()[HEADER_SIZE:]
    for engine in ENGINES:
        body = bytearray(base_body)
        try:
            patch_body(body, header, new_q, new_r, engine=engine)  # type: ignore[arg-type]
        except DeltaError:
            assert not accepted, f"the {engine} engine refuses what inspect --verify accepts"
        else:
            assert accepted, f"the {engine} engine applies what inspect --verify refuses"
