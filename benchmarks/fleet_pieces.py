"""Piece-level model of one version's rollout, driving the real origin policy core.

Every agent is simulated: it detects the version at its next poll of ``latest.json``
(interval plus uniform jitter), announces to the tracker, which answers with up to
``peer_list`` agents already in the swarm (connections are two-way, and re-announces add
peers), and steps its own :class:`~bloomswarm.agent.origin_policy.OriginPolicy` every
tick with an :class:`Observation` built from the simulated state as ``agent/swarm.py``
builds it from libtorrent's: ``announced`` from the first tracker answer, ``known_peers``
the most peers one answer named, ``swarm_size`` the tracker's count of the swarm at the
agent's last announce (or the fleet's size, when it is known from the version the agent
seeds: ``fleet_known``), the connected peers' ids (each agent's rank is
:func:`~bloomswarm.agent.origin_policy.fleet_rank` of the version's info-hash and its
peer id, as in the agent). The :class:`Decision` is applied (web seed on or off, piece
priorities). Time advances in ticks of ``dt``:

- the origin's cap (``origin_bps``) is shared equally among the agents whose origin is
  on, at most ``origin_connection_bps`` each; each takes it first from its download
  budget (``origin_download_priority``); an agent on a stripe fetches only the stripe's
  pieces (``origin_stripe_fetch = "ranges"``, the agent's default: no priorities set),
  or with ``"web_seed"`` the top-priority pieces first, then any piece of priority > 0,
  rarest first; an agent on the origin for any piece fetches any, rarest first;
- each agent uploads at ``upload_bps``, split equally among up to ``unchoke_slots``
  interested neighbours, within each receiver's remaining ``download_bps``; a receiver
  finishes pieces it has started first, then picks the rarest (in the fleet) that the
  sender holds;
- a finished agent verifies the file (``hash_bps``) and swaps ``swap_s`` later.

Bytes are conserved (every byte received was sent by the origin or a peer, within the
caps); pieces are whole-piece units of exchange (blocks are not modelled). A delta is
simply a smaller file that the agents fetch the same way. Pure: no I/O, no clock; all
draws come from one seeded ``random.Random``.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

import numpy as np
from bitarray import bitarray
from numpy.typing import NDArray

from bloomswarm.agent.config import SwarmConfig
from bloomswarm.agent.origin_policy import Attach, Detach, Observation, OriginPolicy, Replace
from bloomswarm.agent.transfer import OriginURL

ORIGIN_URL = "https://origin.invalid/filter"


class _Link:
    """The :class:`~bloomswarm.agent.origin_policy.OriginLink` of a simulated agent: a URL
    that never expires, always ready."""

    def fetch(self) -> OriginURL | None:
        return OriginURL(ORIGIN_URL, None)

    def ready(self, url: str, now: float) -> bool:
        return True


@dataclass(frozen=True)
class Rollout:
    """One simulated version: the fleet, the file, the links and the agents' settings."""

    agents: int
    file_bytes: int
    piece_bytes: int
    upload_bps: float
    download_bps: float
    origin_bps: float
    origin_connection_bps: float = float("inf")
    """Throughput of one agent's connection to the origin (S3: about 100 MB/s)."""
    swarm: SwarmConfig = field(default_factory=SwarmConfig)
    poll_interval_s: float = 2.0
    poll_jitter_s: float = 0.5
    fetch_s: float = 0.3
    """From the poll that sees the version to the torrent added (manifest, signature,
    .torrent)."""
    connect_s: float = 0.5
    """From an announce to the connections being up."""
    peer_list: int = 50
    """Peers a tracker returns per announce (``numwant``)."""
    hash_bps: float = 1.0e9
    """SHA-256 of the whole file before the swap."""
    swap_s: float = 0.05
    fleet_known: bool = True
    """The agents seed an earlier version, whose tracker count tells the fleet's size (a
    rollout to a running fleet); False: a fresh fleet's first version (the swarm's size is
    what the tracker counted at each agent's announce)."""
    dt: float = 0.1
    seed: int = 0

    @property
    def pieces(self) -> int:
        return -(-self.file_bytes // self.piece_bytes)


@dataclass
class Outcome:
    """What one rollout did: per agent, and in total."""

    swap_s: list[float]
    """Per agent: seconds from the publish to its swap (inf: never, within the limit)."""
    origin_bytes: float
    peer_bytes: float
    received_bytes: list[float]
    """Per agent: payload bytes received (origin and peers)."""
    max_rate_bps: list[float]
    """Per agent: the highest download rate of any tick."""
    origin_requests: float
    """HTTP range requests to the origin (bytes / ``origin_request_bytes``, rounded up
    per agent and tick)."""
    announces: int
    polls: int
    max_on_origin: int
    """Most agents with the web seed on at once."""


class _Agent:
    def __init__(self, index: int, pieces: int) -> None:
        self.index = index
        self.detect_at = 0.0
        self.start_at = 0.0
        self.policy: OriginPolicy | None = None
        self.peer_id = f"-BS0000-{index:012d}".encode()
        self.swarm_count = 0
        """complete + incomplete in the tracker's last answer."""
        self.named = 0
        """The most peers one tracker answer named."""
        self.neighbours: set[int] = set()
        self.pending: list[tuple[float, int]] = []
        self.web_seed = False
        self.priorities: NDArray[np.int8] | None = None
        self.partial = np.zeros(pieces, dtype=np.float64)
        self.peer_bytes = 0.0
        self.origin_bytes = 0.0
        self.done_at: float | None = None
        self.max_rate = 0.0


def simulate(r: Rollout, *, limit_s: float = 3600.0) -> Outcome:
    """Run ``r`` until every agent swapped (or ``limit_s``)."""
    rng = random.Random(r.seed)
    n, p, size = r.agents, r.pieces, float(r.piece_bytes)
    sizes = np.full(p, size)
    sizes[-1] = r.file_bytes - size * (p - 1)
    have = np.zeros((n, p), dtype=np.uint8)
    availability = np.zeros(p, dtype=np.float64)
    noise = np.array([[rng.random() * 0.5 for _ in range(p)] for _ in range(n)])
    agents = [_Agent(i, p) for i in range(n)]
    polls = 0
    for agent in agents:
        phase = rng.random() * r.poll_interval_s
        agent.detect_at = phase
        polls += 1
        agent.start_at = agent.detect_at + rng.random() * r.poll_jitter_s + r.fetch_s
    in_swarm: list[int] = []
    announces = 0
    origin_total = peer_total = 0.0
    requests = 0.0
    max_on = 0
    link = _Link()
    info_hash = hashlib.sha1(f"version-{r.seed}".encode()).digest()
    t = 0.0
    swapped = [float("inf")] * n

    def announce(agent: _Agent, now: float) -> None:
        nonlocal announces
        announces += 1
        agent.swarm_count = len(in_swarm) + (agent.index not in in_swarm)
        agent.named = max(agent.named, min(r.peer_list, len(in_swarm) - (agent.index in in_swarm)))
        others = [j for j in in_swarm if j != agent.index and j not in agent.neighbours]
        for j in rng.sample(others, min(len(others), r.peer_list)):
            agent.pending.append((now + r.connect_s, j))

    def fill(d: int, candidates: NDArray[np.uint8], budget: float) -> float:
        """Give agent ``d`` up to ``budget`` bytes of the pieces flagged in ``candidates``;
        the bytes given."""
        agent = agents[d]
        given = 0.0
        cand = candidates.astype(bool)
        while budget - given > 1e-9 and cand.any():
            started = cand & (agent.partial > 0)
            pool = np.flatnonzero(started if started.any() else cand)
            piece = int(pool[np.argmin(availability[pool] + noise[d, pool])])
            take = min(budget - given, sizes[piece] - agent.partial[piece])
            agent.partial[piece] += take
            given += take
            if agent.partial[piece] >= sizes[piece] - 1e-6:
                have[d, piece] = 1
                availability[piece] += 1
                agent.partial[piece] = 0.0
                cand[piece] = False
        return given

    by_ranges = r.swarm.origin_stripe_fetch == "ranges" and r.swarm.origin_stripes > 1
    # A running fleet's size, known from the version seeded (Swarm._fleet_size); the
    # policy deals one stripe per agent up to ``origin_stripes_per_agent_up_to`` agents.
    fleet_size = r.agents if r.fleet_known else 0
    while t < limit_s and any(s == float("inf") for s in swapped):
        t = round(t + r.dt, 9)
        # Joins and connections.
        for agent in agents:
            if agent.policy is None and agent.start_at <= t:
                agent.policy = OriginPolicy(r.swarm, pieces=p, piece_length=r.piece_bytes,
                                            origin=True, now=t, rng=rng,
                                            identity=(info_hash, agent.peer_id),
                                            fleet_size=fleet_size)
                announce(agent, t)
                in_swarm.append(agent.index)
            still = []
            for at, j in agent.pending:
                if at <= t:
                    agent.neighbours.add(j)
                    agents[j].neighbours.add(agent.index)
                else:
                    still.append((at, j))
            agent.pending = still
        # Policy steps.
        bits = []
        for i in range(n):
            b = bitarray()
            b.pack(have[i].tobytes())
            bits.append(b)
        for agent in agents:
            policy = agent.policy
            if policy is None or (agent.done_at is not None and not agent.web_seed):
                continue
            i = agent.index
            connected = sorted(agent.neighbours)
            peers = [(bool(have[j].all()), bits[j]) for j in connected]
            obs = Observation(now=t, wall=t, peer_bytes=int(agent.peer_bytes), have=bits[i],
                              peers=peers, finished=agent.done_at is not None,
                              announced=True, known_peers=agent.named,
                              swarm_size=max(n if r.fleet_known else 0, agent.swarm_count, agent.named),
                              peer_ids=[agents[j].peer_id for j in connected],
                              fleet_known=r.fleet_known)
            decision = policy.step(obs, link)
            if decision.reannounce:
                announce(agent, t)
            if decision.priorities is not None and not by_ranges:  # as the shell: none by ranges
                agent.priorities = np.array(decision.priorities, dtype=np.int8)
                if (agent.priorities == 4).all():
                    agent.priorities = None
            change = decision.web_seed
            if isinstance(change, Attach):
                agent.web_seed = True
            elif isinstance(change, Detach):
                agent.web_seed = False
            elif isinstance(change, Replace):
                pass
        # Budgets.
        budget = np.zeros(n)
        for agent in agents:
            if agent.policy is not None and agent.done_at is None:
                budget[agent.index] = r.download_bps * r.dt
        received = np.zeros(n)
        # The origin.
        on = [a for a in agents if a.web_seed and a.done_at is None]
        max_on = max(max_on, len(on))
        if on:
            share = min(r.origin_bps / len(on), r.origin_connection_bps) * r.dt
            for agent in on:
                i = agent.index
                missing = 1 - have[i]
                prio = agent.priorities
                assert agent.policy is not None  # the origin goes on by its decision
                stripes, stripe = agent.policy.stripes, agent.policy.stripe
                if by_ranges and stripes is not None and stripe is not None:
                    top = missing & np.frombuffer(stripes.mask(stripe).unpack(), dtype=np.uint8)
                    rest = np.zeros_like(missing)
                elif prio is not None:
                    top = missing & (prio == prio.max()).astype(np.uint8)
                    rest = missing & (prio > 0).astype(np.uint8)
                else:
                    top, rest = missing, missing
                got = fill(i, top, min(share, budget[i]))
                got += fill(i, rest, min(share, budget[i]) - got)
                if got > 0:
                    requests += -(-got // r.swarm.origin_request_bytes)
                budget[i] -= got
                received[i] += got
                agent.origin_bytes += got
                origin_total += got
        # Peers.
        order = list(range(n))
        rng.shuffle(order)
        for u in order:
            sender = agents[u]
            if not sender.neighbours or not have[u].any():
                continue
            ds = [d for d in sender.neighbours if agents[d].done_at is None and budget[d] > 0]
            if not ds:
                continue
            rows = have[u][None, :] & (1 - have[ds])
            wanted = []
            for k, d in enumerate(ds):
                prio = agents[d].priorities
                row = rows[k] if prio is None else rows[k] & (prio > 0).astype(np.uint8)
                if row.any():
                    wanted.append((d, row))
            slots = r.swarm.unchoke_slots
            if slots > 0 and len(wanted) > slots:
                wanted = rng.sample(wanted, slots)
            if not wanted:
                continue
            share = r.upload_bps * r.dt / len(wanted)
            for d, row in wanted:
                got = fill(d, row, min(share, budget[d]))
                budget[d] -= got
                received[d] += got
                agents[d].peer_bytes += got
                peer_total += got
        # Completions.
        for agent in agents:
            i = agent.index
            agent.max_rate = max(agent.max_rate, received[i] / r.dt)
            if agent.done_at is None and agent.policy is not None and have[i].all():
                agent.done_at = t
                swapped[i] = t + r.file_bytes / r.hash_bps + r.swap_s
    polls += int(sum(min(s, t) for s in swapped) / (r.poll_interval_s + r.poll_jitter_s / 2))
    return Outcome(
        swap_s=swapped,
        origin_bytes=origin_total,
        peer_bytes=peer_total,
        received_bytes=[a.origin_bytes + a.peer_bytes for a in agents],
        max_rate_bps=[a.max_rate for a in agents],
        origin_requests=requests,
        announces=announces,
        polls=polls,
        max_on_origin=max_on,
    )
