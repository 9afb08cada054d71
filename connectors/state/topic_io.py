"""Kafka topics read whole: to the high-water marks once, or followed in a thread; created.

The plumbing of the state topic (:mod:`connectors.state.snapshots`,
:mod:`connectors.state.topic`) and of the model topic
(:mod:`connectors.kafka.refit_policy`): plain consumers without a group, assigned
every partition and sought to the beginning. A partition is read to its end when
the consumer's position reaches the high-water mark returned by the fetches (not
``end_offsets``, which Tansu gets wrong).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

__all__ = ["read_topic", "partition_count", "ensure_topic", "TopicFollower"]

log = logging.getLogger("streamspec.daemon")


def _consumer(bootstrap: str, client_id: str) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=bootstrap.split(","),
        group_id=None,
        client_id=client_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        allow_auto_create_topics=False,
        max_partition_fetch_bytes=16 << 20,
        fetch_max_bytes=64 << 20,
    )


def read_topic(
    bootstrap: str,
    topic: str,
    on_message: Callable,
    partitions: Iterable[int] | None = None,
    timeout: float = 30.0,
    client_id: str = "streamspec-reader",
) -> None:
    """Read ``topic`` (or some of its partitions) from the beginning up to its high-water marks.

    A plain consumer without a group is assigned the partitions, reads until its
    position reaches every partition's high-water mark as returned by the fetches
    (not ``end_offsets``, which Tansu gets wrong), calls ``on_message(m)`` for every
    message, and is closed. ``KafkaError`` (or ``TimeoutError`` after ``timeout``
    seconds) if the broker cannot be read.
    """
    consumer = _consumer(bootstrap, client_id)
    try:
        known = consumer.partitions_for_topic(topic)
        if not known:
            return  # no such topic yet: nothing was ever written
        wanted = sorted(known) if partitions is None else sorted(set(partitions) & set(known))
        tps = [TopicPartition(topic, q) for q in wanted]
        if not tps:
            return
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while True:
            for messages in consumer.poll(timeout_ms=100).values():
                for m in messages:
                    on_message(m)
            if all(_caught_up(consumer, tp) for tp in tps):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"could not read {topic} to its end in {timeout:.0f} s")
    finally:
        consumer.close(autocommit=False)


def _caught_up(consumer: KafkaConsumer, tp: TopicPartition) -> bool:
    hw = consumer.highwater(tp)
    return hw is not None and consumer.position(tp) >= hw


def partition_count(bootstrap: str, topic: str) -> int:
    """Number of partitions of ``topic`` (0 if it does not exist)."""
    consumer = _consumer(bootstrap, "streamspec-metadata")
    try:
        return len(consumer.partitions_for_topic(topic) or ())
    finally:
        consumer.close(autocommit=False)


def ensure_topic(bootstrap: str, topic: str, partitions: int, compact: bool = True) -> None:
    """Create ``topic`` with ``partitions`` partitions unless it exists (compacted if asked).

    Kafka compacts it (``cleanup.policy=compact``); a broker that ignores the
    setting (Tansu) keeps every snapshot, which readers skip.
    """
    from kafka.admin import KafkaAdminClient, NewTopic
    from kafka.errors import TopicAlreadyExistsError

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), client_id="streamspec-admin")
    try:
        if topic in set(admin.list_topics()):
            return
        configs = {"cleanup.policy": "compact"} if compact else {}
        try:
            admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1,
                                          topic_configs=configs)])
        except TopicAlreadyExistsError:
            pass  # another daemon created it first
    finally:
        admin.close()


class TopicFollower:
    """A background thread reading whole topics from the beginning and then following them.

    Every message goes to ``on_message`` (in the follower's thread). :attr:`caught_up`
    is set once the follower has reached the high-water marks of all partitions it
    found at start. Errors of the broker are logged and retried; :meth:`close` stops it.

    Parameters
    ----------
    bootstrap
        Broker address.
    topic
        The topic to follow (all its partitions).
    on_message
        Called with every ``ConsumerRecord``.
    client_id
        Kafka client id.
    """

    def __init__(self, bootstrap: str, topic: str, on_message: Callable, client_id: str):
        self.bootstrap, self.topic, self.client_id = bootstrap, topic, client_id
        self.on_message = on_message
        self.caught_up = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"follow-{topic}", daemon=True)

    def start(self) -> TopicFollower:
        self._thread.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        delay = 0.5
        while not self._stop.is_set():
            consumer = None
            try:
                consumer = _consumer(self.bootstrap, self.client_id)
                tps: list[TopicPartition] = []
                while not self._stop.is_set():
                    known = consumer.partitions_for_topic(self.topic) or set()
                    if len(known) != len(tps):  # the topic appeared (or grew): read it all
                        tps = [TopicPartition(self.topic, q) for q in sorted(known)]
                        consumer.assign(tps)
                        consumer.seek_to_beginning(*tps)
                    if not tps:
                        self._stop.wait(0.2)
                        continue
                    for messages in consumer.poll(timeout_ms=200).values():
                        for m in messages:
                            self.on_message(m)
                    if not self.caught_up.is_set() and all(_caught_up(consumer, tp) for tp in tps):
                        self.caught_up.set()
                    delay = 0.5
            except (KafkaError, OSError) as exc:
                log.warning("event=follower-error topic=%s error=%r retry_in=%.1fs",
                            self.topic, str(exc), delay)
                self._stop.wait(delay)
                delay = min(delay * 2, 30.0)
            finally:
                if consumer is not None:
                    try:
                        consumer.close(autocommit=False)
                    except KafkaError:
                        pass
