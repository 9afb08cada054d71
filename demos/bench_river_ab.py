"""SpectralHMM's per-event cost against another checkout's, interleaved in one process.

On a shared machine two runs of ``bench_river.py`` differ by more than a 5% change of the
per-event path. Here the other checkout's ``streamspec`` (``--baseline``, a directory
holding a ``streamspec/`` package, e.g. from ``git archive main | tar -x -C DIR``) is
imported as a second package (``streamspec_base``, a rewritten copy in a temporary
directory), both models learn the same first ``--fit-at`` symbols of
``bench_river.cluster_sessions`` and fit once, then run the next ``--events`` events
(``predict_one`` or, with ``--proba``, ``predict_proba_one(x).get(y)``, then
``learn_one``) in alternating chunks of 500, the order swapped every chunk; the CPU
time of each model's chunks is summed. Prints µs per event of each, the ratio, and the
accuracy and log loss of both (equal when the change keeps the predictions).

Run from the repository root::

    python demos/bench_river_ab.py --baseline /tmp/main --fit-at 10000   # rank 64, own rows
    python demos/bench_river_ab.py --baseline /tmp/main --fit-at 20000 --proba
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # why: one BLAS thread, as bench_river.py

import argparse  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from bench_river import cluster_sessions  # noqa: E402

import streamspec  # noqa: E402


def import_baseline(checkout: str, into: str):
    """The checkout's package, copied to ``into`` as ``streamspec_base`` with its imports
    rewritten, imported. O(size of the package)."""
    dest = Path(into) / "streamspec_base"
    shutil.copytree(Path(checkout) / "streamspec", dest)
    for path in dest.rglob("*.py"):
        text = path.read_text()
        text = re.sub(r"\bstreamspec\.", "streamspec_base.", text)
        text = re.sub(r"(from|import) streamspec\b(?!_)", r"\1 streamspec_base", text)
        path.write_text(text)
    sys.path.insert(0, into)
    import streamspec_base

    return streamspec_base


def run(packages: dict, data: list, fit_at: int, events: int, proba: bool) -> None:
    models = {}
    for name, pkg in packages.items():
        m = pkg.SpectralHMM(key="user", refit_every=None)
        for x, y in data[:fit_at]:
            m.learn_one(x, y)
        m.refit()
        models[name] = m
    cpu, hits = dict.fromkeys(models, 0.0), dict.fromkeys(models, 0)
    rest = data[fit_at:fit_at + events]
    names = list(models)
    for c in range(0, len(rest), 500):
        for name in (names if (c // 500) % 2 == 0 else names[::-1]):
            m, t = models[name], time.process_time()
            for x, y in rest[c:c + 500]:
                if proba:
                    m.predict_proba_one(x).get(y)
                else:
                    hits[name] += m.predict_one(x) == y
                m.learn_one(x, y)
            cpu[name] += time.process_time() - t
    for name, m in models.items():
        print(f"{name:9s} rank {m.rank_}, own rows a part: {m.model.backoff.use_model}; "
              f"{1e6 * cpu[name] / len(rest):.1f} µs/event, accuracy {hits[name] / len(rest):.4f}, "
              f"log loss {m.online.log_loss:.6f}")
    print(f"this ÷ baseline: {cpu['this'] / cpu['baseline']:.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline", required=True, help="a directory holding streamspec/")
    parser.add_argument("--fit-at", type=int, default=20_000)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--proba", action="store_true")
    parser.add_argument("--quick", action="store_true", help="3,000 symbols, 2,000 events")
    args = parser.parse_args(argv)
    fit_at, events = (3_000, 2_000) if args.quick else (args.fit_at, args.events)
    print(f"load {os.getloadavg()[0]:.1f}; fit at {fit_at:,}, {events:,} events, "
          f"{'predict_proba_one' if args.proba else 'predict_one'} + learn_one")
    data = cluster_sessions(fit_at + events)
    with tempfile.TemporaryDirectory() as tmp:
        base = import_baseline(args.baseline, tmp)
        run({"baseline": base, "this": streamspec}, data, fit_at, events, args.proba)


if __name__ == "__main__":
    main()
