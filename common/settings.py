"""Layered settings: a tree of frozen dataclasses filled from a TOML file, the environment, flags.

A component describes its configuration as a root dataclass whose fields are settings or
tables (a field whose type, ``X | None`` included, is itself a dataclass). Every setting has
a dotted name (``s3.bucket``): the file uses it as table and key, the environment
upper-cases it with ``_`` for ``.`` behind the component's prefix
(``BLOOMSWARM_AGENT_S3_BUCKET``), flags pass it by name.

Precedence, lowest first: the defaults written on the dataclasses (the only place defaults
live), the TOML file, the environment variables, the flags (``overrides``; a None value is
a flag that was not given). A later source replaces a setting, never a whole table.

Errors: :class:`~bloomswarm.common.errors.ConfigError`, naming the setting and the source
of the value: ``config file PATH: ...``, the variable (``BLOOMSWARM_S3_BUCKET: ...``) or
``command line: ...``. It is raised for a missing, unreadable or invalid file, a table given
as a plain value, an unknown setting (in the file or a flag; in the environment only for a
``strict`` loader, since components may share a prefix), and a value of the wrong type.
Checks across settings (required ones, ranges) stay with the component and its dataclasses.

Values are checked against the annotated type, the same way in every table and from every
source: ``str``, ``int`` (not bool), ``float`` (an int is accepted; nan, inf and -inf are
refused), ``bool`` (a TOML or flag boolean only: the string ``"yes"`` is refused),
``Path``, ``tuple[X, ...]`` (a list), ``Literal`` choices, ``X | None``, and the types a
component registers its own coercer for. Environment strings are converted first
(:func:`from_text`): numbers; for a bool ``true``/``false``, ``1``/``0``, ``yes``/``no``,
``on``/``off`` in any case, any other text refused; comma-separated lists. The converted
value then goes through the same check as a file's.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import math
import re
import sys
import types
import typing
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from .errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

Coercer = Callable[[object], object]
"""Checks one value and returns it converted; TypeError or ValueError with a message that
reads after the setting's name ("must be an integer")."""


def str_value(value: object) -> object:
    if not isinstance(value, str):
        raise TypeError("must be a string")
    return value


def int_value(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("must be an integer")
    return value


def float_value(value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError("must be a number")
    try:
        number = float(value)
    except OverflowError:  # an int beyond any float
        raise ValueError("must be a finite number") from None
    if not math.isfinite(number):  # NaN passes every "> 0" check; inf overflows timers
        raise ValueError("must be a finite number")
    return number


def bool_value(value: object) -> object:
    if not isinstance(value, bool):
        raise TypeError("must be true or false")
    return value


def path_value(value: object) -> object:
    if not isinstance(value, str | Path) or not str(value):
        raise TypeError("must be a path")
    try:
        return Path(value).expanduser()
    except RuntimeError:  # "~user/..." for a user without a home directory
        raise ValueError("starts with ~ but names no known home directory") from None


# --- bounds a dataclass checks in __post_init__ ----------------------------------------------

DAY_S = 86_400
"""Seconds in a day: the longest timeout, interval, delay or back-off a setting takes
(:data:`MAX_TIMEOUT_S`, :data:`MAX_INTERVAL_S`)."""
MAX_TIMEOUT_S = DAY_S
"""Longest timeout a setting takes. The socket layer refuses more than about 292 years
(2**63 ns: ``socket.settimeout(1e10)`` raises OverflowError, on every request), and no
request is worth waiting for longer than a day."""
MAX_INTERVAL_S = DAY_S
"""Longest interval, delay, grace period or back-off a setting takes (``1e300`` overflows
timers and integer conversions when it is used)."""
ONE_DAY = "1 day"
"""The longest timeout or interval (:data:`MAX_TIMEOUT_S`, :data:`MAX_INTERVAL_S`), in words."""
INT32_MAX = 2**31 - 1
"""Largest value of an integer that goes into libtorrent's ``settings_pack`` or a peer
class (a C ``int``): libtorrent silently wraps a larger one to 32 bits (5e9 B/s becomes
705 MB/s, 2**32 becomes 0, i.e. no limit)."""


def check_at_most(name: str, value: float, limit: int, why: str = "") -> None:
    """ConfigError ``"{name} must be at most {limit} ({why}), got {value}"`` unless
    ``value <= limit``; NaN (which passes every comparison a range check makes) is refused
    as not finite. For the upper bounds of the settings' dataclasses."""
    if value <= limit:
        return
    if isinstance(value, float) and math.isnan(value):
        raise ConfigError(f"{name} must be a finite number, got {value!r}")
    reason = f" ({why})" if why else ""
    raise ConfigError(f"{name} must be at most {limit}{reason}, got {value!r}")


_HOST_NAME = re.compile(r"[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*\.?")
_HOST_PORT = re.compile(r"(\[[^\]]*\]|[^:\[\]]*)(:[0-9]*)?")


def check_http_url(name: str, url: str, *, credentials_from: str = "") -> None:
    """ConfigError (one line naming ``name``) unless ``url`` is a base URL others are
    appended to (``{url}/latest.json``): ``http://`` or ``https://``, a host, a port in
    1..65535 if any, no query or fragment (``?``, ``#``), no ``user:password@`` (the URL
    is shown in logs and /status; ``credentials_from`` says where credentials come from
    instead), only printable ASCII (percent-encode anything else).

    The URL is not echoed when it holds credentials."""
    authority = re.split(r"[/?#]", url.split("://", 1)[-1], maxsplit=1)[0]
    if "@" in authority:  # checked first: no message below may echo a password
        instead = f"; {credentials_from}" if credentials_from else ""
        raise ConfigError(f"{name} must not hold credentials (user:password@): credentials do "
                          f"not belong in the URL, which is shown in logs and status{instead}")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"{name} must be http(s)://, got {url!r:.120}")
    bad = next((c for c in url if c.isspace() or not " " < c < "\x7f"), None)
    if bad is not None:
        raise ConfigError(f"{name} must not contain {bad!r} (only printable ASCII, no spaces: "
                          f"percent-encode other characters), got {url!r:.120}")
    if "?" in url or "#" in url:
        raise ConfigError(f"{name} must have no query or fragment ('?', '#'): paths are "
                          f"appended to it, got {url!r:.120}")
    try:
        parsed = urllib.parse.urlsplit(url)
        port = parsed.port
    except ValueError as exc:  # "Invalid IPv6 URL", "Port out of range 0-65535", ...
        raise ConfigError(f"{name} is not a valid URL ({exc}), got {url!r:.120}") from None
    host = parsed.hostname or ""
    if not _HOST_PORT.fullmatch(parsed.netloc):
        raise ConfigError(f"{name} must be http(s)://HOST[:PORT][/PATH], got {url!r:.120}")
    if parsed.netloc.startswith("["):
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ConfigError(f"{name} has an invalid IPv6 address, got {url!r:.120}") from None
    elif not _HOST_NAME.fullmatch(host):
        raise ConfigError(f"{name} must name a host (http(s)://HOST[:PORT][/PATH]), "
                          f"got {url!r:.120}")
    if port == 0:
        raise ConfigError(f"{name} port must be in 1..65535, got {url!r:.120}")


SIMPLE: Mapping[Any, Coercer] = {
    str: str_value,
    int: int_value,
    float: float_value,
    bool: bool_value,
    Path: path_value,
}
"""The coercer of each plain type every loader knows."""


def optional_inner(kind: Any) -> Any:
    """X for ``X | None``; ``kind`` itself otherwise."""
    if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
        args = [a for a in typing.get_args(kind) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return kind


BOOL_WORDS: Mapping[str, bool] = {
    "true": True, "1": True, "yes": True, "on": True,
    "false": False, "0": False, "no": False, "off": False,
}
"""The environment strings a bool setting takes (compared in lower case)."""


def from_text(kind: Any, text: str) -> object:
    """Turn an environment string into the plain value a TOML file would hold; text that
    is no such value is returned as it is, for the coercer to refuse by name."""
    kind = optional_inner(kind)
    text = text.strip()
    try:
        if kind is bool:
            return BOOL_WORDS.get(text.lower(), text)
        if kind is int:
            return int(text.replace("_", ""))
        if kind is float:
            return float(text)
    except ValueError:
        return text  # the coercer reports the type error with the variable's name
    if typing.get_origin(kind) is tuple:
        return [part.strip() for part in text.split(",") if part.strip()]
    return text


def dataclass_tables(root: type[Any]) -> dict[str, type[Any]]:
    """Table name -> its dataclass: the fields of ``root`` whose type is a dataclass."""
    tables: dict[str, type[Any]] = {}
    for name, kind in typing.get_type_hints(root).items():
        inner = optional_inner(kind)
        if dataclasses.is_dataclass(inner) and isinstance(inner, type):
            tables[name] = inner
    return tables


class SettingsLoader:
    """Reads, type-checks and layers the settings of one root dataclass.

    ``env_prefix`` starts every environment variable. ``coercers`` adds component types
    (the publisher's ``Layout``). ``scalar_lists`` accepts a single string or path where a
    list is expected, as a list of one.

    ``exclude`` names fields of the root the loader leaves to the component: they are no
    settings (the component reads them from the file's document itself, see
    :meth:`read_document`).

    A ``strict`` loader reads every variable with the prefix (but those in ``ignore_env``),
    in the environment's order, and refuses one that names no setting; a table given as a
    plain value in the file is refused as such. A lenient loader reads only the variables
    of its settings, in setting order, and reports a table given as a plain value as an
    unknown setting.
    """

    def __init__(
        self,
        root: type[Any],
        *,
        env_prefix: str,
        coercers: Mapping[Any, Coercer] | None = None,
        strict: bool = False,
        ignore_env: Iterable[str] = (),
        scalar_lists: bool = False,
        exclude: Iterable[str] = (),
    ) -> None:
        self.root = root
        self.exclude = frozenset(exclude)
        self.env_prefix = env_prefix
        self.strict = strict
        self.ignore_env = frozenset(ignore_env)
        self.scalar_lists = scalar_lists
        self._coercers: dict[Any, Coercer] = {**SIMPLE, **(coercers or {})}
        self.tables: dict[str, type[Any]] = dataclass_tables(root)
        """Table name -> the dataclass it builds, in field order."""
        self.settings: dict[str, Any] = self._settings()
        """Dotted setting name -> the type its value must have, in field order."""

    def _settings(self) -> dict[str, Any]:
        settings: dict[str, Any] = {}
        for name, kind in typing.get_type_hints(self.root).items():
            if name in self.exclude:
                continue
            table = self.tables.get(name)
            if table is None:
                settings[name] = kind
            else:
                for sub, sub_kind in typing.get_type_hints(table).items():
                    settings[f"{name}.{sub}"] = sub_kind
        return settings

    def env_name(self, setting: str) -> str:
        """The environment variable of a setting: "s3.bucket" -> PREFIX + "S3_BUCKET"."""
        return self.env_prefix + setting.upper().replace(".", "_")

    # --- reading --------------------------------------------------------------------------

    def load(
        self,
        path: Path | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        overrides: Mapping[str, object] | None = None,
    ) -> dict[str, object]:
        """The checked values of ``path`` (TOML), ``environ`` and ``overrides``, later ones
        replacing earlier ones, by dotted name. None values in ``overrides`` are skipped."""
        values: dict[str, object] = {}
        if path is not None:
            values.update(self.read_file(path))
        values.update(self.read_environ(environ or {}))
        for name, value in (overrides or {}).items():
            if value is not None:
                values[name] = self.coerce(name, value, "command line")
        return values

    def read_file(self, path: Path) -> dict[str, object]:
        """The checked values of a TOML file, by dotted name."""
        return self.document_values(self.read_document(path), f"config file {path}")

    @staticmethod
    def read_document(path: Path) -> dict[str, Any]:
        """The parsed TOML file; ConfigError (one line, naming the file) when it is missing,
        unreadable, not UTF-8, not TOML, or nested too deeply for the parser (tomllib recurses
        once a level: a few hundred nested arrays or inline tables exhaust Python's stack)."""
        try:
            with path.open("rb") as fh:
                document = tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
        except RecursionError:  # no traceback worth keeping: it is the file's depth
            raise ConfigError(
                f"config file {path} is not valid TOML for bloomswarm: its arrays or tables "
                f"are nested too deeply"
            ) from None
        except UnicodeDecodeError as exc:  # tomllib decodes the whole file first
            raise ConfigError(
                f"config file {path} is not UTF-8: {exc.reason} at byte {exc.start}"
            ) from exc
        return document

    def document_values(self, document: Mapping[str, Any], where: str) -> dict[str, object]:
        """The checked values of a parsed TOML document, by dotted name; errors name ``where``."""
        values: dict[str, object] = {}
        for key, value in document.items():
            if key in self.tables and (self.strict or isinstance(value, dict)):
                if not isinstance(value, dict):
                    raise ConfigError(f"{where}: {key} must be a table ([{key}])")
                for sub, sub_value in value.items():
                    values[f"{key}.{sub}"] = sub_value
            else:
                values[key] = value  # a lenient loader's plain-valued table: unknown setting
        return {name: self.coerce(name, value, where) for name, value in values.items()}

    def read_environ(self, environ: Mapping[str, str]) -> dict[str, object]:
        """The checked values of the variables with the prefix, by dotted name."""
        by_env = {self.env_name(name): name for name in self.settings}
        if self.strict:
            variables = [v for v in environ if v.startswith(self.env_prefix) and v not in self.ignore_env]
        else:
            variables = [v for v in by_env if v in environ]
        values: dict[str, object] = {}
        for variable in variables:
            name = by_env.get(variable)
            if name is None:
                raise ConfigError(f"unknown setting in the environment: {variable}")
            value = from_text(self.settings[name], environ[variable])
            values[name] = self.coerce(name, value, variable)
        return values

    # --- checking -------------------------------------------------------------------------

    def coerce(self, name: str, value: object, where: str) -> object:
        """Check ``value`` against the type of setting ``name``; ConfigError naming the
        setting and ``where`` the value came from."""
        if name not in self.settings:
            raise ConfigError(f"{where}: unknown setting {name!r}")
        kind = self.settings[name]
        if value is None and optional_inner(kind) is not kind:
            return None
        try:
            return self._coercer(optional_inner(kind))(value)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{where}: {name} {exc}, got {value!r:.80}") from None

    def _coercer(self, kind: Any) -> Coercer:
        if typing.get_origin(kind) is tuple:
            item = self._coercer(typing.get_args(kind)[0])
            scalar_lists = self.scalar_lists

            def sequence(value: object) -> object:
                if scalar_lists and isinstance(value, str | Path):
                    value = [value]
                if not isinstance(value, list | tuple):
                    raise TypeError("must be a list")
                return tuple(item(v) for v in value)

            return sequence
        if typing.get_origin(kind) is Literal:
            choices = typing.get_args(kind)

            def choice(value: object) -> object:
                if value not in choices:
                    raise ValueError(f"must be one of {', '.join(map(str, choices))}")
                return value

            return choice
        return self._coercers[kind]

    # --- building -------------------------------------------------------------------------

    def table_values(self, values: Mapping[str, object], table: str) -> dict[str, object]:
        """The values of one table, by their key inside it."""
        return {k.split(".", 1)[1]: v for k, v in values.items() if k.startswith(table + ".")}

    def fields(self, values: Mapping[str, object]) -> dict[str, object]:
        """Keyword arguments for the root dataclass: the top-level values, and each table
        that has values built from them, in field order. A table without values is left to
        its default."""
        top: dict[str, object] = {k: v for k, v in values.items() if "." not in k}
        for table, kind in self.tables.items():
            sub = self.table_values(values, table)
            if sub:
                top[table] = kind(**sub)
        return top

    def load_table(self, table: str, values: Mapping[str, object], where: str) -> Any:
        """One table's dataclass from plain values as a TOML table holds them (key inside
        the table -> value), checked like a file's; ConfigError names ``where``."""
        if table not in self.tables:
            raise ConfigError(f"{where}: unknown table {table!r}")
        checked = {key: self.coerce(f"{table}.{key}", value, where) for key, value in values.items()}
        return self.tables[table](**checked)


__all__ = [
    "BOOL_WORDS",
    "DAY_S",
    "INT32_MAX",
    "MAX_INTERVAL_S",
    "MAX_TIMEOUT_S",
    "ONE_DAY",
    "SIMPLE",
    "Coercer",
    "SettingsLoader",
    "bool_value",
    "check_at_most",
    "check_http_url",
    "dataclass_tables",
    "float_value",
    "from_text",
    "int_value",
    "optional_inner",
    "path_value",
    "str_value",
]
