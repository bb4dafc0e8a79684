"""Golden tests: the bytes of the file format must not drift.

Each case builds a filter from fixed keys with fixed parameters and pins the SHA-256 of
the whole file (header and body). If one of these fails, the format changed: that needs a
new format version, not a new golden value.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from bloomswarm.common import FilterBuilder, FilterParams, Layout
from bloomswarm.common.delta import apply_delta, make_delta
from bloomswarm.common.fastpath import EXTENSION
from bloomswarm.common.header import HEADER_SIZE, FilterHeader

ENGINES = ["python", pytest.param("c", marks=pytest.mark.skipif(EXTENSION is None, reason="no C extension"))]

GOLDEN = {
    Layout.BLOCKED: "bc902a2bd594405b2990c4874ce22c80ae6bf0b8b4b0311f90a237f6700862b2",
    Layout.STANDARD: "950a37935486f7ee4c6400617fa19c48f4d3284548b59fed298d51c9bad9e721",
}


def golden_keys() -> list[bytes | str | int]:
    """Fixed keys of every kind: bytes, str (with non-ASCII), ints at their bounds."""
    keys: list[bytes | str | int] = [f"key-{i}".encode() for i in range(500)]
    keys += [f"ключ-{i}-🔑" for i in range(500)]
    keys += [i * 7919 - 2**40 for i in range(500)]
    keys += [b"", "", -(2**63), 2**63 - 1, 0, -1, b"\x00" * 100]
    return keys


def build_golden(layout: Layout, engine: str, tmp_path: Path) -> Path:
    num_bits = 512 * 40 if layout == Layout.BLOCKED else 64 * 320
    params = FilterParams(layout, num_bits, 7, hash_seed=0xB100F)
    builder = FilterBuilder(params, capacity=1500, target_fpp=0.01, engine=engine)  # type: ignore[arg-type]
    builder.add_many(golden_keys())
    builder.add_many(np.arange(1000, 1100, dtype=np.uint64))
    path = tmp_path / f"golden-{layout.label}-{engine}.bsf"
    builder.write(path, version=42, created_at=1_700_000_000)
    return path


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("layout", [Layout.BLOCKED, Layout.STANDARD], ids=["blocked", "standard"])
def test_golden_file_hash(layout: Layout, engine: str, tmp_path: Path) -> None:
    data = build_golden(layout, engine, tmp_path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == GOLDEN[layout]


def test_golden_header_bytes() -> None:
    """The header's fixed fields sit at the offsets of docs/format.md."""
    params = FilterParams(Layout.STANDARD, 64 * 10, 3, hash_seed=0x01020304)
    header = FilterHeader(params, key_count=5, capacity=9, target_fpp=0.5, filter_version=0x0A0B,
                          created_at=-1, body_sha256=bytes(range(32)))
    data = header.pack()
    assert len(data) == HEADER_SIZE
    assert data[0:8] == b"BLMSWRM\x00"
    assert data[8:10] == b"\x01\x00"
    assert data[10] == 2 and data[11] == 1
    assert data[12:16] == b"\x04\x03\x02\x01"
    assert data[16:20] == b"\x03\x00\x00\x00"
    assert data[20:24] == bytes(4)
    assert int.from_bytes(data[24:32], "little") == 640
    assert int.from_bytes(data[32:40], "little") == 5
    assert int.from_bytes(data[40:48], "little") == 9
    assert data[48:56] == bytes.fromhex("000000000000e03f")
    assert int.from_bytes(data[56:64], "little") == 0x0A0B
    assert data[64:72] == b"\xff" * 8
    assert int.from_bytes(data[72:80], "little") == 4096
    assert int.from_bytes(data[80:88], "little") == 80
    assert data[88:120] == bytes(range(32))
    assert data[120:4092] == bytes(4092 - 120)
    assert hashlib.sha256(data).hexdigest() == GOLDEN_HEADER


GOLDEN_HEADER = "2093faa46d225c4a932993de4ce1a7566080fe2814c3b154248f305ef97eedb7"


GOLDEN_DELTA = {
    Layout.BLOCKED: "c720e594d88c2a6815289da25ba1fd6731779bdf7c772c2379d23b6c1bccbb31",
    Layout.STANDARD: "dc4f393dffb56b90419280d9410d8886b90eb96a710737c68d876d431ccbe7ae",
}
"""SHA-256 of the delta file (docs/format.md, "Delta file") from the golden filter to its next version."""


def build_golden_successor(layout: Layout, engine: str, tmp_path: Path) -> Path:
    """The golden filter's next version: the same parameters, 100 keys dropped, 120 added."""
    num_bits = 512 * 40 if layout == Layout.BLOCKED else 64 * 320
    params = FilterParams(layout, num_bits, 7, hash_seed=0xB100F)
    builder = FilterBuilder(params, capacity=1500, target_fpp=0.01, engine=engine)  # type: ignore[arg-type]
    builder.add_many(golden_keys()[100:])
    builder.add_many(np.arange(1000, 1100, dtype=np.uint64))
    builder.add_many([f"new-{i}" for i in range(120)])
    path = tmp_path / f"golden-next-{layout.label}-{engine}.bsf"
    builder.write(path, version=43, created_at=1_700_003_600)
    return path


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("layout", [Layout.BLOCKED, Layout.STANDARD], ids=["blocked", "standard"])
def test_golden_delta_hash(layout: Layout, engine: str, tmp_path: Path) -> None:
    base = build_golden(layout, engine, tmp_path)
    target = build_golden_successor(layout, engine, tmp_path)
    delta = tmp_path / f"golden-{layout.label}-{engine}.bsd"
    make_delta(base, target, delta, engine=engine)  # type: ignore[arg-type]
    assert hashlib.sha256(delta.read_bytes()).hexdigest() == GOLDEN_DELTA[layout]
    apply_delta(base, delta, tmp_path / "patched.bsf", engine=engine)  # type: ignore[arg-type]
    assert (tmp_path / "patched.bsf").read_bytes() == target.read_bytes()
