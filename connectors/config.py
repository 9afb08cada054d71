"""Settings of the consumer daemon: one dataclass, loadable from TOML, overridable by flags.

A TOML file holds the same names as :class:`DaemonConfig`, at the top level or
under a ``[consume]`` table, and the record format options (see
:func:`connectors.records.format_from_options`) under ``[format]``::

    bootstrap = "127.0.0.1:9092"
    topic = "clicks"
    group = "streamspec"
    state_dir = "/var/lib/streamspec"
    rank = 3
    refit_every = 20000

    [format]
    value_format = "json"
    symbol_field = "page"

Command-line flags override the file: :meth:`DaemonConfig.replace` ignores the
flags that were not given (``None``).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from connectors.malformed import parse_limit
from streamspec.core import defaults
from streamspec.core.windows import MAX_WINDOW

__all__ = ["DaemonConfig", "load_toml", "mestimator_params", "ESTIMATOR_SETTINGS",
           "DEFAULT_BOOTSTRAP", "SCORE_EVERY"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"  # used when no broker address is given

ESTIMATOR_SETTINGS = {  # setting of the CLI and the daemon -> parameter of MEstimator
    "rank": "rank",
    "penalty": "penalty",
    "weighting": "weighting",
    "sweeps": "max_sweeps",
    "outer": "max_outer",
    "formulation": "formulation",
}
_WARM_SWEEPS = defaults.WARM_SWEEPS  # sweeps of a warm-started refit when ``sweeps`` is not given
SCORE_EVERY = 16  # the daemon scores its partitions' symbols 0, N, 2N, ... (docs/kafka-daemon.md)


def mestimator_params(**settings: Any) -> dict[str, Any]:
    """MEstimator keyword arguments of the given estimator settings; ``None`` means its default.

    The one place where the CLI (``streamspec learn``) and the daemon turn their
    settings into estimator parameters: unset settings are left out, so that
    :class:`~streamspec.core.mestimator.MEstimator`'s own defaults apply, whatever they
    are. O(1).

    Examples
    --------
    >>> mestimator_params(rank=3, weighting=None, sweeps=4)
    {'rank': 3, 'max_sweeps': 4}
    """
    out = {}
    for name, value in settings.items():
        if name not in ESTIMATOR_SETTINGS:
            raise ValueError(f"unknown estimator setting {name!r}")
        param = ESTIMATOR_SETTINGS[name]
        if value is not None:
            out[param] = value
    return out


_MODES = ("sliding", "sequences")
_BACKENDS = ("local", "kafka")
_OUT_OF_RANGE = ("fail", "reset")


@dataclass(frozen=True)
class DaemonConfig:
    """Every setting of :class:`connectors.kafka.ConsumerDaemon`.

    Parameters
    ----------
    topic
        The topic to consume (required).
    bootstrap
        ``HOST:PORT`` of a broker (a comma-separated list is accepted).
    group
        Consumer group id. Daemons of one group split the partitions.
    state_dir
        Folder of the per-partition checkpoints and of the current model. Daemons
        sharing it (on one host) can take over each other's partitions.
    client_id
        Kafka client id (default ``streamspec-<pid>``).
    format
        Record format options (``value_format``, ``key_field``, ``symbol_field``,
        ``max_bytes``, ...), passed to :func:`connectors.records.format_from_options`.
    alphabet
        A fixed alphabet: records with any other symbol are dead letters
        (reason ``unknown-symbol``). ``None`` (default): the alphabet grows.
    mode
        Accumulator mode, ``"sliding"`` or ``"sequences"``.
    max_symbols
        Cap of every partition's alphabet (``None``: unbounded). Once full, new labels
        are counted as the reserved symbol ``"<other>"``, so that the counts stay
        bounded on open vocabularies (see :class:`~streamspec.MomentAccumulator`).
    window
        The window L of every partition's counts (``MomentAccumulator(window=L)``):
        ``"auto"`` (the default, ``defaults.COUNT_WINDOW``): the smallest L with n^L >= 128
        for the partition's alphabet so far (1, plain triples, from 128 symbols on; 1 in
        sequences mode with a growing alphabet); 1 counts triples; L >= 2 counts the
        (2L+1)-grams around each symbol, so that the refits' HMM (the predictor's, and
        ``hmm_states``) can have more hidden states than symbols. A partition checkpoint
        keeps the window it was counted with (files written before windows: 1); partitions
        of different windows merge at the shortest of their windows (``MomentAccumulator.merge``).
    max_malformed
        When skipping malformed messages (dead letters) becomes failure, as for files
        (:mod:`connectors.malformed`): a count, a share ``"P%"`` or ``None``/``"none"``
        (the default: never; a daemon's poison messages go to its dead-letter topic).
        Past it the daemon stops cleanly (checkpoint, commit) with exit status 3.
    hmm_states
        If set, every refit also fits a hidden Markov model with this many states on
        the same counts (:class:`~streamspec.WithHMM`, warm-started from the previous
        one), saved beside the model as ``<state_dir>/<topic>/model.ckpt.hmm`` and, with a
        models topic, published after each model (:mod:`connectors.model_topic`).
    rank, penalty, weighting, sweeps, outer, formulation
        Settings of the :class:`~streamspec.core.mestimator.MEstimator` refits
        (``sweeps`` is ``max_sweeps``, ``outer`` is ``max_outer``); ``None`` (the
        default) leaves MEstimator's own default (:func:`mestimator_params`; all in
        :mod:`streamspec.core.defaults`). Warm refits run ``sweeps`` sweeps
        (``streamspec.core.defaults.WARM_SWEEPS`` when unset). Checked when the config
        is built, by the same rules as MEstimator's
        (:func:`streamspec.core.defaults.check_settings`).
    refit_every
        Refit after this many new records (0: never by count).
    refit_interval
        Also refit when this many seconds passed since the last one and new records
        arrived (``None``: never by time).
    min_triples
        No refit before the counts hold this many triples.
    refit_process
        Run each fit in a worker process (default) rather than a thread of the
        daemon, so that it never competes with the poll loop for the interpreter lock.
    refit_duty
        Longest fraction of one core spent fitting, in (0, 1]: after a fit of T CPU
        seconds the next one waits ``T * (1 - duty) / duty`` seconds (default 0.5:
        at most half of one core goes to refits, however fast records arrive). CPU
        seconds, not wall time: a fit slowed by other work on the cores is not
        followed by a longer wait.
    refit_nice
        The refit worker process's niceness increment, 0 to 19 (default 0: the
        consumer's priority; the duty cycle already keeps refits to half of one core).
        10 makes consuming go first on busy cores, but on cores shared with other jobs
        the refits, and so the model's age, then wait for those too
        (``demos/bench_model_age.py``; docs/kafka-daemon.md, "Model age").
    checkpoint_every, checkpoint_interval
        Write the checkpoints (then commit offsets) after this many records or
        seconds, whichever comes first.
    score_every
        Once a model is served, each partition's symbols numbered 0, N, 2N, ... are
        predicted before they are learned (:mod:`connectors.kafka.scoring`): their
        prequential log loss is reported per partition, and the mixing weights learn
        from them (saved in the partition's checkpoint). Every symbol still moves its
        stream's context and hidden state. 1: every symbol; 0: none (no loss, the weights
        stay the model's). With a predictions topic every symbol is scored.
    dead_letter_topic
        Where poison messages go (default ``<topic>.dead-letters``; ``""``: nowhere,
        they are only counted and logged).
    predictions_topic
        If set, one JSON message per record with the next-symbol distribution.
    models_topic
        If set, every refitted model, as :meth:`ObservableOperatorModel.to_bytes`.
    poll_timeout_ms, max_poll_records
        Poll loop settings.
    fetch_max_bytes
        Most bytes one fetch response may carry, over all partitions (default
        1 MiB, the most one partition may give; kafka-python's own default is
        50 MiB). Kept small so that a backlog is read from every partition in
        turn: the client hands out a response one partition at a time and asks
        next for the partitions it holds nothing of, so each response, filled by
        the broker up to this size, is about one partition's turn. A record batch
        larger than this is still fetched whole.
    session_timeout_ms, heartbeat_interval_ms, max_poll_interval_ms
        Consumer group timings.
    status_interval
        Seconds between status lines (0: none).
    metrics_port
        Serve Prometheus-style metrics on ``127.0.0.1:PORT/metrics`` (0 picks a free
        port; ``None``: no endpoint).
    retry_backoff_max
        Longest wait, in seconds, between attempts to reach an unavailable broker.
    state_backend
        ``"local"`` (default): one checkpoint file per partition in ``state_dir``,
        and each daemon refits on the partitions it owns. ``"kafka"``: each
        partition's state is published as a cumulative snapshot to
        ``state_topic`` and restored from it on assignment (no shared file
        system); the owner of partition 0 refits on the global counts and
        publishes to the model topic, which every daemon serves from (see
        :mod:`connectors.state.snapshots` and :mod:`connectors.model_topic`).
    state_topic
        The state topic of the kafka backend (default ``<topic>.state``; created
        with as many partitions as the source topic).
    on_offset_out_of_range
        What to do with a partition whose log is not the one its checkpoint was read
        from (the last record counted is not at its offset any more, the topic id
        changed, or the log ends before it: the topic was deleted and re-created, the
        broker lost its log, a leader election truncated it), and with records deleted
        before they were read (retention ahead of the daemon). ``"fail"`` (default):
        the partition is not read, an error names it, the checkpoint's record and what
        the log holds now, and the exit status is not 0. ``"reset"``: keep the counts
        and read on, from the new log's start or after the deleted records, logging
        how many records cannot be vouched for (deleted ones are counted in the
        checkpoint). See :mod:`connectors.kafka.verification`.

    Examples
    --------
    >>> cfg = DaemonConfig(topic="clicks")
    >>> cfg.dead_letter_topic_name
    'clicks.dead-letters'
    >>> cfg.replace(rank=3, group=None).rank, cfg.group
    (3, 'streamspec')
    >>> kafka = cfg.replace(state_backend="kafka")
    >>> kafka.state_topic_name, kafka.model_topic_name, cfg.model_topic_name
    ('clicks.state', 'clicks.models', None)
    >>> DaemonConfig(topic="clicks", mode="batch")
    Traceback (most recent call last):
    ...
    ValueError: mode must be one of ('sliding', 'sequences'), got 'batch'
    >>> DaemonConfig(topic="clicks", weighting="bogus")
    Traceback (most recent call last):
    ...
    ValueError: weighting must be one of 'identity', 'diagonal', 'per_symbol', 'exact'; got 'bogus'

    """

    topic: str
    bootstrap: str = DEFAULT_BOOTSTRAP
    group: str = "streamspec"
    state_dir: str = "streamspec-state"
    client_id: str | None = None
    format: Mapping[str, Any] = field(default_factory=dict)
    alphabet: tuple | None = None
    mode: str = "sliding"
    max_symbols: int | None = None
    window: int | str = defaults.COUNT_WINDOW
    hmm_states: int | None = None
    rank: int | str | None = None
    penalty: float | None = None
    weighting: str | None = None
    sweeps: int | None = None
    outer: int | None = None
    formulation: str | None = None
    refit_every: int = 20_000
    refit_interval: float | None = None
    min_triples: int = 100
    refit_process: bool = True
    refit_duty: float = 0.5
    refit_nice: int = 0
    checkpoint_every: int = 50_000
    score_every: int = SCORE_EVERY
    checkpoint_interval: float = 1.0
    dead_letter_topic: str | None = None
    predictions_topic: str | None = None
    models_topic: str | None = None
    poll_timeout_ms: int = 200
    max_poll_records: int = 2000
    fetch_max_bytes: int = 1 << 20
    session_timeout_ms: int = 6000
    heartbeat_interval_ms: int = 1000
    max_poll_interval_ms: int = 60_000
    status_interval: float = 10.0
    metrics_port: int | None = None
    retry_backoff_max: float = 30.0
    state_backend: str = "local"
    state_topic: str | None = None
    on_offset_out_of_range: str = "fail"
    max_malformed: str | int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.topic, str) or not self.topic:
            raise ValueError("topic must be a non-empty string")
        if self.state_backend not in _BACKENDS:
            raise ValueError(f"state_backend must be one of {_BACKENDS}, got {self.state_backend!r}")
        if self.on_offset_out_of_range not in _OUT_OF_RANGE:
            raise ValueError(f"on_offset_out_of_range must be one of {_OUT_OF_RANGE}, "
                             f"got {self.on_offset_out_of_range!r}")
        if self.mode not in _MODES:
            raise ValueError(f"mode must be one of {_MODES}, got {self.mode!r}")
        if self.alphabet is not None:
            object.__setattr__(self, "alphabet", tuple(self.alphabet))
            if not self.alphabet:
                raise ValueError("a fixed alphabet needs at least one symbol")
        if not isinstance(self.format, Mapping):
            raise ValueError(f"format must be a table of options, got {self.format!r}")
        object.__setattr__(self, "format", dict(self.format))
        for name in ("refit_every", "checkpoint_every", "min_triples", "score_every"):
            if _bad_int(getattr(self, name), minimum=0):
                raise ValueError(f"{name} must be an integer >= 0, got {getattr(self, name)!r}")
        if self.window != "auto" and (_bad_int(self.window, minimum=1) or self.window > MAX_WINDOW):
            raise ValueError(f"window must be 'auto' or an integer in 1..{MAX_WINDOW}, "
                             f"got {self.window!r}")
        for name in ("max_symbols", "hmm_states"):
            if getattr(self, name) is not None and _bad_int(getattr(self, name), minimum=1):
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        # the estimator settings: the same rules as MEstimator's (unset: its default)
        defaults.check_settings(**{name: getattr(self, name) for name in ESTIMATOR_SETTINGS
                                   if getattr(self, name) is not None})
        for name in (
            "poll_timeout_ms", "max_poll_records", "fetch_max_bytes", "session_timeout_ms",
            "heartbeat_interval_ms", "max_poll_interval_ms",
        ):
            if _bad_int(getattr(self, name), minimum=1):
                raise ValueError(f"{name} must be a positive integer, got {getattr(self, name)!r}")
        for name in ("checkpoint_interval", "retry_backoff_max", "status_interval"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int | float) or v < 0:
                raise ValueError(f"{name} must be a number >= 0, got {v!r}")
        if _bad_int(self.refit_nice, minimum=0) or self.refit_nice > 19:
            raise ValueError(f"refit_nice must be an integer in 0..19, got {self.refit_nice!r}")
        if isinstance(self.refit_duty, bool) or not isinstance(self.refit_duty, int | float) or (
            not 0 < self.refit_duty <= 1
        ):
            raise ValueError(f"refit_duty must be a number in (0, 1], got {self.refit_duty!r}")
        if self.refit_interval is not None and not (
            isinstance(self.refit_interval, int | float) and self.refit_interval > 0
        ):
            raise ValueError(f"refit_interval must be a positive number or None, "
                             f"got {self.refit_interval!r}")
        if self.metrics_port is not None and _bad_int(self.metrics_port, minimum=0):
            raise ValueError(f"metrics_port must be a port number, got {self.metrics_port!r}")
        if self.max_malformed is not None:
            parse_limit(self.max_malformed)  # the one policy of files and Kafka

    @property
    def warm_sweeps(self) -> int:
        """Sweeps of a warm-started refit: ``sweeps``, or ``streamspec.core.defaults.WARM_SWEEPS``."""
        return self.sweeps if self.sweeps is not None else _WARM_SWEEPS

    @property
    def dead_letter_topic_name(self) -> str | None:
        """The dead-letter topic, or ``None`` when dead letters are only counted."""
        if self.dead_letter_topic is None:
            return f"{self.topic}.dead-letters"
        return self.dead_letter_topic or None

    @property
    def state_topic_name(self) -> str:
        """The state topic of the kafka backend."""
        return self.state_topic or f"{self.topic}.state"

    @property
    def model_topic_name(self) -> str | None:
        """Where models are published: ``models_topic``, or ``<topic>.models`` with the kafka backend."""
        if self.models_topic or self.state_backend != "kafka":
            return self.models_topic or None
        return f"{self.topic}.models"

    def replace(self, **overrides: Any) -> DaemonConfig:
        """A copy with the given settings changed; ``None`` values are ignored."""
        given = {k: v for k, v in overrides.items() if v is not None}
        if "format" in given:
            given["format"] = {**self.format, **given["format"]}
        return replace(self, **given)

    def to_dict(self) -> dict[str, Any]:
        """The settings as plain data (for logs)."""
        return asdict(self)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], **overrides: Any) -> DaemonConfig:
        """Settings from a parsed TOML document (see the module docstring) and overrides."""
        data = dict(data)
        table = data.pop("consume", {})
        if not isinstance(table, Mapping):
            raise ValueError("[consume] must be a table")
        data.update(table)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(
                f"unknown setting(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        merged = {**data, **{k: v for k, v in overrides.items() if v is not None}}
        if "format" in data and "format" in overrides and overrides["format"] is not None:
            merged["format"] = {**data["format"], **overrides["format"]}
        if "topic" not in merged:
            raise ValueError("no topic given (--topic or topic = ... in the settings file)")
        return cls(**merged)


def load_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML settings file; ``ValueError`` naming the file on a syntax error."""
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: {exc}") from None


def _bad_int(v: Any, minimum: int) -> bool:
    return isinstance(v, bool) or not isinstance(v, int) or v < minimum
