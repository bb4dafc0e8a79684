"""Structured log lines: ``event=NAME key=value ...`` (logfmt), one event per line.

Values with spaces, quotes, ``=`` or nothing in them are JSON-quoted; floats get three
decimals; None values are left out. Every agent log line goes through :func:`logfmt`, so
a line can be parsed back with a logfmt parser (or ``shlex.split``) whatever it says.
"""

from __future__ import annotations

import json
import logging


def _value(value: object) -> str:
    if isinstance(value, float):
        text = f"{value:.3f}"
    elif isinstance(value, bool):
        text = "true" if value else "false"
    else:
        text = str(value)
    if not text or any(c in text for c in ' ="\\\n\t'):
        return json.dumps(text, ensure_ascii=False)
    return text


def logfmt(event: str, **fields: object) -> str:
    """The line for ``event`` with ``fields`` in the given order."""
    parts = [f"event={_value(event)}"]
    parts.extend(f"{key}={_value(value)}" for key, value in fields.items() if value is not None)
    return " ".join(parts)


def log_event(logger: logging.Logger, level: int, event: str, **fields: object) -> None:
    """Log one structured line at ``level``."""
    if logger.isEnabledFor(level):
        logger.log(level, "%s", logfmt(event, **fields))


__all__ = ["log_event", "logfmt"]
