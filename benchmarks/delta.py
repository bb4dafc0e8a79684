"""Delta files (issue 13): size against churn and versions behind, and apply speed.

    python benchmarks/delta.py --json docs/benchmarks/delta.json     # 10M and 100M keys, 1 GiB
    python benchmarks/delta.py --quick --json /tmp/delta.json         # a smoke run, seconds

Every version of a filter is built with the project's FilterBuilder at FIXED parameters
(m, k, layout and seed of ``FilterBuilder.for_capacity(keys, 0.01)``, as the publisher's
sizing policy keeps them while a filter fits). Churn c: version v holds the keys numbered
``v*c*n .. v*c*n + n - 1`` (mixed into random-looking uint64), so each version drops the
oldest c of the keys and adds c new ones.

Measured side by side in one run and printed with ratios:

- delta size (the whole .bsd file) as a share of the target file, at 1% and 0.1% churn,
  for each key count; and against the number of versions behind (1, 2, 4, 8) at 1% churn;
- apply speed, GB of filter body per second on one core: the patch alone (decode and
  flip the bits of a body held in memory) and the patch plus the SHA-256 of the result
  (what ``apply_delta`` verifies), for the C and the numpy engine, and ``apply_delta``
  file to file (copy, patch, hash, fsync, rename) for reference; on every size and on a
  1 GiB filter. Best of ``--repeats`` runs (median beside it).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    Check,
    Timing,
    fill_defaults,
    fmt_bytes,
    format_table,
    int_list,
    machine_info,
    non_negative_int,
    output_path,
    positive_int,
    repeat,
    section,
    stop_on_signals,
    work_dir,
    write_json,
)

# The editable install maps bloomswarm.* onto cli/, common/, ... with an import hook that
# mypy cannot follow: tolerate that, and stay quiet once a mypy_path makes them resolvable.
from bloomswarm.common import FilterBuilder, FilterParams, Layout  # type: ignore[import-not-found, unused-ignore]
from bloomswarm.common.delta import (  # type: ignore[import-not-found, unused-ignore]
    DeltaHeader,
    apply_delta,
    make_delta,
    patch_body,
)
from bloomswarm.common.delta_format import PAYLOAD_OFFSET  # type: ignore[import-not-found, unused-ignore]
from bloomswarm.common.fastpath import EXTENSION, Engine  # type: ignore[import-not-found, unused-ignore]
from bloomswarm.common.header import HEADER_SIZE  # type: ignore[import-not-found, unused-ignore]

U64Array = npt.NDArray[np.uint64]
FPP = 0.01
BITS_PER_KEY_BIG = 9.9
"""Keys of the big filter: its bits over this (what for_capacity gives at 1%)."""
KEY_CHUNK = 4_000_000
TARGETS = {"size_1pct": 6.5, "size_01pct": 1.0, "patch_gbps": 2.0, "patch_sha_gbps": 0.7}
HAVE_C = EXTENSION is not None and hasattr(EXTENSION, "delta_apply")


# -- filters ------------------------------------------------------------------------------


def mixed_keys(start: int, count: int) -> U64Array:
    """Keys number ``start .. start + count - 1``, as distinct random-looking uint64 (a bijection)."""
    x = np.arange(start, start + count, dtype=np.uint64)
    x ^= x >> np.uint64(31)
    x *= np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(29)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(32)
    return x


def write_version(path: Path, params: FilterParams, first_key: int, keys: int, version: int) -> Path:
    """Build version ``version`` (keys ``first_key ..``) at ``params`` and write it to ``path``."""
    builder = FilterBuilder(params, capacity=keys, target_fpp=FPP)
    for start in range(first_key, first_key + keys, KEY_CHUNK):
        builder.add_many(mixed_keys(start, min(KEY_CHUNK, first_key + keys - start)))
    builder.write(path, version=version, created_at=1_700_000_000 + 3600 * version)
    return path


class Versions:
    """Versions of one filter at fixed parameters, built on demand into ``work``."""

    def __init__(self, work: Path, label: str, params: FilterParams, keys: int) -> None:
        self.work, self.label, self.params, self.keys = work, label, params, keys
        self._built: dict[tuple[float, int], Path] = {}

    def path(self, churn: float, version: int) -> Path:
        key = (churn, version)
        if key not in self._built:
            path = self.work / f"{self.label}-c{churn:g}-v{version}.bsf"
            first = round(version * churn * self.keys)
            self._built[key] = write_version(path, self.params, first, self.keys, version)
        return self._built[key]

    def remove(self) -> None:
        for path in self._built.values():
            path.unlink(missing_ok=True)
        self._built.clear()


# -- measurements ---------------------------------------------------------------------------


def delta_size(versions: Versions, churn: float, behind: int, last: int) -> dict[str, Any]:
    """Make the delta from ``last - behind`` to ``last``; its size against the target file."""
    base, target = versions.path(churn, last - behind), versions.path(churn, last)
    out = versions.work / f"{versions.label}-c{churn:g}-{last - behind}-{last}.bsd"
    started = time.perf_counter()
    header = make_delta(base, target, out)
    seconds = time.perf_counter() - started
    size, file_size = out.stat().st_size, target.stat().st_size
    out.unlink()
    return {
        "filter": versions.label, "keys": versions.keys, "churn": churn, "behind": behind,
        "file_bytes": file_size, "delta_bytes": size, "percent_of_file": round(100 * size / file_size, 3),
        "flips": header.flips, "flipped_percent": round(100 * header.flips / (8 * header.body_size), 4),
        "rice_k": header.rice_k, "make_delta_s": round(seconds, 3),
    }


def _streams(path: Path, header: DeltaHeader) -> tuple[bytes, bytes]:
    with open(path, "rb") as fh:
        fh.seek(PAYLOAD_OFFSET)
        return fh.read(header.quotient_bytes), fh.read(header.remainder_bytes)


def apply_speed(versions: Versions, churn: float, last: int, repeats: int,
                engines: list[Engine]) -> dict[str, Any]:
    """GB/s of body applying the delta from ``last - 1`` to ``last``: the patch alone and the
    patch + SHA-256 (per engine), and apply_delta file to file (C, or numpy without it)."""
    base, target = versions.path(churn, last - 1), versions.path(churn, last)
    delta = versions.work / f"{versions.label}-speed.bsd"
    header = make_delta(base, target, delta)
    quotients, remainders = _streams(delta, header)
    with open(base, "rb") as fh:
        fh.seek(HEADER_SIZE)
        base_body = fh.read()
    size = header.body_size
    result: dict[str, Any] = {"filter": versions.label, "keys": versions.keys, "body_bytes": size,
                              "delta_bytes": delta.stat().st_size, "flips": header.flips, "engines": {}}

    def patch_case(engine: Engine, verify: bool) -> Callable[[], Callable[[], None]]:
        def setup() -> Callable[[], None]:
            body = bytearray(base_body)

            def run() -> None:
                patch_body(body, header, quotients, remainders, engine=engine)
                if verify:
                    digest = hashlib.sha256(header.target_header)
                    digest.update(body)
                    if digest.digest() != header.target_sha256:
                        raise AssertionError("patched result does not match the target")
            return run
        return setup

    for engine in engines:
        runs = repeats if engine == "c" else max(1, min(repeats, 2))
        patch = repeat(patch_case(engine, False), runs)
        patch_sha = repeat(patch_case(engine, True), runs)
        result["engines"][engine] = {"patch": _rate(patch, size), "patch_sha256": _rate(patch_sha, size)}
    out = versions.work / f"{versions.label}-patched.bsf"

    def apply_case() -> Callable[[], object]:
        out.unlink(missing_ok=True)
        return lambda: apply_delta(base, delta, out)  # checks the result's SHA-256 itself
    result["apply_delta_file_to_file"] = _rate(repeat(apply_case, repeats), size)
    out.unlink()
    delta.unlink()
    return result


def _rate(timing: Timing, size: int) -> dict[str, Any]:
    return {"best_s": round(timing.best, 6), "median_s": round(timing.median, 6),
            "gb_per_s": round(size / timing.best / 1e9, 3),
            "median_gb_per_s": round(size / timing.median / 1e9, 3)}


# -- the run --------------------------------------------------------------------------------


def key_label(keys: int) -> str:
    return f"{keys / 1e6:g}M keys" if keys >= 1_000_000 else f"{keys / 1e3:g}k keys"


def run(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    engines: list[Engine] = ["c", "python"] if HAVE_C else ["python"]
    sizes: list[dict[str, Any]] = []
    behind: list[dict[str, Any]] = []
    speeds: list[dict[str, Any]] = []
    for keys in args.keys:
        params = FilterBuilder.for_capacity(keys, FPP).params
        versions = Versions(work, key_label(keys).replace(" ", "-"), params, keys)
        section(f"{key_label(keys)}: {fmt_bytes(params.num_bytes + HEADER_SIZE)} file, k={params.num_probes}")
        last = max(args.behind)
        for churn in (0.01, 0.001):
            row = delta_size(versions, churn, 1, last if churn == 0.01 else 1)
            row["filter"] = key_label(keys)
            sizes.append(row)
            print(f"churn {churn:.1%}: delta {fmt_bytes(row['delta_bytes'])} = {row['percent_of_file']:.2f}% "
                  f"of the file ({row['flipped_percent']:.3f}% of bits flipped, k={row['rice_k']}, "
                  f"made in {row['make_delta_s']:.2f} s)", flush=True)
        for gap in args.behind:
            row = delta_size(versions, 0.01, gap, last)
            row["filter"] = key_label(keys)
            behind.append(row)
            print(f"{gap} behind: {row['percent_of_file']:.2f}% of the file", flush=True)
        speed = apply_speed(versions, 0.01, last, args.repeats, engines)
        speed["filter"] = key_label(keys)
        speeds.append(speed)
        versions.remove()
    if args.big_mib:
        num_bits = args.big_mib * 2**23
        keys = int(num_bits / BITS_PER_KEY_BIG)
        probes = FilterBuilder.for_capacity(keys, FPP).params.num_probes
        params = FilterParams(Layout.BLOCKED, num_bits, probes)
        label = fmt_bytes(params.num_bytes)
        section(f"{label} filter ({key_label(keys)}, k={params.num_probes}), 1% churn")
        versions = Versions(work, f"big-{args.big_mib}MiB", params, keys)
        row = delta_size(versions, 0.01, 1, 1)
        row["filter"] = f"{label} filter"
        sizes.append(row)
        print(f"churn 1.0%: delta {row['percent_of_file']:.2f}% of the file", flush=True)
        speed = apply_speed(versions, 0.01, 1, args.repeats, engines)
        speed["filter"] = f"{label} filter"
        speeds.append(speed)
        versions.remove()
    return {"sizes": sizes, "behind": behind, "speeds": speeds}


def checks_of(results: dict[str, Any], args: argparse.Namespace) -> list[Check]:
    checks: list[Check] = []
    for row in results["sizes"]:
        if row["filter"].endswith("keys") and row["keys"] in args.keys:
            target = TARGETS["size_1pct"] if row["churn"] == 0.01 else TARGETS["size_01pct"]
            checks.append(Check(f"delta size at {row['churn']:.1%} churn, {row['filter']}",
                                row["percent_of_file"], target, "<=", "%"))
    big = [s for s in results["speeds"] if s["filter"].endswith("filter")]
    speed = big[-1] if big else results["speeds"][-1]
    engine = "c" if "c" in speed["engines"] else "python"
    note = f"{speed['filter']}, {engine} engine"
    checks.append(Check("patch alone, GB/s", speed["engines"][engine]["patch"]["gb_per_s"],
                        TARGETS["patch_gbps"], ">=", "GB/s", note))
    checks.append(Check("patch + SHA-256, GB/s", speed["engines"][engine]["patch_sha256"]["gb_per_s"],
                        TARGETS["patch_sha_gbps"], ">=", "GB/s", note))
    return checks


def print_tables(results: dict[str, Any]) -> None:
    section("delta size, % of the target file")
    rows = []
    for row in results["sizes"]:
        limit = TARGETS["size_1pct"] if row["churn"] == 0.01 else TARGETS["size_01pct"]
        rows.append([row["filter"], f"{row['churn']:.1%}", fmt_bytes(row["file_bytes"]),
                     fmt_bytes(row["delta_bytes"]), f"{row['percent_of_file']:.2f}%", f"<= {limit}%",
                     f"{row['percent_of_file'] / limit:.2f}x of the limit", f"{row['flipped_percent']:.3f}%",
                     str(row["rice_k"])])
    print(format_table(["filter", "churn", "file", "delta", "share", "target", "ratio", "bits flipped", "k"],
                       rows))
    section("delta size against versions behind, 1% churn per version")
    rows = []
    for row in results["behind"]:
        one = next(r for r in results["behind"] if r["filter"] == row["filter"] and r["behind"] == 1)
        rows.append([row["filter"], str(row["behind"]), f"{row['percent_of_file']:.2f}%",
                     f"{row['percent_of_file'] / one['percent_of_file']:.2f}x of 1 behind",
                     f"{row['percent_of_file'] / (row['behind'] * one['percent_of_file']):.2f}x of a chain",
                     f"{row['flipped_percent']:.3f}%"])
    headers = ["filter", "behind", "share", "vs 1 behind", "vs chain of deltas", "bits flipped"]
    print(format_table(headers, rows))
    section("apply speed, GB of filter body per second, one core (best of runs; median)")
    rows = []
    for speed in results["speeds"]:
        engines = speed["engines"]
        for engine, figures in engines.items():
            ratio = (f"{figures['patch']['gb_per_s'] / engines['python']['patch']['gb_per_s']:.1f}x numpy"
                     if engine == "c" and "python" in engines else "")
            rows.append([f"{speed['filter']} ({fmt_bytes(speed['body_bytes'])})", engine,
                         f"{figures['patch']['gb_per_s']:.2f} ({figures['patch']['median_gb_per_s']:.2f})",
                         f"{figures['patch']['gb_per_s'] / TARGETS['patch_gbps']:.2f}x",
                         f"{figures['patch_sha256']['gb_per_s']:.2f} "
                         f"({figures['patch_sha256']['median_gb_per_s']:.2f})",
                         f"{figures['patch_sha256']['gb_per_s'] / TARGETS['patch_sha_gbps']:.2f}x", ratio])
        if "apply_delta_file_to_file" in speed:
            figures = speed["apply_delta_file_to_file"]
            rows.append([f"{speed['filter']} ({fmt_bytes(speed['body_bytes'])})", "apply_delta file->file",
                         "", "", f"{figures['gb_per_s']:.2f} ({figures['median_gb_per_s']:.2f})", "", ""])
    headers = ["filter", "engine", "patch", "vs 2 GB/s", "patch+SHA-256", "vs 0.7 GB/s", "C vs numpy"]
    print(format_table(headers, rows))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keys", type=int_list(1, 10**10),
                        help="key counts, comma-separated (10000000,100000000)")
    parser.add_argument("--behind", type=int_list(1, 1000), default=[1, 2, 4, 8],
                        help="versions behind, comma-separated (1,2,4,8)")
    parser.add_argument("--big-mib", type=non_negative_int(256 * 1024),
                        help="body of the big filter in MiB (1024; 0: none)")
    parser.add_argument("--repeats", type=positive_int(1000), help="runs per measurement (3)")
    parser.add_argument("--work", type=work_dir, help="scratch folder (default: a temporary one)")
    parser.add_argument("--json", type=output_path, help="write the results here")
    parser.add_argument("--quick", action="store_true",
                        help="a smoke run: 200k keys, a 16 MiB filter (options given explicitly win)")
    args = parser.parse_args(argv)
    defaults = ({"keys": [200_000], "big_mib": 16, "repeats": 2} if args.quick else
                {"keys": [10_000_000, 100_000_000], "big_mib": 1024, "repeats": 3})
    fill_defaults(args, defaults)
    args.behind = sorted(set(args.behind))
    if 1 not in args.behind:
        parser.error("--behind must list positive counts, 1 among them")
    return args


def main(argv: list[str] | None = None) -> int:
    stop_on_signals()
    args = parse_args(argv)
    print(f"C extension with the delta coder: {'yes' if HAVE_C else 'no (numpy only)'}", flush=True)
    with _work_dir(args.work) as work:
        started = time.monotonic()
        results = run(args, work)
    print_tables(results)
    checks = checks_of(results, args)
    section("targets")
    for check in checks:
        print(check.line())
    if args.json:
        command = " ".join(["python", "benchmarks/delta.py", *(sys.argv[1:] if argv is None else argv)])
        write_json(args.json, {
            "description": "benchmarks/delta.py: delta size against churn and versions behind, apply speed",
            "command": command, "machine": machine_info(), "c_extension": HAVE_C,
            "config": {"keys": args.keys, "behind": args.behind, "big_mib": args.big_mib,
                       "repeats": args.repeats, "quick": args.quick, "fpp": FPP},
            "seconds": round(time.monotonic() - started, 1),
            **results, "checks": [c.as_dict() for c in checks],
        })
    return 0


@contextlib.contextmanager
def _work_dir(given: Path | None) -> Iterator[Path]:
    """The scratch folder: the one given (kept), or a temporary one (removed)."""
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    path = Path(tempfile.mkdtemp(prefix="bloomswarm-delta-", dir=os.environ.get("TMPDIR")))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
