"""common/tls_identity.py: reading identities (every refusal one line naming the file),
choosing one per CA, fingerprints, and the certificates ``make_ca``/``issue_certificate``
make (what libtorrent's SSL torrents need: SAN DNS "*", no extendedKeyUsage)."""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtensionOID, NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomswarm.common.errors import CertificateError, ConfigError, FormatError
from bloomswarm.common.tls_identity import (
    CLOCK_SKEW,
    TlsIdentity,
    ca_certificate_pem,
    ca_fingerprint,
    check_ca,
    describe_certificate,
    identity_for,
    issue_certificate,
    load_identities,
    make_ca,
)

NOW = dt.datetime(2030, 6, 1, 12, 0, tzinfo=dt.timezone.utc)
DAY = dt.timedelta(days=1)

# One CA and certificates made once: EC key generation is cheap, but the tables reuse them.
CA_PEM, CA_KEY = make_ca("fleet CA", days=3650, now=NOW)
OTHER_CA_PEM, OTHER_CA_KEY = make_ca("another CA", days=3650, now=NOW)
LEAF_PEM, LEAF_KEY = issue_certificate(CA_PEM, CA_KEY, name="node-1", days=30, now=NOW)


def _write_pair(directory: Path, cert: bytes, key: bytes, name: str = "tls") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.crt").write_bytes(cert)
    (directory / f"{name}.key").write_bytes(key)
    return directory


def _other_key() -> bytes:
    return ec.generate_private_key(ec.SECP256R1()).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


# --- load_identities ------------------------------------------------------------------------


def test_a_kubernetes_tls_secret_layout_gives_one_identity(tmp_path: Path) -> None:
    directory = _write_pair(tmp_path / "secret", LEAF_PEM, LEAF_KEY)
    (directory / "ca.crt").write_bytes(CA_PEM)  # no ca.key beside it: skipped
    (directory / "..data").mkdir()  # the kubelet's own entries
    (identity,) = load_identities([directory], now=NOW)
    assert identity.certificate == directory / "tls.crt" and identity.key == directory / "tls.key"
    assert identity.subject == "CN=node-1"
    assert identity.certificate_pem == LEAF_PEM
    assert identity.key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
    assert identity.not_before == NOW - CLOCK_SKEW and identity.not_after == NOW + 30 * DAY
    assert identity.not_before.tzinfo is not None
    assert identity.expires_in(NOW) == 30 * 86400
    assert identity.issued_by(CA_PEM)


def test_every_pair_in_every_directory_in_order(tmp_path: Path) -> None:
    second, second_key = issue_certificate(CA_PEM, CA_KEY, name="node-1-next", days=60, now=NOW)
    first_dir = _write_pair(tmp_path / "a", LEAF_PEM, LEAF_KEY, "old")
    _write_pair(first_dir, second, second_key, "new")
    other, other_key = issue_certificate(OTHER_CA_PEM, OTHER_CA_KEY, name="node-1", days=10, now=NOW)
    second_dir = _write_pair(tmp_path / "b", other, other_key)
    identities = load_identities([first_dir, second_dir], now=NOW)
    assert [i.certificate.name for i in identities] == ["new.crt", "old.crt", "tls.crt"]


def test_a_sec1_ec_key_is_handed_on_as_pkcs8(tmp_path: Path) -> None:
    key = serialization.load_pem_private_key(LEAF_KEY, password=None)
    sec1 = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption())
    assert sec1.startswith(b"-----BEGIN EC PRIVATE KEY-----")
    (identity,) = load_identities([_write_pair(tmp_path, LEAF_PEM, sec1)], now=NOW)
    assert identity.key_pem == LEAF_KEY


def _missing(tmp: Path) -> tuple[Path, str]:
    return tmp / "nope", f"cannot read certificate directory {tmp / 'nope'}: No such file or directory"


def _a_file(tmp: Path) -> tuple[Path, str]:
    (tmp / "file").write_text("x")
    return tmp / "file", f"cannot read certificate directory {tmp / 'file'}: Not a directory"


def _no_pair(tmp: Path) -> tuple[Path, str]:
    (tmp / "ca.crt").write_bytes(CA_PEM)
    (tmp / "tls.key").write_bytes(LEAF_KEY)
    return tmp, f"certificate directory {tmp}: no NAME.crt with a NAME.key beside it"


def _garbage_certificate(tmp: Path) -> tuple[Path, str]:
    _write_pair(tmp, b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n", LEAF_KEY)
    return tmp, f"{tmp / 'tls.crt'}: not a PEM certificate"


def _der_certificate(tmp: Path) -> tuple[Path, str]:
    der = x509.load_pem_x509_certificate(LEAF_PEM).public_bytes(serialization.Encoding.DER)
    _write_pair(tmp, der, LEAF_KEY)
    return tmp, f"{tmp / 'tls.crt'}: not a PEM certificate"


def _garbage_key(tmp: Path) -> tuple[Path, str]:
    _write_pair(tmp, LEAF_PEM, b"hello\n")
    return tmp, f"{tmp / 'tls.key'}: not a PEM private key"


def _certificate_as_key(tmp: Path) -> tuple[Path, str]:
    _write_pair(tmp, LEAF_PEM, LEAF_PEM)
    return tmp, f"{tmp / 'tls.key'}: not a PEM private key"


def _encrypted_key(tmp: Path) -> tuple[Path, str]:
    key = serialization.load_pem_private_key(LEAF_KEY, password=None)
    locked = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                               serialization.BestAvailableEncryption(b"secret"))
    _write_pair(tmp, LEAF_PEM, locked)
    return tmp, f"{tmp / 'tls.key'}: an encrypted private key (give it unencrypted)"


def _mismatched_key(tmp: Path) -> tuple[Path, str]:
    _write_pair(tmp, LEAF_PEM, _other_key())
    return tmp, f"{tmp / 'tls.key'} does not match the certificate {tmp / 'tls.crt'}"


def _expired(tmp: Path) -> tuple[Path, str]:
    cert, key = issue_certificate(CA_PEM, CA_KEY, name="old", days=1, now=NOW - 2 * DAY)
    _write_pair(tmp, cert, key)
    return tmp, f"{tmp / 'tls.crt'}: expired at 2030-05-31T12:00:00Z (now 2030-06-01T12:00:00Z)"


def _expiring_exactly_now(tmp: Path) -> tuple[Path, str]:
    cert, key = issue_certificate(CA_PEM, CA_KEY, name="old", days=1, now=NOW - DAY)
    _write_pair(tmp, cert, key)
    return tmp, f"{tmp / 'tls.crt'}: expired at 2030-06-01T12:00:00Z (now 2030-06-01T12:00:00Z)"


def _not_yet_valid(tmp: Path) -> tuple[Path, str]:
    cert, key = issue_certificate(CA_PEM, CA_KEY, name="future", days=1, now=NOW + DAY)
    _write_pair(tmp, cert, key)
    return tmp, f"{tmp / 'tls.crt'}: not valid before 2030-06-02T11:55:00Z (now 2030-06-01T12:00:00Z)"


def _the_ca_itself(tmp: Path) -> tuple[Path, str]:
    _write_pair(tmp, CA_PEM, CA_KEY, "ca")
    return tmp, f"{tmp / 'ca.crt'}: a CA certificate, not an agent's (issue one with: bloomswarm certs issue)"


def _unreadable_key(tmp: Path) -> tuple[Path, str]:
    _write_pair(tmp, LEAF_PEM, LEAF_KEY)
    (tmp / "tls.key").unlink()
    (tmp / "tls.key").mkdir()  # a directory where the key should be: reading it fails for root too
    return tmp, f"cannot read {tmp / 'tls.key'}: Is a directory"


REFUSALS: dict[str, Callable[[Path], tuple[Path, str]]] = {
    "missing directory": _missing,
    "a file, not a directory": _a_file,
    "no pair": _no_pair,
    "garbage certificate": _garbage_certificate,
    "DER certificate": _der_certificate,
    "garbage key": _garbage_key,
    "a certificate as the key": _certificate_as_key,
    "encrypted key": _encrypted_key,
    "mismatched key": _mismatched_key,
    "expired": _expired,
    "expires exactly now": _expiring_exactly_now,
    "not yet valid": _not_yet_valid,
    "the CA itself": _the_ca_itself,
    "unreadable key": _unreadable_key,
}


@pytest.mark.parametrize("case", list(REFUSALS))
def test_load_identities_refuses_with_one_line_naming_the_path(case: str, tmp_path: Path) -> None:
    directory, message = REFUSALS[case](tmp_path)
    good = _write_pair(tmp_path.parent / f"{tmp_path.name}-good", LEAF_PEM, LEAF_KEY)
    with pytest.raises(CertificateError) as caught:
        load_identities([good, directory], now=NOW)
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)
    assert isinstance(caught.value, ConfigError)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_certificate_file_is_refused(tmp_path: Path) -> None:
    _write_pair(tmp_path, LEAF_PEM, LEAF_KEY)
    (tmp_path / "tls.crt").chmod(0)
    with pytest.raises(CertificateError, match=r"^cannot read .*tls\.crt: Permission denied$"):
        load_identities([tmp_path], now=NOW)


def test_a_naive_now_is_a_programming_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="aware"):
        load_identities([_write_pair(tmp_path, LEAF_PEM, LEAF_KEY)], now=NOW.replace(tzinfo=None))


def test_no_directories_is_no_identities() -> None:
    assert load_identities([], now=NOW) == ()


# --- issued_by, identity_for ----------------------------------------------------------------


def _identity(cert: bytes, key: bytes, tmp: Path) -> TlsIdentity:
    (identity,) = load_identities([_write_pair(tmp, cert, key)], now=NOW)
    return identity


@pytest.mark.parametrize(("ca", "expected"), [(CA_PEM, True), (OTHER_CA_PEM, False), (LEAF_PEM, False)],
                         ids=["its CA", "another CA", "itself"])
def test_issued_by(ca: bytes, expected: bool, tmp_path: Path) -> None:
    assert _identity(LEAF_PEM, LEAF_KEY, tmp_path).issued_by(ca) is expected


def test_issued_by_needs_the_signature_not_only_the_name(tmp_path: Path) -> None:
    """A second CA with the same subject as the first issued nothing of the first's."""
    namesake, _ = make_ca("fleet CA", days=3650, now=NOW)
    assert not _identity(LEAF_PEM, LEAF_KEY, tmp_path).issued_by(namesake)


def test_issued_by_refuses_what_is_not_a_certificate(tmp_path: Path) -> None:
    with pytest.raises(FormatError):
        _identity(LEAF_PEM, LEAF_KEY, tmp_path).issued_by(b"not a certificate")


def test_identity_for_picks_the_one_its_ca_issued_that_expires_last(tmp_path: Path) -> None:
    made = {
        "short": issue_certificate(CA_PEM, CA_KEY, name="a", days=10, now=NOW),
        "long": issue_certificate(CA_PEM, CA_KEY, name="b", days=90, now=NOW),
        "middle": issue_certificate(CA_PEM, CA_KEY, name="c", days=40, now=NOW),
        "other": issue_certificate(OTHER_CA_PEM, OTHER_CA_KEY, name="d", days=365, now=NOW),
    }
    for name, (cert, key) in made.items():
        _write_pair(tmp_path, cert, key, name)
    identities = load_identities([tmp_path], now=NOW)
    chosen = identity_for(identities, CA_PEM)
    assert chosen is not None and chosen.certificate.name == "long.crt"
    chosen = identity_for(identities, OTHER_CA_PEM)
    assert chosen is not None and chosen.certificate.name == "other.crt"
    third, _ = make_ca("third", days=10, now=NOW)
    assert identity_for(identities, third) is None
    assert identity_for((), CA_PEM) is None


# --- ca_fingerprint, check_ca ----------------------------------------------------------------


def test_fingerprint_is_the_sha256_of_the_der() -> None:
    der = x509.load_pem_x509_certificate(CA_PEM).public_bytes(serialization.Encoding.DER)
    digest = hashes.Hash(hashes.SHA256())
    digest.update(der)
    assert ca_fingerprint(CA_PEM) == digest.finalize().hex()
    assert ca_fingerprint(CA_PEM.decode()) == ca_fingerprint(CA_PEM)
    assert ca_fingerprint(CA_PEM) != ca_fingerprint(OTHER_CA_PEM)


@settings(max_examples=50, deadline=None)
@given(before=st.text(alphabet=st.characters(codec="ascii", exclude_characters="-"), max_size=40),
       after=st.text(alphabet=st.characters(codec="ascii", exclude_characters="-"), max_size=40),
       crlf=st.booleans())
def test_fingerprint_ignores_the_text_around_and_the_line_endings(before: str, after: str,
                                                                  crlf: bool) -> None:
    """What identifies a CA is its DER: the same certificate pasted with other text around
    it or with CRLF line ends (a Windows editor, a Secret) has the same fingerprint."""
    text = CA_PEM.decode().replace("\n", "\r\n") if crlf else CA_PEM.decode()
    assert ca_fingerprint(f"{before}\n{text}\n{after}") == ca_fingerprint(CA_PEM)


@settings(max_examples=30, deadline=None)
@given(data=st.binary(max_size=200))
def test_fingerprint_of_anything_else_is_a_format_error(data: bytes) -> None:
    with pytest.raises(FormatError, match=r"^the CA is not a PEM certificate$"):
        ca_fingerprint(data)


def test_check_ca() -> None:
    check_ca(CA_PEM)
    check_ca(CA_PEM.decode())
    with pytest.raises(FormatError,
                       match=r"^not a CA certificate \(CN=node-1: no BasicConstraints ca=True\)$"):
        check_ca(LEAF_PEM)
    with pytest.raises(FormatError, match=r"^the CA is not a PEM certificate$"):
        check_ca(b"junk")


def test_ca_certificate_pem_is_the_certificate_alone() -> None:
    """What is handed on is the re-serialised certificate: text around it, CRLF line ends
    and trailing junk are dropped; the fingerprint is unchanged."""
    assert ca_certificate_pem(CA_PEM) == CA_PEM
    noisy = b"subject=CN = fleet CA\r\n" + CA_PEM.replace(b"\n", b"\r\n") + b"trailing junk\n\x00\xff"
    assert ca_certificate_pem(noisy) == CA_PEM
    assert ca_fingerprint(ca_certificate_pem(noisy)) == ca_fingerprint(CA_PEM)


_SEC1_KEY = ec.generate_private_key(ec.SECP256R1()).private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption())
_ENCRYPTED_KEY = ec.generate_private_key(ec.SECP256R1()).private_bytes(
    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
    serialization.BestAvailableEncryption(b"secret"))


@pytest.mark.parametrize(("data", "message"), [
    (CA_PEM + CA_KEY, r"^holds a private key: give the CA certificate alone \(the key stays apart\)$"),
    (CA_KEY + CA_PEM, r"^holds a private key: give the CA certificate alone \(the key stays apart\)$"),
    (CA_PEM + _SEC1_KEY, r"^holds a private key: "),
    (_ENCRYPTED_KEY + CA_PEM, r"^holds a private key: "),
    (CA_KEY, r"^holds a private key: "),
    (CA_PEM + OTHER_CA_PEM, r"^holds 2 certificates: give the CA certificate alone$"),
    (CA_PEM + LEAF_PEM, r"^holds 2 certificates: give the CA certificate alone$"),
    (LEAF_PEM, r"^not a CA certificate \(CN=node-1: no BasicConstraints ca=True\)$"),
    (b"", r"^the CA is not a PEM certificate$"),
    (b"junk", r"^the CA is not a PEM certificate$"),
], ids=["cert+key", "key+cert", "cert+sec1 key", "encrypted key+cert", "a key alone", "two CAs",
        "chain", "a leaf", "empty", "junk"])
def test_ca_certificate_pem_refuses_keys_and_anything_but_one_ca(data: bytes, message: str) -> None:
    with pytest.raises(FormatError, match=message):
        ca_certificate_pem(data)


# --- the certificates made here ------------------------------------------------------------


def test_the_ca_certificate_is_what_libtorrent_was_tested_with() -> None:
    cert = x509.load_pem_x509_certificate(CA_PEM)
    assert cert.subject == cert.issuer == x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "fleet CA")])
    constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints)
    assert constraints.critical and constraints.value.ca and constraints.value.path_length == 0
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage)
    assert usage.critical and usage.value.key_cert_sign and usage.value.crl_sign
    assert isinstance(cert.public_key(), ec.EllipticCurvePublicKey)
    assert cert.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
    assert isinstance(cert.signature_hash_algorithm, hashes.SHA256)
    assert cert.not_valid_before_utc == NOW - CLOCK_SKEW
    assert cert.not_valid_after_utc == NOW + 3650 * DAY
    cert.verify_directly_issued_by(cert)  # self-signed


def test_an_agent_certificate_has_san_star_and_no_extended_key_usage() -> None:
    cert = x509.load_pem_x509_certificate(LEAF_PEM)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["*"]
    assert len(list(san)) == 1
    oids = {ext.oid for ext in cert.extensions}
    assert ExtensionOID.EXTENDED_KEY_USAGE not in oids
    assert oids == {ExtensionOID.SUBJECT_ALTERNATIVE_NAME, ExtensionOID.BASIC_CONSTRAINTS,
                    ExtensionOID.SUBJECT_KEY_IDENTIFIER, ExtensionOID.AUTHORITY_KEY_IDENTIFIER}
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "node-1"
    assert cert.issuer == x509.load_pem_x509_certificate(CA_PEM).subject
    assert isinstance(cert.signature_hash_algorithm, hashes.SHA256)
    assert cert.public_key().curve.name == "secp256r1"  # type: ignore[union-attr]
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(CA_PEM))
    assert LEAF_KEY.startswith(b"-----BEGIN PRIVATE KEY-----\n")


def test_describe_certificate() -> None:
    leaf = describe_certificate(LEAF_PEM)
    assert leaf == {
        "subject": "CN=node-1",
        "issuer": "CN=fleet CA",
        "SAN": "DNS:*",
        "not before": "2030-06-01T11:55:00Z",
        "not after": "2030-07-01T12:00:00Z",
        "key": "EC secp256r1",
        "SHA-256": ca_fingerprint(LEAF_PEM),
        "CA": "no",
    }
    ca = describe_certificate(CA_PEM)
    assert ca["SAN"] == "none" and ca["CA"] == "yes (path length 0)"


def _bad_issue(**changes: object) -> None:
    arguments: dict[str, object] = {"ca_cert_pem": CA_PEM, "ca_key_pem": CA_KEY, "name": "node",
                                    "days": 30, "now": NOW}
    arguments.update(changes)
    issue_certificate(**arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize(("changes", "error", "message"), [
    ({"days": 0}, ValueError, "days must be at least 1, got 0"),
    ({"name": ""}, ValueError, "the certificate name must not be empty"),
    ({"name": "  "}, ValueError, "the certificate name must not be empty"),
    ({"name": "n" * 65}, ValueError, "the certificate name must be at most 64 characters, got 65"),
    ({"name": "\U00010000" * 17}, ValueError,
     "the certificate name must be at most 64 bytes of UTF-8, got 68"),
    ({"now": NOW.replace(tzinfo=None)}, ValueError, "now must be an aware datetime (with a time zone)"),
    ({"ca_key_pem": OTHER_CA_KEY}, CertificateError, "the CA key does not match the CA certificate"),
    ({"ca_key_pem": b"junk"}, CertificateError, "the CA key: not a PEM private key"),
    ({"ca_cert_pem": b"junk"}, CertificateError, "the CA certificate is not a PEM certificate"),
    ({"ca_cert_pem": LEAF_PEM, "ca_key_pem": LEAF_KEY}, CertificateError,
     "not a CA certificate (CN=node-1: no BasicConstraints ca=True)"),
    ({"days": 3651}, CertificateError,
     "the certificate would outlive the CA, which expires at 2040-05-29T12:00:00Z: give fewer days, "
     "or rotate the CA (docs/private-swarm.md)"),
], ids=["days 0", "empty name", "blank name", "long name", "long in UTF-8", "naive now", "another CA's key",
        "junk key", "junk CA", "a leaf as the CA", "outlives the CA"])
def test_issue_certificate_refuses_bad_arguments_with_one_line(
    changes: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as caught:
        _bad_issue(**changes)
    assert str(caught.value) == message


@pytest.mark.parametrize(("name", "days", "message"), [
    ("", 10, "the certificate name must not be empty"),
    ("ca", 0, "days must be at least 1, got 0"),
])
def test_make_ca_refuses_bad_arguments(name: str, days: int, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        make_ca(name, days=days, now=NOW)
    assert str(caught.value) == message


@settings(max_examples=20, deadline=None)
@given(name=st.text(alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "Zs")),
                    min_size=1, max_size=64).filter(lambda n: bool(n.strip()) and len(n.encode()) <= 64),
       days=st.integers(min_value=1, max_value=3000))
def test_issued_certificates_round_trip_through_load_identities(name: str, days: int) -> None:
    """Any name and lifetime the CLI accepts gives an identity that loads, names its CN,
    and its CA issued; the subject is the name, RFC 4514-escaped."""
    import tempfile

    cert, key = issue_certificate(CA_PEM, CA_KEY, name=name, days=days, now=NOW)
    with tempfile.TemporaryDirectory() as tmp:
        (identity,) = load_identities([_write_pair(Path(tmp), cert, key)], now=NOW)
    assert identity.issued_by(CA_PEM) and not identity.issued_by(OTHER_CA_PEM)
    assert identity.expires_in(NOW) == days * 86400
    parsed = x509.load_pem_x509_certificate(identity.certificate_pem)
    assert parsed.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == name
    assert identity.subject == parsed.subject.rfc4514_string()
