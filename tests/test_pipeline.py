"""A tiny end-to-end run of the pipeline in a temp copy: every output made, timed jobs ran alone, every job wrote its
benchmark TSV, no-op rerun does nothing."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd
import pytest
import yaml

from conftest import copy_project, snakemake
from remat.analysis import catalog, findings
from remat.paper import CHEN, KORTHIKANTI

TINY = {
    "chen": {
        "check": {"layers": 6, "width": 4},
        "segments": {"layers": 12, "width": 4, "batch": 2},
        "depth": {"depths": [2, 4, 8, 16, 32], "width": 4, "batch": 2},
        "revolve": {"steps": [2, 5, 10], "slots": [1, 2, 3]},
        "graph-check": {"layers": 3, "blocks": 2, "steps": 3, "width": 4},
        "resnet": {"depths": [14, 20, 26], "batch": 2, "image": 32, "width": 8, "classes": 10},
        "lstm": {"lengths": [4, 8, 16], "layers": 2, "hidden": 32, "classes": 20, "batch": 4},
        "speed": {"resnet_depth": 14, "resnet_image": 32, "resnet_width": 8, "resnet_batch": 2,
                  "lstm_steps": 4, "lstm_hidden": 32, "lstm_classes": 20, "rounds": 1},
    },
    "korthikanti": {  # one paper model instead of four: the same code paths at a quarter of the time
        "table2": {"models": ["gpt3-175b"]}, "items": {"models": ["gpt3-175b"]},
        "flops": {"models": ["gpt3-175b"], "tp": [8]}, "memory": {"models": ["gpt3-175b"]},
        "modern": {"seq": 512},
        "figure8": {"models": ["gpt3-175b"]}, "table5": {"models": ["gpt3-175b"]},
    },
    "sweeps": {
        "segments": {"layers": 4, "timing": False},
        "depth": {"depths": [2, 4, 8]},
        "seq-hidden": {"seqs": [64, 128], "hiddens": [32, 64]},
        "layer-timing": {"hidden": 128, "heads": 4, "seq": 64, "rounds": 1, "warmup": 1},
        "time-model": {"hiddens": [64], "heads": 4, "seq": 32, "rounds": 1},
    },
    "offload": {
        "bandwidth": {"max_size": "4MiB", "repeats": 3},
        "steps": {"seqs": [32], "hiddens": [32], "layers": 2, "rounds": 1},
        "breakeven": {"gpus": ["a100-80gb"], "seqs": [1024], "hiddens": [4096]},
    },
    "planner": {
        "paper": {"models": ["gpt3-175b"], "gpus": ["a100-80gb"], "sac_time_limit_s": 2},
        "frontier": {"models": ["gpt3-175b"], "points": 3, "sac_time_limit_s": 2},
        "validate": {"models": [{"layers": 4, "seq": 32, "micro_batch": 2}], "points": 2, "rounds": 1},
        "tensor": {"models": [{"kind": "conv", "blocks": 3, "width": 8, "seq": 8, "batch": 2},
                              {"kind": "transformer", "blocks": 3, "width": 32, "seq": 16, "batch": 2}], "points": 3},
    },
}


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory):
    project = copy_project(tmp_path_factory.mktemp("pipe"))
    (project / "tiny.yaml").write_text(yaml.safe_dump(TINY))
    proc = snakemake(project, "--cores", "2", "--configfile", "tiny.yaml")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return project


@pytest.mark.slow
def test_pipeline_makes_every_table_figure_and_report(pipeline):
    for table in ["check", "segments", "depth", "revolve", "graph-check", "resnet", "lstm", "speed/cpu"]:
        frame = pd.read_csv(pipeline / "results" / "chen" / f"{table}.csv")
        assert len(frame) > 0
        assert {"git_commit", "torch_version", "numpy_version", "host", "timestamp"} <= set(frame.columns)
    for sweep in ["segments", "depth", "seq-hidden", "layer-timing", "time-model"]:
        frame = pd.read_csv(pipeline / "results" / "sweeps" / sweep / "cpu.csv")
        assert len(frame) > 0 and (frame["status"] == "ok").all()
    for table in ["bandwidth", "steps", "breakeven"]:
        frame = pd.read_csv(pipeline / "results" / "offload" / "cpu" / f"{table}.csv")
        assert len(frame) > 0
    assert pd.read_csv(pipeline / "results" / "offload" / "cpu" / "bandwidth.csv")["simulated"].all()
    for table in ["paper", "frontier", "validate/cpu"]:
        assert len(pd.read_csv(pipeline / "results" / "planner" / f"{table}.csv")) > 0
    for table in ["table2", "items", "flops", "memory", "modern", "table4", "figure8", "table5"]:
        assert len(pd.read_csv(pipeline / "results" / "korthikanti" / f"{table}.csv")) > 0
    for fig in ["chen_segments", "chen_depth", "chen_resnet", "chen_lstm", "korthikanti_percent", "korthikanti_memory",
                "sweeps_segments", "sweeps_depth", "sweeps_seq-hidden", "sweeps_layer-timing", "sweeps_time-model",
                "korthikanti_figure8", "offload_bandwidth",
                "offload_breakeven", "planner_frontier", "planner_measured", "planner_peak"]:
        assert (pipeline / "figures" / f"{fig}.png").stat().st_size > 1000
        assert (pipeline / "figures" / f"{fig}.svg").stat().st_size > 1000
    for report in ["chen2016", "korthikanti2022", "sweeps", "offload", "planner"]:
        html = (pipeline / "reports" / f"{report}.html").read_text()
        assert "data:image/png;base64" in html, report
    assert (pipeline / "reports" / "index.html").exists()
    assert not list(pipeline.rglob(".*.tmp"))


LOOKUP = re.compile(r"""F\[["']([^"']+)["']\]""")


@pytest.mark.slow
def test_every_finding_a_page_looks_up_exists(pipeline):
    """Each report's findings are made, and every id its .qmd looks up (F["..."]) is one of them; the index's
    claims are the reports' findings marked for the scorecard."""
    for report in catalog.REPORTS:
        made = findings.load(report, pipeline)
        used = set(LOOKUP.findall((pipeline / "reports" / f"{report}.qmd").read_text(encoding="utf-8")))
        assert used and used <= set(made), (report, sorted(used - set(made)))
    claims = findings.load("index", pipeline)
    assert {f.scorecard for f in claims.values()} == {CHEN, KORTHIKANTI}


@pytest.mark.slow
def test_rerun_is_a_no_op(pipeline):
    proc = snakemake(pipeline, "-n", "--cores", "2", "--configfile", "tiny.yaml")
    assert proc.returncode == 0
    assert "Nothing to be done" in proc.stdout + proc.stderr


# The jobs of the tiny run that time (remat.measure.timing's time_steps / time_step, the copy benchmark), found in
# the experiments' code, not in the Snakefile, so that a rule which stops claiming every core fails here: chen_speed,
# offload_experiment (bandwidth: copy benchmark; steps: time_steps), planner_validate, and the sweeps layer-timing
# and time-model (segments times only with timing: true, off in TINY; depth and seq-hidden do not time there).
TIMED_RULES = {"chen_speed", "offload_experiment", "planner_validate"}
TIMED_SWEEPS = {"layer-timing", "time-model"}
STAMP = re.compile(r"^\[(\w{3} \w{3} +\d+ [\d:]+ \d{4})\]$")


@dataclass
class Job:
    """One job of a Snakemake run log: its rule and wildcards, and when it started and finished — as positions in
    the log (the scheduler writes start and finish events in the order it acts: a total order, finer than the 1 s
    timestamps) and as those timestamps (for the message)."""

    jobid: int
    rule: str
    wildcards: str
    start: int
    started: str
    end: int | None = None
    ended: str | None = None

    @property
    def timed(self) -> bool:
        return self.rule in TIMED_RULES or (self.rule == "sweep" and self.wildcards.split(",")[0] in
                                            {f"sweep={s}" for s in TIMED_SWEEPS})

    def overlaps(self, other: "Job") -> bool:
        """Both ran at once: each started before the other finished. The log orders every event, so a job that
        starts right after another finishes (same second or not) does not overlap it."""
        return self.start < other.end and other.start < self.end

    def __str__(self) -> str:
        return f"{self.rule}[{self.wildcards}] {self.started} .. {self.ended}"


def run_log_jobs(text: str) -> list[Job]:
    """The jobs of one `.snakemake/log/*.snakemake.log`: a job starts at "[timestamp]" + "(local)rule NAME:" ...
    "jobid: N" (+ "wildcards: ..."), and finishes at "[timestamp]" + "Finished jobid: N"."""
    jobs: dict[int, Job] = {}
    stamp, pending = None, None
    for pos, line in enumerate(text.splitlines()):
        if m := STAMP.match(line):
            stamp = m.group(1)
        elif m := re.match(r"^(?:local)?rule (\w+):$", line):
            pending = Job(-1, m.group(1), "", pos, stamp)
        elif pending and (m := re.match(r"^\s+jobid: (\d+)$", line)):
            pending.jobid = int(m.group(1))
            jobs[pending.jobid] = pending
        elif pending and (m := re.match(r"^\s+wildcards: (.*)$", line)):
            pending.wildcards = m.group(1).replace(" ", "")
        elif m := re.match(r"^Finished jobid: (\d+)", line):
            job = jobs[int(m.group(1))]
            job.end, job.ended, pending = pos, stamp, None
        elif not line.startswith((" ", "\t")):
            pending = None
    return list(jobs.values())


def pipeline_jobs(project) -> list[Job]:
    """The jobs of the one run in ``project``'s .snakemake/log/ that ran any (a dry run writes a log too)."""
    logs = [t for t in (p.read_text() for p in sorted((project / ".snakemake" / "log").glob("*.snakemake.log")))
            if "Finished jobid" in t]
    assert len(logs) == 1, len(logs)
    return run_log_jobs(logs[0])


@pytest.mark.slow
def test_timed_jobs_run_alone(pipeline):
    """While a job that times runs, no other job runs (the rules that time claim every core, `--cores 2` here);
    the untimed jobs still run two at a time."""
    jobs = pipeline_jobs(pipeline)
    assert all(j.end is not None for j in jobs), [str(j) for j in jobs if j.end is None]
    timed = [j for j in jobs if j.timed]
    assert len(timed) == len(TIMED_RULES) + 1 + len(TIMED_SWEEPS), [str(j) for j in timed]  # offload: 2 tables
    shared = [f"{t} overlaps {o}" for t in timed for o in jobs if o is not t and t.overlaps(o)]
    assert shared == []
    untimed = [j for j in jobs if not j.timed]
    assert any(a.overlaps(b) for i, a in enumerate(untimed) for b in untimed[i + 1:]), "no two jobs ran at once"


@pytest.mark.slow
def test_every_job_writes_its_benchmark(pipeline):
    """Every job that ran wrote its `benchmark:` TSV under logs/benchmarks/<rule>/ (wall s, cpu_time, max_rss);
    results/ holds tables only."""
    jobs = [j for j in pipeline_jobs(pipeline) if j.rule != "all"]  # `all` runs nothing
    tsvs = sorted((pipeline / "logs" / "benchmarks").rglob("*.tsv"))
    assert len(tsvs) == len(jobs)
    assert {p.relative_to(pipeline / "logs" / "benchmarks").parts[0].removesuffix(".tsv") for p in tsvs} == \
        {j.rule for j in jobs}
    for tsv in tsvs:
        frame = pd.read_csv(tsv, sep="\t")
        assert len(frame) == 1 and {"s", "cpu_time", "max_rss"} <= set(frame.columns), tsv
        assert frame["s"].iloc[0] > 0, tsv
    assert not list((pipeline / "results").rglob("*.tsv"))
