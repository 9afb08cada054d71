"""Every default setting of the estimators, the online model and the daemon, in one place.

:class:`~streamspec.MEstimator`, :class:`~streamspec.SpectralEstimator`,
:class:`~streamspec.SpectralHMM`, :class:`~streamspec.Refitter`,
``connectors.config.DaemonConfig`` and the command line (whose unset flags mean
"the estimator's default") all read their defaults from here, and all check
their settings with :func:`check_settings` when they are built, so that a bad
value is refused before anything is learned, with a message naming the
setting and the values it accepts.

How the defaults were chosen: held-out log loss and fit time of MEstimator
on Alice's characters (n = 75), on the words of a book (n ≈ 13,000) and on a
sparse 8-state HMM (n = 30), by ``python demos/bench_defaults.py``; the table and
the exact command are in docs/benchmarks.md, section "Defaults". In short:
``rank="auto"`` (the singular values of P21 above the sampling noise) fitted in
0.03 s on the small alphabets and about 2 s on the book, was the best or within
0.002 nats per symbol of the best fixed rank on the book and the HMM, and beat
the old fixed rank 2 by 0.14 nats per character on Alice; two outer iterations
(θ_spec, then one GLS step) were as good as three.

Examples
--------
>>> RANK, WEIGHTING
('auto', 'per_symbol')
>>> check_settings(rank=3, weighting="diagonal", sweeps=4)
>>> check_settings(weighting="bogus")
Traceback (most recent call last):
...
ValueError: weighting must be one of 'identity', 'diagonal', 'per_symbol', 'exact'; got 'bogus'
"""

from __future__ import annotations

import numbers
from typing import Any

__all__ = [
    "RANK", "WEIGHTING", "PENALTY", "FACTORIZATION", "FORMULATION", "MAX_OUTER_PROJECTED",
    "MAX_OUTER_DENSE", "MAX_SWEEPS", "WARM_SWEEPS", "TOL", "SHRINKAGE", "RIDGE", "WINDOW", "COUNT_WINDOW",
    "FILTER", "MIN_PROBA", "BACKOFF", "HMM_STATES", "REFIT_EVERY", "ONLINE_MIN_PROBA",
    "BASIS_TOL", "WEIGHTING_RTOL",
    "WEIGHTINGS", "FACTORIZATIONS", "FORMULATIONS", "FILTERS", "BACKOFFS",
    "HMM_N_ITER", "HMM_WINDOW_N_ITER", "HMM_TOL", "HMM_INIT", "HMM_INITS",
    "check_settings", "check_setting", "check_hmm_settings", "filter_window",
]

# ---------------------------------------------------------------- the defaults
RANK: int | str = "auto"  # see the module docstring and docs/benchmarks.md, "Defaults"
WEIGHTING = "per_symbol"
PENALTY = 0.0
FACTORIZATION = "fixed"
FORMULATION = "auto"
MAX_OUTER_PROJECTED = 2  # θ_spec then one GLS step: a third changed the held-out loss < 1e-3
MAX_OUTER_DENSE = 3
MAX_SWEEPS = 10  # dense: alternating sweeps per outer iteration (a cold fit)
WARM_SWEEPS = 3  # sweeps of a warm-started refit (Refitter, SpectralHMM, the daemon)
TOL = 1e-6
SHRINKAGE = "auto"
RIDGE = 1e-6
FILTER = "window"
# the window filter's w: "auto" keeps 2 over triples and, over windows of L symbols, takes the w
# in 1..L+1 of least held-out loss (core/filter_window.py: a 4th-order chain over 4 symbols,
# 1.318 nats at w = 2 against 0.744 at w = 4, the truth 0.733; docs/benchmarks.md)
WINDOW: int | str = "auto"
# the counts' window L (MomentAccumulator(window=...), SpectralHMM(count_window=...), learn/consume
# --window, the daemon's window): "auto" counts (2L+1)-grams with room for rank 128 (L = 1, plain
# triples, from 128 symbols on) and the estimators fit on the shortest l <= L that gives the rank
# the data support (docs/math.md section 11; docs/benchmarks.md "The automatic window by default")
COUNT_WINDOW: int | str = "auto"
MIN_PROBA = 1e-6  # floor of a batch-fitted model's probabilities
ONLINE_MIN_PROBA = 1e-3  # SpectralHMM: online predictions meet unseen trigrams often
BACKOFF = "auto"
HMM_STATES: int | str = "auto"  # the backoff's HMM: chosen on held-out counts, 2..64 (backoff_fit)
REFIT_EVERY = 10_000
# warm refits (docs/math.md section 10, docs/benchmarks.md "Warm refits"): keep the previous
# bases while their backward error on the new counts is at most this many N^(-1/2) ...
BASIS_TOL = 0.1
# ... and a symbol's weighting block while its count changed by at most this (relative)
WEIGHTING_RTOL = 0.05
# HMMEstimator (the HMM itself, docs/math.md section 8)
HMM_N_ITER = 50  # EM E-steps on the counted triples after the moment start (17 SQUAREM cycles)
HMM_WINDOW_N_ITER = 300  # over windows: SQUAREM cycles (each up to 3 E-steps), the tolerance ends most
HMM_TOL = 1e-8  # EM stops when the mean triple log-likelihood rises by less
HMM_INIT = "moments"

# ---------------------------------------------------------------- the allowed values
WEIGHTINGS = ("identity", "diagonal", "per_symbol", "exact")
FACTORIZATIONS = ("shared", "fixed", "per_symbol")
FORMULATIONS = ("auto", "projected", "dense")
FILTERS = ("window", "recursive")
BACKOFFS = ("auto", None)
HMM_INITS = ("moments", "random")


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and v == v  # v == v: not NaN


def _choice(allowed: tuple) -> tuple:
    return (lambda v: v in allowed), "one of " + ", ".join(repr(a) for a in allowed)


_RULES = {
    "rank": ((lambda v: v == "auto" or (_is_int(v) and v >= 1)), "a positive integer or 'auto'"),
    "weighting": _choice(WEIGHTINGS),
    "factorization": _choice(FACTORIZATIONS),
    "formulation": _choice(FORMULATIONS),
    "filter": _choice(FILTERS),
    "backoff": _choice(BACKOFFS),
    "penalty": ((lambda v: _is_real(v) and 0 <= v < float("inf")), "a finite number >= 0"),
    "ridge": ((lambda v: _is_real(v) and 0 <= v < float("inf")), "a finite number >= 0"),
    "smoothing": ((lambda v: _is_real(v) and 0 <= v < float("inf")), "a finite number >= 0"),
    "tol": ((lambda v: _is_real(v) and 0 < v < float("inf")), "a finite number > 0"),
    "shrinkage": ((lambda v: v == "auto" or (_is_real(v) and 0 <= v <= 1)),
                  "a number in [0, 1] or 'auto'"),
    "max_sweeps": ((lambda v: _is_int(v) and v >= 1), "a positive integer"),
    "sweeps": ((lambda v: _is_int(v) and v >= 1), "a positive integer"),
    "max_outer": ((lambda v: v is None or (_is_int(v) and v >= 1)), "a positive integer or None"),
    "outer": ((lambda v: _is_int(v) and v >= 1), "a positive integer"),
    "n_restarts": ((lambda v: _is_int(v) and v >= 0), "an integer >= 0"),
    "n_conditions": ((lambda v: v is None or (_is_int(v) and v >= 1)),
                     "a positive integer or None"),
    "window": ((lambda v: v == "auto" or (_is_int(v) and v >= 0)), "an integer >= 0 or 'auto'"),
    "min_proba": ((lambda v: _is_real(v) and 0 <= v < 1), "a number in [0, 1)"),
    "random_state": ((lambda v: v is None or _is_int(v)), "an integer or None"),
    "refit_every": ((lambda v: v is None or (_is_int(v) and v >= 1)),
                    "a positive integer or None"),
    "refit_interval": ((lambda v: v is None or (_is_real(v) and 0 < v < float("inf"))),
                       "a positive number of seconds or None"),
    "forgetting": ((lambda v: _is_real(v) and 0 < v <= 1), "a number in (0, 1]"),
    "max_symbols": ((lambda v: v is None or (_is_int(v) and v >= 1)),
                    "a positive integer or None"),
    "n_states": ((lambda v: v is None or (_is_int(v) and v >= 1)), "a positive integer or None"),
    "hmm_states": ((lambda v: v is None or v == "auto" or (_is_int(v) and v >= 1)),
                   "a positive integer, 'auto' or None"),
    "basis_tol": ((lambda v: _is_real(v) and 0 <= v < float("inf")), "a finite number >= 0"),
    "weighting_rtol": ((lambda v: _is_real(v) and 0 <= v < float("inf")), "a finite number >= 0"),
}

# HMMEstimator: n_states is required (None is the online model's "no HMM"), and its EM
# tolerance may be 0 (run every iteration)
_HMM_RULES = _RULES | {
    "n_states": ((lambda v: _is_int(v) and v >= 1), "a positive integer"),
    "n_iter": ((lambda v: v is None or (_is_int(v) and v >= 0)), "None or an integer >= 0"),
    "tol": ((lambda v: _is_real(v) and v >= 0), "a number >= 0"),
    "init": _choice(HMM_INITS),
}


def check_setting(name: str, value: Any, rules: dict | None = None) -> None:
    """Raise ``ValueError`` naming ``name`` and its allowed values if ``value`` is not one. O(1).

    Names without a rule are accepted as they are. ``rules``: the rule table
    (default: the estimators'; :func:`check_hmm_settings` passes the HMM's).

    Examples
    --------
    >>> check_setting("rank", 0)
    Traceback (most recent call last):
    ...
    ValueError: rank must be a positive integer or 'auto'; got 0
    """
    rule = (_RULES if rules is None else rules).get(name)
    if rule is None:
        return
    ok, allowed = rule
    try:
        good = bool(ok(value))
    except TypeError:  # e.g. a list compared with a number
        good = False
    if not good:
        raise ValueError(f"{name} must be {allowed}; got {value!r}")


def filter_window(window: int | str) -> int:
    """The window a model is built with: ``window``, or 2 for ``"auto"`` (until the backoff's
    fit chooses, :mod:`streamspec.core.filter_window`). O(1).

    >>> filter_window("auto"), filter_window(4)
    (2, 4)
    """
    return 2 if window == "auto" else int(window)


def check_settings(**settings: Any) -> None:
    """Check every given setting with :func:`check_setting`; ``None`` is *not* skipped. O(#settings).

    Callers whose settings may be unset (``None`` meaning "the default") leave
    those out.
    """
    for name, value in settings.items():
        check_setting(name, value)


def check_hmm_settings(**settings: Any) -> None:
    """Check the settings of :class:`~streamspec.HMMEstimator` like :func:`check_settings`. O(#settings).

    The same rules, except ``n_states`` (required), ``n_iter``, ``tol`` (0 allowed) and
    ``init`` (one of :data:`HMM_INITS`).

    Examples
    --------
    >>> check_hmm_settings(n_states=2, n_iter=0, tol=0.0, init="random")
    >>> check_hmm_settings(n_states=None)
    Traceback (most recent call last):
    ...
    ValueError: n_states must be a positive integer; got None
    """
    for name, value in settings.items():
        check_setting(name, value, _HMM_RULES)
