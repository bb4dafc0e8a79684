"""Properties of the fleet models' pure parts (benchmarks/fleet_pieces.py, fleet_flow.py):
bytes are conserved, no agent downloads faster than its cap, every agent converges, and
more capacity never makes a rollout slower."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.fleet_flow import Fleet
from benchmarks.fleet_flow import simulate as simulate_flow
from benchmarks.fleet_pieces import Rollout, simulate
from bloomswarm.agent.config import SwarmConfig

KIB = 1024
MIB = 1024 * KIB
FAST = SwarmConfig(origin_grace_s=0.5, origin_stagger_s=0.5, origin_starved_s=0.5,
                   origin_request_bytes=64 * KIB)


ROLLOUTS = st.builds(
    Rollout,
    agents=st.integers(1, 6),
    file_bytes=st.integers(4, 24).map(lambda pieces: pieces * 64 * KIB - 100),
    piece_bytes=st.just(64 * KIB),
    upload_bps=st.sampled_from([1 * MIB, 2 * MIB, 4 * MIB]),
    download_bps=st.sampled_from([1 * MIB, 2 * MIB, 4 * MIB]),
    origin_bps=st.sampled_from([1 * MIB, 4 * MIB]),
    swarm=st.sampled_from([FAST, SwarmConfig(origin_policy="always", origin_request_bytes=64 * KIB)]),
    poll_interval_s=st.just(0.5),
    seed=st.integers(0, 1000),
)


@settings(max_examples=15, deadline=None)
@given(r=ROLLOUTS)
def test_pieces_conserve_bytes_and_respect_caps(r: Rollout) -> None:
    out = simulate(r, limit_s=600)
    assert all(np.isfinite(out.swap_s)), "every agent converges"
    assert abs(sum(out.received_bytes) - out.origin_bytes - out.peer_bytes) < 1e-3
    for got in out.received_bytes:  # each agent received the file, at least once
        assert got >= r.file_bytes - 1e-3
    assert max(out.max_rate_bps) <= r.download_bps * (1 + 1e-9)
    assert out.origin_bytes >= r.file_bytes - 1e-3, "every byte left the origin at least once"


def test_pieces_more_capacity_is_not_slower() -> None:
    def last(caps: float) -> float:
        r = Rollout(agents=8, file_bytes=8 * MIB, piece_bytes=256 * KIB, upload_bps=caps,
                    download_bps=caps, origin_bps=caps, swarm=FAST, poll_interval_s=0.5, seed=3)
        return max(simulate(r).swap_s)

    times = [last(c * MIB) for c in (1, 2, 4)]
    assert times[0] >= times[1] >= times[2], times


def test_flow_converges_and_more_capacity_is_not_slower() -> None:
    def run(link: float) -> float:
        fleet = Fleet(agents=500, file_bytes=256 * MIB, piece_bytes=4 * MIB, agent_bps=link,
                      origin_bps=1e9, sample=40, model_pieces=64, seed=1)
        out = simulate_flow(fleet)
        assert np.isfinite(out.swap_s).all()
        assert out.origin_bytes >= 256 * MIB * 0.99
        return float(out.swap_s.max())

    slow, fast = run(50e6), run(200e6)
    assert fast <= slow
