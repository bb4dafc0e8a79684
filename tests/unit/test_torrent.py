"""Torrent creation: v1 (the default) or hybrid v1+v2, piece size rules, trackers and no web seed."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, cast

import libtorrent as lt
import pytest

from bloomswarm.common.storage import S3Config
from bloomswarm.publisher.config import PublisherConfig
from bloomswarm.publisher.torrent import (
    MAX_AUTO_PIECE_SIZE,
    MIN_AUTO_PIECE_SIZE,
    check_piece_size,
    choose_piece_size,
    make_torrent,
    read_info_hashes,
)

MIB = 1 << 20


@pytest.mark.parametrize(
    ("size", "piece"),
    [(0, 256 << 10), (10 * MIB, 256 << 10), (512 * MIB, 256 << 10), (512 * MIB + 1, 512 << 10),
     (1 << 30, 512 << 10), (32 << 30, 16 * MIB), (1 << 40, 16 * MIB)],
)
def test_piece_size_aims_at_1024_to_2048_pieces(size: int, piece: int) -> None:
    assert choose_piece_size(size) == piece


def test_chosen_piece_sizes_are_powers_of_two_in_range() -> None:
    for exponent in range(10, 45):
        size = 3 << exponent
        piece = choose_piece_size(size)
        assert MIN_AUTO_PIECE_SIZE <= piece <= MAX_AUTO_PIECE_SIZE and piece & (piece - 1) == 0
        pieces = -(-size // piece)
        assert pieces <= 2048 or piece == MAX_AUTO_PIECE_SIZE
        assert pieces > 1024 or piece == MIN_AUTO_PIECE_SIZE


def test_piece_size_override_must_suit_v2() -> None:
    assert check_piece_size(16 << 10) == 16 << 10
    for bad in (8 << 10, 3 << 20, 0):
        with pytest.raises(ValueError, match="power of two"):
            check_piece_size(bad)


def test_hybrid_torrent_with_trackers_and_no_web_seed(tmp_path: Path) -> None:
    path = tmp_path / "filter.bsf"
    path.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    trackers = ["http://127.0.0.1:6969/announce", "udp://127.0.0.1:6969"]
    torrent = make_torrent(path, trackers=trackers, piece_size=64 << 10, torrent_format="hybrid",
                           progress=False)
    params = lt.load_torrent_buffer(torrent.data)
    info = params.ti
    assert info is not None
    assert info.name() == "filter.bsf" and info.total_size() == 1 << 20
    assert info.piece_length() == torrent.piece_size == 64 << 10
    hashes = info.info_hashes()
    assert hashes.has_v1() and hashes.has_v2()
    assert (torrent.info_hash_v1, torrent.info_hash_v2) == (str(hashes.v1), str(hashes.v2))
    assert len(torrent.info_hash_v1) == 40 and len(torrent.info_hash_v2 or "") == 64
    assert list(params.trackers) == trackers and list(params.url_seeds) == []
    assert read_info_hashes(torrent.data) == (torrent.info_hash_v1, torrent.info_hash_v2)
    # the info-hash depends on the content only: a second run gives the same hashes
    again = make_torrent(path, trackers=[], piece_size=64 << 10, torrent_format="hybrid",
                         progress=False)
    assert again.info_hash_v2 == torrent.info_hash_v2


def test_v1_torrent_is_the_default_and_has_one_standard_info_hash(tmp_path: Path) -> None:
    path = tmp_path / "filter.bsf"
    path.write_bytes(bytes(range(256)) * 4096)  # 1 MiB
    assert PublisherConfig(s3=S3Config(bucket="filters")).torrent_format == "v1"
    torrent = make_torrent(path, trackers=["http://127.0.0.1:6969/announce"], piece_size=64 << 10,
                           progress=False)
    info = lt.torrent_info(torrent.data)
    hashes = info.info_hashes()
    assert hashes.has_v1() and not hashes.has_v2()
    assert torrent.info_hash_v2 is None and read_info_hashes(torrent.data) == (torrent.info_hash_v1, None)
    # The v1 info-hash is the SHA-1 of the bencoded info dictionary, as every client computes it.
    decoded = cast(dict[bytes, Any], lt.bdecode(torrent.data))
    info_dict = cast(dict[bytes, Any], decoded[b"info"])
    assert b"piece layers" not in decoded and b"file tree" not in info_dict
    assert torrent.info_hash_v1 == hashlib.sha1(lt.bencode(info_dict)).hexdigest()
    assert len(info_dict[b"pieces"]) == 20 * info.num_pieces() == 20 * 16
    hybrid = make_torrent(path, piece_size=64 << 10, torrent_format="hybrid", progress=False)
    assert hybrid.info_hash_v1 != torrent.info_hash_v1  # another info dictionary


def test_unknown_format_and_v2_only_torrents_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "filter.bsf"
    path.write_bytes(b"x" * 100_000)
    with pytest.raises(ValueError, match="torrent format"):
        make_torrent(path, torrent_format="v2", progress=False)  # type: ignore[arg-type]
    creator = lt.create_torrent(lt.list_files(str(path)), 16 << 10, lt.create_torrent.v2_only)
    lt.set_piece_hashes(creator, str(tmp_path))
    with pytest.raises(ValueError, match="no v1 info-hash"):
        read_info_hashes(lt.bencode(creator.generate()))


def test_unreadable_file_and_bad_torrent_bytes(tmp_path: Path) -> None:
    with pytest.raises(OSError, match="cannot read"):
        make_torrent(tmp_path / "missing.bsf", progress=False)
    with pytest.raises(ValueError, match="not a valid torrent"):
        read_info_hashes(b"not bencode")
