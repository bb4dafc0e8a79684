"""Long coverage-guided fuzzing runs (atheris / libFuzzer) of the targets in
``bloomswarm.sandbox.fuzz_targets`` (sandbox/fuzz_targets.py).

Not part of CI (tests/fuzz/ runs the same targets for a bounded number of hypothesis
examples). Needs ``pip install atheris`` (a binary wheel for CPython 3.11 on x86-64 Linux).

    taskset -c 1 python benchmarks/fuzz.py --runs 1000000 --work /tmp/bloomswarm-fuzz \\
        --out docs/benchmarks/fuzz.json

For each target, in turn, one worker process (this file with ``--worker TARGET``) runs
libFuzzer for ``--runs`` inputs, starting from a corpus of valid inputs made by the
project's own code (fuzz_targets.seeds). A worker does not stop at a finding: an input
that raises anything but the target's own error is saved under WORK/findings/TARGET/
(the input, and the traceback beside it) and counted, once per distinct place it was
raised. An input that runs longer than ``--timeout`` seconds makes libFuzzer stop the
worker with a "timeout" artifact (a hang), which is reported as well. Copy a finding into
tests/fuzz/corpus/TARGET/ once it is fixed: the tests replay that corpus.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    machine_info,
    output_path,
    positive_int,
    read_json_arg,
    stop_on_signals,
    work_dir,
    write_json,
)

TARGET_NAMES = ("header", "filter_file", "manifest", "config", "delta", "index")
_MAX_LEN = {"header": 4200, "filter_file": 12288, "manifest": 4096, "config": 4096, "delta": 8192,
            "index": 8192}
_DONE = re.compile(r"Done (\d+) runs in (\d+) second")
_STATUS = re.compile(r"#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)")


# --- the worker: one target under libFuzzer ------------------------------------------------------


def worker(target_name: str, findings: Path, libfuzzer_args: list[str]) -> None:
    """Run ``target_name`` under atheris; never returns (libFuzzer exits the process)."""
    atheris: Any = importlib.import_module("atheris")
    with atheris.instrument_imports(include=["bloomswarm", "tomllib"]):
        from bloomswarm.sandbox import fuzz_targets
    target = fuzz_targets.TARGETS[target_name]
    findings.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    counts = {"accepted": 0, "rejected": 0, "findings": 0}

    def one_input(data: bytes) -> None:
        try:
            counts["accepted" if target(data) else "rejected"] += 1
        except Exception as exc:  # a finding: anything but the target's own error
            place = traceback.extract_tb(exc.__traceback__)[-1]
            signature = f"{type(exc).__name__} at {place.filename}:{place.lineno}"
            name = hashlib.sha1(data).hexdigest()
            if signature not in seen:
                seen.add(signature)
                (findings / f"{name}.bin").write_bytes(data)
                (findings / f"{name}.txt").write_text(
                    signature + "\n" + "".join(traceback.format_exception(exc)), encoding="utf-8"
                )
                print(f"FINDING {signature} ({name})", file=sys.stderr, flush=True)
            counts["findings"] += 1
        total = sum(counts.values())
        if total % 10_000 == 0:
            print(f"COUNTS {total} " + " ".join(f"{k}={v}" for k, v in counts.items()),
                  file=sys.stderr, flush=True)

    atheris.Setup([sys.argv[0], *libfuzzer_args], one_input)
    atheris.Fuzz()


# --- the driver: every target in turn, figures to JSON -------------------------------------------


def run_target(name: str, runs: int, work: Path, timeout_s: int) -> dict[str, Any]:
    """Fuzz one target for ``runs`` inputs in a worker process; its figures."""
    from bloomswarm.sandbox import fuzz_targets

    corpus, findings, artifacts = (work / kind / name for kind in ("corpus", "findings", "artifacts"))
    for folder in (corpus, findings, artifacts):
        folder.mkdir(parents=True, exist_ok=True)
    seeds = fuzz_targets.seeds()[name]
    for seed in seeds:
        (corpus / f"seed-{hashlib.sha1(seed).hexdigest()}").write_bytes(seed)
    log = work / f"{name}.log"
    command = [
        sys.executable, __file__, "--worker", name, "--findings", str(findings), "--",
        f"-runs={runs}", f"-max_len={_MAX_LEN[name]}", f"-timeout={timeout_s}", "-rss_limit_mb=2048",
        "-print_final_stats=1", f"-artifact_prefix={artifacts}/", str(corpus),
    ]
    scratch = tempfile.mkdtemp(prefix="bloomswarm-fuzz-", dir=fuzz_targets.tmpfs())
    started = time.monotonic()
    try:
        with log.open("w", encoding="utf-8") as out:
            code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False,
                                  env={**os.environ, fuzz_targets.SCRATCH_ENV: scratch}).returncode
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    elapsed = time.monotonic() - started
    text = log.read_text(encoding="utf-8", errors="replace")
    done = _DONE.findall(text)
    status = _STATUS.findall(text)
    slowest = re.findall(r"stat::slowest_unit_time_sec:\s+(\d+)", text)
    rss = re.findall(r"stat::peak_rss_mb:\s+(\d+)", text)
    finding_lines = sorted(set(re.findall(r"^FINDING (.*) \(", text, re.MULTILINE)))
    counts = re.findall(r"^COUNTS \d+ accepted=(\d+) rejected=(\d+) findings=(\d+)", text, re.MULTILINE)
    return {
        "target": name,
        "inputs_run": int(done[-1][0]) if done else (int(status[-1][0]) if status else 0),
        "completed": bool(done) and code == 0,
        "exit_code": code,
        "seconds": round(elapsed, 1),
        "inputs_per_second": round(int(done[-1][0]) / elapsed) if done and elapsed else None,
        "slowest_input_s": int(slowest[-1]) if slowest else None,
        "hang_timeout_s": timeout_s,
        "peak_rss_mb": int(rss[-1]) if rss else None,
        "coverage_edges": int(status[-1][1]) if status else None,
        "features": int(status[-1][2]) if status else None,
        "corpus_size": int(status[-1][3]) if status else None,
        "seeds": len(seeds),
        "accepted": int(counts[-1][0]) if counts else None,
        "rejected_with_own_error": int(counts[-1][1]) if counts else None,
        "inputs_raising_other_errors": int(counts[-1][2]) if counts else None,
        "findings": finding_lines,
        "hang_or_crash_artifacts": sorted(p.name for p in artifacts.iterdir()),
        "log": str(log),
    }


def previous_results(data: Any) -> dict[str, dict[str, Any]]:
    """The per-target entries of a previous ``--out`` file, by target name."""
    return {t["target"]: t for t in data["targets"]}


def write_results(out: Path, results: list[dict[str, Any]], argv: list[str],
                  previous: dict[str, dict[str, Any]]) -> None:
    """Write the figures to ``out``, replacing the entries of the targets run now and
    keeping the ``previous`` others (so one target can be re-run after a fix)."""
    command = " ".join(["python", "benchmarks/fuzz.py", *argv])
    stamp = {"command": command, "engine": f"atheris {importlib.metadata.version('atheris')} (libFuzzer)",
             "machine": machine_info()}
    previous = dict(previous)
    for result in results:
        previous[result["target"]] = {**result, **stamp}
    ordered = [previous[n] for n in TARGET_NAMES if n in previous]
    write_json(out, {"description": "benchmarks/fuzz.py: inputs run per target, findings",
                     "targets": ordered})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=",".join(TARGET_NAMES), help="comma-separated")
    parser.add_argument("--runs", type=positive_int(10**12), default=1_000_000, help="inputs per target")
    parser.add_argument("--timeout", type=positive_int(3600), default=10,
                        help="seconds before an input is a hang")
    parser.add_argument("--work", type=work_dir, default=Path("/tmp/bloomswarm-fuzz"))
    parser.add_argument("--out", type=output_path, help="write the figures as JSON here")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--findings", type=Path, help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.worker:
        worker(args.worker, args.findings, [a for a in rest if a != "--"])
        return 0
    stop_on_signals()  # not in the worker: libFuzzer handles its own signals
    if rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    names = [n for n in args.targets.split(",") if n]
    unknown = sorted(set(names) - set(TARGET_NAMES))
    if unknown or not names:
        parser.error(f"unknown targets {unknown}; known: {', '.join(TARGET_NAMES)}")
    previous: dict[str, dict[str, Any]] = {}
    if args.out is not None and args.out.exists():
        try:
            previous = previous_results(read_json_arg(parser, "--out", args.out))
        except (KeyError, TypeError) as exc:
            parser.error(f"argument --out: {str(args.out)!r} is not a fuzz.py results file ({exc!r})")
    results = []
    for name in names:
        result = run_target(name, args.runs, args.work, args.timeout)
        results.append(result)
        print(f"{name}: {result['inputs_run']} inputs in {result['seconds']} s, "
              f"findings {len(result['findings'])}, artifacts {len(result['hang_or_crash_artifacts'])}",
              flush=True)
    if args.out:
        write_results(args.out, results, argv if argv is not None else sys.argv[1:], previous)
    bad = [r for r in results if r["findings"] or r["hang_or_crash_artifacts"] or not r["completed"]]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
