"""The origin policy of one download, as a pure core: observations in, decisions out.

:class:`OriginPolicy` holds everything one download knows about the origin (its turn,
the URL, the stripe, the piece priorities it set, when peers last delivered) and decides,
at every tick, from an :class:`Observation` (the time, the pieces held by us and by the
peers in sight, the bytes from peers so far, whether the download finished or failed),
what the transfer should do: a :class:`Decision` (add, remove or replace the web seed,
piece priorities to set, re-announce). It imports no libtorrent and reads no clock; its
random draws come from the ``rng`` it is given. ``agent/swarm.py`` is the shell that reads
libtorrent, feeds the core and applies its decisions; a fleet simulator can drive the
same core. docs/origin-policy.md has the measurements.

The rules ("fallback", the default)
-----------------------------------
The goal is that the origin sends about one copy of a version to the whole fleet, not one
per agent, and that the first agent takes it at once when nobody has the version yet. The
rules work like Ethernet's carrier sense with collision back-off, with a deterministic
order of turns: wait your turn, take the origin only when nobody feeds you, and step
back at once when someone else does.

1. *Settle* (:meth:`OriginPolicy.settled_at`). The turns count from the moment the download
   has seen its swarm: a tracker or the DHT answered (``announced``) and it is connected
   to the peers a tracker named (``known_peers``) — early only when the fleet's size is
   known from a version it holds (``fleet_known``) — or ``origin_stagger_s`` passed since
   the answer — at most ``origin_grace_s`` after the start when nobody answers. On a LAN
   this takes milliseconds, not a fixed grace.
2. *Wait your turn* (:meth:`OriginPolicy.turn_at`). Every download of a version has a
   rank in [0, 1): :func:`fleet_rank` of the info-hash and the agent's peer id, which
   every agent can compute for the peers it is connected to. Its *position* is the
   number of agents ranked before it: those counted among the agents in sight, plus
   ``rank * unseen`` for the agents not in sight (each is ahead with probability
   ``rank``), ``unseen`` from the swarm's size (the trackers' complete and incomplete
   counts, the version it seeds) less the agents in sight. In sight are the peers
   connected for this version and, before they connect, the agents connected for the
   versions it seeds (``fleet_peer_ids``): in a running fleet every agent knows the
   whole order the moment a version appears. It may use the origin
   ``turns_before(position, stripes) * origin_stagger_s`` seconds after settling
   (capped at ``origin_max_delay_s``): the first ``stripes`` agents within the first
   stagger (the first agent of a fresh version at once), each one after them one
   stagger later, whatever the fleet size; with the whole fleet in sight the first
   ``stripes`` agents at once (each takes a stripe of its own, rule 5). Without peer
   ids (a simulator) the rank is drawn from ``rng``.
3. *Starved → on* (:func:`want_origin`). Once its turn has come, the download adds the
   web seed at once if it is first in line (position below 1), no peer ever fed it and
   no connected peer holds a piece it still needs (nobody has the version yet: waiting
   would not help); otherwise when it is starved: no payload
   byte from a peer for ``origin_starved_s`` seconds *and* no connected peer holds a
   needed piece — or nothing from peers for ``STALL_FACTOR`` times that, whatever they
   hold.
4. *Collision → back off.* While the web seed is on, a connected peer that holds a piece
   we lack got it elsewhere: the web seed is removed and a new rank is drawn from ``rng``
   (a new turn, counted from now, ``rank * origin_stagger_s * (peers + 1)`` later). A peer
   that holds needed pieces but delivers nothing for ``STALL_FACTOR * origin_starved_s``
   does not count.
5. *Stripes* (``origin_stripes`` > 1; the math is in :mod:`.origin_stripes`). Rules 3 and
   4 work per stripe: off, a download whose turn has come takes a stripe nobody in sight
   holds a piece of (else one that stopped growing for ``STALL_FACTOR *
   origin_starved_s``: its fetcher left it) and gives its pieces top priority, other
   pieces nobody holds priority 0 (the agent p-th in line stripe p when it is free, else
   the p-th free stripe, so that agents starting together take different ones). There
   are ``origin_stripes`` stripes, or one per agent of a larger fleet in sight when the
   download starts (``fleet_size``, up to ``origin_stripes_per_agent_up_to`` agents;
   a larger fleet gets ``origin_stripes``), at most one per piece: every agent of a running
   fleet then fetches its own share from the origin and its upload spreads it, instead
   of a few agents' uploads carrying every fresh piece; with the whole fleet in sight, an
   agent placed beyond the stripes (a backup) counts a stripe nobody holds a piece of as
   free only ``STALL_FACTOR * origin_starved_s`` after the start, as when moving on (its
   owner may still be on its first piece). With no stripe to take it waits until peers delivered
   nothing for ``STALL_FACTOR * origin_starved_s``, then takes the origin for any piece.
   On a stripe that a peer further ahead also fetches, it moves to another free stripe or
   leaves (the back-off); on a complete stripe, it takes the next free one or leaves. With
   every agent of the swarm in sight and no more agents than stripes, the agent in place
   *p* of *n* moves on first along its *lane*, the unclaimed stripes ``s`` with ``s % n ==
   p``, at once (no other agent in the same view takes them).
6. The web seed is removed when the download finishes or fails; whenever it goes off,
   every piece is back at the default priority.

``origin_policy = "always"`` adds the web seed at once and keeps it.

The URL: fetched from the factory (:class:`OriginLink`) only when the web seed is about
to be added, or when the one in use is about to expire (``origin_url_refresh_s`` before
expiry, or at half its lifetime, whichever comes first); after a failure (the factory
failed, or the origin answered with an error) not before ``origin_retry_s``. While no
connected peer holds a piece the download needs, it re-announces, 1 s after the start at
first, the gap doubling up to ``peer_rediscovery_s``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Protocol, TypeVar

from bitarray import bitarray

from . import origin_stripes
from .config import SwarmConfig
from .origin_stripes import DEFAULT_PRIORITY, Bitfields, Pieces, Stripes, StripeWatch
from .transfer import OriginURL

STALL_FACTOR = 3
"""Peers that hold needed pieces but deliver nothing for this many ``origin_starved_s``
(they choke us, or are saturated) no longer keep the origin off."""


def stall_s(starved_s: float) -> float:
    """Seconds without progress after which peers, or a stripe's fetcher, count as
    stalled: ``STALL_FACTOR * starved_s`` (the one place that says so)."""
    return STALL_FACTOR * starved_s


def fleet_rank(info_hash: bytes, peer_id: bytes) -> float:
    """An agent's rank in [0, 1) for one version: a hash of the version's info-hash and the
    agent's peer id, so that every agent computes the same order for the peers it sees."""
    digest = hashlib.blake2b(info_hash + peer_id, digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


_T = TypeVar("_T")


class Draws(Protocol):
    """The random draws the policy makes (``random.Random`` is one)."""

    def random(self) -> float:
        """Uniform in [0, 1)."""
        ...

    def choice(self, seq: Sequence[_T]) -> _T:
        """One element of a non-empty ``seq``, uniformly."""
        ...


class OriginLink(Protocol):
    """What the core asks the shell about the origin's URL, only when it is about to add
    the web seed or to replace an expiring URL (so the URL factory and the resolution of
    the origin's address run exactly then)."""

    def fetch(self) -> OriginURL | None:
        """A fresh URL from the factory, or None when none could be made (the shell logs
        why; the core then waits ``origin_retry_s``)."""
        ...

    def ready(self, url: str, now: float) -> bool:
        """Whether a web seed on ``url`` may be added now (the origin's addresses are in
        its peer class)."""
        ...


@dataclass(frozen=True)
class Observation:
    """What one download looks like at one tick."""

    now: float
    """Monotonic seconds."""
    wall: float
    """Wall-clock seconds (``time.time()``): URL expiry is told in wall-clock time."""
    peer_bytes: int
    """Payload bytes received from peers so far."""
    have: Pieces
    """The pieces we hold."""
    peers: Bitfields
    """Connected peers (web seeds excluded) as ``(is_seed, pieces)``."""
    finished: bool = False
    """Every piece is on disk and checked."""
    failed: bool = False
    """The download failed (a torrent or file error)."""
    checking: bool = False
    """Pieces on disk are being checked: no decision but "finished"/"failed"."""
    announced: bool = True
    """A tracker or the DHT has answered for this download (or a peer connected)."""
    known_peers: int = 0
    """The most peers one tracker answer named (trackers may name the asking agent too, so
    it has settled when connected to all but one of them)."""
    swarm_size: int = 0
    """Agents in the fleet as far as known (the trackers' complete + incomplete counts,
    the swarm of the version seeded), 0 when unknown."""
    peer_ids: Sequence[bytes] = ()
    """Peer ids of the connected peers (ranked with :func:`fleet_rank`)."""
    fleet_peer_ids: frozenset[bytes] = frozenset()
    """Peer ids of the agents connected for the other versions of the same filter (those
    this agent seeds): the fleet in sight before its agents connect for this version."""
    fleet_known: bool = True
    """The fleet's size is known from a version this agent holds (its torrent's tracker
    counts). When it is not (a fresh fleet's first version), a download waits
    ``origin_stagger_s`` after the first answer before its turns count, so that agents
    starting together see each other."""


@dataclass(frozen=True)
class Attach:
    """Add the web seed on ``url``."""

    url: str


@dataclass(frozen=True)
class Detach:
    """Remove the web seed on ``url``. ``reason`` is for the "origin off" log line; None
    after an origin error (logged where it was seen)."""

    url: str
    reason: str | None


@dataclass(frozen=True)
class Replace:
    """Swap the web seed's expiring URL ``old`` for ``new``."""

    old: str
    new: str


WebSeedChange = Attach | Detach | Replace


@dataclass(frozen=True)
class Decision:
    """What to do at one tick, applied in field order."""

    reannounce: bool = False
    """Re-announce to the trackers and the DHT (no connected peer holds a needed piece)."""
    priorities: tuple[int, ...] | None = None
    """Piece priorities to set (None: leave them as they are)."""
    stripe: int | None = None
    """A stripe just taken (for the log)."""
    web_seed: WebSeedChange | None = None


NOTHING = Decision()


def want_origin(*, origin_on: bool, idle_s: float, starved_s: float, peers_hold_needed: bool,
                fed: bool = True) -> bool:
    """The "fallback" policy's decision for one download whose turn has come.

    ``idle_s``: seconds since payload last came from a peer; ``peers_hold_needed``: a
    connected peer holds a piece the download still needs; ``fed``: a peer has delivered
    payload to this download at some point.

    - Off → on when nobody feeds us: no peer holds a needed piece and none ever fed us
      (nobody has the version: waiting helps nobody), or starved: nothing from peers for
      ``starved_s`` and no peer holds a needed piece — or nothing from peers for
      ``STALL_FACTOR * starved_s`` at all.
    - On → stays on while no peer holds a needed piece (the origin is the only source),
      or while peers deliver nothing for ``STALL_FACTOR * starved_s``; otherwise off
      (the caller then draws a new turn: the back-off).
    """
    stalled = idle_s >= stall_s(starved_s)
    if origin_on:
        return not peers_hold_needed or stalled
    return (not peers_hold_needed and (not fed or idle_s >= starved_s)) or stalled


def turns_before(position: float, stripes: int) -> float:
    """Staggers an agent at ``position`` in line waits after settling: the first
    ``stripes`` agents share the first stagger (they fetch different stripes at once); each
    one after them, a backup that takes a stripe only if its fetcher left it, one stagger
    more (by then the stripes taken show in its peers' pieces)."""
    if position < stripes:
        return position / stripes
    return 1.0 + (position - stripes)


def peers_hold_needed(have: Pieces, peers: Bitfields) -> bool:
    """Whether a piece missing from ``have`` is held by one of ``peers``, given as
    ``(is_seed, pieces)`` per connected peer (web seeds excluded)."""
    if isinstance(have, bitarray) and all(isinstance(bits, bitarray) for _, bits in peers):
        return _bitarrays_hold_needed(have, peers)
    missing = [i for i, got in enumerate(have) if not got]
    if not missing:
        return False
    return any(seed or any(i < len(bits) and bits[i] for i in missing) for seed, bits in peers)


def _bitarrays_hold_needed(have: bitarray, peers: Bitfields) -> bool:
    """:func:`peers_hold_needed` for bitarrays (a simulator's): the same answer, in C."""
    needed = ~have
    if not needed.any():
        return False
    for seed, bits in peers:
        if seed:
            return True
        assert isinstance(bits, bitarray)  # the caller checked
        common = min(len(bits), len(needed))
        if (bits[:common] & needed[:common]).any():
            return True
    return False


class OriginPolicy:
    """The origin decisions of one download, and all the state they need.

    ``origin``: the download has an origin (a URL factory); without one only the peer
    rules apply (re-announce). ``now``: the monotonic instant the download started, from
    which its settle cap and its peer idleness count. ``peer_bytes``: bytes from peers
    already counted (an earlier handle of the same version). ``identity``: the version's
    info-hash and this agent's peer id, from which the rank comes (:func:`fleet_rank`);
    without it the rank is drawn from ``rng``, as it is at each back-off; the stripe to
    take with ``rng.choice``.
    """

    def __init__(
        self,
        config: SwarmConfig,
        *,
        pieces: int,
        piece_length: int,
        origin: bool,
        now: float,
        rng: Draws,
        peer_bytes: int = 0,
        identity: tuple[bytes, bytes] | None = None,
        fleet_size: int = 0,
    ) -> None:
        self._config = config
        self._rng = rng
        self.has_origin = origin
        # The turn.
        self._started = now
        self._announced_at: float | None = None
        """Monotonic instant the download first saw ``announced``."""
        self._settled_at: float | None = None
        """Monotonic instant from which the turns count (settled, or the last back-off)."""
        self._backed_off = False
        """A back-off happened: the turn is a drawn rank times the peers in sight."""
        self._salt = identity[0] if identity is not None else None
        """The info-hash peers' ranks are computed with (None: no peer ids)."""
        self._peer_ranks: dict[bytes, float] = {}
        if identity is not None:
            self._rank = fleet_rank(*identity)
        else:
            self._rank = rng.random() if origin else 0.0
        """This download's place in the fleet's turns, uniform in [0, 1)."""
        # The URL and the web seed.
        self._url: OriginURL | None = None
        """The last URL the factory gave."""
        self._url_fetched_at = 0.0
        """Wall-clock instant ``_url`` was fetched."""
        self._retry_at = 0.0
        """Monotonic instant before which no URL is fetched again after a failure."""
        self._attached: str | None = None
        """The URL added as web seed, or None when the origin is off."""
        # Stripes ("fallback" with more than one stripe).
        self._watch: StripeWatch | None = None
        if origin and config.origin_policy == "fallback" and config.origin_stripes > 1:
            per_agent = fleet_size if fleet_size <= config.origin_stripes_per_agent_up_to else 0
            stripes = Stripes.for_torrent(pieces, piece_length, config.origin_request_bytes,
                                          max(config.origin_stripes, per_agent))
            self._watch = StripeWatch(stripes, now)
        self._stripe: int | None = None
        """The stripe the web seed fetches first, or None: any piece (rarest first)."""
        self._stripe_base: bitarray | None = None
        """The stripe's pieces in sight when we took it: a rival is judged by what it
        fetched since."""
        self._priorities: list[int] | None = None
        """Piece priorities last set for a stripe (None: libtorrent's defaults)."""
        # Peers.
        self._peer_bytes = peer_bytes
        self._fed = False
        """A peer delivered payload to this download."""
        self._last_peer_progress = now
        """Monotonic instant when payload last came from a peer (or the start)."""
        self._last_rediscovery = now
        self._rediscovery_gap = 1.0
        """Seconds until the next re-announce: 1 s at first, doubling up to the configured."""

    # --- read-only views --------------------------------------------------------------------

    @property
    def attached(self) -> str | None:
        """The URL currently added as web seed, or None when the origin is off."""
        return self._attached

    @property
    def stripe(self) -> int | None:
        """The stripe the web seed fetches first (None: none, or any piece)."""
        return self._stripe

    @property
    def stripes(self) -> Stripes | None:
        """How the pieces are dealt into stripes (None: no stripes)."""
        return None if self._watch is None else self._watch.stripes

    def settled_at(self, obs: Observation) -> float | None:
        """Monotonic instant from which the turns count, as of ``obs`` (None: not yet)."""
        if self._settled_at is not None:
            return self._settled_at
        config = self._config
        if obs.now >= self._started + config.origin_grace_s:
            return self._started + config.origin_grace_s
        if not obs.announced:
            return None
        announced_at = obs.now if self._announced_at is None else self._announced_at
        all_named = obs.fleet_known and len(obs.peers) >= obs.known_peers - 1
        if all_named or obs.now >= announced_at + config.origin_stagger_s:
            return obs.now
        return None

    def position(self, obs: Observation) -> float:
        """This download's estimated place in the fleet's queue for the origin: how many
        agents come before it (see rule 2 of the module's docstring)."""
        if self._backed_off:
            return self._rank * (len(obs.peers) + 1)
        if self._salt is None:
            return self._rank * (max(obs.swarm_size, len(obs.peers) + 1) - 1)
        # In sight: the agents whose peer id is known. A connection still in its handshake
        # (no peer id yet) counts with the unseen, ahead with probability ``rank``.
        known = self._known(obs)
        in_sight = len(known) + 1
        swarm = max(obs.swarm_size, len(obs.peers) + 1, in_sight)
        ahead = sum(1 for peer_id in known if self._peer_rank(peer_id) < self._rank)
        return ahead + self._rank * (swarm - in_sight)

    def _known(self, obs: Observation) -> frozenset[bytes]:
        """Peer ids of the agents in sight: connected for this version and, for a striped
        download, also those connected for the versions seeded (a download without
        stripes, one agent on the origin at a time, keeps to its connected peers)."""
        if obs.fleet_peer_ids and self._watch is not None and self._watch.stripes.stripes > 1:
            return obs.fleet_peer_ids.union(obs.peer_ids)
        return frozenset(obs.peer_ids)

    def _whole_fleet_in_sight(self, obs: Observation) -> bool:
        """Whether this download knows every agent's rank (its position is exact): the
        agents in sight by peer id are the whole swarm, whose size is known from a version
        this agent holds (a fresh fleet's trackers count only the agents that announced so
        far)."""
        return (self._salt is not None and not self._backed_off and obs.fleet_known
                and obs.swarm_size > 0 and len(self._known(obs)) + 1 >= obs.swarm_size)

    def turn_at(self, obs: Observation) -> float:
        """Monotonic instant from which this download may use the origin ("fallback"), as
        of ``obs`` (infinity while it has not settled)."""
        settled = self.settled_at(obs)
        if settled is None:
            return math.inf
        config = self._config
        stripes = 1 if self._watch is None else self._watch.stripes.stripes
        if stripes > 1 and self._whole_fleet_in_sight(obs) and self.position(obs) < stripes:
            return settled  # a stripe of its own, which no other agent takes: at once
        return settled + min(config.origin_stagger_s * turns_before(self.position(obs), stripes),
                             config.origin_max_delay_s)

    def _peer_rank(self, peer_id: bytes) -> float:
        rank = self._peer_ranks.get(peer_id)
        if rank is None:
            assert self._salt is not None
            rank = self._peer_ranks[peer_id] = fleet_rank(self._salt, peer_id)
        return rank

    # --- events -----------------------------------------------------------------------------

    def step(self, obs: Observation, link: OriginLink) -> Decision:
        """The decision for this tick (called once per tick, ``obs.now`` not decreasing)."""
        now = obs.now
        if obs.peer_bytes != self._peer_bytes:
            self._peer_bytes = obs.peer_bytes
            self._last_peer_progress = now
            self._fed = True
        if obs.announced and self._announced_at is None:
            self._announced_at = now
        if self._settled_at is None:
            self._settled_at = self.settled_at(obs)
        if obs.finished or obs.failed:
            return self._off("finished" if obs.finished else "failed")
        if obs.checking:
            return NOTHING
        holding = peers_hold_needed(obs.have, obs.peers)
        reannounce = not holding and self._rediscovery_due(now)
        decision = self._origin(obs, holding, link) if self.has_origin else NOTHING
        return replace(decision, reannounce=True) if reannounce else decision

    def origin_failed(self, url: str, now: float) -> Decision:
        """The origin answered the web seed on ``url`` with an error: take it out and come
        back after ``origin_retry_s`` with a fresh URL (a presigned URL may have expired; a
        CDN may be down). Errors of a URL no longer in use change nothing."""
        if self._attached is None or url != self._attached:
            return NOTHING
        self._attached = None
        self._url = None
        self._retry_at = now + self._config.origin_retry_s
        return Decision(priorities=self._drop_stripe(), web_seed=Detach(url, None))

    # --- the rules --------------------------------------------------------------------------

    def _origin(self, obs: Observation, holding: bool, link: OriginLink) -> Decision:
        now = obs.now
        if self._watch is not None:
            self._watch.update(obs.have, obs.peers, now)
        on = self._attached is not None
        if self._config.origin_policy == "always":
            want = True
        elif not on and now < self.turn_at(obs):
            want = False
        else:
            striped = self._striped(obs, link)
            if striped is not None:
                return striped
            want = want_origin(
                origin_on=on,
                idle_s=now - self._last_peer_progress,
                starved_s=self._config.origin_starved_s,
                peers_hold_needed=holding,
                fed=self._fed or self.position(obs) >= 1,
            )
        if want and not on:
            url = self._usable_url(obs, link)
            if url is None:
                return NOTHING
            self._attached = url
            return Decision(web_seed=Attach(url))
        if not want and on:
            return self._back_off("a peer has pieces we need", now)
        if on:
            return self._refresh(obs, link, Decision())
        return NOTHING

    def _striped(self, obs: Observation, link: OriginLink) -> Decision | None:
        """The stripe rules, for a download whose turn has come or whose origin is on;
        None when the starvation rule decides instead (no stripes, or the origin on for
        any piece)."""
        watch = self._watch
        if watch is None or watch.stripes.stripes == 1:
            return None
        stripes, have, peers, now = watch.stripes, obs.have, obs.peers, obs.now
        if self._attached is None:
            restore = self._drop_stripe()
            # A backup (placed beyond the stripes) in a fleet whose order is known: every
            # stripe has its agent, whose first piece may not show yet; like moving on.
            backup = self._whole_fleet_in_sight(obs) and self.position(obs) >= stripes.stripes
            free = self._free_stripes(now, moving_on=backup)
            stalled = now - self._last_peer_progress >= stall_s(self._config.origin_starved_s)
            if not free and not stalled:
                return Decision(priorities=restore)  # nothing to take yet
            url = self._usable_url(obs, link)
            if url is None:
                return Decision(priorities=restore)  # no usable URL (retry window, DNS)
            self._attached = url
            if not free:  # stalled: the origin for any piece
                return Decision(priorities=restore, web_seed=Attach(url))
            return replace(self._set_stripe(self._pick_stripe(free, obs), have, peers), web_seed=Attach(url))
        stripe = self._stripe
        if stripe is None:
            return None
        if origin_stripes.yields(stripes, have, peers, stripe, self._stripe_base):
            following = self._next_stripe(obs, leaving=stripe)
            if following is not None:  # the web seed stays, on another stripe
                return self._set_stripe(following, have, peers)
            return self._back_off(f"stripe {stripe} is fetched by another agent", now)
        if not origin_stripes.complete(stripes, have, stripe):
            return self._refresh(obs, link, self._set_stripe(stripe, have, peers))  # peers' new pieces
        following = self._next_stripe(obs, leaving=stripe)
        if following is not None:
            return self._refresh(obs, link, self._set_stripe(following, have, peers))
        return self._back_off(f"stripe {stripe} is complete", now)

    def _next_stripe(self, obs: Observation, *, leaving: int) -> int | None:
        """The stripe to move on to off stripe ``leaving`` (complete, or left to a rival),
        or None: none to take. The first unclaimed stripe of this agent's lane (see
        :meth:`_lane`) at once; else a free stripe (:meth:`_pick_stripe`)."""
        watch = self._watch
        assert watch is not None
        lane = self._lane(obs)
        if lane is not None:
            agents, place = lane
            own = [s for s in watch.unclaimed() if s != leaving and s % agents == place]
            if own:
                return own[0]
        whole_fleet = self._whole_fleet_in_sight(obs)
        free = [s for s in self._free_stripes(obs.now, moving_on=whole_fleet)
                if s != leaving and (whole_fleet or not self._owner_due(s, obs))]
        return self._pick_stripe(free, obs, moving_on=True) if free else None

    def _owner_due(self, stripe: int, obs: Observation) -> bool:
        """Whether ``stripe`` still waits for its own agent, in a fleet whose size is not
        known (a fresh fleet's first version): the agent in place *s* among those in sight
        takes stripe *s* at its turn, ``turns_before(s, stripes)`` staggers after settling,
        and its first pieces show a moment later. Until one stagger after that turn an
        agent moving on leaves the stripe to it: taking it then fetches it twice when both
        start together (a 6 MiB version's 1 MiB stripe, taken 12 ms apart, was fetched by
        both in full before either saw the other). A stripe beyond the agents in sight has
        no such agent."""
        watch, settled = self._watch, self._settled_at
        if watch is None or settled is None or self._backed_off or self._salt is None:
            return False
        if stripe >= len(self._known(obs)) + 1:
            return False
        stagger = self._config.origin_stagger_s
        return obs.now < settled + stagger * (turns_before(stripe, watch.stripes.stripes) + 1)

    def _lane(self, obs: Observation) -> tuple[int, int] | None:
        """``(agents, place)`` when this download's place among the agents in sight is
        exact and every agent of the swarm is in sight, with no more agents than stripes:
        its lane is then the stripes ``s`` with ``s % agents == place``, which every other
        agent in the same view leaves alone (stripe ``place`` is the one it took first).
        In a fleet of fewer agents than stripes each agent moves on along its own lane,
        where free stripes drawn at random collide (three agents drawing from five free
        stripes: two draw the same one about half the time). None: no
        lane (a back-off, agents out of sight, more agents than stripes)."""
        watch = self._watch
        if self._salt is None or self._backed_off or watch is None:
            return None
        agents = len(self._known(obs)) + 1
        if agents < max(obs.swarm_size, len(obs.peers) + 1) or agents > watch.stripes.stripes:
            return None
        return agents, int(self.position(obs)) % agents

    def _pick_stripe(self, free: list[int], obs: Observation, *, moving_on: bool = False) -> int:
        """The free stripe to take when the origin goes on, or to move on to
        (``moving_on``) when the web seed's stripe is done or left to another agent.

        - The whole swarm in sight: the agent p-th in line takes the p-th free one, so
          agents that start together, before they see each other's pieces, take different
          stripes. Moving on, only in a running fleet (its size known): agents whose
          stripes complete together then spread over the free ones.
        - Otherwise (agents out of sight may think they are p-th too; a fresh fleet's
          agents moving on), or after a back-off: one drawn at random."""
        in_sight = max(len(obs.peers), len(self._known(obs))) + 1 >= obs.swarm_size
        if self._backed_off or not in_sight or (moving_on and not obs.fleet_known):
            return self._rng.choice(free)
        position = int(self.position(obs))
        own = position % self._watch.stripes.stripes if self._watch is not None else 0
        if not moving_on and own in free:
            return own
        return free[position % len(free)]

    def _free_stripes(self, now: float, *, moving_on: bool = False) -> list[int]:
        """Stripes to take (as of this tick's watch update): those nobody in sight holds a
        piece of, else those that stopped growing for ``STALL_FACTOR * origin_starved_s``
        or three of the origin's observed piece intervals, whichever is longer (their
        fetcher left them: :meth:`_patience_s`). ``moving_on`` (off a stripe, the whole
        fleet in sight): every stripe has its agent, which may still wait for its first
        piece; a stripe nobody holds a piece of is free only once that long passed since
        the start (or three times the stripes' median time to a first piece)."""
        watch = self._watch
        assert watch is not None
        if moving_on:
            unclaimed = watch.unclaimed_for(now, self._patience_s(watch.first_piece_s()))
        else:
            unclaimed = watch.unclaimed()
        return unclaimed or watch.stalled(now, self._patience_s(watch.piece_interval_s()))

    def _patience_s(self, pace_s: float | None) -> float:
        """How long a stripe may show no new piece before it counts as left:
        ``STALL_FACTOR * origin_starved_s``, or ``STALL_FACTOR`` times the origin's pace
        (``pace_s``: seconds per piece of a stripe, as observed) when that is longer. A
        fixed wait tuned for one rate takes a slower origin's stripes from their fetchers
        (64 MiB to 32 agents at 2 MiB/s: 1.75 origin copies, against 1.00 with twice the
        wait)."""
        after = stall_s(self._config.origin_starved_s)
        return after if pace_s is None else max(after, stall_s(pace_s))

    def _set_stripe(self, stripe: int, have: Pieces, peers: Bitfields) -> Decision:
        """The web seed on ``stripe``: its priorities (when they changed), and the stripe
        when it is newly taken."""
        assert self._watch is not None
        stripes = self._watch.stripes
        priorities = origin_stripes.priorities(stripes, have, peers, stripe)
        changed = None
        if priorities != self._priorities:
            self._priorities = priorities
            changed = tuple(priorities)
        taken = None
        if stripe != self._stripe:
            taken = stripe
            self._stripe_base = origin_stripes.held(stripes, have, peers) & stripes.mask(stripe)
        self._stripe = stripe
        return Decision(priorities=changed, stripe=taken)

    def _drop_stripe(self) -> tuple[int, ...] | None:
        """No stripe; the default priorities to restore, or None when they were never
        changed."""
        self._stripe = None
        if self._priorities is None:
            return None
        restore = (DEFAULT_PRIORITY,) * len(self._priorities)
        self._priorities = None
        return restore

    def _off(self, reason: str) -> Decision:
        """The origin off, every piece at the default priority."""
        restore = self._drop_stripe()
        url, self._attached = self._attached, None
        return Decision(priorities=restore, web_seed=None if url is None else Detach(url, reason))

    def _back_off(self, reason: str, now: float) -> Decision:
        """Off, and a new turn counted from now, from a drawn rank."""
        decision = self._off(reason)
        self._settled_at, self._backed_off, self._rank = now, True, self._rng.random()
        return decision

    def _refresh(self, obs: Observation, link: OriginLink, decision: Decision) -> Decision:
        """``decision``, and the web seed's URL replaced when it is about to expire."""
        old = self._attached
        assert old is not None
        if not self._expiring(obs.wall):
            return decision
        url = self._usable_url(obs, link)
        if url is None or url == old:
            return decision
        self._attached = url
        return replace(decision, web_seed=Replace(old, url))

    def _usable_url(self, obs: Observation, link: OriginLink) -> str | None:
        """A usable URL (fetched when there is none or it is expiring), or None."""
        if self._url is None or self._expiring(obs.wall):
            if obs.now < self._retry_at:
                return None
            url = link.fetch()
            if url is None:
                self._retry_at = obs.now + self._config.origin_retry_s
                return None
            self._url, self._url_fetched_at = url, obs.wall
        if not link.ready(self._url.url, obs.now):
            return None
        return self._url.url

    def _expiring(self, wall: float) -> bool:
        url = self._url
        if url is None or url.expires_at is None:
            return False
        margin = min(self._config.origin_url_refresh_s, (url.expires_at - self._url_fetched_at) / 2)
        return wall >= url.expires_at - margin

    def _rediscovery_due(self, now: float) -> bool:
        """Whether to re-announce now, at most every ``peer_rediscovery_s`` (the gap starts
        at 1 s and doubles)."""
        if now - self._last_rediscovery < min(self._rediscovery_gap, self._config.peer_rediscovery_s):
            return False
        self._last_rediscovery = now
        self._rediscovery_gap *= 2
        return True
