"""Certificates that load as PEM but whose parts do not parse (a malformed BasicConstraints
or SAN extension, an unsupported key type, an X.509 version cryptography refuses): every
reader names the file in one line (CertificateError / FormatError), ``bloomswarm certs
show`` exits 1 with one stderr line, and a running agent's certificate store keeps the
identities it holds and logs the bad file once, however often it looks again."""

from __future__ import annotations

import base64
import datetime
import logging
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtensionOID, NameOID

from bloomswarm.agent.certificates import REFRESH_S, CertificateStore
from bloomswarm.common.errors import CertificateError, ConfigError, FormatError
from bloomswarm.common.tls_identity import (
    ca_certificate_pem,
    check_ca,
    describe_certificate,
    issue_certificate,
    load_identities,
    make_ca,
)
from bloomswarm.main import main
from bloomswarm.publisher.torrent import load_swarm_ca

NOW = datetime.datetime(2026, 11, 24, 12, 0, tzinfo=datetime.timezone.utc)

# What openssl's "-extfile" with "2.5.29.19=critical,DER:0101ff" writes (the reviewer's
# reproducer): a BOOLEAN where BasicConstraints must be a SEQUENCE.
MALFORMED_BASIC_CONSTRAINTS = b"\x01\x01\xff"
MALFORMED_SAN = b"\x30\x03\x82\x01"  # a SEQUENCE whose DNS name runs past its end


def _issue_raw(ca: tuple[bytes, bytes], *, name: str, extensions: list[tuple[x509.ObjectIdentifier, bytes]],
               now: datetime.datetime = NOW) -> tuple[bytes, bytes]:
    """(certificate PEM, key PEM) issued by ``ca``, with ``extensions`` as raw DER values
    (the builder writes an UnrecognizedExtension's bytes as they are, known OID or not)."""
    ca_cert = x509.load_pem_x509_certificate(ca[0])
    ca_key = serialization.load_pem_private_key(ca[1], password=None)
    assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=30))
    )
    for oid, value in extensions:
        builder = builder.add_extension(x509.UnrecognizedExtension(oid, value), critical=True)
    cert = builder.sign(ca_key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return cert.public_bytes(serialization.Encoding.PEM), key_pem


def _edited(ca: tuple[bytes, bytes], old: bytes, new: bytes) -> tuple[bytes, bytes]:
    """A good agent certificate (and its key) with one DER byte string of the certificate
    replaced: its signature no longer verifies, which no reader checks before parsing."""
    cert, key = issue_certificate(ca[0], ca[1], name="bad", days=30, now=NOW)
    der = x509.load_pem_x509_certificate(cert).public_bytes(serialization.Encoding.DER)
    assert der.count(old) == 1
    text = base64.b64encode(der.replace(old, new))
    lines = [text[i:i + 64] for i in range(0, len(text), 64)]
    return b"-----BEGIN CERTIFICATE-----\n" + b"\n".join(lines) + b"\n-----END CERTIFICATE-----\n", key


@pytest.fixture
def ca() -> tuple[bytes, bytes]:
    return make_ca("fleet", days=400, now=NOW)


BadLeaf = Callable[[tuple[bytes, bytes]], tuple[bytes, bytes]]

BAD_LEAVES: dict[str, tuple[BadLeaf, str]] = {
    "malformed BasicConstraints": (
        lambda ca: _issue_raw(ca, name="bad", extensions=[
            (ExtensionOID.SUBJECT_ALTERNATIVE_NAME, x509.SubjectAlternativeName([x509.DNSName("*")])
             .public_bytes()),
            (ExtensionOID.BASIC_CONSTRAINTS, MALFORMED_BASIC_CONSTRAINTS)]),
        "a certificate with malformed extensions (error parsing asn1 value: "),
    "malformed SAN": (
        lambda ca: _issue_raw(ca, name="bad", extensions=[(ExtensionOID.SUBJECT_ALTERNATIVE_NAME,
                                                           MALFORMED_SAN)]),
        "a certificate with malformed extensions (error parsing asn1 value: "),
    "unknown key type": (  # id-ecPublicKey (1.2.840.10045.2.1) becomes 1.2.840.10045.2.9
        lambda ca: _edited(ca, b"\x2a\x86\x48\xce\x3d\x02\x01", b"\x2a\x86\x48\xce\x3d\x02\x09"),
        "a certificate with an unsupported public key (Unknown key type: 1.2.840.10045.2.9)"),
    "X.509 version 2": (  # cryptography loads v1 and v3 only (InvalidVersion, no ValueError)
        lambda ca: _edited(ca, b"\xa0\x03\x02\x01\x02", b"\xa0\x03\x02\x01\x01"),
        "not a PEM certificate"),
}


# --- the loaders -------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(BAD_LEAVES))
def test_load_identities_names_the_file_that_does_not_parse(case: str, ca: tuple[bytes, bytes],
                                                            tmp_path: Path) -> None:
    make, message = BAD_LEAVES[case]
    cert, key = make(ca)
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    with pytest.raises(CertificateError) as caught:
        load_identities([tmp_path], now=NOW)
    text = str(caught.value)
    assert text.startswith(f"{tmp_path / 'tls.crt'}: {message}"), text
    assert "\n" not in text


def test_a_ca_with_a_malformed_extension_is_a_format_error_everywhere(ca: tuple[bytes, bytes],
                                                                      tmp_path: Path) -> None:
    # a self-signed "CA" whose BasicConstraints is the reviewer's malformed DER
    bad_ca, _ = _issue_raw(ca, name="bad ca", extensions=[(ExtensionOID.BASIC_CONSTRAINTS,
                                                             MALFORMED_BASIC_CONSTRAINTS)])
    with pytest.raises(FormatError, match=r"^the CA has malformed extensions \(error parsing asn1"):
        check_ca(bad_ca)
    with pytest.raises(FormatError, match=r"^the CA has malformed extensions"):
        ca_certificate_pem(bad_ca)
    with pytest.raises(FormatError, match=r"^the file has malformed extensions"):
        describe_certificate(bad_ca)
    with pytest.raises(CertificateError, match=r"^the CA has malformed extensions"):
        issue_certificate(bad_ca, ca[1], name="agent", days=1, now=NOW)
    path = tmp_path / "badca.crt"
    path.write_bytes(bad_ca)
    with pytest.raises(ConfigError) as caught:  # publish's swarm_ca
        load_swarm_ca(path)
    assert str(caught.value).startswith(f"swarm_ca {path}: the CA has malformed extensions ("), caught.value


# --- bloomswarm certs show ---------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(BAD_LEAVES))
def test_certs_show_prints_one_line_naming_the_file_and_exits_1(
        case: str, ca: tuple[bytes, bytes], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cert, _ = BAD_LEAVES[case][0](ca)
    path = tmp_path / "bad.crt"
    path.write_bytes(cert)
    code = main(["certs", "show", str(path)])
    captured = capsys.readouterr()
    assert code == 1
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    assert captured.err.startswith(f"bloomswarm certs: error: {path}: "), captured.err


# --- the agent's certificate store -------------------------------------------------------------


class Clocks:
    def __init__(self) -> None:
        self.wall = NOW.timestamp()
        self.mono = 1.0

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def _store(ca: tuple[bytes, bytes], tmp_path: Path) -> tuple[Clocks, CertificateStore, Path]:
    ids = tmp_path / "ids"
    ids.mkdir()
    cert, key = issue_certificate(ca[0], ca[1], name="agent", days=30, now=NOW)
    (ids / "tls.key").write_bytes(key)
    (ids / "tls.crt").write_bytes(cert)
    clocks = Clocks()
    return clocks, CertificateStore([ids], wall_clock=lambda: clocks.wall, clock=lambda: clocks.mono), ids


def _touch(path: Path, stamp: int) -> None:
    os.utime(path, ns=(stamp, stamp))  # a different stamp, whatever the clock


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "bloomswarm.swarm" and r.levelno >= logging.ERROR]


def test_a_malformed_renewal_keeps_the_identities_and_is_logged_once(
        ca: tuple[bytes, bytes], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clocks, store, ids = _store(ca, tmp_path)
    held = store.identities
    cert, key = BAD_LEAVES["malformed BasicConstraints"][0](ca)
    (ids / "tls.key").write_bytes(key)
    (ids / "tls.crt").write_bytes(cert)
    _touch(ids / "tls.crt", 1)
    caplog.set_level(logging.INFO, "bloomswarm.swarm")
    for _ in range(5):  # five looks, 30 s apart: the files stay changed and broken
        clocks.advance(REFRESH_S)
        assert store.refresh() is False
    assert store.identities == held and store.for_ca(ca[0]) is not None
    errors = _errors(caplog)
    assert len(errors) == 1, [r.getMessage() for r in errors]
    message = errors[0].getMessage()
    assert f"{ids / 'tls.crt'}: a certificate with malformed extensions" in message
    assert "keeping the ones loaded" in message and errors[0].exc_info is None

    # another error is logged (once); a good renewal loads again
    (ids / "tls.crt").write_bytes(BAD_LEAVES["malformed SAN"][0](ca)[0])
    _touch(ids / "tls.crt", 2)
    for _ in range(3):
        clocks.advance(REFRESH_S)
        assert store.refresh() is False
    assert len(_errors(caplog)) == 2
    renewed, renewed_key = issue_certificate(ca[0], ca[1], name="agent-renewed", days=30, now=NOW)
    (ids / "tls.key").write_bytes(renewed_key)
    (ids / "tls.crt").write_bytes(renewed)
    _touch(ids / "tls.crt", 3)
    clocks.advance(REFRESH_S)
    assert store.refresh() is True
    assert [i.subject for i in store.identities] == ["CN=agent-renewed"]


def test_an_unexpected_error_while_reloading_is_logged_once_and_the_poll_goes_on(
        ca: tuple[bytes, bytes], tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    clocks, store, ids = _store(ca, tmp_path)
    held = store.identities

    def broken(dirs: object, *, now: datetime.datetime) -> None:
        raise RuntimeError("a bug\nover two lines")

    monkeypatch.setattr("bloomswarm.agent.certificates.load_identities", broken)
    _touch(ids / "tls.crt", 1)
    caplog.set_level(logging.INFO, "bloomswarm.swarm")
    for _ in range(4):
        clocks.advance(REFRESH_S)
        assert store.refresh() is False  # raises nothing: the agent's poll goes on
    assert store.identities == held
    errors = _errors(caplog)
    assert len(errors) == 1
    assert f"certificate directory {ids}: RuntimeError: a bug over two lines" in errors[0].getMessage()
    assert errors[0].exc_info is not None  # a bug: its traceback, once
