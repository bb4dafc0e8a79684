"""Ed25519 key files, signatures, key rotation and the errors for bad keys."""

from __future__ import annotations

import hashlib
import pickle
import re
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from bloomswarm.common.errors import ConfigError, InsecureKeyFile, VerificationError
from bloomswarm.common.signing import (
    generate_keypair,
    key_id,
    load_private_key,
    load_public_keys,
    parse_private_key,
    sign,
    verify,
    write_keypair,
)


@pytest.fixture
def keypair(tmp_path: Path) -> tuple[Path, Path]:
    private, public = tmp_path / "keys" / "publisher.pem", tmp_path / "keys" / "publisher.pub"
    write_keypair(private, public)
    return private, public


def test_sign_and_verify_round_trip(keypair: tuple[Path, Path]) -> None:
    private, public = keypair
    signing_key = load_private_key(private)
    keys = load_public_keys([public])
    signature = sign(signing_key, b"manifest bytes")
    assert len(signature) == 64
    assert verify(keys, b"manifest bytes", signature) == 0


def test_tampered_data_or_signature_fails(keypair: tuple[Path, Path]) -> None:
    private, public = keypair
    keys = load_public_keys([public])
    signature = sign(load_private_key(private), b"data")
    with pytest.raises(VerificationError):
        verify(keys, b"date", signature)
    with pytest.raises(VerificationError):
        verify(keys, b"data", bytes([signature[0] ^ 1]) + signature[1:])
    with pytest.raises(VerificationError, match="64"):
        verify(keys, b"data", signature[:-1])
    with pytest.raises(VerificationError):
        verify([], b"data", signature)


def test_rotation_returns_index_of_the_key_that_verified(tmp_path: Path) -> None:
    old_priv, old_pub = generate_keypair()
    new_priv, new_pub = generate_keypair()
    keys = load_public_keys([old_pub, new_pub.decode()])
    new_key = parse_private_key(new_priv)
    assert verify(keys, b"x", sign(new_key, b"x")) == 1
    stranger = parse_private_key(generate_keypair()[0])
    with pytest.raises(VerificationError, match=keys[0].key_id):
        verify(keys, b"x", sign(stranger, b"x"))
    assert old_priv != new_priv


def test_key_id_is_sha256_prefix_of_raw_public_key(keypair: tuple[Path, Path]) -> None:
    private, public = keypair
    verify_key = load_public_keys([public])[0]
    raw = verify_key.key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    assert key_id(verify_key) == hashlib.sha256(raw).hexdigest()[:16]
    assert key_id(verify_key.key) == verify_key.key_id == load_private_key(private).key_id
    assert "PRIVATE" not in repr(load_private_key(private))


def test_private_key_file_mode_and_no_overwrite(keypair: tuple[Path, Path]) -> None:
    private, public = keypair
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert stat.S_IMODE(public.stat().st_mode) == 0o644
    before = private.read_bytes()
    with pytest.raises(ConfigError, match="already exists"):
        write_keypair(private, public.with_name("other.pub"))
    assert private.read_bytes() == before
    assert not public.with_name("other.pub").exists()
    write_keypair(private, public, overwrite=True)
    assert private.read_bytes() != before
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert sorted(p.name for p in private.parent.iterdir()) == ["publisher.pem", "publisher.pub"]


@pytest.mark.parametrize("mode", [0o600, 0o400])
def test_a_private_key_file_only_its_owner_can_access_is_loaded(
    keypair: tuple[Path, Path], mode: int
) -> None:
    private, public = keypair
    private.chmod(mode)
    assert load_private_key(private).key_id == load_public_keys([public])[0].key_id


@pytest.mark.parametrize("mode", [0o640, 0o644, 0o604, 0o440, 0o660, 0o602, 0o620, 0o601, 0o610, 0o777])
def test_a_private_key_file_open_to_group_or_others_is_refused(keypair: tuple[Path, Path], mode: int) -> None:
    private, _ = keypair
    private.chmod(mode)
    with pytest.raises(InsecureKeyFile) as caught:
        load_private_key(private)
    error = caught.value
    assert isinstance(error, ConfigError)  # the CLI reports it as one line
    assert str(error) == (f"private key file {private} is accessible to group or others "
                          f"(mode {mode:04o}): run chmod 600 {private}")
    assert (error.path, error.mode) == (str(private), mode)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is InsecureKeyFile and str(copy) == str(error)
    private.chmod(0o600)  # the fix the message names
    assert load_private_key(private).key_id == parse_private_key(private.read_bytes()).key_id


def test_the_mode_checked_is_that_of_the_file_a_symlink_names(keypair: tuple[Path, Path]) -> None:
    """Kubernetes mounts a Secret's files as symlinks (mode 0777) to the real files."""
    private, _ = keypair
    link = private.with_name("link.pem")
    link.symlink_to(private.name)
    assert load_private_key(link).key_id == load_private_key(private).key_id
    private.chmod(0o640)
    with pytest.raises(InsecureKeyFile, match=re.escape(f"{link} is accessible") + ".*mode 0640"):
        load_private_key(link)


def test_a_file_open_to_others_that_holds_no_private_key_is_reported_as_not_a_key(tmp_path: Path) -> None:
    _, public_pem = generate_keypair()
    public = tmp_path / "publisher.pub"
    public.write_bytes(public_pem)
    public.chmod(0o644)
    with pytest.raises(ConfigError, match="is not a valid PEM private key") as caught:
        load_private_key(public)
    assert not isinstance(caught.value, InsecureKeyFile)


def test_write_keypair_returns_key_id(tmp_path: Path) -> None:
    kid = write_keypair(tmp_path / "k", tmp_path / "k.pub")
    assert kid == load_public_keys([tmp_path / "k.pub"])[0].key_id


def _pem_private(key: rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def test_bad_private_key_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_private_key(tmp_path / "missing.pem")
    garbage = tmp_path / "garbage.pem"
    garbage.write_bytes(b"not a key")
    with pytest.raises(ConfigError, match=re.escape("garbage.pem")):
        load_private_key(garbage)
    rsa_file = tmp_path / "rsa.pem"
    rsa_file.write_bytes(_pem_private(rsa.generate_private_key(65537, 2048)))
    with pytest.raises(ConfigError, match="RSA key, not Ed25519"):
        load_private_key(rsa_file)
    encrypted = tmp_path / "enc.pem"
    private_pem, _ = generate_keypair()
    key = serialization.load_pem_private_key(private_pem, None)
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"pw"),
        )
    )
    with pytest.raises(ConfigError, match="encrypted"):
        load_private_key(encrypted)
    _, public_pem = generate_keypair()
    public_as_private = tmp_path / "pub-as-priv.pem"
    public_as_private.write_bytes(public_pem)
    with pytest.raises(ConfigError, match=re.escape("pub-as-priv.pem")):
        load_private_key(public_as_private)


def test_bad_public_keys(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="at least one"):
        load_public_keys([])
    with pytest.raises(ConfigError, match=re.escape("missing.pub")):
        load_public_keys([tmp_path / "missing.pub"])
    with pytest.raises(ConfigError, match="public key #1"):
        load_public_keys(["-----BEGIN PUBLIC KEY-----\nnope\n-----END PUBLIC KEY-----\n"])
    ec_pub = ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with pytest.raises(ConfigError, match=r"(EllipticCurve|EC) key, not Ed25519"):
        load_public_keys([ec_pub])
    private_pem, _ = generate_keypair()
    with pytest.raises(ConfigError, match="not a valid PEM public key"):
        load_public_keys([private_pem])


def test_keys_written_are_openssl_compatible_pem(keypair: tuple[Path, Path]) -> None:
    private, public = keypair
    assert private.read_bytes().startswith(b"-----BEGIN PRIVATE KEY-----")
    assert public.read_bytes().startswith(b"-----BEGIN PUBLIC KEY-----")


@pytest.mark.parametrize("name", ["bad\x00name.pub", "/etc/\x00"])
def test_a_key_file_name_with_a_nul_is_a_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match="cannot read public key file"):
        load_public_keys([Path(name)])
