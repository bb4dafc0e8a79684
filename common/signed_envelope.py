"""Signed envelopes: a document and its signature in one JSON object.

A document that moves by compare-and-swap (``latest.json``, ``index.json``) cannot have
a detached signature (the two could not move in one atomic step), so it travels as::

    {"key_id": "<16 hex>", "<field>": {...}, "signature": "<base64 of 64 bytes>"}

where the signature covers the canonical JSON (:mod:`.canonical_json`) of the ``<field>``
object. ``key_id`` is informational: every pinned key is tried. Unknown envelope fields
are ignored.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from .canonical_json import canonical_json, load_object
from .document_fields import Fields, check_str
from .signature_text import decode_signature
from .signing import SigningKey, VerifyKey, sign, verify


def seal_envelope(field: str, payload: Mapping[str, Any], signing_key: SigningKey) -> bytes:
    """The envelope's bytes: ``payload`` under ``field``, signed over its canonical JSON."""
    signature = sign(signing_key, canonical_json(payload))
    return canonical_json(
        {
            "key_id": signing_key.key_id,
            field: payload,
            "signature": base64.b64encode(signature).decode("ascii"),
        }
    )


def envelope_payload(data: bytes, field: str) -> Mapping[str, Any]:
    """The ``field`` object of an envelope, its signature NOT checked (for writers that
    read what they replace). FormatError when the envelope is malformed."""
    envelope = Fields(load_object(data, f"{field} envelope"), f"{field} envelope")
    return envelope.mapping(field)


def open_envelope(data: bytes, field: str, public_keys: Sequence[VerifyKey]) -> Mapping[str, Any]:
    """The ``field`` object of an envelope whose signature a pinned key made.

    FormatError for a malformed envelope, VerificationError when no pinned key signed it.
    """
    envelope = Fields(load_object(data, f"{field} envelope"), f"{field} envelope")
    payload = envelope.mapping(field)
    signature_text = envelope.value("signature")
    check_str(signature_text, f"{field} envelope signature")
    signature = decode_signature(signature_text, f"{field} signature")
    verify(public_keys, canonical_json(payload), signature)
    return payload


__all__ = ["envelope_payload", "open_envelope", "seal_envelope"]
