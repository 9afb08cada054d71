"""The top level of the Kneser–Ney trigram (:mod:`streamspec.core.trigram`) of new counts from
the previous trigram's top level and the change of the counts, without sorting the triples.

A refit's counts are ``new = f · old + Δ`` (:mod:`streamspec.core.triples_change`), Δ non-zero
on the few triples counted since the previous fit. The previous top level holds every triple
already sorted by context (``v * (n + 1) + u``) and next symbol, with its count, and the stream
starts inserted; so the new one is the old scaled by f, the counts of Δ's triples set to their
new values, the triples that are gone deleted, the new ones and the new starts inserted where
they sort (``searchsorted``, then one spliced copy per array). That is O(nnz) memory
traffic and O(|Δ| log nnz + starts log starts) comparisons, against the cold build's sort of
all nnz keys and its gathers in random order (:func:`~streamspec.core.trigram_levels.top_entries`).

The counts of the triples Δ names are the new counts themselves; the others are ``f · c``,
equal to the new count to the 10⁻¹² of a count that :func:`triples_change` ignores (exactly
without forgetting). Arrays in, arrays out.
"""

from __future__ import annotations

import numpy as np

from streamspec.core.stream_starts import StreamStarts
from streamspec.core.trigram_levels import SYMBOL_MASK
from streamspec.core.triples import BITS, Triples
from streamspec.core.triples_change import TriplesChange

__all__ = ["merged_top_level", "start_entries"]


def start_entries(starts: StreamStarts, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The top level's entries of the stream starts ``(context, w, count)`` sorted by (context,
    w): the context (<s>, a) of a first pair (a, b), (<s>, <s>) of a first symbol, <s> coded n.
    O(starts log starts)."""
    s = n
    pa, pb, pw = starts.pair_arrays()
    fa, fw = starts.first_codes, starts.first_weights
    sctx = np.concatenate([pa * (n + 1) + s, np.full(fa.size, s * (n + 1) + s, dtype=np.int64)])
    sw = np.concatenate([pb, fa]).astype(np.int64)
    sc = np.concatenate([pw, fw]).astype(np.float64)
    order = np.lexsort((sw, sctx))
    return sctx[order], sw[order], sc[order]


def _recoded(ctx: np.ndarray, n_old: int, n: int) -> np.ndarray:
    """Contexts coded over ``n_old`` symbols recoded over ``n >= n_old`` (<s> moves from n_old to
    n; the order is kept, <s> being the largest index in both). O(m)."""
    if n == n_old:
        return ctx
    v, u = np.divmod(ctx, n_old + 1)
    v[v == n_old] = n
    u[u == n_old] = n
    v *= n + 1
    v += u
    return v


def _spliced(old: np.ndarray, drop: np.ndarray, at: np.ndarray, where: np.ndarray,
             values: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """``old`` without the (sorted) indices ``drop``, times ``scale``, with ``values`` at the
    final positions ``at`` (sorted) and the kept entries' ``where`` (final positions) set:
    one fresh array, one pass (why: each fresh nnz-sized array costs its page faults). O(m)."""
    out = np.empty(old.size - drop.size + at.size, dtype=old.dtype)
    new = np.zeros(out.size, dtype=bool)
    new[at] = True
    out[at] = 0
    if drop.size:
        keep = np.ones(old.size, dtype=bool)
        keep[drop] = False
        out[~new] = old[keep]
    else:
        out[~new] = old
    if scale != 1.0:
        out *= scale
    out[at] = values[: at.size]
    out[where] = values[at.size:]
    return out


def _located(contexts: np.ndarray, indptr: np.ndarray, keys: np.ndarray, n_old: int,
             ectx: np.ndarray, ew: np.ndarray) -> tuple[np.ndarray, ...]:
    """For entries ``(ectx, ew)``: their context's rank (or where it would be inserted), whether
    the context is in the level, and the entry's position in ``keys`` (or where it would be
    inserted), found or not. O(m log nnz)."""
    r = np.searchsorted(contexts, ectx)
    known = np.zeros(ectx.size, dtype=bool)
    inside = r < contexts.size
    known[inside] = contexts[r[inside]] == ectx[inside]
    pos = indptr[r]  # a new context: its entries go before the next context's
    # a symbol new to the alphabet (w >= n_old) goes last in its known context (why: its key
    # r * n_old + w would fall in the next context's)
    old_w = known & (ew < n_old)
    pos[known & ~old_w] = indptr[r[known & ~old_w] + 1]
    key = r[old_w] * n_old + ew[old_w]
    pos[old_w] = np.searchsorted(keys, key)
    hit = np.zeros(ectx.size, dtype=bool)
    hit[old_w] = (pos[old_w] < keys.size) & (keys[np.minimum(pos[old_w], keys.size - 1)] == key)
    return r, known, pos, hit


def merged_top_level(level, counts: np.ndarray, n_old: int, triples: Triples,
                     change: TriplesChange, starts: StreamStarts) -> tuple[np.ndarray, ...]:
    """The top level's ``(contexts, indptr, next, counts, started)`` of ``triples`` and ``starts``
    (what :func:`~streamspec.core.trigram_levels.top_entries` and
    :func:`~streamspec.core.trigram_levels.with_starts` give, grouped by context; ``started``:
    the starts' entries) from the previous :class:`~streamspec.core.trigram_levels.TrigramLevel`
    ``level`` over ``n_old`` symbols with its entries' ``counts`` (starts included), and the
    change ``triples = f · previous + Δ``. Nothing given is modified. O(nnz) traffic (one fresh
    array per output), O((|Δ| + starts) log nnz) searches."""
    n = triples.n
    contexts, indptr = _recoded(level.contexts, n_old, n), level.indptr
    # the entries to set: Δ's triples (code x2 << 2B | x3 << B | x1: v = x2, u = x1, w = x3) with
    # their new counts (0: gone), then every start entry with its new count
    dcodes = change.delta.codes
    present, dnew = np.zeros(dcodes.size, dtype=bool), np.zeros(dcodes.size)
    if triples.nnz and dcodes.size:
        at_new = np.minimum(np.searchsorted(triples.codes, dcodes), triples.nnz - 1)
        present = triples.codes[at_new] == dcodes
        dnew[present] = triples.weights[at_new[present]]
    sctx, sw, sc = start_entries(starts, n)
    ectx = np.concatenate([(dcodes >> (2 * BITS)) * (n + 1) + (dcodes & SYMBOL_MASK), sctx])
    ew = np.concatenate([(dcodes >> BITS) & SYMBOL_MASK, sw])
    ec = np.concatenate([dnew, sc])
    present = np.concatenate([present, np.ones(sc.size, dtype=bool)])
    order = np.lexsort((ew, ectx))  # why: inserted entries must go in key order
    ectx, ew, ec, present = ectx[order], ew[order], ec[order], present[order]
    r, known, pos, hit = _located(contexts, indptr, level.keys, n_old, ectx, ew)
    # drop the triples that are gone and the previous starts not among the new ones
    s_ranks = np.flatnonzero(contexts % (n + 1) == n)
    s_entries = _ranges(indptr[s_ranks], indptr[s_ranks + 1])
    drop = np.union1d(pos[hit & ~present], np.setdiff1d(s_entries, pos[hit], assume_unique=True))
    fresh = ~hit & present
    ins = pos[fresh]
    ins_final = ins + np.arange(ins.size) - np.searchsorted(drop, ins)
    kept = hit & present
    kept_final = (pos[kept] - np.searchsorted(drop, pos[kept])
                  + np.searchsorted(ins, pos[kept], side="right"))
    w = _spliced(level.next, drop, ins_final, kept_final[:0], ew[fresh])
    c = _spliced(counts, drop, ins_final, kept_final, np.concatenate([ec[fresh], ec[kept]]),
                 change.scale)
    # the contexts: sizes changed by the entries dropped and inserted; new ones inserted; empty
    # ones (every entry gone) removed
    sizes = np.diff(indptr)
    rank_of = np.searchsorted(indptr, drop, side="right") - 1
    sizes = sizes - np.bincount(rank_of, minlength=sizes.size)
    sizes += np.bincount(r[fresh & known], minlength=sizes.size)
    new_ctx, new_sizes = np.unique(ectx[fresh & ~known], return_counts=True)
    at = np.searchsorted(contexts, new_ctx)
    contexts, sizes = np.insert(contexts, at, new_ctx), np.insert(sizes, at, new_sizes)
    if (sizes == 0).any():
        contexts, sizes = contexts[sizes > 0], sizes[sizes > 0]
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    s_ranks = np.flatnonzero(contexts % (n + 1) == n)
    return contexts, indptr, w, c, _ranges(indptr[s_ranks], indptr[s_ranks + 1])


def _ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The indices ``lo[i]:hi[i]`` of every range, concatenated. O(ranges + indices)."""
    lengths = hi - lo
    return np.repeat(lo - np.cumsum(lengths) + lengths, lengths) + np.arange(lengths.sum())
