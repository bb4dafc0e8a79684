"""Corrupt, truncated and unknown files raise FormatError before any mapped access.

Each case is also opened in a child process, so a SIGBUS (a read past the end of a
mapped file) would show up as a crashed child instead of passing unnoticed.
"""

from __future__ import annotations

import hashlib
import struct
import subprocess
import sys
import zlib
from collections.abc import Callable
from pathlib import Path

import pytest

from bloomswarm.common import Filter, FilterBuilder, FormatError, Layout
from bloomswarm.common.header import HEADER_SIZE

Mutation = Callable[[bytearray], bytearray]


def _recrc(data: bytearray) -> bytearray:
    struct.pack_into("<I", data, 4092, zlib.crc32(bytes(data[:4092])))
    return data


def _set(offset: int, fmt: str, value: object) -> Mutation:
    def mutate(data: bytearray) -> bytearray:
        struct.pack_into(fmt, data, offset, value)
        return _recrc(data)

    return mutate


CASES: dict[str, tuple[Mutation, str]] = {
    "empty": (lambda d: bytearray(), "too short"),
    "truncated-in-header": (lambda d: d[:100], "too short"),
    "truncated-at-header-end": (lambda d: d[:HEADER_SIZE], "truncated"),
    "truncated-mid-body": (lambda d: d[: HEADER_SIZE + 1000], "truncated"),
    "truncated-one-byte": (lambda d: d[:-1], "truncated"),
    "trailing-bytes": (lambda d: d + b"\x00", "trailing"),
    "bad-magic": (lambda d: bytearray(b"XLMSWRM\x00") + d[8:], "magic"),
    "bad-crc": (lambda d: d[:4092] + bytearray(b"\x00\x00\x00\x00"), "CRC"),
    "flipped-header-bit": (lambda d: d[:30] + bytearray([d[30] ^ 1]) + d[31:], "CRC"),
    "claimed-bits-disagree-with-length": (_set(24, "<Q", 2**40), "header"),
    "claimed-size-larger-than-file": (
        lambda d: _set(80, "<Q", 2**27)(_set(24, "<Q", 2**30)(d)), "truncated"),
    "unknown-format-version": (_set(8, "<H", 2), "format version"),
    "unknown-layout": (_set(10, "<B", 9), "layout"),
    "unknown-hash": (_set(11, "<B", 7), "hash"),
    "nonzero-flags": (_set(20, "<I", 1), "reserved"),
    "nonzero-reserved": (_set(2000, "<B", 1), "reserved"),
    "zero-probes": (_set(16, "<I", 0), "probes"),
    "too-many-probes": (_set(16, "<I", 11), "probes"),
    "bits-not-multiple": (_set(24, "<Q", 1000), "multiple"),
    "bad-body-offset": (_set(72, "<Q", 8192), "body"),
    "bad-fpp": (_set(48, "<d", 1.5), "target_fpp"),
}


@pytest.fixture(scope="module")
def good_file(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    builder = FilterBuilder.for_capacity(5000, 0.01, layout=Layout.BLOCKED)
    builder.add_many(range(5000))
    path = tmp_path_factory.mktemp("good") / "f.bsf"
    builder.write(path, version=3, created_at=0)
    return path.read_bytes()


@pytest.mark.parametrize("case", sorted(CASES))
def test_corrupt_file_raises_format_error(case: str, good_file: bytes, tmp_path: Path) -> None:
    mutate, message = CASES[case]
    path = tmp_path / f"{case}.bsf"
    path.write_bytes(bytes(mutate(bytearray(good_file))))
    with pytest.raises(FormatError, match=message):
        Filter.open(path)


@pytest.mark.parametrize("engine", ["python", "auto"])
def test_corrupt_files_never_crash_a_process(good_file: bytes, tmp_path: Path, engine: str) -> None:
    paths = []
    for case, (mutate, _) in CASES.items():
        path = tmp_path / f"{case}.bsf"
        path.write_bytes(bytes(mutate(bytearray(good_file))))
        paths.append(str(path))
    script = (
        "import sys\n"
        "from bloomswarm.common import Filter, FormatError\n"
        "bad = 0\n"
        "for p in sys.argv[2:]:\n"
        "    try:\n"
        "        f = Filter.open(p, engine=sys.argv[1])\n"
        "        print('opened', p); sum(i in f for i in range(10000))\n"
        "    except FormatError:\n"
        "        bad += 1\n"
        "print(bad)\n"
    )
    result = subprocess.run([sys.executable, "-c", script, engine, *paths], capture_output=True,
                            text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(len(CASES))


def test_body_corruption_is_caught_only_when_verifying(good_file: bytes, tmp_path: Path) -> None:
    data = bytearray(good_file)
    data[HEADER_SIZE + 17] ^= 0x40
    path = tmp_path / "body.bsf"
    path.write_bytes(bytes(data))
    with Filter.open(path) as f:  # the header is intact: opening without verify works
        assert f.version == 3
    with pytest.raises(FormatError, match="SHA-256"):
        Filter.open(path, verify=True)
    assert hashlib.sha256(good_file[HEADER_SIZE:]).digest() == good_file[88:120]


def test_missing_file_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        Filter.open(tmp_path / "nope.bsf")
