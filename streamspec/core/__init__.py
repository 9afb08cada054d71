"""The mathematics: pure functions and small value classes, arrays in and arrays out.

Counting kernels and sparse triple counts (``triples``), the observable statistics and
moment conditions (``moments``), their weightings (``weighting``), spectral subspaces
(``subspace``), least-squares and lasso solvers (``solvers``), the estimators θ_spec
(``spectral``) and θ_M (``mestimator``), the observable-operator model (``model``), the
Kneser–Ney backoff (``backoff``), rank and filter selection (``selection``), known HMMs
(``hmm``), HMM recovery (``hmm_estimator``, ``hidden_markov_model``), the checkpoint
format (``checkpoint``) and the library's defaults (``defaults``).

Nothing here imports from the layers above (``streamspec.streaming``, the adapters, the
CLI or ``connectors``), holds a thread or does I/O beyond a checkpoint file.
"""
