"""Properties of the origin policy core over random runs: peers come and go with random
pieces, URLs fail or expire, the origin errs, the download finishes. A model torrent
applies every decision and checks it can (no second web seed, no removal of one that is
not there)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from bitarray import bitarray
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomswarm.agent.config import SwarmConfig
from bloomswarm.agent.origin_policy import (
    Attach,
    Decision,
    Detach,
    Observation,
    OriginPolicy,
    Replace,
    peers_hold_needed,
)
from bloomswarm.agent.origin_stripes import DEFAULT_PRIORITY, Pieces, Stripes, held_counts, priorities
from bloomswarm.agent.transfer import OriginURL
from tests.unit.origin_policy_helpers import PIECE, START, WALL, config

PIECES = 16


@dataclass(frozen=True)
class Tick:
    dt: float
    gained: frozenset[int]
    peers: tuple[tuple[bool, frozenset[int]], ...]
    delivered: bool
    fetch_ok: bool
    ready: bool
    expires_in: float | None
    finished: bool
    failed: bool
    origin_error: bool
    announced: bool = True
    known_peers: int = 0
    swarm_size: int = 0


@dataclass
class ScriptedLink:
    """Answers as the current tick says; every URL it makes is new."""

    tick: Tick | None = None
    wall: float = WALL
    made: int = 0

    def fetch(self) -> OriginURL | None:
        assert self.tick is not None
        if not self.tick.fetch_ok:
            return None
        self.made += 1
        expires = None if self.tick.expires_in is None else self.wall + self.tick.expires_in
        return OriginURL(f"http://origin/v1?n={self.made}", expires_at=expires)

    def ready(self, url: str, now: float) -> bool:
        assert self.tick is not None
        return self.tick.ready


@dataclass
class ModelTorrent:
    """What libtorrent would hold after the decisions applied so far."""

    web_seeds: list[str] = field(default_factory=list)
    priorities: list[int] = field(default_factory=lambda: [DEFAULT_PRIORITY] * PIECES)

    def apply(self, decision: Decision) -> None:
        if decision.priorities is not None:
            assert len(decision.priorities) == PIECES
            self.priorities = list(decision.priorities)
        change = decision.web_seed
        if isinstance(change, Attach):
            assert self.web_seeds == [], "a second web seed"
            self.web_seeds.append(change.url)
        elif isinstance(change, Detach):
            assert self.web_seeds == [change.url], "removes a web seed that is not there"
            self.web_seeds.clear()
        elif isinstance(change, Replace):
            assert self.web_seeds == [change.old] and change.new != change.old
            self.web_seeds = [change.new]


pieces_sets = st.frozensets(st.integers(0, PIECES - 1), max_size=6)
ticks = st.builds(
    Tick,
    dt=st.sampled_from([0.0, 0.2, 0.5, 1.0, 2.0, 4.0, 30.0]),
    gained=pieces_sets,
    peers=st.lists(st.tuples(st.sampled_from([False] * 4 + [True]), pieces_sets), max_size=3).map(tuple),
    delivered=st.booleans(),
    fetch_ok=st.sampled_from([True, True, True, False]),
    ready=st.sampled_from([True, True, True, False]),
    expires_in=st.sampled_from([None, None, 20.0, 600.0]),
    finished=st.sampled_from([False] * 15 + [True]),
    failed=st.sampled_from([False] * 20 + [True]),
    origin_error=st.sampled_from([False] * 8 + [True]),
    announced=st.booleans(),
    known_peers=st.integers(0, 4),
    swarm_size=st.sampled_from([0, 0, 3, 1000]),
)
configs = st.builds(
    lambda policy, stripes, grace, stagger, starved, retry: config(
        origin_policy=policy, origin_stripes=stripes, origin_grace_s=grace, origin_stagger_s=stagger,
        origin_starved_s=starved, origin_retry_s=retry),
    policy=st.sampled_from(["fallback", "fallback", "always"]),
    stripes=st.sampled_from([1, 4, 4]),
    grace=st.sampled_from([0.0, 1.0, 5.0]),
    stagger=st.sampled_from([0.0, 2.0]),
    starved=st.sampled_from([0.5, 2.0]),
    retry=st.sampled_from([1.0, 10.0]),
)


def _bitfield(pieces: frozenset[int], length: int = PIECES, *, as_bitarray: bool = False) -> Pieces:
    bits = [i in pieces for i in range(length)]
    return bitarray(bits) if as_bitarray else bits


def _run(swarm_config: SwarmConfig, seed: int, run: list[Tick], *, origin: bool = True,
         check: bool = True, as_bitarrays: bool = False) -> list[Decision]:
    """Drive one download through ``run``, checking the properties at every step."""
    policy = OriginPolicy(swarm_config, pieces=PIECES, piece_length=PIECE, origin=origin, now=START,
                          rng=random.Random(seed))
    stripes = Stripes.for_torrent(PIECES, PIECE, 2 * PIECE, 4)
    torrent, link = ModelTorrent(), ScriptedLink()
    now, have, peer_bytes, done = START, frozenset[int](), 0, False
    decisions = []
    for tick in run:
        now += tick.dt
        link.tick, link.wall = tick, WALL + (now - START)
        if tick.origin_error and policy.attached is not None:
            decision = policy.origin_failed(policy.attached, now)
            torrent.apply(decision)
            decisions.append(decision)
        have |= tick.gained
        peer_bytes += tick.delivered
        done = done or tick.finished
        peers = [(seed_, _bitfield(bits, as_bitarray=as_bitarrays)) for seed_, bits in tick.peers]
        observation = Observation(now=now, wall=link.wall, peer_bytes=peer_bytes,
                                  have=_bitfield(have, as_bitarray=as_bitarrays),
                                  peers=peers, finished=done, failed=tick.failed,
                                  announced=tick.announced, known_peers=tick.known_peers,
                                  swarm_size=tick.swarm_size)
        turn = policy.turn_at(observation)
        counts = held_counts(stripes, observation.have, peers)
        decision = policy.step(observation, link)
        torrent.apply(decision)
        decisions.append(decision)
        if not check:
            continue
        attached = isinstance(decision.web_seed, Attach)
        always = swarm_config.origin_policy == "always"
        # The web seed: never before the turn under "fallback", never after the end,
        # never without an origin; the model holds what the policy says it holds.
        assert not attached or always or now >= turn
        assert not attached or not (done or tick.failed)
        assert origin or not torrent.web_seeds
        assert torrent.web_seeds == ([] if policy.attached is None else [policy.attached])
        # Off means every piece at the default priority.
        if policy.attached is None or policy.stripe is None:
            assert torrent.priorities == [DEFAULT_PRIORITY] * PIECES
        # A stripe taken while some stripe nobody in sight holds a piece of exists is one of those.
        if decision.stripe is not None and 0 in counts:
            assert counts[decision.stripe] == 0
        # On a stripe (only with the web seed on): its pieces first, other pieces held in
        # sight at the default, the rest (other stripes' unheld pieces) never.
        if policy.stripe is not None:
            assert policy.attached is not None
            assert torrent.priorities == priorities(stripes, observation.have, peers, policy.stripe)
    return decisions


@settings(max_examples=300, deadline=None)
@given(configs, st.integers(0, 2**32 - 1), st.lists(ticks, max_size=40))
def test_every_run_keeps_the_rules(swarm_config: SwarmConfig, seed: int, run: list[Tick]) -> None:
    _run(swarm_config, seed, run)


@settings(max_examples=50, deadline=None)
@given(configs, st.integers(0, 2**32 - 1), st.lists(ticks, max_size=40))
def test_without_origin_no_web_seed_ever(swarm_config: SwarmConfig, seed: int, run: list[Tick]) -> None:
    decisions = _run(swarm_config, seed, run, origin=False)
    assert all(d.web_seed is None and d.priorities is None for d in decisions)


@settings(max_examples=100, deadline=None)
@given(configs, st.integers(0, 2**32 - 1), st.lists(ticks, max_size=40))
def test_the_same_inputs_give_the_same_decisions(
        swarm_config: SwarmConfig, seed: int, run: list[Tick]) -> None:
    assert _run(swarm_config, seed, run, check=False) == _run(swarm_config, seed, run, check=False)


@settings(max_examples=100, deadline=None)
@given(configs, st.integers(0, 2**32 - 1), st.lists(ticks, max_size=40))
def test_bitarrays_give_the_same_decisions_as_lists(
        swarm_config: SwarmConfig, seed: int, run: list[Tick]) -> None:
    lists = _run(swarm_config, seed, run, check=False)
    assert _run(swarm_config, seed, run, check=False, as_bitarrays=True) == lists


@given(pieces_sets, st.lists(st.tuples(st.booleans(), pieces_sets, st.integers(0, PIECES + 2)), max_size=4))
def test_peers_hold_needed_reads_bitarrays_as_lists(
        have: frozenset[int], peers: list[tuple[bool, frozenset[int], int]]) -> None:
    as_lists = [(seed, _bitfield(bits, length)) for seed, bits, length in peers]
    as_bitarrays = [(seed, _bitfield(bits, length, as_bitarray=True)) for seed, bits, length in peers]
    expected = peers_hold_needed(_bitfield(have), as_lists)
    assert peers_hold_needed(_bitfield(have, as_bitarray=True), as_bitarrays) == expected
