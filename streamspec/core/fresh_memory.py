"""Large uninitialised float64 arrays whose pages are mapped when they are made, not on first write.

numpy asks the kernel for transparent huge pages on every large array
(``madvise(MADV_HUGEPAGE)``). Where the kernel's THP defragmentation is ``madvise`` (a common
default, and this project's shared machine), each first touch of such an array may compact
memory synchronously to find 2 MB pages: filling a fresh 2 GB array (n · k² operators at
n = 10⁵, k = 50) took 3.8–9.9 s there, against 1.5–5.8 s for the same array from a plain
anonymous mapping, interleaved in one process (docs/benchmarks.md, "Warm refits"). The
operators are written once per fit and then read a row at a time, so the huge pages buy
little. :func:`fresh_array` maps such arrays directly (4 KB pages, no madvise) and asks the
kernel to populate the mapping at once (``MAP_POPULATE``, where the platform has it): one call
that maps every page instead of a page fault for each of the array's 500,000 pages on its first
write. Why: writing the 2 GB of operators of a warm refit into a plain mapping took 2.2–4.4 s
(the product itself 0.8 s of it), into a populated one 1.4–1.6 s (fresh processes, alternated,
one BLAS thread; docs/benchmarks.md, "Warm refits"). Every caller writes the whole array, so
mapping its pages early costs no memory it would not use. Small arrays, and platforms without
anonymous ``mmap``, get ``np.empty``.
"""

from __future__ import annotations

import errno
import mmap

import numpy as np

__all__ = ["fresh_array", "MAPPED_BYTES"]

MAPPED_BYTES = 1 << 26  # 64 MB: below it np.empty (its huge pages cost little there)


def fresh_array(shape: tuple[int, ...], min_bytes: int | None = None) -> np.ndarray:
    """An uninitialised, writeable, C-contiguous float64 array of ``shape``; from an anonymous
    private mapping when it is at least ``min_bytes`` (default :data:`MAPPED_BYTES`; else
    ``np.empty``), its pages populated at once where ``mmap.MAP_POPULATE`` exists (the caller
    writes all of it). The mapping is released when the array and its views are (the array holds
    it as its base); pickles and saves like any array. O(size): the kernel maps and zeroes the
    pages in the call.

    >>> a = fresh_array((2, 3), min_bytes=0)   # mapped even though small
    >>> a[:] = 1.0
    >>> a.sum(), a.flags.c_contiguous, a.flags.writeable
    (np.float64(6.0), True, True)
    """
    size = int(np.prod(shape, dtype=np.int64))
    min_bytes = MAPPED_BYTES if min_bytes is None else min_bytes
    flags = getattr(mmap, "MAP_PRIVATE", None), getattr(mmap, "MAP_ANONYMOUS", None)
    if size == 0 or size * 8 < min_bytes or None in flags:
        return np.empty(shape)
    populate = getattr(mmap, "MAP_POPULATE", 0)
    try:
        buf = mmap.mmap(-1, size * 8, flags=flags[0] | flags[1] | populate)
    except OSError as exc:
        if exc.errno != errno.ENOMEM:
            raise
        # why: callers report a MemoryError as the fit running out of memory (`streamspec learn`:
        # "cannot fit: out of memory ...; try a smaller --rank"), an OSError as a bare errno line
        raise MemoryError(f"cannot map {size * 8:,} bytes for a {shape} float64 array") from exc
    return np.frombuffer(buf, dtype=np.float64, count=size).reshape(shape)
