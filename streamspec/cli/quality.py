"""How good a fitted model is, in words users read: held-out log loss and perplexity.

Every fit with the default backoff scores itself on held-out counts
(:func:`streamspec.core.held_out.held_out_scores`): the mixture it predicts with, beside
the unigram, the Kneser–Ney trigram and the hidden-state parts alone. ``learn`` logs them
and ``inspect`` shows them.
"""

from __future__ import annotations

import math

__all__ = ["quality_fields", "quality_lines", "quality_log"]

_PARTS = (("mixture", "the model's predictions"), ("unigram", "unigram"),
          ("trigram", "Kneser-Ney trigram"), ("hmm", "HMM filter alone"),
          ("model", "spectral model alone"))


def quality_fields(model) -> dict[str, float]:
    """The held-out figures of a model (``{}`` without a backoff or when not measured). O(1).

    >>> quality_fields(None)
    {}
    """
    backoff = getattr(model, "backoff", None)
    return dict(getattr(backoff, "held_out", {}) or {})


def quality_lines(model) -> list[str]:
    """Lines ``name: L nats/symbol (perplexity P)`` for ``inspect``, the mixture first. O(1).

    >>> quality_lines(None)
    []
    """
    held = quality_fields(model)
    if not held:
        return []
    out = [f"held-out log loss on {held.get('symbols', 0):,.0f} held-out symbols "
           "(each predicted from the two before it):"]
    for key, name in _PARTS:
        if key in held:
            out.append(f"  {name}: {held[key]:.4f} nats/symbol (perplexity {math.exp(held[key]):.2f})")
    return out


def quality_log(model) -> str:
    """``key=value`` fields of the held-out figures for a log line (``""`` when none). O(1).

    >>> quality_log(None)
    ''
    """
    held = quality_fields(model)
    if not held:
        return ""
    parts = [f"held_out_symbols={held.get('symbols', 0):.0f}", f"log_loss={held['mixture']:.4f}",
             f"perplexity={math.exp(held['mixture']):.2f}"]
    parts += [f"{k}={held[k]:.4f}" for k, _ in _PARTS[1:] if k in held]
    return " ".join(parts)
