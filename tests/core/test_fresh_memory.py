"""Large operator arrays from a plain anonymous mapping (core/fresh_memory.py)."""

from __future__ import annotations

import mmap
import os
import pickle
import threading
from pathlib import Path

import numpy as np
import pytest

import streamspec.core.fresh_memory as fresh_memory
from streamspec import HMM, MEstimator, MomentAccumulator, SpectralEstimator
from streamspec.core.fresh_memory import fresh_array, release_spares, spare_bytes


@pytest.fixture(autouse=True)
def _no_spares():
    """Each test starts without spare mappings (another test's would serve its requests)."""
    release_spares()
    yield
    release_spares()


def _mapping_of(a: np.ndarray) -> mmap.mmap:
    base = a
    while isinstance(base, np.ndarray):
        base = base.base
    return base.obj  # np.frombuffer's memoryview over the mapping


def _mapped(a: np.ndarray) -> bool:
    base = a
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return isinstance(getattr(base, "obj", base), mmap.mmap)  # np.frombuffer keeps a memoryview


def test_large_arrays_are_mapped_small_ones_are_numpys():
    big = fresh_array((40, 5, 5), min_bytes=1000)
    assert _mapped(big) and not big.flags.owndata
    assert big.shape == (40, 5, 5) and big.dtype == np.float64
    assert big.flags.writeable and big.flags.c_contiguous
    big[...] = np.arange(1000.0).reshape(40, 5, 5)
    again = pickle.loads(pickle.dumps(big))
    np.testing.assert_array_equal(again, big)
    small = fresh_array((4, 5, 5), min_bytes=1000)
    assert small.flags.owndata and not _mapped(small) and small.shape == (4, 5, 5)
    assert fresh_array((0, 5, 5), min_bytes=0).shape == (0, 5, 5)


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * mmap.PAGESIZE


@pytest.mark.skipif(not hasattr(mmap, "MAP_POPULATE") or not Path("/proc/self/statm").exists(),
                    reason="no MAP_POPULATE or no /proc/self/statm on this platform")
def test_a_mapped_array_is_resident_before_it_is_written():
    """Its pages are mapped by the call (MAP_POPULATE), not one fault at a time on first write:
    a 64 MB array adds its size to the resident memory before anything is written to it."""
    before = _resident_bytes()
    a = fresh_array((1 << 20, 8), min_bytes=0)
    grown = _resident_bytes() - before
    assert grown >= 0.9 * a.nbytes, f"{grown} bytes resident after mapping {a.nbytes}"
    assert float(a[-1, -1]) == 0.0  # an anonymous mapping reads as zeros


def test_fits_and_warm_refits_write_their_operators_into_mapped_arrays(monkeypatch):
    """With every array mapped, the cold fits' and the warm refits' operators come from
    fresh_array, and the models predict exactly what they predict from np.empty."""
    x = HMM.random(3, 12, random_state=1).sample(21_000, random_state=2)
    test = x[20_000:]

    def fits():
        acc = MomentAccumulator(12)
        acc.learn_many(x[:19_000])
        models = []
        for make in (lambda: SpectralEstimator(rank=3, backoff=None, basis_tol=1e9),
                     lambda: MEstimator(rank=3, backoff=None, basis_tol=1e9)):
            first, state = make().fit_with_state(acc)
            models.append(first)
            acc2 = MomentAccumulator(12)
            acc2.learn_many(x[:20_000])
            est = make()
            models.append(est.fit(acc2, init=state))
            assert est.refit_.path == "warm"
        return models

    plain = fits()
    assert not any(_mapped(m.operator_factors[0]) for m in plain)
    monkeypatch.setattr(fresh_memory, "MAPPED_BYTES", 0)
    mapped = fits()
    assert all(_mapped(m.operator_factors[0]) for m in mapped)
    for a, b in zip(plain, mapped, strict=True):
        assert a.log_loss([test]) == b.log_loss([test])


def test_a_mapping_the_kernel_refuses_is_a_memory_error(monkeypatch):
    """ENOMEM from mmap is a MemoryError (what callers report as the fit running out of memory,
    tests/cli/test_cli.py); any other OSError is not turned into one."""
    import errno

    def refuse(code):
        def fake_mmap(*args, **kwargs):
            raise OSError(code, "refused")
        return fake_mmap

    monkeypatch.setattr(fresh_memory.mmap, "mmap", refuse(errno.ENOMEM))
    with pytest.raises(MemoryError, match="cannot map 8,000 bytes"):
        fresh_array((10, 10, 10), min_bytes=0)
    monkeypatch.setattr(fresh_memory.mmap, "mmap", refuse(errno.EINVAL))
    with pytest.raises(OSError) as info:
        fresh_array((10, 10, 10), min_bytes=0)
    assert not isinstance(info.value, MemoryError) and info.value.errno == errno.EINVAL


def test_a_freed_mapping_serves_the_next_request_only_once_no_view_of_it_is_left():
    """A refit's operators come from the mapping of an array that is gone (no page work), and
    never from one that a view still reads."""
    a = fresh_array((1000,), min_bytes=0)
    a[:] = 7.0
    view = a[10:20]
    first = _mapping_of(a)
    del a
    assert spare_bytes() == 0  # the view still reads it
    b = fresh_array((1000,), min_bytes=0)
    assert _mapping_of(b) is not first
    b[:] = 1.0
    np.testing.assert_array_equal(view, 7.0)
    del view
    assert spare_bytes() == 8000
    c = fresh_array((100, 10), min_bytes=0)  # the same size, another shape
    assert _mapping_of(c) is first and spare_bytes() == 0 and c.shape == (100, 10)
    c[:] = 3.0
    np.testing.assert_array_equal(b, 1.0)
    del c
    d = fresh_array((900,), min_bytes=0)  # at most 1/8 smaller: served by the spare too
    assert _mapping_of(d) is first and d.shape == (900,)
    del d
    e = fresh_array((800,), min_bytes=0)  # more than 1/8 smaller: a mapping of its own
    assert _mapping_of(e) is not first and spare_bytes() == 8000
    assert release_spares() == 8000 and spare_bytes() == 0


def test_spares_are_bounded_and_released_when_the_kernel_refuses(monkeypatch):
    arrays = [fresh_array((1000 * (i + 1),), min_bytes=0) for i in range(4)]
    while arrays:
        arrays.pop(0)  # freed in order
    # the newest SPARE_MAPPINGS stay: the 3,000- and 4,000-float arrays'
    assert spare_bytes() == 8 * (3000 + 4000) and fresh_memory.SPARE_MAPPINGS == 2
    real, calls = mmap.mmap, []

    def refuse_once(*args, **kwargs):
        calls.append(spare_bytes())
        if len(calls) == 1:
            import errno
            raise OSError(errno.ENOMEM, "refused")
        return real(*args, **kwargs)

    monkeypatch.setattr(fresh_memory.mmap, "mmap", refuse_once)
    big = fresh_array((10_000,), min_bytes=0)  # no spare fits: map, refused, release, map again
    assert calls == [8 * 7000, 0] and big.shape == (10_000,) and spare_bytes() == 0


def test_a_refit_writes_its_operators_into_the_mapping_of_the_model_two_refits_back(monkeypatch):
    """The refitter's pattern: the model before last is gone when the next refit starts, and
    that refit's operators reuse its mapping (pages full of the old operators): the models
    predict exactly what models in fresh mappings predict."""
    x = HMM.random(3, 12, random_state=1).sample(23_000, random_state=2)
    test = x[22_000:]
    monkeypatch.setattr(fresh_memory, "MAPPED_BYTES", 0)

    def refits(spares: int):
        monkeypatch.setattr(fresh_memory, "SPARE_MAPPINGS", spares)
        release_spares()
        acc = MomentAccumulator(12)
        acc.learn_many(x[:19_000])
        model, state = SpectralEstimator(rank=3, backoff=None, basis_tol=1e9).fit_with_state(acc)
        losses, reused = [model.log_loss([test])], []
        for end in (20_000, 21_000, 22_000):
            acc.learn_many(x[end - 1000 : end])
            before = {id(b) for b in fresh_memory._spares}
            est = SpectralEstimator(rank=3, backoff=None, basis_tol=1e9)
            model, state = est.fit_with_state(acc, init=state)  # the previous ones dropped here
            assert est.refit_.path == "warm"
            reused.append(id(_mapping_of(model.operator_factors[0])) in before)
            losses.append(model.log_loss([test]))
        return losses, reused

    fresh_losses, fresh_reused = refits(0)
    spare_losses, spare_reused = refits(2)
    assert not any(fresh_reused) and any(spare_reused)
    assert spare_losses == fresh_losses


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_fork_while_another_thread_holds_the_locks_leaves_the_child_free_ones():
    """learn --workers forks; a background refit may hold the spares' or a count log's lock
    at that moment: the child must not inherit a lock no thread of its own will release."""
    from streamspec.core.count_log import CountLog

    log = CountLog()
    held, done = threading.Event(), threading.Event()

    def hold():
        with fresh_memory._lock, log._lock:
            held.set()
            done.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    try:
        pid = os.fork()
        if pid == 0:  # the child: both locks free
            ok = fresh_memory._lock.acquire(timeout=2) and log._lock.acquire(timeout=2)
            os._exit(0 if ok else 1)
    finally:
        done.set()
        t.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
