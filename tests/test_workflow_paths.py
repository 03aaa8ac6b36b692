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
