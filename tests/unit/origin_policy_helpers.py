"""Test doubles for the origin policy core: a scripted origin link, scripted draws, and
short ways to write observations."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from bloomswarm.agent.config import SwarmConfig
from bloomswarm.agent.origin_policy import Decision, Observation, OriginPolicy
from bloomswarm.agent.transfer import OriginURL

T = TypeVar("T")
START = 1000.0
"""The instant every test download starts (monotonic, arbitrary)."""
WALL = 1_700_000_000.0
"""Wall-clock seconds at ``START``."""
PIECE = 16 * 1024


@dataclass
class Link:
    """An origin link that answers as told and counts the URLs it made."""

    urls: list[OriginURL | None] = field(default_factory=lambda: [OriginURL("http://origin/v1")])
    """What each fetch returns (the last one again once the list is used up)."""
    is_ready: bool = True
    fetches: int = 0

    def fetch(self) -> OriginURL | None:
        url = self.urls[min(self.fetches, len(self.urls) - 1)]
        self.fetches += 1
        return url

    def ready(self, url: str, now: float) -> bool:
        return self.is_ready


class Draws:
    """``random()`` returns the given values in turn (the last one forever); ``choice``
    the first element."""

    def __init__(self, *values: float) -> None:
        self._values = list(values) or [0.5]

    def random(self) -> float:
        return self._values.pop(0) if len(self._values) > 1 else self._values[0]

    def choice(self, seq: Sequence[T]) -> T:
        return seq[0]


def config(**overrides: object) -> SwarmConfig:
    """Grace 6 s, stagger 2 s, starved after 2 s, no stripes."""
    values: dict[str, object] = {"origin_grace_s": 6.0, "origin_stagger_s": 2.0, "origin_starved_s": 2.0,
                                 "origin_stripes": 1, "origin_request_bytes": 2 * PIECE}
    values.update(overrides)
    return SwarmConfig(**values)  # type: ignore[arg-type]


def policy(settings: SwarmConfig, *, pieces: int = 16, rank: float = 0.5, origin: bool = True,
           draws: Draws | None = None, identity: tuple[bytes, bytes] | None = None,
           fleet_size: int = 0) -> OriginPolicy:
    """A download of ``pieces`` pieces started at ``START`` (its rank drawn, ``rank``,
    unless ``identity`` is given)."""
    return OriginPolicy(settings, pieces=pieces, piece_length=PIECE, origin=origin, now=START,
                        rng=draws or Draws(rank), identity=identity, fleet_size=fleet_size)


def bits(pieces: int, *held: int) -> list[bool]:
    return [i in held for i in range(pieces)]


def obs(at: float, *, have: Sequence[bool] = (), peers: Sequence[tuple[bool, Sequence[bool]]] = (),
        peer_bytes: int = 0, pieces: int = 16, finished: bool = False, failed: bool = False,
        checking: bool = False, announced: bool = False, known_peers: int = 0, swarm_size: int = 0,
        peer_ids: Sequence[bytes] = (), fleet_known: bool = True,
        fleet_peer_ids: frozenset[bytes] = frozenset()) -> Observation:
    """The download ``at`` seconds after ``START``; by default nobody answered it (its
    turns count from the grace cap)."""
    return Observation(now=START + at, wall=WALL + at, peer_bytes=peer_bytes,
                       have=list(have) or bits(pieces), peers=list(peers),
                       finished=finished, failed=failed, checking=checking, announced=announced,
                       known_peers=known_peers, swarm_size=swarm_size, peer_ids=list(peer_ids),
                       fleet_known=fleet_known, fleet_peer_ids=fleet_peer_ids)


def origin_part(decision: Decision) -> Decision:
    """``decision`` without its re-announce (tested on its own)."""
    return Decision(priorities=decision.priorities, stripe=decision.stripe, web_seed=decision.web_seed)
