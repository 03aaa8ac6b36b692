"""Kill the pipeline in the middle of a rule, rerun: it completes, and no truncated table or page is left.

Outputs are written to a temp name and renamed (remat.io), so a killed job leaves either nothing or the old
file under the final name; Snakemake's incomplete markers (and rerun-incomplete in the default profile) redo
the job. Deterministic outputs (numpy engine) are identical across reruns with the same seed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pandas as pd
import pytest
import yaml

from conftest import BIN, copy_project, run_env, snakemake
from test_pipeline import TINY

DETERMINISTIC = ["peak_bytes", "forwards", "peak_bytes_formula", "forwards_formula"]
TARGETS = ["results/chen/depth.csv", "results/chen/segments.csv", "figures/chen_depth.png"]


def _kill_when_a_job_runs(project, sig, timeout=120.0) -> bool:
    """Start snakemake, send ``sig`` to its whole process group once a job is in flight; True if one was caught."""
    proc = subprocess.Popen([str(BIN / "snakemake"), *TARGETS, "--cores", "1", "--configfile", "tiny.yaml"],
                            cwd=project, env=run_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    incomplete = project / ".snakemake" / "incomplete"
    deadline = time.monotonic() + timeout
    caught = False
    while time.monotonic() < deadline and proc.poll() is None:
        if incomplete.is_dir() and any(incomplete.iterdir()):
            time.sleep(0.3)        # let the job get going
            caught = proc.poll() is None
            break
        time.sleep(0.05)
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    proc.wait(timeout=60)
    return caught


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_killed_run_resumes_cleanly(tmp_path, sig):
    project = copy_project(tmp_path)
    (project / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    assert _kill_when_a_job_runs(project, sig), "no job was in flight when the pipeline was killed"
    if sig == signal.SIGKILL:          # a hard kill leaves Snakemake's lock: the documented `--unlock`
        assert snakemake(project, "--unlock", "--cores", "1", "--configfile", "tiny.yaml").returncode == 0
    for path in (project / "results").rglob("*.csv"):
        pd.read_csv(path)              # whatever is there under a final name is whole
    proc = snakemake(project, *TARGETS, "--cores", "2", "--configfile", "tiny.yaml")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert not list(project.rglob(".*.tmp"))
    first = pd.read_csv(project / "results" / "chen" / "depth.csv")
    proc = snakemake(project, "results/chen/depth.csv", "--cores", "2", "--configfile", "tiny.yaml",
                     "--forcerun", "chen_sweep")
    assert proc.returncode == 0
    again = pd.read_csv(project / "results" / "chen" / "depth.csv")
    pd.testing.assert_frame_equal(first[DETERMINISTIC], again[DETERMINISTIC])
