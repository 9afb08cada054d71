"""The exact argmax of a stream's mixed row from a few candidates and a bound.

:meth:`~streamspec.streaming.online_predictor.OnlinePredictor.argmax` on a large alphabet:
the candidates are the context's trigram entries, the top symbols of the trigram's lowest
level, of each HMM state and of the context's own row; every other symbol is bounded by
those lists' cut-offs, so a best candidate above the bound is the argmax. The row cache
(``rows``, the online predictor's per-model cache) gives the lists (``rows.tops()``), the
HMM's emissions by symbol (``rows.E_T``) and a scratch row of zeros (``rows.scratch``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["pruned_argmax"]


def pruned_argmax(trigram, rows, top: int, mid: int, lam: np.ndarray,
                   state, own=None) -> tuple[int, float] | None:
    """The exact argmax of ``[λ·model +] lam[0]·trigram + lam[1]·HMM`` from candidates, or
    ``None`` when the bound on the other symbols does not rule them out
    (:meth:`OnlinePredictor.argmax`); ``own``: ``((row, top symbols, TOP-th value), λ)`` of the
    model's own part."""
    tops = rows.tops()
    t = trigram.tables(top, mid)  # (g3, g2, direct slices, lower is the unigram)
    g3, g2, top_next, top_direct, mid_next, mid_direct, unigram = t
    low_idx, low_kth = tops["freq"] if unigram else tops["p1"]
    low = trigram.unigram_of() if unigram else trigram.continuation_of()
    lam_t = float(lam[0])
    c_low = lam_t * g3 * (1.0 if unigram else g2)  # the weights folded into scalars: fewer passes
    parts = [top_next, mid_next, low_idx]
    bound = c_low * float(low_kth)
    if state is not None:
        idx, kth = tops["hmm"]
        parts.append(idx)
        w_state = float(lam[1]) * state
        bound += float(w_state @ kth)
    if own is not None:
        (own_row, own_idx, own_kth), own_lam = own
        parts.append(own_idx)
        bound += own_lam * own_kth
    cand = np.concatenate(parts)  # repeats score alike: no need to remove them
    scratch = rows.scratch  # the context's direct trigram terms, weighted, then reset
    scratch[mid_next] += (lam_t * g3) * mid_direct
    scratch[top_next] += lam_t * top_direct
    score = scratch[cand] + c_low * low[cand]
    scratch[mid_next] = 0.0
    scratch[top_next] = 0.0
    if state is not None:
        score += rows.E_T[cand] @ w_state
    if own is not None:
        score += own_lam * own_row[cand]
    best = score.max()
    if not best > bound:
        return None
    return int(cand[score == best].min()), float(best)  # the lowest index among ties, as argmax
