"""Streaming state: the moment accumulator of keyed streams (``accumulator``), the
warm-started refitter (``refitter``) and the estimator that also fits an HMM with every
refit (``with_hmm``). Built on :mod:`streamspec.core` only.
"""
