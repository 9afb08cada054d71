"""The daemon's counters, its status line, and an optional Prometheus-style endpoint.

Examples
--------
>>> m = DaemonMetrics()
>>> m.records += 10
>>> m.dead_letters["empty"] += 2
>>> text = m.prometheus({"lag": 3})
>>> print(text.splitlines()[1])
streamspec_records_total 10
>>> 'streamspec_dead_letters_total{reason="empty"} 2' in text
True
>>> text = m.prometheus(per_partition={"prequential_log_loss": ("gauge", {0: 1.25, 3: 1.5})})
>>> [ln for ln in text.splitlines() if "prequential" in ln]  # doctest: +NORMALIZE_WHITESPACE
['# TYPE streamspec_prequential_log_loss gauge', 'streamspec_prequential_log_loss{partition="0"} 1.25',
 'streamspec_prequential_log_loss{partition="3"} 1.5']
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["DaemonMetrics", "MetricsServer"]


@dataclass
class DaemonMetrics:
    """Counters since the daemon started (not persisted: checkpoints hold the exact counts)."""

    records: int = 0
    messages: int = 0
    dead_letters: Counter = field(default_factory=Counter)
    checkpoints: int = 0
    commits: int = 0
    commit_failures: int = 0
    refits: int = 0
    last_loss: float = math.nan
    last_fit_seconds: float = math.nan
    last_fit_cpu_seconds: float = math.nan
    predictions: int = 0
    unreadable_checkpoints: int = 0
    refit_failures: int = 0
    model_publish_failures: int = 0
    broker_failures: int = 0
    verifications: int = 0
    log_mismatches: int = 0
    log_resets: int = 0
    records_deleted_unread: int = 0
    rejoins: int = 0
    reconnections: int = 0
    started: float = field(default_factory=time.monotonic)
    _last_status_time: float = field(default_factory=time.monotonic)
    _last_status_messages: int = 0

    def rate_since_last_status(self) -> float:
        """Messages per second since the previous call."""
        now = time.monotonic()
        dt = now - self._last_status_time
        rate = (self.messages - self._last_status_messages) / dt if dt > 0 else 0.0
        self._last_status_time, self._last_status_messages = now, self.messages
        return rate

    def prometheus(self, gauges: dict[str, float] | None = None,
                   per_partition: dict[str, tuple[str, dict[int, float]]] | None = None) -> str:
        """The counters (and extra gauges) in the Prometheus text exposition format.

        ``per_partition``: ``{name: (type, {partition: value})}``, one series per
        partition (label ``partition``), e.g. the prequential log loss.
        """
        lines = [
            "# TYPE streamspec_records_total counter",
            f"streamspec_records_total {self.records}",
            "# TYPE streamspec_messages_total counter",
            f"streamspec_messages_total {self.messages}",
            "# TYPE streamspec_dead_letters_total counter",
        ]
        for reason, n in sorted(self.dead_letters.items()):
            lines.append(f'streamspec_dead_letters_total{{reason="{reason}"}} {n}')
        lines += [
            "# TYPE streamspec_checkpoints_total counter",
            f"streamspec_checkpoints_total {self.checkpoints}",
            "# TYPE streamspec_commits_total counter",
            f"streamspec_commits_total {self.commits}",
            "# TYPE streamspec_commit_failures_total counter",
            f"streamspec_commit_failures_total {self.commit_failures}",
            "# TYPE streamspec_refits_total counter",
            f"streamspec_refits_total {self.refits}",
            "# TYPE streamspec_unreadable_checkpoints_total counter",
            f"streamspec_unreadable_checkpoints_total {self.unreadable_checkpoints}",
            "# TYPE streamspec_refit_failures_total counter",
            f"streamspec_refit_failures_total {self.refit_failures}",
            "# TYPE streamspec_broker_failures_total counter",
            f"streamspec_broker_failures_total {self.broker_failures}",
            "# TYPE streamspec_predictions_total counter",
            f"streamspec_predictions_total {self.predictions}",
        ]
        lines += _counters({
            "log_verifications_total": self.verifications,
            "log_mismatches_total": self.log_mismatches,
            "log_resets_total": self.log_resets,
            "records_deleted_unread_total": self.records_deleted_unread,
            "rejoins_total": self.rejoins,
            "reconnections_total": self.reconnections,
        })
        lines += [
            "# TYPE streamspec_last_loss gauge",
            f"streamspec_last_loss {_num(self.last_loss)}",
            "# TYPE streamspec_last_fit_seconds gauge",
            f"streamspec_last_fit_seconds {_num(self.last_fit_seconds)}",
            "# TYPE streamspec_uptime_seconds gauge",
            f"streamspec_uptime_seconds {time.monotonic() - self.started:.3f}",
        ]
        for name, value in sorted((gauges or {}).items()):
            lines += [f"# TYPE streamspec_{name} gauge", f"streamspec_{name} {_num(value)}"]
        for name, (kind, values) in sorted((per_partition or {}).items()):
            lines.append(f"# TYPE streamspec_{name} {kind}")
            lines += [f'streamspec_{name}{{partition="{p}"}} {_num(v)}'
                      for p, v in sorted(values.items())]
        return "\n".join(lines) + "\n"


def _counters(values: dict[str, int]) -> list[str]:
    return [line for name, v in values.items()
            for line in (f"# TYPE streamspec_{name} counter", f"streamspec_{name} {v}")]


def _num(x: float) -> str:
    return "NaN" if isinstance(x, float) and math.isnan(x) else f"{x:g}"


class MetricsServer:
    """Serve ``render()`` at ``http://127.0.0.1:PORT/metrics`` from a daemon thread.

    Parameters
    ----------
    render
        Returns the metrics text; called on every request.
    port
        0 picks a free port (see :attr:`port`).
    """

    def __init__(self, render: Callable[[], str], port: int = 0, host: str = "127.0.0.1"):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.rstrip("/") not in ("/metrics", ""):
                    self.send_error(404)
                    return
                body = render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="streamspec-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
