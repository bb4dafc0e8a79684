"""Publisher key rotation and recovery from a compromised key, end to end through an agent.

The procedure these tests follow is the one docs/security.md gives: ship the new public key
to the fleet next to the old one, switch the publisher to the new key and publish, then
remove the old key from the fleet. A pointer or manifest signed by the removed key is then
refused. A compromised key may have pushed the pointer sequence far ahead; agents that
accepted that pointer refuse the legitimate ones as replays until their state.json (the
replay guard) is removed, which the last test shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from bloomswarm.agent.daemon import AgentDaemon
from bloomswarm.agent.memory_transfer import MemoryOrigin
from bloomswarm.common.bucket_layout import LATEST_KEY, manifest_key
from bloomswarm.common.datadir import DataDir
from bloomswarm.common.pointer import Pointer, seal_pointer
from bloomswarm.common.signing import SigningKey
from bloomswarm.common.storage import MemoryObjectStore
from tests.unit import agent_helpers
from tests.unit.agent_helpers import (
    KEY,
    agent_config,
    installed,
    make_daemon,
    metric,
    point_latest,
    publish,
    run_until,
)
from tests.unit.publishing_helpers import new_key

store, origin, daemons = agent_helpers.store, agent_helpers.origin, agent_helpers.daemons  # fixtures
offline = agent_helpers.offline
pytestmark = pytest.mark.usefixtures("offline")  # no sockets, no sleeps
OLD = KEY
NEW = new_key()


def _agent(tmp_path: Path, origin: MemoryOrigin, daemons: list[AgentDaemon],
           trusted: Sequence[SigningKey]) -> AgentDaemon:
    """An agent (re)started on ``tmp_path`` that pins the public keys of ``trusted``."""
    for daemon in daemons:
        daemon.shutdown()
    daemons.clear()
    daemon = make_daemon(agent_config(tmp_path), origin, [k.public_key() for k in trusted])
    daemons.append(daemon)
    return daemon


def test_rotation_then_the_old_key_is_refused(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    publish(store, ["a"], key=OLD)
    agent = _agent(tmp_path, origin, daemons, [OLD])
    run_until(agent, lambda: installed(agent, 1))

    agent = _agent(tmp_path, origin, daemons, [OLD, NEW])  # step 1: ship the new public key
    publish(store, ["a", "b"], key=NEW)  # step 2: the publisher signs with the new key
    run_until(agent, lambda: installed(agent, 2))

    agent = _agent(tmp_path, origin, daemons, [NEW])  # step 3: the old key is withdrawn
    publish(store, ["a", "b", "evil"], key=OLD)  # whoever still holds it publishes v3
    run_until(agent, lambda: metric(agent, "verification_failures_total", check="pointer_signature") >= 1)
    point_latest(store, 3, key=NEW)  # a genuine pointer to v3, whose manifest the old key signed
    run_until(agent, lambda: metric(agent, "verification_failures_total", check="manifest_signature") >= 1)
    assert installed(agent, 2)


def test_a_sequence_pushed_ahead_by_a_compromised_key_is_cleared_with_state_json(
    tmp_path: Path, store: MemoryObjectStore, origin: MemoryOrigin, daemons: list[AgentDaemon]
) -> None:
    publish(store, ["a"], key=OLD)
    agent = _agent(tmp_path, origin, daemons, [OLD, NEW])
    run_until(agent, lambda: installed(agent, 1))
    hostile = Pointer(version=1, manifest_key=manifest_key(1), sequence=2**62, issued_at=0,
                      publisher_id="attacker")
    store.put(LATEST_KEY, seal_pointer(hostile, OLD))  # signed by the (stolen) old key
    run_until(agent, lambda: agent.status()["last_sequence"] == 2**62)

    agent = _agent(tmp_path, origin, daemons, [NEW])  # the old key is withdrawn
    publish(store, ["a", "b"], key=NEW)  # the publisher continues the sequence after 2**62
    run_until(agent, lambda: installed(agent, 2))  # so the fleet follows
    store.put(LATEST_KEY, seal_pointer(
        Pointer(version=2, manifest_key=manifest_key(2), sequence=5, issued_at=0, publisher_id="reset"), NEW))
    # A sequence reset below what the agents accepted is a replay to them:
    run_until(agent, lambda: metric(agent, "refusals_total", reason="replay") >= 1)

    agent.shutdown()
    DataDir(agent.data_dir).state_file.unlink()  # the documented recovery on each agent
    agent = _agent(tmp_path, origin, daemons, [NEW])
    run_until(agent, lambda: agent.status()["last_sequence"] == 5)
    assert installed(agent, 2)
