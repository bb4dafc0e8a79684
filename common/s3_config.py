"""Where an S3-compatible bucket is and how to reach it: :class:`S3Config` and s3:// URLs."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from typing import Any

from .errors import ConfigError
from .object_store import DEFAULT_PART_SIZE, MAX_PART_SIZE, MIN_PART_SIZE
from .settings import MAX_TIMEOUT_S, ONE_DAY, check_at_most, check_http_url

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
MAX_ATTEMPTS = 100
"""Most ``max_attempts`` and ``part_attempts``: attempts per request or part, first included."""
MAX_POOL_CONNECTIONS = 1024
"""Most ``max_pool_connections``."""


def parse_s3_url(url: str) -> tuple[str, str]:
    """Split "s3://bucket/some/prefix" into ("bucket", "some/prefix").

    The prefix has no leading or trailing "/" and may be empty. Raises ConfigError for
    anything that is not an s3:// URL with a valid bucket name.
    """
    try:
        parsed = urllib.parse.urlsplit(url.strip())
        extras = parsed.query or parsed.fragment or parsed.username or parsed.port
    except ValueError as exc:
        raise ConfigError(f"not a valid s3:// URL: {url!r}") from exc
    if parsed.scheme != "s3":
        raise ConfigError(f"not an s3:// URL: {url!r}")
    if extras:
        raise ConfigError(f"s3 URL must be s3://bucket[/prefix], got {url!r}")
    bucket = parsed.netloc
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise ConfigError(f"invalid bucket name {bucket!r} in {url!r}")
    return bucket, parsed.path.strip("/")


def check_utf8(value: str, what: str) -> None:
    """ConfigError unless ``value`` can be sent as UTF-8: a command-line argument or
    variable that was not UTF-8 arrives as lone surrogates (``'\\udcff'``), which no key,
    URL or JSON document can hold."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ConfigError(f"{what} {value!r:.80} is not valid UTF-8") from None


@dataclass(frozen=True)
class S3Config:
    """Where and how to reach an S3-compatible bucket. Credentials come from the standard
    AWS chain (environment, shared files, instance/pod role), never from this object."""

    bucket: str
    """Bucket name."""
    prefix: str = ""
    """Key prefix inside the bucket; every store key is relative to it."""
    endpoint_url: str | None = None
    """Endpoint for a non-AWS store (MinIO, moto); implies path-style addressing."""
    region: str | None = None
    """Region; None lets the AWS chain decide."""
    profile: str | None = None
    """Named profile in the shared AWS config files; None for the default chain."""
    connect_timeout_s: float = 5.0
    """Seconds to wait for a TCP connection."""
    read_timeout_s: float = 60.0
    """Seconds to wait for a response byte."""
    max_attempts: int = 3
    """Attempts per request, first included (botocore "standard" retry mode): 1..100."""
    part_size: int = DEFAULT_PART_SIZE
    """Multipart part size in bytes; files up to this size go in one PUT."""
    part_attempts: int = 3
    """Attempts per multipart part on top of botocore's own retries: 1..100."""
    checksum_sha256: bool = True
    """Send SHA-256 checksums with uploads; turn off for stores that reject them, which also
    stops botocore's default CRC checksums."""
    public_base_url: str | None = None
    """Base URL of a CDN or public endpoint serving the prefix, for :meth:`public_url`."""
    max_pool_connections: int = 16
    """HTTP connections kept per client (concurrent requests): 1..1024."""

    def __post_init__(self) -> None:
        if not _BUCKET_RE.match(self.bucket) or ".." in self.bucket:
            raise ConfigError(f"invalid S3 bucket name {self.bucket!r}")
        for what, value in (("S3 prefix", self.prefix), ("S3 endpoint_url", self.endpoint_url),
                            ("S3 region", self.region), ("S3 profile", self.profile),
                            ("S3 public_base_url", self.public_base_url)):
            if isinstance(value, str):
                check_utf8(value, what)
        if self.prefix != self.prefix.strip("/"):
            object.__setattr__(self, "prefix", self.prefix.strip("/"))
        if not MIN_PART_SIZE <= self.part_size <= MAX_PART_SIZE:
            raise ConfigError(
                f"S3 part size must be between 5 MiB and 5 GiB, got {self.part_size} bytes"
            )
        for name in ("max_attempts", "part_attempts"):
            attempts = getattr(self, name)
            if attempts < 1:
                raise ConfigError(f"S3 {name} must be at least 1, got {attempts!r}")
            check_at_most(f"S3 {name}", attempts, MAX_ATTEMPTS,
                          "each retry waits, so more would hang on a failing store")
        if self.max_pool_connections < 1:
            raise ConfigError(
                f"S3 max_pool_connections must be at least 1, got {self.max_pool_connections!r}"
            )
        check_at_most("S3 max_pool_connections", self.max_pool_connections,
                      MAX_POOL_CONNECTIONS, "one socket each")
        if self.connect_timeout_s <= 0 or self.read_timeout_s <= 0:
            raise ConfigError("S3 timeouts must be positive")
        check_at_most("S3 connect_timeout_s", self.connect_timeout_s, MAX_TIMEOUT_S, ONE_DAY)
        check_at_most("S3 read_timeout_s", self.read_timeout_s, MAX_TIMEOUT_S, ONE_DAY)
        # Both are shown in error messages and logs; keys are appended to them. Credentials
        # come from the AWS chain (SigV4), and a public URL is for everyone.
        if self.endpoint_url is not None:
            check_http_url("S3 endpoint_url", self.endpoint_url,
                           credentials_from="they come from the AWS credential chain")
        if self.public_base_url is not None:
            check_http_url("S3 public_base_url", self.public_base_url,
                           credentials_from="it is given out as public")

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> S3Config:
        """Build a config from "s3://bucket/prefix" plus any other field."""
        bucket, prefix = parse_s3_url(url)
        return cls(bucket=bucket, prefix=prefix, **kwargs)

    @property
    def url(self) -> str:
        """The "s3://bucket/prefix" form, for messages."""
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
