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

*Spare mappings.* Even populated, a fresh 2 GB mapping costs 0.6–2.8 s of the kernel's (and, on
a virtual machine, the hypervisor's) page work, where writing the same 2 GB into a mapping whose
pages are already there takes 0.15 s (docs/benchmarks.md, "Warm refits"). A refitter makes one
such array per refit while the previous model still predicts from its own, and drops the older
one at the swap: so when the last array over a mapping is gone, the mapping is not unmapped but
kept as a *spare* (at most :data:`SPARE_MAPPINGS`, marked ``MADV_FREE``: the kernel may take its
pages back under memory pressure, without swapping, and a write then gets zeroed pages), and the
next request of about its size (no more than 1/8 smaller) is served from it. A mapping is reused
only after every array and view over it has been collected (a finalizer on the array the views
share), so no live array ever aliases another. :func:`release_spares` unmaps them at once; the
kernel's refusal of a new mapping releases them and tries once more before raising.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading
import weakref

import numpy as np

__all__ = ["fresh_array", "release_spares", "spare_bytes", "MAPPED_BYTES", "SPARE_MAPPINGS"]

MAPPED_BYTES = 1 << 26  # 64 MB: below it np.empty (its huge pages cost little there)
SPARE_MAPPINGS = 2  # freed mappings kept for reuse: a refit's operators and one more array
_SLACK = 1.125  # a spare serves requests of at least 1/_SLACK of its size (alphabets grow)

_spares: list[mmap.mmap] = []  # the newest last
_lock = threading.RLock()  # why reentrant: a collection inside fresh_array may run _freed


def _after_fork() -> None:
    # why: a fork while another thread held the lock would leave it held in the child
    global _lock
    _lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)


def fresh_array(shape: tuple[int, ...], min_bytes: int | None = None) -> np.ndarray:
    """An uninitialised, writeable, C-contiguous float64 array of ``shape``; from an anonymous
    private mapping when it is at least ``min_bytes`` (default :data:`MAPPED_BYTES`; else
    ``np.empty``), its pages populated at once where ``mmap.MAP_POPULATE`` exists (the caller
    writes all of it), or from a spare mapping of about its size (module docstring: its pages
    hold whatever they held). When the array and all its views are gone, its mapping becomes a
    spare. Pickles and saves like any array. O(size) for a new mapping (the kernel maps and
    zeroes the pages in the call), O(spares) from a spare.

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
    buf = _spare(size * 8)
    if buf is None:
        buf = _mapping(size * 8, flags[0] | flags[1] | getattr(mmap, "MAP_POPULATE", 0), shape)
    root = np.frombuffer(buf, dtype=np.float64, count=size)
    # every view of the array keeps `root` alive, so its death means no array reads `buf` any more
    weakref.finalize(root, _freed, buf).atexit = False
    return root.reshape(shape)


def _mapping(nbytes: int, flags: int, shape: tuple[int, ...]) -> mmap.mmap:
    """A new anonymous mapping; on ENOMEM the spares are unmapped and it is tried once more."""
    for attempt in (0, 1):
        try:
            return mmap.mmap(-1, nbytes, flags=flags)
        except OSError as exc:
            if exc.errno != errno.ENOMEM:
                raise
            if attempt == 0 and release_spares():
                continue
            # why: callers report a MemoryError as the fit running out of memory (`streamspec
            # learn`: "cannot fit: out of memory ...; try a smaller --rank"), an OSError as a
            # bare errno line
            raise MemoryError(f"cannot map {nbytes:,} bytes for a {shape} float64 array") from exc
    raise AssertionError("unreachable")


def _spare(nbytes: int) -> mmap.mmap | None:
    """The newest spare of ``nbytes`` to ``nbytes · 1.125`` bytes, taken from the spares. O(spares)."""
    with _lock:
        for i in range(len(_spares) - 1, -1, -1):
            if nbytes <= len(_spares[i]) <= nbytes * _SLACK:
                return _spares.pop(i)
    return None


def _freed(buf: mmap.mmap) -> None:
    """The last array over ``buf`` is gone: keep it as a spare (the oldest beyond
    :data:`SPARE_MAPPINGS` are unmapped)."""
    madvise = getattr(buf, "madvise", None)
    if madvise is not None and hasattr(mmap, "MADV_FREE"):
        try:
            madvise(mmap.MADV_FREE)
        except OSError:  # a kernel without MADV_FREE: the pages just stay
            pass
    with _lock:
        _spares.append(buf)
        # the oldest beyond the limit are dropped: unmapped as their last reference goes (here,
        # or for `buf` itself when the dying array's memoryview goes, just after this call)
        del _spares[: max(0, len(_spares) - SPARE_MAPPINGS)]


def release_spares() -> int:
    """Unmap every spare mapping now; the bytes released. O(spares).

    >>> a = fresh_array((1000,), min_bytes=0); del a
    >>> release_spares() >= 8000, spare_bytes()
    (True, 0)
    """
    with _lock:
        released = sum(len(b) for b in _spares)
        _spares.clear()  # each unmapped as its last reference goes: this one
    return released


def spare_bytes() -> int:
    """Bytes held in spare mappings (mapped, marked free for the kernel). O(spares)."""
    with _lock:
        return sum(len(b) for b in _spares)
