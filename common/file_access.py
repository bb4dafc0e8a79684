"""Whether anyone but its owner (and this process's user) may access a file.

Used to refuse a private key file others can read, as ssh does. The permission bits say
it for a plain file: any group or other bit (``mode & 0o077``) opens it. A file with a
POSIX access ACL is judged by its entries instead, because ``stat`` then shows the ACL's
mask in the group bits: systemd hands a ``LoadCredential=`` file to a service as a
root-owned 0400 file plus one ``user:SERVICE:r`` entry, which ``stat`` shows as 0440
although no group can read it. With an ACL the file is open when its "other" entry grants
anything, or when its owning group, a named group, or a named user other than this
process's effective user is granted something the mask lets through.
"""

from __future__ import annotations

import errno
import os
import stat
import struct

ACL_XATTR = "system.posix_acl_access"
"""The extended attribute the Linux kernel exposes a file's access ACL as."""

_ACL_VERSION = 2
_HEADER = struct.Struct("<I")
_ENTRY = struct.Struct("<HHI")
_USER, _GROUP_OBJ, _GROUP, _MASK, _OTHER = 0x02, 0x04, 0x08, 0x10, 0x20
"""Entry tags (``ACL_USER_OBJ`` 0x01, the owner, needs no check)."""
_NO_ACL = {errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS}


def open_to_others(fd: int) -> bool:
    """True when the open file ``fd`` grants any access to a user other than its owner and
    this process's effective user (by permission bits, or by its POSIX ACL if it has one).
    An ACL that cannot be parsed counts as open."""
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    acl = _read_acl(fd)
    if acl is None:
        return bool(mode & 0o077)
    return _acl_open_to_others(acl, os.geteuid())


def has_acl(fd: int) -> bool:
    """True when the open file ``fd`` carries a POSIX access ACL."""
    return _read_acl(fd) is not None


def _read_acl(fd: int) -> bytes | None:
    getxattr = getattr(os, "getxattr", None)
    if getxattr is None:  # not Linux: no POSIX ACLs to read, the bits decide
        return None
    try:
        data: bytes = getxattr(fd, ACL_XATTR)
    except OSError as exc:
        if exc.errno in _NO_ACL:
            return None
        raise
    return data


def _acl_open_to_others(data: bytes, euid: int) -> bool:
    body = data[_HEADER.size:]
    if len(data) < _HEADER.size or _HEADER.unpack_from(data)[0] != _ACL_VERSION or len(body) % _ENTRY.size:
        return True
    entries = [_ENTRY.unpack_from(body, offset) for offset in range(0, len(body), _ENTRY.size)]
    mask = next((perm for tag, perm, _ in entries if tag == _MASK), 0o7)
    for tag, perm, ident in entries:
        if tag == _OTHER and perm:
            return True
        if tag in (_GROUP_OBJ, _GROUP) and perm & mask:
            return True
        if tag == _USER and ident != euid and perm & mask:
            return True
    return False


__all__ = ["ACL_XATTR", "has_acl", "open_to_others"]
