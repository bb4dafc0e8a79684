"""``bloomswarm demo``: the whole system on this machine, with nothing to set up.

It starts moto's S3 server on 127.0.0.1 (the origin, read by the agents through a proxy
that counts the bytes it sends), opentracker when it is installed and otherwise the DHT
bootstrapped from the first agent, and N agents as separate ``bloomswarm agent run``
processes (see :class:`bloomswarm.sandbox.fleet.LocalFleet`), every one with the agent's
default ``[swarm]`` settings beside addresses and discovery (the origin policy is the
production one, and so is the poll interval: 2 s, jitter 0.5 s). A lookup client process
(:mod:`.demo_client`) reads the first agent's data directory through LiveFilter. Each
round builds a version from generated keys (:mod:`.demo_data`), publishes it with the
publisher's code and follows every agent until it swaps (:mod:`.demo_view` draws it).
The summary gives each round's publish-to-last-swap time and origin bytes, and the
client's rate and error counts; the exit code is 1 when a round did not reach every
agent or the client saw an error or a false negative.

With ``--filters N`` every agent follows N named filters (f01 .. fN, one ``[[filters]]``
table each) instead of one: each round builds a version of every filter (``--keys``
split between them, at least :data:`MIN_FILTER_KEYS` each), publishes them and moves
index.json once (:meth:`~bloomswarm.sandbox.fleet.LocalFleet.publish_filters`), and
follows every agent until it serves every filter's new version; the origin's bytes are
set against the filters' files added up, and the lookup client reads f01.

Ctrl-C (or SIGTERM) stops the client, the agents, the tracker and the S3 server, each by
its PID, and removes the files (unless ``--dir``).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import logging
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .arguments import fpp_value, int_range, positive_seconds_value, seconds_value
from .signals import sigterm_interrupts

if TYPE_CHECKING:
    from bloomswarm.sandbox.fleet import AgentView, LocalFleet

    from .demo_client import LookupClient
    from .demo_data import KeyPlan
    from .demo_view import DemoState, RoundResult, View

DEMO_MODULES = ("moto", "flask", "flask_cors")
"""What moto's S3 server needs (the ``demo`` extra: ``moto[server]``)."""
INSTALL_HINT = ("moto's S3 server is not installed; install the demo extra: pip install 'bloomswarm[demo]' "
                "(in a checkout: pip install '.[demo]', or run scripts/run.sh)")
MAX_AGENTS = 100
MAX_FILTERS = 1000
MIN_FILTER_KEYS = 1000
"""Keys per named filter at the least (``--keys`` / ``--filters`` when more)."""
POLL_S = 0.25


def register(commands: Any) -> None:
    """Add the ``demo`` subcommand."""
    demo = commands.add_parser(
        "demo", help="run the whole system on this machine: S3, tracker or DHT, publisher, agents",
        description="Start moto's S3 server, opentracker (or the DHT) and N agents on 127.0.0.1, "
        "publish versions of a filter built from generated keys, and show every agent download "
        "and swap while a lookup client process queries one agent's data directory.")
    demo.add_argument("--agents", type=int_range(1, MAX_AGENTS), default=8, metavar="N",
                      help="agent processes (8)")
    demo.add_argument("--keys", type=int_range(1000), default=5_000_000, metavar="N",
                      help="keys per version (5,000,000); with --filters, per round, split "
                      f"between the filters (at least {MIN_FILTER_KEYS:,} each)")
    demo.add_argument("--filters", type=int_range(1, MAX_FILTERS), metavar="N",
                      help="every agent follows N named filters (f01 .. fN) through one index, and "
                      "each round publishes a new version of all of them at once (default: one "
                      "unnamed filter)")
    demo.add_argument("--rounds", type=int_range(1, 1000), default=2, metavar="N",
                      help="versions to publish, v1 included (2: v1, then v2)")
    demo.add_argument("--fpp", type=fpp_value, default=0.01, metavar="RATE",
                      help="target false-positive rate (0.01)")
    demo.add_argument("--discovery", choices=("auto", "tracker", "dht"), default="auto",
                      help="how agents find each other: opentracker, the DHT, or auto: "
                      "opentracker when installed, else the DHT (auto)")
    demo.add_argument("--dir", type=Path, metavar="DIR",
                      help="keep the run's files (agent data and logs) in a new folder under DIR "
                      "(default: a temporary folder, removed at the end)")
    demo.add_argument("--timeout", type=positive_seconds_value, default=300.0, metavar="SECONDS",
                      help="seconds a round may take to reach every agent (300)")
    demo.add_argument("--pause", type=seconds_value, default=2.0, metavar="SECONDS",
                      help="seconds to watch the lookup client after each round (2)")
    demo.add_argument("--plain", action="store_true",
                      help="print progress lines instead of the live table (automatic when "
                      "stdout is not a terminal)")
    demo.set_defaults(handler=run_demo)


def filter_names(count: int) -> tuple[str, ...]:
    """The demo's ``count`` filter names: f01 .. fN, zero-padded to one width (2 digits
    at least)."""
    width = max(2, len(str(count)))
    return tuple(f"f{number:0{width}d}" for number in range(1, count + 1))


def keys_per_filter(keys: int, filters: int) -> int:
    """Each named filter's keys per version: ``keys`` split evenly, :data:`MIN_FILTER_KEYS`
    at the least."""
    return max(MIN_FILTER_KEYS, keys // filters)


def missing_modules() -> list[str]:
    """The modules of the demo extra that cannot be imported."""
    return [name for name in DEMO_MODULES if importlib.util.find_spec(name) is None]


def run_demo(args: argparse.Namespace) -> int:
    if missing_modules():
        print(f"bloomswarm demo: error: {INSTALL_HINT}", file=sys.stderr)
        return 1
    if args.discovery == "tracker" and shutil.which("opentracker") is None:
        print("bloomswarm demo: error: opentracker is not on PATH: install it (e.g. apt-get install "
              "opentracker) or use --discovery dht", file=sys.stderr)
        return 1
    if not getattr(args, "verbose", False):
        for name in ("", "bloomswarm"):  # the demo prints its own progress; log lines would tear the table
            logging.getLogger(name).setLevel(logging.WARNING)
    with sigterm_interrupts():
        return Demo(args).run()


@contextlib.contextmanager
def _shielded() -> Iterator[None]:
    """Ignore Ctrl-C and SIGTERM while everything stops (a second Ctrl-C must not leave
    processes behind)."""
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0]


class Demo:
    """One run of the demo (see the module docstring)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from rich.console import Console

        from .demo_data import KeyPlan

        self.args = args
        self.filters = filter_names(args.filters) if args.filters else ()
        """Named filters every agent follows (empty: the single filter)."""
        keys = keys_per_filter(args.keys, len(self.filters)) if self.filters else args.keys
        self.plan: KeyPlan = KeyPlan(keys, args.rounds)
        """The keys of the single filter, or of each named filter (:meth:`KeyPlan.for_filter`)."""
        self.console = Console(highlight=False)
        self.live = self.console.is_terminal and not args.plain
        self.keep = args.dir is not None
        self.rounds: list[RoundResult] = []
        self.client: LookupClient | None = None
        self.discovery = "-"

    def say(self, text: str) -> None:
        print(text, flush=True)

    def run(self) -> int:
        from bloomswarm.sandbox.fleet import FleetError, FleetSpec, LocalFleet

        root = self._make_root()
        args = self.args
        spec = FleetSpec(agents=args.agents, discovery=args.discovery, filters=self.filters,
                         poll_interval_s=None)  # the agent's defaults, its poll interval included
        versions = "v1" if args.rounds == 1 else f"v1 to v{args.rounds}"
        report = None
        error: str | None = None
        fleet: LocalFleet | None = None
        try:
            try:
                self.say(f"bloomswarm demo: {args.agents} agents, {self._keys_text()}, "
                         f"{args.rounds} round{'s' if args.rounds > 1 else ''} ({versions}), "
                         f"false-positive target {args.fpp:g}")
                self.say(f"files: {root}" + ("" if self.keep else " (removed at the end; --dir keeps them)"))
                fleet = LocalFleet(root, spec)
                self.discovery = "opentracker" if fleet.discovery == "tracker" else "DHT"
                self.say(f"discovery: {self._discovery_text(fleet)}")
                self._start(fleet)
                self._run_rounds(fleet)
            except (FleetError, RuntimeError, OSError) as exc:
                error = _first_line(exc)
            except KeyboardInterrupt:
                self.say("interrupted: stopping the lookup client, the agents, the tracker and the S3 server")
                raise
        finally:
            with _shielded():
                if self.client is not None:
                    report = self.client.stop()
                if fleet is not None:
                    fleet.stop()
                if not self.keep and (error is None or fleet is None):
                    shutil.rmtree(root, ignore_errors=True)
        return self._finish(report, error, root)

    def _keys_text(self) -> str:
        if not self.filters:
            return f"{self.plan.keys:,} keys per version"
        return (f"{len(self.filters)} filters ({self.filters[0]} to {self.filters[-1]}) of "
                f"{self.plan.keys:,} keys per version each")

    @property
    def client_filter(self) -> str | None:
        """The named filter the lookup client reads: the first (None: the single filter)."""
        return self.filters[0] if self.filters else None

    def _make_root(self) -> Path:
        if self.args.dir is None:
            return Path(tempfile.mkdtemp(prefix="bloomswarm-demo-"))
        base = Path(self.args.dir)
        base.mkdir(parents=True, exist_ok=True)
        root = base / time.strftime("run-%Y%m%d-%H%M%S")
        suffix = 1
        while root.exists():
            root = base / (time.strftime("run-%Y%m%d-%H%M%S") + f"-{suffix}")
            suffix += 1
        root.mkdir()
        return root

    def _discovery_text(self, fleet: LocalFleet) -> str:
        requested = self.args.discovery
        if fleet.discovery == "tracker":
            found = shutil.which("opentracker")
            return f"opentracker ({found})" + (", found on PATH" if requested == "auto" else "")
        if requested == "dht":
            return "the DHT, bootstrapped from agent0 (--discovery dht)"
        return ("the DHT, bootstrapped from agent0 (opentracker is not installed; with it, "
                "e.g. `apt-get install opentracker`, agents would use a tracker)")

    # -- start -------------------------------------------------------------------------------

    def _start(self, fleet: LocalFleet) -> None:
        from .demo_client import LookupClient

        started = time.monotonic()
        fleet.start(on_step=lambda what: self.say(f"starting {what} on 127.0.0.1"))
        assert fleet.s3 is not None and fleet.proxy is not None
        self.say(f"  S3 endpoint {fleet.s3.endpoint_url}, bucket {fleet.s3.bucket}; agents read it "
                 f"through the counting proxy {fleet.proxy.endpoint}")
        if fleet.tracker is not None:
            self.say(f"  tracker {fleet.tracker.announce_url}")
        self._wait_until_up(fleet)
        count = len(fleet.agents)
        self.say(f"agents up: {count}/{count} after {time.monotonic() - started:.1f} s (each is a "
                 f"`bloomswarm agent run` process; data and logs in {fleet.root}/agentN)")
        self.client = LookupClient(fleet.agents[0].data_dir, self.plan, self.client_filter).start()
        reads = "data directory" if self.client_filter is None else f"filter {self.client_filter}"
        self.say(f"lookup client started (pid {self.client.pid}): LiveFilter on agent0's {reads}")

    def _wait_until_up(self, fleet: LocalFleet) -> None:
        from bloomswarm.sandbox.fleet import FleetError

        pending = list(fleet.agents)
        deadline = time.monotonic() + max(120.0, 10.0 * len(pending))
        shown = -1
        while pending:
            for agent in list(pending):
                if agent.process is None or agent.process.poll() is not None:
                    raise FleetError(f"{agent.root.name} exited at start; its log: {agent.log_path}")
                with contextlib.suppress(OSError):
                    if agent.http_status("/healthz") == 200:
                        pending.remove(agent)
            up = len(fleet.agents) - len(pending)
            if up != shown and pending:
                self.say(f"  agents up: {up}/{len(fleet.agents)}")
                shown = up
            if pending and time.monotonic() > deadline:
                raise FleetError(f"{pending[0].root.name} did not come up; its log: {pending[0].log_path}")
            time.sleep(0.2)

    # -- rounds ------------------------------------------------------------------------------

    def _run_rounds(self, fleet: LocalFleet) -> None:
        from .demo_view import DemoState, LiveView, PlainView, size_text

        state = DemoState(agents=len(fleet.agents), rounds=self.args.rounds, client_agent="agent0",
                          client_filter=self.client_filter, filters=len(self.filters))
        view: View = LiveView(self.console) if self.live else PlainView()
        state.views = fleet.views()
        run_round = self._filters_round if self.filters else self._round
        with view:
            for number in range(1, self.args.rounds + 1):
                result = run_round(fleet, number, state, view)
                self.rounds.append(result)
                if not result.converged:
                    every = "every agent and filter" if self.filters else "every agent"
                    view.event(f"round {number}: v{result.version} did not reach {every}: {result.error}")
                    return
                if self.filters:
                    view.event(f"round {number}: all {state.agents} agents have all {len(self.filters)} "
                               f"filters on v{result.version}, last swap {result.last_swap_s:.2f} s after "
                               f"the publish (index.json moving); origin sent {result.origin_copies:.2f} x "
                               f"the files ({size_text(result.file_size)})")
                else:
                    view.event(f"round {number}: all {state.agents} agents on v{result.version}, last swap "
                               f"{result.last_swap_s:.2f} s after the publish; origin sent "
                               f"{result.origin_copies:.2f} x the file")
                self._watch_client(fleet, state, view, result.version)

    def _round(self, fleet: LocalFleet, number: int, state: DemoState, view: View) -> RoundResult:
        from bloomswarm.sandbox.fleet import FleetError

        from .demo_data import build_version
        from .demo_view import RoundResult, size_text

        keys = self.plan.keys
        state.current = None
        state.phase = f"round {number}/{self.args.rounds}: building v{number} from {keys:,} keys"
        view.event(state.phase)
        view.update(state)

        def built(done: int) -> None:
            state.phase = f"round {number}/{self.args.rounds}: building v{number}: {done:,}/{keys:,} keys"
            self._refresh_client(state)
            view.update(state)

        started = time.monotonic()
        builder = build_version(self.plan, number, self.args.fpp, on_progress=built)
        build_s = time.monotonic() - started
        state.phase = (f"round {number}/{self.args.rounds}: publishing v{number} (file, torrent, upload "
                       "to S3, signed manifest, latest.json)")
        view.update(state)
        origin_before = fleet.origin_bytes()
        peers_before = sum(v.bytes_from_peers for v in fleet.views())
        started = time.monotonic()
        published = fleet.publish(builder)
        result = RoundResult(number, published.version, len(fleet.agents), published.manifest.size, build_s,
                             time.monotonic() - started, published.announced_at)
        view.event(f"v{result.version} published: {keys:,} keys, {size_text(result.file_size)} "
                   f"({published.manifest.piece_size // 1024} KiB pieces); built in {result.build_s:.1f} s, "
                   f"written, uploaded and announced in {result.publish_s:.1f} s")
        previous = published.manifest.delta_from(published.version - 1)
        result.delta_size = previous.size if previous is not None else 0
        state.current = result
        state.phase = "distributing"

        def polled(views: Sequence[AgentView]) -> None:
            state.views = views
            state.origin_bytes = fleet.origin_bytes()
            result.origin_bytes = state.origin_bytes - origin_before
            result.peer_bytes = sum(v.bytes_from_peers for v in views) - peers_before
            for agent in views:
                if agent.name not in result.swaps and agent.version is not None \
                        and agent.version >= result.version:
                    at = agent.swapped_at(result.version) or time.time()
                    result.swaps[agent.name] = at - result.announced_at
                    if agent.swapped_by_delta(result.version):
                        result.by_delta.add(agent.name)
                    view.event(f"  {agent.name} swapped to v{result.version} "
                               f"{result.swaps[agent.name]:.2f} s after the publish (so far from peers "
                               f"{size_text(agent.bytes_from_peers)}, from origin "
                               f"{size_text(agent.bytes_from_origin)}"
                               f"{'; by delta' if agent.name in result.by_delta else ''})")
            self._refresh_client(state)
            view.update(state)

        try:
            swapped = fleet.wait_for_version(result.version, limit_s=self.args.timeout, interval_s=POLL_S,
                                             on_poll=polled)
            result.swaps.update({name: at - result.announced_at for name, at in swapped.items()})
            result.by_delta.update(v.name for v in fleet.views() if v.swapped_by_delta(result.version))
            state.phase = "every agent swapped"
        except FleetError as exc:
            result.error = _first_line(exc)
            state.phase = f"failed: {result.error}"
        view.update(state)
        return result

    def _filters_round(self, fleet: LocalFleet, number: int, state: DemoState, view: View) -> RoundResult:
        """One round with named filters: build a version of each, publish them all and move
        index.json once, then follow every agent until it serves all of them."""
        from bloomswarm.sandbox.fleet import FleetError

        from .demo_data import build_version
        from .demo_view import RoundResult, size_text

        names, rounds = self.filters, self.args.rounds
        total = self.plan.keys * len(names)
        state.current = None
        state.phase = (f"round {number}/{rounds}: building v{number} of {len(names)} filters from "
                       f"{total:,} keys")
        view.event(state.phase)
        view.update(state)
        started = time.monotonic()
        builders = {}
        for index, name in enumerate(names):
            builders[name] = build_version(self.plan.for_filter(index), number, self.args.fpp)
            state.phase = (f"round {number}/{rounds}: building v{number}: {index + 1}/{len(names)} "
                           "filters")
            self._refresh_client(state)
            view.update(state)
        build_s = time.monotonic() - started
        state.phase = (f"round {number}/{rounds}: publishing v{number} of {len(names)} filters (each: "
                       "file, torrent, upload to S3, signed manifest, latest.json), then index.json")
        view.update(state)
        origin_before = fleet.origin_bytes()
        peers_before = sum(v.bytes_from_peers for v in fleet.views())
        started = time.monotonic()
        published = fleet.publish_filters(builders)
        manifests = published.manifests
        result = RoundResult(number, max(m.version for m in manifests.values()), len(fleet.agents),
                             sum(m.size for m in manifests.values()), build_s, time.monotonic() - started,
                             published.announced_at, targets={n: m.version for n, m in manifests.items()})
        deltas = [m.delta_from(m.version - 1) for m in manifests.values()]
        result.delta_size = sum(d.size for d in deltas if d is not None)
        view.event(f"v{result.version} of {len(names)} filters published: {self.plan.keys:,} keys and "
                   f"{size_text(result.file_size / len(names))} each, {size_text(result.file_size)} in "
                   f"all; built in {result.build_s:.1f} s, written, uploaded and announced (index.json "
                   f"moved once) in {result.publish_s:.1f} s")
        state.current = result
        state.phase = "distributing"
        deadline = time.monotonic() + self.args.timeout
        try:
            while True:
                views = fleet.views()
                state.views = views
                state.origin_bytes = fleet.origin_bytes()
                result.origin_bytes = state.origin_bytes - origin_before
                result.peer_bytes = sum(v.bytes_from_peers for v in views) - peers_before
                for agent in views:
                    if result.record_filters(agent, time.time()):
                        used = sum(key.startswith(f"{agent.name}/") for key in result.by_delta)
                        view.event(f"  {agent.name} has all {len(names)} filters on v{result.version}, last "
                                   f"swap {result.swaps[agent.name]:.2f} s after the publish (so far from "
                                   f"peers {size_text(agent.bytes_from_peers)}, from origin "
                                   f"{size_text(agent.bytes_from_origin)}"
                                   f"{f'; {used} by delta' if used else ''})")
                self._refresh_client(state)
                view.update(state)
                dead = [agent for agent in views if not agent.alive]
                if dead:
                    raise FleetError(f"{dead[0].name} exited; its log: {fleet.root / dead[0].name}/agent.log")
                if len(result.swaps) == len(views):
                    break
                if time.monotonic() > deadline:
                    missing = [agent.name for agent in views if agent.name not in result.swaps]
                    raise FleetError(f"v{result.version} did not reach every filter of {len(missing)} agents "
                                     f"in {self.args.timeout:.0f} s: {', '.join(missing[:8])}")
                time.sleep(POLL_S)
            state.phase = "every agent swapped every filter"
        except FleetError as exc:
            result.error = _first_line(exc)
            state.phase = f"failed: {result.error}"
        view.update(state)
        return result

    def _watch_client(self, fleet: LocalFleet, state: DemoState, view: View, version: int) -> None:
        """Follow the agents and the client for ``--pause`` seconds, and at least until the
        client answers from ``version`` (at most 30 s)."""
        started = time.monotonic()
        state.phase = "every agent swapped; watching the lookup client"
        while True:
            state.views = fleet.views()
            state.origin_bytes = fleet.origin_bytes()
            report = self._refresh_client(state)
            view.update(state)
            elapsed = time.monotonic() - started
            caught_up = report is not None and report.version is not None and report.version >= version
            if (caught_up and elapsed >= self.args.pause) or elapsed > 30.0:
                return
            time.sleep(POLL_S)

    def _refresh_client(self, state: DemoState) -> Any:
        if self.client is not None:
            state.client = self.client.poll()
            self.client.check_alive()
        return state.client

    # -- the end -----------------------------------------------------------------------------

    def _finish(self, report: Any, error: str | None, root: Path) -> int:
        from .demo_view import failures, summary_lines

        if error is not None and not self.rounds:  # nothing ran: the error alone
            if root.exists():
                self.say(f"files kept for inspection (agent logs: {root}/agentN/agent.log)")
            print(f"bloomswarm demo: error: {error}", file=sys.stderr)
            return 1
        setup = f"{self.args.agents} agents, {self.discovery}, {self._keys_text()}, fpp {self.args.fpp:g}"
        for line in summary_lines(self.rounds, report, self.args.agents, "agent0", setup,
                                  client_filter=self.client_filter):
            self.say(line)
        problems = failures(self.rounds, self.args.rounds, report)
        if error is not None:
            problems.insert(0, error)
        if problems:
            self.say(f"  result: FAILED: {'; '.join(problems)}")
            if root.exists():
                self.say(f"  files kept for inspection (agent logs: {root}/agentN/agent.log)")
            print(f"bloomswarm demo: error: {problems[0]}", file=sys.stderr)
            return 1
        self.say("  result: OK")
        return 0
