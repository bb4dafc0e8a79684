"""Start-up benchmark: wall time of ``bloomswarm --help`` and ``bloomswarm query FILE KEY``.

Run from the repository root::

    python benchmarks/startup.py [--baseline DIR] [--runs 20] [--json out.json]

Each command is a new interpreter, timed from spawn to exit (``subprocess.run`` around it),
so the figure is what a user waits for. Subjects:

- **current**: this checkout's code;
- **baseline** (with ``--baseline DIR``): another checkout's code, e.g. the commit before a
  change, made with ``git worktree add /tmp/baseline <commit>``;
- **installed**: the ``bloomswarm`` package this interpreter imports (``python -m
  bloomswarm``), for reference: an editable install adds its import hook's cost.

Current and baseline run alike: each checkout is laid out as it installs with its own
``scripts/package_tree.py`` (``bloomswarm/``, ``bloomswarm/common/``, ...) in a temporary
folder, the installed C extension is copied into both, and the command is ``python -c``
putting that folder first on ``sys.path`` and calling ``bloomswarm.main.main`` as the
console script does. The baseline therefore needs no install of its own, only the same
dependencies (this interpreter's). After one untimed run of each (which also compiles
the ``.pyc`` files), the subjects run round-robin ``--runs`` times, so noise from other
load hits every subject alike; the tables give the median and the best run, and the ratio
baseline / current (above 1: the current code starts faster).

Acceptance targets (issue 11), on the current code's median: ``--help`` <= 0.2 s and
``query FILE KEY`` <= 0.3 s.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    Check,
    Timing,
    fmt_ratio,
    format_table,
    machine_info,
    output_path,
    positive_int,
    section,
    stop_on_signals,
    write_json,
)

ROOT = Path(__file__).resolve().parent.parent

TARGETS_S = {"--help": 0.2, "query FILE KEY": 0.3}
"""Command label -> the most its median may take on the current code (issue 11)."""

_RUN_MAIN = ("import sys; sys.path.insert(0, {tree!r}); "
             "from bloomswarm.main import main; sys.exit(main(sys.argv[1:]))")
"""What the console script does, with ``tree`` first on the import path."""


@dataclass(frozen=True)
class Subject:
    """A version of bloomswarm to start: the command prefix that runs its CLI."""

    name: str
    prefix: tuple[str, ...]


def package_tree(checkout: Path, dest: Path) -> Path:
    """Lay ``checkout``'s package out in ``dest`` with its own scripts/package_tree.py, plus
    the installed C extension; return ``dest``."""
    script = checkout / "scripts" / "package_tree.py"
    if not script.is_file():
        raise SystemExit(f"startup.py: {checkout} is not a bloomswarm checkout (no scripts/package_tree.py)")
    subprocess.run([sys.executable, str(script), str(dest)], check=True, timeout=120)
    spec = importlib.util.find_spec("bloomswarm.common._bloomfast")
    if spec is not None and spec.origin:
        shutil.copy2(spec.origin, dest / "bloomswarm" / "common" / Path(spec.origin).name)
    return dest


def tree_subject(name: str, tree: Path) -> Subject:
    """The subject that runs the package laid out in ``tree``."""
    return Subject(name, (sys.executable, "-c", _RUN_MAIN.format(tree=str(tree))))


def run_once(subject: Subject, args: Sequence[str], cwd: Path) -> float:
    """Seconds from spawning ``subject``'s CLI with ``args`` to its exit (must exit 0)."""
    start = time.perf_counter()
    done = subprocess.run([*subject.prefix, *args], cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, timeout=120, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"startup.py: {subject.name} {' '.join(args)} exited {done.returncode}: "
                         f"{done.stderr.decode(errors='replace')[-2000:]}")
    return elapsed


def measure(subjects: Sequence[Subject], commands: dict[str, list[str]], runs: int,
            cwd: Path) -> dict[tuple[str, str], Timing]:
    """(subject, command label) -> its timings: one untimed run each, then ``runs`` rounds."""
    for subject in subjects:
        for args in commands.values():
            run_once(subject, args, cwd)
    samples: dict[tuple[str, str], list[float]] = {(s.name, c): [] for s in subjects for c in commands}
    for _ in range(runs):
        for subject in subjects:
            for label, args in commands.items():
                samples[subject.name, label].append(run_once(subject, args, cwd))
    return {key: Timing(tuple(values)) for key, values in samples.items()}


def make_filter(folder: Path) -> Path:
    """A small filter file for ``query`` (1,000 keys), written by the current code."""
    from bloomswarm.common.builder import FilterBuilder

    builder = FilterBuilder.for_capacity(1000, 0.01)
    builder.add_many([f"key-{i}" for i in range(1000)])
    path = folder / "startup.bsf"
    builder.write(path)
    return path


def report(timings: dict[tuple[str, str], Timing], subjects: Sequence[Subject],
           commands: Sequence[str], baseline: bool) -> tuple[list[dict[str, Any]], list[Check]]:
    """Print the table and the checks; return them JSON-ready."""
    rows: list[list[str]] = []
    data: list[dict[str, Any]] = []
    for label in commands:
        for subject in subjects:
            timing = timings[subject.name, label]
            ratio = None
            if baseline and subject.name == "current":
                ratio = timings["baseline", label].median / timing.median
            rows.append([f"{label} ({subject.name})", f"{timing.median:.3f}", f"{timing.best:.3f}",
                         fmt_ratio(ratio) if subject.name == "current" else ""])
            data.append({"command": label, "subject": subject.name, "median_s": timing.median,
                         "best_s": timing.best, "samples_s": list(timing.samples),
                         "baseline_over_current": ratio})
    print(format_table(["command (subject)", "median s", "best s", "baseline/current"], rows))
    checks = [Check(f"{label} median, current code", timings["current", label].median, target, "<=", "s")
              for label, target in TARGETS_S.items()]
    if baseline:
        checks += [Check(f"{label}: baseline / current (median)",
                         timings["baseline", label].median / timings["current", label].median, 1.0, ">=", "x",
                         note="the change did not slow start-up down")
                   for label in commands]
    section("checks")
    for check in checks:
        print(check.line())
    return data, checks


def main(argv: list[str] | None = None) -> int:
    stop_on_signals()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--baseline", type=Path, metavar="DIR",
                        help="another checkout to compare with (e.g. a git worktree of the previous commit)")
    parser.add_argument("--runs", type=positive_int(10_000), default=20,
                        help="timed runs of every command and subject (20)")
    parser.add_argument("--json", type=output_path, metavar="PATH", help="also write the results as JSON")
    args = parser.parse_args(argv)
    if args.baseline is not None and not (args.baseline / "scripts" / "package_tree.py").is_file():
        parser.error(f"argument --baseline: {str(args.baseline)!r} is not a bloomswarm checkout "
                     "(no scripts/package_tree.py)")
    with tempfile.TemporaryDirectory(prefix="bloomswarm-startup-") as tmp:
        folder = Path(tmp)
        filter_path = make_filter(folder)
        subjects = [tree_subject("current", package_tree(ROOT, folder / "current"))]
        if args.baseline is not None:
            baseline = package_tree(args.baseline.resolve(), folder / "baseline")
            subjects.append(tree_subject("baseline", baseline))
        subjects.append(Subject("installed", (sys.executable, "-m", "bloomswarm")))
        commands = {"--help": ["--help"], "query FILE KEY": ["query", str(filter_path), "key-1"]}
        section(f"start-up: {len(subjects)} subjects x {len(commands)} commands, {args.runs} runs each")
        timings = measure(subjects, commands, args.runs, folder)
        data, checks = report(timings, subjects, list(commands), args.baseline is not None)
    if args.json is not None:
        write_json(args.json, {
            "machine": machine_info(),
            "config": {"runs": args.runs, "baseline": str(args.baseline) if args.baseline else None},
            "results": data,
            "checks": [check.as_dict() for check in checks],
        })
    return 0


if __name__ == "__main__":
    sys.exit(main())
