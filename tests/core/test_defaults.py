"""The shared defaults and settings checks: one source, checked at construction, and good.

The quality tests fit with every default and would fail if the default rank fell
back to a small fixed one (the old k = 2).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from window_data import real_file

from connectors.config import DaemonConfig
from streamspec import HMM, MEstimator, MomentAccumulator, Refitter, SpectralEstimator, SpectralHMM
from streamspec.core import defaults

# ---------------------------------------------------------------------- one source


def test_every_component_takes_its_defaults_from_the_defaults_module():
    m, s, online, r = MEstimator(), SpectralEstimator(), SpectralHMM(), Refitter(MEstimator())
    assert m.rank == s.rank == online.rank == defaults.RANK
    assert m.weighting == defaults.WEIGHTING and m.max_sweeps == defaults.MAX_SWEEPS
    assert online.sweeps == r.sweeps == DaemonConfig(topic="t").warm_sweeps == defaults.WARM_SWEEPS
    assert m._max_outer(projected=True) == defaults.MAX_OUTER_PROJECTED
    assert m._max_outer(projected=False) == defaults.MAX_OUTER_DENSE


# ---------------------------------------------------------------------- checked when built


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: SpectralHMM(rank=0), "rank must be a positive integer or 'auto'; got 0"),
        (lambda: SpectralHMM(rank="big"), "rank must be"),
        (lambda: SpectralHMM(window=-1), "window"),
        (lambda: SpectralHMM(sweeps=0), "sweeps must be a positive integer"),
        (lambda: SpectralHMM(forgetting=1.5), "forgetting must be a number in \\(0, 1\\]"),
        (lambda: SpectralHMM(estimator="em"), "estimator must be"),
        (lambda: SpectralHMM(predictor="window"), "predictor must be one of"),
        (lambda: DaemonConfig(topic="t", weighting="bogus"), "weighting must be one of 'identity'"),
        (lambda: DaemonConfig(topic="t", rank=0), "rank must be"),
        (lambda: DaemonConfig(topic="t", penalty=-0.5), "penalty must be a finite number >= 0"),
        (lambda: DaemonConfig(topic="t", sweeps=0), "sweeps must be a positive integer"),
        (lambda: DaemonConfig(topic="t", outer=0), "outer must be a positive integer"),
        (lambda: DaemonConfig(topic="t", formulation="sparse"), "formulation must be one of"),
    ],
)
def test_bad_settings_are_refused_when_built(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_a_toml_with_a_bogus_weighting_fails_when_the_config_is_built(tmp_path: Path):
    from connectors.config import load_toml

    path = tmp_path / "daemon.toml"
    path.write_text('topic = "clicks"\nweighting = "bogus"\n')
    with pytest.raises(ValueError, match="weighting must be one of .*got 'bogus'"):
        DaemonConfig.from_mapping(load_toml(path))
    path.write_text('topic = "clicks"\nweighting = "diagonal"\n')
    assert DaemonConfig.from_mapping(load_toml(path)).weighting == "diagonal"


class _Settable:
    """An estimator-like object whose settings can be anything (no checks of its own)."""

    def __init__(self, rank=2, weighting="per_symbol"):
        self.rank, self.weighting = rank, weighting

    def fit(self, data):  # pragma: no cover - never reached: the Refitter refuses it
        raise AssertionError("not fitted")


@pytest.mark.parametrize("settings, message", [(dict(rank=0), "rank"),
                                               (dict(weighting="bogus"), "weighting")])
def test_refitter_refuses_an_estimator_with_a_bad_setting(settings, message):
    with pytest.raises(ValueError, match=message):
        Refitter(_Settable(**settings))
    Refitter(_Settable())  # the same object with good settings is accepted


# ---------------------------------------------------------------------- failed refits


class _FailsAfter:
    """A SpectralEstimator that raises once the counts hold ``fail_at`` triples."""

    def __init__(self, rank=2, fail_at=80, window=2, min_proba=1e-3, filter="window"):
        self.rank, self.fail_at, self.window, self.min_proba, self.filter = (
            rank, fail_at, window, min_proba, filter)

    def fit(self, data):
        if data.n_triples >= self.fail_at:
            raise np.linalg.LinAlgError("SVD did not converge")
        return SpectralEstimator(rank=self.rank, min_proba=self.min_proba).fit(data)


def test_a_failed_refit_returns_false_is_counted_and_logged(caplog):
    est = _FailsAfter(fail_at=80)
    model = SpectralHMM(rank=2, estimator=est, refit_every=None)
    for t in range(60):
        model.learn_one({}, "abcab"[t % 5])
    assert model.refit() is True and model.n_failures == 0
    first = model.model
    for t in range(30):
        model.learn_one({}, "abcab"[t % 5])
    with caplog.at_level(logging.WARNING, logger="streamspec.refit"):
        assert model.refit() is False
    assert model.n_failures == 1 and model.refitter.n_failures == 1
    assert model.last_error == "LinAlgError: SVD did not converge"
    assert model.model is first  # nothing already learned is lost
    warnings = [r for r in caplog.records if r.name == "streamspec.refit"]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    assert "SVD did not converge" in warnings[0].getMessage() and warnings[0].exc_info


def test_refit_returns_false_when_there_is_nothing_to_fit():
    model = SpectralHMM(rank=2, refit_every=None)
    model.learn_one({}, "a")
    assert model.refit() is False and model.n_failures == 0


# ---------------------------------------------------------------------- the fitted rank


def test_the_model_carries_the_rank_used_also_with_auto(tmp_path: Path):
    hmm = HMM.random(n_states=8, n_symbols=30, random_state=0, concentration=0.1)
    acc = MomentAccumulator(n_symbols=30)
    acc.learn_many(hmm.sample(100_000, random_state=1))
    for est in (MEstimator(), SpectralEstimator(), MEstimator(rank=2, weighting="exact")):
        model = est.fit(acc)
        assert type(model.rank) is int and model.rank == est.rank_
        assert model.with_filter("recursive").rank == model.rank
        model.save(tmp_path / "m.ckpt")
        loaded = type(model).load(tmp_path / "m.ckpt")
        assert type(loaded.rank) is int and loaded.rank == model.rank
    assert MEstimator(rank=2, weighting="exact").fit(acc).rank == 2  # dense: B is n × n, rank 2
    assert 2 < MEstimator().fit(acc).rank < 30  # auto on an 8-state HMM (6): neither 2 nor n


# ---------------------------------------------------------------------- defaults predict well


def _split(seq, frac=0.9):
    cut = int(frac * len(seq))
    return seq[:cut], seq[cut:]


def _unigram(train, test, n) -> float:
    p = np.bincount(train, minlength=n) + 0.5
    return float(-np.log((p / p.sum())[test]).mean())


def test_the_default_fit_beats_the_unigram_and_rank_2_on_a_sparse_hmm():
    # measured: unigram 2.78, rank 2 2.44, default (rank "auto" = 6) 2.38, true rank 8 2.38
    hmm = HMM.random(n_states=8, n_symbols=30, random_state=0, concentration=0.1)
    train, test = _split(hmm.sample(100_000, random_state=1))
    acc = MomentAccumulator(n_symbols=30)
    acc.learn_many(train)
    default = MEstimator().fit(acc).log_loss([test])
    assert default < _unigram(train, test, 30) - 0.3
    # the rank shows in the model alone (in the mixture the trigram and the HMM carry it)
    plain = MEstimator(backoff=None).fit(acc).log_loss([test])
    assert plain < MEstimator(rank=2, backoff=None).fit(acc).log_loss([test]) - 0.03
    assert default < plain


def test_the_default_fit_predicts_alice_clearly_better_than_the_unigram():
    # measured: unigram 3.17, rank 2 2.41, default 2.27 nats per character; after "Alic",
    # rank 2 gives "e" 0.31, the default 0.74
    chars = list(real_file("alice", "11-0.txt").read_text(encoding="utf-8"))
    train, test = _split(chars)
    acc = MomentAccumulator()
    acc.learn_many(train)
    index = {s: i for i, s in enumerate(acc.symbols)}
    tr = np.array([index[c] for c in train])
    te = np.array([index[c] for c in test if c in index])
    model = MEstimator().fit(acc)
    assert model.log_loss([te]) < _unigram(tr, te, acc.n) - 0.8
    # the rank matters for the model alone (the mixture with the trigram hides it)
    plain = MEstimator(backoff=None)
    assert plain.fit(acc).log_loss([te]) < MEstimator(rank=2, backoff=None).fit(acc).log_loss([te]) - 0.08
    p = model.predict_proba_next([index[c] for c in "Alic"])
    assert acc.symbols[int(p.argmax())] == "e" and p.max() > 0.5


def test_long_fits_log_one_progress_line_per_outer_iteration(monkeypatch, caplog):
    import streamspec.core.progress as progress_module

    acc = MomentAccumulator(n_symbols=6)
    acc.learn_many(HMM.random(3, 6, random_state=0).sample(5000, random_state=1))
    with caplog.at_level(logging.INFO, logger="streamspec.fit"):
        MEstimator(rank=2, backoff=None).fit(acc)  # quick: nothing at INFO
    assert not [r for r in caplog.records if r.name == "streamspec.fit"]
    monkeypatch.setattr(progress_module, "PROGRESS_AFTER", 0.0)  # every fit counts as long
    with caplog.at_level(logging.INFO, logger="streamspec.fit"):
        MEstimator(rank=2, backoff=None, max_outer=2).fit(acc)
    lines = [r.getMessage() for r in caplog.records if r.name == "streamspec.fit"]
    assert len(lines) == 2 and "outer=1/2" in lines[0] and "outer=2/2" in lines[1]
    assert all("loss=" in line and "seconds=" in line for line in lines)
