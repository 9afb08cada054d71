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
    "HMM": "streamspec.core.hmm",
    "Alphabet": "streamspec.core.alphabet",
    "Backoff": "streamspec.core.backoff",
    "CheckpointError": "streamspec.core.checkpoint",
    "DenseTooLarge": "streamspec.core.triples",
    "HMMEstimator": "streamspec.core.hmm_estimator",
    "HiddenMarkovModel": "streamspec.core.hidden_markov_model",
    "KneserNeyTrigram": "streamspec.core.trigram",
    "MEstimator": "streamspec.core.mestimator",
    "MFactors": "streamspec.core.factors",
    "MomentAccumulator": "streamspec.streaming.accumulator",
    "ObservableOperatorModel": "streamspec.core.model",
    "Refitter": "streamspec.streaming.refitter",
    "SpectralEstimator": "streamspec.core.spectral",
    "SpectralHMM": "streamspec.adapters.river_model",
    "Triples": "streamspec.core.triples",
    "WithHMM": "streamspec.streaming.with_hmm",
}

__all__ = [
    "Alphabet",
    "Backoff",
    "CheckpointError",
    "DenseTooLarge",
    "HMM",
    "HMMEstimator",
    "HiddenMarkovModel",
    "KneserNeyTrigram",
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
    from streamspec.adapters.river_model import SpectralHMM
    from streamspec.core.alphabet import Alphabet
    from streamspec.core.backoff import Backoff
    from streamspec.core.checkpoint import CheckpointError
    from streamspec.core.factors import MFactors
    from streamspec.core.hidden_markov_model import HiddenMarkovModel
    from streamspec.core.hmm import HMM
    from streamspec.core.hmm_estimator import HMMEstimator
    from streamspec.core.mestimator import MEstimator
    from streamspec.core.model import ObservableOperatorModel
    from streamspec.core.spectral import SpectralEstimator
    from streamspec.core.trigram import KneserNeyTrigram
    from streamspec.core.triples import DenseTooLarge, Triples
    from streamspec.streaming.accumulator import MomentAccumulator
    from streamspec.streaming.refitter import Refitter
    from streamspec.streaming.with_hmm import WithHMM
