"""The daemon's status line and Prometheus metrics, rendered from its public state.

:class:`Reporting` holds the daemon's figures (lag, offsets, memory, paused
partitions, the refit policy's own); :func:`status_line` and
:func:`render_metrics` render them.

One ``event=status`` line every ``status_interval`` seconds::

    event=status rate=… records=… lag=… partitions=0,1 refits=… last_loss=… dead_letters=…
    model_version=… symbols=… counts_mb=… failed=- paused=- refit_failures=0
    loss=0:…,1:… scored=0:…,1:… offsets=0:…,1:…

followed, with the state topic, by ``refitter=`` and ``global_records=``.
``offsets`` is the next offset to read of each assigned partition. ``symbols`` is
the alphabet of the partitions' merged counts (the one refits fit). ``loss`` is each
partition's prequential log loss (nats per symbol: every scored symbol predicted by the
model served before it was learned, since the partition was first read; carried by its
checkpoint) and ``scored`` how many symbols that is (``-`` before any:
:mod:`connectors.kafka.scoring`); the metrics give both per partition
(``streamspec_prequential_log_loss``, ``streamspec_scored_symbols_total``, and
``streamspec_prequential_loss_nats_total``, whose rate over the scored symbols' rate is
the loss of a recent window). Only when
there is something to say: ``refit_error=`` (the exception of the last refit, if
it failed), ``deleted_unread=`` (records deleted before they were read, since
start), ``log_resets=`` (partitions read again from a new log's start) and
``unassigned=`` (seconds without any partition, once reported).
"""

from __future__ import annotations

import logging
import math
from typing import Protocol

from kafka import KafkaConsumer, TopicPartition

from connectors.kafka.assignment import Assignment
from connectors.kafka.group_watch import GroupWatch
from connectors.kafka.lifecycle import Services
from connectors.kafka.outputs import Outputs
from connectors.kafka.refit_policy import RefitPolicy
from connectors.kafka.scoring import Scoring, describe
from connectors.metrics import DaemonMetrics
from connectors.state.backend import StateBackend
from streamspec.core.model import ObservableOperatorModel

__all__ = ["Reportable", "Reporting", "status_line", "render_metrics"]

log = logging.getLogger("streamspec.daemon")


class Reportable(Protocol):
    """What the status line and the metrics read of a daemon."""

    metrics: DaemonMetrics
    failed: dict
    states: dict

    @property
    def model_version(self) -> int: ...

    def lag(self) -> int | None: ...

    def counts_bytes(self) -> int: ...

    def n_symbols(self) -> int: ...

    def paused(self) -> list: ...

    def refit_failures(self) -> int: ...

    def extra_status(self) -> dict[str, int]: ...

    def unassigned_seconds(self) -> float: ...

    def offsets(self) -> dict[int, int]: ...

    def notes(self) -> dict[str, str]: ...

    def prequential(self) -> dict: ...


class Reporting:
    """The daemon's figures, read from its collaborators (a base of the daemon).

    Reads the attributes ``assignment``, ``backend``, ``refits``, ``outputs``,
    ``services`` and ``consumer`` (``None`` until connected) of the daemon.
    """

    assignment: Assignment
    backend: StateBackend
    refits: RefitPolicy
    outputs: Outputs
    services: Services
    consumer: KafkaConsumer | None
    group_watch: GroupWatch
    scoring: Scoring

    @property
    def model(self) -> ObservableOperatorModel | None:
        """The model served (``None`` before the first one)."""
        return self.outputs.model

    @property
    def model_version(self) -> int:
        return self.outputs.version

    @property
    def metrics_port(self) -> int | None:
        return self.services.port

    def lag(self) -> int | None:
        """Messages behind the high-water marks (``None``: unknown, or a partition failed)."""
        return self.assignment.lag(self.consumer)

    def counts_bytes(self) -> int:
        """Memory taken by the counts of the assigned partitions."""
        return self.assignment.counts_bytes()

    def offsets(self) -> dict[int, int]:
        """The next offset to read of every assigned partition."""
        return self.assignment.offsets()

    def n_symbols(self) -> int:
        """Largest alphabet among the assigned partitions."""
        return self.assignment.n_symbols()

    def paused(self) -> list[TopicPartition]:
        """Partitions taken but not read yet: waiting for their state or their offset check."""
        with self.assignment.lock:
            return sorted(self.backend.pending | set(self.assignment.to_verify))

    def refit_failures(self) -> int:
        """Failed refits so far."""
        return self.refits.refit_failures()

    def extra_status(self) -> dict[str, int]:
        """The refit policy's figures (with the state topic: ``refitter``, ``global_records``)."""
        return self.refits.status()

    def prequential(self) -> dict:
        """``{partition: LearnedWeights}`` of the partitions held that scored a symbol."""
        with self.assignment.lock:
            return self.scoring.status(self.assignment.states)

    def unassigned_seconds(self) -> float:
        """Seconds without any partition (0 while holding some)."""
        return self.group_watch.unassigned_seconds()

    def notes(self) -> dict[str, str]:
        """The status line's fields that appear only when there is something to say."""
        m, out = self.metrics, {}
        error = self.refits.last_refit_error()
        if error:
            out["refit_error"] = error
        if m.records_deleted_unread:
            out["deleted_unread"] = str(m.records_deleted_unread)
        if m.log_resets:
            out["log_resets"] = str(m.log_resets)
        if self.group_watch.reported():
            out["unassigned"] = f"{self.unassigned_seconds():.0f}s"
        return out


def _partitions(tps) -> str:
    return ",".join(str(tp.partition) for tp in tps) or "-"


def status_line(daemon: Reportable) -> str:
    """The text of one status line (after ``event=status``)."""
    m = daemon.metrics
    rate = m.rate_since_last_status()
    lag = daemon.lag()
    failed = ",".join(f"{tp.partition}:{r}" for tp, r in sorted(daemon.failed.items()))
    extra = "".join(f" {k}={v}" for k, v in daemon.extra_status().items())
    offsets = ",".join(f"{p}:{o}" for p, o in sorted(daemon.offsets().items()))
    notes = "".join(f" {k}={v}" for k, v in daemon.notes().items())
    loss, scored = describe(daemon.prequential())
    return (
        f"rate={rate:.0f}/s records={m.records} lag={'?' if lag is None else lag} "
        f"partitions={_partitions(sorted(daemon.states))} refits={m.refits} "
        f"last_loss={'nan' if math.isnan(m.last_loss) else f'{m.last_loss:.6g}'} "
        f"dead_letters={sum(m.dead_letters.values())} model_version={daemon.model_version} "
        f"symbols={daemon.n_symbols()} counts_mb={daemon.counts_bytes() / 1e6:.1f} "
        f"failed={failed or '-'} paused={_partitions(daemon.paused())} "
        f"refit_failures={daemon.refit_failures()}{notes}{extra} loss={loss} scored={scored} "
        f"offsets={offsets or '-'}"
    )


def render_metrics(daemon: Reportable, connected: bool) -> str:
    """The Prometheus text of the daemon's counters and gauges."""
    lag = daemon.lag() if connected else None
    daemon.refit_failures()
    gauges = {"partitions": len(daemon.states), "model_version": daemon.model_version,
              "counts_bytes": daemon.counts_bytes(), "symbols": daemon.n_symbols(),
              "failed_partitions": len(daemon.failed), "paused_partitions": len(daemon.paused()),
              "unassigned_seconds": round(daemon.unassigned_seconds(), 1),
              **daemon.extra_status()}
    if lag is not None:
        gauges["lag"] = lag
    learned = daemon.prequential()
    per_partition = {
        "prequential_log_loss": ("gauge", {p: w.log_loss for p, w in learned.items()}),
        "prequential_loss_nats_total": ("counter", {p: w.loss for p, w in learned.items()}),
        "scored_symbols_total": ("counter", {p: w.scored for p, w in learned.items()}),
    }
    return daemon.metrics.prometheus(gauges, per_partition)
