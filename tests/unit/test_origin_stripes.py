"""Origin stripes: how pieces are dealt, and when a stripe is unclaimed, complete, contested or stalled."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bloomswarm.agent.origin_stripes import (
    DEFAULT_PRIORITY,
    TOP_PRIORITY,
    Stripes,
    StripeWatch,
    complete,
    held_counts,
    priorities,
    unclaimed,
    yields,
)


def test_runs_of_one_request_are_dealt_round_robin() -> None:
    stripes = Stripes(pieces=10, run=2, stripes=3)
    assert [stripes.stripe_of(i) for i in range(10)] == [0, 0, 1, 1, 2, 2, 0, 0, 1, 1]
    assert stripes.mask(0).tolist() == [1, 1, 0, 0, 0, 0, 1, 1, 0, 0]


def test_for_torrent_sizes_runs_to_the_origin_request_and_caps_the_stripes() -> None:
    assert Stripes.for_torrent(256, 256 * 1024, 1024 * 1024, 4) == Stripes(256, 4, 4)
    assert Stripes.for_torrent(256, 4 * 1024 * 1024, 1024 * 1024, 4) == Stripes(256, 1, 4)  # big pieces
    assert Stripes.for_torrent(1, 256 * 1024, 1024 * 1024, 4).stripes == 1
    assert Stripes.for_torrent(3, 256 * 1024, 1024 * 1024, 4) == Stripes(3, 4, 1)  # less than one run


def test_for_torrent_shortens_the_runs_of_a_small_version_down_to_one_mib() -> None:
    assert Stripes.for_torrent(6, 256 * 1024, 1024 * 1024, 4) == Stripes(6, 4, 1)  # one whole run
    assert Stripes.for_torrent(9, 256 * 1024, 1024 * 1024, 4) == Stripes(9, 4, 2)  # two
    assert Stripes.for_torrent(5, 256 * 1024, 4 * 1024 * 1024, 8) == Stripes(5, 4, 1)  # 1 MiB + header
    assert Stripes.for_torrent(65, 256 * 1024, 4 * 1024 * 1024, 16) == Stripes(65, 4, 16)  # 16 MiB, 16 agents
    assert Stripes.for_torrent(56, 256 * 1024, 4 * 1024 * 1024, 32) == Stripes(56, 4, 14)  # 14 MiB, 32 agents
    # 256 MiB: whole requests
    assert Stripes.for_torrent(1025, 256 * 1024, 4 * 1024 * 1024, 8) == Stripes(1025, 16, 8)


@given(pieces=st.integers(1, 5000), piece_kib=st.sampled_from([16, 256, 4096]),
       request_kib=st.sampled_from([16, 1024, 4096]), stripes=st.integers(1, 2000))
def test_for_torrent_runs_are_at_most_one_request_and_no_stripe_is_empty(
        pieces: int, piece_kib: int, request_kib: int, stripes: int) -> None:
    dealt = Stripes.for_torrent(pieces, piece_kib * 1024, request_kib * 1024, stripes)
    assert dealt.run <= max(1, request_kib // piece_kib)
    assert 1 <= dealt.stripes <= min(stripes, pieces)
    assert all(dealt.mask(s).any() for s in range(dealt.stripes))


def test_invalid_stripes_are_refused() -> None:
    with pytest.raises(ValueError):
        Stripes(pieces=4, run=0, stripes=2)
    with pytest.raises(ValueError):
        Stripes(pieces=4, run=1, stripes=0)


@given(st.integers(0, 300), st.integers(1, 9), st.integers(1, 9))
def test_every_piece_is_in_exactly_one_stripe(pieces: int, run: int, count: int) -> None:
    stripes = Stripes(pieces, run, count)
    for piece in range(pieces):
        owners = [s for s in range(count) if stripes.mask(s)[piece]]
        assert owners == [stripes.stripe_of(piece)]


def test_a_stripe_is_unclaimed_while_nobody_in_sight_holds_a_piece_of_it() -> None:
    stripes = Stripes(pieces=8, run=2, stripes=2)  # stripe 0: 0,1,4,5; stripe 1: 2,3,6,7
    nothing = [False] * 8
    assert unclaimed(stripes, nothing, []) == [0, 1]
    peer = [False] * 8
    peer[5] = True
    assert unclaimed(stripes, nothing, [(False, peer)]) == [1]
    have = list(nothing)
    have[2] = True  # we hold one ourselves
    assert unclaimed(stripes, have, [(False, peer)]) == []
    assert unclaimed(stripes, nothing, [(True, [])]) == []  # a seed holds everything


def test_held_counts_take_the_union_of_us_and_our_peers() -> None:
    stripes = Stripes(pieces=4, run=1, stripes=2)
    assert held_counts(stripes, [True, False, False, False], [(False, [True, True, True])]) == [2, 1]
    assert held_counts(stripes, [False] * 4, [(True, [])]) == [2, 2]


def test_priorities_put_the_stripe_first_and_keep_the_web_seed_off_other_unheld_pieces() -> None:
    stripes = Stripes(pieces=6, run=1, stripes=2)  # stripe 1: pieces 1, 3, 5
    peer = [False, False, True, False, False, False]
    have = [True, False, False, False, False, False]
    assert priorities(stripes, have, [(False, peer)], 1) == [
        DEFAULT_PRIORITY, TOP_PRIORITY, DEFAULT_PRIORITY, TOP_PRIORITY, 0, TOP_PRIORITY]


def test_a_complete_stripe() -> None:
    stripes = Stripes(pieces=4, run=1, stripes=2)
    have = [True, False, True, False]
    assert complete(stripes, have, 0) and not complete(stripes, have, 1)


def test_we_yield_a_stripe_to_a_peer_further_ahead_on_it_only() -> None:
    stripes = Stripes(pieces=6, run=1, stripes=2)  # stripe 0: pieces 0, 2, 4
    have = [True, False, False, False, False, False]
    ahead = [False, False, True, False, True, False]  # two stripe-0 pieces we lack
    level = [False, False, True, False, False, False]  # one, as many as ours
    assert yields(stripes, have, [(False, ahead)], 0)
    assert not yields(stripes, have, [(False, level)], 0)
    assert not yields(stripes, have, [(False, [False, True, False, True, False, True])], 0)  # other stripe
    assert yields(stripes, have, [(True, [])], 0)  # a seed


def test_the_watch_reports_stripes_that_stopped_growing_with_pieces_missing() -> None:
    stripes = Stripes(pieces=4, run=1, stripes=2)  # stripe 0: 0, 2; stripe 1: 1, 3
    watch = StripeWatch(stripes, now=0.0)
    watch.update([False] * 4, [(False, [True, False, False, False])], now=1.0)
    assert watch.stalled(now=1.5, after_s=1.0) == []  # stripe 0 grew at 1.0; stripe 1 empty
    assert watch.stalled(now=2.0, after_s=1.0) == [0]
    watch.update([False] * 4, [(False, [True, False, True, False])], now=2.5)
    assert watch.stalled(now=4.0, after_s=1.0) == []  # complete in sight: not stalled


def test_the_watch_measures_the_origins_pace_per_stripe() -> None:
    stripes = Stripes(pieces=6, run=1, stripes=2)  # stripe 0: 0, 2, 4; stripe 1: 1, 3, 5
    watch = StripeWatch(stripes, now=10.0)
    assert (watch.first_piece_s(), watch.piece_interval_s()) == (None, None)
    watch.update([False] * 6, [(False, [True, False, False, False, False, False])], now=12.0)
    assert (watch.first_piece_s(), watch.piece_interval_s()) == (2.0, None)
    watch.update([False] * 6, [(False, [True, True, False, False, False, False])], now=14.0)
    assert watch.first_piece_s() == 4.0  # the median (upper) of 2 s and 4 s
    watch.update([False] * 6, [(False, [True, True, True, False, False, False])], now=15.0)
    assert watch.piece_interval_s() == 3.0  # stripe 0: 12 -> 15
    watch.update([False] * 6, [(False, [True, True, True, True, False, False])], now=15.5)
    assert watch.piece_interval_s() == 3.0  # stripe 1: 14 -> 15.5; the upper median of 1.5, 3
    watch.update([False] * 6, [(False, [True, True, True, True, False, False])], now=30.0)
    assert watch.piece_interval_s() == 3.0  # no growth: nothing new measured
