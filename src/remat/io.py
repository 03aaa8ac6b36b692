"""Atomic writes: every file the pipeline or the CLI makes is written to a temp name beside it, then renamed.

A run killed half-way never leaves a truncated CSV, JSON or HTML under the final name (os.replace is atomic
on POSIX within one filesystem). Temp files in flight are registered, so an interrupt handler that exits at
once (remat.cli) can remove them first: ``discard_pending()``.
"""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from remat.errors import UsageError

_PENDING: set[str] = set()  # temp files being written now (removed by discard_pending on an interrupt)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path in the target's folder; rename it onto ``path`` only if the block succeeds.

    Raises UsageError("--out") when ``path`` is a directory or its folder cannot be written."""
    path = Path(path)
    tmp = _temp_beside(path, "--out", ".tmp", make_folder=True)
    _PENDING.add(tmp)
    try:
        yield Path(tmp)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file a normal mode
        os.replace(tmp, path)
    finally:
        _PENDING.discard(tmp)
        if os.path.exists(tmp):
            os.unlink(tmp)


def discard_pending() -> None:
    """Delete every temp file an ``atomic_path`` block is writing now (their final names stay untouched)."""
    for tmp in list(_PENDING):
        try:
            os.unlink(tmp)
        except OSError:
            pass
        _PENDING.discard(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_writable(path: str | os.PathLike, field: str = "--out") -> None:
    """Refuse, before any work, an output path that ``atomic_path`` could not write or would write somewhere
    unasked: a directory, a folder that does not exist (it is not created), a folder this user cannot write.
    Raises UsageError(field)."""
    path = Path(path)
    if not path.is_dir() and not path.parent.is_dir():
        raise UsageError(field, f"folder {path.parent} does not exist (it is not created: make it first)")
    os.unlink(_temp_beside(path, field, ".check"))  # a trial file: os.access says yes to root on /proc


def _temp_beside(path: Path, field: str, suffix: str, make_folder: bool = False) -> str:
    """A new empty file in ``path``'s folder (made first with ``make_folder``), closed; its name. Raises
    UsageError(field) when ``path`` is a directory or the folder cannot be written."""
    if path.is_dir():
        raise UsageError(field, f"{path} is a directory; give a file name")
    try:
        if make_folder:
            path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    except OSError as exc:
        raise UsageError(field, f"cannot write into folder {path.parent} ({exc.strerror})") from None
    os.close(fd)
    return tmp


def write_text(path: str | os.PathLike, text: str) -> None:
    """Write ``text`` to ``path`` atomically (UTF-8)."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj) -> None:
    """Write ``obj`` as indented JSON, atomically."""
    write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")


def write_csv(path: str | os.PathLike, frame) -> None:
    """Write a pandas DataFrame as CSV (no index), atomically."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)
