"""The embedded data set of the Kafka demo: page views of web sessions, from a known HMM.

Needs no data folder. Every user is one keyed stream of page views; the hidden
state is what the user is after (browsing, buying, getting help, reading), which a
page alone does not tell (``product`` is seen while browsing and while buying, a
``search`` ends in either), so that the hidden state adds to what the last page says.
The true model's own prediction gives the best log loss any predictor can reach.
"""

from __future__ import annotations

import numpy as np

from streamspec.core.hidden_markov_model import HiddenMarkovModel

__all__ = ["PAGES", "interleave", "session_hmm", "session_streams", "true_log_loss"]

PAGES = ["home", "search", "category", "product", "reviews", "cart", "checkout", "payment",
         "help", "faq", "contact", "account", "blog", "article"]

_INTENTS = {  # hidden state -> (page, weight) it shows
    "browse": {"home": 2, "search": 3, "category": 4, "product": 5, "reviews": 2},
    "buy": {"product": 3, "cart": 4, "checkout": 3, "payment": 2, "search": 1},
    "help": {"help": 4, "faq": 3, "contact": 2, "account": 2, "search": 1},
    "read": {"blog": 4, "article": 6, "home": 1, "category": 1},
}
_STAY = {"browse": 0.80, "buy": 0.70, "help": 0.75, "read": 0.85}
_NEXT = {"browse": {"buy": 0.6, "help": 0.2, "read": 0.2}, "buy": {"browse": 0.7, "help": 0.3},
         "help": {"browse": 0.6, "buy": 0.2, "read": 0.2},
         "read": {"browse": 0.7, "help": 0.1, "buy": 0.2}}


def session_hmm() -> HiddenMarkovModel:
    """The 4-state HMM of the sessions (states: browse, buy, help, read), labelled by page.

    >>> hmm = session_hmm()
    >>> hmm.n_states, hmm.n_symbols, hmm.symbols[:3]
    (4, 14, ['home', 'search', 'category'])
    """
    states = list(_INTENTS)
    A = np.zeros((4, 4))
    for i, s in enumerate(states):
        A[i, i] = _STAY[s]
        for t, w in _NEXT[s].items():
            A[i, states.index(t)] = (1 - _STAY[s]) * w
    E = np.zeros((4, len(PAGES)))
    for i, s in enumerate(states):
        for page, w in _INTENTS[s].items():
            E[i, PAGES.index(page)] = w
    E /= E.sum(axis=1, keepdims=True)
    return HiddenMarkovModel([0.55, 0.1, 0.15, 0.2], A / A.sum(axis=1, keepdims=True), E,
                             symbols=PAGES)


def session_streams(n_users: int = 16, length: int = 5000, seed: int = 0) -> dict[str, list]:
    """``{user: pages}``: ``n_users`` streams of ``length`` page views each, seeded.

    >>> streams = session_streams(2, 5)
    >>> sorted(streams), len(streams["user-0"])
    (['user-0', 'user-1'], 5)
    """
    hmm = session_hmm()
    return {f"user-{u}": hmm.sample(length, random_state=seed + u)[0] for u in range(n_users)}


def interleave(streams: dict[str, list], seed: int = 0) -> list[tuple[str, str]]:
    """``(key, symbol)`` pairs of all streams, interleaved at random (each in its order).

    >>> interleave({"a": ["x", "y"], "b": ["z"]}, seed=1)
    [('a', 'x'), ('a', 'y'), ('b', 'z')]
    """
    rng = np.random.default_rng(seed)
    keys = [k for k, seq in streams.items() for _ in seq]
    order = rng.permutation(len(keys))
    pos = dict.fromkeys(streams, 0)
    out = []
    for i in order.tolist():
        key = keys[i]
        out.append((key, streams[key][pos[key]]))
        pos[key] += 1
    return out


def true_log_loss(streams: dict[str, list]) -> float:
    """The true model's next-page log loss (nats per page view), each stream filtered whole.

    >>> bool(true_log_loss(session_streams(2, 2000)) < np.log(len(PAGES)))  # beats uniform
    True
    """
    hmm = session_hmm()
    total = sum(-hmm.score(seq) for seq in streams.values())
    return total / sum(len(seq) for seq in streams.values())
