"""Ed25519 keys and signatures for manifests and the latest-version pointer.

The publisher holds one private key; agents pin a list of public keys, so a key can be
rotated by shipping the new public key to the fleet before the publisher switches.
Keys are PEM files: PKCS#8 (unencrypted) for the private key, SubjectPublicKeyInfo for
the public key — the formats ``openssl genpkey -algorithm ed25519`` writes.

Errors: a missing, unreadable, malformed or non-Ed25519 key file raises ConfigError
naming the file; a private key file that grants group or others any access (``mode &
0o077``, or its POSIX ACL) raises InsecureKeyFile (a ConfigError), as ssh refuses such a key; a
signature that no pinned key accepts raises VerificationError. Keys given as bytes
(:func:`parse_private_key`) have no mode to check.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from .atomic_file import write_atomically
from .errors import ConfigError, InsecureKeyFile, VerificationError
from .file_access import has_acl, open_to_others

SIGNATURE_SIZE = 64
"""Length of a raw Ed25519 signature in bytes."""

_PEM_MARK = "-----BEGIN"


@dataclass(frozen=True, repr=False)
class VerifyKey:
    """An Ed25519 public key plus where it came from (for messages)."""

    key: Ed25519PublicKey
    source: str = "<memory>"

    @property
    def key_id(self) -> str:
        """First 16 hex characters of the SHA-256 of the raw 32-byte public key."""
        return key_id(self)

    def __repr__(self) -> str:
        return f"VerifyKey(key_id={self.key_id!r}, source={self.source!r})"


@dataclass(frozen=True, repr=False)
class SigningKey:
    """An Ed25519 private key. Its repr never shows key material."""

    key: Ed25519PrivateKey
    source: str = "<memory>"

    def public_key(self) -> VerifyKey:
        """The matching public key."""
        return VerifyKey(self.key.public_key(), source=f"public key of {self.source}")

    @property
    def key_id(self) -> str:
        """The key id of the matching public key."""
        return key_id(self.public_key())

    def __repr__(self) -> str:
        return f"SigningKey(key_id={self.key_id!r}, source={self.source!r})"


def key_id(public_key: VerifyKey | Ed25519PublicKey) -> str:
    """First 16 hex characters of the SHA-256 of the raw 32-byte public key."""
    key = public_key.key if isinstance(public_key, VerifyKey) else public_key
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def generate_keypair() -> tuple[bytes, bytes]:
    """Return a new (private PEM PKCS#8 unencrypted, public PEM SubjectPublicKeyInfo)."""
    private = Ed25519PrivateKey.generate()
    private_pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    public_pem = private.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return private_pem, public_pem


def write_keypair(private_path: Path, public_path: Path, *, overwrite: bool = False) -> str:
    """Generate a key pair, write both PEM files and return the key id.

    The private key file gets mode 0600, the public one 0644. Each file is written to a
    temporary name, fsynced, then linked into place, so a crash leaves no half-written key.
    Without ``overwrite``, an existing file at either path raises ConfigError and nothing
    is written. When the public key cannot be written (ConfigError), the private key file
    this call just wrote is removed again: no private key is left without its public half.
    """
    private_path, public_path = Path(private_path), Path(public_path)
    if private_path.resolve() == public_path.resolve():
        raise ConfigError(f"the public key needs another file name than {private_path}")
    if not overwrite:
        for path in (private_path, public_path):
            if path.exists() or path.is_symlink():
                raise ConfigError(f"{path} already exists: refusing to overwrite a key")
    private_pem, public_pem = generate_keypair()
    _write_atomic(private_path, private_pem, 0o600, overwrite=overwrite)
    try:
        _write_atomic(public_path, public_pem, 0o644, overwrite=overwrite)
    except BaseException:
        _remove_if_written(private_path, private_pem)
        raise
    return key_id(load_public_keys([public_pem])[0])


def _remove_if_written(path: Path, data: bytes) -> None:
    """Remove ``path`` if it is still the regular file this call wrote, holding ``data``
    (a new private key: no other file holds it), not a file that replaced it since."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as handle:
            ours = stat.S_ISREG(os.fstat(handle.fileno()).st_mode) and handle.read(len(data) + 1) == data
        if ours:
            path.unlink()


def _write_atomic(path: Path, data: bytes, mode: int, *, overwrite: bool) -> None:
    """Write ``data`` to ``path`` with ``mode``; ConfigError on failure or an existing file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # FileExistsError too: a file where the folder should be
        raise ConfigError(f"cannot write {path}: cannot make its folder {path.parent}: "
                          f"{exc.strerror or exc}") from exc
    try:
        write_atomically(path, [data], mode=mode, overwrite=overwrite)
    except FileExistsError as exc:
        raise ConfigError(f"{path} already exists: refusing to overwrite a key") from exc
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror or exc}") from exc


def _read_key_file(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError as exc:
        raise ConfigError(f"{what} file {path} does not exist") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read {what} file {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:  # a NUL in the name
        raise ConfigError(f"cannot read {what} file {str(path)!r}: {exc}") from exc


@dataclass(frozen=True)
class _KeyFile:
    data: bytes
    mode: int
    """Permission bits."""
    exposed: bool
    """Someone but its owner (and this process's user) may access it."""
    acl: bool
    """It carries a POSIX access ACL."""


def _read_private_key_file(path: Path) -> _KeyFile:
    """The file's bytes and who may access it, all from the one open file (after symlinks)."""
    try:
        with path.open("rb") as handle:
            fd = handle.fileno()
            return _KeyFile(handle.read(), stat.S_IMODE(os.fstat(fd).st_mode),
                            open_to_others(fd), has_acl(fd))
    except FileNotFoundError as exc:
        raise ConfigError(f"private key file {path} does not exist") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read private key file {path}: {exc.strerror or exc}") from exc


def load_private_key(path: Path | str) -> SigningKey:
    """Load an unencrypted PKCS#8 PEM Ed25519 private key from a file.

    ConfigError names the file when it is missing, unreadable or not such a key. A file
    that holds such a key but grants any access to group or others (``mode & 0o077``, or
    its POSIX ACL, see :mod:`.file_access`) raises InsecureKeyFile; this is checked after
    parsing, so a file that holds no private key is reported as that.
    """
    key_file = _read_private_key_file(Path(path))
    key = parse_private_key(key_file.data, f"private key file {path}")
    if key_file.exposed:
        raise InsecureKeyFile(str(path), key_file.mode, acl=key_file.acl)
    return key


def parse_private_key(data: bytes, source: str = "private key") -> SigningKey:
    """Parse PEM bytes as an unencrypted Ed25519 private key; ConfigError names ``source``."""
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError as exc:
        raise ConfigError(f"{source} is encrypted; use an unencrypted key") from exc
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"{source} is not a valid PEM private key") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{source} holds a {_kind(key)} key, not Ed25519")
    return SigningKey(key, source=source)


def load_public_keys(sources: Iterable[Path | str | bytes]) -> list[VerifyKey]:
    """Load Ed25519 public keys from PEM files, PEM strings or PEM bytes.

    A ``str`` that starts with "-----BEGIN" is PEM text, any other ``str`` or a ``Path``
    is a file name. Raises ConfigError, naming the source, for a bad or non-Ed25519 key,
    and for an empty list (an agent must pin at least one key).
    """
    keys: list[VerifyKey] = []
    for index, source in enumerate(sources):
        if isinstance(source, bytes):
            data, name = source, f"public key #{index + 1}"
        elif isinstance(source, str) and source.lstrip().startswith(_PEM_MARK):
            data, name = source.encode("utf-8"), f"public key #{index + 1}"
        else:
            data, name = _read_key_file(Path(source), "public key"), f"file {source}"
        keys.append(_parse_public_key(data, name))
    if not keys:
        raise ConfigError("no public keys given: pin at least one publisher key")
    return keys


def _parse_public_key(data: bytes, name: str) -> VerifyKey:
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ConfigError(f"{name} is not a valid PEM public key") from exc
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigError(f"{name} holds a {_kind(key)} key, not Ed25519")
    return VerifyKey(key, source=name)


def _kind(key: object) -> str:
    return type(key).__name__.removeprefix("_").replace("PrivateKey", "").replace("PublicKey", "")


def sign(private_key: SigningKey, data: bytes) -> bytes:
    """Return the raw 64-byte Ed25519 signature of ``data``."""
    return private_key.key.sign(data)


def verify(public_keys: Sequence[VerifyKey], data: bytes, signature: bytes) -> int:
    """Return the index of the first key in ``public_keys`` whose signature ``signature`` is.

    Raises VerificationError when no key verifies (or the signature is not 64 bytes).
    """
    if len(signature) != SIGNATURE_SIZE:
        raise VerificationError(
            f"signature is {len(signature)} bytes, an Ed25519 signature is {SIGNATURE_SIZE}"
        )
    for index, public_key in enumerate(public_keys):
        try:
            public_key.key.verify(signature, data)
        except InvalidSignature:
            continue
        return index
    ids = ", ".join(k.key_id for k in public_keys) or "none pinned"
    raise VerificationError(f"signature does not match any trusted public key ({ids})")
