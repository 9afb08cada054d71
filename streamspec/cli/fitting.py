"""``learn``'s fits: the settings checked before counting, θ_M and the HMM fitted and saved.

Messages use the CLI's spelling (``--weighting exact``, not ``weighting='exact'``)
and never send the user in a circle: a setting that needs the dense formulation
on an alphabet too large for it is named as the setting to change.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import time
from typing import Any

import numpy as np

from streamspec.cli.checkpoint_files import hmm_path, model_rank
from streamspec.cli.errors import CommandError, cli_spelling
from streamspec.cli.options import estimator_default
from streamspec.cli.progress_bar import step
from streamspec.cli.quality import quality_log

__all__ = ["FollowedFits", "check_estimator_settings", "fit_and_save", "fit_and_save_hmm",
           "reading_metadata", "show_progress"]


class FollowedFits:
    """What ``learn --follow``'s saves carry from one fit to the next.

    ``scorer``: the :class:`~connectors.record_scoring.RecordScorer` that predicts every
    record read after a save before it is learned (the weights it teaches). ``state``: the
    last fit's reusable state (``MEstimator.fit_with_state``: bases, moments and weighting
    blocks, or over windows the window, rank and bases; ``None`` before the first fit, after
    a failed one, or in the dense formulation), so that a save refits at a cost that
    follows what changed since the last one, as the daemon's worker does. Memory: the
    state's, about the counts' distinct triples (or grams) again, plus O(n · k') floats.
    """

    def __init__(self, scorer):
        self.scorer = scorer
        self.state = None


def show_progress(args: argparse.Namespace) -> bool:
    """Whether to draw progress: ``--progress always``, or ``auto`` on a terminal."""
    mode = getattr(args, "progress", "auto")
    return mode == "always" or (mode == "auto" and sys.stderr.isatty())


def _params(args: argparse.Namespace, rank: Any) -> dict[str, Any]:
    from connectors.config import mestimator_params

    return mestimator_params(rank=rank, penalty=args.penalty, weighting=args.weighting,
                             sweeps=args.sweeps, formulation=getattr(args, "formulation", None))


def _dense_only(args: argparse.Namespace) -> str:
    """The flag asked for that only the dense formulation offers (``--weighting exact``), or ''."""
    from streamspec.core.projected_weighting import PROJECTED_WEIGHTINGS

    if args.weighting is not None and args.weighting not in PROJECTED_WEIGHTINGS:
        return f"--weighting {args.weighting}"
    if args.penalty:
        return f"--penalty {args.penalty:g}"
    return ""


def _dense_hint() -> str:
    from streamspec.core.projected_weighting import PROJECTED_WEIGHTINGS

    default = estimator_default("weighting")
    return (f"the projected formulation (the default, linear in the alphabet) takes "
            f"--weighting {', '.join(PROJECTED_WEIGHTINGS)} (default {default}) and no --penalty")


def check_estimator_settings(args: argparse.Namespace) -> None:
    """Refuse contradictory estimator flags before anything is counted (status 2).

    Examples
    --------
    >>> ns = argparse.Namespace(rank=None, penalty=None, weighting="exact", sweeps=None,
    ...                         formulation="projected")
    >>> check_estimator_settings(ns)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    streamspec.cli.errors.CommandError: --weighting exact needs --formulation dense ...
    """
    from streamspec.core.mestimator import MEstimator

    dense_only = _dense_only(args)
    if dense_only and getattr(args, "formulation", None) == "projected":
        raise CommandError(f"{dense_only} needs --formulation dense (n³ memory and more: "
                           f"small alphabets only, about 300 symbols at most); {_dense_hint()}",
                           status=2)
    try:
        MEstimator(**_params(args, args.rank if args.rank is not None else "auto"))
    except (ValueError, TypeError) as exc:
        raise CommandError(cli_spelling(str(exc)), status=2) from None


def explain_fit_error(exc: BaseException, args: argparse.Namespace) -> str:
    """The one-line reason a fit failed, in the CLI's words (no circular advice).

    >>> ns = argparse.Namespace(weighting="exact", penalty=None)
    >>> explain_fit_error(ValueError("the dense formulation (weighting='exact') on 1076 symbols "
    ...     "would need about 111.4 GiB; the limit is 2 GiB: use formulation='projected'"), ns)
    ... # doctest: +ELLIPSIS
    'cannot fit: --weighting exact needs the dense formulation, which on 1076 symbols would...'
    """
    text = str(exc).splitlines()[0] if str(exc).strip() else type(exc).__name__
    dense_only = _dense_only(args)
    if dense_only and "would need about" in text:
        size = text[text.index(" on ") + 1:text.index(";")] if ";" in text else "too large"
        return (f"cannot fit: {dense_only} needs the dense formulation, which {size}: drop "
                f"{dense_only}; {_dense_hint()}")
    if isinstance(exc, MemoryError):
        return f"cannot fit: out of memory ({text}); try a smaller --rank or --max-symbols"
    return f"cannot fit: {cli_spelling(text)}"


def reading_metadata(args) -> dict[str, str]:
    """How the files' symbols were read, saved with the model so that ``predict`` reads alike.

    >>> reading_metadata(argparse.Namespace(encoding=None, lowercase=True))
    {'encoding': 'chars', 'lowercase': 'true'}
    """
    meta = {"encoding": getattr(args, "encoding", None) or "chars"}
    if getattr(args, "lowercase", None):
        meta["lowercase"] = "true"
    return meta


def _rank(args: argparse.Namespace, acc) -> Any:
    """The rank to ask for: an integer rank is clamped to the alphabet (below it for large ones)."""
    from streamspec.core.subspace import DENSE_SVD_MAX

    rank = args.rank if args.rank is not None else estimator_default("rank")
    if isinstance(rank, int):
        rank = max(1, min(rank, acc.n if acc.n <= DENSE_SVD_MAX else acc.n - 1))
    return rank


def fit_and_save(args, acc, log: logging.Logger, final: bool = True,
                 followed: FollowedFits | None = None) -> int:
    """Fit θ_M on the counts with the command's settings, save it to ``--out`` (and the HMM).

    Unset settings take MEstimator's own defaults; an integer rank is clamped to the
    alphabet size. The log lines give the rank used, the parts the predictions mix and
    their held-out log loss beside the unigram's and the trigram's.
    ``final=False`` (a periodic save of ``learn --follow``): problems are logged as
    warnings, and counts that cannot be fitted yet are skipped silently; otherwise
    they raise :class:`CommandError`. ``followed`` (``learn --follow``): its scorer predicted
    the records read since the last fit before they were learned: their prequential loss is
    logged (``event=prequential``), the fit starts from the previous fit's state with the
    weights those records taught (kept, not re-estimated from held-out counts; warm where
    the state allows, ``path=`` in the log line), and the scorer follows the new model.
    Cost: that of the fit, O(nnz·k + n·k²) and up; a warm refit's follows the change.
    """
    def fail(message: str) -> int:
        if final:
            raise CommandError(message)
        log.warning("event=save-skipped reason=%r", message)
        return 1

    if not acc.n_triples:
        return fail(no_triples_message(args)) if final else 1
    states = getattr(args, "states", None)
    if states is not None and states > acc.n and _count_window(acc) == 1:
        if not final:
            return 1
        return fail(f"--states {states} is more than the {acc.n} symbols counted: "
                    "the hidden states of a discrete HMM cannot be told apart from fewer symbols "
                    "(count windows of several symbols, --window auto, to learn more states)")
    from streamspec.core.mestimator import MEstimator

    rank = _rank(args, acc)
    est = MEstimator(**_params(args, rank))
    start = _refit_start(followed, log)
    t0 = time.perf_counter()
    try:
        with step(f"fitting the model ({acc.n:,} symbols, rank {rank})", final and show_progress(args)):
            model = _fit(est, acc, start, followed)
    except (ValueError, MemoryError) as exc:  # bad settings, or counts too large to fit
        return fail(explain_fit_error(exc, args))
    parts = "+".join(model.backoff.components) if model.backoff is not None else "model"
    log.info("event=fitted rank=%d requested_rank=%s symbols=%d seconds=%.2f predictor=%s "
             "weights=%s path=%s", model_rank(model), rank, model.n_symbols,
             time.perf_counter() - t0, parts, "held-out" if start is None else "learned",
             getattr(getattr(est, "refit_", None), "path", "cold"))
    if followed is not None:
        followed.scorer.follow(model)
    quality = quality_log(model)
    if quality:  # held-out log loss of the predictions, beside the unigram, trigram and parts
        log.info("event=quality %s", quality)
    if args.out:
        model = model.replace(metadata={**reading_metadata(args), **_window_metadata(acc)})
        model.save(args.out)
        log.info("event=saved model=%s triples=%d", args.out, int(acc.n_triples))
    if states:
        return fit_and_save_hmm(args, acc, log, final=final)
    return 0


def _count_window(acc) -> int:
    """L, the window the counts are kept at (1: triples). O(1)."""
    return int(getattr(acc, "current_window", 1))


def _window_metadata(acc) -> dict[str, str]:
    """The counts' window, saved with the model for ``inspect`` (nothing for triples).

    >>> from streamspec.streaming.accumulator import MomentAccumulator
    >>> _window_metadata(MomentAccumulator(n_symbols=4, window="auto"))
    {'count_window': '4'}
    """
    L = _count_window(acc)
    return {"count_window": str(L)} if L > 1 else {}


def _fit(est, acc, start, followed: FollowedFits | None):
    """``est.fit(acc, init=start)``; with ``followed``, from its kept state (the weights
    ``start``'s: the stream's), and the new state kept for the next save. O(the fit)."""
    if followed is None:
        return est.fit(acc, init=start)
    # why cleared first: a fit that fails leaves no state, and the next save starts from
    # the RefitStart alone (the weights), as before the first fit
    kept, followed.state = followed.state, None
    init = start if kept is None or start is None else start.onto(kept)
    model, followed.state = est.fit_with_state(acc, init=init)
    return model


def _refit_start(followed: FollowedFits | None, log: logging.Logger) -> Any:
    """What a ``learn --follow`` save refits from (``None``: a first fit); logs the
    prequential loss of the records read since the last fit. O(E)."""
    scorer = None if followed is None else followed.scorer
    if scorer is None or scorer.online is None or scorer.online.model is None:
        return None
    from connectors.refit_start import RefitStart

    scorer.flush()
    nats, symbols = scorer.since_model()
    if symbols:
        log.info("event=prequential symbols=%d log_loss=%.4f perplexity=%.2f (the records read "
                 "since the last fit, each predicted by its model before it was learned)",
                 symbols, nats / symbols, math.exp(nats / symbols))
    online = scorer.online
    return RefitStart.of(online.model, online.mixture)


def no_triples_message(args: argparse.Namespace, malformed: str = "") -> str:
    """Why nothing could be fitted: no stream had 3 symbols (and what was skipped, if anything)."""
    text = "no triple counted: every stream needs 3 symbols or more"
    return f"{text}; {malformed}" if malformed else text


def fit_and_save_hmm(args, acc, log: logging.Logger, final: bool = True) -> int:
    """``learn --states K``: fit an :class:`~streamspec.HMMEstimator` on the counts, save ``MODEL.hmm``.

    Over counts of windows (``--window``) K may exceed the alphabet (the estimator's
    ``window="auto"``). Cost: the top-K SVD of the sparse P31 plus O(nnz · K²) per EM
    iteration (50 at most) for nnz distinct triples, O(nnz · L · K²) for grams of window
    L (300 at most); nothing depends on the length of the files.
    """
    from streamspec.core.hmm_estimator import HMMEstimator

    t0 = time.perf_counter()
    try:
        est = HMMEstimator(n_states=args.states, random_state=0)
        with step(f"fitting a {args.states}-state HMM ({acc.n:,} symbols)",
                  final and show_progress(args)):
            hmm = est.fit(acc)
    except (ValueError, np.linalg.LinAlgError, MemoryError) as exc:
        if not final:
            log.warning("event=save-skipped reason=%r", f"HMM: {exc}")
            return 1
        raise CommandError(f"cannot fit a {args.states}-state HMM: {exc}") from None
    log.info("event=fitted-hmm states=%d symbols=%d window=%d seconds=%.2f iterations=%d "
             "%s_loglik=%.6g", hmm.n_states, hmm.n_symbols, est.window_, time.perf_counter() - t0,
             est.n_iter_, "triple" if est.window_ == 1 else "gram", est.log_likelihood_history_[-1])
    if args.out:
        path = hmm_path(args.out)
        hmm.save(path)
        log.info("event=saved hmm=%s", path)
    return 0
