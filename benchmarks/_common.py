"""Helpers shared by the benchmarks: timing, tables, acceptance checks, JSON, memory.

Benchmarks here run on shared, noisy machines. The timing helpers therefore repeat every
measurement, keep every sample, and report the best (least disturbed) run next to the
median; :func:`interleaved` runs the cases round-robin so that a burst of noise hits one
round of every case instead of every run of one case.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import math
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
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


# -- command line and signals ------------------------------------------------------------


def stop_on_signals() -> None:
    """Make SIGTERM and SIGHUP raise ``SystemExit(128 + signum)`` in this process, so the
    ``with`` and ``finally`` blocks on the way out stop the fleets, servers and agents a
    benchmark started and remove its temporary directories (SIGINT already raises
    KeyboardInterrupt). Call it first in every ``main()``.

    A second signal while that cleanup runs is ignored, so the cleanup is not cut short.
    A child forked from this process (multiprocessing) that gets one of these signals
    dies of it as usual instead of unwinding a copy of the parent's stack.
    """
    owner = os.getpid()
    stopping = False

    def handler(signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        if os.getpid() != owner:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if stopping:
            return
        stopping = True
        raise SystemExit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, handler)


def _number(text: str, kind: Callable[[str], float]) -> float:
    try:
        value = kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, not {text!r}")
    return value


def _bounded(value: float, text: str, low: float, high: float | None, *, low_ok: bool) -> None:
    if value < low or (value == low and not low_ok):
        what = "at least" if low_ok else "greater than"
        raise argparse.ArgumentTypeError(f"must be {what} {low:g}, not {text}")
    if high is not None and value > high:
        raise argparse.ArgumentTypeError(f"must be at most {high:g}, not {text}")


def positive_int(high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer >= 1 (and <= ``high``)."""
    return int_at_least(1, high)


def non_negative_int(high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer >= 0 (and <= ``high``)."""
    return int_at_least(0, high)


def int_at_least(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer in ``low..high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        _bounded(value, text, low, high, low_ok=True)
        return value

    parse.__name__ = "integer"
    return parse


def positive_float(high: float | None = None) -> Callable[[str], float]:
    """An argparse type: a finite number > 0 (and <= ``high``)."""
    return _float_from(0.0, high, low_ok=False)


def non_negative_float(high: float | None = None) -> Callable[[str], float]:
    """An argparse type: a finite number >= 0 (and <= ``high``)."""
    return _float_from(0.0, high, low_ok=True)


def _float_from(low: float, high: float | None, *, low_ok: bool) -> Callable[[str], float]:
    def parse(text: str) -> float:
        value = _number(text, float)
        _bounded(value, text, low, high, low_ok=low_ok)
        return value

    parse.__name__ = "number"
    return parse


def open_fraction(text: str) -> float:
    """An argparse type: a number strictly between 0 and 1 (a false-positive rate)."""
    value = _number(text, float)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1 (exclusive), not {text}")
    return value


def int_list(low: int = 1, high: int | None = None, *, empty_ok: bool = True) -> Callable[[str], list[int]]:
    """An argparse type: comma-separated integers in ``low..high`` (``""``: an empty list)."""
    item = int_at_least(low, high)

    def parse(text: str) -> list[int]:
        values = [item(part.strip()) for part in text.split(",") if part.strip()]
        if not values and not empty_ok:
            raise argparse.ArgumentTypeError("needs at least one value")
        return values

    parse.__name__ = "list"
    return parse


def choice_list(choices: Sequence[str]) -> Callable[[str], list[str]]:
    """An argparse type: comma-separated names, each one of ``choices``, at least one."""

    def parse(text: str) -> list[str]:
        values = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [v for v in values if v not in choices]
        if unknown or not values:
            raise argparse.ArgumentTypeError(
                f"wants a comma-separated list of {', '.join(choices)}, not {text!r}")
        return values

    parse.__name__ = "list"
    return parse


def _writable_dir(folder: Path) -> bool:
    """Whether a file can be made in ``folder``: tried (and removed), since permission
    bits alone say yes to root, even on /proc."""
    if not folder.is_dir():
        return False
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(probe)
    return True


def output_path(text: str) -> Path:
    """An argparse type for a file the benchmark writes at the end (``--json``,
    ``--markdown``, ``--out``): checked before any work starts, so a bad path fails at
    once instead of after the run. Not a directory; its folder exists and is writable;
    an existing file is writable."""
    path = Path(text)
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory, not a file")
    folder = path.parent
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(f"the folder of {text!r} does not exist")
    if not _writable_dir(folder) or (path.exists() and not _can_write(path)):
        raise argparse.ArgumentTypeError(f"{text!r} is not writable")
    return path


def _can_write(path: Path) -> bool:
    """Whether the existing file ``path`` can be written, tried without changing it."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_APPEND))
    except OSError:
        return False
    return True


def input_file(text: str) -> Path:
    """An argparse type: an existing, readable regular file."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{text!r} is not a file")
    if not os.access(path, os.R_OK):
        raise argparse.ArgumentTypeError(f"{text!r} is not readable")
    return path


def work_dir(text: str) -> Path:
    """An argparse type for a scratch folder the benchmark creates (or reuses): an
    existing writable directory, or a path whose nearest existing ancestor is one."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} exists and is not a directory")
    ancestor = path.absolute()
    while not ancestor.exists():
        ancestor = ancestor.parent
    if not _writable_dir(ancestor):
        raise argparse.ArgumentTypeError(f"cannot create or write {text!r} ({ancestor} is not writable)")
    return path


def fill_defaults(args: argparse.Namespace, defaults: Mapping[str, object]) -> None:
    """Set each option of ``defaults`` that was not given (None) to its default: the way
    ``--quick``/``--smoke`` pick small defaults while options given explicitly win."""
    for name, value in defaults.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)


def read_json_arg(parser: argparse.ArgumentParser, option: str, path: Path) -> Any:
    """The JSON in ``path``, or ``parser.error`` with one line when it cannot be read."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        parser.error(f"argument {option}: cannot read {str(path)!r}: {exc}")
