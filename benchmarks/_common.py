"""Helpers shared by the benchmarks: timing, tables, acceptance checks, JSON, memory.

Benchmarks here run on shared, noisy machines. The timing helpers therefore repeat every
measurement, keep every sample, and report the best (least disturbed) run next to the
median; :func:`interleaved` runs the cases round-robin so that a burst of noise hits one
round of every case instead of every run of one case.
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Thunk = Callable[[], object]
"""A timed piece of work: called with no arguments, its result is ignored."""

Case = Callable[[], Thunk]
"""Untimed setup that returns the thunk to time (fresh inputs for every run)."""


# -- timing ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """All the wall-clock samples of one measurement, in seconds."""

    samples: tuple[float, ...]

    @property
    def best(self) -> float:
        """The fastest run: the least disturbed by other load on the machine."""
        return min(self.samples)

    @property
    def median(self) -> float:
        """The median run."""
        return statistics.median(self.samples)

    def rate(self, items: int) -> float:
        """Items per second of the best run."""
        return items / self.best

    def median_rate(self, items: int) -> float:
        """Items per second of the median run."""
        return items / self.median


def time_once(thunk: Thunk) -> float:
    """Seconds taken by one call of ``thunk``, with the garbage collector paused."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter()
        thunk()
        return time.perf_counter() - start
    finally:
        if was_enabled:
            gc.enable()


def repeat(case: Case, repeats: int) -> Timing:
    """Run ``case``'s setup then time its thunk, ``repeats`` times."""
    return Timing(tuple(time_once(case()) for _ in range(repeats)))


def interleaved(cases: Mapping[str, Case], repeats: int) -> dict[str, Timing]:
    """Time every case ``repeats`` times, round-robin (case A, B, C, A, B, C, ...)."""
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeats):
        for name, case in cases.items():
            samples[name].append(time_once(case()))
    return {name: Timing(tuple(values)) for name, values in samples.items()}


# -- formatting --------------------------------------------------------------------------


def fmt_rate(per_second: float | None) -> str:
    """A rate such as ``12.3M/s``; ``n/a`` for None."""
    if per_second is None:
        return "n/a"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if per_second >= scale:
            return f"{per_second / scale:.2f}{unit}/s"
    return f"{per_second:.1f}/s"


def fmt_ratio(ratio: float | None) -> str:
    """A ratio such as ``1.45x``; ``n/a`` for None."""
    return "n/a" if ratio is None else f"{ratio:.2f}x"


def fmt_bytes(size: float) -> str:
    """A size in binary units, such as ``1.00 GiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain-text table: first column left-aligned, the others right-aligned."""
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        parts = [
            cell.ljust(widths[i]) if i == 0 else cell.rjust(widths[i])
            for i, cell in enumerate(cells)
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), rule, *(line(r) for r in rows)])


def section(title: str) -> None:
    """Print a section heading."""
    print(f"\n== {title} ==", flush=True)


# -- acceptance checks -------------------------------------------------------------------


@dataclass
class Check:
    """One acceptance target: ``value`` compared with ``target`` (``>=`` or ``<=``).

    ``value`` None means the measurement could not be made (the check is skipped).
    """

    name: str
    value: float | None
    target: float
    op: str
    unit: str = ""
    note: str = ""
    passed: bool | None = field(init=False)

    def __post_init__(self) -> None:
        if self.op not in (">=", "<="):
            raise ValueError(f"unknown comparison {self.op!r}")
        if self.value is None:
            self.passed = None
        elif self.op == ">=":
            self.passed = self.value >= self.target
        else:
            self.passed = self.value <= self.target

    @property
    def status(self) -> str:
        """PASS, FAIL or SKIP."""
        return {True: "PASS", False: "FAIL", None: "SKIP"}[self.passed]

    def line(self) -> str:
        """One human-readable line: status, name, measured value and target."""
        shown = "n/a" if self.value is None else _fmt_value(self.value, self.unit)
        target = _fmt_value(self.target, self.unit)
        note = f"  [{self.note}]" if self.note else ""
        return f"{self.status}  {self.name}: {shown} (target {self.op} {target}){note}"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name, "value": self.value, "target": self.target, "op": self.op,
            "unit": self.unit, "note": self.note, "status": self.status,
        }


def _fmt_value(value: float, unit: str) -> str:
    if unit == "keys/s":
        return fmt_rate(value)
    if unit == "x":
        return fmt_ratio(value)
    if unit == "ms":
        return f"{value:.3f} ms"
    return f"{value:.3g}{(' ' + unit) if unit else ''}"


# -- machine info and JSON ---------------------------------------------------------------


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (or platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def total_memory_bytes() -> int | None:
    """MemTotal from /proc/meminfo, in bytes (None when unavailable)."""
    try:
        with open("/proc/meminfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def machine_info() -> dict[str, Any]:
    """Where and when the benchmark ran."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    return {
        "nproc": affinity or os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "memory_bytes": total_memory_bytes(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "loadavg": load_average(),
    }


def load_average() -> list[float] | None:
    """The 1, 5 and 15 minute load averages (other work competing for the CPUs)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def write_json(path: str | os.PathLike[str], data: Mapping[str, Any]) -> None:
    """Write ``data`` as indented JSON, creating the parent directory."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n", encoding="utf-8")


# -- process memory ----------------------------------------------------------------------


def _parse_kib_fields(lines: Sequence[str]) -> dict[str, int]:
    """``Name:   123 kB`` lines as {name: bytes}; other lines are ignored."""
    out: dict[str, int] = {}
    for line in lines:
        parts = line.split()
        if len(parts) == 3 and parts[0].endswith(":") and parts[2] == "kB":
            out[parts[0][:-1]] = int(parts[1]) * 1024
    return out


def smaps_rollup(pid: int) -> dict[str, int]:
    """The memory totals of process ``pid`` (Rss, Pss, Pss_File, ...), in bytes."""
    with open(f"/proc/{pid}/smaps_rollup", encoding="utf-8") as fh:
        return _parse_kib_fields(fh.read().splitlines())


def mapping_memory(pid: int, path: str | os.PathLike[str]) -> dict[str, int]:
    """Rss and Pss (bytes) of process ``pid``'s mappings of the file ``path``.

    Reads /proc/PID/smaps and sums the entries whose pathname is ``path``.
    """
    wanted = os.path.realpath(path)
    totals = {"Rss": 0, "Pss": 0}
    current: list[str] | None = None
    blocks: list[list[str]] = []
    with open(f"/proc/{pid}/smaps", encoding="utf-8") as fh:
        for line in fh:
            head = line.split(maxsplit=5)
            if head and "-" in head[0] and ":" not in head[0]:
                current = [] if len(head) == 6 and head[5].strip() == wanted else None
                if current is not None:
                    blocks.append(current)
            elif current is not None:
                current.append(line)
    for block in blocks:
        fields = _parse_kib_fields(block)
        for key in totals:
            totals[key] += fields.get(key, 0)
    return totals
