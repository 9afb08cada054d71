"""Smoke test of demos/bench_background.py: a small sessions stream, its rows parsed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_small_run_prints_both_modes_and_their_differences():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "demos/bench_background.py", "--stream", "sessions",
                          "--events", "3000", "--every", "1000", "--seeds", "0"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    rows = {line.split()[1]: line.split() for line in lines if line.split()[:1] == ["0"]
            and line.split()[1] in ("inline", "background")}
    assert set(rows) == {"inline", "background"}
    acc = {mode: float(r[2]) for mode, r in rows.items()}
    assert all(0.0 < a <= 1.0 for a in acc.values())
    # refit every 1,000 of 3,000 symbols: 3 fits each; the background fits start at their due
    # symbols and are waited for, so the models, and the predictions, are inline's
    assert "3 fits" in " ".join(rows["inline"]) and "3 fits" in " ".join(rows["background"])
    assert acc["background"] == acc["inline"]
    diff = next(line.split() for line in lines[lines.index(next(x for x in lines if x.startswith(
        "background − inline"))):] if line.split()[:1] == ["0"])
    assert abs(float(diff[1]) - (acc["background"] - acc["inline"])) < 1e-4
