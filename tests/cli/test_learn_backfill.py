"""``streamspec learn --workers/--dask``: the parallel backfill gives the serial counts."""

from __future__ import annotations

import numpy as np
import pytest

from streamspec import MomentAccumulator
from streamspec.cli import main


def aligned(acc: MomentAccumulator, labels: list) -> np.ndarray:
    order = [acc.symbols.index(s) for s in labels]
    return acc.counts()[np.ix_(order, order, order)]


@pytest.mark.parametrize("flags", [["--workers", "2", "--chunk-mb", "1"], ["--workers", "1"], []])
def test_learn_with_workers_equals_serial_learn(tmp_path, flags, monkeypatch, caplog, capsys):
    import logging

    import connectors.backfill as bf

    # a pool for --workers 2 even for these 1.3 MB (it would count serially otherwise)
    monkeypatch.setattr(bf, "PARALLEL_MIN_BYTES", 0)
    monkeypatch.setattr(bf, "_cpus", lambda: 2)
    monkeypatch.setattr(bf, "_load", lambda: 0.0)
    rng = np.random.default_rng(0)
    paths = []
    for f in range(2):
        path = tmp_path / f"part{f}.txt"
        lines = ["".join(rng.choice(list("abcde"), size=rng.integers(0, 300))) for _ in range(1200)]
        path.write_text("\n".join(lines) + "\n")
        paths.append(str(path))
    # --state: read record by record (resumable), the reference
    assert main(["learn", *paths, "--no-fit", "--counts", str(tmp_path / "serial.npz"),
                 "--state", str(tmp_path / "state.ckpt")]) == 0
    capsys.readouterr()
    with caplog.at_level(logging.INFO, logger="streamspec.backfill"):
        assert main(["learn", *paths, "--no-fit", "--counts", str(tmp_path / "par.npz"),
                     "--progress", "always", *flags]) == 0
    assert ("path=2 processes" if "2" in flags else "path=serial (--workers 1)") in caplog.text
    assert "100.0%" in capsys.readouterr().err  # the progress bar, to its end
    serial = MomentAccumulator.load(tmp_path / "serial.npz")
    parallel = MomentAccumulator.load(tmp_path / "par.npz")
    assert serial.n_triples > 10**5
    assert set(parallel.symbols) == set(serial.symbols)
    np.testing.assert_array_equal(aligned(parallel, serial.symbols), serial.counts())


def test_learn_backfill_fits_and_rejects_follow(tmp_path, capsys):
    path = tmp_path / "x.txt"
    path.write_text("abcabcabdabcacb\n" * 200)
    out = tmp_path / "m.ckpt"
    assert main(["learn", str(path), "--workers", "1", "--rank", "2", "--out", str(out)]) == 0
    assert out.exists()
    assert main(["learn", str(path), "--workers", "2", "--follow", "--out", str(out)]) == 2
    assert "follow" in capsys.readouterr().err
