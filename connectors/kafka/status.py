"""The daemon's status line and Prometheus metrics, rendered from its public state.

One ``event=status`` line every ``status_interval`` seconds::

    event=status rate=… records=… lag=… partitions=0,1 refits=… last_loss=… dead_letters=…
    model_version=… symbols=… counts_mb=… failed=- paused=- refit_failures=0 offsets=0:…,1:…

followed, with the state topic, by ``refitter=`` and ``global_records=``.
``offsets`` is the next offset to read of each assigned partition.
"""

from __future__ import annotations

import logging
import math
from typing import Protocol

from connectors.metrics import DaemonMetrics

__all__ = ["Reportable", "status_line", "render_metrics"]

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

    def offsets(self) -> dict[int, int]: ...


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
    return (
        f"rate={rate:.0f}/s records={m.records} lag={'?' if lag is None else lag} "
        f"partitions={_partitions(sorted(daemon.states))} refits={m.refits} "
        f"last_loss={'nan' if math.isnan(m.last_loss) else f'{m.last_loss:.6g}'} "
        f"dead_letters={sum(m.dead_letters.values())} model_version={daemon.model_version} "
        f"symbols={daemon.n_symbols()} counts_mb={daemon.counts_bytes() / 1e6:.1f} "
        f"failed={failed or '-'} paused={_partitions(daemon.paused())} "
        f"refit_failures={daemon.refit_failures()}{extra} offsets={offsets or '-'}"
    )


def render_metrics(daemon: Reportable, connected: bool) -> str:
    """The Prometheus text of the daemon's counters and gauges."""
    lag = daemon.lag() if connected else None
    daemon.refit_failures()
    gauges = {"partitions": len(daemon.states), "model_version": daemon.model_version,
              "counts_bytes": daemon.counts_bytes(), "symbols": daemon.n_symbols(),
              "failed_partitions": len(daemon.failed), "paused_partitions": len(daemon.paused()),
              **daemon.extra_status()}
    if lag is not None:
        gauges["lag"] = lag
    return daemon.metrics.prometheus(gauges)
