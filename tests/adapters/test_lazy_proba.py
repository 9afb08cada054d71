"""LazyProba, river's dict filled on first bulk access, against the eagerly built dict.

Every way of reading a dict (single entries, iteration, views, comparisons both ways,
copies, pickling, JSON, dict(), {**p}, mutation) must give exactly the entries of
``dict(zip(labels, row.tolist()))``, and single reads must not fill it (that is its point).
"""

from __future__ import annotations

import copy
import json
import pickle

import numpy as np
import pytest

from streamspec import SpectralHMM
from streamspec.adapters.lazy_proba import LazyProba


def _pair(n: int = 50, extra: int = 3, seed: int = 0):
    rng = np.random.default_rng(seed)
    p = rng.random(n)
    p /= p.sum()
    labels = [f"s{i}" for i in range(n + extra)]  # labels after the row: not keys
    index = {label: i for i, label in enumerate(labels)}
    return (lambda: LazyProba(p, labels, index)), dict(zip(labels, p.tolist(), strict=False)), labels


def _filled(p: LazyProba) -> bool:
    return p._p is None and dict.__len__(p) == len(p)


def test_single_reads_are_the_rows_floats_and_do_not_fill():
    make, want, labels = _pair()
    p = make()
    for label in labels:
        assert p.get(label) == want.get(label) and (label in p) == (label in want)
        assert p.get(label, -1.0) == want.get(label, -1.0)
        if label in want:
            assert p[label] == want[label] and type(p[label]) is float
        else:
            with pytest.raises(KeyError):
                p[label]
    assert p.get("nope") is None and "nope" not in p and len(p) == len(want) == 50
    assert (p == 3) is False and p != "s1"  # a non-dict: unequal, nothing to fill
    assert p != {} and not (p == {"s0": want["s0"]})  # another length: river's `y_pred != {}`
    with pytest.raises(TypeError):
        p.get([1])  # unhashable, as a dict
    assert not _filled(p) and dict.__len__(p) == 1  # the first entry only, made at once


@pytest.mark.parametrize("read", [
    lambda p: list(p), lambda p: list(p.keys()), lambda p: list(p.values()),
    lambda p: list(p.items()), lambda p: dict(p), lambda p: {**p}, lambda p: p.copy(),
    lambda p: copy.copy(p), lambda p: copy.deepcopy(p), lambda p: pickle.loads(pickle.dumps(p)),
    lambda p: json.loads(json.dumps(p)), lambda p: eval(repr(p)), lambda p: p | {},
    lambda p: {} | p, lambda p: list(reversed(p)), lambda p: max(p, key=p.get),
    lambda p: sorted(p.items()),
])
def test_bulk_reads_see_every_entry(read):
    make, want, _ = _pair()
    assert read(make()) == read(want)


def test_comparisons_and_mutations_act_on_the_whole_dict():
    make, want, _ = _pair()
    assert make() == want and want == make() and make() == make()
    assert not (make() != want) and not (want != make())
    other = dict(want)
    other["s0"] += 1e-9
    assert make() != other and other != make()
    p = make()
    p["s0"] = 2.0
    assert p["s0"] == 2.0 and len(p) == 50 and p["s1"] == want["s1"]
    p = make()
    del p["s2"]
    assert "s2" not in p and len(p) == 49
    p = make()
    assert p.pop("s3") == want["s3"] and p.setdefault("x", 1.0) == 1.0 and len(p) == 50
    p = make()
    p.update(y=0.5)
    assert p["y"] == 0.5 and p["s4"] == want["s4"] and len(p) == 51
    p = make()
    p |= {"z": 0.1}
    assert isinstance(p, LazyProba) and p["z"] == 0.1 and len(p) == 51
    p = make()
    p.clear()
    assert len(p) == 0 and p == {}
    assert make().popitem() == list(want.items())[-1]


def test_predict_proba_one_is_lazy_and_equals_the_eager_dict():
    rng = np.random.default_rng(3)
    model = SpectralHMM(key="k", refit_every=None, rank=3)
    for t in range(3_000):
        model.learn_one({"k": t % 5}, f"w{int(rng.integers(40))}")
    model.refit()
    model.learn_one({"k": 0}, "newer")  # after the fit: at the floor, a key of the dict
    for k in range(5):
        p = model.predict_proba_one({"k": k})
        assert isinstance(p, dict) and not _filled(p)
        with model._lock:
            row = model.online.row(k)
        floor = min(model.min_proba, 0.5 / len(model.symbols))
        want = np.concatenate([row, np.full(len(model.symbols) - row.size, floor)])
        want /= want.sum()
        assert p.get("newer") == want[-1] and p["w3"] == want[model.symbols.index("w3")]
        assert not _filled(p)
        assert list(p) == model.symbols and np.allclose(list(p.values()), want, rtol=1e-12)
        assert _filled(p)
    eager = SpectralHMM(key="k", refit_every=None, rank=3, lazy_proba=False)
    for t in range(3_000):
        eager.learn_one({"k": t % 5}, model.symbols[t % 40])
    eager.refit()
    p = eager.predict_proba_one({"k": 1})
    assert type(p) is dict and list(p) == eager.symbols
