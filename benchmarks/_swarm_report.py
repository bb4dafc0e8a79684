"""The swarm benchmark's plots (matplotlib, PNG) and Markdown table."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks._common import Check

if TYPE_CHECKING:
    from benchmarks._swarm_delta import DeltaPoint
    from benchmarks.swarm import Point

MIB = 1024 * 1024


def _by_size(points: Sequence[Point]) -> dict[int, list[Point]]:
    groups: dict[int, list[Point]] = {}
    for point in sorted(points, key=lambda p: (p.size_bytes, p.agents)):
        groups.setdefault(point.size_bytes, []).append(point)
    return groups


def _label(size: int) -> str:
    return f"{size / MIB / 1024:.0f} GiB" if size >= 1024 * MIB else f"{size / MIB:.0f} MiB"


def plot(p2p: Sequence[Point], direct: Sequence[Point], folder: Path) -> list[Path]:
    """Write ``swarm_time.png`` (last agent's time against N, P2P and direct, with the
    theoretical minimum) and ``swarm_origin.png`` (origin egress in file copies against N)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    fig, ax = plt.subplots(figsize=(9, 4.8))
    for size, points in _by_size(p2p).items():
        agents = [p.agents for p in points]
        line = ax.plot(agents, [p.max for p in points], "o-", label=f"P2P {_label(size)} (max)")[0]
        ax.plot(agents, [p.p50 for p in points], "o:", color=line.get_color(), alpha=0.6,
                label=f"P2P {_label(size)} (p50)")
        ax.plot(agents, [p.minimum_s for p in points], "_", color=line.get_color(), markersize=14,
                label=f"theoretical minimum {_label(size)}")
    for size, points in _by_size(direct).items():
        ax.plot([p.agents for p in points], [p.max for p in points], "s--",
                label=f"direct {_label(size)} (max)")
    ax.set_xlabel("agents (N)")
    ax.set_ylabel("publish → swap (s)")
    ax.set_yscale("log")
    ax.set_xticks(sorted({p.agents for p in [*p2p, *direct]}))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_title(_caps_title(p2p or direct))
    fig.tight_layout()
    written.append(folder / "swarm_time.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for size, points in _by_size(p2p).items():
        ax.plot([p.agents for p in points], [p.origin_copies for p in points], "o-",
                label=f"P2P {_label(size)}")
    for size, points in _by_size(direct).items():
        ax.plot([p.agents for p in points], [p.origin_copies for p in points], "s--",
                label=f"direct {_label(size)}")
    ax.axhline(1.2, color="grey", linestyle=":", label="target ≤ 1.2×")
    ax.set_xlabel("agents (N)")
    ax.set_ylabel("origin egress (copies of the file)")
    ax.set_yscale("log")
    ax.set_xticks(sorted({p.agents for p in [*p2p, *direct]}))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    ax.set_title(_caps_title(p2p or direct))
    fig.tight_layout()
    written.append(folder / "swarm_origin.png")
    fig.savefig(written[-1], dpi=110)
    plt.close(fig)
    return written


def _caps_title(points: Sequence[Point]) -> str:
    if not points:
        return ""
    p = points[0]
    return f"per-agent cap {p.upload_cap / MIB:g} MiB/s, origin cap {p.origin_cap / MIB:g} MiB/s"


def markdown_table(p2p: Sequence[Point], direct: Sequence[Point], checks: Sequence[Check],
                   delta: Sequence[DeltaPoint] = ()) -> str:
    """The results as a Markdown table, the direct/P2P ratios, the delta mode's table
    (when it ran) and the checks."""
    lines = [
        "| mode | N | file | p50 (s) | p99 (s) | max (s) | minimum (s) | max / minimum | origin egress "
        "| received from peers | CPU busy |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in [*p2p, *direct]:
        lines.append(
            f"| {'P2P' if p.mode == 'p2p' else 'direct'} | {p.agents} | {_label(p.size_bytes)} | {p.p50:.1f} "
            f"| {p.p99:.1f} | {p.max:.1f} | {p.minimum_s:.1f} | "
            f"{p.max / p.minimum_s:.2f}× | {p.origin_copies:.2f}× "
            f"| {p.peer_copies:.1f}× | {p.cpu_busy:.0%} |"
        )
    ratios = []
    for d in direct:
        match = [p for p in p2p if (p.agents, p.size_bytes) == (d.agents, d.size_bytes)]
        if match:
            ratios.append(f"- N = {d.agents}, {_label(d.size_bytes)}: direct takes "
                          f"**{d.max / match[0].max:.1f}×** as long as P2P (last agent), "
                          f"{d.p50 / match[0].p50:.1f}× at the median.")
    checks_text = [f"- {c.status}: {c.name}: "
                   f"{'n/a' if c.value is None else f'{c.value:.2f}'} (target {c.op} {c.target:g})"
                   for c in checks]
    if not p2p and not direct:
        lines = []
    return "\n".join([*lines, "", *ratios, "", *delta_markdown(delta), *checks_text, ""])


def delta_markdown(points: Sequence[DeltaPoint]) -> list[str]:
    """The delta mode's table (lines, then a blank), or nothing."""
    from benchmarks._swarm_delta import DELTA_HEADERS, delta_table_rows

    if not points:
        return []
    rows = [f"| {' | '.join(row)} |" for row in delta_table_rows(points)]
    return [f"| {' | '.join(DELTA_HEADERS)} |", "|" + "---|" * len(DELTA_HEADERS), *rows, ""]
