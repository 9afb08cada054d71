"""Checkpoint files: npz arrays plus a JSON header, versioned and checksummed, never pickled.

A checkpoint is one ``.npz`` archive holding the named float/int arrays of the
object and one more entry, ``__header__``: a JSON document with the format name,
its version, the object's scalar settings and a SHA-256 checksum of everything
else. Loading refuses archives that hold Python objects (``allow_pickle=False``),
a foreign format name, a newer version, a checksum that does not match, and
arrays holding NaN or infinity.

Writes are atomic: the archive is written to a temporary file in the same
folder, flushed to disk with ``fsync``, then renamed over the target, so a crash
leaves either the old checkpoint or the new one, never half of one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np

__all__ = [
    "CheckpointError",
    "write_checkpoint",
    "write_atomic",
    "remove_stale_temporaries",
    "read_checkpoint",
    "dump_checkpoint",
    "load_checkpoint_bytes",
    "encode_value",
    "decode_value",
    "check_metadata",
]

_HEADER = "__header__"
_ZIP_MAGIC = b"PK\x03\x04"  # every npz archive (a zip file) starts with these bytes


class CheckpointError(ValueError):
    """A checkpoint file is missing, corrupt, foreign or of an unsupported version."""


def encode_value(v):
    """JSON-safe form of a symbol label or stream key (str, int, float, bool, None, bytes, tuple)."""
    if v is None or isinstance(v, bool | str):
        return v
    if isinstance(v, int | np.integer):
        return int(v)
    if isinstance(v, float | np.floating):
        return {"float": float(v)}
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, tuple):
        return {"tuple": [encode_value(x) for x in v]}
    raise CheckpointError(
        f"cannot store {v!r} of type {type(v).__name__}: labels and keys must be str, int, "
        "float, bool, bytes, None or tuples of these"
    )


def check_metadata(metadata) -> dict[str, str]:
    """A copy of a model's ``metadata`` (None: ``{}``), refused unless a dict of str to str.

    Strings only, so that it is stored in the JSON header as it is and reads back
    equal. O(entries).

    Examples
    --------
    >>> check_metadata({"encoding": "utf-8"})
    {'encoding': 'utf-8'}
    >>> check_metadata(None)
    {}
    """
    if metadata is None:
        return {}
    if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise ValueError(f"metadata must be a dict of str to str, got {metadata!r}")
    return dict(metadata)


def decode_value(v):
    if isinstance(v, dict):
        if "float" in v:
            return float(v["float"])
        if "bytes" in v:
            return bytes.fromhex(v["bytes"])
        if "tuple" in v:
            return tuple(decode_value(x) for x in v["tuple"])
        raise CheckpointError(f"unknown encoded value {v!r}")
    return v


def _digest(header: dict, arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    h.update(json.dumps(header, sort_keys=True, separators=(",", ":")).encode())
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode())
        h.update(str(a.dtype.str).encode())
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def dump_checkpoint(kind: str, version: int, header: dict, arrays: dict[str, np.ndarray]) -> bytes:
    """Serialise to bytes (used for files and for Kafka messages alike)."""
    for name, a in arrays.items():
        if name == _HEADER:
            raise ValueError(f"array name {_HEADER!r} is reserved")
        if a.dtype.kind == "O":
            raise ValueError(f"array {name!r} holds Python objects; checkpoints never pickle")
    full = {"format": kind, "version": int(version), **header}
    full["checksum"] = _digest(full, arrays)
    buf = io.BytesIO()
    np.savez(buf, **{_HEADER: np.array(json.dumps(full, sort_keys=True))}, **arrays)
    return buf.getvalue()


def load_checkpoint_bytes(
    data: bytes, kind: str, max_version: int, source: str = "checkpoint"
) -> tuple[dict, dict[str, np.ndarray]]:
    """Parse and verify bytes written by :func:`dump_checkpoint`."""
    if not data.startswith(_ZIP_MAGIC):
        # why: np.load would try other formats and report e.g. its allow_pickle refusal,
        # which says nothing useful about a damaged file
        what = "an empty file" if not data else f"{len(data)} bytes that are not an npz archive"
        raise CheckpointError(f"{source}: corrupt checkpoint ({what})")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            if _HEADER not in z.files:
                raise CheckpointError(f"{source}: not a streamspec checkpoint (no header)")
            header = json.loads(str(z[_HEADER]))
            arrays = {name: z[name] for name in z.files if name != _HEADER}
    except CheckpointError:
        raise
    except Exception as exc:  # zipfile and numpy raise many kinds on damaged bytes
        # why: numpy's refusal of pickled arrays names its allow_pickle flag, which
        # misleads; say what the archive holds instead
        why = ("it holds Python objects, which a checkpoint never does"
               if "allow_pickle" in str(exc) else f"{type(exc).__name__}: {exc}")
        raise CheckpointError(f"{source}: corrupt or unreadable checkpoint ({why})") from None
    if not isinstance(header, dict) or header.get("format") != kind:
        found = header.get("format") if isinstance(header, dict) else None
        raise CheckpointError(f"{source}: expected a {kind!r} checkpoint, found format {found!r}")
    version = header.get("version")
    if not isinstance(version, int) or version < 1 or version > max_version:
        raise CheckpointError(
            f"{source}: {kind} checkpoint version {version!r} is not supported "
            f"(this streamspec reads versions 1..{max_version})"
        )
    stored = header.pop("checksum", None)
    if stored != _digest(header, arrays):
        raise CheckpointError(f"{source}: checksum mismatch, the checkpoint is corrupt")
    for name, a in arrays.items():
        if a.dtype.kind == "f" and not np.isfinite(a).all():
            raise CheckpointError(f"{source}: array {name!r} holds NaN or infinite values")
    return header, arrays


def write_checkpoint(
    path: str | os.PathLike, kind: str, version: int, header: dict, arrays: dict[str, np.ndarray]
) -> Path:
    """Atomically write a checkpoint file (temp file, fsync, rename, fsync of the folder)."""
    return write_atomic(path, dump_checkpoint(kind, version, header, arrays))


def write_atomic(path: str | os.PathLike, data: bytes) -> Path:
    """Write bytes atomically: temporary file, fsync, rename, fsync of the folder. O(size).

    The temporary file is ``.<name>.<random>.tmp`` next to ``path``: a process killed
    while writing leaves it behind, and :func:`remove_stale_temporaries` removes it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def remove_stale_temporaries(folder: str | os.PathLike, name: str) -> list[Path]:
    """Remove the temporary files that an interrupted :func:`write_atomic` of ``name`` left.

    Call it only while no other process writes ``name`` in ``folder`` (e.g. when a
    partition is assigned to this process). Returns the removed paths. O(files in folder).
    """
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    for p in folder.glob(f".{glob_escape(name)}.*.tmp"):
        try:
            p.unlink()
            removed.append(p)
        except FileNotFoundError:
            pass
    return removed


def glob_escape(text: str) -> str:
    """``text`` with the glob metacharacters escaped."""
    return "".join(f"[{c}]" if c in "*?[" else c for c in text)


def read_checkpoint(
    path: str | os.PathLike, kind: str, max_version: int
) -> tuple[dict, dict[str, np.ndarray]]:
    """Read and verify a checkpoint file; raises :class:`CheckpointError` on any defect."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such checkpoint file") from None
    return load_checkpoint_bytes(data, kind, max_version, source=str(path))
