"""The text form of an Ed25519 signature in the bucket: base64, as in a manifest's ``.sig``
object and the ``signature`` field of the ``latest.json`` envelope."""

from __future__ import annotations

import base64
import binascii

from .errors import FormatError
from .signing import SIGNATURE_SIZE


def encode_signature(signature: bytes) -> bytes:
    """The ``.sig`` object's bytes: base64 of the raw signature and a newline."""
    return base64.b64encode(signature) + b"\n"


def decode_signature(data: bytes | str, what: str = "signature") -> bytes:
    """Decode a base64 signature (surrounding whitespace allowed); FormatError if malformed."""
    try:
        text = data.strip() if isinstance(data, str) else bytes(data).decode("ascii").strip()
        raw = base64.b64decode(text, validate=True)
    except (UnicodeDecodeError, binascii.Error, ValueError, TypeError) as exc:
        raise FormatError(f"{what} is not valid base64") from exc
    if len(raw) != SIGNATURE_SIZE:
        raise FormatError(f"{what} is {len(raw)} bytes, an Ed25519 signature is {SIGNATURE_SIZE}")
    return raw


__all__ = ["decode_signature", "encode_signature"]
