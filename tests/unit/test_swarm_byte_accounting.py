"""Byte accounting: the origin/peer split of a download's payload, from libtorrent's
per-connection counters and its exact total (no libtorrent here)."""

from __future__ import annotations

from bloomswarm.agent.byte_accounting import ByteAccounting


def test_live_connections_are_counted_by_their_growth() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("o",), True, 100, 10), (("p",), False, 50, 5)])
    acc.update(150, [(("o",), True, 300, 10), (("p",), False, 60, 5)])
    assert (acc.origin, acc.peers) == (300, 60)


def test_a_closed_connection_tail_is_recovered_from_the_total() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("o",), True, 100, 10), (("p",), False, 100, 10)])
    # The web seed closed after receiving 40 more bytes; only the total knows.
    acc.update(240, [(("p",), False, 100, 10)])
    assert (acc.origin, acc.peers) == (140, 100)


def test_unexplained_bytes_are_split_by_last_rates() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("o",), True, 0, 300), (("p",), False, 0, 100)])
    acc.update(400, [])
    assert (acc.origin, acc.peers) == (300, 100)


def test_a_reused_key_is_a_new_connection() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("p",), False, 500, 1)])
    acc.update(500, [(("p",), False, 20, 1)])  # counter went back: reconnected
    assert acc.peers == 520


def test_a_lagging_total_is_given_to_the_last_closed_connections_when_it_catches_up() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("o",), True, 100, 1), (("p",), False, 100, 1)])
    acc.update(150, [(("p",), False, 100, 1)])  # the web seed closed; the total lags
    assert (acc.origin, acc.peers) == (100, 100)
    acc.update(260, [(("p",), False, 100, 1)])  # it catches up: the web seed's tail
    assert (acc.origin, acc.peers) == (160, 100)


def test_a_total_that_lags_the_counters_takes_nothing_back() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("o",), True, 1000, 1)])
    acc.update(10, [])  # libtorrent's total lags; never negative attribution
    assert (acc.origin, acc.peers) == (1000, 0)


def test_a_web_seed_connection_unseen_between_snapshots_is_the_origins() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("p",), False, 0, 1)], origin_attached=True)
    # The web seed connected, sent the whole file and closed between two snapshots.
    acc.update(5000, [(("p",), False, 0, 1)], origin_attached=True)
    assert (acc.origin, acc.peers) == (5000, 0)


def test_unexplained_bytes_without_the_origin_attached_are_not_the_origins() -> None:
    acc = ByteAccounting()
    acc.update(0, [(("p",), False, 0, 1)])
    acc.update(300, [])  # the peer closed after 300 more bytes
    assert (acc.origin, acc.peers) == (0, 300)


def test_a_peer_connection_unseen_between_snapshots_is_the_peers() -> None:
    acc = ByteAccounting()
    acc.update(0, [])
    # A peer connected, sent the whole file and closed between two snapshots (both seeds).
    acc.update(4096, [])
    assert (acc.origin, acc.peers) == (0, 4096)


def test_unseen_bytes_just_after_the_origin_was_removed_are_the_origins() -> None:
    acc = ByteAccounting()
    acc.update(0, [], origin_attached=True)
    acc.update(100, [])  # the origin was removed since: what arrived was still its tail
    assert (acc.origin, acc.peers) == (100, 0)
    acc.update(150, [])  # attached at neither snapshot: a peer came and went
    assert (acc.origin, acc.peers) == (100, 50)
