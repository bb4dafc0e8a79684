"""OriginRelay's token table stays bounded: a URL asked for again keeps its token (a CDN
URL never expires, and every attach or origin retry asks for it), expiring URLs are still
forgotten once expired, and no more than MAX_TOKENS URLs are held."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bloomswarm.agent import origin_relay
from bloomswarm.agent.origin_relay import OriginRelay
from bloomswarm.agent.transfer import OriginURL


@pytest.fixture
def relay() -> Iterator[OriginRelay]:
    clock = [1000.0]
    relay = OriginRelay(clock=lambda: clock[0])
    relay.clock = clock  # type: ignore[attr-defined]
    try:
        yield relay  # its loopback server starts on the first HTTPS URL; closed here
    finally:
        relay.close()


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
