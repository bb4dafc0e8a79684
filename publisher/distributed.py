"""The distributed build: partial filters on Dask workers, merged by a tree of ORs.

How it runs (``bloomswarm build ... --engine dask [--scheduler ADDRESS]``):

1. The client resolves the inputs and plans **partitions** (:func:`plan_partitions`):
   an uncompressed, non-CSV text input larger than :data:`SPLIT_BYTES` is split into
   byte ranges of about that size (a range owns the lines that start in it); a Parquet
   input is split into runs of row groups of about that size; a gzip, zstd or CSV input
   is one partition (it cannot be read from the middle). Empty inputs are dropped, after
   the check the local build makes: with ``parquet_column`` and no ``csv_column`` every
   input must be Parquet (:func:`~.sources.check_parquet_only`).
2. The partitions are packed into :data:`PARTIALS_PER_THREAD` tasks per worker thread,
   balanced by size (:func:`group_partitions`). One task reads its partitions and fills
   one partial filter, so a worker holds a bounded number of bit arrays at a time.
3. Without ``expected_keys``, a first distributed pass counts the keys (the same tasks,
   returning counts); the filter is sized from the sum, exactly as the local build does,
   and the keys inserted must add up to it (InputError otherwise, as locally).
4. Every task builds its partial filter with the **same parameters** (size, k, layout,
   seed) and returns the bit array as bytes plus its key count. Pairwise merge tasks
   (:meth:`FilterBuilder.merge`, a bitwise OR) reduce them level by level on the
   workers; only the final filter travels to the client.

OR is associative and commutative and a key sets the same bits wherever it is inserted,
so the result equals the local build bit for bit (same body, same key count).

Without a scheduler address a :class:`distributed.LocalCluster` of worker processes is
started for the build (one per CPU, or ``BuildSpec.workers``) and closed after it. On a
real cluster, every worker needs bloomswarm installed and must reach the inputs: local
paths must name the same files on every worker (a shared file system), and ``s3://``
inputs are read by each worker with its own AWS credential chain (instance or pod role)
and the endpoint the client resolved (it travels with each partition).
"""

from __future__ import annotations

import contextlib
import heapq
import importlib
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from bloomswarm.common.builder import FilterBuilder
from bloomswarm.common.errors import BloomswarmError, ConfigError, InputError
from bloomswarm.common.fastpath import Engine
from bloomswarm.common.params import FilterParams

from .build import BuildSpec, empty_builder, warn_if_over_capacity
from .progress import Progress
from .source_inputs import input_size, read_magic, resolve_inputs
from .source_parquet import PARQUET_MAGIC
from .source_text import is_compressed
from .sources import (
    InputRef,
    Partition,
    SourceSpec,
    check_parquet_only,
    iter_partition_batches,
    parquet_row_group_sizes,
)

log = logging.getLogger("bloomswarm.distributed")

SPLIT_BYTES = 256 << 20
"""Target size of a partition of a splittable input."""
PARTIALS_PER_THREAD = 2
"""Tasks (and so partial filters) per worker thread: enough to balance uneven inputs."""
SCHEDULER_TIMEOUT_S = 10.0
"""How long to try to reach a given scheduler address."""


@dataclass(frozen=True)
class PartialFilter:
    """A partial filter's bit array and the number of keys inserted into it."""

    body: bytes
    key_count: int


# -- planning (on the client) -------------------------------------------------------------


def plan_partitions(source: SourceSpec, split_bytes: int = SPLIT_BYTES) -> list[tuple[Partition, int]]:
    """Every partition of ``source`` with its size in bytes, in input order; empty inputs
    have none. InputError, as the local build raises, for an input that is not Parquet
    when ``source`` reads Parquet only (:func:`~.sources.check_parquet_only`)."""
    if split_bytes < 1:
        raise ValueError("split_bytes must be positive")
    plan: list[tuple[Partition, int]] = []
    for ref in resolve_inputs(source.paths, source.s3_config):
        size = input_size(ref)
        magic = read_magic(ref, size)
        check_parquet_only(str(ref), magic, source)
        if size == 0:
            continue
        if magic == PARQUET_MAGIC:
            plan.extend(_row_group_partitions(ref, source, split_bytes))
        elif size > split_bytes and source.csv_column is None and not is_compressed(magic):
            plan.extend(_byte_range_partitions(ref, size, split_bytes))
        else:
            plan.append((Partition(ref), size))
    return plan


def _byte_range_partitions(ref: InputRef, size: int, split_bytes: int) -> list[tuple[Partition, int]]:
    count = -(-size // split_bytes)
    cuts = [size * i // count for i in range(count + 1)]
    return [(Partition(ref, byte_range=(a, b)), b - a) for a, b in pairwise(cuts)]


def _row_group_partitions(ref: InputRef, source: SourceSpec, split_bytes: int) -> list[tuple[Partition, int]]:
    sizes = parquet_row_group_sizes(ref, source)
    plan: list[tuple[Partition, int]] = []
    run: list[int] = []
    run_bytes = 0
    for group, group_bytes in enumerate(sizes):
        run.append(group)
        run_bytes += group_bytes
        if run_bytes >= split_bytes or group == len(sizes) - 1:
            whole = len(run) == len(sizes)
            plan.append((Partition(ref, row_groups=None if whole else tuple(run)), max(run_bytes, 1)))
            run, run_bytes = [], 0
    return plan


def group_partitions(plan: Sequence[tuple[Partition, int]], groups: int) -> list[list[Partition]]:
    """Pack partitions into at most ``groups`` lists of about equal total size (largest
    first, each to the lightest list), each list in input order; no empty lists."""
    if groups < 1:
        raise ValueError("groups must be positive")
    bins: list[tuple[int, int, list[int]]] = [(0, i, []) for i in range(min(groups, len(plan)))]
    heapq.heapify(bins)
    for index in sorted(range(len(plan)), key=lambda i: -plan[i][1]):
        load, order, members = heapq.heappop(bins)
        members.append(index)
        heapq.heappush(bins, (load + plan[index][1], order, members))
    ordered = sorted(bins, key=lambda b: b[1])
    return [[plan[i][0] for i in sorted(members)] for _, _, members in ordered]


# -- tasks (on the workers) ---------------------------------------------------------------


def count_task(parts: Sequence[Partition], source: SourceSpec) -> int:
    """Count (and validate) the keys of ``parts``."""
    return sum(len(batch) for part in parts for batch in iter_partition_batches(part, source))


def build_task(
    parts: Sequence[Partition], source: SourceSpec, params: FilterParams, kernel: Engine
) -> PartialFilter:
    """Insert every key of ``parts`` into an empty filter with ``params``."""
    builder = FilterBuilder(params, engine=kernel)
    for part in parts:
        for batch in iter_partition_batches(part, source):
            builder.add_many(batch)
    return PartialFilter(bytes(builder.body), builder.key_count)


def merge_task(left: PartialFilter, right: PartialFilter, params: FilterParams) -> PartialFilter:
    """OR two partial filters (:meth:`FilterBuilder.merge`)."""
    merged = FilterBuilder(params, body=left.body, key_count=left.key_count)
    merged.merge(FilterBuilder(params, body=right.body, key_count=right.key_count))
    return PartialFilter(bytes(merged.body), merged.key_count)


# -- driving the build (on the client) ----------------------------------------------------


def build_filter_dask(source: SourceSpec, spec: BuildSpec) -> FilterBuilder:
    """Build the filter of ``source`` on Dask; bit-identical to the local build.

    ConfigError when dask is not installed or the scheduler cannot be reached; errors
    raised on a worker (InputError, StorageError) reach the caller unchanged; without
    ``expected_keys``, InputError when the keys inserted differ from the keys counted (the
    input changed between the two passes), as the local build raises; any other failure
    of the cluster becomes a one-line BloomswarmError.
    """
    with _client(spec) as client:
        try:
            return _build(client, source, spec)
        except BloomswarmError:
            raise
        except Exception as exc:
            if type(exc).__module__.split(".")[0] not in ("distributed", "dask", "tornado", "asyncio"):
                raise
            raise BloomswarmError(f"Dask build failed: {type(exc).__name__}: {exc}") from exc


def _build(client: Any, source: SourceSpec, spec: BuildSpec) -> FilterBuilder:
    nthreads: dict[str, int] = dict(client.nthreads())
    if not nthreads:
        raise BloomswarmError("the Dask cluster has no workers")
    threads = sum(nthreads.values())
    plan = plan_partitions(source, SPLIT_BYTES)
    groups = group_partitions(plan, PARTIALS_PER_THREAD * threads) if plan else []
    log.info("Dask build: %d partitions in %d tasks on %d worker threads", len(plan), len(groups), threads)
    capacity = spec.expected_keys
    if capacity is None:
        capacity = _count(client, groups, source, spec.progress)
    template = empty_builder(capacity, spec)
    if not groups:
        return template
    final = _reduce(client, groups, source, template.params, spec, workers=sorted(nthreads))
    if spec.expected_keys is None:
        check_same_count(capacity, final.key_count)
    builder = FilterBuilder(
        template.params, capacity=template.capacity, target_fpp=template.target_fpp,
        engine=spec.kernel, body=final.body, key_count=final.key_count,
    )
    warn_if_over_capacity(builder, capacity)
    return builder


def check_same_count(counted: int, inserted: int) -> None:
    """InputError when the insert pass read another number of keys than the counting pass
    (the local build's check, :func:`~.build.build_filter`, with its message)."""
    if inserted != counted:
        raise InputError(
            f"the input changed between the two passes over it: {counted:,} keys counted, then "
            f"{inserted:,} read (a pipe or stdin can be read once: pass --expected-keys "
            "to build in one pass; or files changed while building)"
        )


def _count(client: Any, groups: list[list[Partition]], source: SourceSpec, progress: bool) -> int:
    futures = [client.submit(count_task, group, source, pure=False) for group in groups]
    total = 0
    with Progress("counting keys", enabled=progress) as bar:
        for future in _distributed().as_completed(futures):
            count = int(future.result())
            total += count
            bar.advance(count)
    return total


def _reduce(
    client: Any,
    groups: list[list[Partition]],
    source: SourceSpec,
    params: FilterParams,
    spec: BuildSpec,
    *,
    workers: list[str],
) -> PartialFilter:
    """Submit the partial builds and the tree of merges; wait for the root.

    Build task i prefers worker i mod W (a soft restriction: an idle worker may still
    steal it), and each level ORs item i with item i + half. With equal workers the first
    level's pairs then sit on the same worker and merge without moving a bit array
    between workers; the merge tasks themselves go where their inputs are.
    """
    leaves = [
        client.submit(build_task, group, source, params, spec.kernel, pure=False,
                      workers=[workers[i % len(workers)]], allow_other_workers=True)
        for i, group in enumerate(groups)
    ]
    level = leaves
    while len(level) > 1:
        half = (len(level) + 1) // 2
        merged = [
            client.submit(merge_task, level[i], level[i + half], params, pure=False)
            for i in range(len(level) - half)
        ]
        level = merged + level[len(level) - half : half]  # the middle one of an odd count
    root = level[0]
    with Progress("building partial filters", total=len(leaves), unit="tasks", enabled=spec.progress) as bar:
        for future in _distributed().as_completed(leaves):
            if future.status == "error":
                future.result()  # raises the worker's exception here
            bar.advance(1)
    del leaves, level  # let the workers free partial filters as soon as they are merged
    result: PartialFilter = root.result()
    return result


@contextlib.contextmanager
def _client(spec: BuildSpec) -> Iterator[Any]:
    """A Dask client: connected to ``spec.scheduler``, or to a LocalCluster that lives
    exactly as long as the build."""
    dask = _distributed()
    if spec.scheduler:
        if spec.workers:
            raise ConfigError("--workers sizes the LocalCluster; it cannot be combined with --scheduler")
        try:
            client = dask.Client(spec.scheduler, timeout=SCHEDULER_TIMEOUT_S)
        except (OSError, TimeoutError, ValueError) as exc:
            raise ConfigError(f"cannot reach the Dask scheduler at {spec.scheduler}: {exc}") from exc
        with client:
            yield client
        return
    with start_local_cluster(spec.workers or _cpu_count()) as cluster, dask.Client(cluster) as client:
        yield client


WORKER_CONFIG: dict[str, object] = {
    "distributed.worker.profile.enabled": False,
    "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None,
}
"""Dask settings for the LocalCluster's workers, measured on this workload: the
statistical profiler samples every thread's stack every 10 ms, and a fixed
``MALLOC_TRIM_THRESHOLD_`` turns off glibc's adaptive mmap threshold, so every 4 MiB
read block is mapped and faulted in anew; with both, a worker needed 20-60% more CPU per
key than the same code in the client. Set the same two on a real cluster's workers."""


def start_local_cluster(workers: int) -> Any:
    """Start a LocalCluster of ``workers`` single-threaded worker processes with
    :data:`WORKER_CONFIG`; the caller closes it (it is a context manager). The workers
    print nothing below CRITICAL (unless this module's logger is at DEBUG, ``--verbose``):
    a task's error reaches the client as its exception, not as a worker's traceback on
    stderr. BloomswarmError when it cannot start."""
    dask = _distributed()
    config: Any = importlib.import_module("dask.config")
    try:
        with config.set(WORKER_CONFIG):
            return dask.LocalCluster(
                n_workers=workers, threads_per_worker=1, processes=True,
                dashboard_address=":0", silence_logs=_worker_log_level(),
            )
    except (OSError, RuntimeError) as exc:
        raise BloomswarmError(f"cannot start a local Dask cluster of {workers} workers: {exc}") from exc


def _worker_log_level() -> int:
    """The level below which the LocalCluster's workers print nothing: ERROR with
    ``--verbose``, else CRITICAL (a failed task logs "Compute Failed" at ERROR)."""
    return logging.ERROR if log.isEnabledFor(logging.DEBUG) else logging.CRITICAL


def _distributed() -> Any:
    """The ``distributed`` module (untyped, hence Any); ConfigError when not installed."""
    try:
        import distributed
    except ImportError:
        raise ConfigError("--engine dask needs Dask: install bloomswarm[dask]") from None
    return distributed


def _cpu_count() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)
