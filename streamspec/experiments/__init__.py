"""Experiments: the paper's section 5 (``paper`` and its ``paper_*`` parts, with the EM
baseline in ``em_baseline``), the real data sets (``datasets``, ``datasets_chorales``,
``datasets_dodgers``), the n-gram baseline (``baselines``), the river benchmarks' keyed
stream (``cluster_walks``) and the built-in demonstration (``demo``).
"""
