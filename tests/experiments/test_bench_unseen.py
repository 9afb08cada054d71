"""Smoke test of demos/bench_unseen.py: processes no other benchmark draws from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def test_the_default_beats_the_trigram_on_a_noisy_period_and_ties_iid_data():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "demos/bench_unseen.py", "--only", "period,zipf"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in proc.stdout.splitlines()
            if ln.startswith("| ") and not ln.startswith("| process")]
    assert [r[0] for r in rows] == ["period 13 (20 symbols, 10% noise)", "zipf (500 symbols, i.i.d.)"]
    for row in rows:
        kn2, kn3, default = float(row[2]), float(row[3]), float(row[4].split()[0])
        assert default < min(kn2, kn3)  # never worse than the n-grams of the same counts
    period, zipf = rows
    # a period of 13 is memory no two-symbol context has: the hidden state's gain is large
    assert float(period[4].split()[0]) < 0.9 * float(period[3])
    # i.i.d. symbols: nothing to learn past the unigram, and the default does not overfit
    p = 1.0 / np.arange(1, 501)
    p /= p.sum()
    entropy = float(-(p * np.log(p)).sum())
    assert float(zipf[4].split()[0]) < entropy + 0.02
