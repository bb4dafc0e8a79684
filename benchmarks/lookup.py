"""Lookup benchmark: bloomswarm's engines against rbloom, pybloomfiltermmap3, fastbloom-rs, set.

Run from the repository root::

    python benchmarks/lookup.py [--keys 10000000] [--fpp 0.01] [--big-gib 1.0]
                                [--skip-big] [--skip-competitors] [--json out.json] [--quick]

Sections, all in one process (the big filter's sharing test spawns 4 more):

1. A ``--keys`` key, ``--fpp`` filter is built with bloomswarm (blocked layout; the
   standard layout too when the C engine exists) from 16-byte random ``bytes`` keys,
   written to a temporary directory and opened with ``engine="c"`` and ``engine="python"``.
   The same keys go into every competitor, sized for the same target rate.
2. Single-key lookups: ``for k in keys: k in x`` over ``--sample`` present keys and as
   many absent ones (a disjoint set: present keys have bit 0 of their first byte clear,
   absent keys have it set). The loop costs the same for every row, so the ratios are
   fair; the empty loop's rate is printed too. Every run gets fresh key objects, because
   rbloom and ``set`` hash with Python's ``hash()``, which ``bytes`` caches in the object.
3. Batches: ``contains_many`` on ``--keys`` uint64 keys (half present, half absent; a
   second filter with the same parameters holds ``--keys`` uint64 keys) and on a list of
   ``bytes`` keys.
4. A big filter (``--big-gib`` of bits): open time, batch rate from the page cache, and
   the memory of 4 processes that map it and touch every page.
5. Acceptance checks, printed as PASS/FAIL/SKIP lines.

Timings are best-of-``--repeats`` (medians are kept in the JSON), and the single-key
cases run round-robin, so noise on a shared machine hits all rows alike. A missing C
extension (``bloomswarm.common._bloomfast``) turns the C rows into "unavailable"; missing
competitor packages turn theirs into "not installed". Neither is an error.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import multiprocessing as mp
import os
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

if __package__ in (None, ""):  # run as a script: make `benchmarks` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import numpy.typing as npt

from benchmarks._common import (
    Case,
    Check,
    Timing,
    fmt_bytes,
    fmt_rate,
    fmt_ratio,
    format_table,
    interleaved,
    load_average,
    machine_info,
    mapping_memory,
    open_fraction,
    output_path,
    positive_float,
    positive_int,
    repeat,
    section,
    smaps_rollup,
    stop_on_signals,
    write_json,
)

# The editable install maps bloomswarm.* onto cli/, common/, ... with an import hook that
# mypy cannot follow: tolerate that, and stay quiet once a mypy_path makes them resolvable.
from bloomswarm.common import (  # type: ignore[import-not-found, unused-ignore]
    ConfigError,
    Filter,
    FilterBuilder,
    FilterParams,
    Layout,
    size_filter,
)
from bloomswarm.common.fastpath import (  # type: ignore[import-not-found, unused-ignore]
    EXTENSION,
    Engine,
    resolve_engine,
)

U64Array = npt.NDArray[np.uint64]
T = TypeVar("T")
C_UNAVAILABLE = "unavailable (C extension bloomswarm.common._bloomfast not built)"
PAGE = 4096
KEY_BYTES = 16
BATCH_THREADS = 2
"""Threads of the multi-threaded uint64 batch row (the machine has 2 cores)."""


# -- configuration -----------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """What to run; see :func:`parse_args` for the meaning of each field."""

    keys: int = 10_000_000
    fpp: float = 0.01
    big_gib: float = 1.0
    skip_big: bool = False
    skip_competitors: bool = False
    quick: bool = False
    sample: int = 1_000_000
    repeats: int = 5
    opens: int = 20
    big_build_seconds: float = 180.0
    big_batch_keys: int = 10_000_000
    processes: int = 4
    seed: int = 20240601
    json_path: str | None = None


QUICK = Config(
    keys=20_000, big_gib=0.01, quick=True, sample=20_000, repeats=3, opens=20,
    big_build_seconds=10.0, big_batch_keys=20_000,
)


def parse_args(argv: list[str] | None = None) -> Config:
    """Command-line options; ``--quick`` changes the defaults of the options not given."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--keys", type=positive_int(10**10), help="keys in the filters (default 10M)")
    p.add_argument("--fpp", type=open_fraction, help="target false-positive rate (default 0.01)")
    p.add_argument("--big-gib", type=positive_float(1024),
                   help="bit-array size of the big filter (default 1.0)")
    p.add_argument("--skip-big", action="store_true", help="skip the big-filter section")
    p.add_argument("--skip-competitors", action="store_true",
                   help="skip rbloom, pybloomfiltermmap3, fastbloom-rs and set")
    p.add_argument("--json", dest="json_path", type=output_path, help="write all numbers to this JSON file")
    p.add_argument("--quick", action="store_true", help="a tiny run (smoke test)")
    p.add_argument("--sample", type=positive_int(10**10), help="keys per single-key loop (default 1M)")
    p.add_argument("--repeats", type=positive_int(1000), help="runs per measurement, best kept (default 5)")
    p.add_argument("--big-build-seconds", type=positive_float(86400),
                   help="time budget for inserting keys into the big filter (default 180)")
    p.add_argument("--processes", type=positive_int(1000),
                   help="processes sharing the big filter (default 4)")
    args = p.parse_args(argv)
    if args.json_path is not None:
        args.json_path = str(args.json_path)
    base = QUICK if args.quick else Config()
    given = {
        name: getattr(args, name)
        for name in ("keys", "fpp", "big_gib", "sample", "repeats", "big_build_seconds",
                     "processes", "json_path")
        if getattr(args, name) is not None
    }
    cfg = replace(base, skip_big=args.skip_big, skip_competitors=args.skip_competitors, **given)
    return replace(cfg, sample=min(cfg.sample, cfg.keys), big_batch_keys=(
        cfg.big_batch_keys if args.quick else cfg.keys))


# -- keys --------------------------------------------------------------------------------


class KeySpace:
    """Random keys. Present keys have bit 0 of their first byte (or value) clear, absent
    keys have it set, so the two sets are disjoint by construction."""

    def __init__(self, cfg: Config) -> None:
        rng = np.random.default_rng(cfg.seed)
        self.rng = rng
        self.n = cfg.keys
        self.present16 = _random_rows(rng, cfg.keys, present=True)
        self._present_sample = self.present16[: cfg.sample].tobytes()
        self._absent_sample = _random_rows(rng, cfg.sample, present=False).tobytes()
        self.present_u64 = rng.integers(0, 2**63, cfg.keys, dtype=np.uint64) << np.uint64(1)
        half = cfg.keys // 2
        absent_u64 = rng.integers(0, 2**63, cfg.keys - half, dtype=np.uint64) << np.uint64(1)
        absent_u64 |= np.uint64(1)
        mixed = np.concatenate([rng.choice(self.present_u64, half), absent_u64])
        self.batch_u64: U64Array = rng.permutation(mixed)

    def insert_keys(self) -> list[bytes]:
        """All present keys as ``bytes`` objects (the objects that get inserted)."""
        return _split(self.present16.tobytes())

    def drop_inserted(self) -> None:
        """Free the full key array once every filter is built (the samples stay)."""
        self.present16 = np.empty((0, KEY_BYTES), dtype=np.uint8)

    def present_sample(self) -> list[bytes]:
        """Fresh ``bytes`` objects for the present sample (equal to inserted keys)."""
        return _split(self._present_sample)

    def absent_sample(self) -> list[bytes]:
        """Fresh ``bytes`` objects for the absent sample."""
        return _split(self._absent_sample)


def _random_rows(rng: np.random.Generator, n: int, *, present: bool) -> npt.NDArray[np.uint8]:
    rows = np.frombuffer(rng.bytes(n * KEY_BYTES), dtype=np.uint8).reshape(n, KEY_BYTES).copy()
    if present:
        rows[:, 0] &= np.uint8(0xFE)
    else:
        rows[:, 0] |= np.uint8(1)
    return rows


def _split(buf: bytes) -> list[bytes]:
    return [buf[i:i + KEY_BYTES] for i in range(0, len(buf), KEY_BYTES)]


# -- subjects: the rows of the tables ----------------------------------------------------


@dataclass
class Subject:
    """Something answering membership: a bloomswarm filter or a competitor.

    ``container`` answers ``key in container``; when ``call`` is set the single-key loop
    calls it instead (a library's own per-key method). ``status`` is "ok" or why not.
    """

    name: str
    group: str
    container: Any = None
    call: Callable[[bytes], object] | None = None
    batch_bytes: Callable[[list[bytes]], object] | None = None
    batch_u64: Callable[[U64Array], object] | None = None
    batch_u64_threads: Callable[[U64Array], object] | None = None
    """The uint64 batch split across BATCH_THREADS threads (bloomswarm only)."""
    status: str = "ok"
    build_seconds: float | None = None
    size_bytes: int | None = None
    results: dict[str, Any] = field(default_factory=dict)

    @property
    def short_status(self) -> str:
        """The status without its explanation, for a table cell."""
        return self.status.split(" (", 1)[0]

    @property
    def available(self) -> bool:
        """True when it can be measured."""
        return self.status == "ok"

    def contains(self) -> Callable[[bytes], object]:
        """The per-key test used by the single-key loop."""
        return self.call if self.call is not None else self.container.__contains__


def unavailable(name: str, group: str, why: str) -> Subject:
    """A row that could not be measured."""
    return Subject(name=name, group=group, status=why)


def optional_import(module: str) -> ModuleType | None:
    """Import ``module`` or return None when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def c_available() -> bool:
    """True when the C extension is loaded (``engine="c"`` works)."""
    return EXTENSION is not None


def build_file(path: Path, layout: Layout, cfg: Config, keys: list[bytes] | U64Array) -> float:
    """Build a filter of ``keys`` (auto engine) and write it to ``path``; return seconds."""
    start = time.perf_counter()
    builder = FilterBuilder.for_capacity(cfg.keys, cfg.fpp, layout=layout)
    builder.add_many(keys)
    builder.write(path)
    return time.perf_counter() - start


def open_subject(name: str, path: Path, engine: Engine, u64_path: Path | None) -> Subject:
    """Open a bloomswarm filter file as a table row (unavailable when the engine is)."""
    try:
        f = Filter.open(path, engine=engine)
    except ConfigError:
        return unavailable(name, "bloomswarm", C_UNAVAILABLE)
    subject = Subject(name=name, group="bloomswarm", container=f, batch_bytes=f.contains_many,
                      size_bytes=f.params.num_bytes)
    if u64_path is not None:
        u64_filter = Filter.open(u64_path, engine=engine)
        subject.batch_u64 = u64_filter.contains_many
        subject.batch_u64_threads = partial(u64_filter.contains_many, threads=BATCH_THREADS)
    return subject


def bloomswarm_subjects(cfg: Config, keys: KeySpace, tmp: Path) -> list[Subject]:
    """Build the bloomswarm files and open them with each engine."""
    inserted = keys.insert_keys()
    blocked, standard, u64 = tmp / "blocked.bsf", tmp / "standard.bsf", tmp / "u64.bsf"
    t_blocked = build_file(blocked, Layout.BLOCKED, cfg, inserted)
    t_u64 = build_file(u64, Layout.BLOCKED, cfg, keys.present_u64)
    t_standard = build_file(standard, Layout.STANDARD, cfg, inserted) if c_available() else None
    del inserted
    print(f"built bloomswarm files ({resolve_engine('auto')} engine): blocked {t_blocked:.1f} s, "
          f"uint64 blocked {t_u64:.1f} s"
          + (f", standard {t_standard:.1f} s" if t_standard is not None else ""), flush=True)
    rows = [
        open_subject("bloomswarm C, blocked", blocked, "c", u64),
        open_subject("bloomswarm C, standard", standard, "c", None)
        if c_available() else unavailable("bloomswarm C, standard", "bloomswarm", C_UNAVAILABLE),
        open_subject("bloomswarm Python/numpy, blocked", blocked, "python", u64),
    ]
    for row, seconds in zip(rows, (t_blocked, t_standard, t_blocked), strict=True):
        if row.available:
            row.build_seconds = seconds
    return rows


def competitor_subjects(cfg: Config, keys: KeySpace, tmp: Path) -> list[Subject]:
    """Build every competitor from the same keys and target rate."""
    if cfg.skip_competitors:
        names = ("rbloom", "pybloomfiltermmap3", "fastbloom-rs", "fastbloom-rs .contains_bytes",
                 "Python set")
        return [unavailable(n, "competitor", "skipped (--skip-competitors)") for n in names]
    inserted = keys.insert_keys()
    rows = [
        _timed_build("rbloom", _rbloom, cfg, inserted, tmp),
        _timed_build("pybloomfiltermmap3", _pybloomfilter, cfg, inserted, tmp),
        *_fastbloom(cfg, inserted),
        _timed_build("Python set", _set, cfg, inserted, tmp),
    ]
    del inserted
    return rows


Builder = Callable[[Config, list[bytes], Path], "Subject | None"]


def _timed_build(
    name: str, build: Builder, cfg: Config, inserted: list[bytes], tmp: Path
) -> Subject:
    start = time.perf_counter()
    subject = build(cfg, inserted, tmp)
    if subject is None:
        return unavailable(name, "competitor", "not installed")
    subject.build_seconds = time.perf_counter() - start
    return subject


def _set(cfg: Config, inserted: list[bytes], tmp: Path) -> Subject | None:
    return Subject("Python set", "competitor", set(inserted))


def _rbloom(cfg: Config, inserted: list[bytes], tmp: Path) -> Subject | None:
    rbloom = optional_import("rbloom")
    if rbloom is None:
        return None
    bloom = rbloom.Bloom(cfg.keys, cfg.fpp)
    bloom.update(inserted)
    return Subject("rbloom", "competitor", bloom, size_bytes=bloom.size_in_bits // 8)


def _pybloomfilter(cfg: Config, inserted: list[bytes], tmp: Path) -> Subject | None:
    pybloomfilter = optional_import("pybloomfilter")
    if pybloomfilter is None:
        return None
    bloom = pybloomfilter.BloomFilter(cfg.keys, cfg.fpp, str(tmp / "pybloomfilter.bloom"))
    bloom.update(inserted)
    return Subject("pybloomfiltermmap3", "competitor", bloom, size_bytes=bloom.num_bits // 8)


def _fastbloom(cfg: Config, inserted: list[bytes]) -> list[Subject]:
    """fastbloom-rs twice: through ``in`` (its Python wrapper) and its Rust method."""
    module = optional_import("fastbloom_rs")
    if module is None:
        return [unavailable("fastbloom-rs", "competitor", "not installed"),
                unavailable("fastbloom-rs .contains_bytes", "competitor", "not installed")]
    start = time.perf_counter()
    bloom = module.FilterBuilder(cfg.keys, cfg.fpp).build_bloom_filter()
    bloom.add_bytes_batch(inserted)
    seconds = time.perf_counter() - start
    size = len(bloom.get_bytes())

    def batch(keys: list[bytes]) -> object:
        return bloom.contains_bytes_batch(keys, check_type=False)

    rust = bloom._py_bloom
    return [
        Subject("fastbloom-rs", "competitor", bloom, batch_bytes=batch, build_seconds=seconds,
                size_bytes=size),
        Subject("fastbloom-rs .contains_bytes", "competitor", rust, call=rust.contains_bytes,
                build_seconds=seconds, size_bytes=size),
    ]


# -- single-key and batch measurements ---------------------------------------------------


def loop_in(container: Any, keys: list[bytes]) -> None:
    """``k in container`` for every key (the timed single-key loop)."""
    for k in keys:
        k in container  # noqa: B015


def loop_call(fn: Callable[[bytes], object], keys: list[bytes]) -> None:
    """``fn(k)`` for every key (for a library's per-key method)."""
    for k in keys:
        fn(k)


def loop_empty(keys: list[bytes]) -> None:
    """The bare loop: its cost is part of every single-key row."""
    for _k in keys:
        pass


def single_key_case(subject: Subject, make_keys: Callable[[], list[bytes]]) -> Case:
    """Setup (fresh key objects) returning the timed loop for ``subject``."""
    def setup() -> Callable[[], object]:
        keys = make_keys()
        if subject.call is not None:
            call = subject.call
            return lambda: loop_call(call, keys)
        container = subject.container
        return lambda: loop_in(container, keys)
    return setup


def measure_single_key(subjects: list[Subject], keys: KeySpace, cfg: Config) -> dict[str, float]:
    """Fill each subject's single-key rates; return the empty loop's numbers."""
    cases: dict[str, Case] = {}
    for s in subjects:
        if s.available:
            cases[f"{s.name}|present"] = single_key_case(s, keys.present_sample)
            cases[f"{s.name}|absent"] = single_key_case(s, keys.absent_sample)

    def empty_setup() -> Callable[[], object]:
        sample = keys.present_sample()
        return lambda: loop_empty(sample)

    cases["empty loop"] = empty_setup
    timings = interleaved(cases, cfg.repeats)
    for s in subjects:
        if s.available:
            for kind in ("present", "absent"):
                t = timings[f"{s.name}|{kind}"]
                s.results[f"{kind}_per_s"] = t.rate(cfg.sample)
                s.results[f"{kind}_per_s_median"] = t.median_rate(cfg.sample)
    empty = timings["empty loop"]
    return {"per_s": empty.rate(cfg.sample), "ns_per_key": empty.best / cfg.sample * 1e9}


def measure_accuracy(subjects: list[Subject], keys: KeySpace) -> None:
    """False negatives on the present sample and the false-positive rate on the absent one."""
    present, absent = keys.present_sample(), keys.absent_sample()
    for s in subjects:
        if s.available:
            test = s.contains()
            s.results["false_negatives"] = len(present) - sum(map(bool, map(test, present)))
            s.results["fpp_measured"] = sum(map(bool, map(test, absent))) / len(absent)


def fixed_case(fn: Callable[[T], object], arg: T) -> Case:
    """A case timing ``fn(arg)`` with the same argument every run."""
    return lambda: (lambda: fn(arg))


def measure_batches(subjects: list[Subject], keys: KeySpace, cfg: Config) -> int:
    """Fill each subject's batch rates (uint64 array, list of bytes); return the list size."""
    mixed = keys.present_sample() + keys.absent_sample()
    u64 = keys.batch_u64
    for s in subjects:
        if not s.available:
            continue
        u64_fn, bytes_fn = s.batch_u64, s.batch_bytes
        if u64_fn is not None:
            u64_fn(u64)  # warm-up: page in the mapping
            timing = repeat(fixed_case(u64_fn, u64), cfg.repeats)
            s.results["batch_u64_per_s"] = timing.rate(len(u64))
            s.results["batch_u64_per_s_median"] = timing.median_rate(len(u64))
        if s.batch_u64_threads is not None:
            timing = repeat(fixed_case(s.batch_u64_threads, u64), cfg.repeats)
            s.results["batch_u64_threads_per_s"] = timing.rate(len(u64))
        if bytes_fn is not None:
            timing = repeat(fixed_case(bytes_fn, mixed), cfg.repeats)
            s.results["batch_bytes_per_s"] = timing.rate(len(mixed))
            s.results["batch_bytes_per_s_median"] = timing.median_rate(len(mixed))
    return len(mixed)


# -- reporting of the small-filter sections ----------------------------------------------


def ratio(value: float | None, reference: float | None) -> float | None:
    """``value / reference``, or None when either is missing."""
    if value is None or not reference:
        return None
    return value / reference


def rbloom_rates(subjects: list[Subject]) -> tuple[float | None, float | None]:
    """rbloom's single-key (present, absent) rates, the reference of every ratio."""
    for s in subjects:
        if s.name == "rbloom" and s.available:
            return s.results["present_per_s"], s.results["absent_per_s"]
    return None, None


def single_key_table(subjects: list[Subject], empty: dict[str, float], cfg: Config) -> str:
    """The single-key table: rates, ratios against rbloom, net ns per lookup, accuracy."""
    ref_p, ref_a = rbloom_rates(subjects)
    loop_ns = empty["ns_per_key"]
    rows: list[list[str]] = []
    for s in subjects:
        if not s.available:
            rows.append([s.name, s.short_status, "", "", "", "", "", ""])
            continue
        p, a = s.results["present_per_s"], s.results["absent_per_s"]
        s.results["present_vs_rbloom"] = ratio(p, ref_p)
        s.results["absent_vs_rbloom"] = ratio(a, ref_a)
        net = f"{1e9 / p - loop_ns:.0f}/{1e9 / a - loop_ns:.0f}"
        rows.append([
            s.name, fmt_rate(p), fmt_ratio(s.results["present_vs_rbloom"]), fmt_rate(a),
            fmt_ratio(s.results["absent_vs_rbloom"]), net,
            f"{s.results['fpp_measured']:.4f}", str(s.results["false_negatives"]),
        ])
    rows.append(["empty loop (for k in keys: pass)", fmt_rate(empty["per_s"]), "", "", "",
                 f"({loop_ns:.0f} ns)", "", ""])
    headers = [f"single key, `k in x`, {cfg.sample:,} keys each", "present", "x rbloom",
               "absent", "x rbloom", "net ns p/a", "fpp", "FN"]
    return format_table(headers, rows) + footnotes(subjects)


def footnotes(subjects: list[Subject]) -> str:
    """One line per distinct reason a row could not be measured."""
    reasons = {s.status: None for s in subjects if not s.available and "(" in s.status}
    return "".join(f"\n  {reason}" for reason in reasons)


def batch_table(subjects: list[Subject], n_bytes: int, cfg: Config) -> str:
    """The batch table: uint64 array and list-of-bytes rates, against rbloom's single key."""
    ref_p, _ = rbloom_rates(subjects)
    rows: list[list[str]] = []
    for s in subjects:
        if not s.available:
            rows.append([s.name, s.short_status, "", "", "", ""])
            continue
        u64 = s.results.get("batch_u64_per_s")
        u64_threads = s.results.get("batch_u64_threads_per_s")
        byt = s.results.get("batch_bytes_per_s")
        rows.append([s.name, fmt_rate(u64), fmt_rate(u64_threads), fmt_ratio(ratio(u64, ref_p)),
                     fmt_rate(byt), fmt_ratio(ratio(byt, ref_p))])
    headers = ["batch (contains_many or the library's batch call)",
               f"uint64 x{cfg.keys:,}", f"same, {BATCH_THREADS} threads", "x rbloom 1-key",
               f"list[bytes] x{n_bytes:,}", "x rbloom 1-key"]
    return format_table(headers, rows) + footnotes(subjects)


def subject_record(s: Subject) -> dict[str, Any]:
    """JSON form of one row."""
    return {"name": s.name, "group": s.group, "status": s.status,
            "build_seconds": s.build_seconds, "size_bytes": s.size_bytes, **s.results}


def release(subjects: list[Subject]) -> None:
    """Close bloomswarm filters and drop every container."""
    for s in subjects:
        if isinstance(s.container, Filter):
            s.container.close()
        s.container = s.call = s.batch_bytes = s.batch_u64 = None
    gc.collect()


def run_small(cfg: Config, tmp: Path) -> dict[str, Any]:
    """Sections 1-4: build, single-key and batch lookups of the ``--keys`` filter."""
    section(f"{cfg.keys:,} keys, target fpp {cfg.fpp}")
    keys = KeySpace(cfg)
    subjects = bloomswarm_subjects(cfg, keys, tmp) + competitor_subjects(cfg, keys, tmp)
    keys.drop_inserted()
    gc.collect()
    print("measuring single-key lookups ...", flush=True)
    measure_accuracy(subjects, keys)
    empty = measure_single_key(subjects, keys, cfg)
    print(single_key_table(subjects, empty, cfg), flush=True)
    print("measuring batches ...", flush=True)
    n_bytes = measure_batches(subjects, keys, cfg)
    print(batch_table(subjects, n_bytes, cfg), flush=True)
    sizes = ", ".join(f"{s.name} {fmt_bytes(s.size_bytes)}" for s in subjects
                      if s.available and s.size_bytes and s.call is None
                      and not s.name.startswith("bloomswarm Python"))
    if sizes:
        print(f"bit-array sizes: {sizes}")
    result = {"empty_loop": empty, "subjects": [subject_record(s) for s in subjects],
              "sample_keys": cfg.sample, "batch_u64_keys": cfg.keys, "batch_bytes_keys": n_bytes}
    release(subjects)
    return result


# -- the big filter ----------------------------------------------------------------------


def big_params(cfg: Config) -> tuple[FilterParams, int]:
    """Blocked params with ``--big-gib`` of bits, k sized for ``--fpp``; and the capacity."""
    num_bits = max(512, int(cfg.big_gib * 2**33) // 512 * 512)
    per_million_bits, k = size_filter(1_000_000, cfg.fpp, Layout.BLOCKED)
    capacity = int(num_bits / (per_million_bits / 1_000_000))
    return FilterParams(Layout.BLOCKED, num_bits, k), capacity


def build_big(cfg: Config, path: Path) -> dict[str, Any]:
    """Insert ``arange`` keys until full or out of time budget; write the file."""
    params, capacity = big_params(cfg)
    start = time.perf_counter()
    builder = FilterBuilder(params, capacity=capacity, target_fpp=cfg.fpp)
    inserted, chunk = 0, 1 << 20
    while inserted < capacity and time.perf_counter() - start < cfg.big_build_seconds:
        n = min(chunk, capacity - inserted)
        t0 = time.perf_counter()
        builder.add_many(np.arange(inserted, inserted + n, dtype=np.uint64))
        inserted += n
        if time.perf_counter() - t0 < 1.0:
            chunk = min(chunk * 2, 1 << 24)
    insert_s = time.perf_counter() - start
    builder.write(path)
    total_s = time.perf_counter() - start
    del builder
    gc.collect()
    return {"num_bits": params.num_bits, "num_probes": params.num_probes, "capacity": capacity,
            "keys_inserted": inserted, "fill_of_capacity": inserted / capacity,
            "insert_seconds": insert_s, "build_and_write_seconds": total_s,
            "build_engine": resolve_engine("auto"), "file_bytes": path.stat().st_size}


def open_times_ms(path: Path, engine: Engine, opens: int) -> dict[str, float] | None:
    """Median, best and first of ``opens`` timed ``Filter.open`` calls, in ms (None: no engine)."""
    times: list[float] = []
    for _ in range(opens + 1):
        start = time.perf_counter()
        try:
            f = Filter.open(path, engine=engine)
        except ConfigError:
            return None
        times.append((time.perf_counter() - start) * 1e3)
        f.close()
    return {"first_ms": times[0], "median_ms": statistics.median(times[1:]),
            "best_ms": min(times[1:])}


def big_queries(cfg: Config, inserted: int) -> U64Array:
    """Half present keys (from the inserted range), half absent (>= 2**63), shuffled."""
    rng = np.random.default_rng(cfg.seed + 1)
    half = cfg.big_batch_keys // 2
    present = rng.integers(0, max(inserted, 1), half, dtype=np.uint64)
    absent = rng.integers(2**63, 2**64 - 1, cfg.big_batch_keys - half, dtype=np.uint64)
    return rng.permutation(np.concatenate([present, absent]))


def big_batch(
    path: Path, engine: Engine, queries: U64Array, cfg: Config
) -> dict[str, float] | None:
    """Batch uint64 rate on the big filter with ``engine`` (None when unavailable)."""
    try:
        f = Filter.open(path, engine=engine)
    except ConfigError:
        return None
    try:
        answers = f.contains_many(queries)  # warm-up: maps every touched page
        half = len(queries) // 2
        timing: Timing = repeat(fixed_case(f.contains_many, queries), cfg.repeats)
        n = len(queries)
        return {"per_s": timing.rate(n), "per_s_median": timing.median_rate(n),
                "positives": float(answers.sum()), "expected_positives_at_least": float(half)}
    finally:
        f.close()


def touch_and_wait(path: str, ready: Any) -> None:
    """Child process: open the filter, touch every page, report, then wait to be killed."""
    f = Filter.open(path)
    body = f._body_u8  # the numpy view of the mapping: read one byte of every page
    checksum = int(body[::PAGE].sum(dtype=np.uint64)) + int(body[-1])
    hits = int(f.contains_many(np.arange(1000, dtype=np.uint64)).sum())
    ready.put((os.getpid(), checksum, hits))
    time.sleep(3600)


def shared_memory(path: Path, cfg: Config) -> dict[str, Any]:
    """Spawn ``--processes`` children mapping ``path``; read their Rss/Pss; stop them by PID."""
    ctx = mp.get_context("spawn")
    ready = ctx.Queue()
    procs = [ctx.Process(target=touch_and_wait, args=(str(path), ready), daemon=True)
             for _ in range(cfg.processes)]
    for p in procs:
        p.start()
    try:
        reports = [ready.get(timeout=300) for _ in procs]
        time.sleep(0.2)
        rows = [_child_memory(pid, path) for pid, _, _ in reports]
    finally:
        _stop_by_pid(procs)
    file_bytes = path.stat().st_size
    pss_sum = sum(r["pss"] for r in rows)
    mapped_pss_sum = sum(r["file_mapping_pss"] for r in rows)
    return {"processes": rows, "file_bytes": file_bytes, "pss_sum": pss_sum,
            "pss_sum_over_file": pss_sum / file_bytes,
            "file_mapping_pss_sum": mapped_pss_sum,
            "file_mapping_pss_sum_over_file": mapped_pss_sum / file_bytes,
            "parent_file_mapping_rss": mapping_memory(os.getpid(), path)["Rss"]}


def _child_memory(pid: int, path: Path) -> dict[str, int]:
    roll = smaps_rollup(pid)
    mapped = mapping_memory(pid, path)
    return {"pid": pid, "rss": roll["Rss"], "pss": roll["Pss"],
            "pss_file": roll.get("Pss_File", 0), "pss_anon": roll.get("Pss_Anon", 0),
            "file_mapping_rss": mapped["Rss"], "file_mapping_pss": mapped["Pss"]}


def _stop_by_pid(procs: list[Any]) -> None:
    """SIGTERM each child by its PID, then SIGKILL the ones still alive."""
    for p in procs:
        if p.pid is not None and p.is_alive():
            os.kill(p.pid, signal.SIGTERM)
    for p in procs:
        p.join(timeout=10)
        if p.pid is not None and p.is_alive():
            os.kill(p.pid, signal.SIGKILL)
            p.join(timeout=10)


def run_big(cfg: Config, tmp: Path) -> dict[str, Any]:
    """Section 5: the big filter's open time, batch rates and shared memory."""
    section(f"big filter: {cfg.big_gib} GiB bit array")
    path = tmp / "big.bsf"
    info = build_big(cfg, path)
    print(f"built {fmt_bytes(info['file_bytes'])} file, k={info['num_probes']}: "
          f"{info['keys_inserted']:,} keys inserted of capacity {info['capacity']:,} "
          f"({info['fill_of_capacity']:.0%}) in {info['insert_seconds']:.1f} s "
          f"({info['build_engine']} engine), {info['build_and_write_seconds']:.1f} s with write",
          flush=True)
    info["open"] = {e: open_times_ms(path, e, cfg.opens) for e in ("c", "python", "auto")}
    queries = big_queries(cfg, info["keys_inserted"])
    info["batch_keys"] = len(queries)
    info["batch_u64"] = {"c": big_batch(path, "c", queries, cfg),
                         "numpy": big_batch(path, "python", queries, cfg)}
    del queries
    gc.collect()
    info["shared"] = shared_memory(path, cfg)
    print(big_table(info, cfg), flush=True)
    print(processes_table(info["shared"]), flush=True)
    return info


def big_table(info: dict[str, Any], cfg: Config) -> str:
    """Open times and batch rates of the big filter, per engine."""
    rows: list[list[str]] = []
    for engine, batch_key in (("c", "c"), ("python", "numpy")):
        opened = info["open"][engine]
        batch = info["batch_u64"][batch_key]
        if opened is None:
            rows.append([f"bloomswarm {engine}", "unavailable", "", ""])
            continue
        rows.append([
            f"bloomswarm {engine if engine == 'c' else 'python/numpy'}",
            f"{opened['median_ms']:.3f} ms", f"{opened['first_ms']:.3f} ms",
            fmt_rate(batch["per_s"]) if batch else "n/a",
        ])
    headers = ["big filter", f"open (median of {cfg.opens})", "first open",
               f"batch uint64 x{info['batch_keys']:,}"]
    return format_table(headers, rows)


def processes_table(shared: dict[str, Any]) -> str:
    """Rss and Pss of the processes sharing one mapping, and the total against the file."""
    rows = [[str(r["pid"]), fmt_bytes(r["rss"]), fmt_bytes(r["pss"]), fmt_bytes(r["pss_anon"]),
             fmt_bytes(r["file_mapping_pss"])] for r in shared["processes"]]
    rows.append(["sum", "", fmt_bytes(shared["pss_sum"]), "",
                 fmt_bytes(shared["file_mapping_pss_sum"])])
    rows.append([f"/ file ({fmt_bytes(shared['file_bytes'])})", "",
                 f"{shared['pss_sum_over_file']:.3f}", "",
                 f"{shared['file_mapping_pss_sum_over_file']:.3f}"])
    headers = [f"{len(shared['processes'])} processes (smaps_rollup)", "Rss", "Pss", "Pss_Anon",
               "Pss of the file mapping"]
    return format_table(headers, rows)


# -- acceptance --------------------------------------------------------------------------


def _subject(small: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    if small is None:
        return None
    for row in small["subjects"]:
        if row["name"] == name and row["status"] == "ok":
            return dict(row)
    return None


def acceptance(small: dict[str, Any] | None, big: dict[str, Any] | None) -> list[Check]:
    """The targets, measured on the engine users get by default (``auto``)."""
    auto = resolve_engine("auto")
    main_name = "bloomswarm C, blocked" if auto == "c" else "bloomswarm Python/numpy, blocked"
    main, py = _subject(small, main_name), _subject(small, "bloomswarm Python/numpy, blocked")
    engine_note = f"engine={auto}"
    checks = [
        Check("single-key `in`, present keys, vs rbloom", _get(main, "present_vs_rbloom"),
              1.2, ">=", "x", engine_note),
        Check("single-key `in`, absent keys, vs rbloom", _get(main, "absent_vs_rbloom"),
              1.2, ">=", "x", engine_note),
        Check("batch uint64, small filter", _get(main, "batch_u64_per_s"), 80e6, ">=", "keys/s",
              engine_note + ", 1 thread"),
        Check("batch uint64, small filter", _get(main, "batch_u64_threads_per_s"), 80e6, ">=",
              "keys/s", engine_note + f", contains_many(threads={BATCH_THREADS})"),
    ]
    big_batch_rate = None
    if big is not None:
        entry = big["batch_u64"]["c" if auto == "c" else "numpy"]
        big_batch_rate = entry["per_s"] if entry else None
    checks.append(Check("batch uint64, big filter", big_batch_rate, 30e6, ">=", "keys/s",
                        engine_note + (f", {fmt_bytes(big['file_bytes'])}" if big else "")))
    py_rate = None if py is None else min(py["present_per_s"], py["absent_per_s"])
    checks.append(Check("pure-Python single-key (min of present/absent)", py_rate, 1.5e6, ">=",
                        "keys/s", "engine=python"))
    open_ms = big["open"]["auto"]["median_ms"] if big else None
    checks.append(Check("Filter.open of the big filter (median)", open_ms, 1.0, "<=", "ms",
                        engine_note))
    pss = big["shared"]["pss_sum_over_file"] if big else None
    checks.append(Check("sum of Pss of the processes / file size", pss, 1.25, "<=", "",
                        f"{big['shared']['file_mapping_pss_sum_over_file']:.3f} counting the "
                        "file mapping only" if big else ""))
    return checks


def _get(row: dict[str, Any] | None, key: str) -> float | None:
    if row is None:
        return None
    value = row.get(key)
    return None if value is None else float(value)


# -- main --------------------------------------------------------------------------------


def run(cfg: Config) -> dict[str, Any]:
    """Run every section and return all numbers (also printed)."""
    info = machine_info()
    print(f"{info['cpu_model']}, {info['nproc']} CPUs, Python {info['python']}, {info['date']}, "
          f"load average {info['loadavg']}")
    print(f"C extension: {'loaded' if c_available() else C_UNAVAILABLE}", flush=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bloomswarm-bench-") as tmp_name:
        tmp = Path(tmp_name)
        small = run_small(cfg, tmp)
        for name in ("blocked.bsf", "standard.bsf", "u64.bsf", "pybloomfilter.bloom"):
            (tmp / name).unlink(missing_ok=True)
        big = None if cfg.skip_big else run_big(cfg, tmp)
    checks = acceptance(small, big)
    section("acceptance")
    for check in checks:
        print(check.line())
    print(f"load average at start {info['loadavg']}, at end {load_average()} "
          f"({info['nproc']} CPUs; other work on the machine slows every row)")
    config = {k: v for k, v in vars(cfg).items() if k != "json_path"}
    return {"machine": info, "config": config, "c_extension": c_available(),
            "auto_engine": resolve_engine("auto"), "small": small, "big": big,
            "checks": [c.as_dict() for c in checks],
            "loadavg_at_end": load_average(),
            "total_seconds": time.perf_counter() - started}


def main(argv: list[str] | None = None) -> int:
    """Entry point: parse options, run, write JSON when asked. Always 0 unless it crashes."""
    stop_on_signals()
    cfg = parse_args(argv)
    results = run(cfg)
    if cfg.json_path:
        write_json(cfg.json_path, results)
        print(f"\nwrote {cfg.json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
