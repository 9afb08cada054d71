"""The README's first command: ``streamspec demo``."""

from __future__ import annotations

import subprocess
import sys

from streamspec.cli import main
from streamspec.experiments.demo import run_demo


def test_demo_learns_the_ring():
    rows = run_demo(blocks=4, block_size=10_000, out=lambda line: None)
    assert [r["symbols"] for r in rows] == [10_000, 20_000, 30_000, 40_000]
    for r in rows:  # estimated models cannot beat the truth by more than sampling noise
        assert r["spectral"] > r["true"] - 0.02 and r["mestimator"] > r["true"] - 0.02
    assert rows[-1]["spectral_joint_error"] < rows[0]["spectral_joint_error"]
    assert rows[-1]["mestimator_joint_error"] < 0.15


def test_demo_command_prints_a_table(capsys):
    assert main(["demo", "--blocks", "2", "--block-size", "3000"]) == 0
    out = capsys.readouterr().out
    assert "ring" in out and out.count("\n") >= 5
    assert out.strip().splitlines()[-1].split()[0] == "6000"


def test_demo_rejects_bad_settings():
    result = subprocess.run([sys.executable, "-m", "streamspec", "demo", "--rank", "9"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "rank" in result.stderr
