"""Where torch code runs: one resolver for device names and one out-of-memory detector, for the whole package.

Device names a user may give: ``cpu``, ``cuda`` (or ``cuda:i``) and, where a caller allows it, ``fake``
(FakeTensorMode on the CPU: shapes and bytes without memory). Bad names and ``cuda`` without CUDA raise
``UsageError(field)`` — one line, exit 2 at the CLI.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch

from remat.errors import UsageError

DeviceName = Literal["cpu", "cuda", "fake"]
DEVICES: tuple[str, ...] = get_args(DeviceName)


def resolve_device(device: str | torch.device, field: str = "device",
                   allowed: tuple[str, ...] = ("cpu", "cuda"), need_cuda: bool = True) -> torch.device:
    """``device`` as a torch.device: ``cpu``, ``cuda:i`` (index filled in) or, when ``"fake"`` is in
    ``allowed``, the CPU device fake tensors are made on.

    Raises UsageError(field) for a device type not in ``allowed``, or (``need_cuda``) for cuda when CUDA is
    not available — fake CUDA tensors (FakeTensorMode) need no CUDA, so tracing passes need_cuda=False.
    """
    if str(device) == "fake":
        if "fake" not in allowed:
            raise UsageError(field, f"fake is not supported here (use {' or '.join(allowed)})")
        return torch.device("cpu")
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise UsageError(field, f"unknown device {device!r} (use {' or '.join(allowed)})") from None
    if dev.type not in allowed:
        raise UsageError(field, f"unsupported device {device!r} (use {' or '.join(allowed)})")
    available = dev.type == "cuda" and torch.cuda.is_available()
    if dev.type == "cuda" and need_cuda and not available:
        raise UsageError(field, "cuda requested but CUDA is not available on this machine")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device() if available else 0)
    return dev


def default_device() -> str:
    """``"cuda"`` when a CUDA device is visible, else ``"cpu"``."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def is_out_of_memory(exc: BaseException | None) -> bool:
    """An allocation failure: host MemoryError, torch.OutOfMemoryError (CUDA), or the CPU allocator's
    RuntimeError ("DefaultCPUAllocator: can't allocate memory" / "... out of memory"); or an error raised from one
    (a recompute's, which remat.policies re-raises naming its region)."""
    if exc is None:
        return False
    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(exc).lower()
    plain = isinstance(exc, RuntimeError) and ("can't allocate memory" in text or "out of memory" in text)
    return plain or is_out_of_memory(exc.__cause__)


def release_memory(device: str | torch.device) -> None:
    """Collect garbage and, on CUDA, return cached blocks to the driver (after an OOM, between points). The first
    call then freezes what survives it (modules, caches: gc.freeze), so later calls scan only what was made since
    (a full collection of a process that imported torch takes ~0.1 s)."""
    import gc
    gc.collect()
    if not gc.get_freeze_count():
        gc.freeze()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()

