"""The package's shape: what ``import streamspec`` loads, and no import cycles."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _loaded_after(code: str) -> set[str]:
    """Top-level modules loaded by ``code`` in a fresh interpreter."""
    out = subprocess.run(
        [sys.executable, "-c", f"import sys\n{code}\n"
         "import json; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_import_streamspec_loads_neither_river_nor_kafka():
    loaded = _loaded_after("import streamspec")
    assert "streamspec" in loaded
    assert not loaded & {"river", "kafka", "connectors"}, sorted(loaded & {"river", "kafka"})


def test_the_core_names_load_without_river_and_the_river_model_loads_it():
    core = _loaded_after("from streamspec import MEstimator, SpectralEstimator, "
                        "MomentAccumulator, HMMEstimator, ObservableOperatorModel")
    assert not core & {"river", "kafka"}
    assert "river" in _loaded_after("from streamspec import SpectralHMM")


def test_every_public_name_resolves():
    import streamspec

    for name in streamspec.__all__:
        assert getattr(streamspec, name).__name__ == name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        streamspec.nope  # noqa: B018
