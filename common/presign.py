"""Presigned GET URLs signed here, in the form botocore gives them (SigV4, query string).

botocore presigns a URL in about 0.2 ms of Python on an idle core, and several times that
on a busy one: endpoint resolution, request serialization and its signer run for every
key. An agent of many small filters presigns one URL per filter per version (the direct
download's origin URL), thousands in a rollout. A :class:`PresignTemplate` is learned
once from one URL botocore presigned (scheme, host, the path before the key, region,
service); :func:`presign_get` then signs any plain key with it: SigV4's canonical request,
string to sign and signature, the signing key derived once per day.

The template proves itself when it is learned (:meth:`PresignTemplate.learn` signs the
probe key again at the probe's time and requires botocore's exact signature), and keys
with characters that need percent-encoding are left to botocore
(:func:`is_plain_key`), so a URL signed here is the URL botocore would have made.
"""

from __future__ import annotations

import datetime as dt
import functools
import hashlib
import hmac
import re
import urllib.parse
from dataclasses import dataclass
from typing import NamedTuple

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
TIMESTAMP_FORMAT = "%Y%m%dT%H%M%SZ"

_PLAIN_KEY = re.compile(r"[A-Za-z0-9._~/-]+")
_AUTH_PARAMS = ("X-Amz-Algorithm", "X-Amz-Credential", "X-Amz-Date", "X-Amz-Expires",
                "X-Amz-SignedHeaders", "X-Amz-Security-Token", "X-Amz-Signature")


class Credentials(NamedTuple):
    """What SigV4 signs with (botocore's frozen credentials have these three fields)."""

    access_key: str
    secret_key: str
    token: str | None


def is_plain_key(full_key: str) -> bool:
    """Whether ``full_key`` is signed here: only characters a URL path carries as they are."""
    return _PLAIN_KEY.fullmatch(full_key) is not None


@dataclass(frozen=True)
class PresignTemplate:
    """The parts of a store's presigned GET URLs that do not depend on the key."""

    scheme: str
    netloc: str
    """As in the URL (with a port that is not the scheme's default)."""
    host: str
    """The signed ``host`` header: ``netloc`` without a default port."""
    path_prefix: str
    """The URL path before the full key: "/bucket/" path-style, "/" virtual-hosted."""
    region: str
    service: str

    @classmethod
    def learn(cls, url: str, full_key: str, credentials: Credentials) -> PresignTemplate | None:
        """The template of ``url``, which botocore presigned for ``full_key`` (a plain key)
        with ``credentials``; None when the URL has another form than this module signs, or
        when signing ``full_key`` again here does not give botocore's signature."""
        parts = urllib.parse.urlsplit(url)
        query = dict(urllib.parse.parse_qsl(parts.query, keep_blank_values=True))
        if (not is_plain_key(full_key) or not parts.path.endswith("/" + full_key)
                or set(query) - set(_AUTH_PARAMS) or query.get("X-Amz-Algorithm") != ALGORITHM
                or query.get("X-Amz-SignedHeaders") != "host" or parts.fragment):
            return None
        scope = query.get("X-Amz-Credential", "").split("/")
        if len(scope) != 5 or scope[4] != "aws4_request":
            return None
        try:
            signed_at = dt.datetime.strptime(query["X-Amz-Date"], TIMESTAMP_FORMAT)
            expires_s = int(query["X-Amz-Expires"])
            port = parts.port
        except (KeyError, ValueError):
            return None
        default_port = {"http": 80, "https": 443}.get(parts.scheme)
        host = parts.netloc.rsplit(":", 1)[0] if port is not None and port == default_port else parts.netloc
        template = cls(scheme=parts.scheme, netloc=parts.netloc, host=host,
                       path_prefix=parts.path[: -len(full_key)], region=scope[2], service=scope[3])
        again = presign_get(template, full_key, expires_s, credentials,
                            signed_at.replace(tzinfo=dt.timezone.utc))
        return template if again == url else None


def presign_get(template: PresignTemplate, full_key: str, expires_s: int,
                credentials: Credentials, now: dt.datetime) -> str:
    """The presigned GET URL of plain key ``full_key`` (:func:`is_plain_key`), valid for
    ``expires_s`` seconds from ``now`` (aware, UTC): botocore's form, query parameters
    in its order."""
    timestamp = now.astimezone(dt.timezone.utc).strftime(TIMESTAMP_FORMAT)
    day = timestamp[:8]
    scope = f"{day}/{template.region}/{template.service}/aws4_request"
    params = [("X-Amz-Algorithm", ALGORITHM),
              ("X-Amz-Credential", f"{credentials.access_key}/{scope}"),
              ("X-Amz-Date", timestamp),
              ("X-Amz-Expires", str(expires_s)),
              ("X-Amz-SignedHeaders", "host")]
    if credentials.token is not None:
        params.append(("X-Amz-Security-Token", credentials.token))
    quoted = [(_quote(k), _quote(v)) for k, v in params]
    query = "&".join(f"{k}={v}" for k, v in quoted)
    canonical_query = "&".join(f"{k}={v}" for k, v in sorted(quoted))
    path = template.path_prefix + full_key
    canonical_request = "\n".join(
        ("GET", path, canonical_query, f"host:{template.host}", "", "host", UNSIGNED_PAYLOAD))
    string_to_sign = "\n".join(
        (ALGORITHM, timestamp, scope, hashlib.sha256(canonical_request.encode()).hexdigest()))
    key = _signing_key(credentials.secret_key, day, template.region, template.service)
    signature = hmac.new(key, string_to_sign.encode(), hashlib.sha256).hexdigest()
    return f"{template.scheme}://{template.netloc}{path}?{query}&X-Amz-Signature={signature}"


def _quote(value: str) -> str:
    return urllib.parse.quote(value, safe="-_.~")


@functools.lru_cache(maxsize=8)
def _signing_key(secret_key: str, day: str, region: str, service: str) -> bytes:
    key = hmac.new(f"AWS4{secret_key}".encode(), day.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


__all__ = ["Credentials", "PresignTemplate", "is_plain_key", "presign_get"]
