"""Counting kernels of :class:`~streamspec.streaming.accumulator.MomentAccumulator`.

Triples are packed integer codes (see :mod:`streamspec.core.triples`); these
functions turn runs of symbols into codes, count them, and merge sorted code arrays.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from streamspec.core.triples import BITS

__all__ = ["stream_codes", "to_packed", "count_run", "compact_counts", "compact_to_packed",
           "run_starts", "reduce_sorted", "sort_reduce", "sort_reduce_weighted", "merge_sorted"]

_M2 = (1 << (2 * BITS)) - 1  # two symbols: a tail
_COMPACT_CELLS = 1 << 22  # learn_many counts runs with m³ below this by np.bincount
_PARALLEL_AT = 1 << 21  # runs longer than this are sorted as two halves in two threads


def stream_codes(seq: np.ndarray, base: int) -> np.ndarray:
    """``(x1·base + x2)·base + x3`` of every consecutive triple of ``seq`` (learn_one's order)."""
    return (seq[:-2] * base + seq[1:-1]) * base + seq[2:]


def to_packed(stream: np.ndarray, base: int) -> np.ndarray:
    """Stream codes (x1, x2, x3) in ``base`` to packed codes (x2, x3, x1)."""
    if base == 1 << BITS:
        return ((stream & _M2) << BITS) | (stream >> 2 * BITS)
    x1, rest = np.divmod(stream, base * base)
    x2, x3 = np.divmod(rest, base)
    return (x2 << 2 * BITS) | (x3 << BITS) | x1


_CHUNK = 1 << 18  # symbols per block in the compact count: the codes stay in cache


def count_run(seq: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct packed codes of the consecutive triples of ``seq`` and their counts.

    Small alphabets (m³ ≤ 2²² for the largest index m, and not much more cells
    than triples): one ``np.bincount`` of compact codes ``(x2·m + x3)·m + x1``
    computed block by block into a reused buffer (the arithmetic runs in cache),
    whose non-zeros are in packed order already. Otherwise a sort of packed codes.
    """
    T = seq.size - 2
    m = n
    if m**3 > _COMPACT_CELLS or m**3 > 4 * T:
        m = int(seq.max()) + 1
    if m**3 <= _COMPACT_CELLS and m**3 <= 4 * T:
        return compact_to_packed(compact_counts(seq, m), m)
    codes = np.empty(T, dtype=np.int64)
    tmp = np.empty(T, dtype=np.int64)
    np.left_shift(seq[1:-1], 2 * BITS, out=codes)
    np.left_shift(seq[2:], BITS, out=tmp)
    codes |= tmp
    codes |= seq[:-2]
    del tmp
    return sort_reduce(codes)


def compact_counts(seq: np.ndarray, m: int) -> np.ndarray:
    """Counts of the consecutive triples of ``seq`` indexed ``(x2·m + x3)·m + x1``, int64 (m³,).

    Computed block by block into one reused buffer, so that the code arithmetic runs
    in cache instead of streaming temporaries of the input's size through memory.
    """
    T = seq.size - 2
    counts = np.zeros(m**3, dtype=np.int64)
    buf = np.empty(min(_CHUNK, T), dtype=np.int64)
    for s in range(0, T, _CHUNK):
        k = min(_CHUNK, T - s)
        b = buf[:k]
        np.multiply(seq[s + 1 : s + 1 + k], m, out=b)
        b += seq[s + 2 : s + 2 + k]
        b *= m
        b += seq[s : s + k]
        counts += np.bincount(b, minlength=m**3)
    return counts


def compact_to_packed(counts: np.ndarray, m: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-zeros of counts indexed ``(x2·m + x3)·m + x1``, as sorted packed codes and weights."""
    nz = np.flatnonzero(counts)
    x2, rest = np.divmod(nz, m * m)
    x3, x1 = np.divmod(rest, m)
    return (x2 << 2 * BITS) | (x3 << BITS) | x1, counts[nz].astype(np.float64)


_POOL: ThreadPoolExecutor | None = None


def run_starts(c: np.ndarray) -> np.ndarray:
    """Positions where a run of equal values of the sorted, non-empty ``c`` starts."""
    first = np.empty(c.size, dtype=bool)
    first[0] = True
    np.not_equal(c[1:], c[:-1], out=first[1:])
    return np.flatnonzero(first)


def reduce_sorted(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if c.size == 0:
        return c, np.empty(0)
    starts = run_starts(c)
    counts = np.empty(starts.size)  # run lengths, written as float64 in one pass
    np.subtract(starts[1:], starts[:-1], out=counts[:-1], casting="unsafe")
    counts[-1] = c.size - starts[-1]
    return c[starts], counts


def sort_reduce(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct codes and their multiplicities (sorts ``codes`` in place).

    Long arrays are sorted as two halves in two threads (numpy's sort releases the
    GIL), then merged by one stable sort, which finds the two sorted runs and
    merges them in linear time.
    """
    global _POOL
    if codes.size >= _PARALLEL_AT and (os.cpu_count() or 1) > 1:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(2, thread_name_prefix="streamspec-sort")
        h = codes.size // 2
        list(_POOL.map(np.ndarray.sort, [codes[:h], codes[h:]]))
        codes.sort(kind="stable")
    else:
        codes.sort()
    return reduce_sorted(codes)


def sort_reduce_weighted(codes: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(codes, kind="stable")
    c = codes[order]
    if c.size == 0:
        return c, np.empty(0)
    starts = run_starts(c)
    return c[starts], np.add.reduceat(weights[order], starts)


def merge_sorted(a: np.ndarray, aw: np.ndarray, b: np.ndarray, bw: np.ndarray
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Union of two sorted distinct code arrays, weights summed. O(len(a) + len(b) log len(a))."""
    if a.size == 0:
        return b, bw
    if b.size == 0:
        return a, aw
    pos = np.searchsorted(a, b)
    hit = a[np.minimum(pos, a.size - 1)] == b
    w = aw.copy()
    w[pos[hit]] += bw[hit]
    miss = ~hit
    return np.insert(a, pos[miss], b[miss]), np.insert(w, pos[miss], bw[miss])
