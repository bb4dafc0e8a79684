"""Unit: the loopback relay that hands a private version's HTTPS origin to libtorrent
(agent/origin_relay.py). The upstream fetch is replaced by fakes; the relay itself is a
real HTTP server on 127.0.0.1.

Its token table stays bounded: a URL asked for again keeps its token (a CDN URL never
expires, and every attach or origin retry asks for it), expiring URLs are still forgotten
once expired, and no more than MAX_TOKENS URLs are held."""

from __future__ import annotations

import email.message
import io
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from bloomswarm.agent import origin_relay
from bloomswarm.agent.origin_relay import OriginRelay
from bloomswarm.agent.transfer import OriginURL

BODY = bytes(range(256)) * 64  # 16 KiB


class _Upstream(io.BytesIO):
    """What urlopen returns: a body, a status and headers."""

    def __init__(self, body: bytes, status: int, headers: dict[str, str]) -> None:
        super().__init__(body)
        self.status = status
        self.headers = email.message.Message()
        for name, value in headers.items():
            self.headers[name] = value


@pytest.fixture
def relay() -> Iterator[OriginRelay]:
    clock = [1000.0]
    relay = OriginRelay(clock=lambda: clock[0])
    relay.clock = clock  # type: ignore[attr-defined]
    try:
        yield relay  # its loopback server starts on the first HTTPS URL; closed here
    finally:
        relay.close()


def _get(url: str, headers: dict[str, str] | None = None) -> tuple[int, bytes, Any]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as reply:
            return reply.status, reply.read(), reply.headers
    except urllib.error.HTTPError as exc:
        return exc.code, b"", exc.headers


def test_an_http_origin_is_given_as_it_is(relay: OriginRelay) -> None:
    origin = OriginURL("http://cdn.example/filter.bsf", None)
    assert relay.url_for(origin) is origin


def test_an_https_origin_is_relayed_with_its_range_and_expiry(relay: OriginRelay,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[str, str | None]] = []

    def fetch(origin: OriginURL, range_header: str | None) -> _Upstream:
        asked.append((origin.url, range_header))
        return _Upstream(BODY[100:200], 206,
                         {"Content-Length": "100", "Content-Range": "bytes 100-199/16384"})

    monkeypatch.setattr(relay, "_fetch", fetch)
    upstream = OriginURL("https://bucket.s3.example/v1/filter.bsf?X-Amz-Signature=abc", 2000.0)
    local = relay.url_for(upstream)
    assert local.url.startswith("http://127.0.0.1:") and "?" not in local.url  # libtorrent's SSRF rule
    assert local.expires_at == 2000.0
    status, body, headers = _get(local.url, {"Range": "bytes=100-199"})
    assert (status, body, headers["Content-Range"]) == (206, BODY[100:200], "bytes 100-199/16384")
    assert asked == [(upstream.url, "bytes=100-199")]


def test_the_origin_s_refusal_is_passed_on_and_an_unknown_token_is_404(
        relay: OriginRelay, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(origin: OriginURL, range_header: str | None) -> _Upstream:
        raise urllib.error.HTTPError(origin.url, 403, "expired", email.message.Message(), None)

    monkeypatch.setattr(relay, "_fetch", refuse)
    local = relay.url_for(OriginURL("https://bucket.s3.example/f", None))
    assert _get(local.url)[0] == 403
    assert _get(local.url.rsplit("/", 1)[0] + "/not-a-token")[0] == 404


def test_an_unreachable_origin_is_a_502(relay: OriginRelay, monkeypatch: pytest.MonkeyPatch) -> None:
    def unreachable(origin: OriginURL, range_header: str | None) -> _Upstream:
        raise urllib.error.URLError("connection refused")

    monkeypatch.setattr(relay, "_fetch", unreachable)
    assert _get(relay.url_for(OriginURL("https://bucket.s3.example/f", None)).url)[0] == 502


def test_expired_urls_are_forgotten_when_a_new_one_is_made(relay: OriginRelay) -> None:
    old = relay.url_for(OriginURL("https://bucket.s3.example/f?sig=1", 1500.0))
    relay.clock[0] = 1600.0  # type: ignore[attr-defined]
    new = relay.url_for(OriginURL("https://bucket.s3.example/f?sig=2", 5000.0))
    assert relay.upstream(old.url.rsplit("/", 1)[1]) is None
    upstream = relay.upstream(new.url.rsplit("/", 1)[1])
    assert upstream is not None and upstream.url.endswith("sig=2")


# --- the token table ---------------------------------------------------------------------------


def _token(url: OriginURL) -> str:
    return url.url.rsplit("/", 1)[1]


def test_a_url_that_never_expires_keeps_one_token_however_often_it_is_asked_for(relay: OriginRelay) -> None:
    factory = relay.wrap(lambda: OriginURL("https://cdn.example.invalid/fleet/v1/filter.bsf"))
    urls = {factory().url for _ in range(1000)}
    assert len(urls) == 1
    assert len(relay._upstream) == 1
    upstream = relay.upstream(_token(OriginURL(urls.pop())))
    assert upstream is not None and upstream.url == "https://cdn.example.invalid/fleet/v1/filter.bsf"


def test_distinct_urls_get_distinct_tokens_and_expired_ones_still_go(relay: OriginRelay) -> None:
    first = relay.url_for(OriginURL("https://bucket.s3.example/f?sig=1", 1500.0))
    again = relay.url_for(OriginURL("https://bucket.s3.example/f?sig=1", 1500.0))
    other = relay.url_for(OriginURL("https://bucket.s3.example/f?sig=2", 5000.0))
    assert first.url == again.url != other.url
    relay.clock[0] = 1600.0  # type: ignore[attr-defined]
    cdn = relay.url_for(OriginURL("https://cdn.example.invalid/f", None))
    assert relay.upstream(_token(first)) is None  # expired: forgotten
    assert relay.upstream(_token(other)) is not None and relay.upstream(_token(cdn)) is not None
    renewed = relay.url_for(OriginURL("https://bucket.s3.example/f?sig=1", 9000.0))
    assert renewed.url != first.url and relay.upstream(_token(renewed)) is not None


def test_the_least_recently_asked_for_urls_go_beyond_the_bound(
    relay: OriginRelay, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(origin_relay, "MAX_TOKENS", 3)
    urls = [relay.url_for(OriginURL(f"https://cdn.example.invalid/v{n}/filter.bsf", None)) for n in range(3)]
    relay.url_for(OriginURL("https://cdn.example.invalid/v0/filter.bsf", None))  # v0 asked for again
    newest = relay.url_for(OriginURL("https://cdn.example.invalid/v3/filter.bsf", None))
    assert len(relay._upstream) == 3
    assert relay.upstream(_token(urls[1])) is None  # the least recently asked for
    assert all(relay.upstream(_token(u)) is not None for u in (urls[0], urls[2], newest))
