"""Churn and soak: a fleet under version churn, agent crashes and a faulty origin, checked by lookups.

Run from the repository root (bounded in time; not part of CI — the test suite runs a
small smoke run)::

    python benchmarks/soak.py [--agents 16] [--duration 600] [--publish-interval 20]
        [--kill-interval 30] [--fault-rate 0.3] [--lookup-processes 2]
        [--json docs/benchmarks/soak.json] [--markdown docs/benchmarks/soak.md]

One phase, faults on throughout. :class:`~bloomswarm.sandbox.fleet.LocalFleet` starts
moto's S3 server, the origin proxy (failing ``--fault-rate`` of the agents' origin
requests, half with a 503 and half with a 5 s stall and a dropped connection), opentracker
(or the DHT) and ``--agents`` agent processes. Version 1 is published and reaches every
agent (warm-up); then, for ``--duration`` seconds:

- a new version is published every ``--publish-interval`` s (key sets in
  :mod:`benchmarks.soak_keys`: stable keys plus a sliding window of rolling keys);
- every ``--kill-interval`` s a random agent is killed with SIGKILL and started again;
- agents install each version from a delta of the version they hold when the manifest
  lists one (``--no-deltas``: the agents' ``install.deltas = false``, always the full
  file); every version holds the same number of keys, so the publisher keeps its
  parameters and makes a delta from each of the newest versions in the bucket (up to
  its ``deltas.max_bases``, 8; the soak runs no retention);
- ``--lookup-processes`` processes (``spawn``) look keys up continuously through
  LiveFilter in the agents' data directories (each directory followed by one process;
  :mod:`benchmarks.soak_lookups`), checking that keys common to consecutive versions are
  always found, and timing every lookup;
- agents' RSS and open FDs are sampled every ``--sample-interval`` s and their data
  directories every second (:mod:`benchmarks.soak_probes`).

Then every agent must reach the last version. Acceptance checks (the exit code is 1 when
one fails): no lookup exception, no false negative, no lookup process lost, every agent
on the last version, no version skipped by an agent that was up while it was the latest,
no agent process with RSS or FDs grown past the stated bound from the warm-up sample to
the end, every data directory within retention (at most ``keep_versions + 1`` filter
files' worth of disk at any sample, ``keep_versions`` versions and no staging at the end),
every version after v1 published with a delta from the one before it, with deltas on at
least one install by delta, and every agent's ``/metrics`` at the end agreeing with its
log's last process (delta installs, swaps, fallbacks by reason). The report counts, per
agent and in total, installs by delta and in full, fallbacks by reason, and how each
restarted agent caught up (:mod:`benchmarks.soak_deltas`).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import multiprocessing as mp
import queue
import random
import shlex
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    Check,
    int_at_least,
    load_average,
    machine_info,
    non_negative_float,
    non_negative_int,
    open_fraction,
    output_path,
    positive_float,
    positive_int,
    stop_on_signals,
    work_dir,
    write_json,
)
from benchmarks.soak_deltas import (
    agent_delta_summary,
    delta_log,
    metrics_disagreement,
    total_delta_summary,
)
from benchmarks.soak_keys import KeyPlan
from benchmarks.soak_lookups import LookupJob, LookupReport, lookup_worker
from benchmarks.soak_probes import (
    DiskSample,
    ProcessSample,
    agent_log_events,
    disk_sample,
    process_sample,
    skipped_versions,
)
from benchmarks.soak_report import render_markdown, summarize_lookups

# The editable install maps bloomswarm.* with an import hook mypy cannot follow.
from bloomswarm.common.builder import FilterBuilder  # type: ignore[import-not-found, unused-ignore]
from bloomswarm.sandbox.agent_process import AgentProcess  # type: ignore[import-not-found, unused-ignore]
from bloomswarm.sandbox.fleet import (  # type: ignore[import-not-found, unused-ignore]
    FleetError,
    FleetSpec,
    LocalFleet,
)
from bloomswarm.sandbox.origin import OriginCounts  # type: ignore[import-not-found, unused-ignore]

MIB = 1024 * 1024
SOAK_SWARM: dict[str, object] = {}
"""The agents' [swarm] settings beyond addresses and caps: none, the agent's defaults (a
version every 20 s is far more often than production's, so this also shows how the
defaults behave under pressure). ``--swarm KEY=VALUE`` overrides, for experiments."""
KEPT_METRICS = ("bloomswarm_agent_delta_", "bloomswarm_agent_swaps_total")
"""The /metrics samples the result keeps per agent (name prefixes)."""
METADATA_SLACK = 1 * MIB
"""Disk allowed beyond the filter files: manifests, torrents, resume data, state.json."""


@dataclass
class AgentTrack:
    """What the soak records about one agent while it runs."""

    agent: AgentProcess
    kills: list[dict[str, Any]] = field(default_factory=list)
    down: list[tuple[float, float]] = field(default_factory=list)
    restarting_since: float | None = None
    start: ProcessSample | None = None
    end: ProcessSample | None = None
    samples: list[ProcessSample] = field(default_factory=list)
    disk_peak: DiskSample | None = None
    disk_end: DiskSample | None = None
    disk_last: DiskSample | None = None
    currents: set[int] = field(default_factory=set)
    """Versions seen as ``current`` by the disk sampler (a swap the log may have missed)."""

    @property
    def name(self) -> str:
        return self.agent.root.name

    @property
    def pid(self) -> int | None:
        return self.agent.process.pid if self.agent.process is not None else None


class Soak:
    """One soak run; :meth:`run` returns the JSON-ready result."""

    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.plan = KeyPlan(args.stable_keys, args.rolling_keys, args.churn)
        self.rng = random.Random(args.seed)
        spec = FleetSpec(agents=args.agents, discovery=args.discovery, origin_fault_rate=args.fault_rate,
                         keep_versions=args.keep_versions, swarm=swarm_settings(args.swarm),
                         agent_tables={"s3": {"read_timeout_s": args.s3_read_timeout,
                                              "max_attempts": args.s3_attempts},
                                       "install": {"deltas": args.deltas}})
        self.fleet = LocalFleet(root / "fleet", spec)
        self.tracks: list[AgentTrack] = []
        self.versions: list[dict[str, Any]] = []
        self.t0 = 0.0
        self.events: list[str] = []
        self.reports: dict[int, LookupReport] = {}
        self.workers: list[Any] = []
        self.context = mp.get_context("spawn")
        self.report_queue: Any = None
        self.stop_lookups: Any = None
        self.converged: dict[str, bool] = {}
        self.convergence_error: str | None = None
        self.aborted: str | None = None
        self.origin: OriginCounts | None = None
        self.final_metrics: dict[str, dict[str, float]] = {}
        """Each agent's /metrics samples after the final convergence (its last process)."""

    # -- helpers -----------------------------------------------------------------------

    def now(self) -> float:
        """Seconds since the soak clock started (negative during warm-up)."""
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        line = f"[{self.now():7.1f}s] {text}" if self.t0 else f"[warm-up] {text}"
        print(line, flush=True)
        self.events.append(line)

    def publish(self) -> int:
        version = len(self.versions) + 1
        builder = FilterBuilder.for_capacity(self.plan.keys_per_version, self.args.fpp)
        builder.add_many(self.plan.keys(version))
        published = self.fleet.publish(builder)
        if published.version != version:
            raise FleetError(f"published v{published.version}, expected v{version}")
        at = time.monotonic() - (time.time() - published.announced_at) - self.t0
        manifest = published.manifest
        params = manifest.filter.to_params()
        deltas = [{"base": d.base_version, "size": d.size} for d in sorted(manifest.deltas,
                                                                          key=lambda d: d.base_version)]
        self.versions.append({"version": version, "announced_at_s": round(at, 3),
                              "announced_at": published.announced_at, "size": manifest.size,
                              "num_bits": params.num_bits, "num_probes": params.num_probes,
                              "deltas": deltas})
        listed = ", ".join(f"from v{d['base']} {d['size']:,}" for d in deltas) or "none"
        self.say(f"published v{version} ({manifest.size:,} bytes; deltas: {listed})")
        return version

    # -- phases ------------------------------------------------------------------------

    def run(self) -> dict[str, Any]:
        args = self.args
        started = time.time()
        try:
            self.fleet.start(on_step=lambda what: self.say(f"starting {what}"))
            self.fleet.wait_until_up(limit_s=60.0 + 10.0 * args.agents)
            # after wait_until_up: it replaces an agent whose port was taken at start
            self.tracks = [AgentTrack(agent) for agent in self.fleet.agents]
            self.t0 = time.monotonic()  # provisional, so announcement times are relative
            self.publish()
            self.fleet.wait_for_version(1, limit_s=args.converge_timeout)
            self.say("v1 on every agent; starting the lookup processes")
            self.start_lookups()
            self.t0 = time.monotonic()
            self.versions[0]["announced_at_s"] = 0.0
            self.soak()
            self.finish()
        except (FleetError, RuntimeError, OSError, AssertionError) as exc:  # reported as a failed run
            self.aborted = f"{type(exc).__name__}: {exc}"[:4000]
            self.say(f"ABORTED: {self.aborted.splitlines()[0]}")
        finally:
            self.stop_everything()
        return self.result(time.time() - started)

    def start_lookups(self) -> None:
        args = self.args
        self.report_queue = self.context.Queue()
        self.stop_lookups = self.context.Event()
        dirs = [str(agent.data_dir) for agent in self.fleet.agents]
        for worker in range(args.lookup_processes):
            mine = dirs[worker::args.lookup_processes]
            if not mine:
                continue
            job = LookupJob(worker, mine, self.plan, args.batch, args.check_sample, args.lookup_nice, 1.0)
            process = self.context.Process(target=lookup_worker, name=f"soak-lookups-{worker}",
                                           args=(job, self.report_queue, self.stop_lookups))
            process.start()
            self.workers.append(process)
        deadline = time.monotonic() + 120
        while len(self.reports) < len(self.workers):
            self.drain_reports(timeout=0.5)
            if time.monotonic() > deadline:
                raise RuntimeError("the lookup processes did not report within 120 s")
            if any(r.fatal for r in self.reports.values()):
                raise RuntimeError(next(r.fatal for r in self.reports.values() if r.fatal))

    def drain_reports(self, timeout: float = 0.0) -> None:
        while True:
            try:
                report: LookupReport = self.report_queue.get(timeout=timeout) if timeout else \
                    self.report_queue.get_nowait()
            except queue.Empty:
                return
            timeout = 0.0
            previous = self.reports.get(report.worker)
            if previous is None or not previous.final:
                self.reports[report.worker] = report

    def soak(self) -> None:
        args = self.args
        end = args.duration
        next_publish = args.publish_interval
        next_kill = args.kill_interval
        next_disk = next_sample = 0.0
        next_progress = 60.0
        while self.now() < end:
            now = self.now()
            self.drain_reports()
            self.check_restarts()
            if now >= next_publish:
                self.publish()
                next_publish += args.publish_interval
            if now >= next_kill:
                self.kill_one()
                next_kill += args.kill_interval
            if now >= next_disk:
                self.sample_disks(final=False)
                next_disk = now + 1.0
            if now >= next_sample:
                self.sample_processes(baseline=now >= args.warmup)
                next_sample = now + args.sample_interval
            if now >= next_progress:
                self.progress()
                next_progress += 60.0
            dead = [w for w in self.workers if not w.is_alive()]
            if dead:
                self.drain_reports(timeout=1.0)
                raise RuntimeError(f"lookup process {dead[0].name} exited ({dead[0].exitcode})")
            time.sleep(0.1)

    def progress(self) -> None:
        """One line: the lookups so far and the version each agent serves."""
        reports = list(self.reports.values())
        serving = " ".join(f"v{t.disk_last.current}" if t.disk_last else "?" for t in self.tracks)
        lookups, errors = sum(r.lookups for r in reports), sum(r.exceptions for r in reports)
        self.say(f"lookups {lookups:,}, exceptions {errors}, "
                 f"false negatives {sum(r.false_negatives for r in reports)}; agents serve: {serving}")

    def kill_one(self) -> None:
        candidates = [t for t in self.tracks if t.restarting_since is None]
        if not candidates:
            return
        track = self.rng.choice(candidates)
        old = track.pid
        at = self.now()
        self.fleet.restart_agent(track.agent, signal.SIGKILL)
        track.restarting_since = at
        track.kills.append({"at_s": round(at, 3), "old_pid": old, "new_pid": track.pid, "up_after_s": None})
        self.say(f"SIGKILL {track.name} (pid {old}); restarted as pid {track.pid}")

    def check_restarts(self) -> None:
        for track in self.tracks:
            if track.restarting_since is None:
                continue
            up = False
            with contextlib.suppress(OSError):
                up = track.agent.http_status("/healthz") == 200
            if up:
                at = self.now()
                track.down.append((track.restarting_since, at))
                track.kills[-1]["up_after_s"] = round(at - track.restarting_since, 3)
                track.restarting_since = None

    def sample_disks(self, *, final: bool) -> None:
        at = self.now()
        for track in self.tracks:
            sample = disk_sample(track.agent.data_dir, at)
            track.disk_last = sample
            if sample.current is not None:
                track.currents.add(sample.current)
            if track.disk_peak is None or sample.bytes > track.disk_peak.bytes:
                track.disk_peak = sample
            if final:
                track.disk_end = sample

    def sample_processes(self, *, baseline: bool, final: bool = False) -> None:
        at = self.now()
        for track in self.tracks:
            if track.pid is None or track.restarting_since is not None:
                continue
            sample = process_sample(track.pid, at)
            if sample is None:
                continue
            track.samples.append(sample)
            if baseline and track.start is None:
                track.start = sample
            if final:
                track.end = sample

    def finish(self) -> None:
        args = self.args
        last = len(self.versions)
        self.say(f"soak over; waiting for every agent to come up and reach v{last}")
        deadline = time.monotonic() + 120
        while any(t.restarting_since is not None for t in self.tracks) and time.monotonic() < deadline:
            self.check_restarts()
            time.sleep(0.2)
        try:
            self.fleet.wait_for_version(last, limit_s=args.converge_timeout)
        except FleetError as exc:
            self.convergence_error = str(exc).splitlines()[0]
            self.say(f"NOT converged: {self.convergence_error}")
        for view in self.fleet.views():
            self.converged[view.name] = view.version == last
            if view.status is not None:
                self.final_metrics[view.name] = dict(view.status.get("metrics", {}))
        self.say(f"{sum(self.converged.values())}/{len(self.converged)} agents on v{last}")
        time.sleep(2.0)  # let the last GC and lookups settle
        self.sample_disks(final=True)
        self.sample_processes(baseline=True, final=True)
        self.stop_workers()

    def stop_workers(self) -> None:
        if self.stop_lookups is None:
            return
        self.stop_lookups.set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not all(r.final for r in self.reports.values()):
            self.drain_reports(timeout=0.5)
            if all(not w.is_alive() for w in self.workers):
                self.drain_reports(timeout=1.0)
                break
        for worker in self.workers:
            worker.join(timeout=10)
            if worker.is_alive():
                worker.terminate()
                worker.join(timeout=5)

    def stop_everything(self) -> None:
        with contextlib.suppress(Exception):
            self.stop_workers()
        self.origin = self.fleet.proxy.snapshot() if self.fleet.proxy is not None else None
        self.fleet.stop()

    # -- the result ----------------------------------------------------------------------

    def result(self, wall_s: float) -> dict[str, Any]:
        args = self.args
        keep = args.keep_versions
        max_size = max((v["size"] for v in self.versions), default=0)
        disk_bound = (keep + 1) * max_size + METADATA_SLACK
        announced = {v["version"]: v["announced_at_s"] for v in self.versions}
        soak_end = self.now() if self.t0 else 0.0
        agents = []
        largest_start_rss = max((t.start.rss for t in self.tracks if t.start), default=0)
        largest_start_fds = max((t.start.fds for t in self.tracks if t.start), default=0)
        largest_start_files = max((t.start.files for t in self.tracks if t.start), default=0)
        fd_slack = args.fd_slack if args.fd_slack is not None else 2 * args.agents + 8
        rss_violations = fd_violations = disk_violations = unexcused = 0
        all_delays: list[float] = []
        all_seen: list[float] = []
        disagreeing: list[str] = []
        for track in self.tracks:
            text = track.agent.log()
            log = agent_log_events(text)
            deltas = delta_log(text)
            metrics = self.final_metrics.get(track.name)
            disagreement = (["no /metrics at the end"] if metrics is None
                            else metrics_disagreement(deltas, metrics))
            if disagreement:
                disagreeing.append(f"{track.name}: {disagreement[0]}")
            swapped = set(log.swapped) | track.currents
            delays = {v["version"]: round(log.swapped_at[v["version"]] - v["announced_at"], 3)
                      for v in self.versions if v["version"] in log.swapped_at}
            all_delays.extend(delays.values())
            seen = {v["version"]: round(log.seen_at[v["version"]] - v["announced_at"], 3)
                    for v in self.versions if v["version"] in log.seen_at}
            all_seen.extend(delay for version, delay in seen.items()  # not while the agent was down
                            if not any(a < announced[version] + delay and b > announced[version]
                                       for a, b in track.down))
            skips = skipped_versions(swapped, announced, soak_end, track.down)
            unexcused += sum(not s.excused for s in skips)
            same = track.start is not None and track.end is not None and track.start.pid == track.end.pid
            rss_base = track.start.rss if same and track.start else largest_start_rss
            fds_base = track.start.fds if same and track.start else largest_start_fds
            rss_limit = rss_base * (1 + args.rss_growth) + args.rss_slack_mib * MIB
            fds_limit = fds_base + fd_slack
            files_base = track.start.files if same and track.start else largest_start_files
            files_limit = files_base + args.file_slack
            rss_ok = track.end is not None and track.end.rss <= rss_limit
            fds_ok = track.end is not None and track.end.fds <= fds_limit and track.end.files <= files_limit
            disk_ok = (track.disk_peak is not None and track.disk_peak.bytes <= disk_bound
                       and track.disk_end is not None and track.disk_end.versions <= keep
                       and track.disk_end.staging == 0)
            rss_violations += not rss_ok
            fd_violations += not fds_ok
            disk_violations += not disk_ok
            agents.append({
                "name": track.name,
                "kills": track.kills,
                "process_starts": log.starts,
                "swapped_versions": sorted(swapped),
                "swap_delay_s": delays,
                "announcement_seen_after_s": seen,
                "skipped": [asdict(s) for s in skips],
                "converged": self.converged.get(track.name, False),
                "same_process_start_to_end": same,
                "start": asdict(track.start) if track.start else None,
                "end": asdict(track.end) if track.end else None,
                "rss_limit": int(rss_limit), "fds_limit": fds_limit, "files_limit": files_limit,
                "rss_ok": rss_ok, "fds_ok": fds_ok,
                "rss_timeline": [(round(s.at, 1), s.pid, s.rss, s.fds, s.files) for s in track.samples],
                "disk_peak": asdict(track.disk_peak) if track.disk_peak else None,
                "disk_end": asdict(track.disk_end) if track.disk_end else None,
                "disk_ok": disk_ok,
                "log_errors": dict(log.errors),
                "internal_errors": log.internal_errors,
                "deltas": agent_delta_summary(deltas),
                "metrics_disagreement": disagreement,
                "final_metrics": {k: v for k, v in (metrics or {}).items() if k.startswith(KEPT_METRICS)},
            })
        finals = [r for r in self.reports.values() if r.final]
        lost_workers = len(self.workers) - sum(1 for r in finals if r.fatal is None)
        lookups = summarize_lookups(list(self.reports.values()))
        not_converged = sum(not a["converged"] for a in agents)
        origin = self.origin
        delta_totals = total_delta_summary(a["deltas"] for a in agents)
        no_delta = [v["version"] for v in self.versions[1:]
                    if all(d["base"] != v["version"] - 1 for d in v["deltas"])]
        checks = [
            Check("run aborted", float(self.aborted is not None), 0, "<=", note=(self.aborted or "")[:200]),
            Check("lookups done", float(lookups["lookups"]), 1, ">=", "lookups"),
            Check("lookup exceptions", float(lookups["exceptions"]), 0, "<="),
            Check("false negatives (keys common to consecutive versions)", float(lookups["false_negatives"]),
                  0, "<="),
            Check("lookup processes lost", float(lost_workers), 0, "<="),
            Check("agents not on the last version", float(not_converged), 0, "<="),
            Check("versions skipped by an agent that was up", float(unexcused), 0, "<="),
            Check("agents past the RSS bound", float(rss_violations), 0, "<=",
                  note=f"end <= start x {1 + args.rss_growth:g} + {args.rss_slack_mib} MiB"),
            Check("agents past the FD bound", float(fd_violations), 0, "<=",
                  note=f"end <= start + {fd_slack}, regular files <= start + {args.file_slack}"),
            Check("agents past retention on disk", float(disk_violations), 0, "<=",
                  note=f"peak <= (keep_versions + 1) x file + 1 MiB; end: <= {keep} versions, no staging"),
            Check("agent kills", float(sum(len(t.kills) for t in self.tracks)),
                  float(math.ceil(args.duration / args.kill_interval) - 1), ">="),
            Check("versions after v1 published without a delta from the previous one", float(len(no_delta)),
                  0, "<=", note=", ".join(f"v{v}" for v in no_delta[:10])),
            Check("agents whose /metrics disagree with their log (delta installs, swaps, fallbacks)",
                  float(len(disagreeing)), 0, "<=", note="; ".join(disagreeing[:3])[:200]),
        ]
        if args.deltas:
            checks.append(Check("installs by delta", float(delta_totals["installs_by_delta"]), 1, ">=",
                                note="deltas on"))
        return {
            "benchmark": "soak",
            "command": "python benchmarks/soak.py " + shlex.join(sys.argv[1:]),
            "machine": machine_info(),
            "load_average_end": load_average(),
            "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
            "discovery": self.fleet.discovery,
            "swarm_settings": self.fleet.spec.swarm,
            "poll_interval_s": self.fleet.spec.poll_interval_s,
            "wall_seconds": round(wall_s, 1),
            "soak_seconds": round(soak_end, 1),
            "keys": {"stable": self.plan.stable, "rolling_window": self.plan.window,
                     "churn_per_version": self.plan.churn, "per_version": self.plan.keys_per_version},
            "versions": self.versions,
            "origin": None if origin is None else {
                "requests": origin.requests, "faults": origin.faults,
                "fault_share": round(origin.faults / origin.requests, 4) if origin.requests else None,
                "filter_requests": origin.filter_requests, "filter_bytes": origin.filter_bytes,
            },
            "bounds": {"disk_bytes": disk_bound, "max_file_size": max_size, "keep_versions": keep,
                       "rss_growth": args.rss_growth, "rss_slack_mib": args.rss_slack_mib,
                       "fd_slack": fd_slack, "file_slack": args.file_slack},
            "lookups": lookups,
            "deltas": delta_totals,
            "swap_delay_s": _delay_stats(all_delays),
            "announcement_seen_after_s": _delay_stats(all_seen),
            "agents": agents,
            "convergence_error": self.convergence_error,
            "aborted": self.aborted,
            "events": self.events,
            "checks": [c.as_dict() for c in checks],
            "passed": all(c.passed is not False for c in checks),
        }


def _delay_stats(delays: list[float]) -> dict[str, Any]:
    """Quantiles of seconds measured from versions' announcements, over agents and versions."""
    ordered = sorted(delays)
    if not ordered:
        return {"count": 0}
    return {"count": len(ordered), "p50": ordered[len(ordered) // 2],
            "p90": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], "max": ordered[-1]}


def swarm_settings(overrides: list[str]) -> dict[str, object]:
    """SOAK_SWARM updated with ``KEY=VALUE`` overrides (numbers parsed; "default" drops the key)."""
    settings = dict(SOAK_SWARM)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--swarm expects KEY=VALUE, got {item!r}")
        if value == "default":
            settings.pop(key, None)
            continue
        try:
            settings[key] = float(value) if "." in value else int(value)
        except ValueError:
            settings[key] = value
    return settings


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    day = 86400.0
    parser.add_argument("--agents", type=positive_int(1000), default=16)
    parser.add_argument("--duration", type=positive_float(30 * day), default=600.0,
                        help="seconds of churn after warm-up")
    parser.add_argument("--publish-interval", type=positive_float(day), default=20.0)
    parser.add_argument("--kill-interval", type=positive_float(day), default=30.0)
    parser.add_argument("--fault-rate", type=non_negative_float(1.0), default=0.3,
                        help="share of origin requests that fail")
    parser.add_argument("--lookup-processes", type=positive_int(1000), default=2)
    parser.add_argument("--keep-versions", type=positive_int(1000), default=2)
    parser.add_argument("--deltas", action=argparse.BooleanOptionalAction, default=True,
                        help="the agents' install.deltas (--no-deltas: always the full file)")
    parser.add_argument("--stable-keys", type=non_negative_int(10**10), default=800_000)
    parser.add_argument("--rolling-keys", type=non_negative_int(10**10), default=200_000,
                        help="rolling window per version")
    parser.add_argument("--churn", type=non_negative_int(10**10), default=20_000,
                        help="rolling keys dropped and added per version")
    parser.add_argument("--fpp", type=open_fraction, default=0.01)
    parser.add_argument("--warmup", type=non_negative_float(30 * day), default=60.0,
                        help="seconds into the soak of the agents' start RSS/FD sample")
    parser.add_argument("--sample-interval", type=positive_float(day), default=5.0,
                        help="RSS/FD sampling period")
    parser.add_argument("--batch", type=positive_int(10**8), default=2048, help="lookups per timed batch")
    parser.add_argument("--check-sample", type=non_negative_int(10**10), default=50_000,
                        help="stable and rolling keys sampled for checking, each")
    parser.add_argument("--lookup-nice", type=int_at_least(0, 19), default=10,
                        help="niceness of the lookup processes")
    parser.add_argument("--converge-timeout", type=positive_float(day), default=180.0)
    parser.add_argument("--rss-growth", type=non_negative_float(100.0), default=0.10,
                        help="allowed relative RSS growth")
    parser.add_argument("--rss-slack-mib", type=non_negative_int(1024 * 1024), default=16,
                        help="allowed absolute RSS growth")
    parser.add_argument("--fd-slack", type=non_negative_int(10**6),
                        help="allowed growth of open FDs (default 2 x agents + 8: a connection per peer "
                             "per kept version may open or close)")
    parser.add_argument("--file-slack", type=non_negative_int(10**6), default=4,
                        help="allowed growth of FDs of regular files (filter files, logs)")
    parser.add_argument("--swarm", action="append", default=[], metavar="KEY=VALUE",
                        help="an agent [swarm] setting over the soak's ('default': the agent's own)")
    parser.add_argument("--discovery", choices=("auto", "tracker", "dht"), default="auto")
    parser.add_argument("--s3-read-timeout", type=positive_float(3600), default=1.0,
                        help="agents' S3 read timeout: a stalled document GET costs this, then a retry")
    parser.add_argument("--s3-attempts", type=positive_int(100), default=3,
                        help="agents' S3 attempts per request")
    parser.add_argument("--seed", type=int, default=1, help="seed of the kill schedule")
    parser.add_argument("--work-dir", type=work_dir,
                        help="keep the fleet here (default: a temporary directory)")
    parser.add_argument("--json", type=output_path, help="write the results here")
    parser.add_argument("--markdown", type=output_path, help="write a report here")
    args = parser.parse_args(argv)
    try:
        KeyPlan(args.stable_keys, args.rolling_keys, args.churn)
        swarm_settings(args.swarm)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    stop_on_signals()  # unwinds through Soak.run's cleanup
    args = parse_args(argv)
    root = args.work_dir or Path(tempfile.mkdtemp(prefix="bloomswarm-soak-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        result = Soak(args, root).run()
    finally:
        if args.work_dir is None:
            shutil.rmtree(root, ignore_errors=True)
    print()
    for check in result["checks"]:
        print(Check(check["name"], check["value"], check["target"], check["op"], check["unit"],
                    check["note"]).line())
    if args.json is not None:
        write_json(args.json, result)
        print(f"wrote {args.json}")
    if args.markdown is not None:
        args.markdown.write_text(render_markdown(result), encoding="utf-8")
        print(f"wrote {args.markdown}")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
