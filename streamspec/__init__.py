"""streamspec: spectral M-estimation of hidden Markov models on live streams."""

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

__all__ = [
    "HMM",
    "Alphabet",
    "Backoff",
    "CheckpointError",
    "DenseTooLarge",
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
__version__ = "0.2.0"
