"""Experiments: the paper's section 5 (``paper``), the real data sets (``datasets``),
n-gram and EM baselines (``baselines``) and the built-in demonstration (``demo``).
"""
