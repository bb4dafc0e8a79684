"""One agent, many filters, over the in-memory store and transfer: one index poll feeds
every filter's daemon, each filter installs into its own data directory, a change of one
filter leaves the others alone, reloads add and drop filters, and bad index input is
refused or reported without disturbing the filters that work."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.exposition import generate_latest

from bloomswarm.agent.config import AgentConfig
from bloomswarm.agent.daemon import MIN_TICK_S, OBSERVE_S, TICK_S, AgentDaemon
from bloomswarm.agent.filter_config import FilterConfig
from bloomswarm.agent.filter_index_source import IndexPoller, filter_announcements
from bloomswarm.agent.filter_set import OBSERVES_PER_S, FilterSet, min_tick, observe_interval
from bloomswarm.agent.memory_transfer import MemoryOrigin, MemoryTransfer
from bloomswarm.agent.metrics import AgentMetrics
from bloomswarm.agent.origin import Origin
from bloomswarm.agent.scoped_transfer import ScopedTransfer
from bloomswarm.agent.transfer import OriginURLFactory
from bloomswarm.agent_filters import all_public_keys, format_filters_status
from bloomswarm.common.bucket_layout import INDEX_KEY
from bloomswarm.common.datadir import DataDir, filter_data_dir
from bloomswarm.common.errors import ConfigError
from bloomswarm.common.filter_index import read_index_unverified
from bloomswarm.common.filter_names import filter_prefix
from bloomswarm.common.prefixed_store import PrefixedStore
from bloomswarm.common.signed_envelope import seal_envelope
from bloomswarm.common.signing import load_public_keys
from bloomswarm.common.storage import MemoryObjectStore, StoredObject
from bloomswarm.publisher.filter_index import sync_index
from bloomswarm.publisher.pinning import pin

from . import agent_helpers
from .agent_helpers import KEY, PUBLIC, ROGUE_KEY, ROGUE_PEM, TickingClock, agent_config, publish

pytestmark = pytest.mark.usefixtures("offline")
offline = agent_helpers.offline


class PrefixedOrigin:
    """The root origin's URLs of a filter's keys (the shared transfer reads the root)."""

    def __init__(self, origin: MemoryOrigin, prefix: str) -> None:
        self.origin = origin
        self.prefix = prefix

    def url_factory(self, key: str) -> OriginURLFactory:
        return self.origin.url_factory(f"{self.prefix}/{key}")


class CountingReader:
    """A document reader counting GETs by key."""

    def __init__(self, store: MemoryObjectStore) -> None:
        self.store = store
        self.gets: Counter[str] = Counter()

    def get(self, key: str, *, if_none_match: str | None = None) -> StoredObject | None:
        self.gets[key] += 1
        return self.store.get(key, if_none_match=if_none_match)


def publish_filter(store: MemoryObjectStore, name: str, keys: list[str]) -> int:
    """Publish the next version of filter ``name`` and bring the index up to date."""
    manifest = publish(PrefixedStore(store, filter_prefix(name)), keys)  # type: ignore[arg-type]
    sync_index(store, [name], KEY, "unit-test", sleep=lambda _s: None)
    return manifest.version


class Fleet:
    """A FilterSet over ``store``, its index reads counted, stepped by hand."""

    def __init__(self, tmp_path: Path, store: MemoryObjectStore, names: Sequence[str | FilterConfig],
                 **changes: Any) -> None:
        self.store = store
        self.origin = MemoryOrigin(store)
        self.shared = MemoryTransfer(self.origin)
        self.index_reader = CountingReader(store)
        self.readers: dict[str, CountingReader] = {}
        self.config = self.configure(tmp_path, names, **changes)
        self.poller = IndexPoller(self.index_reader, all_public_keys(self.config))
        self.agent = FilterSet(self.config, self.shared, self.poller, self.make_daemon, clock=TickingClock(),
                               index_keys=all_public_keys)
        self.agent.start()

    @staticmethod
    def configure(tmp_path: Path, names: Sequence[str | FilterConfig], **changes: Any) -> AgentConfig:
        """The configuration of the filters named (a name, or a whole FilterConfig)."""
        filters = tuple(n if isinstance(n, FilterConfig) else FilterConfig(n) for n in names)
        return agent_config(tmp_path, filters=filters, **changes)

    def make_daemon(self, entry: FilterConfig, per_filter: AgentConfig) -> AgentDaemon:
        reader = self.readers[entry.name] = CountingReader(self.store)
        folder = PrefixedStore(reader, entry.store_prefix)  # type: ignore[arg-type]
        origin: Origin = PrefixedOrigin(self.origin, entry.store_prefix)
        keys = load_public_keys(per_filter.public_keys)
        source = filter_announcements(entry, self.poller, folder, keys)
        return AgentDaemon(per_filter, source, ScopedTransfer(self.shared, entry.name), origin, keys,
                           metrics=AgentMetrics(), clock=TickingClock(), name=entry.name)

    def version(self, name: str) -> int | None:
        return DataDir(filter_data_dir(self.config.data_dir, name)).current_version()

    def run_until_at(self, versions: dict[str, int]) -> None:
        """Step until each named filter's ``current`` is at the version given."""
        self.run_until(lambda: all(self.version(name) == v for name, v in versions.items()))

    def run_until(self, condition: object, steps: int = 400) -> None:
        assert callable(condition)
        for _ in range(steps):
            if condition():
                return
            self.agent.step()
        raise AssertionError(f"not reached in {steps} steps; status: {self.agent.status()}")


@pytest.fixture
def store() -> MemoryObjectStore:
    return MemoryObjectStore()


def test_every_filter_installs_into_its_own_directory_from_one_index(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    publish_filter(store, "blocklist", ["a", "b"])
    publish_filter(store, "fraud", ["x"])
    fleet = Fleet(tmp_path, store, ["blocklist", "fraud"])
    fleet.run_until_at({"blocklist": 1, "fraud": 1})
    assert fleet.agent.is_ready
    assert store.get(INDEX_KEY) is not None
    # The index is the only document polled at the root; the small torrents ride in it,
    # so no filter read anything of its own folder.
    assert set(fleet.index_reader.gets) == {INDEX_KEY}
    assert all(not reader.gets for reader in fleet.readers.values())
    status = fleet.agent.status()
    assert sorted(status["filters"]) == ["blocklist", "fraud"]
    assert status["filters"]["fraud"]["current_version"] == 1


def test_a_new_version_of_one_filter_leaves_the_others_alone(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    publish_filter(store, "a", ["1"])
    publish_filter(store, "b", ["2"])
    fleet = Fleet(tmp_path, store, ["a", "b"])
    fleet.run_until_at({"a": 1, "b": 1})
    swaps_b = fleet.agent.status()["filters"]["b"]["last_swap"]
    publish_filter(store, "a", ["1", "3"])
    fleet.run_until_at({"a": 2})
    assert fleet.version("b") == 1
    assert fleet.agent.status()["filters"]["b"]["last_swap"] == swaps_b
    transferred = fleet.shared.versions()
    assert {str(k) for k in transferred} >= {"a/v2", "b/v1"}


def test_index_polls_do_not_grow_with_the_number_of_filters(tmp_path: Path, store: MemoryObjectStore) -> None:
    names = [f"f{i}" for i in range(12)]
    for name in names:
        publish_filter(store, name, [name])
    fleet = Fleet(tmp_path, store, names)
    fleet.run_until(lambda: all(fleet.version(n) == 1 for n in names))
    before = fleet.index_reader.gets[INDEX_KEY]
    for _ in range(200):
        fleet.agent.step()
    polls = fleet.index_reader.gets[INDEX_KEY] - before
    # poll_interval_s is 0.02 s and the ticking clock moves 0.01 s per reading: one poll
    # of the index every few steps for all twelve filters, never one per filter.
    assert 0 < polls <= 200 / 2


def test_a_filter_the_configuration_does_not_list_is_ignored_and_reported(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    publish_filter(store, "wanted", ["1"])
    publish_filter(store, "stranger", ["2"])
    fleet = Fleet(tmp_path, store, ["wanted"])
    fleet.run_until_at({"wanted": 1})
    assert fleet.agent.status()["index"]["unknown_filters"] == ["stranger"]
    assert not filter_data_dir(fleet.config.data_dir, "stranger").exists()
    assert b'bloomswarm_agent_index_unknown_filters 1.0' in generate_latest(fleet.agent.registry)


def test_a_filter_not_yet_in_the_index_waits_while_the_others_install(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    publish_filter(store, "early", ["1"])
    fleet = Fleet(tmp_path, store, ["early", "late"])
    fleet.run_until_at({"early": 1})
    assert not fleet.agent.is_ready  # "late" has nothing yet
    publish_filter(store, "late", ["2"])
    fleet.run_until_at({"late": 1})
    assert fleet.agent.is_ready


def test_metrics_carry_a_filter_label(tmp_path: Path, store: MemoryObjectStore) -> None:
    publish_filter(store, "a", ["1"])
    publish_filter(store, "b", ["2"])
    fleet = Fleet(tmp_path, store, ["a", "b"])
    fleet.run_until_at({"a": 1, "b": 1})
    text = generate_latest(fleet.agent.registry).decode()
    assert 'bloomswarm_agent_current_version{filter="a"} 1.0' in text
    assert 'bloomswarm_agent_current_version{filter="b"} 1.0' in text
    assert text.count("# TYPE bloomswarm_agent_current_version gauge") == 1  # one family
    assert "bloomswarm_agent_index_sequence 2.0" in text


def test_reload_adds_and_drops_filters_without_touching_the_others(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    for name in ("keep", "drop", "add"):
        publish_filter(store, name, [name])
    fleet = Fleet(tmp_path, store, ["keep", "drop"])
    fleet.run_until_at({"keep": 1, "drop": 1})
    kept = fleet.agent._running["keep"].daemon
    fleet.agent.reconfigure(Fleet.configure(tmp_path, ["keep", "add"]))
    assert fleet.agent._running["keep"].daemon is kept  # not restarted
    fleet.run_until_at({"add": 1})
    assert not any(str(k).startswith("drop/") for k in fleet.shared.versions())
    assert fleet.version("drop") == 1  # its data stays on disk; only its transfers stopped
    assert sorted(fleet.agent.status()["filters"]) == ["add", "keep"]


def test_an_index_signed_by_an_unknown_key_is_refused_and_the_filters_keep_serving(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    publish_filter(store, "a", ["1"])
    fleet = Fleet(tmp_path, store, ["a"])
    fleet.run_until_at({"a": 1})
    publish(PrefixedStore(store, filter_prefix("a")), ["1", "2"])  # type: ignore[arg-type]
    store.delete([INDEX_KEY])
    sync_index(store, ["a"], ROGUE_KEY, "rogue", sleep=lambda _s: None)
    for _ in range(50):
        fleet.agent.step()
    assert fleet.version("a") == 1
    assert "index_signature" in str(generate_latest(fleet.agent.registry))
    assert fleet.agent.status()["index"]["last_error"]


def test_an_older_index_is_refused(tmp_path: Path, store: MemoryObjectStore) -> None:
    publish_filter(store, "a", ["1"])
    old = store.get(INDEX_KEY)
    assert old is not None
    publish_filter(store, "a", ["1", "2"])
    fleet = Fleet(tmp_path, store, ["a"])
    fleet.run_until_at({"a": 2})
    store.put(INDEX_KEY, old.data)  # replayed
    for _ in range(50):
        fleet.agent.step()
    assert fleet.version("a") == 2
    assert read_index_unverified(old.data).sequence == 1
    assert 'reason="index_replay"' in generate_latest(fleet.agent.registry).decode()


def test_a_filter_whose_entry_fails_its_own_keys_is_refused_alone(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    publish_filter(store, "good", ["1"])
    bad = PrefixedStore(store, filter_prefix("bad"))
    publish(bad, ["2"], key=ROGUE_KEY)  # type: ignore[arg-type]
    sync_index(store, ["bad"], KEY, "unit-test", sleep=lambda _s: None)  # the index itself is signed well
    fleet = Fleet(tmp_path, store, ["good", "bad"])
    fleet.run_until_at({"good": 1})
    for _ in range(50):
        fleet.agent.step()
    assert fleet.version("bad") is None
    assert fleet.agent.status()["filters"]["bad"]["last_error"]


def _seal_with_entry(store: MemoryObjectStore, name: str, value: Any) -> None:
    """Rewrite index.json, signed by the publisher's key, with entry ``name`` set to ``value``."""
    stored = store.get(INDEX_KEY)
    assert stored is not None
    payload = read_index_unverified(stored.data).to_dict()
    payload["filters"][name] = value
    payload["sequence"] += 1
    store.put(INDEX_KEY, seal_envelope("index", payload, KEY))


@pytest.mark.parametrize(
    "bad_entry",
    [("Other", {}), ("other", "not an object"), ("other", {"pointer": ""}), ("other", {"torrent": "!!"})],
)
def test_an_entry_that_does_not_parse_disturbs_no_other_filter(
    tmp_path: Path, store: MemoryObjectStore, bad_entry: tuple[str, Any]
) -> None:
    """A well-signed index with one malformed entry, of a filter the configuration does not
    list: the listed filters go on updating, and the entry is reported as ignored."""
    publish_filter(store, "a", ["1"])
    fleet = Fleet(tmp_path, store, ["a"])
    fleet.run_until_at({"a": 1})
    publish_filter(store, "a", ["1", "2"])
    _seal_with_entry(store, *bad_entry)
    fleet.run_until_at({"a": 2})
    index_status = fleet.agent.status()["index"]
    assert index_status["last_error"] is None
    assert index_status["unknown_filters"] == [bad_entry[0]]


def test_a_listed_filter_whose_entry_does_not_parse_is_refused_alone(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    publish_filter(store, "good", ["1"])
    publish_filter(store, "bad", ["2"])
    fleet = Fleet(tmp_path, store, ["good", "bad"])
    fleet.run_until_at({"good": 1, "bad": 1})
    _seal_with_entry(store, "bad", {"pointer": 5})
    publish_filter(store, "good", ["1", "3"])
    fleet.run_until_at({"good": 2})
    fleet.run_until(lambda: fleet.agent.status()["filters"]["bad"]["last_error"])
    assert "pointer must be a non-empty string" in fleet.agent.status()["filters"]["bad"]["last_error"]
    assert fleet.version("bad") == 1  # keeps serving what it holds
    publish_filter(store, "bad", ["2", "4"])  # its publisher writes a good entry again
    fleet.run_until_at({"bad": 2})


def test_shutdown_stops_every_filter_and_closes_the_shared_transfer(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    publish_filter(store, "a", ["1"])
    fleet = Fleet(tmp_path, store, ["a"])
    fleet.run_until_at({"a": 1})
    fleet.agent.shutdown()
    assert fleet.shared.versions() == []


def test_a_configuration_without_filters_is_refused(tmp_path: Path, store: MemoryObjectStore) -> None:
    config = dataclasses.replace(Fleet.configure(tmp_path, ["a"]), filters=())
    with pytest.raises(ValueError, match="filters"):
        FilterSet(config, MemoryTransfer(MemoryOrigin(store)), IndexPoller(store, PUBLIC),
                  lambda _e, _c: None, index_keys=all_public_keys)  # type: ignore[arg-type,return-value]


def test_a_pin_rolls_back_one_filter_and_the_others_stay(tmp_path: Path, store: MemoryObjectStore) -> None:
    publish_filter(store, "a", ["1"])
    publish_filter(store, "a", ["1", "2"])
    publish_filter(store, "b", ["3"])
    fleet = Fleet(tmp_path, store, ["a", "b"])
    fleet.run_until_at({"a": 2, "b": 1})
    pin(PrefixedStore(store, filter_prefix("a")), 1, KEY, PUBLIC, "unit-test")
    sync_index(store, ["a"], KEY, "unit-test", sleep=lambda _s: None)
    fleet.run_until_at({"a": 1})
    assert fleet.agent.status()["filters"]["a"]["pointer"]["pinned"] is True
    publish_filter(store, "b", ["3", "4"])  # the other filter still moves forward
    fleet.run_until_at({"b": 2})
    assert fleet.version("a") == 1


def test_agent_status_prints_a_line_per_filter(tmp_path: Path, store: MemoryObjectStore) -> None:
    publish_filter(store, "a", ["1"])
    publish_filter(store, "other", ["2"])
    fleet = Fleet(tmp_path, store, ["a", "b"])
    fleet.run_until_at({"a": 1})
    text = format_filters_status("http://127.0.0.1:9731", fleet.agent.status())
    lines = text.splitlines()
    assert lines[0] == "agent        http://127.0.0.1:9731 (2 filters, 1 ready)"
    assert lines[1].startswith("index        sequence 2, issued ")
    assert lines[2] == "ignored      other (in the index, not in the configuration)"
    assert lines[3:] == ["  a  v1, ready", "  b  none, not ready"]


def test_a_filter_that_cannot_start_on_reload_is_reported_and_the_others_go_on(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    publish_filter(store, "a", ["1"])
    publish_filter(store, "b", ["2"])
    fleet = Fleet(tmp_path, store, ["a"])
    fleet.run_until_at({"a": 1})
    make = fleet.agent._make_daemon

    def failing(entry: FilterConfig, per_filter: AgentConfig) -> AgentDaemon:
        if entry.name == "b":
            raise ConfigError("public key /etc/b.pub: no such file")
        return make(entry, per_filter)

    fleet.agent._make_daemon = failing
    fleet.agent.reconfigure(Fleet.configure(tmp_path, ["a", "b"]))
    assert sorted(fleet.agent.status()["filters"]) == ["a"]
    assert "filter 'b' not started" in fleet.agent.status()["reload_error"]
    publish_filter(store, "a", ["1", "3"])
    fleet.run_until_at({"a": 2})
    assert "filter 'b' not started" in fleet.agent.status()["reload_error"]  # polls do not clear it
    fleet.agent._make_daemon = make
    fleet.agent.reconfigure(Fleet.configure(tmp_path, ["a", "b"]))
    assert fleet.agent.status()["reload_error"] is None
    fleet.run_until_at({"b": 1})


@pytest.mark.parametrize("error", [ConfigError("public key file /etc/b.pub does not exist"),
                                   ValueError("embedded null byte")])
def test_a_changed_filter_that_cannot_be_built_keeps_running_as_it_was(
    tmp_path: Path, store: MemoryObjectStore, error: Exception
) -> None:
    publish_filter(store, "a", ["1"])
    publish_filter(store, "b", ["2"])
    fleet = Fleet(tmp_path, store, ["a", "b"])
    fleet.run_until_at({"a": 1, "b": 1})
    running_b = fleet.agent._running["b"].daemon
    make = fleet.agent._make_daemon

    def failing(entry: FilterConfig, per_filter: AgentConfig) -> AgentDaemon:
        if entry.name == "b":
            raise error
        return make(entry, per_filter)

    fleet.agent._make_daemon = failing
    fleet.agent.reconfigure(Fleet.configure(tmp_path, ["a", FilterConfig("b", keep_versions=5)]))
    assert fleet.agent._running["b"].daemon is running_b
    assert fleet.agent._running["b"].entry == FilterConfig("b")
    assert "filter 'b' not started (keeps running as it was)" in fleet.agent.status()["reload_error"]
    publish_filter(store, "b", ["2", "3"])
    fleet.run_until_at({"b": 2})


def test_a_filter_with_its_own_prefix_polls_its_own_latest_json(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    """index.json lists filters/NAME only: a filter kept elsewhere reads its own pointer,
    and an index entry of the same name (another folder) is not taken for it."""
    folder = PrefixedStore(store, "teams/risk/fraud")
    publish(folder, ["x"])  # type: ignore[arg-type]
    for keys in (["y"], ["y", "z"], ["y", "z", "v"]):
        publish_filter(store, "fraud", keys)  # filters/fraud, another folder: v1..v3
    publish_filter(store, "plain", ["p"])
    fleet = Fleet(tmp_path, store, [FilterConfig("fraud", prefix="teams/risk/fraud"), "plain"])
    fleet.run_until_at({"fraud": 1, "plain": 1})
    for _ in range(50):
        fleet.agent.step()
    assert fleet.version("fraud") == 1
    publish(folder, ["x", "w"])  # type: ignore[arg-type]
    fleet.run_until_at({"fraud": 2})
    assert fleet.readers["fraud"].gets["teams/risk/fraud/latest.json"] > 2
    assert fleet.readers["plain"].gets["filters/plain/latest.json"] == 0
    assert fleet.agent.status()["index"]["unknown_filters"] == ["fraud"]


def test_a_filter_added_on_reload_brings_its_keys_to_the_index(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    """Its publisher may sign index.json with the filter's own key: the agent must accept
    that index once the filter is configured, and its other filters go on."""
    publish_filter(store, "a", ["1"])
    fleet = Fleet(tmp_path, store, ["a"])
    fleet.run_until_at({"a": 1})
    rogue_pub = tmp_path / "risk.pub"
    rogue_pub.write_bytes(ROGUE_PEM)
    publish(PrefixedStore(store, filter_prefix("risk")), ["r"], key=ROGUE_KEY)  # type: ignore[arg-type]
    sync_index(store, ["risk"], ROGUE_KEY, "risk-team", sleep=lambda _s: None)
    fleet.agent.reconfigure(Fleet.configure(tmp_path, ["a", FilterConfig("risk", public_keys=(rogue_pub,))]))
    assert fleet.agent.status()["reload_error"] is None
    fleet.run_until_at({"risk": 1})
    publish_filter(store, "a", ["1", "2"])
    fleet.run_until_at({"a": 2})


def test_a_filter_that_cannot_start_at_start_leaves_the_others_running(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    """One filter's malformed state.json: the others start and update, it is reported
    (and /readyz stays unready), and a reload once it is fixed starts it."""
    publish_filter(store, "a", ["1"])
    publish_filter(store, "b", ["2"])
    state = DataDir(filter_data_dir(tmp_path / "data", "b")).state_file
    state.parent.mkdir(parents=True)
    state.write_text("{not json")
    fleet = Fleet(tmp_path, store, ["a", "b"])
    fleet.run_until_at({"a": 1})
    status = fleet.agent.status()
    assert "state.json is malformed" in status["not_started"]["b"]
    assert sorted(status["filters"]) == ["a"] and not fleet.agent.is_ready
    assert "not started  b:" in format_filters_status("http://agent", status)
    state.unlink()
    fleet.agent.reconfigure(Fleet.configure(tmp_path, ["a", "b"]))
    assert fleet.agent.status()["not_started"] == {}
    fleet.run_until_at({"b": 1})
    assert fleet.agent.is_ready


def test_many_filters_spread_their_periodic_status_refreshes() -> None:
    assert observe_interval(1) == observe_interval(int(OBSERVE_S * OBSERVES_PER_S)) == OBSERVE_S
    assert observe_interval(1000) == pytest.approx(1000 / OBSERVES_PER_S)
    assert all(observe_interval(n) <= observe_interval(n + 1) for n in range(2000))


def test_the_loop_ticks_less_often_the_more_filters_fetch() -> None:
    assert min_tick(0) == min_tick(1) == MIN_TICK_S
    assert min_tick(100) == pytest.approx(0.1)
    assert min_tick(10_000) == TICK_S
    assert all(min_tick(n) <= min_tick(n + 1) for n in range(1000))


def test_each_daemon_refreshes_at_the_interval_its_number_of_filters_gives(
    tmp_path: Path, store: MemoryObjectStore
) -> None:
    names = [f"f{i:03}" for i in range(120)]
    fleet = Fleet(tmp_path, store, names)
    assert {r.daemon.observe_interval_s for r in fleet.agent._running.values()} == {observe_interval(120)}
    fleet.agent.reconfigure(Fleet.configure(tmp_path, names[:2]))
    assert {r.daemon.observe_interval_s for r in fleet.agent._running.values()} == {OBSERVE_S}
