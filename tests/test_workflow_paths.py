"""The workflow paths a newcomer takes from the manual (docs/pipeline.md, docs/cli.md), run in a temp copy."""

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
@pytest.mark.parametrize("delay", [0.3, 1.0, 1.8])
def test_interrupt_at_any_moment_stops_at_once_and_writes_nothing(tmp_path, delay):
    """Ctrl-C while the interpreter imports torch, builds the model or runs the experiment: exit 130 within a
    second or two, one line on stderr, no table and no temp file (it used to be swallowed during imports)."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "items.csv"  # the four paper models under fake tensors: about 2.9 s in all on a quiet machine,
    # the last few tenths of it the interpreter's exit (after the table is written): the delays stay well inside
    proc = subprocess.Popen([sys.executable, "-m", "remat", "experiment", "korthikanti-items", "--params", "{}",
                             "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    assert proc.poll() is None and not out.exists(), "the work ended before the interrupt: the delays need longer work"
    sent = time.monotonic()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err[-2000:]
    assert time.monotonic() - sent < 5, "the interrupt was not acted on promptly"
    assert err.strip().splitlines()[-1] == "remat: interrupted (SIGINT); nothing written", err[-2000:]
    assert "Exception ignored" not in err and not list(tmp_path.iterdir())


def _readme_commands(root, section: str) -> list[tuple[str, str]]:
    """(command, comment) of every `snakemake ...` line in docs/pipeline.md's section's code blocks."""
    text = (root / "docs" / "pipeline.md").read_text().split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    found = []
    for block in text.split("```bash\n")[1:]:
        for line in block.split("```", 1)[0].splitlines():
            command, _, comment = line.partition("#")
            if command.startswith("snakemake"):
                found.append((command.strip(), comment.strip()))
    return found


@pytest.mark.slow
def test_rerun_one_rule_commands_do_what_the_readme_says(root, project):
    """Each command of "Rerun one rule", dry-run in a temp copy where the depth table is already made."""
    import shlex

    import yaml

    from test_pipeline import TINY

    (project / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    tiny = ["--configfile", "tiny.yaml"]
    assert snakemake(project, "results/chen/depth.csv", "--cores", "1", *tiny).returncode == 0
    unforced = snakemake(project, "results/chen/depth.csv", "--cores", "1", "-n", *tiny)
    assert "Nothing to be done" in unforced.stdout + unforced.stderr  # why docs/pipeline.md says -f
    commands = dict(c for c in _readme_commands(root, "Rerun one rule") if "my.yaml" not in c[0])
    expected = {"-f results/chen/depth.csv": ["chen_sweep"],
                "reports/korthikanti2022.html": ["korthikanti_experiment", "korthikanti_figure", "report"],
                "--forcerun sweep": ["sweep"], "snakemake -n": []}
    assert len(commands) == len(expected)
    for command in commands:
        rules = next(v for k, v in expected.items() if k in command)
        argv = [a for a in shlex.split(command)[1:] if a != "-n"]
        proc = snakemake(project, *argv, "-n", *tiny)
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, out[-2000:]
        for rule in rules:
            assert f"rule {rule}:" in out or f"localrule {rule}:" in out, (command, rule, out[-3000:])
        if "-f results/chen/depth.csv" in command:
            assert "chen_sweep" in out and "Nothing to be done" not in out


@pytest.mark.slow
def test_configfile_override_example_runs(root, project):
    block = (root / "docs" / "pipeline.md").read_text().split("printf ", 1)[1].split("\n", 1)[0]
    body = block.split(" > ")[0].strip("'").encode().decode("unicode_escape")
    (project / "my.yaml").write_text(body)
    proc = snakemake(project, "--cores", "1", "--configfile", "my.yaml", "-n")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-2000:]


def test_slurm_profile_sends_every_gpu_rule_to_the_gpu_partition(root):
    import re

    import yaml

    gpu_rules = set()
    for smk in (root / "workflow" / "rules").glob("*.smk"):
        for name, body in re.findall(r"^rule (\w+):\n((?:[ \t]+.*\n|\n)+)", smk.read_text(), re.M):
            if re.search(r"^\s+gpu=", body, re.M):
                gpu_rules.add(name)
    assert gpu_rules >= {"sweep", "offload_experiment", "planner_validate"}
    profile = yaml.safe_load((root / "workflow" / "profiles" / "slurm" / "config.yaml").read_text())
    for rule in gpu_rules:
        assert profile["set-resources"][rule]["slurm_partition"] == "gpu", rule
        assert profile["set-resources"][rule]["gpu"] == 1, rule


@pytest.mark.slow
def test_gpu_node_commands_dry_run(root, project):
    """Each `snakemake` command of "On a GPU node", dry-run: the GPU config plans the cuda tables."""
    import importlib.util
    import shlex

    commands = [c for c, _ in _readme_commands(root, "On a GPU node")]
    assert len(commands) == 3
    for command in commands:
        argv = shlex.split(command)[1:]
        if "--workflow-profile" in argv and importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
            continue  # docs/pipeline.md installs the SLURM plugin first; without it there is nothing to dry-run
        proc = snakemake(project, *argv, "-n")
        out = proc.stdout + proc.stderr
        assert proc.returncode == 0, (command, out[-2000:])
        assert "cuda.csv" in out and "rule sweep:" in out, (command, out[-2000:])


@pytest.mark.slow
def test_command_line_examples_run_as_written(root, capsys):
    """Every `remat ...` line of docs/cli.md's examples: exit 0, and --json prints JSON."""
    import json
    import shlex

    from conftest import run_cli

    text = (root / "docs" / "cli.md").read_text().split("## The command line\n", 1)[1].split("\n## ", 1)[0]
    block = text.split("Examples:", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.partition("#")[0].strip() for line in block.splitlines() if line.startswith("remat ")]
    assert len(commands) == 8
    for command in commands:
        code, out, err = run_cli(capsys, *shlex.split(command)[1:])
        assert code == 0, (command, err[-2000:])
        if "--json" in command:
            assert isinstance(json.loads(out), dict), command
        elif command.startswith("remat account"):
            assert "predicted on a100-80gb (roofline model" in out, (command, out[-300:])
        elif command.startswith("remat memplan"):
            assert out.startswith(("resnet-200", "lstm-16")) and "planned" in out, (command, out[:300])
        elif "--schedule" in command:
            assert out.startswith("# Per-rank plan: gpt3-175b"), (command, out[:300])
        else:
            assert out.startswith("# Recompute plan: gpt3-175b"), (command, out[:300])


@pytest.mark.slow
def test_top_level_config_override_dry_runs(project):
    """`--config device=cuda` (docs/pipeline.md's example of a top-level override): the offload report follows the
    device (offload.report_device: null), so the dry run plans the cuda tables and no CPU ones."""
    proc = snakemake(project, "--cores", "1", "-n", "-p", "--config", "device=cuda")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-2000:]
    assert "results/offload/cuda/bandwidth.csv" in out and "results/offload/cpu/" not in out
    assert "REMAT_OFFLOAD_DEVICE=cuda" in out
