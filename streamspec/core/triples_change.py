"""What changed between two snapshots of the same counts: a scale and a sparse change.

Counts only ever change in two ways between two fits of a stream: new triples are
added (counts are additive) and, with exponential forgetting, every earlier count is
multiplied by one factor. So ``new = f · old + Δ`` with a scalar f and a change Δ
that is non-zero only on the triples counted since the old snapshot, whatever the
alphabet size. :func:`triples_change` recovers f and Δ from two sorted
:class:`~streamspec.core.triples.Triples` snapshots in one merge of their codes, so
that a warm refit (:mod:`streamspec.core.projected_warm`) can update what is linear in
the counts from Δ alone: the decomposition is exact for any f, and f is chosen to make
Δ as sparse as the counts allow (docs/math.md section 10). Where the accumulator logged
what it merged between the two snapshots (:mod:`streamspec.core.count_log`), f = 1 and Δ is
read from its log instead, O(|Δ| log |Δ|).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from streamspec.core.count_log import logged_delta
from streamspec.core.triples import BITS, Triples

__all__ = ["TriplesChange", "triples_change"]

_ROUNDING = 1e-12  # relative size of a change left by rounding alone (forgetting divides)


@dataclass(frozen=True)
class TriplesChange:
    """``new = scale · old + delta`` for two snapshots of counts.

    Attributes
    ----------
    scale
        The factor f applied to every old count (1 without forgetting).
    delta
        The change Δ, a :class:`Triples` over the new alphabet whose weights may be
        negative (a triple present in the old snapshot only, or a count that fell by
        more than the scale says), in code order.
    changed_middle
        Sorted middle symbols of the triples in ``delta``: the symbols whose own counts
        changed besides the scale.
    new_nnz
        Distinct triples of the new snapshot.
    """

    scale: float
    delta: Triples
    changed_middle: np.ndarray
    new_nnz: int

    @property
    def fraction(self) -> float:
        """Distinct triples changed, as a fraction of the new snapshot's (0 when nothing changed)."""
        return self.delta.nnz / max(1, self.new_nnz)


def triples_change(old: Triples, new: Triples) -> TriplesChange:
    """``(f, Δ)`` with ``new = f · old + Δ``, Δ as sparse as possible. O(nnz log nnz) at worst.

    The old snapshot's alphabet must not be larger than the new one's (an alphabet only
    grows). f is the smallest ratio ``new/old`` over the triples of both: without
    forgetting that is 1 (some triple was not counted again), with forgetting it is the
    factor every uncounted triple was multiplied by, since a triple counted again has a
    larger ratio. A change below 10⁻¹² of a count (what dividing by the forgetting weight
    leaves) counts as none. Cost: one binary search of the old codes in the new ones
    (both sorted) and a few passes over the arrays; O(|Δ| log |Δ|) when both snapshots were
    marked by one :class:`~streamspec.core.count_log.CountLog` (then f = 1 and Δ is what was
    added, even where every old triple was counted again).

    Examples
    --------
    >>> old = Triples.from_arrays(3, x1=[0, 1], x2=[1, 2], x3=[2, 0], weights=[4.0, 2.0])
    >>> new = Triples.from_arrays(3, x1=[0, 1, 2], x2=[1, 2, 2], x3=[2, 0, 1], weights=[2.0, 3.0, 1.0])
    >>> c = triples_change(old, new)
    >>> c.scale, c.delta.weights.tolist(), c.changed_middle.tolist()
    (0.5, [2.0, 1.0], [2])
    """
    if old.n > new.n:
        raise ValueError(f"the old counts have {old.n} symbols, the new ones {new.n}: an alphabet "
                         "never shrinks between two snapshots of the same counts")
    logged = logged_delta(old, new)
    if logged is not None:  # the store logged what it added since `old` (core/count_log.py)
        return TriplesChange(1.0, logged, np.unique(logged.codes >> (2 * BITS)), new.nnz)
    pos = np.searchsorted(new.codes, old.codes)
    if old.nnz and pos[-1] < new.nnz and np.array_equal(new.codes[pos], old.codes):
        found = None  # every old triple is still counted (the usual case): no masks
        at, old_w = pos, old.weights
    else:
        inside = pos < new.nnz
        found = np.zeros(old.nnz, dtype=bool)
        found[inside] = new.codes[pos[inside]] == old.codes[inside]
        at, old_w = pos[found], old.weights[found]
    kept = new.weights[at]
    ratio = float((kept / old_w).min()) if at.size else 1.0
    scale = ratio if ratio > 0 else 1.0
    change = kept - scale * old_w  # the change of the triples in both snapshots
    moved = np.flatnonzero(np.abs(change) > _ROUNDING * kept)
    fresh = np.ones(new.nnz, dtype=bool)
    fresh[at] = False  # triples of the new snapshot only: their whole count is the change
    fresh = np.flatnonzero(fresh)
    codes = [new.codes[at[moved]], new.codes[fresh]]
    weights = [change[moved], new.weights[fresh]]
    if found is not None and not found.all():  # triples of the old snapshot only
        codes.append(old.codes[~found])
        weights.append(-scale * old.weights[~found])
    codes, weights = np.concatenate(codes), np.concatenate(weights)
    order = np.argsort(codes, kind="stable")
    delta = Triples(new.n, codes[order], weights[order])
    middle = np.unique(delta.codes >> (2 * BITS))
    return TriplesChange(scale, delta, middle, new.nnz)
