"""`bloomswarm demo`'s parts: generated keys, the lookup client process, the views, the
summary and exit verdict, the command line. The whole demo (S3, tracker, agents) runs in
tests/functional/test_demo.py."""

from __future__ import annotations

import importlib.util
import io
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from bloomswarm import demo, demo_client, demo_data
from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.datadir import DataDir, filter_data_dir
from bloomswarm.common.reader import Filter
from bloomswarm.demo_client import ClientReport, LookupClient
from bloomswarm.demo_data import KeyPlan, build_version
from bloomswarm.demo_view import (
    DemoState,
    LiveView,
    PlainView,
    RoundResult,
    failures,
    filters_on,
    render,
    size_text,
    summary_lines,
)
from bloomswarm.main import main
from bloomswarm.sandbox.fleet import AgentView
from bloomswarm.signals import sigterm_interrupts

# -- generated keys ------------------------------------------------------------------------


def test_each_version_shifts_by_the_churn_and_common_keys_are_in_every_version() -> None:
    plan = KeyPlan(10_000, 3)
    assert plan.churn == 100
    assert [plan.version_range(v) for v in (1, 2, 3)] == [(0, 10_000), (100, 10_100), (200, 10_200)]
    start, stop = plan.common_range()
    for version in (1, 2, 3):
        low, high = plan.version_range(version)
        assert low <= start and stop <= high
    sample = plan.common_sample(500)
    assert len(sample) == 500 and sample.dtype == np.uint64
    assert int(sample.min()) >= start and int(sample.max()) < stop
    assert int(KeyPlan.absent_sample(10).min()) >= plan.version_range(3)[1]


def test_many_rounds_keep_at_least_half_the_keys_common() -> None:
    plan = KeyPlan(1000, 400)
    start, stop = plan.common_range()
    assert plan.churn >= 1 and stop - start >= 1000 // 2 - plan.churn


def test_each_named_filter_has_keys_of_its_own_and_the_first_has_the_single_filters() -> None:
    plan = KeyPlan(1000, 3)
    assert plan.for_filter(0) == plan
    ranges = [plan.for_filter(i).version_range(v) for i in range(3) for v in (1, 2, 3)]
    first, second = plan.for_filter(0), plan.for_filter(1)
    assert first.version_range(3)[1] <= second.version_range(1)[0]  # disjoint, every version
    assert all(start < stop <= 3 * plan.span for start, stop in ranges)
    low, high = second.common_range()
    assert second.version_range(3)[0] <= low and high <= second.version_range(1)[1]
    with pytest.raises(ValueError):
        KeyPlan(1000, 2, base=demo_data.ABSENT_BASE - 10)


def test_a_plan_needs_keys_and_rounds() -> None:
    with pytest.raises(ValueError):
        KeyPlan(1, 1)
    with pytest.raises(ValueError):
        KeyPlan(100, 0)


def test_build_version_holds_exactly_its_keys_and_reports_progress(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo_data, "BUILD_CHUNK", 1000)
    plan = KeyPlan(2500, 2)
    done: list[int] = []
    builder = build_version(plan, 2, 0.001, on_progress=done.append)
    assert done == [1000, 2000, 2500]
    assert builder.key_count == 2500
    builder.write(tmp_path / "f.bsf", version=2)
    with Filter.open(tmp_path / "f.bsf") as bloom:
        low, high = plan.version_range(2)
        assert bloom.contains_many(np.arange(low, high, dtype=np.uint64)).all()
        absent = bloom.contains_many(KeyPlan.absent_sample(10_000))
        assert absent.sum() < 100  # 0.1% target: about 10 expected


def test_the_clients_absent_keys_are_fresh_each_batch_and_in_no_version() -> None:
    absent = demo_client._AbsentKeys(4)
    batches = [absent.next_batch().copy() for _ in range(3)]
    keys = np.concatenate(batches)
    assert keys.dtype == np.uint64 and len(np.unique(keys)) == 12  # each key queried once
    assert keys.tolist() == list(range(demo_data.ABSENT_BASE, demo_data.ABSENT_BASE + 12))
    assert int(keys.min()) >= KeyPlan(1000, 3).for_filter(5).version_range(3)[1]


# -- the lookup client ---------------------------------------------------------------------


def _install(directory: Path, version: int, builder: FilterBuilder) -> None:
    target = DataDir(directory).version_dir(version)
    target.mkdir(parents=True, exist_ok=True)
    builder.write(DataDir(directory).filter_file(version), version=version)
    DataDir(directory).flip_current(version)


def _wait_report(client: LookupClient, done: Any, limit_s: float = 60.0) -> ClientReport:
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        client.check_alive()
        report = client.poll()
        if report is not None and done(report):
            return report
        time.sleep(0.05)
    raise AssertionError(f"the client never reported as expected; last: {client.latest}")


def test_lookup_client_follows_swaps_with_no_error_and_no_false_negative(tmp_path: Path) -> None:
    plan = KeyPlan(20_000, 2)
    client = LookupClient(tmp_path, plan).start()
    try:
        waiting = _wait_report(client, lambda r: True)
        assert waiting.version is None and waiting.lookups == 0  # nothing installed: it waits
        _install(tmp_path, 1, build_version(plan, 1, 0.01))
        _wait_report(client, lambda r: r.version == 1 and r.lookups > 0)
        _install(tmp_path, 2, build_version(plan, 2, 0.01))
        _wait_report(client, lambda r: r.version == 2)
    finally:
        final = client.stop()
    assert final is not None and final.final
    assert final.versions == (1, 2) and final.swaps == 2
    assert final.errors == 0 and final.false_negatives == 0
    assert final.lookups > 0 and final.mean_rate > 0 and final.absent_lookups > 0
    assert 0 < final.false_positive_rate < 0.05
    assert client.pid is None


def test_lookup_client_counts_false_negatives(tmp_path: Path) -> None:
    plan = KeyPlan(20_000, 2)
    client = LookupClient(tmp_path, plan).start()
    try:
        _install(tmp_path, 1, build_version(plan, 1, 0.01))
        _wait_report(client, lambda r: r.version == 1)
        _install(tmp_path, 2, FilterBuilder.for_capacity(plan.keys, 0.01))  # holds no key
        report = _wait_report(client, lambda r: r.version == 2 and r.false_negatives > 0)
    finally:
        client.stop()
    assert report.errors == 0


def test_lookup_client_reads_the_named_filter_it_is_given(tmp_path: Path) -> None:
    plan = KeyPlan(5000, 1)
    client = LookupClient(tmp_path, plan, "f01").start()
    try:
        _install(filter_data_dir(tmp_path, "f01"), 1, build_version(plan, 1, 0.01))
        report = _wait_report(client, lambda r: r.version == 1 and r.lookups > 0)
    finally:
        client.stop()
    assert report.errors == 0 and report.false_negatives == 0


def test_client_process_ignores_ctrl_c(tmp_path: Path) -> None:
    client = LookupClient(tmp_path, KeyPlan(5000, 1)).start()
    try:
        _wait_report(client, lambda r: True)
        assert client.pid is not None
        os.kill(client.pid, signal.SIGINT)  # a terminal's Ctrl-C reaches every process of the group
        time.sleep(0.5)
        client.check_alive()
    finally:
        final = client.stop()
    assert final is not None and final.final


# -- views and summary ---------------------------------------------------------------------


def _view(name: str, version: int | None, *, download: dict[str, Any] | None = None,
          peers: float = 0.0, origin: float = 0.0) -> AgentView:
    metrics = {"bloomswarm_agent_peers": 3.0, "bloomswarm_agent_bytes_from_peers_total": peers,
               "bloomswarm_agent_bytes_from_origin_total": origin}
    status = {"current_version": version, "download": download, "metrics": metrics,
              "last_swap": {"version": version, "at": 100.0} if version else None}
    return AgentView(name, status, True)


def _round(**changes: Any) -> RoundResult:
    values: dict[str, Any] = dict(round=2, version=2, agents=2, file_size=1000, build_s=0.1, publish_s=0.2,
                                  announced_at=99.0, swaps={"agent0": 1.0, "agent1": 1.5}, origin_bytes=1200,
                                  peer_bytes=800.0)
    values.update(changes)
    return RoundResult(**values)


def _report(**changes: Any) -> ClientReport:
    values: dict[str, Any] = dict(pid=1, version=2, lookups=1_000_000, rate=2e7, mean_rate=1.5e7, errors=0,
                                  false_negatives=0, absent_lookups=1000, false_positives=10, swaps=2,
                                  versions=(1, 2))
    values.update(changes)
    return ClientReport(**values)


def test_round_result_times_and_origin_copies() -> None:
    result = _round()
    assert result.converged and result.first_swap_s == 1.0 and result.last_swap_s == 1.5
    assert result.origin_copies == pytest.approx(1.2)
    assert not _round(swaps={"agent0": 1.0}).converged
    assert not _round(error="timeout").converged


def test_summary_shows_each_round_and_the_client() -> None:
    text = "\n".join(summary_lines([_round(round=1, version=1), _round()], _report(), 2, "agent0",
                                   "2 agents, DHT"))
    assert "summary: 2 agents, DHT" in text
    assert "1.50 s" in text and "1.20x" in text and "all agents" in text
    assert "15.0M/s on average" in text and "v1 -> v2" in text
    assert "0 errors, 0 false negatives" in text and "false positives 1.00%" in text


def test_summary_shows_the_delta_against_the_file_and_who_used_it() -> None:
    full, by_delta = _round(round=1, version=1), _round(delta_size=62, by_delta={"agent1"})
    lines = summary_lines([full, by_delta], _report(), 2, "agent0")
    row_v1 = next(line for line in lines if line.startswith("  1 "))
    row_v2 = next(line for line in lines if line.startswith("  2 "))
    assert " - " in row_v1 and "%" not in row_v1
    assert "62 B = 6.2%, 1/2 agents" in row_v2


@pytest.mark.parametrize(("rounds", "report", "reason"), [
    ([_round(swaps={"agent0": 1.0})], _report(), "did not reach every agent"),
    ([_round()], _report(errors=3, last_error="boom"), "3 errors"),
    ([_round()], _report(false_negatives=1), "1 false negatives"),
    ([_round()], _report(versions=(1,)), "did not reach v2"),
    ([_round()], None, "never reported"),
    ([], _report(), "only 0 of 1 rounds ran"),
])
def test_failures_name_what_went_wrong(rounds: list[RoundResult], report: ClientReport | None,
                                       reason: str) -> None:
    problems = failures(rounds, 1, report)
    assert any(reason in p for p in problems), problems


def test_a_clean_run_has_no_failure() -> None:
    assert failures([_round()], 1, _report()) == []


def test_live_table_shows_each_agent() -> None:
    state = DemoState(agents=2, rounds=2, client_agent="agent0", phase="distributing",
                      current=_round(swaps={"agent0": 1.25}), client=_report(version=1),
                      views=[_view("agent0", 2, peers=3 * 2**20, origin=2**20),
                             _view("agent1", 1, download={"version": 2, "state": "downloading",
                                                          "progress": 0.5})])
    console = Console(file=io.StringIO(), width=160, record=True)
    console.print(render(state, now=101.0))
    text = console.export_text()
    assert "round 2/2: v2 - distributing - published 2.0 s ago, 1/2 agents swapped" in text
    agent0 = next(line for line in text.splitlines() if line.startswith("agent0"))
    assert agent0.split()[:4] == ["agent0", "v2", "serving", "100%"]
    assert "3.0 MiB" in agent0 and "1.0 MiB" in agent0 and "1.25 s" in agent0
    agent1 = next(line for line in text.splitlines() if line.startswith("agent1"))
    assert agent1.split()[:4] == ["agent1", "v1", "downloading", "50%"]
    assert "origin (S3 through the counting proxy)" in text and "1.20 x the file" in text
    assert "lookup client (pid 1, agent0's data dir): v1, 20.0M/s" in text


def test_live_view_prints_events_above_the_table() -> None:
    console = Console(file=io.StringIO(), width=160, force_terminal=True, record=True)
    with LiveView(console) as view:
        view.event("agent3 swapped to v2")
        view.update(DemoState(agents=1, rounds=1, client_agent="agent0", views=[_view("agent0", 1)]))
    text = console.export_text()
    assert "agent3 swapped to v2" in text and "agent0" in text


def test_plain_view_prints_events_and_periodic_progress_lines() -> None:
    out = io.StringIO()
    view = PlainView(out, interval_s=0.0)
    view.event("v2 published")
    state = DemoState(agents=2, rounds=2, client_agent="agent0", current=_round(swaps={}),
                      views=[_view("agent0", 1, download={"version": 2, "progress": 0.25})])
    view.update(state)
    lines = out.getvalue().splitlines()
    assert lines[0] == "v2 published"
    assert "0/2 agents swapped" in lines[1] and "downloading 25% on average" in lines[1]
    quiet_out = io.StringIO()
    quiet = PlainView(quiet_out, interval_s=3600.0)
    quiet.update(state)
    quiet.update(state)  # the second one falls inside the interval
    assert len(quiet_out.getvalue().splitlines()) == 1


def test_plain_view_prints_its_first_progress_line_on_a_freshly_booted_machine() -> None:
    # time.monotonic() counts from boot: a view that started its last-print time at 0.0
    # printed nothing during the first interval after boot.
    now = [5.0]  # five seconds after boot
    out = io.StringIO()
    view = PlainView(out, interval_s=3600.0, clock=lambda: now[0])
    state = DemoState(agents=1, rounds=1, client_agent="agent0", current=_round(swaps={}),
                      views=[_view("agent0", 1, download={"version": 2, "progress": 0.5})])
    view.update(state)
    now[0] += 3599.0
    view.update(state)
    now[0] += 1.0
    view.update(state)
    assert len(out.getvalue().splitlines()) == 2


# -- named filters (--filters N) ------------------------------------------------------------


def _filters_view(name: str, versions: dict[str, int], *, downloading: dict[str, float] | None = None,
                  by_delta: tuple[str, ...] = ()) -> AgentView:
    """An agent of named filters: each at ``versions[name]`` (swapped at 100.0 + its
    position), downloading v+1 of those in ``downloading`` (name -> progress)."""
    filters = {}
    for index, (filter_name, version) in enumerate(versions.items()):
        progress = (downloading or {}).get(filter_name)
        swap = {"version": version, "at": 100.0 + index,
                "delta_from": version - 1 if filter_name in by_delta else None}
        filters[filter_name] = {
            "current_version": version, "last_swap": swap,
            "download": None if progress is None else {"version": version + 1, "progress": progress},
            "metrics": {"bloomswarm_agent_peers": 1.0, "bloomswarm_agent_bytes_from_peers_total": 2**20,
                        "bloomswarm_agent_bytes_from_origin_total": 2**10}}
    return AgentView(name, {"ready": True, "filters": filters, "index": {"sequence": 2}}, True)


def _filters_round(**changes: Any) -> RoundResult:
    values: dict[str, Any] = dict(swaps={}, targets={"f01": 2, "f02": 2, "f03": 2}, file_size=3000)
    values.update(changes)
    return _round(**values)


def test_named_filters_flags_names_and_keys_per_filter() -> None:
    assert demo.filter_names(3) == ("f01", "f02", "f03")
    assert demo.filter_names(100)[:2] == ("f001", "f002") and demo.filter_names(100)[-1] == "f100"
    assert demo.keys_per_filter(3000, 3) == 1000 and demo.keys_per_filter(5_000_000, 4) == 1_250_000
    assert demo.keys_per_filter(10_000, 100) == demo.MIN_FILTER_KEYS  # at least 1,000 each
    run = _demo_for(["--filters", "3", "--keys", "3000"])
    assert run.filters == ("f01", "f02", "f03") and run.plan.keys == 1000 and run.client_filter == "f01"
    single = _demo_for(["--keys", "3000"])
    assert single.filters == () and single.plan.keys == 3000 and single.client_filter is None


def test_an_agent_view_reads_each_named_filter_and_adds_up_their_counters() -> None:
    view = _filters_view("agent0", {"f01": 2, "f02": 1}, downloading={"f02": 0.5})
    assert view.filter_names == ["f01", "f02"] and view.version is None
    assert view.filter("f02").version == 1 and view.filter("f02").progress == 0.5
    assert view.filter("f01").swapped_at(2) == 100.0 and view.filter("f09").status is None
    assert view.bytes_from_peers == 2 * 2**20 and view.peers == 2
    assert filters_on(view, {"f01": 2, "f02": 2}) == 1 and filters_on(view, {"f01": 1, "f02": 1}) == 2


def test_a_round_of_named_filters_completes_an_agent_at_its_last_filter() -> None:
    result = _filters_round(delta_size=300)
    assert not result.record_filters(_filters_view("agent0", {"f01": 2, "f02": 2, "f03": 1}), now=150.0)
    assert result.filter_swaps["agent0"] == {"f01": 1.0, "f02": 2.0} and result.swaps == {}
    done = _filters_view("agent0", {"f01": 2, "f02": 2, "f03": 2}, by_delta=("f03",))
    assert result.record_filters(done, now=150.0)
    assert result.swaps == {"agent0": 3.0}  # its last filter, from the agent's own swap time
    assert not result.record_filters(done, now=150.0)  # once
    assert result.record_filters(_filters_view("agent1", {"f01": 2, "f02": 3, "f03": 2}), now=150.0)
    assert result.converged and result.by_delta == {"agent0/f03"}
    assert result.delta_text == "300 B = 10.0%, 1/6 swaps"


def test_the_table_and_plain_lines_count_each_agents_filters_on_the_rounds_version() -> None:
    behind = _filters_view("agent1", {"f01": 2, "f02": 1, "f03": 1}, downloading={"f02": 0.5})
    state = DemoState(agents=2, rounds=2, client_agent="agent0", client_filter="f01", filters=3,
                      phase="distributing", current=_filters_round(swaps={"agent0": 3.0}),
                      client=_report(version=1),
                      views=[_filters_view("agent0", {"f01": 2, "f02": 2, "f03": 2}), behind])
    console = Console(file=io.StringIO(), width=200, record=True)
    console.print(render(state, now=101.0))
    text = console.export_text()
    assert "round 2/2: v2 of 3 filters - distributing - published 2.0 s ago, 1/2 agents with every " \
           "filter swapped" in text
    assert "last swap after" in text
    agent0 = next(line for line in text.splitlines() if line.startswith("agent0"))
    assert agent0.split()[:6] == ["agent0", "3/3", "on", "v2", "serving", "100%"] and "3.00 s" in agent0
    agent1 = next(line for line in text.splitlines() if line.startswith("agent1"))
    assert agent1.split()[:7] == ["agent1", "1/3", "on", "v2", "downloading", "1", "50%"]
    assert "x the 3 files" in text and "lookup client (pid 1, agent0's filter f01)" in text
    out = io.StringIO()
    PlainView(out, interval_s=0.0).update(state)
    assert "filters on v2: agent0 3/3, agent1 1/3" in out.getvalue()


def test_the_summary_of_named_filters_sets_origin_against_all_files() -> None:
    rounds = [_filters_round(round=1, version=1, swaps={"agent0": 1.0, "agent1": 1.5}, origin_bytes=3000)]
    lines = summary_lines(rounds, _report(versions=(1,)), 2, "agent0", "2 agents, 3 filters",
                          client_filter="f01")
    text = "\n".join(lines)
    assert "origin/files" in text and "1.00x" in text and "all agents, all filters" in text
    assert "moves index.json once" in text and "lookup client (agent0's filter f01, " in text
    stuck = _filters_round(swaps={"agent0": 1.0}, error="timeout")
    assert any("did not reach every agent and filter" in p for p in failures([stuck], 1, _report()))
    assert "1/2 agents with every filter: timeout" in "\n".join(summary_lines([stuck], None, 2, "agent0"))


def test_size_text() -> None:
    assert [size_text(n) for n in (0, 1023, 2048, 6_184_960, 3 * 2**30)] == [
        "0 B", "1023 B", "2 KiB", "5.9 MiB", "3.0 GiB"]


# -- the command line ----------------------------------------------------------------------


@pytest.mark.parametrize(("argv", "message"), [
    (["--agents", "0"], "argument --agents: must be at least 1, got 0"),
    (["--agents", "1000"], "argument --agents: must be at most 100"),
    (["--keys", "10"], "argument --keys: must be at least 1,000"),
    (["--keys", "lots"], "argument --keys: not an integer"),
    (["--rounds", "0"], "argument --rounds: must be at least 1"),
    (["--fpp", "1.5"], "argument --fpp: must be between 0 and 1"),
    (["--discovery", "carrier-pigeon"], "argument --discovery: invalid choice"),
    (["--timeout", "0"], "argument --timeout: must be more than 0 seconds"),
    (["--pause", "-1"], "argument --pause: must be a number of seconds >= 0"),
    (["--filters", "0"], "argument --filters: must be at least 1, got 0"),
    (["--filters", "1001"], "argument --filters: must be at most 1,000"),
    (["--origin-grace", "1"], "unrecognized arguments: --origin-grace 1"),  # agents run on defaults
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
])
def test_bad_flags_are_one_line_usage_errors(argv: list[str], message: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_help_lists_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for flag in ("--agents", "--keys", "--filters", "--rounds", "--fpp", "--discovery", "--dir", "--plain"):
        assert flag in out


def test_without_moto_it_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "moto" else real(name, *a))
    assert main(["demo"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "pip install 'bloomswarm[demo]'" in captured.err


def test_tracker_discovery_without_opentracker_is_one_line(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    assert main(["demo", "--discovery", "tracker"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "opentracker is not on PATH" in err and "--discovery dht" in err


def test_sigterm_becomes_an_interrupt_and_cleanup_ignores_both_signals() -> None:
    with pytest.raises(KeyboardInterrupt), sigterm_interrupts():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    with demo._shielded():
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def _demo_for(argv: list[str]) -> demo.Demo:
    from bloomswarm.main import build_parser

    return demo.Demo(build_parser().parse_args(["demo", *argv]))


def test_dir_keeps_each_run_in_a_new_folder(tmp_path: Path) -> None:
    first = _demo_for(["--dir", str(tmp_path / "runs")])._make_root()
    second = _demo_for(["--dir", str(tmp_path / "runs")])._make_root()
    assert first != second and first.parent == second.parent == tmp_path / "runs"
    assert first.is_dir() and second.is_dir() and not any(first.iterdir())


def test_without_dir_the_run_uses_a_fresh_temporary_folder(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    root = _demo_for([])._make_root()
    assert root.parent == tmp_path and root.name.startswith("bloomswarm-demo-")
    assert not _demo_for([]).keep and _demo_for(["--dir", str(tmp_path)]).keep
