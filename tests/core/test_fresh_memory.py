"""Large operator arrays from a plain anonymous mapping (core/fresh_memory.py)."""

from __future__ import annotations

import mmap
import pickle
from pathlib import Path

import numpy as np
import pytest

import streamspec.core.fresh_memory as fresh_memory
from streamspec import HMM, MEstimator, MomentAccumulator, SpectralEstimator
from streamspec.core.fresh_memory import fresh_array


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
    assert not any(_mapped(m.B) for m in plain)
    monkeypatch.setattr(fresh_memory, "MAPPED_BYTES", 0)
    mapped = fits()
    assert all(_mapped(m.B) for m in mapped)
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
