"""streamspec: spectral M-estimation of hidden Markov models on live streams.

The names below are imported on first use (PEP 562), so that ``import streamspec``
costs only numpy and scipy: river is loaded with :class:`SpectralHMM` (the river
adapter), kafka-python only by the connectors.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.2.0"

# public name -> module that defines it
_EXPORTS = {
    "HMM": "streamspec.hmm",
    "Alphabet": "streamspec.alphabet",
    "Backoff": "streamspec.backoff",
    "CheckpointError": "streamspec.checkpoint",
    "DenseTooLarge": "streamspec.triples",
    "HMMEstimator": "streamspec.hmm_estimator",
    "HiddenMarkovModel": "streamspec.hidden_markov_model",
    "KneserNeyBigram": "streamspec.backoff",
    "MEstimator": "streamspec.mestimator",
    "MFactors": "streamspec.mestimator",
    "MomentAccumulator": "streamspec.accumulator",
    "ObservableOperatorModel": "streamspec.model",
    "Refitter": "streamspec.refitter",
    "SpectralEstimator": "streamspec.spectral",
    "SpectralHMM": "streamspec.river_model",
    "Triples": "streamspec.triples",
    "WithHMM": "streamspec.with_hmm",
}

__all__ = [
    "Alphabet",
    "Backoff",
    "CheckpointError",
    "DenseTooLarge",
    "HMM",
    "HMMEstimator",
    "HiddenMarkovModel",
    "KneserNeyBigram",
    "MEstimator",
    "MFactors",
    "MomentAccumulator",
    "ObservableOperatorModel",
    "Refitter",
    "SpectralEstimator",
    "SpectralHMM",
    "Triples",
    "WithHMM",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'streamspec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # static checkers and IDEs see the names as if imported eagerly
    from streamspec.accumulator import MomentAccumulator
    from streamspec.alphabet import Alphabet
    from streamspec.backoff import Backoff, KneserNeyBigram
    from streamspec.checkpoint import CheckpointError
    from streamspec.hidden_markov_model import HiddenMarkovModel
    from streamspec.hmm import HMM
    from streamspec.hmm_estimator import HMMEstimator
    from streamspec.mestimator import MEstimator, MFactors
    from streamspec.model import ObservableOperatorModel
    from streamspec.refitter import Refitter
    from streamspec.river_model import SpectralHMM
    from streamspec.spectral import SpectralEstimator
    from streamspec.triples import DenseTooLarge, Triples
    from streamspec.with_hmm import WithHMM
