"""Origin stripes: agents that use the origin at the same time fetch disjoint pieces.

A version's pieces are dealt into ``stripes`` stripes: runs of ``run`` consecutive pieces
(one origin request's worth), dealt round-robin, so stripe ``s`` holds the pieces ``i``
with ``(i // run) % stripes == s``. An agent whose turn at the origin comes takes a
stripe *nobody serves yet* and gives that stripe's pieces top priority, so its web seed
fetches them first. Fresh pieces then enter the fleet at up to ``stripes`` agents at once
instead of one. With one origin-fed agent, that agent's upload is the only way out for
the newest pieces: its peers all ask it for the same few, it sends each several times,
and the fleet falls behind the origin. With ``k`` stripes each origin-fed agent receives
``1/k`` of the origin's rate and has ``k`` times its own upload to spread it.

An agent takes a stripe that is *unclaimed* (no piece of it in sight), fetches it first,
and keeps its web seed off every other piece nobody holds (priority 0), so stripes do
not overlap at the origin. Of two agents that took the same stripe, the one behind
moves to another unclaimed stripe or leaves the origin. Pure functions over bitfields,
no libtorrent: the math behind the stripe rules, which :class:`~.origin_policy.OriginPolicy`
applies (it holds each download's :class:`StripeWatch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from bitarray import bitarray
from bitarray.util import zeros

Pieces = Sequence[bool] | bitarray
"""A bitfield: the pieces someone holds (libtorrent gives lists of bools; a simulator may
give bitarrays, which are read faster)."""
Bitfields = Sequence[tuple[bool, Pieces]]
"""Connected peers (web seeds excluded) as ``(is_seed, pieces)``."""

MIN_RUN_BYTES = 1024 * 1024
"""Shortest run a small version's stripes are dealt in. The web seed fetches about a piece
beyond its stripe while the stripe's last pieces are in flight, so many short stripes cost
the origin a large share more (a 14 MiB delta to 16 agents in stripes of 3 pieces: origin
1.20-1.72x the delta over two runs, against 1.10x in stripes of 16)."""
TOP_PRIORITY = 7
"""libtorrent's highest piece priority: picked before any other, whatever its rarity."""
DEFAULT_PRIORITY = 4
"""libtorrent's default piece priority."""


@dataclass(frozen=True)
class Stripes:
    """How one version's ``pieces`` pieces are dealt into stripes."""

    pieces: int
    run: int
    """Consecutive pieces per run (at least 1)."""
    stripes: int
    """Number of stripes (at least 1); 1 turns striping off."""

    def __post_init__(self) -> None:
        if self.pieces < 0 or self.run < 1 or self.stripes < 1:
            raise ValueError(f"invalid stripes: {self}")

    @classmethod
    def for_torrent(cls, pieces: int, piece_size: int, request_bytes: int, stripes: int) -> Stripes:
        """Runs of one origin request (``request_bytes``, whole pieces, at least one),
        shorter when that leaves fewer runs than ``stripes`` (a small file, a large
        fleet), but not below :data:`MIN_RUN_BYTES`; never more stripes than whole runs
        (a 1 MiB file and its 4 KiB header: one stripe, not a second for its last piece)."""
        request = max(1, request_bytes // max(piece_size, 1))
        shortest = min(request, max(1, MIN_RUN_BYTES // max(piece_size, 1)))
        run = max(shortest, min(request, pieces // max(stripes, 1)))
        runs = max(1, pieces // run)  # a last, shorter run is no stripe of its own
        return cls(pieces, run, max(1, min(stripes, runs)))

    def stripe_of(self, piece: int) -> int:
        return (piece // self.run) % self.stripes

    def mask(self, stripe: int) -> bitarray:
        """The pieces of ``stripe`` (do not modify: shared)."""
        return self._masks[stripe]

    @cached_property
    def _masks(self) -> tuple[bitarray, ...]:
        masks = []
        step = self.run * self.stripes
        for stripe in range(self.stripes):
            bits = bitarray(self.pieces)
            bits.setall(False)
            for start in range(stripe * self.run, self.pieces, step):
                bits[start:min(start + self.run, self.pieces)] = True
            masks.append(bits)
        return tuple(masks)


def _bits(pieces: Pieces, length: int) -> bitarray:
    """A new bitarray of ``length`` bits: ``pieces``, cut or padded with False."""
    # A bitarray (a simulator's bitfield) is sliced; a list of bools is read by bitarray in C.
    bits = pieces[:length] if isinstance(pieces, bitarray) else bitarray(list(pieces[:length]))
    if len(bits) < length:
        bits.extend(zeros(length - len(bits)))
    return bits


def held(stripes: Stripes, have: Pieces, peers: Bitfields) -> bitarray:
    """The pieces that we or a connected peer hold."""
    bits = _bits(have, stripes.pieces)
    for seed, pieces in peers:
        if seed:
            bits.setall(True)
            return bits
        bits |= _bits(pieces, stripes.pieces)
    return bits


def unclaimed(stripes: Stripes, have: Pieces, peers: Bitfields) -> list[int]:
    """Stripes of which neither we nor any connected peer hold a piece: nobody in sight
    fetches them. (A stripe someone fetches has pieces out there at once; one whose
    fetcher left it half-way is found by :class:`StripeWatch`.)"""
    return [stripe for stripe, count in enumerate(held_counts(stripes, have, peers)) if count == 0]


def held_counts(stripes: Stripes, have: Pieces, peers: Bitfields) -> list[int]:
    """Per stripe, how many of its pieces we or a connected peer hold."""
    bits = held(stripes, have, peers)
    return [(bits & stripes.mask(stripe)).count() for stripe in range(stripes.stripes)]


class StripeWatch:
    """Notices stripes that stopped growing: their fetcher left the origin (it yielded on
    a collision it misjudged, it crashed, or it lost its connection to us) with pieces
    still missing everywhere. Feed it every tick with :meth:`update`.

    It also measures the origin's pace, so that "stopped growing" can mean "for longer
    than the origin takes to deliver a piece of a stripe": :meth:`piece_interval_s`, the
    median over stripes of the time between a stripe's last two growths, and
    :meth:`first_piece_s`, the median time from the start to a stripe's first piece (over
    an origin shared by many stripes at a few MiB/s, a piece of each takes seconds).
    """

    def __init__(self, stripes: Stripes, now: float) -> None:
        self.stripes = stripes
        self._sizes = [stripes.mask(s).count() for s in range(stripes.stripes)]
        self._counts = [0] * stripes.stripes
        self._grew = [now] * stripes.stripes
        self._first: list[float | None] = [None] * stripes.stripes
        """When each stripe first had a piece in sight."""
        self._interval: list[float | None] = [None] * stripes.stripes
        """Seconds between each stripe's last two growths."""
        self._started = now

    def update(self, have: Pieces, peers: Bitfields, now: float) -> None:
        for stripe, count in enumerate(held_counts(self.stripes, have, peers)):
            if count > self._counts[stripe]:
                if self._first[stripe] is None:
                    self._first[stripe] = now
                else:
                    self._interval[stripe] = now - self._grew[stripe]
                self._grew[stripe] = now
            self._counts[stripe] = count

    def unclaimed(self) -> list[int]:
        """:func:`unclaimed` as of the last :meth:`update`."""
        return [stripe for stripe, count in enumerate(self._counts) if count == 0]

    def unclaimed_for(self, now: float, after_s: float) -> list[int]:
        """:meth:`unclaimed`, but only once ``after_s`` seconds passed since the watch
        began (until then a stripe's fetcher may still be waiting for its first piece)."""
        return self.unclaimed() if now - self._started >= after_s else []

    def stalled(self, now: float, after_s: float) -> list[int]:
        """Stripes partly held, with pieces missing everywhere in sight, that did not grow
        for ``after_s`` seconds."""
        return [stripe for stripe in range(self.stripes.stripes)
                if 0 < self._counts[stripe] < self._sizes[stripe] and now - self._grew[stripe] >= after_s]

    def piece_interval_s(self) -> float | None:
        """The median over stripes of the seconds between their last two growths; None
        until a stripe grew twice."""
        return _median([i for i in self._interval if i is not None])

    def first_piece_s(self) -> float | None:
        """The median over stripes with a piece in sight of the seconds from the start to
        their first one; None while no stripe has one."""
        return _median([t - self._started for t in self._first if t is not None])


def _median(values: list[float]) -> float | None:
    """The median of ``values`` (the upper one of an even count); None when empty."""
    return sorted(values)[len(values) // 2] if values else None


def priorities(stripes: Stripes, have: Pieces, peers: Bitfields, stripe: int) -> list[int]:
    """Piece priorities while our web seed fetches ``stripe``: its pieces first; other
    pieces that we or a peer hold at the default; other pieces nobody holds at 0, so the
    web seed never fetches another stripe's pieces (their own fetchers will)."""
    bits = held(stripes, have, peers)
    mask = stripes.mask(stripe)
    return [TOP_PRIORITY if mask[i] else DEFAULT_PRIORITY if bits[i] else 0 for i in range(stripes.pieces)]


def complete(stripes: Stripes, have: Pieces, stripe: int) -> bool:
    """Whether we hold every piece of ``stripe``."""
    mask = stripes.mask(stripe)
    return (_bits(have, stripes.pieces) & mask) == mask


def yields(stripes: Stripes, have: Pieces, peers: Bitfields, stripe: int,
           base: bitarray | None = None) -> bool:
    """Whether we should leave ``stripe`` to a peer that also fetches it: one that holds a
    piece of it we lack and more of its pieces than we do (a seed: always). ``base``: the
    stripe's pieces already in sight when we took it (a stalled stripe), which count for
    nobody. Both sides apply the rule, so of two agents on one stripe the one further
    ahead keeps it. A third agent that collected pieces from both can make both leave:
    :class:`StripeWatch` then notices the stripe stalled and someone takes it up again."""
    mask = stripes.mask(stripe)
    if base is not None:
        mask = mask & ~base
    mine = _bits(have, stripes.pieces) & mask
    missing = mask & ~mine
    ours = mine.count()
    for seed, bits in peers:
        if seed:
            return True
        theirs = _bits(bits, stripes.pieces) & mask
        if (theirs & missing).any() and theirs.count() > ours:
            return True
    return False
