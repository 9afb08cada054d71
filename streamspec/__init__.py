"""streamspec: spectral M-estimation of hidden Markov models on live streams."""

from streamspec.accumulator import MomentAccumulator
from streamspec.alphabet import Alphabet
from streamspec.checkpoint import CheckpointError

__all__ = ["Alphabet", "CheckpointError", "MomentAccumulator"]
__version__ = "0.1.0"
