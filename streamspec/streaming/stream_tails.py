"""The tail of a stream: its last (up to two) symbols, packed in one integer.

A tail is ``a·base + b`` with two symbols, ``-1 - b`` with one, :data:`DONE` in
sequences mode once the stream's triple is counted, and :data:`NEW` for a stream not
seen yet.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DONE", "NEW", "tail_symbols", "tail_list", "tail_code", "remap_tail"]

DONE = -(2**62)  # tail marker in sequences mode: this stream's triple is already counted
NEW = -(2**62) - 1  # tail of a stream not seen yet


def tail_symbols(tail: int, base: int) -> tuple[int, int]:
    """(second-last, last) symbol of a tail; -1 where absent, (-2, -2) when done."""
    if tail == DONE:
        return -2, -2
    if tail < 0:
        return -1, -1 - tail
    return tail // base, tail % base


def tail_list(tail: int | None, base: int) -> list[int]:
    """The symbols of a tail as a list of 0, 1 or 2 indices."""
    if tail is None or tail == DONE:
        return []
    a, b = tail_symbols(tail, base)
    return [b] if a < 0 else [a, b]


def tail_code(a: int, b: int, base: int) -> int:
    if a == -2:
        return DONE
    if a == -1:
        return -1 - b
    return a * base + b


def remap_tail(tail: int, mapping: np.ndarray, base: int) -> int:
    a, b = tail_symbols(tail, base)
    if a >= 0:
        a = int(mapping[a])
    if b >= 0:
        b = int(mapping[b])
    return tail_code(a, b, base)
