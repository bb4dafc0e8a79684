"""Origin URLs: where a transfer fetches a version's file when no peer has it.

The torrent carries no web seed (an expiring URL must not be baked into it); the daemon
hands the transfer an :data:`~.transfer.OriginURLFactory` for the version's filter
object instead, and the transfer calls it whenever it needs a URL that is valid now:

- :class:`S3Origin`: a presigned GET URL, valid ``expiry_s`` seconds; signed locally,
  no request made. The factory's ``expires_at`` tells the transfer when to ask again.
- :class:`CdnOrigin`: ``{base_url}/{key}``, which does not expire.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from typing import Protocol

from bloomswarm.common.storage import ObjectStore

from .transfer import OriginURL, OriginURLFactory


class Origin(Protocol):
    """Makes origin URL factories for object keys."""

    def url_factory(self, key: str) -> OriginURLFactory:
        """A factory of fresh URLs of object ``key`` (relative to the store prefix)."""
        ...


class S3Origin:
    """Presigned S3 URLs, refreshed by calling the factory again."""

    def __init__(
        self, store: ObjectStore, expiry_s: int = 3600, *, clock: Callable[[], float] = time.time
    ) -> None:
        if expiry_s < 1:
            raise ValueError(f"expiry must be positive, got {expiry_s}")
        self.store = store
        self.expiry_s = expiry_s
        self._clock = clock

    def url_factory(self, key: str) -> OriginURLFactory:
        """See :meth:`Origin.url_factory`. ``expires_at`` is reported a minute early, so a
        transfer that refreshes at ``expires_at`` never hands out an expired URL."""

        def fresh() -> OriginURL:
            issued = self._clock()
            url = self.store.presigned_get_url(key, self.expiry_s)
            return OriginURL(url, expires_at=issued + max(self.expiry_s - 60, self.expiry_s / 2))

        return fresh


class CdnOrigin:
    """Unsigned URLs under a CDN (or any HTTP) base URL."""

    def __init__(self, base_url: str) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.base_url = base_url.rstrip("/")

    def url_factory(self, key: str) -> OriginURLFactory:
        """See :meth:`Origin.url_factory`."""
        url = OriginURL(f"{self.base_url}/{urllib.parse.quote(key)}")
        return lambda: url


__all__ = ["CdnOrigin", "Origin", "S3Origin"]
