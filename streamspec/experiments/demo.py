"""``streamspec demo``: learn a built-in HMM from its own stream, printing progress.

Symbols of the paper's ring configuration are streamed into a
:class:`~streamspec.MomentAccumulator` in blocks; after each block θ_spec and θ_M
are refitted (θ_M warm-started from its previous fit) and their held-out log
loss is printed beside that of the true model. Needs no data and no services.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from streamspec.core.hmm import HMM
from streamspec.core.mestimator import MEstimator
from streamspec.core.spectral import SpectralEstimator
from streamspec.experiments.paper_hmms import ring_hmm
from streamspec.streaming.accumulator import MomentAccumulator

__all__ = ["run_demo", "register"]


def run_demo(
    hmm: HMM | None = None,
    rank: int | None = None,
    blocks: int = 8,
    block_size: int = 5_000,
    test_length: int = 20_000,
    random_state: int = 0,
    out=print,
) -> list[dict]:
    """Stream ``blocks × block_size`` symbols, refit after each block, print a table.

    Returns the rows printed (dicts), for scripting and tests.

    Examples
    --------
    >>> rows = run_demo(blocks=2, block_size=2000, test_length=2000, out=lambda s: None)
    >>> [row["symbols"] for row in rows]
    [2000, 4000]
    """
    hmm = hmm if hmm is not None else ring_hmm()
    rank = rank if rank is not None else 3
    rng = np.random.default_rng(random_state)
    stream = hmm.sample(blocks * block_size, random_state=rng.integers(2**32))
    test = [hmm.sample(test_length, random_state=rng.integers(2**32))]
    truth = hmm.operators().with_filter("recursive").log_loss(test)
    short = hmm.sample_many(1000, 4, random_state=rng.integers(2**32))
    true_joint = hmm.operators().joint_proba_many(short)

    def joint_error(model) -> float:
        """The paper's metric: relative norm difference of joint probabilities."""
        est = model.joint_proba_many(short)
        return float(np.linalg.norm(est - true_joint) / np.linalg.norm(true_joint))

    acc = MomentAccumulator(n_symbols=hmm.n_symbols, window=1)
    spectral = SpectralEstimator(rank=rank)
    previous = None
    rows = []
    _print_header(out, hmm, rank)
    for b in range(blocks):
        for x in stream[b * block_size : (b + 1) * block_size].tolist():
            acc.learn_one(x)  # the streaming path, one symbol at a time
        spec_model = spectral.fit(acc)
        t0 = time.perf_counter()
        est = MEstimator(rank=rank, max_outer=3 if previous is None else 1)
        previous = est.fit(acc, init=previous)
        fit_s = time.perf_counter() - t0
        row = {
            "symbols": (b + 1) * block_size,
            "spectral": spec_model.log_loss(test),
            "mestimator": previous.log_loss(test),
            "true": truth,
            "spectral_joint_error": joint_error(spec_model),
            "mestimator_joint_error": joint_error(previous),
            "fit_seconds": fit_s,
        }
        rows.append(row)
        out(_format_row(row))
    return rows


def _print_header(out: Callable[[str], object], hmm: HMM, rank: int) -> None:
    """The demo's title, the meaning of its columns and their headings."""
    out(f"streamspec demo: the paper's ring HMM ({hmm.n_states} states, {hmm.n_symbols} "
        f"symbols), models of rank {rank}")
    out("log loss: held-out nats per symbol (window filter, w = 2); joint error: relative norm "
        "difference of the joint probabilities of 1,000 test sequences of length 4; "
        "lower is better")
    out(f"{'symbols':>9} {'log loss θ_spec':>16} {'θ_M':>8} {'true':>8} "
        f"{'joint error θ_spec':>19} {'θ_M':>8} {'θ_M fit s':>10}")


def _format_row(row: dict) -> str:
    """One row of the demo's table, aligned under :func:`_print_header`'s headings."""
    return (f"{row['symbols']:>9} {row['spectral']:>16.4f} {row['mestimator']:>8.4f} "
            f"{row['true']:>8.4f} {row['spectral_joint_error']:>19.4f} "
            f"{row['mestimator_joint_error']:>8.4f} {row['fit_seconds']:>10.3f}")


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="learn a built-in HMM from its own stream and print the progress "
             "(--kafka: broker, consumer daemon and producer, live)",
        description="Stream symbols from a built-in HMM (the paper's ring) into an accumulator, "
        "refit θ_spec and θ_M after each block, and print held-out log loss beside the true "
        "model's. Needs no data and no services.",
    )
    p.add_argument("--rank", type=int, default=None,
                   help="model rank, 1 to 5 (default 3; with --kafka: the estimator's default)")
    p.add_argument("--blocks", type=int, default=8, help="refits (default 8)")
    p.add_argument("--block-size", type=int, default=5000, help="symbols per block (default 5000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.set_defaults(func=_main)


def _main(args: argparse.Namespace) -> int:
    if args.rank is None:
        args.rank = 3
    if not 1 <= args.rank <= 5 or args.blocks < 1 or args.block_size < 3:
        raise SystemExit("demo: need 1 <= --rank <= 5, --blocks >= 1 and --block-size >= 3")
    run_demo(ring_hmm(), args.rank, args.blocks, args.block_size, random_state=args.seed)
    return 0
