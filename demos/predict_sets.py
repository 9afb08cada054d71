"""The data sets of ``demos/bench_predict.py``: synthetic HMMs and the real sequence sets.

Each set is a :class:`Case`: training and held-out sequences of symbol indices
``0..n-1``, a note on how it was made, whether a hidden state is expected to help
(synthetic HMMs, DNA, chorales, Dodgers: the issue's aims ask ≥ 1% over the trigram
there) and, for synthetic sets, the true HMM.

- ``synthetic``: sticky HMMs (0.9 on the diagonal, the rest spread evenly; Dirichlet(½)
  emissions) and generic ones (``HMM.random``: Dirichlet(1) columns) with
  (states, symbols) = (5, 10), (10, 100), (20, 1000); training on the first 10⁴, 10⁵
  or 10⁶ symbols of one sampled stream; held out: 4 independent streams of 12,500
  symbols (50,000), each from the stationary distribution. Seeded.
- ``alice``: ``alice/11-0.txt`` (``pg11.txt`` if absent), lower-cased, every run of
  non-letters one space: 27 symbols; the first 80% train, the last 20% is held out.
- ``books``: the five novels of ``books/``, words ``[a-z]+(?:['’][a-z]+)?`` of the
  lower-cased text; the first 90% of each book trains (one stream per book), words
  seen once in training are ``<unk>``; held out: the first 50,000 words of the books'
  last tenths in file order (each book's its own sequence): as in the issue's table,
  that is all of ``1184.txt``'s last tenth and the start of ``120.txt``'s.
- ``splice`` (A/C/G/T, sequences with other letters dropped), ``chorales`` (melody
  pitch, remapped to 0..19), ``dodgers`` (10 quantile bins, runs between missing
  values): a seeded random 80% of the sequences train, the other 20% are held out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from streamspec import HMM
from streamspec.experiments import datasets, datasets_chorales, datasets_dodgers

__all__ = ["Case", "REAL_SETS", "synthetic_cases", "real_case"]

REAL_SETS = ("alice", "books", "splice", "chorales", "dodgers")
SYNTHETIC_SHAPES = ((5, 10), (10, 100), (20, 1000))  # (hidden states, symbols)
SYNTHETIC_SIZES = (10_000, 100_000, 1_000_000)  # training symbols
HELD_OUT_STREAMS, HELD_OUT_LENGTH = 4, 12_500
BOOK_TEST_WORDS = 50_000
WORD = re.compile(r"[a-z]+(?:['’][a-z]+)?")


@dataclass
class Case:
    """One data set: training and held-out sequences of indices ``0..n-1``.

    ``hidden`` says whether the issue expects a hidden state to help (the ≥ 1% aim);
    ``truth`` is the generating HMM of a synthetic set (``None`` for real data).
    """

    name: str
    n: int
    train: list[np.ndarray]
    test: list[np.ndarray]
    note: str
    hidden: bool
    truth: HMM | None = None

    @property
    def n_train(self) -> int:
        return int(sum(len(s) for s in self.train))

    @property
    def n_test(self) -> int:
        return int(sum(len(s) for s in self.test))

    def describe(self) -> str:
        """One line: sizes and how the set was made."""
        return (f"{self.name}: n = {self.n:,}, {len(self.train):,} training sequence(s) / "
                f"{self.n_train:,} symbols, {len(self.test):,} held out / {self.n_test:,} symbols; "
                f"{self.note}")


# ---------------------------------------------------------------------------- synthetic


def sticky_hmm(m: int, n: int, seed: int) -> HMM:
    """0.9 on the diagonal, the rest spread evenly; Dirichlet(½) emission columns."""
    rng = np.random.default_rng(seed)
    T = np.full((m, m), 0.1 / (m - 1)) + np.eye(m) * (0.9 - 0.1 / (m - 1))
    return HMM(T, rng.dirichlet(np.full(n, 0.5), size=m).T)


def generic_hmm(m: int, n: int, seed: int) -> HMM:
    """``HMM.random``: Dirichlet(1) columns of transitions and emissions."""
    return HMM.random(m, n, random_state=seed)


def synthetic_cases(quick: bool) -> Iterator[Case]:
    """The synthetic cases (module docstring); ``quick``: (5, 10) at 10⁴ only, 2 × 2,500 held out."""
    shapes = ((5, 10),) if quick else SYNTHETIC_SHAPES
    sizes = (10_000,) if quick else SYNTHETIC_SIZES
    streams, length = (2, 2_500) if quick else (HELD_OUT_STREAMS, HELD_OUT_LENGTH)
    for kind, make in (("sticky", sticky_hmm), ("generic", generic_hmm)):
        for m, n in shapes:
            truth = make(m, n, seed=1000 * m + n)
            stream = truth.sample(max(sizes), random_state=1)
            test = [truth.sample(length, random_state=100 + i) for i in range(streams)]
            for size in sizes:
                yield Case(f"{kind} m={m} n={n} T={size:.0e}".replace("e+0", "e"), n, [stream[:size]],
                           test, f"{kind} HMM, {m} states, one training stream", True, truth)


# ---------------------------------------------------------------------------- real sets


def split_sequences(seqs: list[np.ndarray], frac: float = 0.8, seed: int = 0):
    """A seeded random ``frac`` of the sequences (rounded up) train, the rest is held out."""
    order = np.random.default_rng(seed).permutation(len(seqs))
    cut = int(math.ceil(frac * len(seqs)))
    return [seqs[i] for i in order[:cut]], [seqs[i] for i in order[cut:]]


def alice(quick: bool) -> Case:
    """Alice as 27 symbols: a–z and one space for every run of non-letters; 80/20."""
    file = datasets.find_data_file(None, datasets.ALICE_DIR, datasets.ALICE_FILES)
    text = datasets.strip_gutenberg(file.read_bytes().decode("utf-8-sig")).lower()
    text = re.sub(r"[^a-z]+", " ", text).strip()
    if quick:
        text = text[:20_000]
    x = np.frombuffer(text.encode("ascii"), dtype=np.uint8).astype(np.int64)
    x = np.where(x == ord(" "), 0, x - ord("a") + 1)
    cut = int(0.8 * x.size)
    return Case("alice", 27, [x[:cut]], [x[cut:]], f"{file.name}, a–z + space, last 20% held out",
                False)


def book_words(path: Path) -> list[str]:
    """The lower-cased words of one book (``books/SOURCE.md``'s tokenisation)."""
    return WORD.findall(datasets.strip_gutenberg(path.read_text(encoding="utf-8")).lower())


def books(quick: bool) -> Case:
    """The five novels as words, 90/10 per book, once-seen training words ``<unk>``, 50k scored."""
    root = datasets.default_data_path()
    folder = None if root is None else root / "books"
    files = sorted(folder.glob("*.txt")) if folder is not None and folder.is_dir() else []
    if not files:
        raise FileNotFoundError(f"expected books/*.txt in {root} (or set {datasets.ENV_VAR})")
    words = [book_words(f) for f in files]
    if quick:
        words = [w[:20_000] for w in words]
    cuts = [int(0.9 * len(w)) for w in words]
    vocab, counts = np.unique(np.concatenate([np.array(w[:c]) for w, c in zip(words, cuts, strict=True)]),
                              return_counts=True)
    index = {word: i for i, word in enumerate(vocab[counts >= 2].tolist())}
    unk = len(index)
    seqs = [np.fromiter((index.get(word, unk) for word in w), dtype=np.int64, count=len(w)) for w in words]
    budget, test = BOOK_TEST_WORDS if not quick else 5_000, []
    for s, c in zip(seqs, cuts, strict=True):  # the held-out tenths in file order, up to the budget
        if budget > 0:
            test.append(s[c : c + budget])
            budget -= len(test[-1])
    scored = ", ".join(f"{f.name} {len(t):,}" for f, t in zip(files, test, strict=False))
    return Case("books", unk + 1, [s[:c] for s, c in zip(seqs, cuts, strict=True)], test,
                f"{len(files)} books, words seen once in training -> <unk>; held out: the first "
                f"{sum(map(len, test)):,} words of the books' last tenths in file order ({scored})", False)


def splice(quick: bool) -> Case:
    seqs = [np.array(["ACGT".index(c) for c in s], dtype=np.int64) for s in datasets.load_splice()]
    train, test = split_sequences(seqs[:300] if quick else seqs)
    return Case("splice", 4, train, test, "A/C/G/T, 80% of the sequences train (seed 0)", True)


def chorales(quick: bool) -> Case:
    raw = datasets_chorales.load_chorales()
    values = sorted({v for s in raw for v in s})
    index = {v: i for i, v in enumerate(values)}
    train, test = split_sequences([np.array([index[v] for v in s], dtype=np.int64) for s in raw])
    return Case("chorales", len(values), train, test, "melody pitch, 80% of the chorales train (seed 0)",
                True)


def dodgers(quick: bool) -> Case:
    seqs = [np.asarray(s, dtype=np.int64) for s in datasets_dodgers.load_dodgers()]
    train, test = split_sequences([s[:500] for s in seqs] if quick else seqs)
    return Case("dodgers", 10, train, test, "10 quantile bins, 80% of the runs train (seed 0)", True)


def real_case(name: str, quick: bool) -> Case:
    """The real set ``name`` (``FileNotFoundError`` naming where it looked if missing)."""
    loaders = {"alice": alice, "books": books, "splice": splice, "chorales": chorales, "dodgers": dodgers}
    return loaders[name](quick)
