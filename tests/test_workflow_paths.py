"""The workflow paths a newcomer takes from the README, run in a temp copy of the project."""

from __future__ import annotations

import shutil

import pytest

from conftest import copy_project, snakemake


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return copy_project(tmp_path_factory.mktemp("paths"))


@pytest.mark.slow
@pytest.mark.parametrize("flags", [["--sdm", "conda"], ["--use-conda"]])
def test_conda_route_parses(project, flags):
    """The workflow parses under --sdm conda: without conda the user sees Snakemake's own question."""
    proc = snakemake(project, "--cores", "1", "-n", *flags)
    out = proc.stdout + proc.stderr
    assert "NameError" not in out and "is unknown in this context" not in out, out[-2000:]
    if shutil.which("conda"):
        assert proc.returncode == 0, out[-2000:]
    else:
        assert "Is conda installed" in out, out[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("delay", [0.3, 1.0, 2.5, 4.0])
def test_interrupt_at_any_moment_stops_at_once_and_writes_nothing(tmp_path, delay):
    """Ctrl-C while the interpreter imports torch, builds the model or runs the experiment: exit 130 within a
    second or two, one line on stderr, no table and no temp file (it used to be swallowed during imports)."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "items.csv"  # the four paper models under fake tensors: about 10 s of work after imports
    proc = subprocess.Popen([sys.executable, "-m", "remat", "experiment", "korthikanti-items", "--params", "{}",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err[-2000:]
    assert time.monotonic() - sent < 5, "the interrupt was not acted on promptly"
    assert err.strip().splitlines()[-1] == "remat: interrupted (SIGINT); nothing written", err[-2000:]
    assert "Exception ignored" not in err and not list(tmp_path.iterdir())
