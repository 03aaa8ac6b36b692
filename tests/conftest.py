"""Shared fixtures: the repository root and a copy of the project in a temp dir (for pipeline runs)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def pytest_collection_modifyitems(config, items):
    """The ``gpu`` marker (``@pytest.mark.gpu`` or ``gpu(devices=N)``): skipped unless N CUDA devices exist."""
    import torch
    available = torch.cuda.device_count() if torch.cuda.is_available() else 0
    for item in items:
        marker = item.get_closest_marker("gpu")
        need = marker.kwargs.get("devices", 1) if marker else 0
        if need > available:
            item.add_marker(pytest.mark.skip(reason=f"needs {need} CUDA device(s), found {available}"))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


def copy_project(dest: Path) -> Path:
    """Copy the files git would ship (tracked + untracked, not ignored) into ``dest``."""
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout.split()
    for rel in files:
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """remat.cli.main(argv) in-process: its exit code (argparse errors exit through SystemExit), stdout, stderr."""
    from remat.cli import main
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def run_env() -> dict:
    """Environment with this interpreter's bin/ first on PATH (so rules find `remat`)."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    return env


def snakemake(cwd: Path, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    """Run snakemake in ``cwd``; return the completed process (text output)."""
    return subprocess.run([str(BIN / "snakemake"), *args], cwd=cwd, env=run_env(),
                          capture_output=True, text=True, timeout=timeout)
