"""The origin policy core, by tables: one download's observations in, its decisions out.

No libtorrent, no clock: times are seconds after ``START``. The defaults of these tables
(``helpers.config``, ``helpers.obs``): grace 6 s, stagger 2 s, starved after 2 s (stall:
6 s), rank 0.5, and no tracker answers, so a download settles at the grace cap, 6 s, and
with p peers in sight has its turn at 6 + 0.5 × p × 2 s (one stripe). The settle rule
and the ranks of peer ids have tables of their own.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bloomswarm.agent.config import SwarmConfig
from bloomswarm.agent.origin_policy import (
    NOTHING,
    STALL_FACTOR,
    Attach,
    Decision,
    Detach,
    Observation,
    OriginPolicy,
    Replace,
    fleet_rank,
    peers_hold_needed,
    want_origin,
)
from bloomswarm.agent.origin_stripes import DEFAULT_PRIORITY as D
from bloomswarm.agent.origin_stripes import TOP_PRIORITY as T
from bloomswarm.agent.origin_stripes import Stripes
from bloomswarm.agent.transfer import OriginURL
from tests.unit.origin_policy_helpers import PIECE, START, Draws, Link, bits, config, obs, origin_part, policy

URL = "http://origin/v1"
HOLDS_NEEDED = (False, bits(16, 3))
"""A peer holding piece 3, which we lack."""


# --- the starvation rule ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("idle", "holding", "expected"),
    [
        (0.0, False, False),  # peers just delivered: not starved
        (1.9, False, False),
        (2.0, False, True),  # nothing for starved_s and no peer has what we need
        (2.0, True, False),  # a peer has needed pieces: wait for it
        (STALL_FACTOR * 2.0 - 0.1, True, False),
        (STALL_FACTOR * 2.0, True, True),  # ... unless it delivers nothing for long
    ],
)
def test_off_turns_on_only_when_starved(idle: float, holding: bool, expected: bool) -> None:
    assert want_origin(origin_on=False, idle_s=idle, starved_s=2.0, peers_hold_needed=holding) is expected


@pytest.mark.parametrize(("idle", "holding", "expected"), [(0.0, False, True), (0.0, True, False)])
def test_never_fed_it_need_not_wait_to_be_starved(idle: float, holding: bool, expected: bool) -> None:
    assert want_origin(origin_on=False, idle_s=idle, starved_s=2.0, peers_hold_needed=holding,
                       fed=False) is expected


@pytest.mark.parametrize(
    ("idle", "holding", "expected"),
    [
        (0.0, False, True),  # the origin is the only source of what we need: keep it
        (10.0, False, True),
        (0.0, True, False),  # a peer has what we need (a collision): back off
        (STALL_FACTOR * 2.0, True, True),  # ... but it does not deliver
    ],
)
def test_on_backs_off_when_a_peer_holds_needed_pieces(idle: float, holding: bool, expected: bool) -> None:
    assert want_origin(origin_on=True, idle_s=idle, starved_s=2.0, peers_hold_needed=holding) is expected


def test_peers_hold_needed() -> None:
    have = [True, False, False]
    assert not peers_hold_needed(have, [])
    assert not peers_hold_needed(have, [(False, [True, False, False])])  # only what we have
    assert peers_hold_needed(have, [(False, [False, False, True])])
    assert peers_hold_needed(have, [(True, [])])  # a seed holds everything
    assert not peers_hold_needed(have, [(False, [True])])  # short bitfield: nothing beyond
    assert not peers_hold_needed([True, True], [(True, [])])  # nothing needed


# --- "fallback", one stripe: the first decision of a download -----------------------------


@pytest.mark.parametrize(
    ("what", "observation", "expected"),
    [
        ("before its turn", obs(5.9), NOTHING),
        ("its turn, starved", obs(6.0), Decision(web_seed=Attach(URL))),
        ("its turn (one peer: 7 s), a peer holds a needed piece and delivers",
         obs(7.0, peers=[HOLDS_NEEDED], peer_bytes=100), NOTHING),
        ("... one that delivered nothing for the stall time does not count",
         obs(7.0, peers=[HOLDS_NEEDED]), Decision(web_seed=Attach(URL))),
        ("its turn, but peers just delivered", obs(6.0, peer_bytes=100), NOTHING),
        ("the turn waits a stagger per connected peer", obs(8.9, peers=[(False, [])] * 3), NOTHING),
        ("... and comes after them", obs(9.0, peers=[(False, [])] * 3), Decision(web_seed=Attach(URL))),
        ("checking pieces on disk", obs(30.0, checking=True), NOTHING),
        ("finished before its turn", obs(30.0, finished=True), NOTHING),
    ],
)
def test_fallback_first_decision(what: str, observation: Observation, expected: Decision) -> None:
    assert origin_part(policy(config()).step(observation, Link())) == expected, what


def test_the_staggered_wait_is_capped() -> None:
    download = policy(config(origin_max_delay_s=4.0), rank=0.99)
    assert download.turn_at(obs(6.0, peers=[(False, [])] * 100)) == pytest.approx(START + 6.0 + 4.0)
    assert download.turn_at(obs(6.0, peers=[(False, [])])) == pytest.approx(START + 6.0 + 0.99 * 2.0)


def test_a_download_without_origin_never_takes_it() -> None:
    download = policy(config(), origin=False)
    for at in (6.0, 60.0, 600.0):
        assert download.step(obs(at), Link()).web_seed is None
    assert download.attached is None


# --- settling and the order of turns --------------------------------------------------------

INFO_HASH = b"\x01" * 32


def _ids_ranked(count: int, *, below: float, above: bool = False) -> list[bytes]:
    """``count`` peer ids whose rank for ``INFO_HASH`` is below ``below`` (or above)."""
    found = []
    for n in range(100_000):
        peer_id = b"-BS0001-%012d" % n
        if (fleet_rank(INFO_HASH, peer_id) >= below) is above:
            found.append(peer_id)
            if len(found) == count:
                return found
    raise AssertionError("no such ids")


OWN_ID = _ids_ranked(1, below=1.0)[0]
OWN_RANK = fleet_rank(INFO_HASH, OWN_ID)


def test_fleet_rank_is_a_uniform_number_per_version_and_peer() -> None:
    ranks = [fleet_rank(INFO_HASH, b"peer%d" % n) for n in range(2000)]
    assert all(0.0 <= r < 1.0 for r in ranks)
    assert 0.45 < sum(ranks) / len(ranks) < 0.55
    assert fleet_rank(INFO_HASH, b"peer1") == fleet_rank(INFO_HASH, b"peer1")
    assert fleet_rank(INFO_HASH, b"peer1") != fleet_rank(b"\x02" * 32, b"peer1")


@pytest.mark.parametrize(
    ("what", "steps", "expected"),
    [
        ("nobody answered: the grace cap", [obs(5.9)], None),
        ("... then it settles at the cap", [obs(5.9), obs(6.1)], START + 6.0),
        ("a tracker answered, no peer named: at once", [obs(0.3, announced=True)], START + 0.3),
        ("a tracker named us and a peer not connected yet", [obs(0.3, announced=True, known_peers=2)], None),
        ("... connected", [obs(0.3, announced=True, known_peers=2),
                           obs(0.5, announced=True, known_peers=2, peers=[(False, [])])], START + 0.5),
        ("a fresh fleet (size unknown): one stagger after the answer, all connected or not",
         [obs(0.3, announced=True, known_peers=2, peers=[(False, [])], fleet_known=False),
          obs(2.2, announced=True, known_peers=2, peers=[(False, [])], fleet_known=False)], None),
        ("... then it settles", [obs(0.3, announced=True, fleet_known=False),
                                 obs(2.3, announced=True, fleet_known=False)], START + 2.3),
        ("... never connected: one stagger after the answer",
         [obs(0.3, announced=True, known_peers=2), obs(2.3, announced=True, known_peers=2)], START + 2.3),
    ],
)
def test_the_turns_count_once_the_download_has_seen_its_swarm(
        what: str, steps: list[Observation], expected: float | None) -> None:
    download, link = policy(config(), origin=False), Link()
    for observation in steps:
        download.step(observation, link)
    assert download.settled_at(steps[-1]) == expected, what


def test_the_first_agent_of_a_fresh_version_takes_the_origin_at_once() -> None:
    download, link = policy(config()), Link()
    assert download.step(obs(0.2, announced=True), link).web_seed == Attach(URL)


def test_peers_ranked_ahead_each_add_a_stagger() -> None:
    ahead = _ids_ranked(2, below=OWN_RANK)
    behind = _ids_ranked(3, below=OWN_RANK, above=True)
    peers: list[tuple[bool, list[bool]]] = [(False, [])] * 5
    download = policy(config(), identity=(INFO_HASH, OWN_ID))
    seen = obs(0.2, announced=True, known_peers=5, peers=peers, peer_ids=ahead + behind)
    assert download.position(seen) == 2.0  # exactly: the whole swarm is in sight
    assert download.turn_at(seen) == pytest.approx(START + 0.2 + 2 * 2.0)
    # A swarm larger than the peers in sight: those seen ahead, and the rank's share of the rest.
    bigger = obs(0.2, announced=True, known_peers=5, peers=peers, peer_ids=ahead + behind, swarm_size=1000)
    assert download.position(bigger) == pytest.approx(2.0 + OWN_RANK * (1000 - 6))


def test_the_agents_seen_for_other_versions_count_before_they_connect_for_this_one() -> None:
    ahead = _ids_ranked(2, below=OWN_RANK)
    behind = _ids_ranked(3, below=OWN_RANK, above=True)
    striped = config(origin_stripes=4, origin_request_bytes=4 * PIECE)
    download = policy(striped, pieces=64, identity=(INFO_HASH, OWN_ID))
    # Nobody connected for this version yet; all five are connected for the one seeded.
    seen = obs(0.1, announced=True, swarm_size=6, pieces=64, fleet_peer_ids=frozenset(ahead + behind))
    assert download.position(seen) == 2.0  # exactly
    # Connected for both: counted once.
    both = obs(0.1, announced=True, known_peers=1, peers=[(False, [])], peer_ids=ahead[:1], swarm_size=6,
               pieces=64, fleet_peer_ids=frozenset(ahead + behind))
    assert download.position(both) == 2.0
    # Without stripes (one agent on the origin at a time) only the connected peers count.
    single = policy(config(), identity=(INFO_HASH, OWN_ID))
    assert single.position(seen) == pytest.approx(OWN_RANK * 5)


def test_with_the_whole_fleet_in_sight_each_agent_takes_its_own_stripe_at_once() -> None:
    settings = config(origin_stripes=4, origin_request_bytes=4 * PIECE)
    ids = sorted(_ids_ranked(6, below=1.0), key=lambda i: fleet_rank(INFO_HASH, i))
    link = Link()
    taken = []
    for own in ids:
        download = policy(settings, pieces=64, identity=(INFO_HASH, own), fleet_size=6)
        assert download.stripes == Stripes(pieces=64, run=4, stripes=6)  # one per agent
        others = frozenset(i for i in ids if i != own)
        seen = obs(0.05, announced=True, swarm_size=6, pieces=64, fleet_peer_ids=others)
        decision = download.step(seen, link)
        assert decision.web_seed == Attach(URL)  # no stagger
        taken.append(decision.stripe)
    assert taken == list(range(6))  # the p-th in line takes stripe p: no two the same


def test_with_the_whole_fleet_in_sight_a_backup_leaves_unclaimed_stripes_to_their_owners() -> None:
    """Six agents, four stripes (fleet_size unknown at the start): the fifth in line waits
    while the stripes show no piece yet (their owners' first pieces are on the way), and
    takes one still unclaimed after 3 x origin_starved_s."""
    settings = config(origin_stripes=4, origin_request_bytes=4 * PIECE, origin_starved_s=2.0)
    ids = sorted(_ids_ranked(6, below=1.0), key=lambda i: fleet_rank(INFO_HASH, i))
    backup = policy(settings, pieces=64, identity=(INFO_HASH, ids[4]))
    assert backup.stripes == Stripes(pieces=64, run=4, stripes=4)
    others = frozenset(i for i in ids if i != ids[4])
    link = Link()
    for at in (0.05, 1.0, 3.0, 5.9):
        seen = obs(at, announced=True, swarm_size=6, pieces=64, fleet_peer_ids=others)
        assert backup.step(seen, link).web_seed is None, at
    taken = backup.step(obs(6.1, announced=True, swarm_size=6, pieces=64, fleet_peer_ids=others), link)
    assert taken.web_seed == Attach(URL) and taken.stripe is not None


def test_a_backup_waits_three_times_as_long_as_the_stripes_first_pieces_took() -> None:
    """The same backup over a slow origin: the other stripes showed their first piece
    after 3 s, so a stripe still without one is left to its owner until 9 s (3 x 3 s),
    not taken at 6 s."""
    settings = config(origin_stripes=4, origin_request_bytes=4 * PIECE, origin_starved_s=2.0)
    ids = sorted(_ids_ranked(6, below=1.0), key=lambda i: fleet_rank(INFO_HASH, i))
    backup = policy(settings, pieces=64, identity=(INFO_HASH, ids[4]))
    others = frozenset(i for i in ids if i != ids[4])
    link = Link()
    firsts = [(False, bits(64, 0, 4, 8))]  # stripes 0, 1, 2 (runs of 4): a piece each

    def seen(at: float, peers: list[tuple[bool, list[bool]]]) -> Observation:
        return obs(at, announced=True, swarm_size=6, pieces=64, fleet_peer_ids=others, peers=peers,
                   peer_bytes=int(at * 10))

    assert backup.step(seen(0.05, []), link).web_seed is None
    assert backup.step(seen(3.0, firsts), link).web_seed is None
    assert backup.step(seen(8.9, firsts), link).web_seed is None
    taken = backup.step(seen(9.0, firsts), link)
    assert (taken.web_seed, taken.stripe) == (Attach(URL), 3)


def test_without_the_whole_fleet_in_sight_the_turns_stay_staggered() -> None:
    settings = config(origin_stripes=4, origin_request_bytes=4 * PIECE)
    ids = sorted(_ids_ranked(6, below=1.0), key=lambda i: fleet_rank(INFO_HASH, i))
    last = policy(settings, pieces=64, identity=(INFO_HASH, ids[-1]), fleet_size=6)
    seen = obs(0.05, announced=True, swarm_size=8, pieces=64, fleet_peer_ids=frozenset(ids[:-1]))
    assert last.turn_at(seen) > START + 0.05  # two agents unseen: its place is an estimate


def test_the_agent_ranked_first_goes_first_and_the_next_sees_it() -> None:
    first_id, second_id = sorted(_ids_ranked(2, below=1.0), key=lambda i: fleet_rank(INFO_HASH, i))
    first = policy(config(), identity=(INFO_HASH, first_id))
    second = policy(config(), identity=(INFO_HASH, second_id))
    link = Link()

    def seen(at: float, peer_id: bytes, pieces: list[bool], peer_bytes: int = 0) -> Observation:
        return obs(at, announced=True, known_peers=1, peers=[(False, pieces)], peer_ids=[peer_id],
                   peer_bytes=peer_bytes)

    assert first.step(seen(0.1, second_id, []), link).web_seed == Attach(URL)
    assert second.step(seen(0.1, first_id, []), link).web_seed is None
    # One stagger later the first one holds pieces the second needs: it stays off.
    assert second.step(seen(2.2, first_id, bits(16, 0, 1), peer_bytes=1), link).web_seed is None


# --- "fallback", one stripe: the web seed on, then off ------------------------------------


def _on(settings: SwarmConfig | None = None, *, draws: Draws | None = None) -> tuple[OriginPolicy, Link]:
    """A download that took the origin at 6 s (no peers)."""
    download, link = policy(settings or config(), draws=draws), Link()
    assert download.step(obs(6.0), link).web_seed == Attach(URL)
    return download, link


@pytest.mark.parametrize(
    ("what", "observation", "expected"),
    [
        ("the origin is the only source", obs(7.0), NOTHING),
        ("a peer holds a needed piece: back off", obs(7.0, peers=[HOLDS_NEEDED], peer_bytes=1),
         Decision(web_seed=Detach(URL, "a peer has pieces we need"))),
        ("... one that delivered nothing for the stall time does not count",
         obs(7.0, peers=[HOLDS_NEEDED]), NOTHING),
        ("finished", obs(7.0, finished=True), Decision(web_seed=Detach(URL, "finished"))),
        ("failed", obs(7.0, failed=True), Decision(web_seed=Detach(URL, "failed"))),
        ("finished and failed", obs(7.0, finished=True, failed=True),
         Decision(web_seed=Detach(URL, "finished"))),
    ],
)
def test_fallback_with_the_origin_on(what: str, observation: Observation, expected: Decision) -> None:
    download, link = _on()
    assert origin_part(download.step(observation, link)) == expected, what


def test_a_back_off_draws_a_new_turn_counted_from_now_without_grace() -> None:
    download, link = _on(draws=Draws(0.5, 0.25))
    download.step(obs(7.0, peers=[HOLDS_NEEDED], peer_bytes=1), link)
    assert download.turn_at(obs(7.0, peers=[HOLDS_NEEDED])) == pytest.approx(START + 7.0 + 0.25 * 2.0 * 2)


def test_always_takes_the_origin_at_once_and_keeps_it() -> None:
    download = policy(config(origin_policy="always"))
    link = Link()
    assert download.step(obs(0.0), link).web_seed == Attach(URL)
    assert origin_part(download.step(obs(1.0, peers=[HOLDS_NEEDED]), link)) == NOTHING
    assert download.step(obs(2.0, finished=True), link).web_seed == Detach(URL, "finished")


# --- the URL ------------------------------------------------------------------------------


def test_the_url_is_made_only_when_the_web_seed_is_added() -> None:
    download, link = policy(config()), Link()
    download.step(obs(5.9), link)
    assert link.fetches == 0
    download.step(obs(6.0), link)
    assert link.fetches == 1


def test_no_web_seed_until_the_origins_addresses_are_ready() -> None:
    download, link = policy(config()), Link(is_ready=False)
    assert download.step(obs(6.0), link).web_seed is None
    link.is_ready = True
    assert download.step(obs(6.2), link).web_seed == Attach(URL)
    assert link.fetches == 1  # the URL was kept


def test_a_failed_url_is_retried_after_the_retry_time() -> None:
    download, link = policy(config(origin_retry_s=10.0)), Link(urls=[None, OriginURL(URL)])
    assert download.step(obs(6.0), link).web_seed is None
    assert download.step(obs(15.9), link).web_seed is None
    assert link.fetches == 1
    assert download.step(obs(16.0), link).web_seed == Attach(URL)


def test_an_expiring_url_is_replaced_before_it_expires() -> None:
    # Valid for 1000 s from 6 s: refreshed 300 s (origin_url_refresh_s) before.
    first = OriginURL("http://origin/v1?sig=1", expires_at=obs(1006.0).wall)
    second = OriginURL("http://origin/v1?sig=2", expires_at=obs(2006.0).wall)
    download, link = policy(config()), Link(urls=[first, second])
    assert download.step(obs(6.0), link).web_seed == Attach(first.url)
    assert download.step(obs(705.9), link).web_seed is None
    assert download.step(obs(706.0), link).web_seed == Replace(first.url, second.url)
    assert download.attached == second.url


def test_a_short_lived_url_is_replaced_at_half_its_life() -> None:
    first = OriginURL("http://origin/v1?sig=1", expires_at=obs(106.0).wall)
    second = OriginURL("http://origin/v1?sig=2")
    download, link = policy(config()), Link(urls=[first, second])
    download.step(obs(6.0), link)
    assert download.step(obs(55.9), link).web_seed is None
    assert download.step(obs(56.0), link).web_seed == Replace(first.url, second.url)


def test_an_origin_error_takes_the_web_seed_out_until_the_retry_time() -> None:
    download, link = _on(config(origin_retry_s=10.0))
    assert download.origin_failed("http://elsewhere/", START + 7.0) == NOTHING
    assert download.origin_failed(URL, START + 7.0) == Decision(web_seed=Detach(URL, None))
    assert download.step(obs(16.9), link).web_seed is None
    assert link.fetches == 1
    assert download.step(obs(17.0), link).web_seed == Attach(URL)
    assert link.fetches == 2  # a fresh URL


# --- stripes ------------------------------------------------------------------------------
# 16 pieces, runs of 2, 4 stripes: stripe s holds pieces 2s, 2s+1, 2s+8, 2s+9.

STRIPE_0 = [T, T, 0, 0, 0, 0, 0, 0, T, T, 0, 0, 0, 0, 0, 0]
STRIPE_1 = [0, 0, T, T, 0, 0, 0, 0, 0, 0, T, T, 0, 0, 0, 0]
STRIPE_2 = [0, 0, 0, 0, T, T, 0, 0, 0, 0, 0, 0, T, T, 0, 0]
RESTORED = (D,) * 16


def _striped(**overrides: object) -> tuple[OriginPolicy, Link]:
    return policy(config(origin_stripes=4, **overrides)), Link()


@pytest.mark.parametrize(
    ("what", "observation", "expected"),
    [
        ("an unclaimed stripe: take it, other unheld pieces at 0", obs(6.0),
         Decision(priorities=tuple(STRIPE_0), stripe=0, web_seed=Attach(URL))),
        ("pieces held in sight keep the default (one peer: turn at 7 s)",
         obs(7.0, peers=[(False, bits(16, 0, 2))], peer_bytes=1),
         Decision(priorities=(D, 0, D, 0, T, T, 0, 0, 0, 0, 0, 0, T, T, 0, 0), stripe=2,
                  web_seed=Attach(URL))),
        ("a peer holding needed pieces does not stop it", obs(7.0, peers=[HOLDS_NEEDED], peer_bytes=1),
         Decision(priorities=(T, T, 0, D, 0, 0, 0, 0, T, T, 0, 0, 0, 0, 0, 0), stripe=0,
                  web_seed=Attach(URL))),
        ("every stripe claimed: wait", obs(7.0, peers=[(False, bits(16, 0, 2, 4, 6))], peer_bytes=1),
         NOTHING),
        ("every stripe claimed, peers idle for the stall time: any piece",
         obs(7.0, peers=[(False, bits(16, 0, 2, 4, 6))]), Decision(web_seed=Attach(URL))),
        ("before its turn", obs(5.9), NOTHING),
    ],
)
def test_stripes_first_decision(what: str, observation: Observation, expected: Decision) -> None:
    download, link = _striped()
    assert origin_part(download.step(observation, link)) == expected, what


def test_with_every_stripe_claimed_the_origin_waits_for_the_stall_time_then_takes_any_piece() -> None:
    download, link = _striped(origin_grace_s=0.0, origin_stagger_s=0.0)
    claimed = [(False, bits(16, 0, 2, 4, 6))]
    assert download.step(obs(5.9, peers=claimed), link).web_seed is None
    decision = download.step(obs(6.0, peers=claimed), link)
    assert origin_part(decision) == Decision(web_seed=Attach(URL))  # no stripe, no priorities


def test_a_stalled_stripe_is_taken_when_none_is_unclaimed() -> None:
    download, link = _striped(origin_grace_s=0.0, origin_stagger_s=0.0)
    peers = [(False, bits(16, 0, 2, 4, 6))]
    download.step(obs(0.5, peers=peers, peer_bytes=1), link)
    # Stripe 3 grows at 1 s (a piece every 0.5 s); 0, 1, 2 stall from 0.5 s. Peers deliver
    # all the while.
    grown = [(False, bits(16, 0, 2, 4, 6, 7))]
    assert download.step(obs(1.0, peers=grown, peer_bytes=2), link).web_seed is None
    assert download.step(obs(6.4, peers=grown, peer_bytes=3), link).web_seed is None
    decision = download.step(obs(6.5, peers=grown, peer_bytes=3), link)  # 3 * origin_starved_s
    assert (decision.stripe, decision.web_seed) == (0, Attach(URL))


def test_over_a_slow_origin_a_stripe_counts_as_stalled_only_after_three_of_its_pieces_times() -> None:
    """A stripe's fetcher that gets a piece every 3.5 s is not taken over after the
    6 s (3 * origin_starved_s) that suits a faster origin, but after 3 * 3.5 s."""
    download, link = _striped(origin_grace_s=0.0, origin_stagger_s=0.0)
    download.step(obs(0.5, peers=[(False, bits(16, 0, 2, 4, 6))], peer_bytes=1), link)
    grown = [(False, bits(16, 0, 2, 4, 6, 7))]  # stripe 3's next piece, 3.5 s later
    assert download.step(obs(4.0, peers=grown, peer_bytes=2), link).web_seed is None
    assert download.step(obs(10.9, peers=grown, peer_bytes=3), link).web_seed is None
    decision = download.step(obs(11.0, peers=grown, peer_bytes=3), link)
    assert (decision.stripe, decision.web_seed) == (0, Attach(URL))


@pytest.mark.parametrize(
    ("what", "observation", "expected"),
    [
        ("in progress, nothing new", obs(7.0), NOTHING),
        ("in progress, a peer got a piece of another stripe", obs(7.0, peers=[(False, bits(16, 2))]),
         Decision(priorities=(T, T, D, 0, 0, 0, 0, 0, T, T, 0, 0, 0, 0, 0, 0))),
        ("a peer ahead on our stripe: move to a free one, the web seed stays",
         obs(7.0, peers=[(False, bits(16, 0, 1))]),
         Decision(priorities=(D, D, T, T, 0, 0, 0, 0, 0, 0, T, T, 0, 0, 0, 0), stripe=1)),
        ("a peer ahead on our stripe, none free: back off", obs(7.0, peers=[(True, [])]),
         Decision(priorities=RESTORED, web_seed=Detach(URL, "stripe 0 is fetched by another agent"))),
        ("our stripe complete: the next free one", obs(7.0, have=bits(16, 0, 1, 8, 9)),
         Decision(priorities=(D, D, T, T, 0, 0, 0, 0, D, D, T, T, 0, 0, 0, 0), stripe=1)),
        ("our stripe complete, none free: off",
         obs(7.0, have=bits(16, 0, 1, 8, 9), peers=[(False, bits(16, 2, 4, 6))]),
         Decision(priorities=RESTORED, web_seed=Detach(URL, "stripe 0 is complete"))),
        ("finished", obs(7.0, finished=True),
         Decision(priorities=RESTORED, web_seed=Detach(URL, "finished"))),
    ],
)
def test_stripes_with_the_origin_on(what: str, observation: Observation, expected: Decision) -> None:
    download, link = _striped()
    assert download.step(obs(6.0), link).stripe == 0
    assert origin_part(download.step(observation, link)) == expected, what


def test_an_origin_error_on_a_stripe_restores_the_priorities() -> None:
    download, link = _striped()
    download.step(obs(6.0), link)
    assert download.origin_failed(URL, START + 7.0) == Decision(
        priorities=RESTORED, web_seed=Detach(URL, None))
    assert download.stripe is None


def test_a_version_smaller_than_one_request_per_stripe_gets_shorter_runs() -> None:
    download = policy(config(origin_stripes=4, origin_request_bytes=256 * PIECE), pieces=256)
    assert download.stripes == Stripes(pieces=256, run=64, stripes=4)  # runs of 1 MiB, not 4


def test_one_stripe_only_when_the_version_has_one_piece() -> None:
    download = policy(config(origin_stripes=4), pieces=1)
    assert download.stripes is not None and download.stripes.stripes == 1
    assert origin_part(download.step(obs(6.0, have=[False]), Link())) == Decision(web_seed=Attach(URL))


# --- re-announcing ------------------------------------------------------------------------


def test_it_reannounces_while_no_peer_holds_a_needed_piece_the_gap_doubling() -> None:
    download, link = policy(config(peer_rediscovery_s=5.0), origin=False), Link()
    due = [at for at in (0.5, 1.0, 1.5, 2.9, 3.0, 6.9, 7.0, 11.9, 12.0, 17.0)
           if download.step(obs(at), link).reannounce]
    assert due == [1.0, 3.0, 7.0, 12.0, 17.0]  # 1, 2, 4, then every 5 s


def test_no_reannounce_while_a_peer_holds_a_needed_piece() -> None:
    download = policy(config(), origin=False)
    assert not download.step(obs(2.0, peers=[HOLDS_NEEDED]), Link()).reannounce
    assert download.step(obs(2.0), Link()).reannounce


def test_second_in_line_waits_to_be_starved_even_if_never_fed() -> None:
    first_id, second_id = sorted(_ids_ranked(2, below=1.0), key=lambda i: fleet_rank(INFO_HASH, i))
    second, link = policy(config(origin_starved_s=4.0), identity=(INFO_HASH, second_id)), Link()

    def seen(at: float) -> Observation:
        return obs(at, announced=True, known_peers=2, peers=[(False, [])], peer_ids=[first_id])

    assert second.step(seen(0.1), link).web_seed is None  # settled; its turn is one stagger later
    assert second.step(seen(2.5), link).web_seed is None  # its turn, not starved: the first may fetch
    assert second.step(seen(4.0), link).web_seed == Attach(URL)  # nothing came for starved_s


def test_agents_in_line_take_different_stripes_before_they_see_each_other() -> None:
    first_id, second_id = sorted(_ids_ranked(2, below=1.0), key=lambda i: fleet_rank(INFO_HASH, i))
    settings = config(origin_stripes=4)
    first = policy(settings, identity=(INFO_HASH, first_id))
    second = policy(settings, identity=(INFO_HASH, second_id))

    def seen(at: float, peer_id: bytes) -> Observation:  # the peer holds nothing yet
        return obs(at, announced=True, known_peers=2, peers=[(False, [])], peer_ids=[peer_id])

    assert first.step(seen(0.1, second_id), Link()).stripe == 0  # first in line: at once
    assert second.step(seen(0.1, first_id), Link()).web_seed is None  # its turn: 2 s / 4 stripes later
    assert second.step(seen(0.7, first_id), Link()).stripe == 1  # the second free stripe


def test_agents_whose_stripes_complete_together_move_on_to_different_free_stripes() -> None:
    """Two agents in line, all in sight, each finishes its stripe at the same tick: the
    first moves to the first free stripe, the second to the second (drawn at random,
    they would take the same one half the time)."""
    first_id, second_id = sorted(_ids_ranked(2, below=1.0), key=lambda i: fleet_rank(INFO_HASH, i))
    settings = config(origin_stripes=4)
    first = policy(settings, identity=(INFO_HASH, first_id))
    second = policy(settings, identity=(INFO_HASH, second_id))

    def seen(at: float, peer_id: bytes, have: list[int], theirs: list[int]) -> Observation:
        return obs(at, announced=True, known_peers=2, have=bits(16, *have),
                   peers=[(False, bits(16, *theirs))], peer_ids=[peer_id])

    assert first.step(seen(0.1, second_id, [], []), Link()).stripe == 0
    assert second.step(seen(0.1, first_id, [], []), Link()).web_seed is None
    assert second.step(seen(0.7, first_id, [], []), Link()).stripe == 1
    stripe_0, stripe_1 = [0, 1, 8, 9], [2, 3, 10, 11]
    assert first.step(seen(1.5, second_id, stripe_0, stripe_1), Link()).stripe == 2
    assert second.step(seen(1.5, first_id, stripe_1, stripe_0), Link()).stripe == 3


def _in_sight(count: int, settings: SwarmConfig, *, pieces: int = 16,
              fleet_size: int = 0) -> list[tuple[bytes, OriginPolicy]]:
    """``count`` agents in line order (rank), each with its policy for a version of
    ``pieces`` pieces."""
    ids = sorted(_ids_ranked(count, below=1.0), key=lambda i: fleet_rank(INFO_HASH, i))
    return [(own, policy(settings, pieces=pieces, identity=(INFO_HASH, own), fleet_size=fleet_size))
            for own in ids]


def _stripe_pieces(stripe: int) -> list[int]:
    """The pieces of ``stripe`` in a version dealt in runs of 2 (one stripe per run)."""
    return [2 * stripe, 2 * stripe + 1]


def _fresh_fleet_moving_on(agents: int, stripes: int) -> list[int | None]:
    """A fresh fleet of ``agents`` in sight of each other and ``stripes`` stripes of two
    pieces: each agent takes the stripe of its place (asserted), then all complete their
    stripes at the same tick; the stripes they move on to, in line order."""
    pieces = 2 * stripes
    fleet = _in_sight(agents, config(origin_stripes=stripes), pieces=pieces)
    ids = [own for own, _ in fleet]
    first = {own: _stripe_pieces(place) for place, own in enumerate(ids)}

    def seen(at: float, own: bytes, have: list[int], theirs: dict[bytes, list[int]]) -> Observation:
        others = [i for i in ids if i != own]
        return obs(at, announced=True, known_peers=agents, swarm_size=agents, fleet_known=False,
                   pieces=pieces, have=bits(pieces, *have),
                   peers=[(False, bits(pieces, *theirs.get(i, []))) for i in others], peer_ids=others)

    for place, (own, download) in enumerate(fleet):
        download.step(seen(0.1, own, [], {}), Link())
        download.step(seen(2.5, own, [], {}), Link())  # settled: one stagger after the answer
        download.step(seen(6.0, own, [], {}), Link())  # every turn has come
        assert download.stripe == place
    return [download.step(seen(7.0, own, first[own], first), Link()).stripe for own, download in fleet]


def test_in_a_fresh_fleet_the_agents_move_on_along_their_own_lanes() -> None:
    """Three agents in sight of each other, eight stripes: each takes the stripe of its
    place, and once it is complete moves on to the next stripe of its lane (place mod 3),
    so that no two take the same one (drawn at random, two of three would often collide)."""
    assert _fresh_fleet_moving_on(3, 8) == [3, 4, 5]


@given(agents=st.integers(min_value=2, max_value=6), extra=st.integers(min_value=0, max_value=8))
@settings(max_examples=30, deadline=None)
def test_agents_with_one_view_move_on_to_distinct_stripes_of_their_lanes(agents: int, extra: int) -> None:
    """Any fleet of ``agents`` in sight of each other and ``agents + extra`` stripes: each
    takes the stripe of its place; when all complete at once, each agent whose lane holds
    another stripe moves to it (place + agents), so none two take the same."""
    stripes = agents + extra
    moved = _fresh_fleet_moving_on(agents, stripes)
    lanes = [place + agents for place in range(agents) if place + agents < stripes]
    assert moved[:len(lanes)] == lanes


def test_in_a_fresh_fleet_an_agent_moving_on_leaves_the_stripes_to_their_agents_until_their_turns() -> None:
    """A fresh fleet (its size unknown) of six agents in sight of each other, four stripes
    (more agents than stripes: no lanes): the first in line takes stripe 0 at once and
    completes it half a stagger later. Stripes 1-3 belong to the agents in places 1-3,
    whose turns come a quarter, a half and three quarters of a stagger after settling:
    it leaves them (taking one then, both would fetch it: a 6 MiB version's stripe taken
    12 ms apart was fetched twice). One stagger after the last turn, a stripe still
    untouched is free to move on to."""
    settings = config(origin_stripes=4)
    fleet = _in_sight(6, settings, pieces=8)
    ids = [own for own, _ in fleet]
    first_id = ids[0]

    def seen(at: float, have: list[int]) -> Observation:
        others = ids[1:]
        return obs(at, announced=True, known_peers=6, swarm_size=6, fleet_known=False, pieces=8,
                   have=bits(8, *have), peers=[(False, bits(8)) for _ in others], peer_ids=others)

    def settled() -> OriginPolicy:
        download = policy(settings, pieces=8, identity=(INFO_HASH, first_id))
        download.step(seen(0.1, []), Link())
        assert download.step(seen(2.2, []), Link()).stripe == 0  # settled; first in line: at once
        return download

    early = settled().step(seen(3.2, _stripe_pieces(0)), Link())
    assert early.stripe is None and isinstance(early.web_seed, Detach)
    assert settled().step(seen(6.3, _stripe_pieces(0)), Link()).stripe in (1, 2, 3)


def test_in_a_running_fleet_of_fewer_agents_than_stripes_an_agent_moves_on_at_once() -> None:
    """Three agents, eight stripes, the whole fleet in sight: an agent whose stripe is
    complete 1 s after the start takes the next stripe of its lane at once, where a free
    stripe would count only 3 x origin_starved_s after the start (it would back off)."""
    settings = config(origin_stripes=8)
    agents = _in_sight(3, settings, fleet_size=3)
    ids = [own for own, _ in agents]

    def seen(at: float, own: bytes, have: list[int], theirs: list[int]) -> Observation:
        others = frozenset(i for i in ids if i != own)
        return obs(at, announced=True, swarm_size=3, have=bits(16, *have),
                   peers=[(False, bits(16, *theirs))], peer_ids=[min(others)], fleet_peer_ids=others)

    for place, (own, download) in enumerate(agents):
        assert download.step(seen(0.05, own, [], []), Link()).stripe == place  # at once
    own, download = agents[1]
    done = download.step(seen(1.0, own, _stripe_pieces(1), _stripe_pieces(0) + _stripe_pieces(2)), Link())
    assert done.stripe == 4 and done.web_seed is None  # stays on the origin, next of its lane


def test_a_fleet_larger_than_the_per_agent_limit_gets_origin_stripes() -> None:
    """One stripe per agent only up to ``origin_stripes_per_agent_up_to`` agents: a larger
    running fleet's places are estimates, and hundreds of agents each taking a stripe at
    once collide."""
    settings = config(origin_stripes=4, origin_request_bytes=PIECE, origin_stripes_per_agent_up_to=32)
    assert policy(settings, pieces=64, fleet_size=32).stripes == Stripes(pieces=64, run=1, stripes=32)
    assert policy(settings, pieces=64, fleet_size=33).stripes == Stripes(pieces=64, run=1, stripes=4)
    assert policy(settings, pieces=64, fleet_size=0).stripes == Stripes(pieces=64, run=1, stripes=4)
