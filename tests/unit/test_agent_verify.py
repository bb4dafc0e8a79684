"""The swap gate: a good download passes; each check fails on its own fault, first failure wins."""

from __future__ import annotations

import collections
import dataclasses
import datetime
import hashlib
from pathlib import Path

import pytest

from bloomswarm.agent.transfer import TransferStatus
from bloomswarm.agent.verify import CheckFailed, check_torrent, read_torrent, verify_download
from bloomswarm.common.errors import VerificationError
from bloomswarm.common.manifest import Manifest
from bloomswarm.common.storage import MemoryObjectStore
from bloomswarm.common.tls_identity import ca_fingerprint, make_ca
from bloomswarm.publisher.torrent import make_torrent
from tests.unit.agent_helpers import publish

NOW = datetime.datetime(2026, 11, 24, tzinfo=datetime.timezone.utc)


@dataclasses.dataclass
class Download:
    manifest: Manifest
    torrent: bytes
    path: Path


@pytest.fixture
def download(tmp_path: Path) -> Download:
    store = MemoryObjectStore()
    manifest = publish(store, ["a", "b", "c"])
    data, torrent = store.get(manifest.filter_key), store.get(manifest.torrent_key)
    assert data is not None and torrent is not None
    path = tmp_path / "filter.bsf"
    path.write_bytes(data.data)
    return Download(manifest, torrent.data, path)


def _status(*, finished: bool = True, state: str = "seeding", error: str | None = None) -> TransferStatus:
    return TransferStatus(version=1, state=state, progress=1.0 if finished else 0.5,  # type: ignore[arg-type]
                          total_bytes=1, bytes_from_peers=0, bytes_from_origin=1, bytes_uploaded=0,
                          peers=0, hash_failures=0, finished=finished, error=error)


def _check(download: Download, **changes: object) -> str:
    manifest = changes.pop("manifest", download.manifest)
    torrent = changes.pop("torrent", download.torrent)
    status = changes.pop("status", _status())
    with pytest.raises(CheckFailed) as info:
        verify_download(manifest, torrent, status, download.path)  # type: ignore[arg-type]
    assert isinstance(info.value, VerificationError) and str(info.value)
    return info.value.check


def test_a_good_download_passes(download: Download) -> None:
    header = verify_download(download.manifest, download.torrent, _status(), download.path)
    assert header.filter_version == download.manifest.version == 1


def test_torrent_that_is_not_one(download: Download) -> None:
    assert _check(download, torrent=b"d4:spam") == "torrent"


def test_torrent_of_another_file_name(download: Download, tmp_path: Path) -> None:
    other = tmp_path / "other.bin"
    other.write_bytes(download.path.read_bytes())
    torrent = make_torrent(other, progress=False).data
    assert read_torrent(torrent).file_name == "other.bin"
    assert _check(download, torrent=torrent) == "torrent"


def test_torrent_of_another_size(download: Download, tmp_path: Path) -> None:
    other = tmp_path / "x" / "filter.bsf"
    other.parent.mkdir()
    other.write_bytes(download.path.read_bytes() + b"\0")
    assert _check(download, torrent=make_torrent(other, progress=False).data) == "torrent"


def test_torrent_of_other_content(download: Download, tmp_path: Path) -> None:
    other = tmp_path / "x" / "filter.bsf"
    other.parent.mkdir()
    other.write_bytes(bytes(download.manifest.size))
    torrent = make_torrent(other, progress=False).data
    assert _check(download, torrent=torrent) == "info_hash"
    with pytest.raises(CheckFailed):
        check_torrent(download.manifest, torrent)


def test_torrent_format_must_match_the_manifest(download: Download, tmp_path: Path) -> None:
    """The same file as a hybrid torrent: its v1 info-hash differs, and it has a v2 one the
    v1 manifest lacks. A manifest naming that hybrid torrent refuses the v1 torrent."""
    assert download.manifest.torrent_format == "v1" and read_torrent(download.torrent).info_hash_v2 is None
    hybrid = make_torrent(download.path, piece_size=download.manifest.piece_size,
                          torrent_format="hybrid", progress=False)
    assert read_torrent(hybrid.data).info_hash_v2 == hybrid.info_hash_v2
    assert _check(download, torrent=hybrid.data) == "info_hash"
    # a v1 manifest claiming the hybrid torrent's v1 hash: the extra v2 hash still refuses it
    v1_claim = dataclasses.replace(download.manifest, info_hash_v1=hybrid.info_hash_v1)
    assert _check(download, manifest=v1_claim, torrent=hybrid.data) == "info_hash"
    as_hybrid = dataclasses.replace(download.manifest, info_hash_v1=hybrid.info_hash_v1,
                                    info_hash_v2=hybrid.info_hash_v2)
    verify_download(as_hybrid, hybrid.data, _status(), download.path)
    assert _check(download, manifest=as_hybrid) == "info_hash"


@pytest.mark.parametrize(
    "status",
    [None, _status(finished=False, state="downloading"), _status(state="error", error="disk full")],
)
def test_transfer_not_finished_or_failed(download: Download, status: TransferStatus | None) -> None:
    assert _check(download, status=status) == "transfer"


def test_file_of_the_wrong_size(download: Download) -> None:
    download.path.write_bytes(download.path.read_bytes()[:-1])
    assert _check(download) == "size"
    download.path.unlink()
    assert _check(download) == "size"


def test_file_whose_sha256_differs(download: Download) -> None:
    data = bytearray(download.path.read_bytes())
    data[5000] ^= 1
    download.path.write_bytes(bytes(data))
    assert _check(download) == "sha256"


def test_header_that_does_not_parse(download: Download) -> None:
    data = bytearray(download.path.read_bytes())
    data[100] ^= 1  # breaks the header CRC
    download.path.write_bytes(bytes(data))
    manifest = dataclasses.replace(download.manifest, sha256=hashlib.sha256(data).hexdigest())
    assert _check(download, manifest=manifest) == "header"


@pytest.mark.parametrize(
    "change",
    [{"created_at": 1}, {"body_sha256": "0" * 64}, {"version": 2}],
)
def test_header_that_disagrees_with_the_manifest(download: Download, change: dict[str, object]) -> None:
    manifest = dataclasses.replace(download.manifest, **change)  # type: ignore[arg-type]
    assert _check(download, manifest=manifest) == "header"


def test_header_whose_parameters_disagree(download: Download) -> None:
    summary = dataclasses.replace(download.manifest.filter, key_count=download.manifest.filter.key_count + 1)
    manifest = dataclasses.replace(download.manifest, filter=summary)
    assert _check(download, manifest=manifest) == "header"


def test_the_torrent_must_carry_the_swarm_ca_the_manifest_names(download: Download) -> None:
    """A private version: the torrent's CA is the one the signed manifest names. Stripping
    it (the public torrent under a private manifest), adding one, or swapping it fails."""
    fleet, other = make_ca("fleet", days=30, now=NOW)[0], make_ca("other", days=30, now=NOW)[0]

    def private_torrent(ca: bytes) -> bytes:
        return make_torrent(download.path, piece_size=download.manifest.piece_size,
                            root_cert=ca.decode(), progress=False).data

    torrent = private_torrent(fleet)
    assert read_torrent(torrent).ca_sha256 == ca_fingerprint(fleet)
    as_private = dataclasses.replace(download.manifest, swarm_ca_sha256=ca_fingerprint(fleet),
                                     info_hash_v1=read_torrent(torrent).info_hash_v1)
    verify_download(as_private, torrent, _status(), download.path)
    # stripped: the info-hash tells (it covers the CA), and so does the CA check alone
    assert _check(download, manifest=as_private, torrent=download.torrent) == "info_hash"
    claims_private = dataclasses.replace(download.manifest, swarm_ca_sha256=ca_fingerprint(fleet))
    assert _check(download, manifest=claims_private) == "torrent"
    assert _check(download, torrent=torrent) in ("torrent", "info_hash")  # added
    swapped = private_torrent(other)
    assert _check(download, manifest=dataclasses.replace(
        as_private, info_hash_v1=read_torrent(swapped).info_hash_v1), torrent=swapped) == "torrent"


def test_torrent_summaries_are_remembered_by_content_and_bounded(
    download: Download, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from bloomswarm.agent import verify

    parsed: list[bytes] = []
    real = verify._parse_torrent

    def counted(torrent: bytes) -> verify.TorrentSummary:
        parsed.append(torrent)
        return real(torrent)

    monkeypatch.setattr(verify, "_parse_torrent", counted)
    monkeypatch.setattr(verify, "_SUMMARIES_KEPT", 2)
    monkeypatch.setattr(verify, "_summaries", collections.OrderedDict())
    torrent = download.torrent
    first = read_torrent(torrent)
    assert read_torrent(bytes(torrent)) == first and len(parsed) == 1  # equal bytes: parsed once
    for bad in (b"d4:spam", b"d4:spam"):  # a refusal is not remembered: raised each time
        with pytest.raises(CheckFailed):
            read_torrent(bad)
    assert len(parsed) == 3
    for name in ("one.bin", "two.bin"):
        (tmp_path / name).write_bytes(name.encode())
        read_torrent(make_torrent(tmp_path / name, progress=False).data)
    assert len(verify._summaries) == 2
    read_torrent(torrent)  # pushed out by the two others: parsed again
    assert parsed.count(torrent) == 2
