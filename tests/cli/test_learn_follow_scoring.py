"""``learn --follow``: after its first save, every record is predicted before it is learned.

The records read after a save are scored by the model saved (``event=prequential``), the
mixing weights learn from them, and the next save starts from those weights
(``weights=learned``) instead of re-estimating them from held-out counts as a one-pass
``learn`` does (``weights=held-out``, ``event=quality``), and from the last fit's state
(``path=warm``: a cost that follows the change, as the daemon's worker refits). On an
input whose process changes while it is followed, the weights saved differ from the batch
ones.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from streamspec.cli import main
from streamspec.core.hmm import HMM
from streamspec.core.model import ObservableOperatorModel

ROOT = Path(__file__).resolve().parents[2]
WAIT = 120
LETTERS = "abcdefgh"


def _text(x: np.ndarray) -> str:
    return "".join(LETTERS[i] for i in x)


def _wait(condition, what: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert proc.poll() is None, f"learn exited ({proc.returncode}) before {what}"
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.05)


def test_follow_saves_the_weights_its_records_taught_not_the_batch_ones(tmp_path):
    data, out, log = tmp_path / "in.txt", tmp_path / "followed.ckpt", tmp_path / "learn.log"
    before = HMM.random(3, 8, random_state=1, concentration=0.3).sample(20_000, random_state=2)
    after = HMM.random(3, 8, random_state=11, concentration=0.2).sample(40_000, random_state=3)
    data.write_text(_text(before) + "\n")
    cmd = [sys.executable, "-m", "streamspec", "learn", str(data), "--follow", "--out", str(out),
           "--save-interval", "0.3", "--idle-timeout", "4", "--poll-interval", "0.02",
           "--progress", "never"]
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        _wait(out.exists, "the first periodic save", proc)
        text = _text(after)
        for i in range(0, len(text), 2000):  # the process changed: appended while followed
            with data.open("a") as f:
                f.write(text[i:i + 2000] + "\n")
            time.sleep(0.1)
        assert proc.wait(WAIT) == 0, log.read_text()  # --idle-timeout ends it
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = log.read_text().splitlines()
    fitted = [ln for ln in lines if "event=fitted" in ln]
    assert "weights=held-out" in fitted[0]  # the first save: nothing was predicted yet
    assert len(fitted) >= 3 and all("weights=learned" in ln for ln in fitted[1:])
    # each save refits from the last fit's state: warm (or rebased) while the counts have not
    # doubled since the rank was chosen; a start without that state is always a fallback
    paths = [re.search(r"path=(\w+)", ln).group(1) for ln in fitted]
    assert paths[0] == "cold" and {"warm", "rebased"} & set(paths[1:]), paths
    losses = [float(m.group(1)) for ln in lines
              if (m := re.search(r"event=prequential symbols=\d+ log_loss=(\S+)", ln))]
    assert len(losses) >= 2 and all(math.isfinite(v) for v in losses)
    counts = Counter(after.tolist())
    unigram = -sum(c / after.size * math.log(c / after.size) for c in counts.values())
    assert losses[-1] < unigram - 0.1  # predicted by the model, not by the frequencies
    followed = ObservableOperatorModel.load(out).backoff
    # the same counts read once, weights from held-out counts
    assert main(["learn", str(data), "--out", str(tmp_path / "batch.ckpt"), "-q"]) == 0
    batch = ObservableOperatorModel.load(tmp_path / "batch.ckpt").backoff
    assert followed.held_out == {} and batch.held_out  # learned online vs held out
    # the weight of the HMM filter (the long memory) in each bucket: the records taught more
    # than two-symbol held-out contexts tell (the model itself may be a part of one of them)
    hmm = [b.mixture.blends(np.arange(6))[:, b.components.index("hmm")] for b in (followed, batch)]
    assert np.abs(hmm[0] - hmm[1]).max() > 0.1
