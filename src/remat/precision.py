"""The precision a device computes natively, and the dtype a run picks by it: one home for "auto".

    precision("auto", "cpu")   # Precision("float32", "auto: float32, as bfloat16 is emulated here (...)") on AVX2
    precision("bfloat16", "cpu").reason    # "set: bfloat16, EMULATED here: ..." where the CPU lacks a bf16 flag

torch is imported only to ask about a 16-bit dtype: the numpy engine's rows (float32/float64) never pay for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")
"""CPU flags (/proc/cpuinfo) of native bfloat16 arithmetic: x86's AVX-512 BF16 and AMX-BF16, Arm's BF16 extension.
Without one, torch's CPU kernels emulate bfloat16 by converting to float32 and back: on a 2-core Zen 3 EPYC (AVX2)
one 512×2048 by 2048×2048 matmul took 15.6 s in bfloat16 against 54 ms in float32, and a GPT layer's backward
8.1× its forward instead of float32's 1.6× — times of another machine than the one being replicated."""
AUTO = "auto"
DTYPES = ("float32", "float64", "bfloat16", "float16")


@dataclass(frozen=True)
class Precision:
    """The dtype a run computes in, why it was chosen and whether the device computes it natively (a row's
    ``dtype``, ``dtype_reason`` and ``dtype_native`` columns)."""

    dtype: str
    reason: str
    native: bool = True


def bf16_flags(cpuinfo: str) -> list[str]:
    """The NATIVE_BF16_FLAGS that /proc/cpuinfo's text lists (x86's ``flags`` lines, Arm's ``Features``)."""
    flags = set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            flags.update(value.split())
    return [f for f in NATIVE_BF16_FLAGS if f in flags]


@lru_cache(maxsize=1)
def cpu_bf16() -> tuple[bool, str]:
    """(whether this CPU computes bfloat16 natively, the evidence in words): a flag of NATIVE_BF16_FLAGS in
    /proc/cpuinfo, beside torch's CPU capability ("AVX2", "AVX512"). Where the flags cannot be read (not Linux), not
    native: float32 is the safe side (native on every CPU)."""
    import torch
    capability = torch.backends.cpu.get_cpu_capability()
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False, f"torch capability {capability}; CPU flags unreadable"
    found = bf16_flags(text)
    if found:
        return True, f"torch capability {capability}, {'/'.join(found)}"
    return False, f"torch capability {capability}, no {'/'.join(NATIVE_BF16_FLAGS)} flag"


def native(dtype: str, device: str) -> tuple[bool, str]:
    """(whether ``device`` computes ``dtype`` natively, the evidence): 16-bit floats on a CPU only with a bf16
    flag (float16 is emulated on CPUs alike), on CUDA bfloat16 where torch says so (Ampere and later); 32- and
    64-bit floats everywhere."""
    kind = str(device).split(":")[0]
    if dtype in ("float32", "float64") or kind == "fake":
        return True, "fake tensors compute nothing" if kind == "fake" else "native on every device"
    if kind == "cuda":
        import torch
        ok = dtype == "float16" or torch.cuda.is_bf16_supported(including_emulation=False)
        return ok, torch.cuda.get_device_name() if torch.cuda.is_available() else "no CUDA device"
    has, evidence = cpu_bf16()
    return has and dtype == "bfloat16", evidence


def precision(requested: str | None, device: str, given: str = "set") -> Precision:
    """The dtype a run on ``device`` computes in. ``requested`` "auto" (or None): the paper's 16-bit bfloat16 where
    ``device`` computes it natively (a GPU since Ampere, a CPU with a bf16 flag, fake tensors), else float32 (on
    a CPU that emulates bfloat16, and on an older GPU: float16 there). Any other name is used as given, and the
    reason, which starts with ``given`` ("set" in a config, "the model's" own), says whether the device computes it
    natively."""
    if requested in (None, AUTO):
        kind = str(device).split(":")[0]
        has, evidence = native("bfloat16", device)
        if has:
            return Precision("bfloat16", f"auto: bfloat16, native here ({evidence})")
        fallback = "float16" if kind == "cuda" else "float32"
        return Precision(fallback, f"auto: {fallback}, as bfloat16 is emulated here ({evidence})")
    has, evidence = native(requested, device)
    said = "native here" if has else "EMULATED here: times are not this device's own"
    return Precision(requested, f"{given}: {requested}, {said} ({evidence})", has)
