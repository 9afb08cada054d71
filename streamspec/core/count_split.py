"""Splitting counts at random into a kept and a held-out part (binomial thinning).

Every count is cut into units, and each unit is held out with probability ``fraction``:
the two parts are what two independent streams of the same source would have counted,
so a model fitted on the kept part is scored fairly on the held-out one. Triples, window
grams and stream starts are thinned alike; the triples of a window split are the
marginals of each part's grams (:meth:`~streamspec.core.windows.WindowCounts.triples`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamspec.core.stream_starts import StreamStarts
from streamspec.core.triples import Triples
from streamspec.core.windows import WindowCounts

__all__ = ["CountSplit", "split_counts", "split_triples", "split_grams", "split_starts"]


def _thin(w: np.ndarray, fraction: float, rng: np.random.Generator) -> np.ndarray:
    """The held-out part of each weight: binomial thinning of integer counts; a fractional
    weight w is cut into ``ceil(w)`` equal units thinned alike. O(m)."""
    if np.array_equal(w, np.round(w)):
        return rng.binomial(w.astype(np.int64), fraction).astype(np.float64)
    units = np.maximum(np.ceil(w), 1.0)
    return rng.binomial(units.astype(np.int64), fraction) * (w / units)


def split_triples(t: Triples, fraction: float, rng: np.random.Generator) -> tuple[Triples, Triples]:
    """``(kept, held)`` triples, ``fraction`` of every count held out in expectation. O(nnz).

    >>> t = Triples.from_arrays(2, [0, 1], [1, 0], [0, 1], [100.0, 100.0])
    >>> kept, held = split_triples(t, 0.1, np.random.default_rng(0))
    >>> kept.total + held.total, 5 < held.total < 40
    (200.0, True)
    """
    held = _thin(t.weights, fraction, rng)
    kept = t.weights - held
    a, b = kept > 0, held > 0
    return Triples(t.n, t.codes[a], kept[a]), Triples(t.n, t.codes[b], held[b])


def split_grams(g: WindowCounts, fraction: float, rng: np.random.Generator
                ) -> tuple[WindowCounts, WindowCounts]:
    """``(kept, held)`` grams of window L, as :func:`split_triples`: made from ``g``
    (:meth:`~streamspec.core.windows.WindowCounts.derived`) by the fraction and the generator's
    state, which decide them. O(distinct grams)."""
    draw = (float(fraction), repr(rng.bit_generator.state))
    held = _thin(g.weights, fraction, rng)
    kept = g.weights - held
    a, b = kept > 0, held > 0
    return (g.derived(g.window, g.codes[a], kept[a], ("kept", *draw)),
            g.derived(g.window, g.codes[b], held[b], ("held", *draw)))


def split_starts(s: StreamStarts, fraction: float, rng: np.random.Generator
                 ) -> tuple[StreamStarts, StreamStarts]:
    """``(kept, held)`` stream starts (first symbols and first pairs), as :func:`split_triples`."""
    hf, hp = _thin(s.first_weights, fraction, rng), _thin(s.pair_weights, fraction, rng)
    kept = StreamStarts(s.n, s.first_codes, s.first_weights - hf, s.pair_codes, s.pair_weights - hp)
    return kept, StreamStarts(s.n, s.first_codes, hf, s.pair_codes, hp)


@dataclass(frozen=True)
class CountSplit:
    """The two parts of a split: triples, their grams (``None`` without windows: then
    ``kept_hmm`` is ``kept``) and stream starts."""

    kept: Triples
    held: Triples
    kept_hmm: Triples | WindowCounts
    held_grams: WindowCounts | None
    kept_starts: StreamStarts
    held_starts: StreamStarts


def split_counts(triples: Triples, starts: StreamStarts, grams: WindowCounts | None,
                 fraction: float, rng: np.random.Generator) -> CountSplit:
    """Triples (or, with ``grams``, the grams, the triples of each part its marginal) and
    starts split by :func:`split_triples`. O(nnz + distinct grams + starts).

    >>> t = Triples.from_arrays(3, [0, 1, 2], [1, 2, 0], [2, 0, 1], [50.0, 50.0, 50.0])
    >>> s = split_counts(t, StreamStarts.empty(3), None, 0.2, np.random.default_rng(0))
    >>> s.kept_hmm is s.kept, s.kept.total + s.held.total
    (True, 150.0)
    """
    if grams is None:
        kept, held = split_triples(triples, fraction, rng)
        kept_hmm, held_grams = kept, None
    else:
        kept_hmm, held_grams = split_grams(grams, fraction, rng)
        kept, held = kept_hmm.triples(), held_grams.triples()
    kept_starts, held_starts = split_starts(starts, fraction, rng)
    return CountSplit(kept, held, kept_hmm, held_grams, kept_starts, held_starts)
