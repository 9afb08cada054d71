"""Tests for streamspec.experiments.paper: configurations, metrics, and the ``--quick`` pipeline.

The quick run of every experiment happens once (module fixture) into a temporary
folder; the tests then check its files, its tables and the qualitative claims that
hold in our full-scale runs (docs/results.md).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from streamspec import MomentAccumulator, SpectralEstimator
from streamspec.experiments import (
    paper,
    paper_hmms,
    paper_metrics,
    paper_real,
    paper_report,
    paper_settings,
)
from streamspec.experiments.datasets import default_data_path

TOY = ("ring", "grid", "chain")


# ---------------------------------------------------------------------------
# Configurations and metrics
# ---------------------------------------------------------------------------


def test_ring_follows_the_figure():
    hmm = paper_hmms.ring_hmm()
    T = hmm.T  # T[to, from]
    assert T[1, 0] == T[4, 0] == 0.5
    assert (T[0, 1], T[2, 1], T[0, 4], T[3, 4]) == (0.9, 0.1, 0.9, 0.1)
    assert T[1, 2] == T[2, 3] == 1.0
    assert np.allclose(np.diag(hmm.O), 0.6)
    # h3 and h4 are rarely visited
    assert hmm.pi[[2, 3]].max() < hmm.pi[[0, 1, 4]].min()


@pytest.mark.parametrize(("side", "rank"), [(2, 2), (3, 6), (5, 20)])
def test_grid_walk_and_rank(side, rank):
    hmm = paper_hmms.grid_hmm(side)
    assert hmm.n_states == side * side
    assert np.allclose(hmm.T.sum(axis=0), 1.0)
    assert np.allclose(np.diag(hmm.O), 0.9)
    # corner state 0 moves to its two neighbours with probability 1/2 each
    assert np.count_nonzero(hmm.T[:, 0]) == 2
    assert paper_hmms.grid_rank(side) == rank


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_chain_resets(p):
    hmm = paper_hmms.chain_hmm(p)
    assert hmm.T[0, 0] == pytest.approx(p)
    assert hmm.T[1, 0] == pytest.approx(1 - p)
    assert hmm.T[0, 4] == 1.0
    assert np.all(np.diff(hmm.pi[1:]) < 0)  # later states are rarer


def test_deterministic_sequence():
    s = paper_hmms.deterministic_sequence(15)
    assert s.tolist() == [0] * 10 + [1] * 5


def test_synthetic_hmm_is_well_conditioned_and_seeded():
    a = paper_hmms.synthetic_hmm(5, 10, random_state=3)
    b = paper_hmms.synthetic_hmm(5, 10, random_state=3)
    assert np.array_equal(a.T, b.T) and a.O.shape == (10, 5)
    P21 = a.O @ a.T @ np.diag(a.pi) @ a.O.T
    sv = np.linalg.svd(P21, compute_uv=False)
    assert sv[4] / sv[0] > 0.01


def test_triple_counts_match_the_accumulator():
    rng = np.random.default_rng(0)
    X = rng.integers(0, 4, size=(200, 3))
    acc = MomentAccumulator(n_symbols=4, mode="sequences")
    for i, row in enumerate(X):
        acc.learn_many(row, key=i)
    assert np.array_equal(paper_metrics.triple_counts(X, 4), acc.counts())


def test_relative_error_is_zero_for_the_truth_and_positive_for_an_estimate():
    hmm = paper_hmms.ring_hmm()
    X = hmm.sample_many(50, paper_settings.TEST_LENGTH, 1)
    p = hmm.operators().joint_proba_many(X)
    assert paper_metrics.relative_error(hmm.operators(), X, p) == pytest.approx(0.0, abs=1e-12)
    model = SpectralEstimator(rank=3).fit(paper_metrics.triple_counts(hmm.sample_many(100, 3, 2), 5))
    assert 0.0 < paper_metrics.relative_error(model, X, p) < np.inf


def test_markdown_round_trip():
    text = paper_report.markdown_table(["a", "b"], [[1, "x ± y"], [2, "z"]])
    assert paper_report.parse_markdown_tables("intro\n\n" + text + "\n\nafter") == [
        [["a", "b"], ["1", "x ± y"], ["2", "z"]]
    ]


def test_cli_lists_the_paper_command():
    from streamspec import cli

    assert ("streamspec.experiments.paper", "register") in cli._COMMANDS


# ---------------------------------------------------------------------------
# The --quick pipeline
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    """``(out, fits, rc)``: every estimator fit of the run is listed as (variant, n, rank)."""
    out = tmp_path_factory.mktemp("paper")
    fits, real = [], paper_settings.fit_variant

    def counted(variant, data, rank, penalty):
        est, model, seconds = real(variant, data, rank, penalty)
        fits.append((variant.name, model.n_symbols, rank))
        return est, model, seconds

    paper_settings.fit_variant = counted  # why: count the work, which unlike time does not depend on the load
    try:
        rc = paper.main(["all", "--quick", "--out", str(out), "--seed", "0"])
    finally:
        paper_settings.fit_variant = real
    return out, fits, rc


def _cell(text: str) -> float:
    """The mean of a 'mean ± se; ...' cell."""
    return float(text.split("±")[0].split(";")[0].strip())


def _results(out, name):
    return json.loads((out / f"{name}.json").read_text(encoding="utf-8"))


def test_quick_run_finishes_and_writes_every_file(quick_run):
    out, fits, rc = quick_run
    assert rc == 0
    # --quick stays quick by its size, not by a clock: 216 fits on at most 26 symbols at
    # rank <= 8 when written (about 20 s of CPU); the dense fits cost O(n⁵), so these
    # bounds hold its time whatever the machine's load
    assert 50 <= len(fits) <= 240, f"--quick ran {len(fits)} fits"
    assert max(n for _, n, _ in fits) <= 26 and max(k for *_, k in fits) <= 8
    for name in ("deterministic", *TOY, "synthetic"):
        for ext in ("md", "json", "png"):
            f = out / f"{name}.{ext}"
            assert f.is_file() and f.stat().st_size > 0, f
        assert (out / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_quick_tables_parse(quick_run):
    out, _, _ = quick_run
    for name in ("deterministic", *TOY, "synthetic"):
        tables = paper_report.parse_markdown_tables((out / f"{name}.md").read_text(encoding="utf-8"))
        assert tables, name
        for table in tables:
            widths = {len(row) for row in table}
            assert len(widths) == 1, (name, table[0])
    ring = paper_report.parse_markdown_tables((out / "ring.md").read_text(encoding="utf-8"))[0]
    assert ring[0][:4] == ["Model rank", "rank", "θ_spec", "θ_M"]
    assert [r[0] for r in ring[1:]] == ["4", "3", "2"]
    assert all(_cell(r[2]) > 0 for r in ring[1:])


def test_deterministic_b0_decays_and_theta_m_decays_faster(quick_run):
    out, _, _ = quick_run
    rows = {r["length"]: r for r in _results(out, "deterministic")["rows"]}
    assert rows[10]["θ_spec"] == pytest.approx(1.0) and rows[10]["θ_M"] == pytest.approx(1.0)
    assert rows[15]["θ_spec"] == pytest.approx(8 / 9, abs=1e-4)  # the paper's 0.8889
    for name in ("θ_spec", "θ_M"):
        assert rows[50][name] < rows[25][name] < rows[15][name] < 1.0
    assert rows[25]["θ_M"] < rows[25]["θ_spec"]
    assert rows[50]["θ_M"] < rows[50]["θ_spec"]


def test_quick_grid_fixed_weighted_estimator_beats_spec_on_3x3(quick_run):
    """With 100,000 training examples the weighted θ_M (S = U) beats θ_spec on the 3×3 grid."""
    out, _, _ = quick_run
    errs = _results(out, "grid")["errors"]["3"]
    spec, fixed = np.array(errs["θ_spec"]), np.array(errs["θ_M fixed"])
    assert fixed.mean() < spec.mean()
    assert np.mean(fixed < spec) >= 2 / 3


def test_quick_shared_factorization_is_unstable_on_small_samples(quick_run):
    """On the ring (100 examples) the shared factorization is far worse than S = U fixed."""
    out, _, _ = quick_run
    errs = _results(out, "ring")["errors"]["4"]
    assert np.median(errs["θ_M"]) > 2 * np.median(errs["θ_M fixed"])
    assert np.median(errs["θ_M fixed"]) < 1.5 * np.median(errs["θ_spec"])


def test_quick_synthetic_curve_decreases(quick_run):
    out, _, _ = quick_run
    res = _results(out, "synthetic")
    curve = next(iter(res["curves"].values()))["errors"]
    sizes = sorted(curve, key=int)
    for name in ("θ_spec", "θ_M"):
        means = [np.mean(curve[s][name]) for s in sizes]
        assert means[-1] < means[0] / 3, (name, means)


def test_quick_real_data(quick_run):
    if default_data_path() is None:
        pytest.skip("no real data folder (../shared/data or STREAMSPEC_DATA)")
    out, _, _ = quick_run
    text = (out / "real.md").read_text(encoding="utf-8")
    assert "Ecoli" in text and "not sequence data" in text
    res = _results(out, "real")
    assert set(res["rows"]) == set(paper_real.REAL_SETS)
    for name, row in res["rows"].items():
        methods = row["methods"]
        for m in methods.values():
            assert 0.0 <= m["accuracy"] <= 1.0
            assert 0.0 < m["log_loss"] < np.log(row["n_symbols"]) + 1.0, name
            assert m["seconds"] >= 0.0
        assert methods["θ_spec"]["accuracy"] > 1.0 / row["n_symbols"], name
