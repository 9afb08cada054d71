"""Checkpoint files as the commands read them: one clear error for what is no checkpoint.

Also where ``learn --states`` puts its HMM (``MODEL.hmm``) and the rank a model uses.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["HMM_SUFFIX", "hmm_path", "load_checkpoint_file", "model_rank"]


def model_rank(model) -> int:
    """The rank a fitted model uses: its ``rank`` when it records one, else its dimension."""
    rank = getattr(model, "rank", None)
    if isinstance(rank, int | np.integer) and not isinstance(rank, bool):
        return int(rank)
    return int(model.dim)


HMM_SUFFIX = ".hmm"  # learn --states K --out M: the HMM is saved as M.hmm


def hmm_path(model_path: str | os.PathLike) -> str:
    """Where ``learn --states K --out MODEL`` saves the HMM: ``MODEL.hmm``."""
    return os.fspath(model_path) + HMM_SUFFIX



_ZIP_MAGIC = b"PK\x03\x04"  # every checkpoint is an npz, that is a zip archive


def load_checkpoint_file(path: str | os.PathLike, load: Callable[[Path], Any],
                         what: str = "model checkpoint") -> Any:
    """``load(path)`` for a checkpoint file, with one clear error for anything else.

    Raises :class:`~streamspec.core.checkpoint.CheckpointError` "not a streamspec
    model checkpoint: PATH (why)" (``what``: the noun) for a directory, a missing file, or a file that
    is no checkpoint (an image, random bytes, ...), and passes on the loader's own
    errors for a damaged or foreign checkpoint. O(size of the file).
    """
    from connectors.file_checks import looks_like
    from streamspec.core.checkpoint import CheckpointError

    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"not a streamspec {what}: {path} (a directory)")
    try:
        with path.open("rb") as fh:
            head = fh.read(16)
    except FileNotFoundError:
        raise CheckpointError(f"not a streamspec {what}: {path} (no such file)") from None
    if not head.startswith(_ZIP_MAGIC):
        why = looks_like(head).removeprefix(", ") or (
            "a text file" if _is_text(head) else "its first bytes are not a checkpoint's")
        raise CheckpointError(f"not a streamspec {what}: {path} ({why})")
    return load(path)  # a damaged or foreign checkpoint: the loader's own CheckpointError


def _is_text(head: bytes) -> bool:
    """Whether the first bytes of a file look like text (UTF-8, no NUL)."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return b"\x00" not in head
