"""Large uninitialised float64 arrays whose first write costs plain page faults.

numpy asks the kernel for transparent huge pages on every large array
(``madvise(MADV_HUGEPAGE)``). Where the kernel's THP defragmentation is ``madvise`` (a common
default, and this project's shared machine), each first touch of such an array may compact
memory synchronously to find 2 MB pages: filling a fresh 2 GB array (n · k² operators at
n = 10⁵, k = 50) took 3.8–9.9 s there, against 1.5–5.8 s for the same array from a plain
anonymous mapping, interleaved in one process (docs/benchmarks.md, "Warm refits"). The
operators are written once per fit and then read a row at a time, so the huge pages buy
little. :func:`fresh_array` maps such arrays directly (4 KB pages, no madvise); small ones,
and platforms without anonymous ``mmap``, get ``np.empty``.
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["fresh_array", "MAPPED_BYTES"]

MAPPED_BYTES = 1 << 26  # 64 MB: below it np.empty (its huge pages cost little there)


def fresh_array(shape: tuple[int, ...], min_bytes: int | None = None) -> np.ndarray:
    """An uninitialised, writeable, C-contiguous float64 array of ``shape``; from an anonymous
    private mapping when it is at least ``min_bytes`` (default :data:`MAPPED_BYTES`; else
    ``np.empty``). The mapping is
    released when the array and its views are (the array holds it as its base); pickles and
    saves like any array. O(1) (its pages are paid on first write, O(size))."""
    size = int(np.prod(shape, dtype=np.int64))
    min_bytes = MAPPED_BYTES if min_bytes is None else min_bytes
    flags = getattr(mmap, "MAP_PRIVATE", None), getattr(mmap, "MAP_ANONYMOUS", None)
    if size == 0 or size * 8 < min_bytes or None in flags:
        return np.empty(shape)
    buf = mmap.mmap(-1, size * 8, flags=flags[0] | flags[1])
    return np.frombuffer(buf, dtype=np.float64, count=size).reshape(shape)
