"""A daemon left without partitions: said in the log, the status line and the metrics; rejoined.

After a broker outage the group can revoke a daemon's partitions and not give them
back: the daemon then reads nothing while looking healthy (``lag`` is unknown,
nothing fails). :class:`GroupWatch` notices a daemon to which the group assigns no
partition for longer than a bound, ``max(5 s, 2
session timeouts)``, logs ``event=no-partitions`` (how long, how many partitions
the topic has, or that it does not exist), shows ``unassigned=`` in the status
line and ``streamspec_unassigned_seconds`` in the metrics, and joins the group
again (unsubscribe, subscribe: a fresh metadata request and a rebalance), backing
off (the bound doubling, at most :data:`REJOIN_BACKOFF_MAX`) while nothing comes.

A member of a group with more members than partitions also holds nothing, for
good: it is told so by the same line, and its rejoins are rare.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kafka import KafkaConsumer

from connectors.config import DaemonConfig
from connectors.metrics import DaemonMetrics

__all__ = ["GroupWatch", "REJOIN_BACKOFF_MAX"]

log = logging.getLogger("streamspec.daemon")

REJOIN_BACKOFF_MAX = 600.0  # seconds: an idle member of an oversized group rejoins this rarely


class GroupWatch:
    """Notices a daemon without partitions for longer than a bound; says so and rejoins.

    Parameters
    ----------
    config
        The topic, the group, and ``session_timeout_ms`` (the bound is two of them, 5 s
        at least).
    metrics
        ``rejoins`` is counted here.

    Attributes
    ----------
    bound
        Seconds without partitions before it is reported.
    """

    def __init__(self, config: DaemonConfig, metrics: DaemonMetrics):
        self.config, self.metrics = config, metrics
        self.bound = max(5.0, 2 * config.session_timeout_ms / 1000)
        self._since: float | None = None
        self._next_try = 0.0
        self._attempts = 0

    @staticmethod
    def holding(consumer: KafkaConsumer) -> bool:
        """Whether the group gave this member any partition (read, failed or being restored)."""
        try:
            return bool(consumer.assignment())
        except Exception:  # noqa: BLE001 - only for the report: say nothing rather than stop
            return True

    def unassigned_seconds(self) -> float:
        """Seconds without any partition (0 while holding some)."""
        return 0.0 if self._since is None else time.monotonic() - self._since

    def reported(self) -> bool:
        """Whether the daemon is without partitions and has said so."""
        return self._attempts > 0

    def check(self, consumer: KafkaConsumer, rejoin: Callable[[], None]) -> None:
        """Once per poll: report and rejoin when the bound has passed without partitions."""
        now = time.monotonic()
        if self.holding(consumer):
            if self._attempts:
                log.info("event=partitions-regained after=%.1fs rejoins=%d",
                         now - self._since, self._attempts)
            self._since, self._attempts = None, 0
            return
        if self._since is None:
            self._since, self._next_try = now, now + self.bound
            return
        if now < self._next_try:
            return
        self._attempts += 1
        self.metrics.rejoins += 1
        delay = min(self.bound * 2 ** self._attempts, max(REJOIN_BACKOFF_MAX, self.bound))
        self._next_try = now + delay
        cfg = self.config
        try:
            known = consumer.partitions_for_topic(cfg.topic)
        except Exception:  # noqa: BLE001 - only for the message
            known = None
        what = (f"the topic has {len(known)} partitions: if other members of the group hold "
                f"them all, this one is idle (run at most {len(known)} daemons)" if known else
                f"topic {cfg.topic} does not exist on {cfg.bootstrap} (yet)")
        log.warning("event=no-partitions group=%s topic=%s seconds=%.1f attempt=%d (revoked or "
                    "never assigned, not reassigned within %.0f s; %s) action=rejoin "
                    "retry_in=%.0fs", cfg.group, cfg.topic, now - self._since, self._attempts,
                    self.bound, what, delay)
        rejoin()
