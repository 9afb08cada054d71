"""Learning one message's parsed records into an accumulator: all or nothing.

Shared by every reader of records (the Kafka daemon, and whatever else feeds
:class:`~streamspec.streaming.accumulator.MomentAccumulator` message by message):
a message is learned whole or not at all, and a failure that means the state
cannot grow is told apart from a bad record.

Examples
--------
>>> from connectors.records import Record
>>> from streamspec.streaming.accumulator import MomentAccumulator
>>> acc = MomentAccumulator(window=1)
>>> learn_record(acc, [Record("u", "a"), Record("u", "b"), Record("u", "c")])
3
>>> acc.n_triples
1.0
"""

from __future__ import annotations

from collections.abc import Sequence

from streamspec.streaming.accumulator import MomentAccumulator

__all__ = ["StateFailure", "is_state_failure", "learn_record"]


class StateFailure(Exception):
    """The daemon's state could not grow (memory, a full alphabet) or be made durable."""


def is_state_failure(exc: BaseException) -> bool:
    """Whether ``exc``, raised while learning a valid record, means the state cannot grow."""
    if isinstance(exc, MemoryError | StateFailure):
        return True
    return isinstance(exc, ValueError) and "alphabet is full" in str(exc)


def learn_record(acc: MomentAccumulator, records: Sequence) -> int:
    """Learn the parsed records of one message into ``acc``, all or nothing; the symbols learned.

    A message of one symbol is one ``learn_one`` (all or nothing by itself). A
    message of several symbols, or with an end of sequence, is undone as a whole if
    any step raises: the accumulator's per-call undo records are replayed in reverse
    order, so a message is never half-learned. O(1) per symbol.
    """
    if len(records) == 1 and not records[0].end:  # the common case, atomic by itself
        r = records[0]
        if r.symbol is None:
            return 0
        acc.learn_one(r.symbol, r.key)
        return 1
    return acc.learn_all((r.key, r.symbol, r.end) for r in records)
