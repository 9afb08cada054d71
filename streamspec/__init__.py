"""streamspec: spectral M-estimation of hidden Markov models on live streams."""

from streamspec.accumulator import MomentAccumulator
from streamspec.alphabet import Alphabet
from streamspec.checkpoint import CheckpointError
from streamspec.hmm import HMM
from streamspec.mestimator import MEstimator, MFactors
from streamspec.model import ObservableOperatorModel
from streamspec.refitter import Refitter
from streamspec.river_model import SpectralHMM
from streamspec.spectral import SpectralEstimator

__all__ = [
    "HMM",
    "Alphabet",
    "CheckpointError",
    "MEstimator",
    "MFactors",
    "MomentAccumulator",
    "ObservableOperatorModel",
    "Refitter",
    "SpectralHMM",
    "SpectralEstimator",
]
__version__ = "0.1.0"
