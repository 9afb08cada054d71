"""Tests of streamspec.adapters.river_model: river conventions, predictions, keyed streams, threads."""

from __future__ import annotations

import math
import pickle
import threading
from collections import Counter

import numpy as np
import pytest
from river import checks, compose, evaluate, metrics

from streamspec import HMM, MEstimator, SpectralEstimator, SpectralHMM

LETTERS = "abcdefgh"


@pytest.fixture(scope="module")
def hmm_letters() -> list[str]:
    hmm = HMM.random(n_states=3, n_symbols=8, random_state=3, concentration=0.3)
    return [LETTERS[i] for i in hmm.sample(20_000, random_state=4)]


def sessions(n_sessions: int, length: int, seed: int = 0) -> list[tuple[dict, str]]:
    """Interleaved sessions, each a noisy cycle a→b→c→d→a with its own phase."""
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, 4, size=n_sessions)
    out = []
    for _ in range(length):
        s = int(rng.integers(n_sessions))
        pos[s] = (pos[s] + 1) % 4 if rng.random() < 0.9 else rng.integers(4)
        out.append(({"session": f"s{s}", "noise": float(rng.random())}, "abcd"[pos[s]]))
    return out


def assert_distribution(p: dict) -> None:
    assert p, "empty distribution"
    assert all(0.0 <= v <= 1.0 for v in p.values())
    assert math.isclose(sum(p.values()), 1.0, rel_tol=0, abs_tol=1e-9)


# ---------------------------------------------------------------------- river conventions


@pytest.mark.parametrize(
    "params",
    [*SpectralHMM._unit_test_params(), {"rank": 2, "refit_every": 50, "background": True}],
    ids=["defaults", "spectral-refits", "auto-rank-refits", "m-refits", "hmm-states", "count-window",
         "background"],
)
def test_check_estimator(params):
    checks.check_estimator(SpectralHMM(**params))


def test_fits_happen_during_the_checks_datasets():
    """The refit_every=50 configuration really exercises fitted models in check_estimator."""
    from river import datasets

    for estimator in ("spectral", "m"):
        model = SpectralHMM(rank=2, refit_every=50, estimator=estimator)
        for x, y in datasets.ImageSegments().take(200):
            assert_distribution(model.predict_proba_one(x) or {"": 1.0})
            model.learn_one(x, y)
        assert model.refitter.n_fits == 4 and model.refitter.last_error is None
        if estimator == "m":
            assert [r.warm for r in model.refitter.records] == [False, True, True, True]


def test_clone_and_params():
    model = SpectralHMM(rank=5, window=1, key="session", refit_every=123)
    for x, y in sessions(3, 300):
        model.learn_one(x, y)
    params = model._get_params()
    assert params["rank"] == 5 and params["key"] == "session" and params["refit_every"] == 123
    clone = model.clone()
    assert clone._get_params() == params
    assert clone.symbols == [] and clone.predict_proba_one({"session": "s0"}) == {}
    assert model.refitter.n_fits == 2 and clone.refitter.n_fits == 0
    assert model.clone({"window": 2}).window == 2
    assert repr(clone) == repr(model.clone())


def test_pipeline_matches_the_bare_model():
    data = sessions(4, 2_000, seed=1)
    bare = SpectralHMM(rank=4, refit_every=500, key="session")
    pipe = compose.Select("session") | SpectralHMM(rank=4, refit_every=500, key="session")
    for x, y in data:
        assert pipe.predict_one(x) == bare.predict_one(x)
        assert pipe.predict_proba_one(x) == pytest.approx(bare.predict_proba_one(x), abs=0)
        pipe.learn_one(x, y)
        bare.learn_one(x, y)
    assert pipe["SpectralHMM"].refitter.n_fits == 4


def test_progressive_val_score_beats_the_unigram():
    data = sessions(20, 6_000, seed=2)
    scores = {}
    for name, model in [
        ("hmm", SpectralHMM(rank=4, refit_every=1_000, key="session")),
        ("unigram", SpectralHMM(rank=4, refit_every=None, key="session")),
    ]:
        metric = metrics.Accuracy() + metrics.CrossEntropy()
        evaluate.progressive_val_score(data, model, metric)
        acc, ce = metric
        assert math.isfinite(ce.get())
        scores[name] = (acc.get(), ce.get())
    # the cycles are 90% deterministic given the last symbol: far above the unigram (~25%)
    assert scores["hmm"][0] > 0.75 > 0.35 > scores["unigram"][0]
    assert scores["hmm"][1] < scores["unigram"][1] - 0.5


def test_log_loss_metric_on_a_binary_stream():
    rng = np.random.default_rng(0)
    data = [({}, bool(t % 3 == 0) ^ bool(rng.random() < 0.05)) for t in range(3_000)]
    metric = metrics.LogLoss()
    evaluate.progressive_val_score(data, SpectralHMM(rank=2, refit_every=500), metric)
    assert metric.get() < 0.45  # coin: 0.64; knowing the phase: ~0.2


# ---------------------------------------------------------------------- predictions


def test_predictions_before_a_fit_are_symbol_frequencies():
    model = SpectralHMM(refit_every=1_000)
    assert model.predict_proba_one({}) == {} and model.predict_one({}) is None
    for y in "abbcbb":
        model.learn_one({}, y)
    assert model.model is None
    assert model.predict_proba_one({}) == pytest.approx({"a": 1 / 6, "b": 4 / 6, "c": 1 / 6})
    assert model.predict_one({}) == "b"


def test_online_predictions_are_the_models_online_predictor(hmm_letters):
    """A stream started after a fit is predicted as the model reads a sequence: same contexts,
    same HMM filter, same weights learning from the same symbols."""
    model = SpectralHMM(rank=3, refit_every=None, key="k", min_proba=1e-4)
    for t, y in enumerate(hmm_letters[:12_000]):
        model.learn_one({"k": t % 3}, y)
    model.refit()
    oom = model.model
    index = {s: i for i, s in enumerate(oom.symbols)}
    fresh = hmm_letters[12_000:12_200]
    for t, y in enumerate(fresh):
        p = model.predict_proba_one({"k": "fresh"})
        expected = oom.predict_proba_next(np.array([index[s] for s in fresh[:t]], dtype=np.int64))
        np.testing.assert_allclose([p[s] for s in oom.symbols], expected, rtol=0, atol=1e-12)
        assert model.predict_one({"k": "fresh"}) == oom.symbols[int(np.argmax(expected))]
        model.learn_one({"k": "fresh"}, y)
    walk = oom.walk(np.array([index[s] for s in fresh], dtype=np.int64))
    assert model.online.log_loss == pytest.approx(-np.log(walk.probs).mean(), rel=1e-12)


def test_unseen_symbols_get_the_floor():
    model = SpectralHMM(rank=3, refit_every=None, min_proba=1e-3)
    for y in "abc" * 100:
        model.learn_one({}, y)
    model.refit()
    model.learn_one({}, "z")  # unknown to the fitted model
    p = model.predict_proba_one({})
    assert_distribution(p)
    assert set(p) == {"a", "b", "c", "z"} and p["z"] == pytest.approx(1e-3 / (1 + 1e-3))
    model.learn_one({}, "a")  # context (z, a): the model falls back to what it knows
    p = model.predict_proba_one({})
    assert_distribution(p)
    assert max(p, key=p.get) == "b"
    model.refit()
    assert model.model.n_symbols == 4


def test_predict_one_is_the_argmax_of_predict_proba_one(hmm_letters):
    model = SpectralHMM(rank=4, refit_every=2_000, key="k")
    for t, y in enumerate(hmm_letters[:8_000]):
        x = {"k": t % 5}
        p = model.predict_proba_one(x)
        if p:
            assert p[model.predict_one(x)] == max(p.values())
        model.learn_one(x, y)


def test_end_stream_restarts_the_context():
    model = SpectralHMM(rank=3, refit_every=300, key="k")
    for t in range(300):
        model.learn_one({"k": "x"}, "abc"[t % 3])
    assert model.predict_one({"k": "x"}) == "a"
    model.end_stream("x")
    assert model.predict_proba_one({"k": "x"}) == model.predict_proba_one({"k": "never"})


def test_pickle_roundtrip_continues_identically(hmm_letters):
    model = SpectralHMM(rank=3, refit_every=1_000, key="k")
    for t, y in enumerate(hmm_letters[:2_500]):
        model.learn_one({"k": t % 2}, y)
    copy_ = pickle.loads(pickle.dumps(model))
    for t, y in enumerate(hmm_letters[2_500:5_000]):
        x = {"k": t % 2}
        assert copy_.predict_proba_one(x) == model.predict_proba_one(x)
        model.learn_one(x, y)
        copy_.learn_one(x, y)
    assert copy_.refitter.n_fits == model.refitter.n_fits == 5


def test_invalid_window_and_estimator():
    with pytest.raises(ValueError, match="window"):
        SpectralHMM(window=-1).learn_one({}, "a")
    with pytest.raises(ValueError, match="estimator"):
        SpectralHMM(estimator="em").learn_one({}, "a")


def test_estimator_object_template():
    template = MEstimator(rank=2, weighting="identity")
    model = SpectralHMM(estimator=template, refit_every=200, window=1)
    for t in range(600):
        model.learn_one({}, "abc"[t % 3])
    assert model.refitter.n_fits == 3 and not hasattr(template, "factors_")
    assert model.model.window == 1 and template.window == "auto"  # a copy's window is set
    assert model.predict_one({}) == "a"


# ---------------------------------------------------------------------- keyed streams


def test_streams_share_the_model_and_the_weights_but_not_their_states(hmm_letters):
    a_part, b_part = hmm_letters[:3_000], hmm_letters[3_000:6_000]
    one = SpectralHMM(rank=3, refit_every=None, key="s", n_states=3)
    two = SpectralHMM(rank=3, refit_every=None, key="s", n_states=3)
    for m in (one, two):
        for ya, yb in zip(a_part, b_part, strict=True):
            m.learn_one({"s": "A"}, ya)
            m.learn_one({"s": "B"}, yb)
        m.refit()
        m.learn_one({"s": "A"}, a_part[0])
    for y in "hhgghh" * 50:  # stream B goes on in `two` only
        two.learn_one({"s": "B"}, y)
    assert one.predict_state_one({"s": "A"}) == two.predict_state_one({"s": "A"})
    assert one.predict_state_one({"s": "B"}) != two.predict_state_one({"s": "B"})
    # B's symbols reached A's predictions through the shared weights only
    w1, w2 = one.online.mixture.log_weights(), two.online.mixture.log_weights()
    assert not np.allclose(w1, w2)
    assert one.online.n_scored + 300 == two.online.n_scored


# ---------------------------------------------------------------------- threads


def label_triples(model: SpectralHMM) -> Counter:
    """Triple counts keyed by labels, so that alphabets in different orders compare."""
    c3 = model.accumulator.counts()
    labels = model.accumulator.symbols
    return Counter(
        {
            (labels[j], labels[x], labels[i]): c3[x, i, j]
            for x, i, j in zip(*np.nonzero(c3), strict=True)
        }
    )


def test_background_mode_under_concurrent_threads(hmm_letters):
    n_threads, per_thread = 4, 3_000
    streams = {
        f"t{k}": hmm_letters[k * per_thread : (k + 1) * per_thread] for k in range(n_threads)
    }
    # no backoff: its held-out split is seeded over symbol indices, and the two models number
    # their labels in different (thread) orders, so their mixing weights may differ slightly
    # basis_tol=0: every refit is the cold fit (docs/math.md section 10), so that two models
    # refitted at different moments agree once refitted on the same counts
    plain = SpectralEstimator(rank=3, backoff=None, basis_tol=0.0)
    model = SpectralHMM(rank=3, estimator=plain, refit_every=500, background=True, key="s",
                        count_window=1)
    errors: list[BaseException] = []
    bad: list[dict] = []
    start = threading.Barrier(n_threads + 1)

    def learner(key: str, seq: list[str]) -> None:
        try:
            start.wait()
            other = {"s": f"t{(int(key[1:]) + 1) % n_threads}"}
            for y in seq:
                x = {"s": key}
                p = model.predict_proba_one(x)
                if p and not (
                    math.isclose(sum(p.values()), 1.0, abs_tol=1e-9)
                    and all(0 <= v <= 1 for v in p.values())
                ):
                    bad.append(p)
                model.predict_one(x)
                model.predict_proba_one(other)  # read another thread's stream
                model.learn_one(x, y)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=learner, args=item) for item in streams.items()]
    for t in threads:
        t.start()
    start.wait()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert model.refitter.wait(60)
    assert errors == [] and bad == []
    assert model.refitter.n_fits >= 1 and model.refitter.last_error is None

    inline = SpectralHMM(rank=3, estimator=plain, refit_every=500, key="s", count_window=1)
    for key, seq in streams.items():
        for y in seq:
            inline.learn_one({"s": key}, y)
    assert model.accumulator.n_triples == inline.accumulator.n_triples == 4 * (per_thread - 2)
    assert label_triples(model) == label_triples(inline)
    # the per-stream contexts agree too: after a refit on the same counts, same predictions
    model.refit()
    inline.refit()
    for key in streams:
        p, q = model.predict_proba_one({"s": key}), inline.predict_proba_one({"s": key})
        assert p == pytest.approx(q, abs=1e-9)


# ---------------------------------------------------------------------- options


def test_refit_interval_triggers_fits(fake_refitter_time):
    fake = fake_refitter_time
    model = SpectralHMM(rank=2, refit_every=None, refit_interval=60.0)
    for t in range(1_000):
        model.learn_one({}, "abc"[t % 3])
    assert model.refitter.n_fits == 0  # no time has passed
    fake.now = 61.0
    for t in range(300):  # the clock is looked at every 256 symbols
        model.learn_one({}, "abc"[t % 3])
    assert model.refitter.n_fits == 1
    assert 1_000 < model.refitter.fitted_on_symbols <= 1_256


def test_forgetting_follows_a_changed_stream():
    model = SpectralHMM(rank=2, refit_every=500, forgetting=0.99)
    for t in range(3_000):
        model.learn_one({}, "ab"[t % 2])  # a b a b ...
    for t in range(3_000):
        model.learn_one({}, "aab"[t % 3])  # then a a b a a b ...
    assert model.refitter.n_fits == 12
    # with a memory of ~100 triples, only the new pattern is left: after "b" comes "a"
    assert model.predict_one({}) == "a"
    model.learn_one({}, "a")
    assert model.predict_one({}) == "a"  # "b a" -> "a"
    model.learn_one({}, "a")
    assert model.predict_one({}) == "b"  # "a a" -> "b"


# ---------------------------------------------------------------------- hidden states (n_states)


def sticky_hmm() -> HMM:
    """Two sticky states with disjoint emissions: state 0 emits a/b, state 1 emits c/d."""
    return HMM(T=[[0.95, 0.05], [0.05, 0.95]],
               O=[[0.6, 0.0], [0.4, 0.0], [0.0, 0.3], [0.0, 0.7]])


def test_predicted_states_track_the_true_states():
    from streamspec import HiddenMarkovModel

    truth = HiddenMarkovModel.from_hmm(sticky_hmm(), symbols=list("abcd"))
    symbols, states = truth.sample(6_000, random_state=1)
    model = SpectralHMM(rank=2, refit_every=1_000, n_states=2, key="s")
    assert model.predict_state_one({}) == {}
    for y in symbols[:3_000]:
        model.learn_one({}, y)
    assert model.hmm is not None and model.hmm.n_states == 2
    predicted = []
    for y in symbols[3_000:]:
        model.learn_one({}, y)
        post = model.predict_state_one({})
        assert sorted(post) == [0, 1] and math.isclose(sum(post.values()), 1.0, abs_tol=1e-9)
        predicted.append(max(post, key=post.get))
    predicted, true = np.array(predicted), states[3_000:]
    agreement = max((predicted == true).mean(), (predicted == 1 - true).mean())
    assert agreement >= 0.9
    # a stream started after the last refit: its state is the HMM's own filter
    model.refit()
    fits = model.refitter.n_fits
    fresh = symbols[:50]
    for y in fresh:
        model.learn_one({"s": "fresh"}, y)
    assert model.refitter.n_fits == fits
    got = model.predict_state_one({"s": "fresh"})
    assert [got[0], got[1]] == pytest.approx(model.hmm.filter(fresh)[-1].tolist(), abs=1e-9)


def test_hmm_predictor_gives_valid_distributions():
    from streamspec import HiddenMarkovModel

    truth = HiddenMarkovModel.from_hmm(sticky_hmm(), symbols=list("abcd"))
    symbols, _ = truth.sample(3_000, random_state=2)
    model = SpectralHMM(rank=2, refit_every=500, n_states=2, predictor="hmm", key="k")
    for t, y in enumerate(symbols):
        model.learn_one({"k": t % 3}, y)
        if t % 97 == 0:
            p = model.predict_proba_one({"k": t % 3})
            assert_distribution(p)
            assert model.predict_one({"k": t % 3}) == max(p, key=p.get)
    assert model.hmm is not None
    p = model.predict_proba_one({"k": 0})
    assert sorted(p) == list("abcd")
    # after a long run in state 0 (a/b), the next symbol is most likely a or b
    for y in "abababab":
        model.learn_one({"k": 9}, y)
    p = model.predict_proba_one({"k": 9})
    assert p["a"] + p["b"] > 0.8
    # a label the HMM has not seen gets the floor; the distribution stays valid
    model.learn_one({"k": 9}, "z")
    p = model.predict_proba_one({"k": 9})
    assert_distribution(p)
    assert p["z"] < 0.01
    assert sorted(model.predict_state_one({"k": 9})) == [0, 1]


def test_state_vectors_are_per_stream():
    from streamspec import HiddenMarkovModel

    truth = HiddenMarkovModel.from_hmm(sticky_hmm(), symbols=list("abcd"))
    symbols, _ = truth.sample(2_000, random_state=3)
    model = SpectralHMM(rank=2, refit_every=500, n_states=2, key="user")
    for y in symbols:
        model.learn_one({"user": "train"}, y)
    for y in "ababbaab":
        model.learn_one({"user": "u1"}, y)
    for y in "cdcddcdc":
        model.learn_one({"user": "u2"}, y)
    s1, s2 = model.predict_state_one({"user": "u1"}), model.predict_state_one({"user": "u2"})
    h1, h2 = max(s1, key=s1.get), max(s2, key=s2.get)
    assert h1 != h2 and s1[h1] > 0.9 and s2[h2] > 0.9
    before = dict(s1)
    model.learn_one({"user": "u2"}, "d")  # another stream's symbol leaves u1's state alone
    assert model.predict_state_one({"user": "u1"}) == before
    model.end_stream("u1")  # a forgotten stream restarts from the start distribution
    assert model.predict_state_one({"user": "u1"}) == pytest.approx(
        dict(enumerate(model.hmm.startprob_.tolist())))
    clone = pickle.loads(pickle.dumps(model))
    assert clone.predict_state_one({"user": "u2"}) == model.predict_state_one({"user": "u2"})


def test_invalid_hmm_settings():
    with pytest.raises(ValueError, match="predictor"):
        SpectralHMM(n_states=2, predictor="viterbi").learn_one({}, "a")
    with pytest.raises(ValueError, match="n_states"):
        SpectralHMM(n_states=0).learn_one({}, "a")
    assert SpectralHMM().predict_state_one({}) == {}


def test_more_states_than_symbols_are_clamped_to_the_alphabet():
    model = SpectralHMM(rank=2, refit_every=30, n_states=3, predictor="hmm", count_window=1)
    for t in range(90):
        model.learn_one({}, "ab"[t % 2])
    assert model.refitter.n_fits >= 1 and model.hmm.n_states == 2
    assert sorted(model.predict_state_one({})) == [0, 1]
    assert_distribution(model.predict_proba_one({}))


def test_predict_one_without_the_whole_row_is_still_the_argmax(monkeypatch):
    """Large alphabets: the argmax comes from candidates and a bound (no O(n) row); it must
    equal the whole row's argmax, which this test computes for every prediction."""
    import streamspec.streaming.online_predictor as op

    # the pruned path on 400 symbols (by default only from PRUNE_RATIO · K · TOP symbols on)
    monkeypatch.setattr(op, "PRUNE_RATIO", 0)
    decided = []  # the pruned path's answers that were not None (it decided, no whole row)
    real = op._pruned_argmax

    def spy(*args):
        best = real(*args)
        decided.append(best is not None)
        return best

    monkeypatch.setattr(op, "_pruned_argmax", spy)
    rng = np.random.default_rng(5)
    n = 400
    zipf = 1 / np.arange(1, n + 1) ** 1.1
    zipf /= zipf.sum()
    perms = [rng.permutation(n) for _ in range(4)]
    model = SpectralHMM(key="k", refit_every=None, estimator=SpectralEstimator(rank=1))
    data = []
    for _ in range(30_000):
        k = int(rng.integers(50))
        data.append(({"k": k}, f"w{perms[k % 4][rng.choice(n, p=zipf)]}"))
    for x, y in data[:20_000]:
        model.learn_one(x, y)
    model.refit()
    assert not model.model.backoff.use_model
    pruned = 0
    for x, y in data[20_000:22_000]:
        if len(model.symbols) == model.model.n_symbols:
            key = x["k"]
            with model._lock:
                model._sync()  # the refitted model, as every call of the learner does
                row = model.online.row(key)
                got = model.online.argmax(key)
            assert got == (int(row.argmax()), pytest.approx(row.max(), rel=1e-12))
            pruned += 1
        model.learn_one(x, y)
    assert pruned > 1000
    assert sum(decided) > len(decided) // 2  # most argmaxes were decided by the bound alone


# ---------------------------------------------------------------------- background schedule


def test_background_fits_start_when_due_and_are_waited_for(hmm_letters):
    """The schedule by symbols: no background fit before it is due; each one starts at its
    due symbol, on the counts of exactly the symbols learned, and the learner waits for it,
    so its model is in use from the next symbol on, as inline's (none starts early)."""
    model = SpectralHMM(rank=2, refit_every=100, background=True)
    for y in hmm_letters[:99]:
        model.learn_one({}, y)
    assert model.refitter.n_fits == 0 and not model.refitter.busy  # no fit before it is due
    counts = Counter(hmm_letters[:99])
    assert model.predict_proba_one({}) == pytest.approx({k: c / 99 for k, c in counts.items()})
    model.learn_one({}, hmm_letters[99])
    # the first fit: on the counts of exactly 100 symbols, as inline, waited for at once
    assert model.refitter.n_fits == 1 and model.refitter.fitted_on_symbols == 100
    assert not model.refitter.busy
    first = model.predict_proba_one({})
    assert model.online.model is model.refitter.model
    for y in hmm_letters[100:199]:
        model.learn_one({}, y)
    assert model.refitter.n_fits == 1 and not model.refitter.busy  # nothing started early
    model.learn_one({}, hmm_letters[199])
    # the second fit: on the counts of all 200 symbols, finished before the next symbol
    assert model.refitter.n_fits == 2 and model.refitter.fitted_on_symbols == 200
    assert not model.refitter.busy
    assert model.predict_proba_one({}) != first
    assert model.online.model is model.refitter.model
    assert [r.n_seen for r in model.refitter.records] == [100, 200]


@pytest.mark.parametrize("estimator", ["spectral", "m"])
def test_background_schedule_predicts_as_inline_on_keyed_streams(estimator):
    """The schedule: each background fit runs on the counts of its due symbol from the model
    inline refits from and is waited for, so on a stream with four refits every prediction,
    each refit's model (its trigram), the fits' symbols, paths and ranks, the sizes the
    first fit chose (rank, HMM states) and the prequential log loss are inline's (issue 21:
    background accuracy ≥ inline; here equal). A wrong start (the background fit's own
    model) or a fit on older counts changes the log loss beyond the tolerance here."""
    every = 700
    data = sessions(150, 4 * every + 50, seed=11)

    def make(**kw):
        return SpectralHMM(key="session", refit_every=every, estimator=estimator, **kw)

    inline, bg = make(), make(background=True)
    for t, (x, y) in enumerate(data):
        assert bg.predict_one(x) == inline.predict_one(x), t
        p_inline, p_bg = inline.predict_proba_one(x), bg.predict_proba_one(x)
        assert p_bg == pytest.approx(p_inline, rel=1e-12, abs=1e-15), t
        inline.learn_one(x, y)
        bg.learn_one(x, y)
        if (t + 1) % every == 0:  # a refit, fitted apart in each learner: the same counts
            a, b = bg.refitter.model, inline.refitter.model
            assert a is not None and a is not b and a.n_symbols == b.n_symbols
            u, v = np.meshgrid(np.arange(-1, a.n_symbols), np.arange(-1, a.n_symbols))
            np.testing.assert_allclose(a.backoff.trigram.predict_many(u.ravel(), v.ravel()),
                                       b.backoff.trigram.predict_many(u.ravel(), v.ravel()),
                                       rtol=1e-13, atol=1e-15)
    bg.refitter.close()
    got = [(r.n_seen, r.path, r.rank) for r in bg.refitter.records]
    assert got == [(r.n_seen, r.path, r.rank) for r in inline.refitter.records]
    assert [g[0] for g in got] == [every * i for i in range(1, 5)]
    assert bg.hmm.n_states == inline.hmm.n_states
    assert bg.online.log_loss == pytest.approx(inline.online.log_loss, rel=1e-12)


def swap_points(model: SpectralHMM, seq: list[str]) -> tuple[list[int], list]:
    """The symbols after which the model in use changed, and every prediction."""
    points, preds, last = [], [], None
    for t, y in enumerate(seq):
        preds.append(model.predict_one({}))
        model.learn_one({}, y)
        if model.online.model is not last:
            points.append(t + 1)
            last = model.online.model
    model.refitter.close()
    return points, preds


def test_background_models_change_at_the_inline_symbols_and_predictions_repeat(hmm_letters):
    seq = hmm_letters[:1_500]

    def make(**kw):
        return SpectralHMM(rank=3, refit_every=300, **kw)

    inline_points, _ = swap_points(make(), seq)
    bg_points, bg_preds = swap_points(make(background=True), seq)
    again_points, again_preds = swap_points(make(background=True), seq)
    # the model changes while learning the symbol after each fit's due point, in both modes
    assert inline_points == bg_points == [301, 601, 901, 1201]
    assert again_points == bg_points and again_preds == bg_preds  # the clock plays no part


@pytest.mark.parametrize("few", [False, True], ids=["defaults", "few-candidates"])
def test_predict_one_with_the_models_own_part_is_still_the_argmax(few, monkeypatch):
    """The default estimator mixes the model's own rows too: their top symbols join the
    candidates, their cut-off joins the bound; the argmax must still be the whole row's
    (also with one candidate per part, where the bound decides most predictions)."""
    import streamspec.streaming.online_predictor as op

    # the pruned path on 300 symbols (by default the whole row is taken below
    # PRUNE_RATIO · K · TOP symbols, where it is cheaper): the path under test here
    monkeypatch.setattr(op, "PRUNE_RATIO", 0)
    if few:
        monkeypatch.setattr(op, "TOP", 1)
        monkeypatch.setattr(op, "OWN_CUT", 1.0)
    rng = np.random.default_rng(6)
    n = 300
    zipf = 1 / np.arange(1, n + 1) ** 1.1
    zipf /= zipf.sum()
    perms = [rng.permutation(n) for _ in range(4)]
    model = SpectralHMM(key="k", refit_every=None)
    pruned = []
    real = op._pruned_argmax
    monkeypatch.setattr(op, "_pruned_argmax", lambda *a: pruned.append(real(*a)) or pruned[-1])
    data = []
    for _ in range(24_000):
        k = int(rng.integers(60))
        data.append(({"k": k}, f"w{perms[(k + len(data) // 3_000) % 4][rng.choice(n, p=zipf)]}"))
    for x, y in data[:20_000]:
        model.learn_one(x, y)
    model.refit()
    assert model.model.backoff.use_model and model.model.n_symbols > 128
    model.predict_one(data[20_000][0])  # the refitted model in use
    if few:  # the learned weights favour the HMM; make the model's own part matter
        monkeypatch.setattr(model.online.mixture, "blend", lambda b: np.array([0.6, 0.15, 0.25]))
    checked = 0
    for x, y in data[20_000:22_000]:
        if len(model.symbols) == model.model.n_symbols:
            key = x["k"]
            with model._lock:
                model._sync()
                row = model.online.row(key)
                got = model.online.argmax(key)
            assert got == (int(row.argmax()), pytest.approx(row.max(), rel=1e-12))
            checked += 1
        model.learn_one(x, y)
    assert checked > 1000
    decided = sum(r is not None for r in pruned)  # predictions the bound settled without a row
    assert decided > 0.3 * len(pruned) and len(pruned) >= checked


def test_count_window_counts_windows_and_the_hmm_gets_more_states_than_symbols():
    rng = np.random.default_rng(5)
    T = 0.3 * np.eye(6) + 0.7 * np.roll(np.eye(6), 1, axis=0)  # a 6-state ring over 3 symbols
    O = np.zeros((3, 6))
    for j in range(6):
        O[j % 3, j], O[(j + 1 + j // 3) % 3, j] = 0.85, 0.15
    x = HMM(T=T, O=O).sample(12_000, random_state=int(rng.integers(1000)))
    wide = SpectralHMM(refit_every=None, key="k")  # the default: count_window="auto"
    plain = SpectralHMM(refit_every=None, count_window=1, key="k")
    for model in (wide, plain):
        for t, s in enumerate(x.tolist()):
            model.learn_one({"k": t % 3}, "abc"[s])
        assert model.refit()
    assert wide.accumulator.current_window == 5 and plain._acc.current_window == 1  # 3^5 >= 128
    assert wide.hmm.n_states > 3 >= plain.hmm.n_states
    assert wide.clone().count_window == "auto"
    with pytest.raises(ValueError, match="count_window"):
        SpectralHMM(count_window=0)
