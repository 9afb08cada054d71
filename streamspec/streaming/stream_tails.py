"""The tail of a stream: its last (up to 2L) digits, packed in one integer.

A stream of window L is read as its *padded* sequence: ``L − 1`` pads, then its symbols
(sliding mode; no pads in sequences mode), so that every gram the accumulator counts is
a window of 2L + 1 consecutive digits of it (``streamspec.core.windows``). The tail keeps
the last ``min(2L, length)`` digits of that sequence, in ``base`` (a pad is the digit
``base − 1``; at L = 1 there are none):

- ``2L`` digits (*hot*: the next symbol completes a gram): the number ``Σ d_j·base^(2L−1−j)``,
  ``a·base + b`` at L = 1;
- ``k < 2L`` digits (*warm*): ``-1 - (code·(2L − 1) + k − 1)``, ``-1 - b`` at L = 1;
- :data:`DONE` in sequences mode once the stream's gram is counted, and :data:`NEW` for a
  stream not seen yet.
"""

from __future__ import annotations

import numpy as np

__all__ = ["DONE", "NEW", "tail_digits", "tail_code", "remap_digits", "tails_to_array", "tail_of_row"]

DONE = -(2**62)  # tail marker in sequences mode: this stream's gram is already counted
NEW = -(2**62) - 1  # tail of a stream not seen yet
# the rows of tails_to_array: an absent digit, a pad, and a whole row for DONE
ABSENT_DIGIT, PAD_DIGIT, DONE_DIGIT = -1, -2, -3


def tail_digits(tail: int | None, base: int, window: int) -> list[int]:
    """The digits of a tail, oldest first ([] for None, :data:`NEW` and :data:`DONE`). O(L).

    Examples
    --------
    >>> tail_digits(tail_code([3, 1], 5, 1), 5, 1), tail_digits(-1 - 4, 5, 1)
    ([3, 1], [4])
    """
    if tail is None or tail in (DONE, NEW):
        return []
    if tail >= 0:
        k, code = 2 * window, tail
    else:
        code, k1 = divmod(-1 - tail, 2 * window - 1)
        k = k1 + 1
    out = []
    for _ in range(k):
        code, d = divmod(code, base)
        out.append(d)
    return out[::-1]


def tail_code(digits, base: int, window: int) -> int:
    """The tail of the last ``min(2L, len)`` of ``digits`` (at least one). O(L)."""
    digits = list(digits)[-2 * window :]
    code = 0
    for d in digits:
        code = code * base + int(d)
    if len(digits) == 2 * window:
        return code
    return -1 - (code * (2 * window - 1) + len(digits) - 1)


def remap_digits(digits: list[int], mapping: np.ndarray, pad: int | None) -> list[int]:
    """Symbols renamed by ``mapping``, pads kept. O(L)."""
    return [d if d == pad else int(mapping[d]) for d in digits]


def tails_to_array(tails: list[int], base: int, window: int, pad: int | None) -> np.ndarray:
    """(streams, 2L) int64 of tails for a checkpoint: digits right-aligned, :data:`ABSENT_DIGIT`
    before them, :data:`PAD_DIGIT` for pads, a row of :data:`DONE_DIGIT` for DONE. O(streams · L)."""
    out = np.full((len(tails), 2 * window), ABSENT_DIGIT, dtype=np.int64)
    for r, tail in enumerate(tails):
        if tail == DONE:
            out[r] = DONE_DIGIT
            continue
        d = tail_digits(tail, base, window)
        out[r, 2 * window - len(d):] = [PAD_DIGIT if v == pad else v for v in d]
    return out


def tail_of_row(row, base: int, window: int, pad: int | None, n: int) -> int:
    """The tail of one row of :func:`tails_to_array`; ``ValueError`` if the row is not a valid tail
    over ``n`` symbols (absent digits first, pads only with L > 1, at least one digit). O(L)."""
    row = [int(v) for v in row]
    if row and all(v == DONE_DIGIT for v in row):
        return DONE
    k = sum(v != ABSENT_DIGIT for v in row)
    if k == 0 or any(v != ABSENT_DIGIT for v in row[: len(row) - k]):
        raise ValueError(f"tail {row} has no digits or a gap")
    digits = row[len(row) - k:]
    if any(not (0 <= v < n or (v == PAD_DIGIT and pad is not None)) for v in digits):
        raise ValueError(f"tail {row} out of range for {n} symbols")
    return tail_code([pad if v == PAD_DIGIT else v for v in digits], base, window)
