"""What the demo shows: a live table on a terminal, plain progress lines otherwise, and
the final summary.

:class:`DemoState` is what the demo knows at one moment (agents' /status, the round in
progress, the origin's counter, the lookup client's last report). A view is told about
events (printed as lines, above the table on a terminal) and state updates (redrawn on a
terminal, summarised every few seconds otherwise). With named filters (``demo --filters
N``) a round publishes a version of every filter at once; an agent has swapped when it
serves every one of them, and the table counts, per agent, the filters already there.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Protocol, TextIO

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from bloomswarm.sandbox.fleet import AgentView

from .demo_client import ClientReport

PLAIN_INTERVAL_S = 2.0
"""Seconds between two plain progress lines."""


def size_text(count: float) -> str:
    """Bytes in binary units: ``0 B``, ``512 KiB``, ``5.9 MiB``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit in ("B", "KiB") else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def rate_text(rate: float) -> str:
    """Lookups per second: ``950K/s``, ``24.1M/s``."""
    return f"{rate / 1e6:.1f}M/s" if rate >= 1e6 else f"{rate / 1e3:.0f}K/s"


def filters_on(view: AgentView, targets: Mapping[str, int]) -> int:
    """How many of ``targets``' filters (name -> version) ``view`` serves at that version
    or a later one."""
    count = 0
    for name, version in targets.items():
        current = view.filter(name).version
        count += current is not None and current >= version
    return count


@dataclass
class RoundResult:
    """One published version (of the single filter, or of every named filter at once)
    and how it reached the fleet."""

    round: int
    version: int
    agents: int
    file_size: int
    """The filter file's size (named filters: their files' sizes added up)."""
    build_s: float
    publish_s: float
    """Writing the file, making the torrent, uploading to S3, signing, moving latest.json
    (named filters: every filter's, then index.json)."""
    announced_at: float
    """Wall clock just before latest.json (named filters: index.json) moved to this version."""
    swaps: dict[str, float] = field(default_factory=dict)
    """Agent name -> seconds from the announcement to its swap (named filters: to its
    last filter's swap, once it serves every one)."""
    origin_bytes: int = 0
    """Payload bytes (filter files and deltas) the origin sent during this round."""
    peer_bytes: float = 0.0
    """Bytes the agents received from each other during this round."""
    delta_size: int = 0
    """Size of the delta from the previous version that the manifest lists (0: none)."""
    by_delta: set[str] = field(default_factory=set)
    """Agents that installed this version by applying that delta (named filters:
    ``"agent/filter"`` for each filter installed so)."""
    error: str | None = None
    targets: dict[str, int] = field(default_factory=dict)
    """Named filter -> the version this round published of it; empty: the single filter."""
    filter_swaps: dict[str, dict[str, float]] = field(default_factory=dict)
    """Agent name -> named filter -> seconds from the announcement to that filter's swap."""

    @property
    def converged(self) -> bool:
        return self.error is None and len(self.swaps) == self.agents

    @property
    def last_swap_s(self) -> float | None:
        return max(self.swaps.values()) if self.swaps else None

    @property
    def first_swap_s(self) -> float | None:
        return min(self.swaps.values()) if self.swaps else None

    @property
    def origin_copies(self) -> float:
        """Origin bytes as a multiple of the file size."""
        return self.origin_bytes / self.file_size if self.file_size else 0.0

    @property
    def delta_text(self) -> str:
        """The delta's size as a share of the file and how many agents used it, or "-"
        (named filters: the deltas' total against the files', and the filter swaps made by
        delta out of all)."""
        if not self.delta_size or not self.file_size:
            return "-"
        used = (f"{len(self.by_delta)}/{self.agents * len(self.targets)} swaps" if self.targets
                else f"{len(self.by_delta)}/{self.agents} agents")
        return f"{size_text(self.delta_size)} = {100 * self.delta_size / self.file_size:.1f}%, {used}"

    def record_filters(self, view: AgentView, now: float) -> bool:
        """Note each of :attr:`targets`' filters that ``view`` now serves (its swap time
        from /status, else ``now``); True when that completes the agent: it then has a
        :attr:`swaps` entry, its last filter's swap."""
        done = self.filter_swaps.setdefault(view.name, {})
        for name, version in self.targets.items():
            one = view.filter(name)
            if name not in done and one.version is not None and one.version >= version:
                done[name] = (one.swapped_at(version) or now) - self.announced_at
                if one.swapped_by_delta(version):
                    self.by_delta.add(f"{view.name}/{name}")
        if view.name in self.swaps or len(done) < len(self.targets):
            return False
        self.swaps[view.name] = max(done.values(), default=0.0)
        return True


@dataclass
class DemoState:
    """Everything a view draws."""

    agents: int
    rounds: int
    client_agent: str
    phase: str = "starting"
    views: Sequence[AgentView] = ()
    current: RoundResult | None = None
    origin_bytes: int = 0
    """Filter bytes the origin sent since the fleet started."""
    client: ClientReport | None = None
    client_filter: str | None = None
    """The named filter the lookup client reads (None: the single filter)."""
    filters: int = 0
    """Named filters every agent follows (0: the single filter)."""


class View(Protocol):
    def event(self, text: str) -> None: ...
    def update(self, state: DemoState) -> None: ...
    def __enter__(self) -> View: ...
    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None: ...


def _agent_cells(view: AgentView, state: DemoState) -> list[str]:
    if state.filters:
        return _filter_agent_cells(view, state)
    target = state.current.version if state.current is not None else None
    status = view.status or {}
    download = status.get("download") or {}
    version = view.version
    if not view.alive:
        state_text, progress = "exited", ""
    elif view.status is None:
        state_text, progress = "starting", ""
    elif target is not None and version is not None and version >= target:
        state_text, progress = "serving", "100%"
    elif download and download.get("version") == target:
        state_text = str(download.get("state") or "downloading")
        progress = f"{100 * float(download.get('progress') or 0.0):.0f}%"
    else:
        state_text, progress = "polling", "0%" if target is not None else ""
    swap = ""
    if state.current is not None and view.name in state.current.swaps:
        swap = f"{state.current.swaps[view.name]:.2f} s"
    return [view.name, "-" if version is None else f"v{version}", state_text, progress, str(view.peers),
            size_text(view.bytes_from_peers), size_text(view.bytes_from_origin), swap]


def _filter_agent_cells(view: AgentView, state: DemoState) -> list[str]:
    """An agent of named filters: how many are on the round's version, the downloads of
    the others, and the swap of its last filter."""
    current = state.current
    targets = current.targets if current is not None else {}
    on = filters_on(view, targets)
    downloads = [_download_progress(view.filter(name), version) for name, version in targets.items()]
    started = [p for p in downloads if p is not None]
    if not view.alive:
        state_text, progress = "exited", ""
    elif view.status is None or "filters" not in view.status:
        state_text, progress = "starting", ""
    elif current is None:
        state_text, progress = "waiting", ""
    elif on == len(targets):
        state_text, progress = "serving", "100%"
    else:
        state_text = f"downloading {len(started)}" if started else "polling"
        progress = f"{100 * (on + sum(started)) / len(targets):.0f}%"
    on_text = f"{on}/{len(targets)} on v{current.version}" if current is not None else f"-/{state.filters}"
    swap = f"{current.swaps[view.name]:.2f} s" if current is not None and view.name in current.swaps else ""
    return [view.name, on_text, state_text, progress, str(view.peers),
            size_text(view.bytes_from_peers), size_text(view.bytes_from_origin), swap]


def _download_progress(one: AgentView, version: int) -> float | None:
    """The progress of ``one``'s download of ``version`` (None: not on it, or not under way)."""
    if one.version is not None and one.version >= version:
        return None
    download = (one.status or {}).get("download") or {}
    return one.progress if download.get("version") == version else None


def _source(agent: str, filter: str | None) -> str:
    """What the lookup client reads."""
    return f"{agent}'s data dir" if filter is None else f"{agent}'s filter {filter}"


def client_line(report: ClientReport | None, agent: str, filter: str | None = None) -> str:
    """One line about the lookup client (reading ``agent``'s data dir, or its named
    filter ``filter``)."""
    source = _source(agent, filter)
    if report is None:
        return f"lookup client ({source}): starting"
    if report.version is None:
        return f"lookup client (pid {report.pid}, {source}): waiting for the first version"
    return (f"lookup client (pid {report.pid}, {source}): v{report.version}, "
            f"{rate_text(report.rate)}, {report.lookups:,} lookups, {report.errors} errors, "
            f"{report.false_negatives} false negatives, "
            f"{100 * report.false_positive_rate:.2f}% false positives")


def origin_line(state: DemoState) -> str:
    line = f"origin (S3 through the counting proxy): {size_text(state.origin_bytes)} sent in all"
    if state.current is not None:
        line += (f"; this round {size_text(state.current.origin_bytes)} = "
                 f"{state.current.origin_copies:.2f} x {_files(state.current)} "
                 f"({size_text(state.current.file_size)})")
    return line


def _files(result: RoundResult) -> str:
    """What ``file_size`` is the size of."""
    return f"the {len(result.targets)} files" if result.targets else "the file"


def header_line(state: DemoState, now: float) -> str:
    current = state.current
    if current is None:
        return state.phase
    of = f" of {len(current.targets)} filters" if current.targets else ""
    line = f"round {current.round}/{state.rounds}: v{current.version}{of} - {state.phase}"
    if current.announced_at:
        done = "with every filter swapped" if current.targets else "swapped"
        line += (f" - published {now - current.announced_at:.1f} s ago, "
                 f"{len(current.swaps)}/{state.agents} agents {done}")
    return line


def render(state: DemoState, now: float | None = None) -> Group:
    """The live table with its header and footer lines."""
    table = Table(box=None, pad_edge=False, header_style="bold")
    version, swapped = ("filters", "last swap after") if state.filters else ("version", "swapped after")
    for name, justify in (("agent", "left"), (version, "left"), ("state", "left"), ("progress", "right"),
                          ("peers", "right"), ("from peers", "right"), ("from origin", "right"),
                          (swapped, "right")):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for view in state.views:
        table.add_row(*_agent_cells(view, state))
    return Group(Text(header_line(state, time.time() if now is None else now), style="bold"), table,
                 Text(origin_line(state)),
                 Text(client_line(state.client, state.client_agent, state.client_filter)))


class LiveView:
    """The terminal view: a table redrawn in place; events print above it."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console or Console()
        self._live = Live(Text(""), console=self.console, auto_refresh=False, transient=False,
                          redirect_stdout=True, redirect_stderr=True)

    def __enter__(self) -> LiveView:
        self._live.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._live.stop()

    def event(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False)

    def update(self, state: DemoState) -> None:
        self._live.update(render(state), refresh=True)


class PlainView:
    """The view for logs and CI: events as lines, and a progress line every few seconds
    while a round is in progress."""

    def __init__(self, out: TextIO | None = None, interval_s: float = PLAIN_INTERVAL_S,
                 *, clock: Callable[[], float] = time.monotonic) -> None:
        self.out = out or sys.stdout
        self.interval_s = interval_s
        self._clock = clock
        self._last: float | None = None
        """Monotonic instant of the last progress line; None before the first."""

    def __enter__(self) -> PlainView:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    def event(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def update(self, state: DemoState) -> None:
        now = self._clock()
        current = state.current
        if current is None or not current.announced_at:
            return
        if self._last is not None and now - self._last < self.interval_s:
            return
        self._last = now
        if current.targets:
            counts = ", ".join(f"{v.name} {filters_on(v, current.targets)}/{len(current.targets)}"
                               for v in state.views)
            average = f"; filters on v{current.version}: {counts}"
        else:
            downloading = [v for v in state.views if v.version is None or v.version < current.version]
            progress = [v.progress for v in downloading if (v.status or {}).get("download")]
            share = sum(progress) / len(progress) if progress else 0.0
            average = f", downloading {100 * share:.0f}% on average" if progress else ""
        self.event(f"  {header_line(state, time.time())}{average}; origin {current.origin_copies:.2f} x "
                   f"{_files(current)}; {client_line(state.client, state.client_agent, state.client_filter)}")


def summary_lines(rounds: Sequence[RoundResult], client: ClientReport | None, agents: int,
                  client_agent: str, setup: str = "", *, client_filter: str | None = None) -> list[str]:
    """The summary printed at the end (also after a failure); ``setup`` describes the run;
    ``client_filter``: the named filter the lookup client read."""
    filters = max((len(r.targets) for r in rounds), default=0)
    file = "files" if filters else "file"
    lines = ["", "summary" + (f": {setup}" if setup else ""),
             f"  {'round':<6}{'version':<9}{file:>10}{'first swap':>12}{'last swap':>11}"
             f"{'origin':>12}{'origin/' + file:>13}{'from peers':>12}  "
             f"{f'delta (of the {file}, used by)':<32}result"]
    for result in rounds:
        first = f"{result.first_swap_s:.2f} s" if result.first_swap_s is not None else "-"
        last = f"{result.last_swap_s:.2f} s" if result.last_swap_s is not None else "-"
        every = " with every filter" if result.targets else ""
        outcome = ("all agents" + (", all filters" if result.targets else "")) if result.converged else (
            f"{len(result.swaps)}/{agents} agents{every}: {result.error or 'did not converge'}")
        lines.append(f"  {result.round:<6}{'v' + str(result.version):<9}{size_text(result.file_size):>10}"
                     f"{first:>12}{last:>11}{size_text(result.origin_bytes):>12}"
                     f"{result.origin_copies:>12.2f}x{size_text(result.peer_bytes):>12}  "
                     f"{result.delta_text:<32}{outcome}")
    if filters:
        lines.append(f"  (each round publishes a version of each of the {filters} filters, then moves "
                     "index.json once; swap times are seconds from that move to each agent's swap of its "
                     "last filter; files = the filters' files added up; origin = filter and delta bytes "
                     "the S3 origin sent; delta = the signed deltas from the previous versions, which "
                     "agents holding them fetch instead of the files, used by that many filter swaps)")
    else:
        lines.append("  (swap times are seconds from the publish, i.e. latest.json moving, to each agent's "
                     "swap; origin = filter and delta bytes the S3 origin sent; delta = the signed delta "
                     "from the previous version, which agents holding it fetch instead of the file)")
    if client is None:
        lines.append("  lookup client: no report")
    else:
        lines.append(f"  lookup client ({_source(client_agent, client_filter)}, {client.lookups:,} lookups "
                     "in batches): "
                     f"{rate_text(client.mean_rate)} on average, versions "
                     f"{' -> '.join(f'v{v}' for v in client.versions) or 'none'}, {client.errors} errors, "
                     f"{client.false_negatives} false negatives, false positives "
                     f"{100 * client.false_positive_rate:.2f}% of {client.absent_lookups:,} absent keys")
        if client.last_error:
            lines.append(f"  last lookup error: {client.last_error}")
    return lines


def failures(rounds: Sequence[RoundResult], expected_rounds: int, client: ClientReport | None) -> list[str]:
    """Why the run failed (empty when it succeeded)."""
    problems = [f"round {r.round} (v{r.version}) did not reach every agent"
                + (" and filter" if r.targets else "") for r in rounds if not r.converged]
    if len(rounds) < expected_rounds and not problems:
        problems.append(f"only {len(rounds)} of {expected_rounds} rounds ran")
    if client is None:
        problems.append("the lookup client never reported")
    else:
        if client.errors:
            problems.append(f"the lookup client saw {client.errors} errors")
        if client.false_negatives:
            problems.append(f"the lookup client saw {client.false_negatives} false negatives")
        if rounds and client.versions[-1:] != (rounds[-1].version,) and rounds[-1].converged:
            problems.append(f"the lookup client did not reach v{rounds[-1].version}")
    return problems
