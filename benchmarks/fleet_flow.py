"""Flow-level model of one version's rollout to 1k-100k agents, with a sample of agents
driven through the real origin policy core.

Piece-level simulation (:mod:`benchmarks.fleet_pieces`) costs O(agents × neighbours) per
tick; beyond a few hundred agents this model is used instead:

- **Detection.** Every agent polls ``latest.json`` every ``poll_interval_s`` plus a
  uniform jitter; its phase is uniform, so it sees the version uniformly within one
  interval (plus ``cdn_ttl_s`` when a CDN caches the pointer), then needs ``fetch_s``.
- **The fleet as a fluid.** Each agent's progress ``x`` (bytes) grows at most at its
  download cap, never past the bytes that exist in the swarm (``G``: pieces the origin
  sent at least once) as they were ``lag`` ago (a new piece needs about
  ``log_K(N)`` hops of one piece time each to cross a random peer graph of degree K),
  and the fleet's total growth is at most the total upload of agents holding data.
- **The origin, through the real core.** ``sample`` agents (all of them when the fleet
  is smaller) each step their own :class:`OriginPolicy` every tick. Their
  :class:`Observation`: their own pieces, and ``peer_list`` (at most 50) connected peers
  whose bitfields are drawn from the fleet's state (a peer with progress ``x`` holds a
  random ``x / piece`` of the pieces in ``G``); a finished peer is a seed. As the agent
  fills it from libtorrent: ``announced`` from the join, ``known_peers`` the peers the
  tracker named, ``swarm_size`` the fleet's size (``fleet_known``: a rollout to a running
  fleet, whose tracker counts of the version it seeds tell it) or the agents the tracker
  had counted at its last announce (a fresh fleet). Peer ids are not given: the core's
  position is then ``rank × (swarm_size − 1)``, the expectation of the agent's count. When a
  sampled agent's web seed is on it receives, within its download cap, its share of the
  origin's cap among every agent on the origin (the sampled agents' weights),
  top-priority pieces first; its bytes, weighted, are the origin's egress, and the
  pieces it fetched join ``G``. The sample is stratified: the agents with the fleet's
  earliest turns at the origin (ranks ``(j + 1/2) / N``, up to 100 of them) stand for
  themselves, the rest of the sample for the other agents, ``(N - front) / (sample -
  front)`` each; without the front, the fleet's first turns would come only as early as
  the sample's, and every sampled agent on the origin would count as N / sample.

What this leaves out (docs/fleet-scale.md, "Limits"): the graph is not simulated (peer
bitfields are redrawn every tick, so a stripe's growth is judged on fresh draws), blocks,
choking, TCP dynamics, CPU and disk; the fleet's piece choice is random, not rarest
first. Pure: no I/O, no clock, one seeded ``random.Random`` and numpy ``Generator``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
from bitarray import bitarray
from numpy.typing import NDArray

from bloomswarm.agent.config import SwarmConfig
from bloomswarm.agent.origin_policy import Attach, Detach, Observation, OriginPolicy
from bloomswarm.agent.transfer import OriginURL

_T = TypeVar("_T")
ORIGIN_URL = "https://origin.invalid/filter"
VIEW_PEERS = 50
"""At most this many connected peers are drawn for a sampled agent's observation."""


class _Ranked:
    """The draws of a sampled agent whose first draw (its rank among the fleet's turns)
    is given: the stratified sample's front."""

    def __init__(self, rank: float, rng: random.Random) -> None:
        self._rank: float | None = rank
        self._rng = rng

    def random(self) -> float:
        if self._rank is not None:
            rank, self._rank = self._rank, None
            return rank
        return self._rng.random()

    def choice(self, seq: Sequence[_T]) -> _T:
        return self._rng.choice(seq)


class _Link:
    def fetch(self) -> OriginURL | None:
        return OriginURL(ORIGIN_URL, None)

    def ready(self, url: str, now: float) -> bool:
        return True


@dataclass(frozen=True)
class Fleet:
    """One version to one fleet, at flow level."""

    agents: int
    file_bytes: int
    piece_bytes: int
    agent_bps: float
    """Each agent's upload and download cap (a symmetric link)."""
    origin_bps: float
    origin_connection_bps: float = 100e6
    """Throughput of one HTTP connection to the origin (S3: about 100 MB/s)."""
    origin_rps: float = 5500.0
    """The store's GET rate limit (per prefix)."""
    swarm: SwarmConfig = field(default_factory=SwarmConfig)
    poll_interval_s: float = 2.0
    poll_jitter_s: float = 0.5
    cdn_ttl_s: float = 0.0
    fetch_s: float = 0.3
    peer_list: int = 50
    announce_interval_s: float = 1800.0
    fleet_known: bool = True
    """The agents seed an earlier version (a running fleet): ``swarm_size`` is the fleet's
    size. False: a fresh fleet's first version (the tracker's count at each announce)."""
    hash_bps: float = 1.0e9
    swap_s: float = 0.05
    efficiency: float = 1.0
    """Share of a link's cap that carries payload (protocol, TCP, scheduling)."""
    sample: int = 400
    dt: float = 0.25
    model_pieces: int = 512
    """Pieces in the model (the file is cut into at most this many, whatever its real
    piece size; the piece time for the pipeline uses ``piece_bytes``)."""
    seed: int = 0


@dataclass
class FleetOutcome:
    swap_s: NDArray[np.float64]
    origin_bytes: float
    origin_requests: float
    peak_origin_rps: float
    peak_on_origin: float
    """Most agents with the web seed on at once (the sampled agents' weights)."""
    announces: float
    """Tracker announces during the rollout (first announces, re-announces, intervals)."""
    peak_announce_rps: float
    polls_per_s: float
    """latest.json GETs per second at the store, steady state (without a CDN)."""
    origin_poll_rps: float
    """latest.json requests per second that reach the store (with the CDN, when any)."""


def simulate(f: Fleet, *, cdn_edges: int = 0, limit_s: float = 7200.0) -> FleetOutcome:
    """Run ``f``; ``cdn_edges`` > 0: a CDN with request collapsing in front of the pointer."""
    rng = random.Random(f.seed)
    gen = np.random.default_rng(f.seed)
    n = f.agents
    p = max(1, min(f.model_pieces, -(-f.file_bytes // f.piece_bytes)))
    unit = f.file_bytes / p
    rate = f.agent_bps * f.efficiency
    period = f.poll_interval_s + f.poll_jitter_s / 2
    start = gen.uniform(0, period, n) + gen.uniform(0, f.cdn_ttl_s, n) + f.fetch_s
    x = np.zeros(n)
    done = np.full(n, np.inf)
    k = max(2, min(f.peer_list, n - 1))
    hops = max(1.0, math.log(max(n, 2)) / math.log(k))
    lag = hops * f.piece_bytes / rate
    sample = np.sort(gen.choice(n, size=min(f.sample, n), replace=False))
    # Stratified: the `front` agents with the fleet's earliest turns (ranks (j + 1/2) / N)
    # stand for themselves; the others for (N - front) / (sample - front) agents each.
    front = min(len(sample) // 2, 100) if n > len(sample) else 0
    bulk = (n - front) / max(1, len(sample) - front)
    weight = {int(i): 1.0 if k < front else bulk for k, i in enumerate(sample)}
    draws = {int(i): _Ranked((k + 0.5) / n, rng) if k < front else rng for k, i in enumerate(sample)}
    link = _Link()
    policies: dict[int, OriginPolicy] = {}
    have = {int(i): bitarray(p) for i in sample}
    for bits in have.values():
        bits.setall(False)
    on: dict[int, bool] = {int(i): False for i in sample}
    prio: dict[int, NDArray[np.int8] | None] = {int(i): None for i in sample}
    peer_bytes = {int(i): 0.0 for i in sample}
    partial = {int(i): 0.0 for i in sample}
    peer_partial = {int(i): 0.0 for i in sample}
    counted = {int(i): 0 for i in sample}
    """complete + incomplete in the tracker's last answer to the sampled agent."""
    named = {int(i): 0 for i in sample}
    """The most peers one tracker answer named to it."""
    per_tick_origin = 0.0
    """Origin bytes of a piece not yet complete, per sampled agent."""
    exists = np.zeros(p, dtype=bool)
    exists_log: list[tuple[float, int]] = [(0.0, 0)]
    origin_bytes = requests = peak_rps = peak_on = 0.0
    announces = float(n)  # one each at the start
    reannounces_peak = 0.0
    t = 0.0
    while t < limit_s and not np.isfinite(done).all():
        t += f.dt
        joined = start <= t
        # Bytes in the swarm, as they were `lag` ago.
        while len(exists_log) > 1 and exists_log[1][0] <= t - lag:
            exists_log.pop(0)
        ready = exists_log[0][1]
        cap_bytes = ready * unit
        # The sampled agents' origin policies.
        held = np.flatnonzero(exists)
        pool: list[tuple[bool, bitarray]] = []
        live = np.flatnonzero(joined)
        if len(live):
            for j in gen.choice(live, size=min(64, len(live)), replace=True):
                seed = bool(x[j] >= f.file_bytes)
                row = np.full(p, 1 if seed else 0, dtype=np.uint8)
                count = min(len(held), int(x[j] / unit))
                if not seed and count:
                    row[gen.choice(held, size=count, replace=False)] = 1
                bits = bitarray()
                bits.pack(row.tobytes())
                pool.append((seed, bits))
        attached = [i for i in have if on[i] and done[i] == np.inf]
        on_fleet = sum(weight[i] for i in attached)
        peak_on = max(peak_on, on_fleet)
        rebroadcast = 0.0
        for i, mine in have.items():
            if not joined[i] or (done[i] < np.inf and not on[i]):
                continue
            policy = policies.get(i)
            if policy is None:
                policy = OriginPolicy(f.swarm, pieces=p, piece_length=int(unit), origin=True,
                                      now=t, rng=draws[i], fleet_size=n if f.fleet_known else 0)
                policies[i] = policy
                counted[i] = int(np.count_nonzero(joined))
                named[i] = min(f.peer_list, counted[i] - 1)
            view = rng.sample(pool, min(len(pool), VIEW_PEERS, k, max(named[i], 1))) if pool else []
            obs = Observation(now=t, wall=t, peer_bytes=int(peer_bytes[i]), have=mine,
                              peers=view, finished=bool(done[i] < np.inf),
                              announced=True, known_peers=named[i],
                              swarm_size=max(n if f.fleet_known else 0, counted[i], named[i]),
                              fleet_known=f.fleet_known)
            decision = policy.step(obs, link)
            if decision.reannounce:
                counted[i] = int(np.count_nonzero(joined))
                named[i] = max(named[i], min(f.peer_list, counted[i] - 1))
            rebroadcast += weight[i] * decision.reannounce
            if decision.priorities is not None:
                chosen = np.array(decision.priorities, dtype=np.int8)
                prio[i] = None if (chosen == 4).all() else chosen
            if isinstance(decision.web_seed, Attach):
                on[i] = True
            elif isinstance(decision.web_seed, Detach):
                on[i] = False
        announces += rebroadcast
        reannounces_peak = max(reannounces_peak, rebroadcast / f.dt)
        # The origin: sampled agents on it, weighted.
        attached = [i for i in have if on[i] and done[i] == np.inf]
        if attached:
            per_agent = min(rate, f.origin_connection_bps,
                            f.origin_bps / max(1.0, sum(weight[i] for i in attached))) * f.dt
            per_tick_origin = per_agent
            tick_bytes = 0.0
            for i in attached:
                bits = have[i]
                missing = ~np.frombuffer(bits.unpack(), dtype=np.uint8).astype(bool)
                levels = prio[i]
                if levels is not None:
                    first = missing & (levels == levels.max())
                    rest = missing & (levels > 0) & ~first
                    order = list(np.flatnonzero(first)) + list(np.flatnonzero(rest))
                else:
                    order = list(np.flatnonzero(missing & ~exists)) + list(np.flatnonzero(missing & exists))
                if not order:
                    continue
                budget = partial[i] + per_agent
                taken = 0
                for piece in order:
                    if budget < unit:
                        break
                    bits[int(piece)] = True
                    exists[int(piece)] = True
                    budget -= unit
                    taken += 1
                sent = per_agent
                if taken == len(order):  # nothing left to fetch: only the bytes of its pieces
                    sent, budget = max(0.0, taken * unit - partial[i]), 0.0
                partial[i] = budget
                x[i] = min(float(f.file_bytes), max(x[i], bits.count() * unit))
                tick_bytes += sent * weight[i]
            origin_bytes += tick_bytes
            tick_requests = tick_bytes / f.swarm.origin_request_bytes
            requests += tick_requests
            peak_rps = max(peak_rps, tick_requests / f.dt)
        exists_log.append((t, int(exists.sum())))
        # The fleet's fluid: everyone joined and not done grows toward the ready bytes.
        active = joined & (x < f.file_bytes)
        want = np.clip(np.minimum(cap_bytes, float(f.file_bytes)) - x, 0.0, rate * f.dt) * active
        lacking: dict[int, NDArray[np.intp]] = {}
        for i, bits in have.items():  # a sampled agent wants the existing pieces it lacks
            owned = np.frombuffer(bits.unpack(), dtype=np.uint8).astype(bool)
            lacking[i] = np.flatnonzero(exists & ~owned)
            room = rate * f.dt - (per_tick_origin if on[i] else 0.0)
            want[i] = min(max(room, 0.0), len(lacking[i]) * unit) if active[i] else 0.0
        senders = float(np.count_nonzero(joined & (x > 0)))
        supply = senders * rate * f.dt
        total = float(want.sum())
        if total > 0:
            want *= min(1.0, supply / total)
        x += want
        for i, bits in have.items():  # the sampled agents' pieces follow their bytes
            if want[i] > 0:
                peer_bytes[i] += float(want[i])
                peer_partial[i] += float(want[i])
                gain = min(int(peer_partial[i] / unit), len(lacking[i]))
                peer_partial[i] -= gain * unit
                for piece in gen.choice(lacking[i], size=gain, replace=False):
                    bits[int(piece)] = True
            x[i] = bits.count() * unit if bits.count() < p else float(f.file_bytes)
        finished = (x >= f.file_bytes - 1e-6) & ~np.isfinite(done)
        done[finished] = t + f.file_bytes / f.hash_bps + f.swap_s
    polls = n / period
    store_polls = polls if cdn_edges <= 0 else cdn_edges / max(f.cdn_ttl_s, 1e-9)
    announces += (t / f.announce_interval_s) * n
    return FleetOutcome(
        swap_s=done, origin_bytes=origin_bytes, origin_requests=requests, peak_origin_rps=peak_rps,
        peak_on_origin=peak_on, announces=announces,
        peak_announce_rps=max(reannounces_peak, n / period),
        polls_per_s=polls, origin_poll_rps=store_polls,
    )
