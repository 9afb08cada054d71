"""The mixing weights a partition's stream taught, and its prequential loss, in its checkpoint.

The daemon predicts every record's symbol before it learns it (or a deterministic sample
of them: :mod:`connectors.kafka.scoring`), per partition, with an
:class:`~streamspec.streaming.online_predictor.OnlinePredictor`: the predicted probability
of the symbol is a held-out test of the current model, its log the prequential loss, and
the mixing weights of the predictor's components learn from it
(:class:`~streamspec.core.mixture.ExpertMixture`). :class:`LearnedWeights` is what of
that is kept in the partition's checkpoint (file or state-topic snapshot), so that a
restarted daemon, or the next owner of the partition, goes on from it:

* header entry ``predictor``: ``components`` (the parts the weights mix, e.g.
  ``["trigram", "hmm"]``), ``resolution``, ``switching`` and ``switching_half_life`` (absent
  in files written before it: a constant rate) of the mixture,
  ``observed`` (symbols learned from per bucket), ``loss`` (Σ −log p of the scored
  symbols, nats) and ``scored`` (their number);
* array ``predictor_log_weights``: the log-posterior over the blends, (buckets, blends).

A checkpoint written before weights were kept has neither: it loads as ``None`` (the
partition starts from the model's weights). :func:`merge_weights` turns the partitions'
weights into the weights the next refit's model starts from.

Examples
--------
>>> from streamspec.core.mixture import ExpertMixture
>>> mix = ExpertMixture(2, resolution=4)
>>> _ = mix.observe(1, np.array([0.9, 0.1]))
>>> w = LearnedWeights(("trigram", "hmm"), mix, loss=0.5, scored=1)
>>> header, arrays = w.to_parts()
>>> back = LearnedWeights.from_parts(header, arrays, "example")
>>> back.components, back.log_loss, bool(np.allclose(back.mixture.blends([1]), mix.blends([1])))
(('trigram', 'hmm'), 0.5, True)
>>> LearnedWeights.from_parts(None, {}, "an older checkpoint") is None
True
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from streamspec.core.checkpoint import CheckpointError
from streamspec.core.mixture import ExpertMixture

__all__ = ["LearnedWeights", "merge_weights", "HEADER_KEY", "ARRAY_KEY"]

HEADER_KEY = "predictor"
ARRAY_KEY = "predictor_log_weights"
_COMPONENTS = frozenset({"model", "trigram", "hmm"})


@dataclass
class LearnedWeights:
    """A partition's learned mixing weights and its prequential loss.

    Attributes
    ----------
    components
        The parts the weights mix (``model``, ``trigram``, ``hmm``, in that order).
    mixture
        The weights (``None``: a model without parts to mix; only the loss is kept).
    loss, scored
        Σ −log p (nats) of the symbols scored, and their number.
    """

    components: tuple[str, ...]
    mixture: ExpertMixture | None
    loss: float = 0.0
    scored: int = 0

    @property
    def log_loss(self) -> float:
        """Nats per scored symbol (NaN before any)."""
        return self.loss / self.scored if self.scored else math.nan

    def to_parts(self) -> tuple[dict, dict]:
        """The checkpoint's header entry and arrays. O(buckets · blends)."""
        header = {"components": list(self.components), "loss": float(self.loss),
                  "scored": int(self.scored)}
        arrays = {}
        mix = self.mixture
        if mix is not None:
            header.update(resolution=mix.resolution, switching=mix.switching,
                          switching_half_life=mix.switching_half_life,
                          observed=[float(v) for v in mix.n_observed])
            arrays[ARRAY_KEY] = mix.log_weights()
        return header, arrays

    @classmethod
    def from_parts(cls, header: dict | None, arrays: dict, source: str) -> LearnedWeights | None:
        """The weights of a checkpoint's header entry and arrays; ``None`` when it has none (an
        older checkpoint). ``CheckpointError`` naming the problem if malformed."""
        if header is None:
            return None
        try:
            components = tuple(str(c) for c in header["components"])
            if not components or not set(components) <= _COMPONENTS:
                raise ValueError(f"unknown components {components!r}")
            loss, scored = float(header["loss"]), int(header["scored"])
            if not (math.isfinite(loss) and loss >= 0 and scored >= 0):
                raise ValueError(f"loss {loss!r} over {scored!r} symbols")
            mixture = None
            if ARRAY_KEY in arrays:
                # no half-life: written when the rate was constant, and it stays so
                mixture = ExpertMixture(len(components), resolution=int(header["resolution"]),
                                        switching=float(header["switching"]),
                                        switching_half_life=header.get("switching_half_life"),
                                        log_weights=arrays[ARRAY_KEY])
                mixture.restore_observed(header["observed"])
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{source}: malformed learned weights ({exc})") from None
        return cls(components, mixture, loss, scored)


def merge_weights(weights: Iterable[LearnedWeights | None], base: ExpertMixture,
                  components: tuple[str, ...]) -> ExpertMixture | None:
    """The weights the next refit starts from: the partitions' weights merged per bucket.

    In each bucket, the posterior over the blends is the average of the partitions'
    posteriors weighted by the symbols each learned from in that bucket (so the merged
    blend is the average of their blends, weighted the same way); a bucket no partition
    learned in keeps ``base``'s. Only weights over ``components`` with ``base``'s grid
    count. ``None`` when none does. O(partitions · buckets · blends).

    Examples
    --------
    >>> a, b = ExpertMixture(2, resolution=2), ExpertMixture(2, resolution=2)
    >>> for _ in range(30):
    ...     _ = a.observe(0, np.array([0.9, 0.1]))
    >>> merged = merge_weights([LearnedWeights(("trigram", "hmm"), a)], b, ("trigram", "hmm"))
    >>> bool(np.allclose(merged.blends([0, 1]), [a.blend(0), b.blend(1)]))
    True
    """
    parts = [w.mixture for w in weights if w is not None and w.mixture is not None
             and tuple(w.components) == tuple(components)
             and w.mixture.n_experts == base.n_experts]
    if not parts:
        return None
    counts = np.stack([m.n_observed for m in parts])  # (partitions, buckets)
    posts = np.stack([np.exp(m.log_weights()) for m in parts])  # rows sum to 1
    total = counts.sum(axis=0)
    merged = np.exp(base.log_weights())
    seen = total > 0
    merged[seen] = np.einsum("pb,pbe->be", counts, posts)[seen] / total[seen, None]
    out = ExpertMixture(base.n_components, resolution=base.resolution, switching=base.switching,
                        switching_half_life=base.switching_half_life,
                        log_weights=np.log(np.maximum(merged, 1e-300)))
    out.n_observed = total
    return out
