"""Experiments: one module per rule family; each experiment returns one tidy table (a row per point).

``REGISTRY`` maps the name used by ``remat experiment NAME`` (and by the Snakemake rules) to
"module:function". The function takes one argument, its parameters dataclass (the annotation of that
argument names the class; ``remat.experiments.params.load_params`` builds it from the rule's ``--params`` JSON,
UsageError naming ``<section>.<key>`` on bad values), and returns a pandas DataFrame whose rows carry
provenance columns (``remat.measure.provenance.with_provenance``). ``run_experiment`` loads, runs and writes
the table atomically.
"""

from __future__ import annotations

import importlib
import typing

from remat.experiments.params import load_params
from remat.measure.provenance import run_columns, snapshot

REGISTRY: dict[str, str] = {
    "chen-check": "remat.experiments.chen:gradient_check_table",
    "chen-segments": "remat.experiments.chen:segment_sweep",
    "chen-depth": "remat.experiments.chen:depth_sweep",
    "chen-revolve": "remat.experiments.chen:revolve_sweep",
    "chen-graph-check": "remat.experiments.chen_graph:graph_check",
    "chen-resnet": "remat.experiments.chen_graph:resnet_memory",
    "chen-lstm": "remat.experiments.chen_graph:lstm_memory",
    "chen-speed": "remat.experiments.chen_speed:speed",
    "korthikanti-table2": "remat.experiments.korthikanti:table2",
    "korthikanti-items": "remat.experiments.korthikanti:items",
    "korthikanti-flops": "remat.experiments.korthikanti:flops",
    "korthikanti-memory": "remat.experiments.korthikanti:memory",
    "korthikanti-modern": "remat.experiments.korthikanti:modern",
    "korthikanti-table4": "remat.experiments.korthikanti_time:table4",
    "korthikanti-figure8": "remat.experiments.korthikanti_time:figure8",
    "korthikanti-table5": "remat.experiments.korthikanti_time:table5",
    "sweep-segments": "remat.experiments.sweeps:segment_sweep",
    "sweep-depth": "remat.experiments.sweeps:depth_sweep",
    "sweep-seq-hidden": "remat.experiments.sweeps:seq_hidden_sweep",
    "sweep-layer-timing": "remat.experiments.layer_timing:layer_timing_sweep",
    "sweep-time-model": "remat.experiments.time_model:time_model_sweep",
    "offload-bandwidth": "remat.experiments.offload:bandwidth_table",
    "offload-steps": "remat.experiments.offload:steps_table",
    "offload-breakeven": "remat.experiments.offload:breakeven_table",
    "planner-paper": "remat.experiments.planner:paper_plans",
    "planner-frontier": "remat.experiments.planner:frontier",
    "planner-validate": "remat.experiments.planner:validate",
    "planner-tensor": "remat.experiments.tensor_plans:tensor_plans",
    "planner-compile": "remat.experiments.compile_budget:compile_budget",
    "planner-paired": "remat.experiments.compile_paired:compile_paired",
    "planner-pipeline": "remat.experiments.pipeline_ranks:pipeline",
    "planner-schedules": "remat.experiments.pipeline_ranks:schedule_gains",
}


def resolve(name: str):
    """The experiment function registered under ``name``."""
    module, func = REGISTRY[name].split(":")
    return getattr(importlib.import_module(module), func)


def config_section(name: str) -> str:
    """The config.yaml section of experiment ``name``: "chen-depth" -> "chen.depth", "sweep-depth" ->
    "sweeps.depth" (the prefix of every field named in its errors)."""
    family, _, rest = name.partition("-")
    return f"{'sweeps' if family == 'sweep' else family}.{rest}"


def params_class(name: str) -> type:
    """The parameters dataclass of experiment ``name``: the annotation of its function's argument."""
    func = resolve(name)
    hints = typing.get_type_hints(func)
    return next(hint for arg, hint in hints.items() if arg != "return")


def load(name: str, params: dict | None):
    """Experiment ``name``'s parameters dataclass from a dict (the ``--params`` JSON); UsageError on bad keys."""
    return load_params(params_class(name), params, config_section(name))


def run_experiment(name: str, params: dict, out: str) -> None:
    """Run experiment ``name`` with ``params`` and write its table to ``out`` (CSV, atomic), every row stamped
    with the run's load (``remat.measure.provenance.run_columns``: load averages before and after, wall and own
    CPU seconds, the cores other processes used, and the busiest timing window's). The recompute value check
    is off (remat.policies.values): an experiment measures time and bytes, and compares gradients itself."""
    import sys

    from remat.io import write_csv
    from remat.policies import recompute_check
    start = snapshot()
    with recompute_check("off"):
        frame = resolve(name)(load(name, params))
    run = run_columns(start)
    frame = frame.assign(**{k: v for k, v in run.items() if k not in frame})
    write_csv(out, frame)
    print(f"[{name}] wrote {len(frame)} rows to {out} in {run['run_wall_s']:.1f} s (others used "
          f"{run['run_other_cores']:.2f} cores); params {params}", file=sys.stderr, flush=True)
