"""Canonical JSON: the exact bytes that are stored and signed, and the strict parser.

Canonical JSON is ``json.dumps(obj, sort_keys=True, separators=(",", ":"),
ensure_ascii=False, allow_nan=False)`` encoded as UTF-8. Parsing is strict: one UTF-8
JSON object, no duplicate fields, no NaN or infinities; every fault raises FormatError,
and nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .errors import FormatError


def canonical_json(obj: Mapping[str, Any]) -> bytes:
    """The canonical JSON bytes of ``obj`` (sorted keys, no whitespace, UTF-8).

    Raises FormatError when ``obj`` holds something JSON cannot carry exactly (NaN,
    infinities, lone surrogates, non-JSON types).
    """
    try:
        text = json.dumps(
            obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
        return text.encode("utf-8")
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is a ValueError
        raise FormatError(f"cannot encode as canonical JSON: {exc}") from exc


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for name, value in pairs:
        if name in result:
            raise FormatError(f"duplicate JSON field {name!r}")
        result[name] = value
    return result


def _reject_constant(name: str) -> Any:
    raise FormatError(f"JSON constant {name} is not allowed")


def load_object(data: bytes, what: str) -> dict[str, Any]:
    """Parse ``data`` as one UTF-8 JSON object; FormatError (naming ``what``) for anything else."""
    if not isinstance(data, bytes | bytearray | memoryview):
        raise FormatError(f"{what} must be bytes, got {type(data).__name__}")
    try:
        text = bytes(data).decode("utf-8")
        obj = json.loads(
            text, object_pairs_hook=_reject_duplicates, parse_constant=_reject_constant
        )
    except FormatError as exc:
        raise FormatError(f"{what}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise FormatError(f"{what} is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise FormatError(f"{what} is not valid JSON: {exc.msg} at offset {exc.pos}") from None
    except (ValueError, RecursionError) as exc:
        raise FormatError(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise FormatError(f"{what} must be a JSON object, got {type(obj).__name__}")
    return obj


__all__ = ["canonical_json", "load_object"]
