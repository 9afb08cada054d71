"""The estimator contract: parameters stored verbatim, read back, copied (river's ``Base``).

An estimator stores each constructor parameter, unchanged, as the attribute of the same
name; what a fit learns goes in the returned model or in ``_``-suffixed attributes.
Then :func:`get_params` can read the parameters back from the signature of
``__init__``, and :func:`clone` can build a fresh, unfitted copy with some of them
changed. Both are written once, here, for every estimator.
"""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["Estimator", "get_params", "clone"]


def get_params(estimator: Any) -> dict[str, Any]:
    """The constructor parameters of ``estimator``, read from the same-named attributes.

    Works for any object following the convention (not only :class:`Estimator`): the
    refitter accepts those too. O(number of parameters).

    Examples
    --------
    >>> class Coin:
    ...     def __init__(self, *, p: float = 0.5):
    ...         self.p = p
    >>> get_params(Coin(p=0.25))
    {'p': 0.25}
    """
    params = {}
    for name, p in inspect.signature(type(estimator).__init__).parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if hasattr(estimator, name):
            params[name] = getattr(estimator, name)
    return params


def clone(estimator: Any, **changes: Any) -> Any:
    """A new, unfitted estimator of the same class with the same parameters, ``changes`` applied.

    Parameters are passed by keyword; nothing fitted (no ``_``-suffixed attribute) is
    copied. Raises ``TypeError`` for a name that is not a parameter.

    Examples
    --------
    >>> class Coin:
    ...     def __init__(self, *, p: float = 0.5):
    ...         self.p = p
    >>> clone(Coin(p=0.25), p=0.75).p
    0.75
    """
    params = get_params(estimator)
    unknown = set(changes) - set(params)
    if unknown:
        raise TypeError(f"{type(estimator).__name__} has no parameter {', '.join(sorted(unknown))}")
    return type(estimator)(**(params | changes))


class Estimator:
    """Base of the estimators: :meth:`get_params`, :meth:`clone` and a ``repr`` of the parameters.

    Subclasses store every ``__init__`` parameter verbatim as a same-named attribute
    (keyword-only) and validate them in one place (``_validate``, built on
    :func:`streamspec.core.defaults.check_settings`).
    """

    def get_params(self) -> dict[str, Any]:
        """The constructor parameters (:func:`get_params`)."""
        return get_params(self)

    def clone(self, **changes: Any) -> Estimator:
        """A fresh copy with ``changes`` applied (:func:`clone`); the original is untouched."""
        return clone(self, **changes)

    def warm_start(self, sweeps: int) -> Estimator | None:
        """The estimator for a warm refit of at most ``sweeps`` steps, or ``None``.

        ``None`` (the default): this estimator has no warm start, refits are cold.
        Estimators whose ``fit`` takes ``init`` return a copy bounded to ``sweeps``.
        """
        return None

    def __repr__(self) -> str:
        # why: only the parameters that differ from their defaults, as scikit-learn prints
        defaults = {n: p.default for n, p in inspect.signature(type(self).__init__).parameters.items()}
        shown = []
        for name, value in self.get_params().items():
            default = defaults.get(name, inspect.Parameter.empty)
            same = default is not inspect.Parameter.empty and type(value) is type(default) and (
                value == default)
            if not same:
                shown.append(f"{name}={value!r}")
        return f"{type(self).__name__}({', '.join(shown)})"
