"""TLS identities for private swarms: the certificates agents present to each other.

A private swarm is one of libtorrent's SSL torrents: the torrent's info dict carries the
fleet CA's certificate (PEM), and a peer joins only with a certificate that CA issued.
libtorrent checks the chain against that CA, then requires the leaf's subjectAltName DNS
entry (or its CN) to equal the torrent's name or ``*``; so agent certificates carry SAN
DNS ``*`` and are valid for every version of the fleet.

What this module does, and what it leaves to the agent:

- :func:`load_identities` reads the identities an agent was given: in each directory,
  every ``NAME.crt`` with a ``NAME.key`` beside it. A Kubernetes TLS Secret mounted as a
  directory (``tls.crt``, ``tls.key``, ``ca.crt``: the CA has no key and is skipped) and a
  systemd credentials directory both work. Every problem is a :class:`CertificateError`
  whose one-line message names the file, so the agent refuses to start with it; that
  includes a certificate whose names, key or extensions are malformed DER (cryptography
  parses those only when they are read, so a certificate that loads is checked whole).
- :func:`identity_for` picks, for one torrent's CA, the identity that CA issued (the one
  that expires last): during a CA rotation an agent holds one identity per CA and each
  torrent gets its own (docs/private-swarm.md).
- :func:`ca_certificate_pem` is what a CA file may hand on (into torrents, into an
  agent's directory): its one CA certificate, re-serialised; a file that holds a private
  key too is refused, so a cert+key bundle never leaks the CA key.
- :func:`make_ca` and :func:`issue_certificate` make the fleet CA and agent certificates
  (``bloomswarm certs``): EC P-256 keys, SHA-256 signatures, no extendedKeyUsage; the CA
  with BasicConstraints ca=True, path length 0, critical; the leaf with SAN DNS ``*`` and
  CN = the agent's name. Validity starts :data:`CLOCK_SKEW` before ``now``.

Everything takes ``now`` (an aware datetime) instead of reading the clock, and reads no
files except :func:`load_identities`. Key files' permissions are not checked: Kubernetes
gives a Secret's files the fsGroup's read bit whatever ``defaultMode`` says.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import dsa, ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import CertificatePublicKeyTypes
from cryptography.x509.oid import NameOID

from .errors import CertificateError, FormatError

CLOCK_SKEW = dt.timedelta(minutes=5)
"""How long before ``now`` a new certificate's validity starts (peers' clocks differ)."""

ANY_TORRENT = "*"
"""The SAN DNS name libtorrent accepts for every torrent of the CA."""

MAX_NAME_LENGTH = 64
"""X.509's upper bound on a common name (ub-common-name), in bytes of UTF-8 (what
cryptography measures: 16 characters of U+10000 and above already make 64)."""

MAX_DAYS = 36_500
"""The longest validity a certificate is made with, in days (100 years). ``certs``'
``--days`` has the same bound (``cli/cert_commands.py``)."""

SigningKey = (ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey
              | ed448.Ed448PrivateKey | dsa.DSAPrivateKey)
"""The private keys that can sign a certificate or a TLS handshake."""
_SIGNING_KEYS = (ec.EllipticCurvePrivateKey, rsa.RSAPrivateKey, ed25519.Ed25519PrivateKey,
                 ed448.Ed448PrivateKey, dsa.DSAPrivateKey)

CERTIFICATE_SUFFIX = ".crt"
KEY_SUFFIX = ".key"

_PRIVATE_KEY = b"PRIVATE KEY"
"""What every PEM private-key header holds (PKCS#8, SEC1, PKCS#1, encrypted, OpenSSH)."""

_LOAD_ERRORS = (ValueError, x509.InvalidVersion)
"""What cryptography raises for bytes that are no certificate it can load."""
_PARSE_ERRORS = (ValueError, UnsupportedAlgorithm, x509.DuplicateExtension, x509.UnsupportedGeneralNameType)
"""What cryptography raises when a loaded certificate's names, key or extensions are read
and do not parse (:func:`_unparsable`)."""


@dataclass(frozen=True)
class TlsIdentity:
    """One certificate and its private key, as the agent hands them to libtorrent
    (``torrent_handle.set_ssl_certificate_buffer(certificate_pem, key_pem, dh_params)``,
    ``dh_params`` being the RFC 7919 ffdhe2048 group, agent/swarm.py ``FFDHE2048_PEM``:
    libtorrent always loads DH parameters and posts an error alert for an empty string)."""

    certificate: Path
    """The certificate file it was read from."""
    key: Path
    """The private key file it was read from."""
    certificate_pem: bytes
    """The leaf certificate, PEM (a chain file's further certificates are left out: the
    torrent carries the CA)."""
    key_pem: bytes
    """The private key, PKCS#8 PEM, unencrypted (whatever PEM form the file used)."""
    subject: str
    """The certificate's subject, RFC 4514 ("CN=node-1")."""
    not_before: dt.datetime
    """Start of validity, UTC (aware)."""
    not_after: dt.datetime
    """End of validity, UTC (aware)."""

    def issued_by(self, ca_pem: bytes) -> bool:
        """True when the certificate in ``ca_pem`` issued this one: its subject is this
        certificate's issuer and its public key verifies this certificate's signature.
        False for any other certificate (also for the CA itself); FormatError only when
        ``ca_pem`` holds no PEM certificate."""
        ca = _load_certificate(ca_pem, "the CA")
        leaf = x509.load_pem_x509_certificate(self.certificate_pem)
        if leaf == ca:
            return False
        try:
            leaf.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature, UnsupportedAlgorithm):
            return False
        return True

    def expires_in(self, now: dt.datetime) -> float:
        """Seconds from ``now`` (aware) until the certificate expires; negative once it has."""
        return (self.not_after - _aware(now)).total_seconds()


# --- reading ----------------------------------------------------------------------------------


def load_identities(dirs: Sequence[Path], *, now: dt.datetime) -> tuple[TlsIdentity, ...]:
    """Every identity in ``dirs``: each ``NAME.crt`` with a ``NAME.key`` beside it, by
    directory then name. Files whose name starts with "." are ignored.

    CertificateError (one line, naming the path) for: a directory that is missing or
    unreadable, or that holds no pair; a file that cannot be read; a certificate file that
    is not a PEM certificate, or holds a CA certificate; a key file that is not an
    unencrypted PEM private key, or does not match its certificate; a certificate not
    valid at ``now`` (expired or not yet valid).
    """
    now = _aware(now)
    identities: list[TlsIdentity] = []
    for directory in dirs:
        pairs = _pairs(Path(directory))
        if not pairs:
            raise CertificateError(
                f"certificate directory {directory}: no NAME{CERTIFICATE_SUFFIX} with a NAME{KEY_SUFFIX} "
                "beside it"
            )
        identities += [_load_pair(cert, key, now) for cert, key in pairs]
    return tuple(identities)


def _pairs(directory: Path) -> list[tuple[Path, Path]]:
    try:
        names = sorted(entry.name for entry in os.scandir(directory))
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise CertificateError(f"cannot read certificate directory {directory}: {reason}") from exc
    pairs = []
    for name in names:
        if name.startswith(".") or not name.endswith(CERTIFICATE_SUFFIX):
            continue
        cert = directory / name
        key = directory / (name[: -len(CERTIFICATE_SUFFIX)] + KEY_SUFFIX)
        if key.exists() and not cert.is_dir():
            pairs.append((cert, key))
    return pairs


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise CertificateError(f"cannot read {path}: {reason}") from exc


def _load_pair(cert_path: Path, key_path: Path, now: dt.datetime) -> TlsIdentity:
    try:
        cert = x509.load_pem_x509_certificate(_read(cert_path))
    except _LOAD_ERRORS as exc:
        raise CertificateError(f"{cert_path}: not a PEM certificate") from exc
    problem = _unparsable(cert)
    if problem is not None:
        raise CertificateError(f"{cert_path}: a certificate with {problem}")
    if _is_ca(cert):
        raise CertificateError(
            f"{cert_path}: a CA certificate, not an agent's (issue one with: bloomswarm certs issue)"
        )
    key = _load_key(_read(key_path), key_path)
    if _public_der(key.public_key()) != _public_der(cert.public_key()):
        raise CertificateError(f"{key_path} does not match the certificate {cert_path}")
    not_before, not_after = cert.not_valid_before_utc, cert.not_valid_after_utc
    if now < not_before:
        raise CertificateError(f"{cert_path}: not valid before {_when(not_before)} (now {_when(now)})")
    if now >= not_after:
        raise CertificateError(f"{cert_path}: expired at {_when(not_after)} (now {_when(now)})")
    return TlsIdentity(
        certificate=cert_path,
        key=key_path,
        certificate_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=_pkcs8(key),
        subject=cert.subject.rfc4514_string(),
        not_before=not_before,
        not_after=not_after,
    )


def _load_key(data: bytes, path: Path | str) -> SigningKey:
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError as exc:  # encrypted
        raise CertificateError(f"{path}: an encrypted private key (give it unencrypted)") from exc
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise CertificateError(f"{path}: not a PEM private key") from exc
    if not isinstance(key, _SIGNING_KEYS):
        raise CertificateError(f"{path}: a {type(key).__name__}, which cannot sign certificates or TLS")
    return key


# --- choosing ---------------------------------------------------------------------------------


def identity_for(identities: Sequence[TlsIdentity], ca_pem: bytes) -> TlsIdentity | None:
    """Among ``identities``, the one the CA in ``ca_pem`` issued that expires last; None
    when that CA issued none of them."""
    issued = [identity for identity in identities if identity.issued_by(ca_pem)]
    return max(issued, key=lambda identity: identity.not_after, default=None)


# --- CA certificates --------------------------------------------------------------------------


def ca_fingerprint(ca_pem: bytes | str) -> str:
    """The lower-case hex SHA-256 of the certificate's DER encoding (what ``openssl x509
    -fingerprint -sha256`` prints, without the colons). FormatError: not a PEM certificate."""
    return _load_certificate(ca_pem, "the CA").fingerprint(hashes.SHA256()).hex()


def check_ca(ca_pem: bytes | str) -> None:
    """FormatError unless ``ca_pem`` is a PEM certificate with BasicConstraints ca=True
    whose names, key and extensions all parse."""
    cert = _load_certificate(ca_pem, "the CA", whole=True)
    if not _is_ca(cert):
        subject = cert.subject.rfc4514_string()
        raise FormatError(f"not a CA certificate ({subject}: no BasicConstraints ca=True)")


def ca_certificate_pem(data: bytes) -> bytes:
    """The CA certificate in ``data`` (a CA file's bytes), re-serialised: only that
    certificate's PEM, whatever else surrounded it, so nothing but the certificate is ever
    handed on (into every torrent, into an agent's directory).

    FormatError, one line, when ``data`` holds a private key (any ``PRIVATE KEY`` PEM
    block: a cert+key bundle must never be published), no certificate or more than one,
    or a certificate that is not a CA (:func:`check_ca`).
    """
    if _PRIVATE_KEY in data:
        raise FormatError("holds a private key: give the CA certificate alone (the key stays apart)")
    try:
        certificates = x509.load_pem_x509_certificates(data)
    except _LOAD_ERRORS as exc:
        raise FormatError("the CA is not a PEM certificate") from exc
    if len(certificates) != 1:
        raise FormatError(f"holds {len(certificates)} certificates: give the CA certificate alone")
    pem = certificates[0].public_bytes(serialization.Encoding.PEM)
    check_ca(pem)
    return pem


def _load_certificate(pem: bytes | str, what: str, *, whole: bool = False) -> x509.Certificate:
    """The first certificate in ``pem``. FormatError, naming it ``what``: not a PEM
    certificate; with ``whole``, also names, a key or extensions that do not parse
    (:func:`_unparsable`), for callers that read them."""
    data = pem.encode() if isinstance(pem, str) else bytes(pem)
    try:
        cert = x509.load_pem_x509_certificate(data)
    except _LOAD_ERRORS as exc:
        raise FormatError(f"{what} is not a PEM certificate") from exc
    problem = _unparsable(cert) if whole else None
    if problem is not None:
        raise FormatError(f"{what} has {problem}")
    return cert


def _unparsable(cert: x509.Certificate) -> str | None:
    """What of ``cert`` does not parse, as "malformed extensions (cryptography's reason)",
    or None when its subject, issuer, public key and extensions all do. cryptography parses
    these only when they are read, raising ValueError (or UnsupportedAlgorithm, or
    DuplicateExtension...) then; once this returned None, reading them raises no more."""
    parts: tuple[tuple[str, Callable[[], object]], ...] = (
        ("a malformed subject", lambda: cert.subject),
        ("a malformed issuer", lambda: cert.issuer),
        ("a malformed public key", cert.public_key),
        ("malformed extensions", lambda: cert.extensions),
    )
    for part, read in parts:
        try:
            read()
        except _PARSE_ERRORS as exc:
            reason = " ".join(str(exc).split()) or type(exc).__name__
            if isinstance(exc, UnsupportedAlgorithm):  # a key type cryptography does not know
                return f"{part.replace('a malformed', 'an unsupported')} ({reason})"
            return f"{part} ({reason})"
    return None


def _is_ca(cert: x509.Certificate) -> bool:
    """BasicConstraints ca=True; ``cert`` is one :func:`_unparsable` passed."""
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
    except x509.ExtensionNotFound:
        return False
    return constraints.ca


# --- making certificates ----------------------------------------------------------------------


def make_ca(name: str, *, days: int, now: dt.datetime) -> tuple[bytes, bytes]:
    """A new fleet CA: (certificate PEM, PKCS#8 key PEM). Self-signed, EC P-256, SHA-256,
    CN ``name``, valid from :data:`CLOCK_SKEW` before ``now`` for ``days`` days;
    BasicConstraints ca=True, path length 0, and KeyUsage keyCertSign + cRLSign, both
    critical. ValueError: an empty or too long name, ``days`` outside 1 .. :data:`MAX_DAYS`,
    a naive ``now``."""
    subject = _name(name)
    not_before, not_after = _validity(days, now)
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False, content_commitment=False, key_encipherment=False,
                data_encipherment=False, key_agreement=False, key_cert_sign=True, crl_sign=True,
                encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pkcs8(key)


def issue_certificate(
    ca_cert_pem: bytes, ca_key_pem: bytes, *, name: str, days: int, now: dt.datetime
) -> tuple[bytes, bytes]:
    """A new agent certificate issued by the CA: (certificate PEM, PKCS#8 key PEM).

    EC P-256, SHA-256, CN ``name``, SAN DNS ``*`` (every torrent of the CA), no
    extendedKeyUsage; valid from :data:`CLOCK_SKEW` before ``now`` for ``days`` days.
    ValueError: an empty or too long name, ``days`` outside 1 .. :data:`MAX_DAYS`, a naive
    ``now``.
    CertificateError: the CA certificate is no PEM CA certificate, the key is no PEM key or
    not the CA's, or the new certificate would outlive the CA.
    """
    subject = _name(name)
    not_before, not_after = _validity(days, now)
    try:
        ca = _load_certificate(ca_cert_pem, "the CA certificate")
        check_ca(ca_cert_pem)
    except FormatError as exc:
        raise CertificateError(str(exc)) from exc
    ca_key = _load_key(ca_key_pem, "the CA key")
    if _public_der(ca_key.public_key()) != _public_der(ca.public_key()):
        raise CertificateError("the CA key does not match the CA certificate")
    if not_after > ca.not_valid_after_utc:
        raise CertificateError(
            f"the certificate would outlive the CA, which expires at {_when(ca.not_valid_after_utc)}: "
            "give fewer days, or rotate the CA (docs/private-swarm.md)"
        )
    key = ec.generate_private_key(ec.SECP256R1())
    public = key.public_key()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.subject)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(ANY_TORRENT)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), _pkcs8(key)


def _name(name: str) -> x509.Name:
    if not name.strip():
        raise ValueError("the certificate name must not be empty")
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_NAME_LENGTH:
        unit = "characters" if size == len(name) else "bytes of UTF-8"
        raise ValueError(f"the certificate name must be at most {MAX_NAME_LENGTH} {unit}, got {size}")
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])


def _validity(days: int, now: dt.datetime) -> tuple[dt.datetime, dt.datetime]:
    """(not before, not after); ValueError for ``days`` outside 1 .. :data:`MAX_DAYS`, or
    an end past what a date can hold (year 9999)."""
    if days < 1:
        raise ValueError(f"days must be at least 1, got {days}")
    if days > MAX_DAYS:
        raise ValueError(f"days must be at most {MAX_DAYS:,} (100 years), got {days:,}")
    now = _aware(now)
    try:
        return now - CLOCK_SKEW, now + dt.timedelta(days=days)
    except OverflowError:
        raise ValueError(f"{days:,} days from {now:%Y-%m-%d} is past the year 9999") from None


# --- describing -------------------------------------------------------------------------------


def describe_certificate(pem: bytes | str) -> dict[str, str]:
    """What ``bloomswarm certs show`` prints: label -> value, in order. FormatError: not a
    PEM certificate, or one whose names, key or extensions do not parse."""
    cert = _load_certificate(pem, "the file", whole=True)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = ", ".join(_general_name(n) for n in san)
    except x509.ExtensionNotFound:
        names = "none"
    try:
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        is_ca = "yes" if constraints.ca else "no"
        if constraints.ca and constraints.path_length is not None:
            is_ca += f" (path length {constraints.path_length})"
    except x509.ExtensionNotFound:
        is_ca = "no"
    public = cert.public_key()
    key = (f"EC {public.curve.name}" if isinstance(public, ec.EllipticCurvePublicKey)
           else type(public).__name__.removeprefix("_"))
    return {
        "subject": cert.subject.rfc4514_string(),
        "issuer": cert.issuer.rfc4514_string(),
        "SAN": names,
        "not before": _when(cert.not_valid_before_utc),
        "not after": _when(cert.not_valid_after_utc),
        "key": key,
        "SHA-256": cert.fingerprint(hashes.SHA256()).hex(),
        "CA": is_ca,
    }


def _general_name(name: x509.GeneralName) -> str:
    if isinstance(name, x509.DNSName):
        return f"DNS:{name.value}"
    if isinstance(name, x509.IPAddress):
        return f"IP:{name.value}"
    if isinstance(name, x509.UniformResourceIdentifier):
        return f"URI:{name.value}"
    return str(name.value)


# --- helpers ----------------------------------------------------------------------------------


def _aware(now: dt.datetime) -> dt.datetime:
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("now must be an aware datetime (with a time zone)")
    return now.astimezone(dt.timezone.utc)


def _when(moment: dt.datetime) -> str:
    return moment.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _public_der(public: CertificatePublicKeyTypes) -> bytes:
    return public.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)


def _pkcs8(key: SigningKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
