"""Kafka clients of the daemon: creation, commits and outage probes, each with backoff.

Every failed attempt is logged on one line with its attempt number and the delay
before the next one (0.5 s doubling up to ``retry_backoff_max``), so an outage is
visible while it lasts and never stops the daemon.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kafka import KafkaConsumer
from kafka.errors import KafkaError

from connectors.config import DEFAULT_BOOTSTRAP, DaemonConfig
from connectors.metrics import DaemonMetrics

__all__ = ["BOOTSTRAP_TIMEOUT_MS", "OFFSETS_TIMEOUT_MS", "METADATA_MAX_AGE_MS", "backoff",
           "connect", "high_water", "Committer", "BrokerProbe"]

log = logging.getLogger("streamspec.daemon")

BOOTSTRAP_TIMEOUT_MS = 2000  # one connection attempt; then the daemon's own backoff
OFFSETS_TIMEOUT_MS = 5000  # one look-up of a partition's log-start / high-water offsets
_COMMIT_TIMEOUT_MS = 3000  # one offset-commit attempt; a failed one is logged, then retried
METADATA_MAX_AGE_MS = 10_000  # the group consumer's topic metadata is refreshed this often


def backoff(attempt: int, cap: float) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1, 2, ...).

    >>> [backoff(n, 3.0) for n in (1, 2, 3, 4)]
    [0.5, 1.0, 2.0, 3.0]
    """
    return min(0.5 * 2 ** min(attempt - 1, 10), cap)


def high_water(consumer: KafkaConsumer, tp) -> int | None:
    """The high-water mark of the last fetch of ``tp`` (``None``: none yet, or not assigned). O(1).

    The fetch's own figure, not ``end_offsets`` (which some brokers answer inexactly).
    """
    try:
        return consumer.highwater(tp)
    except (KafkaError, KeyError, AttributeError):  # IllegalStateError: no longer assigned
        return None


def _consumer(cfg: DaemonConfig, client_id: str) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=cfg.bootstrap.split(","),
        group_id=cfg.group,
        client_id=client_id,
        enable_auto_commit=False,
        # why: an out-of-range offset must be seen (the on_offset_out_of_range
        # policy), never reset silently; every partition is sought explicitly
        auto_offset_reset="none",
        session_timeout_ms=cfg.session_timeout_ms,
        heartbeat_interval_ms=cfg.heartbeat_interval_ms,
        max_poll_interval_ms=cfg.max_poll_interval_ms,
        max_poll_records=cfg.max_poll_records,
        # why: a small response holds about one partition, so partitions take turns
        # (see DaemonConfig.fetch_max_bytes); max_partition_fetch_bytes keeps its 1 MiB
        fetch_max_bytes=cfg.fetch_max_bytes,
        bootstrap_timeout_ms=BOOTSTRAP_TIMEOUT_MS,
        # why: a topic that appears (created late, re-created, back after a broker
        # outage) is noticed within seconds, and the group rebalances onto it; the
        # default (5 minutes) left a daemon without partitions that long
        metadata_max_age_ms=METADATA_MAX_AGE_MS,
    )


def connect(cfg: DaemonConfig, client_id: str, stop: threading.Event,
            others: Callable[[], None]) -> KafkaConsumer | None:
    """The group consumer, once it and the other clients exist; ``None`` if stopped first.

    ``others()`` creates the daemon's other clients (closing what it made if it
    fails); it is called after the consumer, and a failure there closes the
    consumer too.
    Every failure (``KafkaError``, ``OSError``, ``TimeoutError``) is logged and retried
    with exponential backoff until ``stop`` is set.
    """
    delay = 0.5
    while not stop.is_set():
        try:
            consumer = _consumer(cfg, client_id)
            try:
                others()
            except Exception:
                consumer.close(autocommit=False)
                raise
        except (KafkaError, OSError, TimeoutError) as exc:
            log.warning(
                "event=broker-unavailable bootstrap=%s error=%r retry_in=%.1fs%s",
                cfg.bootstrap, str(exc) or type(exc).__name__, delay, _hint(cfg),
            )
            stop.wait(delay)
            delay = min(delay * 2, cfg.retry_backoff_max)
            continue
        return consumer
    return None


def _hint(cfg: DaemonConfig) -> str:
    """What to do when the default address has no broker (no ``--bootstrap`` was given)."""
    if cfg.bootstrap != DEFAULT_BOOTSTRAP:
        return ""
    return (f" hint='no broker answers at {DEFAULT_BOOTSTRAP}, the default address: give yours "
            "with --bootstrap HOST:PORT (or bootstrap = \"HOST:PORT\" in --config)'")


class Committer:
    """Commits offsets: one bounded attempt each; a failed one is logged and backed off.

    The checkpoints already hold the offsets (they are the truth), so a failed
    commit loses nothing: it is tried again after the backoff, and the line per
    failed attempt shows that the broker is unreachable while it is.
    """

    def __init__(self, metrics: DaemonMetrics, backoff_max: float):
        self.metrics, self.backoff_max = metrics, backoff_max
        self.errors = 0  # consecutive failed commits: the backoff
        self.next_commit = 0.0  # monotonic time before which no commit is tried

    def due(self, now: float) -> bool:
        return now >= self.next_commit

    def commit(self, consumer: KafkaConsumer, offsets: dict) -> bool:
        """Commit ``offsets`` (``{tp: OffsetAndMetadata}``); True if the broker took them."""
        try:
            consumer.commit(offsets, timeout_ms=_COMMIT_TIMEOUT_MS)
        except KafkaError as exc:
            self.metrics.commit_failures += 1
            self.errors += 1
            delay = backoff(self.errors, self.backoff_max)
            self.next_commit = time.monotonic() + delay
            log.warning("event=commit-failed attempt=%d error=%r retry_in=%.1fs "
                        "(the checkpoints hold the offsets: nothing is lost)",
                        self.errors, str(exc) or type(exc).__name__, delay)
            return False
        if self.errors:
            log.info("event=commit-recovered failed_attempts=%d", self.errors)
        self.errors, self.next_commit = 0, 0.0
        self.metrics.commits += 1
        return True


class BrokerProbe:
    """After an empty poll: while the group coordinator is unreachable, say so, with backoff.

    An idle daemon has nothing to commit, so without this an outage would be
    silent until the next message. One line per backoff step, as at start-up.
    """

    def __init__(self, metrics: DaemonMetrics, bootstrap: str, backoff_max: float):
        self.metrics, self.bootstrap, self.backoff_max = metrics, bootstrap, backoff_max
        self._down_since: float | None = None
        self._next_log = 0.0
        self._errors = 0

    def probe(self, consumer: KafkaConsumer) -> None:
        coordinator = getattr(consumer, "_coordinator", None)
        try:
            down = coordinator is not None and coordinator.coordinator_unknown()
        except Exception:  # noqa: BLE001 - a private API: never let it stop the loop
            return
        now = time.monotonic()
        if not down:
            if self._down_since is not None:
                log.info("event=broker-available down_seconds=%.1f", now - self._down_since)
            self._down_since = None
            return
        if self._down_since is None:
            self._down_since, self._errors = now, 0
            self._next_log = now
        if now >= self._next_log:
            self._errors += 1
            self.metrics.broker_failures += 1
            delay = backoff(self._errors, self.backoff_max)
            self._next_log = now + delay
            log.warning("event=broker-unavailable bootstrap=%s attempt=%d down_seconds=%.1f "
                        "retry_in=%.1fs", self.bootstrap, self._errors, now - self._down_since,
                        delay)
