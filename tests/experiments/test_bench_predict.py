"""Smoke test of demos/bench_predict.py: a quick run on synthetic data only, its tables parsed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_bench(*args: str, data: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if data is not None:
        env["STREAMSPEC_DATA"] = str(data)
    return subprocess.run([sys.executable, "demos/bench_predict.py", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def tables(stdout: str) -> list[list[list[str]]]:
    """Every markdown table of the output: rows of cells, header first, separator dropped."""
    out, current = [], None
    for line in stdout.splitlines():
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if current is None:
                current = []
                out.append(current)
            if not set(line) <= set("|-"):
                current.append(cells)
        else:
            current = None
    return out


def test_quick_synthetic_run_prints_three_consistent_tables():
    pytest.importorskip("hmmlearn")
    proc = run_bench("--quick", "--sets", "synthetic")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    losses, times, summary = tables(proc.stdout)
    for table in (losses, times, summary):
        assert all(len(row) == len(table[0]) for row in table)
        assert [row[0] for row in table[1:]] == ["sticky m=5 n=10 T=1e4", "generic m=5 n=10 T=1e4"]
    col = {name: i for i, name in enumerate(losses[0])}
    for row in losses[1:]:
        value = {name: float(row[col[name]]) for name in
                 ("unigram", "KN bigram", "KN trigram", "M default", "S default", "trigram alone", "truth")}
        assert 0 < value["truth"] < value["unigram"] < 2.5  # log(10) = 2.30 is the uniform
        if row[0].startswith("sticky"):  # a hidden state that the predictor must see
            assert max(value["M default"], value["S default"]) < value["unigram"] - 0.03
        assert row[col["HMMEstimator K=5 / 10 / 20"]].endswith("n/a (K > n)")  # K = 20 > n = 10
        em = [float(c.rstrip("*")) for c in row[col["EM K=5 / 10 / 20"]].split(" / ")]
        assert len(em) == 3 and all(v > value["truth"] - 0.05 for v in em)
        # the summary's percentages are the loss table's figures
        srow = summary[1 + losses.index(row) - 1]
        pct = float(srow[1].rstrip("%"))
        expected = 100 * (value["M default"] - value["KN trigram"]) / value["KN trigram"]
        assert pct == pytest.approx(expected, abs=0.01)
        assert srow[summary[0].index("≤ KN3 (M/S)")] in {f"{a}/{b}" for a in ("PASS", "FAIL")
                                                         for b in ("PASS", "FAIL")}
        assert srow[summary[0].index("≤ truth+0.5%")] == "—"  # 10⁴ symbols: not an aim there
        assert srow[summary[0].index("fit ≤ 1.3× old")] == "—"  # no --baseline-checkout
    assert "not measured (no --baseline-checkout)" in proc.stdout


def test_a_missing_data_set_is_skipped_saying_where_it_looked(tmp_path):
    missing = tmp_path / "no-data-here"
    proc = run_bench("--quick", "--sets", "alice,books", "--skip-em", data=missing)
    assert proc.returncode == 0, proc.stderr[-3000:]
    skipped = [line for line in proc.stdout.splitlines() if "skipped, data not found" in line]
    assert len(skipped) == 2 and all(str(missing) in line for line in skipped)
    assert tables(proc.stdout) == []


def test_an_unknown_set_is_refused_in_one_line():
    proc = run_bench("--sets", "synthetic,nope")
    assert proc.returncode == 2 and "unknown set(s) nope" in proc.stderr
    assert "Traceback" not in proc.stderr
