"""learn_one throughput of the default counts (``window="auto"``) against plain triples (``window=1``).

Issue 19 made ``"auto"`` the default window of ``MomentAccumulator`` (and of everything that
builds one). Large alphabets must keep the speed of triples (auto reaches L = 1 after the
first 128 labels); small ones now count (2L+1)-grams. This benchmark feeds the same symbols,
one ``learn_one`` at a time, to ``MomentAccumulator(window=1)`` and to
``MomentAccumulator()`` (the default) in one process, BLAS pinned to one thread, each
timed 3 times alternately (the best kept, the final merge of buffered counts included):

- ``words``: the lower-cased words of the books in ``<data>/books`` (a growing alphabet of
  labels, some 40,000 of them), spread over 64 interleaved keyed streams;
- ``alice``: the letters of Alice in ``<data>/alice`` (about 40 labels, L = 2 by default),
  one stream.

It prints symbols per second of both, their ratio, the window the default reached and the
distinct grams it keeps. Run from the repository root::

    python demos/bench_window_default.py [--data DIR] [--words 400000]

A missing data folder is skipped with a line saying where it was looked for.
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # why: one BLAS thread, figures comparable in one run

import argparse  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from streamspec import MomentAccumulator  # noqa: E402
from streamspec.experiments.datasets import default_data_path  # noqa: E402

_WORD = re.compile(r"[a-z]+")


def words_of(folder: Path, limit: int) -> list[str]:
    """The lower-cased words of every ``*.txt`` of ``folder`` in name order, at most ``limit``."""
    out: list[str] = []
    for path in sorted(folder.glob("*.txt")):
        out += _WORD.findall(path.read_text(encoding="utf-8", errors="replace").lower())
        if len(out) >= limit:
            break
    return out[:limit]


def letters_of(folder: Path) -> list[str]:
    """The characters of Alice (lower-cased, line breaks as spaces)."""
    path = folder / "11-0.txt" if (folder / "11-0.txt").exists() else folder / "pg11.txt"
    return list(path.read_text(encoding="utf-8", errors="replace").lower().replace("\n", " "))


def feed(acc: MomentAccumulator, symbols: list, n_keys: int) -> MomentAccumulator:
    learn = acc.learn_one
    if n_keys == 1:
        for s in symbols:
            learn(s)
    else:
        for t, s in enumerate(symbols):
            learn(s, t % n_keys)
    acc.triples()  # merge what is buffered: part of the cost
    return acc


def timed(make, symbols: list, n_keys: int, repeats: int = 3) -> dict[str, tuple[float, MomentAccumulator]]:
    """Best seconds of each maker over ``repeats`` alternate runs, and its last accumulator."""
    best: dict[str, tuple[float, MomentAccumulator]] = {}
    for _ in range(repeats):
        for name, build in make.items():
            t0 = time.perf_counter()
            acc = feed(build(), symbols, n_keys)
            s = time.perf_counter() - t0
            if name not in best or s < best[name][0]:
                best[name] = (s, acc)
    return best


def report(label: str, symbols: list, n_keys: int) -> None:
    best = timed({"window=1": lambda: MomentAccumulator(window=1), "default": MomentAccumulator},
                 symbols, n_keys)
    (s1, a1), (s2, a2) = best["window=1"], best["default"]
    n = len(symbols)
    print(f"| {label} | {n:,} | {a2.n:,} | {n_keys} | {n / s1:,.0f} | {n / s2:,.0f} | "
          f"{s2 / s1:.2f} | {a2.window!r} -> L = {a2.current_window} | "
          f"{a1.triples().nnz:,} | {a2.windows().nnz:,} |")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=default_data_path() or Path("../shared/data"),
                    help="the data folder (default: STREAMSPEC_DATA, else ../shared/data beside "
                         "the checkout)")
    ap.add_argument("--words", type=int, default=400_000, help="words of the books (400,000)")
    args = ap.parse_args(argv)
    print("| stream | symbols | alphabet | keys | window=1 sym/s | default sym/s | time ratio "
          "default / 1 | default window | distinct triples (1) | distinct grams (default) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    books, alice = args.data / "books", args.data / "alice"
    if books.is_dir():
        report("words (books)", words_of(books, args.words), 64)
    else:
        print(f"(words skipped: no folder {books})")
    if alice.is_dir():
        report("letters (Alice)", letters_of(alice), 1)
    else:
        print(f"(letters skipped: no folder {alice})")


if __name__ == "__main__":
    main()
