"""Signals that the log under a partition may have changed: reconnections and topic ids.

A broker that lost its log and came back empty on the same address, or a topic
deleted and re-created, answers the group consumer's next fetches from a new log,
at the old offsets, without an error. :class:`BrokerWatch` tells the poll loop when
to check the logs again (:mod:`connectors.kafka.verification`), *before* the
records of the poll that noticed it are learned:

* a **reconnection**: a connection of the consumer to a broker it had been connected
  to was replaced by a new one (the old one was lost);
* a **topic id change**: the metadata of the topic names another topic id than
  before (the topic was deleted and re-created; brokers from Kafka 2.8 and Tansu
  give topic ids).

Both come from kafka-python's client internals (the connection table
``consumer._manager._conns`` and the cluster metadata), read defensively: if a
later kafka-python changes them, the watch says so once and the daemon still
verifies every partition on assignment and whenever a high-water mark falls below
its position.
"""

from __future__ import annotations

import logging

from kafka import KafkaConsumer

__all__ = ["BrokerWatch"]

log = logging.getLogger("streamspec.daemon")


class BrokerWatch:
    """Notices reconnections of the group consumer and changes of the topic's id.

    Parameters
    ----------
    topic
        The consumed topic.

    Attributes
    ----------
    reconnections
        Reconnections noticed so far.
    """

    def __init__(self, topic: str):
        self.topic = topic
        self.reconnections = 0
        self._conns: dict | None = None
        self._cluster = None
        self._known: dict = {}  # node id -> the connection object last seen for it
        self._topic_id: str | None = None

    def attach(self, consumer: KafkaConsumer) -> None:
        """Start watching ``consumer`` (its current connections are the baseline)."""
        manager = getattr(consumer, "_manager", None)
        conns = getattr(manager, "_conns", None)
        self._cluster = getattr(manager, "cluster", None)
        if not isinstance(conns, dict) or not callable(getattr(self._cluster, "topic_id", None)):
            log.warning("event=reconnection-watch-unavailable (this kafka-python keeps its "
                        "connections elsewhere): logs are verified on assignment and when a "
                        "high-water mark falls below a position, not after reconnections")
            self._conns, self._cluster = None, None
            return
        self._conns = conns
        self._known = dict(conns)
        self._topic_id = self.topic_id()

    def topic_id(self) -> str | None:
        """The topic's id in the consumer's metadata (``None``: unknown). O(1)."""
        if self._cluster is None:
            return None
        try:
            tid = self._cluster.topic_id(self.topic)
        except Exception:  # noqa: BLE001 - client internals: never let them stop the loop
            return None
        return None if tid is None else str(tid)

    def changed(self) -> str | None:
        """``"reconnected"``, ``"topic-id-changed"`` or ``None``: whether to verify the logs again.

        O(connections). Call after each poll, before its records are learned.
        """
        if self._conns is None:
            return None
        reason = None
        try:
            current = dict(self._conns)
        except RuntimeError:  # changed size while copied (the IO thread): look next time
            return None
        for node, conn in current.items():
            before = self._known.get(node)
            if before is not None and before is not conn:
                reason = "reconnected"
            self._known[node] = conn
        tid = self.topic_id()
        if tid is not None:
            if self._topic_id is not None and tid != self._topic_id:
                reason = "topic-id-changed"
            self._topic_id = tid
        if reason == "reconnected":
            self.reconnections += 1
        return reason
