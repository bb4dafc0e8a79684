"""Build benchmark: keys/s of the local C, pure-Python and Dask builds; upload and publish time.

Run from the repository root::

    python benchmarks/build.py [--keys 100000000] [--files 8] [--python-sample 2000000]
                               [--publish-gib 1.0] [--repeats 3] [--cache-dir DIR]
                               [--skip-dask] [--skip-publish] [--json out.json] [--quick]

Sections, in one run:

1. **Inputs.** ``--files`` text files holding ``--keys`` random 16-byte keys (16 hex
   digits and a newline per line), generated with numpy and kept in ``--cache-dir`` for
   the next run; plus one sample file of ``--python-sample`` keys.
2. **Kernel, from memory** (no parsing; only ``add_many`` is timed): the C extension on
   lists of 16-byte ``bytes`` keys (1M per call) and on uint64 arrays (4M per call) for
   all ``--keys`` keys; the pure-Python path (mmh3 + bitarray) and the numpy batch path
   on the ``--python-sample`` first keys only, because the pure-Python path runs at well
   under 1M keys/s. Each build is single-threaded, so these rates are per core.
3. **End to end from the text files**: ``build_filter`` (read, split, validate, insert)
   locally with the C kernel, and with ``--engine dask`` on a LocalCluster of 1 and of 2
   worker processes (started as ``--engine dask`` starts them, before the clock does),
   round-robin; then the pure-Python kernel once on the sample file. The Dask results
   are compared with the local build's body (bit-identical) and the scaling efficiency
   is rate(2 workers) / (2 × rate(1 worker)).
4. **Upload**: a ``--publish-gib`` filter file sent to moto's S3 server (a child process
   on loopback, stopped by PID) with ``S3ObjectStore.upload_file`` (the path ``publish``
   uses: 64 MiB parts, one at a time, SHA-256 checksums) and with boto3's
   ``upload_file`` (8 MiB parts, 10 threads), interleaved; and, when
   ``bloomswarm.publisher.publish`` exists, the whole ``publish_filter`` (file, torrent,
   upload, manifest, signature, latest.json) of the same filter.
5. Acceptance checks, printed as PASS/FAIL/SKIP lines.

The machine may be shared, so every comparison is made inside one run and noise is
damped: kernel rows take the fastest of ``--repeats`` insertions of every batch (into
separate builders), end-to-end and upload rows the fastest of ``--repeats`` round-robin
runs (medians are in the JSON), and the load average is recorded.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import importlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

if __package__ in (None, ""):  # run as a script: make `benchmarks` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import numpy.typing as npt

from benchmarks._common import (
    Check,
    Timing,
    fill_defaults,
    fmt_bytes,
    fmt_rate,
    format_table,
    load_average,
    machine_info,
    open_fraction,
    output_path,
    positive_float,
    positive_int,
    section,
    stop_on_signals,
    work_dir,
    write_json,
)

# The editable install maps bloomswarm.* with an import hook mypy cannot follow.
from bloomswarm.common.builder import FilterBuilder  # type: ignore[import-not-found, unused-ignore]
from bloomswarm.common.fastpath import EXTENSION  # type: ignore[import-not-found, unused-ignore]
from bloomswarm.common.params import FilterParams, Layout  # type: ignore[import-not-found, unused-ignore]
from bloomswarm.common.storage import S3Config, S3ObjectStore  # type: ignore[import-not-found, unused-ignore]
from bloomswarm.publisher.build import BuildSpec, build_filter  # type: ignore[import-not-found, unused-ignore]
from bloomswarm.publisher.distributed import (  # type: ignore[import-not-found, unused-ignore]
    start_local_cluster,
)
from bloomswarm.publisher.sources import SourceSpec  # type: ignore[import-not-found, unused-ignore]

KEY_BYTES = 16
LINE_BYTES = KEY_BYTES + 1
INPUT_FORMAT = 1
"""Bump when the generated inputs change, so cached ones are regenerated."""
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_GEN_CHUNK = 4_000_000
_BYTES_CHUNK = 1_000_000
_U64_CHUNK = 4_000_000
MIB = 1 << 20

Kernel = Literal["c", "python"]


@dataclass(frozen=True)
class Config:
    """The benchmark's parameters."""

    keys: int
    files: int
    python_sample: int
    fpp: float
    publish_bytes: int
    repeats: int
    cache_dir: Path | None
    """Where generated inputs are kept; None: a temporary directory, removed at the end."""
    skip_dask: bool
    skip_publish: bool
    quick: bool


@dataclass(frozen=True)
class Row:
    """One measured build rate."""

    name: str
    keys: int
    timing: Timing
    note: str = ""

    @property
    def rate(self) -> float:
        return self.timing.rate(self.keys)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name, "keys": self.keys, "best_s": self.timing.best,
            "median_s": self.timing.median, "keys_per_s": self.rate,
            "median_keys_per_s": self.timing.median_rate(self.keys), "note": self.note,
        }


# -- inputs ------------------------------------------------------------------------------


def key_lines(rng: np.random.Generator, count: int) -> npt.NDArray[np.uint8]:
    """``count`` random keys as an (count, 17) array of hex digits and a newline."""
    lines = np.empty((count, LINE_BYTES), dtype=np.uint8)
    lines[:, :KEY_BYTES] = _HEX[rng.integers(0, 16, size=(count, KEY_BYTES), dtype=np.uint8)]
    lines[:, KEY_BYTES] = ord("\n")
    return lines


def split_counts(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal counts."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def ensure_inputs(cache: Path, name: str, total: int, files: int, seed: int) -> list[Path]:
    """The input files, generated unless the cache holds them already (same recipe)."""
    folder = cache / name
    recipe = {"format": INPUT_FORMAT, "keys": total, "files": files, "seed": seed}
    counts = split_counts(total, files)
    paths = [folder / f"keys-{i:02d}.txt" for i in range(files)]
    stamp = folder / "recipe.json"
    if stamp.exists() and json.loads(stamp.read_text()) == recipe and all(
        p.exists() and p.stat().st_size == c * LINE_BYTES for p, c in zip(paths, counts, strict=True)
    ):
        print(f"reusing {total:,} keys in {folder}")
        return paths
    folder.mkdir(parents=True, exist_ok=True)
    stamp.unlink(missing_ok=True)
    started = time.perf_counter()
    for index, (path, count) in enumerate(zip(paths, counts, strict=True)):
        rng = np.random.default_rng([seed, index])
        with open(path, "wb") as fh:
            for done in range(0, count, _GEN_CHUNK):
                key_lines(rng, min(_GEN_CHUNK, count - done)).tofile(fh)
    stamp.write_text(json.dumps(recipe))
    print(f"generated {total:,} keys in {files} files ({fmt_bytes(total * LINE_BYTES)}) "
          f"in {time.perf_counter() - started:.1f} s: {folder}")
    return paths


def byte_key_chunks(paths: list[Path], limit: int, chunk: int) -> Iterator[list[bytes]]:
    """The first ``limit`` keys of the files as lists of 16-byte ``bytes`` (``chunk`` each)."""
    left = limit
    for path in paths:
        with open(path, "rb") as fh:
            while left > 0:
                lines = np.fromfile(fh, dtype=np.uint8, count=min(chunk, left) * LINE_BYTES)
                if not len(lines):
                    break
                keys = np.ascontiguousarray(lines.reshape(-1, LINE_BYTES)[:, :KEY_BYTES])
                batch: list[bytes] = keys.view(f"S{KEY_BYTES}").ravel().tolist()
                left -= len(batch)
                yield batch
        if left <= 0:
            return


# -- kernel from memory ---------------------------------------------------------------------


def time_kernel(make: Callable[[], FilterBuilder], batches: Iterator[Any], repeats: int) -> tuple[float, int]:
    """Seconds spent in ``add_many`` over ``batches``, best of ``repeats`` per batch.

    Every batch goes into ``repeats`` builders in turn (each ends up a complete build) and
    the fastest of its insertions counts, so a burst of other load on a shared machine
    does not decide the result. Preparing the batches is not timed.
    """
    builders = [make() for _ in range(repeats)]
    spent, count = 0.0, 0
    for batch in batches:
        best = float("inf")
        for builder in builders:
            started = time.perf_counter()
            builder.add_many(batch)
            best = min(best, time.perf_counter() - started)
        spent += best
        count += len(batch)
    return spent, count


def u64_chunks(total: int, chunk: int, seed: int) -> Iterator[npt.NDArray[np.uint64]]:
    rng = np.random.default_rng(seed)
    for done in range(0, total, chunk):
        yield rng.integers(0, 2**64 - 1, size=min(chunk, total - done), dtype=np.uint64)


def kernel_rows(cfg: Config, paths: list[Path]) -> list[Row]:
    section(f"Kernel only, from memory (add_many timed, best of {cfg.repeats} per batch; "
            f"{cfg.fpp:g} target, blocked)")
    rows: list[Row] = []

    def fresh(engine: Kernel) -> Callable[[], FilterBuilder]:
        return lambda: FilterBuilder.for_capacity(cfg.keys, cfg.fpp, engine=engine)

    def row(name: str, measured: tuple[float, int], note: str) -> None:
        spent, count = measured
        rows.append(Row(name, count, Timing((spent,)), note))

    if EXTENSION is not None:
        row("local C, 16-byte bytes keys",
            time_kernel(fresh("c"), byte_key_chunks(paths, cfg.keys, _BYTES_CHUNK), cfg.repeats),
            "lists of 1M keys")
        row("local C, uint64 arrays",
            time_kernel(fresh("c"), u64_chunks(cfg.keys, _U64_CHUNK, 1), cfg.repeats),
            "arrays of 4M keys")
    sample = min(cfg.python_sample, cfg.keys)
    row("local pure Python, 16-byte bytes keys",
        time_kernel(fresh("python"), byte_key_chunks(paths, sample, _BYTES_CHUNK), 1),
        f"sample of {sample:,} keys")
    row("local numpy batch path, uint64 arrays",
        time_kernel(fresh("python"), u64_chunks(sample, _U64_CHUNK, 2), 1),
        f"sample of {sample:,} keys")
    print_rows(rows)
    return rows


# -- end to end from text files ----------------------------------------------------------------


def timed_build(source: SourceSpec, spec: BuildSpec) -> tuple[float, FilterBuilder]:
    started = time.perf_counter()
    builder = build_filter(source, spec)
    return time.perf_counter() - started, builder


def end_to_end_rows(
    cfg: Config, paths: list[Path], sample_path: Path
) -> tuple[list[Row], list[Row], list[bool]]:
    """The text-file builds: local C, Dask on 1 and on 2 workers round-robin (best of
    ``repeats``), then the pure-Python kernel once on the sample file."""
    section("End to end from text files (read, split, validate, insert), round-robin")
    kernel: Kernel = "c" if EXTENSION is not None else "python"
    source = SourceSpec([str(p) for p in paths], key_type="bytes")
    base = BuildSpec(target_fpp=cfg.fpp, expected_keys=cfg.keys, kernel=kernel, progress=False)
    with contextlib.ExitStack() as stack:
        specs = {"local C, text files" if kernel == "c" else "local pure Python, text files": base}
        if not cfg.skip_dask:
            dask: Any = importlib.import_module("distributed")  # untyped
            for workers in (1, 2):
                cluster = stack.enter_context(start_local_cluster(workers))  # as --engine dask does
                client = stack.enter_context(dask.Client(cluster))
                client.run(importlib.import_module, "bloomswarm.publisher.distributed")  # warm up
                name = f"Dask, {workers} worker{'s' if workers > 1 else ''} ({kernel} kernel)"
                address = str(cluster.scheduler_address)
                specs[name] = dataclasses.replace(base, engine="dask", scheduler=address)
        samples: dict[str, list[float]] = {name: [] for name in specs}
        digests: dict[str, bytes] = {}
        counts: dict[str, int] = {}
        for _ in range(cfg.repeats):
            for name, spec in specs.items():
                seconds, builder = timed_build(source, spec)
                samples[name].append(seconds)
                digests[name] = hashlib.sha256(builder.body).digest()
                counts[name] = builder.key_count
                del builder
    local_name = next(iter(specs))
    identical = [digests[name] == digests[local_name] for name in specs if name.startswith("Dask")]
    rows = [
        Row(name, counts[name], Timing(tuple(samples[name])),
            f"{len(paths)} files" if name == local_name
            else "bit-identical to local" if digests[name] == digests[local_name] else "DIFFERS from local")
        for name in specs
    ]
    seconds, builder = timed_build(
        SourceSpec([str(sample_path)], key_type="bytes"),
        dataclasses.replace(base, expected_keys=cfg.python_sample, kernel="python"),
    )
    rows.append(Row("local pure Python, text file", builder.key_count, Timing((seconds,)),
                    f"sample file of {builder.key_count:,} keys"))
    print_rows(rows)
    dask_rows = [r for r in rows if r.name.startswith("Dask")]
    return [r for r in rows if r not in dask_rows], dask_rows, identical


def print_rows(rows: list[Row]) -> None:
    table = [[r.name, f"{r.keys:,}", f"{r.timing.best:.2f} s", fmt_rate(r.rate), r.note] for r in rows]
    print(format_table(["build", "keys", "time (best)", "rate", "note"], table))


# -- upload and publish --------------------------------------------------------------------------


def big_filter(size: int) -> FilterBuilder:
    """A blocked filter whose body is ``size`` bytes (a multiple of 64), with 1M keys in it."""
    params = FilterParams(Layout.BLOCKED, num_bits=size * 8, num_probes=7)
    builder = FilterBuilder(params, capacity=int(size * 8 / 9.6), target_fpp=0.01)
    builder.add_many(np.random.default_rng(3).integers(0, 2**63, size=1_000_000, dtype=np.int64))
    return builder


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    """moto's S3 server as a child process, with fake credentials; yields its endpoint."""
    from bloomswarm.sandbox.s3server import FAKE_CREDENTIALS, MotoServer

    saved = {k: os.environ.get(k) for k in [*FAKE_CREDENTIALS, "NO_PROXY", "no_proxy"]}
    os.environ.update(FAKE_CREDENTIALS)
    os.environ["NO_PROXY"] = os.environ["no_proxy"] = "127.0.0.1,localhost"
    server = MotoServer()
    try:
        yield server.start()
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def publish_section(cfg: Config) -> dict[str, Any]:
    section(f"Upload of a {fmt_bytes(cfg.publish_bytes)} filter to moto's S3 server on loopback")
    import boto3

    builder = big_filter(cfg.publish_bytes)
    with tempfile.TemporaryDirectory(prefix="bloomswarm-bench-") as tmp, moto_server() as endpoint:
        path = Path(tmp) / "filter.bsf"
        builder.write(path)
        size = path.stat().st_size
        client: Any = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        client.create_bucket(Bucket="bench")
        part_size = 5 * MIB if cfg.quick else 64 * MIB
        s3 = S3Config(bucket="bench", prefix="fleet", endpoint_url=endpoint, region="us-east-1",
                      part_size=part_size)
        store = S3ObjectStore(s3)
        ours: list[float] = []
        theirs: list[float] = []
        for _ in range(cfg.repeats):
            started = time.perf_counter()
            store.upload_file("upload/filter.bsf", path)
            ours.append(time.perf_counter() - started)
            store.delete(["upload/filter.bsf"])
            started = time.perf_counter()
            client.upload_file(str(path), "bench", "boto3/filter.bsf")
            theirs.append(time.perf_counter() - started)
            client.delete_object(Bucket="bench", Key="boto3/filter.bsf")
        publish = time_publish(store, s3, builder, Path(tmp))
    result = {
        "file_bytes": size,
        "part_size": part_size,
        "store_upload": timing_dict(Timing(tuple(ours)), size),
        "boto3_upload_file": timing_dict(Timing(tuple(theirs)), size),
        "ratio": min(ours) / min(theirs),
        "publish": publish,
    }
    rows = [
        ["S3ObjectStore.upload_file (publish's path)", f"{min(ours):.2f} s", mb_s(size, min(ours))],
        ["boto3 upload_file", f"{min(theirs):.2f} s", mb_s(size, min(theirs))],
    ]
    if publish.get("status") == "ok":
        rows.append(["whole publish_filter (file, torrent, upload, manifest, latest)",
                     f"{publish['seconds']:.2f} s", mb_s(size, publish["seconds"])])
    print(format_table(["upload", "time (best)", "throughput"], rows))
    print(f"upload time / boto3 upload_file time: {result['ratio']:.2f}x")
    if publish.get("status") != "ok":
        print(f"whole publish: {publish.get('status')}")
    return result


def time_publish(store: Any, s3: Any, builder: FilterBuilder, work_dir: Path) -> dict[str, Any]:
    """Time ``publish_filter`` when the publisher module exists; else say why not."""
    try:
        publish = importlib.import_module("bloomswarm.publisher.publish")
        config = importlib.import_module("bloomswarm.publisher.config")
        signing = importlib.import_module("bloomswarm.common.signing")
    except ImportError as exc:
        return {"status": f"skipped: publisher not available ({exc})"}
    try:
        private_pem, _ = signing.generate_keypair()
        key = signing.parse_private_key(private_pem)
        cfg = config.PublisherConfig(s3=s3, work_dir=work_dir)
        started = time.perf_counter()
        result = publish.publish_filter(store, cfg, builder, key, "benchmark", force=True, progress=False)
        seconds = time.perf_counter() - started
    except Exception as exc:  # the publisher is another module's work in progress
        return {"status": f"failed: {type(exc).__name__}: {exc}"}
    return {"status": "ok", "seconds": seconds, "version": getattr(result, "version", None)}


def timing_dict(timing: Timing, size: int) -> dict[str, Any]:
    return {"samples_s": list(timing.samples), "best_s": timing.best, "median_s": timing.median,
            "bytes_per_s": size / timing.best}


def mb_s(size: int, seconds: float) -> str:
    return f"{size / seconds / MIB:.1f} MiB/s"


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> tuple[Config, Path | None]:
    """The benchmark's configuration and the JSON output path."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--keys", type=positive_int(10**10), help="keys in the filter (100M)")
    parser.add_argument("--files", type=positive_int(10_000), help="input text files (8)")
    parser.add_argument("--python-sample", type=positive_int(10**9),
                        help="keys of the pure-Python build (2M)")
    parser.add_argument("--fpp", type=open_fraction, default=0.01)
    parser.add_argument("--publish-gib", type=positive_float(1024), help="size of the uploaded file (1)")
    parser.add_argument("--repeats", type=positive_int(1000), help="runs per measurement (3)")
    parser.add_argument("--cache-dir", type=work_dir,
                        help="keep generated inputs here (default: ~/.cache/bloomswarm-bench; "
                             "with --quick, a temporary directory)")
    parser.add_argument("--skip-dask", action="store_true")
    parser.add_argument("--skip-publish", action="store_true")
    parser.add_argument("--json", type=output_path, help="write the results here")
    parser.add_argument("--quick", action="store_true",
                        help="tiny sizes, for a smoke test (options given explicitly win)")
    args = parser.parse_args(argv)
    if args.quick:
        defaults = {"keys": 200_000, "files": 4, "python_sample": 20_000, "publish_gib": 16 / 1024,
                    "repeats": 1}
    else:
        defaults = {"keys": 100_000_000, "files": 8, "python_sample": 2_000_000, "publish_gib": 1.0,
                    "repeats": 3}
    fill_defaults(args, defaults)
    default_cache = None if args.quick else (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bloomswarm-bench"
    )
    publish_bytes = max(64, int(args.publish_gib * 1024**3) // 64 * 64)
    return Config(
        keys=args.keys, files=args.files, python_sample=args.python_sample, fpp=args.fpp,
        publish_bytes=publish_bytes, repeats=args.repeats,
        cache_dir=args.cache_dir or default_cache, skip_dask=args.skip_dask,
        skip_publish=args.skip_publish, quick=args.quick,
    ), args.json


def checks_of(rows: list[Row], dask: list[Row], identical: list[bool], upload: dict[str, Any]) -> list[Check]:
    by_name = {r.name: r for r in rows}
    c_bytes = by_name.get("local C, 16-byte bytes keys")
    efficiency = dask[1].rate / (2 * dask[0].rate) if len(dask) == 2 else None
    return [
        Check("local C build, 16-byte keys, per core", c_bytes.rate if c_bytes else None, 10e6, ">=",
              "keys/s", "kernel only, from memory"),
        Check("Dask scaling efficiency, 2 workers", efficiency, 0.7, ">=", "",
              "rate(2) / (2 x rate(1)), end to end from text files"),
        Check("Dask result bit-identical to the local build", float(all(identical)) if identical else None,
              1.0, ">=", "", "1 = every Dask body equals the local body"),
        Check("upload time vs boto3 upload_file", upload.get("ratio"), 2.0, "<=", "x",
              "S3ObjectStore.upload_file / boto3 upload_file, same file, same run"),
    ]


def main(argv: list[str] | None = None) -> int:
    stop_on_signals()
    cfg, json_path = parse_args(argv)
    info = machine_info()
    print(f"machine: {info['nproc']} CPUs, {info['cpu_model']}, load {info['loadavg']}")
    print(f"C extension: {'yes' if EXTENSION is not None else 'no (pure Python only)'}")
    with contextlib.ExitStack() as stack:
        cache = cfg.cache_dir or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="bloomswarm-bench-"))
        )
        section("Inputs")
        paths = ensure_inputs(cache, f"hex16-{cfg.keys}x{cfg.files}", cfg.keys, cfg.files, seed=20240601)
        sample = ensure_inputs(cache, f"hex16-sample-{cfg.python_sample}", cfg.python_sample, 1, seed=7)[0]
        kernel = kernel_rows(cfg, paths)
        text, dask, identical = end_to_end_rows(cfg, paths, sample)
    upload = {} if cfg.skip_publish else publish_section(cfg)
    checks = checks_of(kernel + text, dask, identical, upload)
    section("Checks")
    for check in checks:
        print(check.line())
    info["loadavg_end"] = load_average()
    if json_path is not None:
        write_json(json_path, {
            "machine": info,
            "config": {k: str(v) if isinstance(v, Path) else v for k, v in cfg.__dict__.items()},
            "c_extension": EXTENSION is not None,
            "kernel": [r.as_dict() for r in kernel],
            "text": [r.as_dict() for r in text],
            "dask": [r.as_dict() for r in dask],
            "dask_identical": identical,
            "upload": upload,
            "checks": [c.as_dict() for c in checks],
        })
        print(f"\nwrote {json_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
