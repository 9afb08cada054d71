"""Counts shared by the window tests (θ_spec, θ_M and the backoff over windows), and the real
data sets the quality tests read."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

from streamspec import MomentAccumulator
from streamspec.core.hidden_markov_model import HiddenMarkovModel
from streamspec.core.hmm import HMM
from streamspec.experiments.datasets import default_data_path

T = TypeVar("T")

RING = HMM(T=0.2 * np.eye(4) + 0.8 * np.roll(np.eye(4), 1, axis=0),  # 4 states over 2 symbols
           O=[[0.9, 0.6, 0.2, 0.1], [0.1, 0.4, 0.8, 0.9]])


def assert_predicts_like_the_ring(model, seed: int) -> None:
    """``model``'s next-symbol distributions after 5 random histories (1 to 8 symbols, drawn
    with ``seed``) are :data:`RING`'s own, to 1e-9."""
    truth = HiddenMarkovModel.from_hmm(RING)
    rng = np.random.default_rng(seed)
    for _ in range(5):
        history = rng.integers(0, 2, size=int(rng.integers(1, 9)))
        np.testing.assert_allclose(model.predict_proba_next(history),
                                   truth.predict_proba_next(history), atol=1e-9)


def keyed_counts(truth: HMM, window, size: int, seed: int, length: int, keys: int) -> MomentAccumulator:
    """``size`` symbols of ``truth`` in ended sequences of ``length``, over ``keys`` streams."""
    acc = MomentAccumulator(n_symbols=truth.n_symbols, window=window)
    for k, s in enumerate(truth.sample_many(size // length, length, random_state=seed)):
        acc.learn_many(s, key=k % keys)
        acc.end(k % keys)
    return acc


def sticky_ring_counts(window, size: int = 40_000, seed: int = 1) -> MomentAccumulator:
    """The ring's counts in sequences of 40 over 4 streams."""
    return keyed_counts(RING, window, size, seed, length=40, keys=4)


def ended_split(seqs: list[np.ndarray], n: int) -> tuple[MomentAccumulator, list[np.ndarray]]:
    """``bench_predict.py``'s split of a real set (a seeded 80% of the sequences train) as the
    accumulator of the training sequences, each under its key and ended, and the held-out ones."""
    order = np.random.default_rng(0).permutation(len(seqs))
    cut = int(np.ceil(0.8 * len(seqs)))
    acc = MomentAccumulator(n_symbols=n)
    for i in order[:cut]:
        acc.learn_many(seqs[i], key=int(i))
        acc.end(int(i))
    return acc, [seqs[i] for i in order[cut:]]


def real_set(folder: str, load: Callable[[], T], looked_for: str | None = None) -> T:
    """``load()`` of a real data set, or the test skipped saying where the set was looked for.

    Parameters
    ----------
    folder
        The set's folder under the data root (:func:`~streamspec.experiments.datasets
        .default_data_path`: ``STREAMSPEC_DATA``, else a ``shared/data`` or ``../shared/data``
        above the working directory or the package).
    load
        Reads the set; a ``FileNotFoundError`` it raises means the set is not there.
    looked_for
        What the skip message says was looked for (default ``folder/``).

    Returns
    -------
    What ``load`` returns.
    """
    try:
        return load()
    except FileNotFoundError:
        # why: the sets are not in the repository; a skip must say where to put them
        root = default_data_path()
        pytest.skip(f"{folder} not found: looked for {looked_for or folder + '/'} in "
                    f"{root or 'no data folder'} (set STREAMSPEC_DATA to the folder holding "
                    f"{folder}/)")


def real_file(folder: str, name: str) -> Path:
    """The path of the file ``folder/name`` of the data root (:func:`real_set`), or a skip."""

    def find() -> Path:
        root = default_data_path()
        path = None if root is None else root / folder / name
        if path is None or not path.is_file():
            raise FileNotFoundError(f"{folder}/{name}")
        return path

    return real_set(folder, find, looked_for=f"{folder}/{name}")
