"""Backfills: count the symbol triples of many files in parallel, then reduce exactly.

A backfill reads files once (no following, no resume state) and returns one
:class:`~streamspec.streaming.accumulator.MomentAccumulator` equal to the one a single
process would build by reading the files in the given order with
:class:`~connectors.files.FileSource` and feeding every record to ``learn_one``
(and every end marker to ``end``). The work is split three ways:

1. **Chunking** (:mod:`connectors.file_chunks`: :func:`chunk_bounds`,
   :func:`file_chunks`): every file is cut into byte ranges at line boundaries,
   so that every line belongs to exactly one chunk. Gzip files are one chunk each
   (their byte offsets cannot be sought).
2. **Counting** (:mod:`connectors.chunk_counting`: :func:`count_chunk`): each task
   parses its chunk with the shared :class:`~connectors.records.RecordParser` and
   counts it into an accumulator
   built with ``track_heads=True``. Plain ``chars`` input has a vectorised path
   that gives the same counts without building a record per character.
3. **Reduction** (:func:`reduce_in_order`): the files are one long record sequence
   (file 1, then file 2, ...), and the chunk results are joined in that order by a
   tree of :meth:`~streamspec.streaming.accumulator.MomentAccumulator.concat`, which counts
   the triples straddling chunk borders. The join is associative, so the tree
   gives exactly the serial counts whatever the stream keys are, even when keys
   recur across files.

:func:`backfill` runs the tasks on a Dask cluster (``scheduler``: an address, a
``distributed.Client`` or a ``LocalCluster``; install ``streamspec[dask]``), else
in a local process pool, or in this process when ``n_workers == 1``. Dask workers
must see the files at the same paths (a shared file system).

Examples
--------
>>> import pathlib, tempfile
>>> from connectors.records import RecordFormat
>>> folder = pathlib.Path(tempfile.mkdtemp())
>>> _ = (folder / "a.txt").write_text("abracadabra\\nabra")
>>> _ = (folder / "b.txt").write_text("cadabra\\n")
>>> acc = backfill([folder / "a.txt", folder / "b.txt"], RecordFormat("chars"),
...                n_workers=1, chunk_bytes=4)
>>> acc.n_triples        # 22 characters and 2 line breaks (spaces), one sequence: 22 triples
22.0
>>> import shutil; shutil.rmtree(folder)
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from connectors.chunk_counting import ChunkResult, count_chunk, new_chunk_accumulator
from connectors.file_chunks import DEFAULT_CHUNK_BYTES, Chunk, chunk_bounds, file_chunks
from connectors.records import RecordFormat
from streamspec.streaming.accumulator import MomentAccumulator

__all__ = [
    "DEFAULT_CHUNK_BYTES",
    "Chunk",
    "ChunkResult",
    "backfill",
    "backfill_result",
    "chunk_bounds",
    "count_chunk",
    "file_chunks",
    "pool_size",
    "reduce_in_order",
    "serial_count",
]

_DASK_HINT = "the Dask backfill needs dask.distributed: pip install 'streamspec[dask]'"

log = logging.getLogger("streamspec.backfill")


# ----------------------------------------------------------------------------- reduction


def reduce_in_order(items: Sequence[Any], join: Callable[[Any, Any], Any] | None = None) -> Any:
    """Join ``items`` in order by a balanced tree of ``join(left, right)`` calls.

    ``join`` defaults to ``left.then(right)`` (for :class:`ChunkResult`) or
    ``left.concat(right)`` (for accumulators). Exact for any associative join.

    Examples
    --------
    >>> reduce_in_order(["a", "b", "c", "d", "e"], join=lambda x, y: f"({x}{y})")
    '(((ab)(cd))e)'
    """
    if not items:
        raise ValueError("nothing to reduce")
    join = join or _join
    level = list(items)
    while len(level) > 1:
        nxt = [join(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _join(left: Any, right: Any) -> Any:
    return left.then(right) if isinstance(left, ChunkResult) else left.concat(right)


# ----------------------------------------------------------------------------- executors


def _require_distributed():
    try:
        import distributed
    except ImportError as exc:
        raise ImportError(_DASK_HINT) from exc
    # distributed logs its cluster's start and stop at INFO (some 30 lines): below DEBUG
    # only its warnings are ours to show
    if not logging.getLogger().isEnabledFor(logging.DEBUG):
        logging.getLogger("distributed").setLevel(logging.WARNING)
    return distributed


def backfill_result(
    paths: Sequence[str | os.PathLike],
    fmt: RecordFormat,
    scheduler: Any = None,
    n_workers: int | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    alphabet: Sequence[Hashable] | None = None,
    progress: Callable[[int, int], Any] | None = None,
    on_chunk: Callable[[ChunkResult], Any] | None = None,
    window: int = 1,
) -> ChunkResult:
    """Like :func:`backfill`, but the whole :class:`ChunkResult` (counts, records, errors).

    ``progress(done, total)`` is called with the bytes of the chunks counted so far
    and of all chunks (local runs: after every chunk; Dask: once at the end).
    ``on_chunk(result)`` sees the results in file order (local runs: each chunk's as
    soon as it and those before it are counted; Dask: the whole result at the end),
    e.g. to report malformed lines; an exception it raises stops the backfill.
    ``window``: the counts' window L (:func:`~connectors.chunk_counting.count_chunk`; 1,
    triples, by default; L ≥ 2 with the whole ``alphabet`` given).
    """
    if not isinstance(fmt, RecordFormat):
        raise ValueError(f"fmt must be a RecordFormat, got {type(fmt).__name__}")
    if n_workers is not None and (isinstance(n_workers, bool) or not isinstance(n_workers, int)
                                  or n_workers < 1):
        raise ValueError(f"n_workers must be a positive integer or None, got {n_workers!r}")
    # absolute paths: Dask workers may run in another directory (they need the same files)
    names = [os.path.abspath(os.fsdecode(p))
             for p in ([paths] if isinstance(paths, str | os.PathLike) else paths)]
    folders = [p for p in names if os.path.isdir(p)]
    if folders:
        raise IsADirectoryError(f"{folders[0]}: is a directory, not a file")
    missing = [p for p in names if not os.path.isfile(p)]
    if missing:
        raise FileNotFoundError(f"no such file: {missing[0]}")
    alphabet = None if alphabet is None else list(alphabet)
    t0 = time.perf_counter()
    chunks = file_chunks(names, chunk_bytes)
    total = sum(_chunk_size(c) for c in chunks)
    report = progress or (lambda done, total: None)
    seen = on_chunk or (lambda result: None)
    path = "dask" if scheduler is not None else "processes"
    if not chunks:
        result = ChunkResult(new_chunk_accumulator(alphabet, window))
    elif scheduler is not None:
        result = _run_dask(chunks, fmt, alphabet, scheduler, n_workers, window)
        seen(result)
    else:
        workers, why = pool_size(chunks, n_workers)
        if workers > 1:
            path = f"{workers} processes"
            result = _run_pool(chunks, fmt, alphabet, workers, report, total, seen, window)
        else:
            path = f"serial ({why})"
            results, done = [], 0
            for c in chunks:
                results.append(count_chunk(c, fmt, alphabet, window))
                seen(results[-1])
                done += _chunk_size(c)
                report(done, total)
            result = reduce_in_order(results)
    report(total, total)
    log.info("event=backfilled files=%d chunks=%d records=%d malformed=%d seconds=%.2f path=%s",
             len(names), len(chunks), result.records, sum(result.errors.values()),
             time.perf_counter() - t0, path)
    return result


PARALLEL_MIN_BYTES = 32 << 20
"""Inputs smaller than this are counted in this process even when workers are asked for:
starting a worker process (importing numpy and streamspec) costs about as much as
counting 16 MiB (docs/benchmarks.md, "learn --workers")."""


def _chunk_size(chunk: Chunk) -> int:
    if chunk.end is None:
        return os.path.getsize(chunk.path)
    return chunk.end - chunk.start


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def _load() -> float:
    """The 1-minute load average (0 where the system does not tell it)."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return 0.0


def pool_size(chunks: Sequence[Chunk], n_workers: int | None) -> tuple[int, str]:
    """How many local processes to count ``chunks`` in, and why 1 when it is 1.

    More processes than chunks or than usable CPUs cannot be faster, nor more than
    one plus the CPUs left idle by the machine's other jobs (its load average), nor
    any pool for less than :data:`PARALLEL_MIN_BYTES` of input, where starting the
    workers costs more than they save: then 1 (count in this process).

    Examples
    --------
    >>> big = [Chunk("a", 0, 64 << 20), Chunk("a", 64 << 20, 128 << 20)]
    >>> pool_size(big, 1)
    (1, '--workers 1')
    >>> pool_size(big[:1], 4)
    (1, 'one chunk')
    >>> pool_size([Chunk("a", 0, 1 << 20), Chunk("a", 1 << 20, 2 << 20)], 2)
    (1, 'input under 32 MiB')
    """
    if n_workers == 1:
        return 1, "--workers 1"
    if len(chunks) < 2:
        return 1, "one chunk"
    if sum(_chunk_size(c) for c in chunks) < PARALLEL_MIN_BYTES:
        return 1, f"input under {PARALLEL_MIN_BYTES >> 20} MiB"
    cpus = _cpus()
    if cpus < 2:
        return 1, "one CPU"
    load = _load()
    idle = int(max(0.0, cpus - load))
    workers = min(n_workers or cpus, len(chunks), cpus, 1 + idle)
    if workers < 2:
        return 1, f"no idle CPU: load average {load:.1f} on {cpus} CPUs"
    return workers, ""


def backfill(
    paths: Sequence[str | os.PathLike],
    fmt: RecordFormat,
    scheduler: Any = None,
    n_workers: int | None = None,
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    alphabet: Sequence[Hashable] | None = None,
) -> MomentAccumulator:
    """Count the records of ``paths`` (one long sequence, in order) in parallel.

    Parameters
    ----------
    paths
        Text files (``.gz``: decompressed, one chunk each), read as one record
        sequence in this order: a stream key recurring in a later file continues.
    fmt
        The record format of every line.
    scheduler
        Run on Dask: a scheduler address (``"tcp://host:8786"``), ``"local"`` (a
        ``LocalCluster`` of ``n_workers`` processes started for this call), a
        ``distributed.Client`` or a ``LocalCluster``. ``None``: local processes.
    n_workers
        Without ``scheduler``: processes of the pool (default: CPU count); 1 counts
        in this process.
    chunk_bytes
        Nominal bytes per task (cut at line breaks).
    alphabet
        Labels to give the first indices, in this order; others follow in order of
        first appearance (the same order as a serial run).

    Returns
    -------
    MomentAccumulator
        Sliding-mode counts with ``track_heads=True``, equal to those of one
        accumulator fed every record in order (``learn_one`` / ``end``).

    Raises
    ------
    ImportError
        When ``scheduler`` is given and ``dask.distributed`` is not installed.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> from connectors.records import RecordFormat
    >>> path = pathlib.Path(tempfile.mkdtemp(), "t.txt")
    >>> _ = path.write_text("the cat sat\\non the mat\\n")
    >>> acc = backfill([path], RecordFormat("tokens"), n_workers=1, chunk_bytes=8)
    >>> acc.symbols, acc.n_triples
    (['the', 'cat', 'sat', 'on', 'mat'], 4.0)
    >>> path.unlink()
    """
    return backfill_result(paths, fmt, scheduler, n_workers, chunk_bytes, alphabet).acc


def serial_count(paths: Sequence[str | os.PathLike], fmt: RecordFormat) -> MomentAccumulator:
    """Count the records of ``paths`` one by one in this process: the reference of :func:`backfill`.

    A :class:`~connectors.files.FileSource` read in order, every record fed to one
    accumulator (``learn_one`` / ``end``), as ``streamspec learn`` does without a
    backfill; :func:`backfill` gives the same counts.

    Examples
    --------
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp(), "t.txt")
    >>> _ = path.write_text("the cat sat\\non the mat\\n")
    >>> acc = serial_count([path], RecordFormat("tokens"))
    >>> acc.symbols, acc.n_triples
    (['the', 'cat', 'sat', 'on', 'mat'], 4.0)
    >>> path.unlink()
    """
    from .files import FileSource

    acc = MomentAccumulator(window=1)  # triples, as the chunks count
    for rec, _ in FileSource([os.fspath(p) for p in paths], fmt):
        if rec.symbol is not None:
            acc.learn_one(rec.symbol, rec.key)
        if rec.end:
            acc.end(rec.key)
    return acc


def _run_pool(chunks: list[Chunk], fmt: RecordFormat, alphabet, workers: int,
              report: Callable[[int, int], Any], total: int,
              seen: Callable[[ChunkResult], Any], window: int = 1) -> ChunkResult:
    import multiprocessing
    from concurrent.futures import as_completed

    # spawn: the caller may run threads (a Dask client, a daemon), which fork would copy locked
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))
    try:
        futures = [pool.submit(count_chunk, c, fmt, alphabet, window) for c in chunks]
        index = {f: i for i, f in enumerate(futures)}
        done, shown = 0, 0
        for f in as_completed(futures):
            f.result()  # a failed chunk fails at once
            done += _chunk_size(chunks[index[f]])
            report(done, total)
            while shown < len(futures) and futures[shown].done():  # in file order
                seen(futures[shown].result())
                shown += 1
        return reduce_in_order([f.result() for f in futures])
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)  # fail now, not after every chunk
        raise
    finally:
        pool.shutdown(wait=True)


def _run_dask(chunks: list[Chunk], fmt: RecordFormat, alphabet, scheduler: Any,
              n_workers: int | None, window: int = 1) -> ChunkResult:
    distributed = _require_distributed()
    own_cluster = own_client = None
    if isinstance(scheduler, distributed.Client):
        client = scheduler
    else:
        if isinstance(scheduler, str) and scheduler == "local":
            own_cluster = scheduler = distributed.LocalCluster(
                n_workers=n_workers or os.cpu_count() or 1, threads_per_worker=1, processes=True,
                dashboard_address=None)
        own_client = client = distributed.Client(scheduler)
    try:
        futures = client.map(count_chunk, chunks, fmt=fmt, alphabet=alphabet, window=window,
                             pure=False)
        # the joins run on the workers too: a tree of tasks, in order
        top = reduce_in_order(futures, join=lambda a, b: client.submit(_join, a, b, pure=False))
        return top.result()
    finally:
        if own_client is not None:
            own_client.close()
        if own_cluster is not None:
            own_cluster.close()


# ----------------------------------------------------------------------------- command line
