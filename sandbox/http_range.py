"""The one ``Range`` header parser of the sandbox's HTTP origin.

S3 answers a single byte range and ignores what it cannot use: :func:`parse_range` does
the same, so the origin serves ranges the way the agents' real origin does.
"""

from __future__ import annotations

import re

from bloomswarm.common.errors import RangeNotSatisfiable

_RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


def parse_range(header: str | None, size: int) -> tuple[int, int] | None:
    """The inclusive byte range ``(first, last)`` a single-range ``Range`` header asks of
    a ``size``-byte file, clipped to the file; None for the whole file (no header, or one
    S3 would ignore: another unit, several ranges, ``bytes=-``, first > last).
    :class:`RangeNotSatisfiable` when the range starts at or past the end, or is the empty
    suffix ``bytes=-0``."""
    match = _RANGE.match((header or "").strip())
    if match is None or match.group(1) == match.group(2) == "":
        return None
    first_text, last_text = match.groups()
    if first_text == "":  # a suffix: the last N bytes
        count = int(last_text)
        if count == 0 or size == 0:
            raise RangeNotSatisfiable(f"suffix range of {count} bytes of a {size}-byte file")
        return max(size - count, 0), size - 1
    first = int(first_text)
    last = size - 1 if last_text == "" else min(int(last_text), size - 1)
    if first >= size:
        raise RangeNotSatisfiable(f"range starts at {first}, the file has {size} bytes")
    if first > last:
        return None
    return first, last


__all__ = ["RangeNotSatisfiable", "parse_range"]
