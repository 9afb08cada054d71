"""Counts of small streams for the Kneser–Ney trigram's tests."""

from __future__ import annotations

from streamspec.core.stream_starts import StreamStarts
from streamspec.core.triples import Triples


def counts_of(n: int, sequences) -> tuple[Triples, StreamStarts]:
    """The triples and stream starts of ``sequences`` over ``n`` symbols, counted by brute force."""
    x1, x2, x3 = [], [], []
    for seq in sequences:
        for t in range(2, len(seq)):
            x1.append(seq[t - 2])
            x2.append(seq[t - 1])
            x3.append(seq[t])
    return Triples.from_arrays(n, x1, x2, x3), StreamStarts.from_sequences(n, sequences)
