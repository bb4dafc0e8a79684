"""Who may access a private key file: permission bits, and POSIX ACLs the way systemd's
LoadCredential= sets them (a 0400 file plus one ``user:SERVICE:r`` entry, which stat shows
as 0440). ACLs are written as the kernel's ``system.posix_acl_access`` attribute."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from bloomswarm.common.errors import InsecureKeyFile
from bloomswarm.common.file_access import ACL_XATTR, _acl_open_to_others, has_acl, open_to_others
from bloomswarm.common.signing import load_private_key, write_keypair

USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
UNDEFINED = 0xFFFFFFFF
ME = os.geteuid()
SOMEONE = ME + 4242


def acl(*entries: tuple[int, int, int]) -> bytes:
    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


def credential_acl(user: int, *, group: int = 0, other: int = 0, mask: int = 4) -> bytes:
    """What systemd writes: owner r, a named user r, the rest as given."""
    return acl((USER_OBJ, 4, UNDEFINED), (USER, 4, user), (GROUP_OBJ, group, UNDEFINED),
               (MASK, mask, UNDEFINED), (OTHER, other, UNDEFINED))


def _open_to_others(path: Path) -> bool:
    with path.open("rb") as handle:
        return open_to_others(handle.fileno())


@pytest.mark.parametrize(("mode", "expected"), [
    (0o600, False), (0o400, False), (0o700, False), (0o640, True), (0o604, True), (0o610, True),
    (0o602, True), (0o644, True), (0o440, True),
])
def test_without_an_acl_the_group_and_other_bits_decide(tmp_path: Path, mode: int, expected: bool) -> None:
    path = tmp_path / "file"
    path.write_bytes(b"x")
    path.chmod(mode)
    assert _open_to_others(path) is expected
    with path.open("rb") as handle:
        assert not has_acl(handle.fileno())


@pytest.mark.parametrize(("data", "expected"), [
    (credential_acl(ME), False),                      # systemd's credential for this user
    (credential_acl(SOMEONE), True),                  # ... for another user
    (credential_acl(SOMEONE, mask=0), False),         # the mask takes the named user's r away
    (credential_acl(ME, group=4), True),              # the owning group may read
    (credential_acl(ME, group=4, mask=0), False),     # ... except the mask forbids it
    (credential_acl(ME, other=4), True),              # others may read (the mask never limits them)
    (credential_acl(ME, other=4, mask=0), True),
    (acl((USER_OBJ, 6, UNDEFINED), (GROUP_OBJ, 0, UNDEFINED), (GROUP, 4, 1234), (MASK, 4, UNDEFINED),
         (OTHER, 0, UNDEFINED)), True),              # a named group may read
    (acl((USER_OBJ, 6, UNDEFINED), (GROUP_OBJ, 0, UNDEFINED), (OTHER, 0, UNDEFINED)), False),
    (acl((USER_OBJ, 6, UNDEFINED), (USER, 1, SOMEONE), (GROUP_OBJ, 0, UNDEFINED),
         (OTHER, 0, UNDEFINED)), True),              # no mask entry: nothing is masked
    (b"", True),                                      # malformed: counted as open
    (struct.pack("<I", 3) + struct.pack("<HHI", OTHER, 0, UNDEFINED), True),
    (credential_acl(ME)[:-2], True),
])
def test_acl_entries_decide_when_there_is_an_acl(data: bytes, expected: bool) -> None:
    assert _acl_open_to_others(data, ME) is expected


def _set_acl(path: Path, data: bytes) -> None:
    os.setxattr(path, ACL_XATTR, data)


def test_a_systemd_credential_is_loaded_and_an_acl_for_someone_else_is_refused(tmp_path: Path) -> None:
    private = tmp_path / "signing.key"
    write_keypair(private, tmp_path / "signing.pub")
    private.chmod(0o400)
    _set_acl(private, credential_acl(ME))
    assert oct(private.stat().st_mode & 0o777) == "0o440"  # the mask shows in the group bits
    with private.open("rb") as handle:
        assert has_acl(handle.fileno())
    assert load_private_key(private).key_id  # what LoadCredential= hands the publisher

    _set_acl(private, credential_acl(SOMEONE))
    with pytest.raises(InsecureKeyFile) as caught:
        load_private_key(private)
    assert str(caught.value) == (f"private key file {private} is accessible to group or others "
                                 f"(mode 0440 with a POSIX ACL): run chmod 600 {private}")
    private.chmod(0o600)  # the fix the message names: the mask becomes ---, the entry has no effect
    assert load_private_key(private).key_id
