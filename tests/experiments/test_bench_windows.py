"""Smoke test of demos/bench_windows.py --quick (the figures themselves live in docs/benchmarks.md)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[2] / "demos" / "bench_windows.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_windows", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def losses(out: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in re.finditer(r"^\| ([^|]+?) \| (\d+\.\d+) \|", out, re.M)}


def test_quick_bench_prints_every_model(capsys):
    bench = load_bench()
    bench.main(["sticky", "--quick", "--em-restarts", "0"])
    bench.main(["synthetic", "--quick", "--em-restarts", "0"])
    out = capsys.readouterr().out
    rows = losses(out)
    names = ["truth", "KN trigram", "θ_spec (L = 1)", "θ_M (L = 1)", "HMM 10, windows (L = 4)",
             "HMMEstimator, EM over 3-grams", "HMMEstimator, EM over 5-grams"]
    assert all(name in rows for name in names), sorted(rows)
    for prefix in ("θ_spec predictor, windows (L = 4, l = ", "θ_M predictor, windows (L = 4, l = "):
        assert any(name.startswith(prefix) for name in rows), sorted(rows)
    assert all(np.isfinite(v) and 0.5 < v < 3.0 for v in rows.values())
    # nothing beats the generating model by more than sampling noise on the held-out set
    assert min(rows.values()) > 0.98 * min(v for k, v in rows.items() if k == "truth")


def test_the_synthetic_automata_are_sparse_and_seeded():
    bench = load_bench()
    a, b = bench.sparse_automaton(10, 4, seed=7), bench.sparse_automaton(10, 4, seed=7)
    np.testing.assert_array_equal(a.T, b.T)
    assert ((a.T > 0).sum(axis=0) == 3).all() and ((a.O > 0).sum(axis=0) == 3).all()
    seqs = bench.sequences(a, 5_000, 5.0, seed=1)
    sizes = np.array([len(s) for s in seqs])
    assert 5_000 <= sizes.sum() < 5_100 and 4.0 < sizes.mean() < 6.0


def test_em_sees_whole_leading_sequences_up_to_its_cap():
    bench = load_bench()
    train = [np.arange(k % 7 + 1) for k in range(100)]
    capped = bench.em_training(train, 50)
    assert sum(map(len, capped)) == 50
    # whole sequences in order, only the last one cut (not every sequence cut to a share)
    assert all(np.array_equal(a, b) for a, b in zip(capped[:-1], train, strict=False))
    assert len(capped[-1]) <= len(train[len(capped) - 1])
    assert len(bench.em_training(train, 10**6)) == len(train)


def test_aims_and_the_summary_over_seeds(capsys):
    bench = load_bench()
    rows = [("truth", 1.0, float("nan")), ("KN trigram", 1.2, 0.1),
            ("θ_M predictor, windows (L = 2, l = 1, k = 3, HMM 6)", 1.02, 5.0),
            ("HMM 10, windows (L = 2)", 1.05, 2.0), ("EM 10 (best of 1, 9 of ≤ 10 iterations)", 1.1, 60.0)]
    a = bench.aims(rows)
    np.testing.assert_allclose([a["pred/truth"], a["pred/EM"], a["pred/KN3"], a["HMMEst/truth"],
                                a["HMMEst/EM"], a["EM s / HMMEst s"]],
                               [0.02, 1.02 / 1.1 - 1, 1.02 / 1.2 - 1, 0.05,
                                1.05 / 1.1 - 1, 30.0], rtol=1e-12)
    worse = [(n, v * 1.1 if n.startswith("θ_M") else v, 30.0 if n.startswith("EM") else s)
             for n, v, s in rows]
    other = [(n, v * 1.001 if n.startswith("θ_M") else v, s) for n, v, s in rows]
    bench.summary([(10, 4, 1000, 1, rows), (10, 4, 1000, 2, worse), (10, 4, 1000, 3, other),
                   (25, 8, 1000, 1, rows)])
    out = capsys.readouterr().out
    assert out.count("| 10 | 4 | 1,000 | ") == 4 and "| 25 | 8 | 1,000 | 1 |" in out
    per_seed, summary = out.split("### Summary")
    assert "| 10 | 4 | 1,000 | 2 | +12.20% |" in per_seed  # the seeds' own rows, then the summary
    line = next(ln for ln in summary.splitlines() if ln.startswith("| 10 | 4 | 1,000 | 3 | "))
    cells = [c.strip() for c in line.strip("|").split("|")]
    # median over the three seeds, the worst in brackets: the largest gap, the smallest time ratio
    assert cells[4] == f"{100 * (1.02 * 1.001 - 1):+.2f}% ({100 * (1.02 * 1.1 - 1):+.2f}%)"
    assert cells[9] == "30.0× (15.0×)"
