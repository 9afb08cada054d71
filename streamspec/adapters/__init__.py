"""Adapters of the library to other frameworks: the river online model (``river_model``).

The only part of :mod:`streamspec` that imports river.
"""
