"""Delta files end to end: make, read, apply; and every bad input refused with no output.

Filters are built with FilterBuilder at fixed parameters, as the publisher does between
versions that keep their size. A refused apply leaves neither the output nor a temporary
file in the output's directory.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from bloomswarm.common import FilterBuilder, FilterParams, Layout
from bloomswarm.common import delta as delta_module
from bloomswarm.common.delta import (
    DELTA_SUFFIX,
    DeltaHeader,
    apply_delta,
    make_delta,
    read_delta_header,
    temporaries_of,
)
from bloomswarm.common.delta_format import FIXED_SIZE, PAYLOAD_OFFSET
from bloomswarm.common.errors import DeltaError, FormatError, WrongBase
from bloomswarm.common.fastpath import EXTENSION
from bloomswarm.common.header import HEADER_SIZE, read_header

HAVE_C = EXTENSION is not None and hasattr(EXTENSION, "delta_apply")
ENGINES = ["python"] + (["c"] if HAVE_C else [])
PARAMS = FilterParams(Layout.BLOCKED, 512 * 200, 7, hash_seed=99)


def write_version(path: Path, keys: np.ndarray, version: int, params: FilterParams = PARAMS) -> Path:
    builder = FilterBuilder(params, capacity=10_000, target_fpp=0.01)
    builder.add_many(keys)
    builder.write(path, version=version, created_at=1_700_000_000 + version)
    return path


@pytest.fixture
def versions(tmp_path: Path) -> tuple[Path, Path]:
    """v1 and v2 of one filter: 1% of v1's keys removed, 1% new ones added."""
    rng = np.random.default_rng(7)
    keys = rng.integers(0, 2**63, size=10_000, dtype=np.uint64)
    churned = np.concatenate((keys[100:], rng.integers(0, 2**63, size=100, dtype=np.uint64)))
    return write_version(tmp_path / "v1.bsf", keys, 1), write_version(tmp_path / "v2.bsf", churned, 2)


def leftovers(directory: Path) -> list[str]:
    return sorted(name for name in os.listdir(directory) if name.startswith(".tmp-"))


def rewrite_fixed(delta: Path, **changes: int) -> None:
    """Rewrite fields of the delta's fixed header (by offset) and fix its CRC."""
    offsets = {"version": (8, "<H"), "encoding": (10, "<B"), "rice_k": (11, "<B"),
               "header_size": (12, "<I"), "flips": (40, "<Q"), "reserved": (200, "<B")}
    data = bytearray(delta.read_bytes())
    for name, value in changes.items():
        offset, fmt = offsets[name]
        struct.pack_into(fmt, data, offset, value)
    struct.pack_into("<I", data, FIXED_SIZE - 4, zlib.crc32(data[:FIXED_SIZE - 4]))
    delta.write_bytes(bytes(data))


@pytest.mark.parametrize("engine", ENGINES)
def test_make_and_apply_restore_the_target_exactly(versions: tuple[Path, Path], tmp_path: Path,
                                                   engine: str) -> None:
    v1, v2 = versions
    delta = tmp_path / f"v2-from-v1{DELTA_SUFFIX}"
    made = make_delta(v1, v2, delta, engine=engine)  # type: ignore[arg-type]
    assert read_delta_header(delta) == made
    assert (made.base_version, made.target_version) == (1, 2)
    assert made.base_body_sha256 == read_header(str(v1)).body_sha256
    assert made.target_header == v2.read_bytes()[:HEADER_SIZE]
    assert made.file_size == delta.stat().st_size
    assert made.flips > 0 and made.rice_k > 0
    out = tmp_path / "out.bsf"
    applied = apply_delta(v1, delta, out, expected_sha256=None, engine=engine)  # type: ignore[arg-type]
    assert applied == made
    assert out.read_bytes() == v2.read_bytes()
    assert leftovers(tmp_path) == []


def test_engines_write_identical_deltas(versions: tuple[Path, Path], tmp_path: Path) -> None:
    v1, v2 = versions
    written = set()
    for engine in ENGINES:
        make_delta(v1, v2, tmp_path / f"{engine}.bsd", engine=engine)  # type: ignore[arg-type]
        written.add((tmp_path / f"{engine}.bsd").read_bytes())
    assert len(written) == 1


def test_a_delta_between_equal_bodies_is_header_only(versions: tuple[Path, Path], tmp_path: Path) -> None:
    v1, _ = versions
    header = make_delta(v1, v1, tmp_path / "same.bsd")
    assert (header.flips, header.quotient_bytes, header.remainder_bytes) == (0, 0, 0)
    assert (tmp_path / "same.bsd").stat().st_size == PAYLOAD_OFFSET
    apply_delta(v1, tmp_path / "same.bsd", tmp_path / "out.bsf")
    assert (tmp_path / "out.bsf").read_bytes() == v1.read_bytes()


def test_apply_checks_the_expected_sha256(versions: tuple[Path, Path], tmp_path: Path) -> None:
    v1, v2 = versions
    make_delta(v1, v2, tmp_path / "d.bsd")
    with pytest.raises(DeltaError, match="not the expected"):
        apply_delta(v1, tmp_path / "d.bsd", tmp_path / "out.bsf", expected_sha256=bytes(32))
    assert not (tmp_path / "out.bsf").exists() and leftovers(tmp_path) == []


def test_a_wrong_base_is_refused(versions: tuple[Path, Path], tmp_path: Path) -> None:
    v1, v2 = versions
    make_delta(v1, v2, tmp_path / "d.bsd")
    with pytest.raises(WrongBase, match="wrong base"):
        apply_delta(v2, tmp_path / "d.bsd", tmp_path / "out.bsf")
    assert not (tmp_path / "out.bsf").exists() and leftovers(tmp_path) == []


@pytest.mark.parametrize("engine", ENGINES)
def test_a_base_modified_under_its_header_is_a_wrong_base(versions: tuple[Path, Path],
                                                                 tmp_path: Path, engine: str) -> None:
    v1, v2 = versions
    make_delta(v1, v2, tmp_path / "d.bsd")
    data = bytearray(v1.read_bytes())
    data[HEADER_SIZE + 5] ^= 0x10
    v1.chmod(0o644)
    v1.write_bytes(bytes(data))
    with pytest.raises(WrongBase, match="base body was modified"):  # its hash, not the result's
        apply_delta(v1, tmp_path / "d.bsd", tmp_path / "out.bsf", engine=engine)  # type: ignore[arg-type]
    assert not (tmp_path / "out.bsf").exists() and leftovers(tmp_path) == []


def test_filters_of_different_parameters_have_no_delta(versions: tuple[Path, Path], tmp_path: Path) -> None:
    v1, _ = versions
    bigger = FilterParams(Layout.BLOCKED, 512 * 201, 7, hash_seed=99)
    other = write_version(tmp_path / "other.bsf", np.arange(10, dtype=np.uint64), 3, bigger)
    with pytest.raises(DeltaError, match="different parameters"):
        make_delta(v1, other, tmp_path / "d.bsd")
    reseeded = dataclasses.replace(PARAMS, hash_seed=100)
    other = write_version(tmp_path / "reseeded.bsf", np.arange(10, dtype=np.uint64), 3, reseeded)
    with pytest.raises(DeltaError, match="different parameters"):
        make_delta(v1, other, tmp_path / "d.bsd")
    assert not (tmp_path / "d.bsd").exists()


def test_diffing_a_file_that_is_not_a_filter_is_refused(versions: tuple[Path, Path], tmp_path: Path) -> None:
    v1, _ = versions
    junk = tmp_path / "junk.bsf"
    junk.write_bytes(b"not a filter" * 1000)
    with pytest.raises(DeltaError, match="not a valid filter"):
        make_delta(v1, junk, tmp_path / "d.bsd")
    with pytest.raises(DeltaError, match="not a valid filter"):
        make_delta(junk, v1, tmp_path / "d.bsd")


def test_a_base_body_that_does_not_match_its_header_is_not_diffed(versions: tuple[Path, Path],
                                                                  tmp_path: Path) -> None:
    v1, v2 = versions
    data = bytearray(v1.read_bytes())
    data[-1] ^= 1
    v1.chmod(0o644)
    v1.write_bytes(bytes(data))
    with pytest.raises(DeltaError, match="does not match the SHA-256 in its header"):
        make_delta(v1, v2, tmp_path / "d.bsd")


def test_every_truncation_is_refused(versions: tuple[Path, Path], tmp_path: Path) -> None:
    v1, v2 = versions
    whole = tmp_path / "d.bsd"
    make_delta(v1, v2, whole)
    data = whole.read_bytes()
    cut = tmp_path / "cut.bsd"
    for length in [0, 1, 8, FIXED_SIZE - 1, FIXED_SIZE, PAYLOAD_OFFSET - 1, PAYLOAD_OFFSET,
                   PAYLOAD_OFFSET + 1, len(data) // 2, len(data) - 1]:
        cut.write_bytes(data[:length])
        with pytest.raises(DeltaError):
            read_delta_header(cut)
        with pytest.raises(DeltaError):
            apply_delta(v1, cut, tmp_path / "out.bsf")
        assert not (tmp_path / "out.bsf").exists()
    cut.write_bytes(data + b"\x00")
    with pytest.raises(DeltaError, match="trailing bytes"):
        read_delta_header(cut)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(("changes", "match"), [
    ({"version": 2}, "unsupported delta format version 2"),
    ({"encoding": 2}, "unknown delta encoding 2"),
    ({"reserved": 1}, "non-zero reserved"),
    ({"rice_k": 49}, "rice_k 49"),
    ({"header_size": 4095}, "target header of 4095 bytes"),
    ({"flips": 2**40}, "flips in a body"),
])
def test_header_fields_a_reader_does_not_know_are_refused(versions: tuple[Path, Path], tmp_path: Path,
                                                          changes: dict[str, int], match: str) -> None:
    v1, v2 = versions
    delta = tmp_path / "d.bsd"
    make_delta(v1, v2, delta)
    delta.chmod(0o644)
    rewrite_fixed(delta, **changes)
    with pytest.raises(DeltaError, match=match):
        read_delta_header(delta)
    with pytest.raises(DeltaError, match=match):
        apply_delta(v1, delta, tmp_path / "out.bsf")
    assert not (tmp_path / "out.bsf").exists() and leftovers(tmp_path) == []


def test_a_damaged_header_fails_its_crc(versions: tuple[Path, Path], tmp_path: Path) -> None:
    v1, v2 = versions
    delta = tmp_path / "d.bsd"
    make_delta(v1, v2, delta)
    data = bytearray(delta.read_bytes())
    data[20] ^= 1
    delta.chmod(0o644)
    delta.write_bytes(bytes(data))
    with pytest.raises(DeltaError, match="CRC-32"):
        read_delta_header(delta)


def test_a_damaged_target_header_is_refused(versions: tuple[Path, Path], tmp_path: Path) -> None:
    v1, v2 = versions
    delta = tmp_path / "d.bsd"
    make_delta(v1, v2, delta)
    data = bytearray(delta.read_bytes())
    data[FIXED_SIZE + 60] ^= 1  # inside the target header: its own CRC catches it
    delta.chmod(0o644)
    delta.write_bytes(bytes(data))
    with pytest.raises(DeltaError, match="target header is invalid"):
        read_delta_header(delta)


@pytest.mark.parametrize("engine", ENGINES)
def test_every_damaged_stream_byte_is_caught(versions: tuple[Path, Path], tmp_path: Path,
                                             engine: str) -> None:
    v1, v2 = versions
    delta = tmp_path / "d.bsd"
    header = make_delta(v1, v2, delta)
    data = delta.read_bytes()
    damaged = tmp_path / "damaged.bsd"
    stride = max(1, (len(data) - PAYLOAD_OFFSET) // 40)
    for at in range(PAYLOAD_OFFSET, len(data), stride):
        damaged.write_bytes(data[:at] + bytes([data[at] ^ 0x24]) + data[at + 1:])
        assert read_delta_header(damaged) == header  # the header alone cannot tell
        with pytest.raises(DeltaError):
            apply_delta(v1, damaged, tmp_path / "out.bsf", engine=engine)  # type: ignore[arg-type]
        assert not (tmp_path / "out.bsf").exists()
    assert leftovers(tmp_path) == []


def test_delta_header_fields_sit_at_the_documented_offsets() -> None:
    header = DeltaHeader(
        base_version=0x0102, target_version=0x0304, base_body_sha256=bytes(range(32)),
        target_sha256=bytes(range(32, 64)), target_header=bytes(HEADER_SIZE), encoding=1, rice_k=7,
        flips=0x0506, body_size=0x0708, quotient_bytes=0x090A, remainder_bytes=0x0B0C,
    )
    data = header.pack()
    assert len(data) == PAYLOAD_OFFSET
    assert data[0:8] == b"BLMSDLT\x00"
    assert data[8:10] == b"\x01\x00"
    assert (data[10], data[11]) == (1, 7)
    fields = struct.unpack_from("<I6Q", data, 12)
    assert fields == (HEADER_SIZE, 0x0102, 0x0304, 0x0708, 0x0506, 0x090A, 0x0B0C)
    assert data[64:96] == bytes(range(32)) and data[96:128] == bytes(range(32, 64))
    assert data[128:252] == bytes(124)
    assert struct.unpack_from("<I", data, 252)[0] == zlib.crc32(data[:252])
    assert data[256:] == bytes(HEADER_SIZE)


def test_delta_error_is_a_format_error() -> None:
    assert issubclass(DeltaError, FormatError)


def test_apply_reads_the_base_in_steps_and_takes_short_reads(versions: tuple[Path, Path], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The base body is read into the output a step at a time (each step hashed); a read
    that returns fewer bytes than asked is continued, to the same result."""
    v1, v2 = versions
    make_delta(v1, v2, tmp_path / "d.bsd")
    real = os.preadv
    reads: list[int] = []

    def short(fd: int, buffers: list[memoryview], offset: int) -> int:
        with buffers[0][:max(1, len(buffers[0]) // 2 - 3)] as half:  # at most half of it
            reads.append(len(half))
            return real(fd, [half], offset)

    monkeypatch.setattr(delta_module, "_READ_STEP", 4096)
    monkeypatch.setattr(os, "preadv", short)
    apply_delta(v1, tmp_path / "d.bsd", tmp_path / "out.bsf")
    assert (tmp_path / "out.bsf").read_bytes() == v2.read_bytes()
    assert sum(reads) == v1.stat().st_size - HEADER_SIZE  # the base body, read once
    assert len(reads) > 2 * (v1.stat().st_size - HEADER_SIZE) // 4096


def test_a_base_cut_short_under_its_header_is_refused(versions: tuple[Path, Path], tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    v1, v2 = versions
    make_delta(v1, v2, tmp_path / "d.bsd")
    monkeypatch.setattr(os, "preadv", lambda *_args: 0)  # the file ended early
    with pytest.raises(DeltaError, match="base truncated"):
        apply_delta(v1, tmp_path / "d.bsd", tmp_path / "out.bsf")
    assert not (tmp_path / "out.bsf").exists() and leftovers(tmp_path) == []


def test_temporaries_of_names_what_an_interrupted_apply_leaves(tmp_path: Path) -> None:
    out = tmp_path / "filter.bsf"
    left = [tmp_path / ".tmp-filter.bsf.abc123", tmp_path / ".tmp-filter.bsf.zz"]
    for path in [*left, tmp_path / ".tmp-other.bsf.abc", tmp_path / "filter.bsf"]:
        path.write_bytes(b"x")
    assert temporaries_of(out) == sorted(left)
