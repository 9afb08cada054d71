"""Event lists shared by the accumulator tests: ``(key, symbol)`` learns a symbol, ``(key, None)``
ends the key's sequence."""

from __future__ import annotations

from collections.abc import Iterator

from streamspec import MomentAccumulator


def replay(events, acc: MomentAccumulator, how: str = "one") -> MomentAccumulator:
    """``acc`` after the events: ``learn_one`` per symbol (``how="one"``), else ``learn_many``
    over each run of one key's symbols (the ends between runs). Returns ``acc``."""
    i = 0
    while i < len(events):
        key, x = events[i]
        if x is None:
            acc.end(key)
            i += 1
        elif how == "one":
            acc.learn_one(x, key=key)
            i += 1
        else:  # a run of one key's symbols at once
            run = []
            while i < len(events) and events[i][0] == key and events[i][1] is not None:
                run.append(events[i][1])
                i += 1
            acc.learn_many(run, key=key)
    return acc


def sequences_so_far(events) -> Iterator[list]:
    """For every symbol event, in order, its key's sequence up to it (since the key's last end).

    The list yielded is the sequence itself, growing: read it before the next one.
    """
    current: dict = {}
    for key, x in events:
        if x is None:
            current.pop(key, None)
            continue
        seq = current.setdefault(key, [])
        seq.append(x)
        yield seq
