"""SpectralHMM's fast paths on a large alphabet: river's dict and the argmax against the row.

``predict_proba_one`` builds river's dict over every known label in one pass from the
stream's mixed row (labels newer than the model at the floor, renormalised);
``predict_one`` takes the argmax from candidates and a bound. Both are held here to the
whole row, recomputed for every prediction, with labels newer than the model among them.
"""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import SpectralHMM


def _stream(n: int, T: int, seed: int) -> list[tuple[dict, str]]:
    rng = np.random.default_rng(seed)
    zipf = 1 / np.arange(1, n + 1) ** 1.1
    zipf /= zipf.sum()
    perms = [rng.permutation(n) for _ in range(4)]
    return [({"k": (k := int(rng.integers(40)))}, f"w{perms[k % 4][rng.choice(n, p=zipf)]}")
            for _ in range(T)]


def test_predict_proba_one_is_the_whole_row_over_every_label_and_predict_one_its_argmax():
    data = _stream(300, 14_000, seed=2)
    model = SpectralHMM(key="k", refit_every=None)
    for x, y in data[:12_000]:
        model.learn_one(x, y)
    model.refit()
    n_model = model.model.n_symbols
    newer = [({"k": t % 40}, f"new{t}") for t in range(5)]  # labels after the fit: at the floor
    checked = 0
    for x, y in newer + data[12_000:13_500]:
        p = model.predict_proba_one(x)
        labels = model.symbols
        assert isinstance(p, dict) and list(p) == labels  # river's contract: every label, a dict
        with model._lock:
            row = model.online.row(x["k"])
        floor = min(model.min_proba, 0.5 / len(labels))
        want = np.concatenate([row, np.full(len(labels) - n_model, floor)])
        want /= want.sum()
        np.testing.assert_allclose(list(p.values()), want, rtol=1e-12, atol=1e-300)
        assert sum(p.values()) == pytest.approx(1.0, abs=1e-12)
        assert model.predict_one(x) == labels[int(want.argmax())]
        checked += len(labels) > n_model
        model.learn_one(x, y)
    assert checked > 1000  # newer labels were in the dicts
