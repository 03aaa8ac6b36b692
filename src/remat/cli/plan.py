"""`remat plan`: the exact per-layer plan for a model, a GPU and a memory budget. Its arguments here; its work in
remat.cli.plan_run."""

from __future__ import annotations

from remat.cli.args import (command, model_help, nonnegative_float, nonnegative_int, positive_float,
                            positive_int)
from remat.timemodel.gpus import GPUS


def add_plan(sub):
    p = command(sub, "plan", "exact per-layer recompute/offload plan (none / selective / full / offload) for a "
                             "model, GPU and memory budget",
                ["remat plan --model gpt3-175b --memory 80GiB --tp 8 --sp --pp 8 --gpu a100-80gb",
                 "remat plan --model path/to/config.json --memory 24GiB --format json"],
                "exit 3: no plan fits; the message names the smallest budget that works and what would fit "
                "(--dp/--zero 3, --tp, --ep for a mixture of experts, a shorter --seq) with the budget each needs; "
                "exit 1: the exact search hit its memory guard (no unproven plan is printed)")
    _model_args(p)
    _shape_args(p)
    _bytes_args(p)
    _gpu_args(p)
    _search_args(p)
    _transformers_args(p)
    _output_args(p)
    p.set_defaults(func=_run_plan)


def _model_args(p) -> None:
    """`remat plan`'s arguments: the model, its budget and GPU."""
    p.add_argument("--model", required=True, help=model_help())
    p.add_argument("--memory", help="device memory budget, e.g. 80GiB, 80GB or bytes (default: the GPU's)")
    p.add_argument("--gpu", default="a100-80gb",
                   help=f"GPU preset ({', '.join(GPUS)}; default a100-80gb): memory as the driver reports it, "
                        "dense 16-bit peak, host link — datasheet sources in remat.timemodel.gpus")


def _shape_args(p) -> None:
    """`remat plan`'s arguments: parallelism and the sizes s, b, B, L."""
    p.add_argument("--tp", type=positive_int, help="tensor-parallel size t (default: the preset's)")
    p.add_argument("--sp", action="store_true", help="sequence parallelism (Korthikanti §4.2.2)")
    p.add_argument("--pp", type=positive_int, help="pipeline-parallel size p (default: the preset's)")
    p.add_argument("--interleave", type=positive_int, help="interleaved stages per GPU m (default: preset's)")
    p.add_argument("--schedule", help="plan every pipeline rank for this torch.distributed.pipelining schedule "
                                      "(GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, "
                                      "DualPipeV; torchtitan's names): a plan per rank from what each holds over "
                                      "the step (needs --pp > 1); a trainer --format gets the fastest single "
                                      "setting for every stage that fits")
    p.add_argument("--layers", type=positive_int, help="override L")
    p.add_argument("--seq", type=positive_int,
                   help="sequence length s (default: the preset's; for a config.json its context length "
                        "max_position_embeddings / n_positions, e.g. 32768 for Mistral-7B — set your training "
                        "length). The output's first line states the s used")
    p.add_argument("--micro-batch", type=positive_int,
                   help="micro-batch size b (default: the preset's; 1 for a config.json)")
    p.add_argument("--global-batch", type=positive_int,
                   help="the global batch B (micro-batches per step N = B / (b·dp)); default: the preset's, or with "
                   "--pp p > 1 on a config.json N = 4·p")
    p.add_argument("--dp", type=positive_int, default=1, help="data-parallel size (default 1)")
    p.add_argument("--ep", type=positive_int,
                   help="expert-parallel size of an MoE model (Mixtral): E/ep experts per GPU, ep dividing --dp")
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=0,
                   help="ZeRO stage sharding model state over --dp (needs --dp > 1): 1 optimizer, 2 +gradients, "
                        "3 +weights")


def _bytes_args(p) -> None:
    """`remat plan`'s arguments: bytes per parameter, gradient, optimizer; reserve; host memory."""
    # remat.planner.regime.REGIMES / DEFAULT, spelled out: importing remat.planner here would import torch before
    # remat.cli installs its Ctrl-C handler (tests/test_regime.py checks they agree)
    p.add_argument("--regime", choices=["mixed", "pure"], default="mixed",
                   help="precision / optimizer regime, the same on every path (stated on the plan's first line; "
                        "remat.planner.regime): mixed (default; Megatron-style: weights in the model dtype, fp32 "
                        "gradient buffer held all step, fp32 master + Adam m, v: 18 B per bf16 parameter) or pure "
                        "(everything in the parameters' dtype, gradients made by backward: 8 B per bf16 parameter)")
    p.add_argument("--weight-bytes", type=nonnegative_int,
                   help="bytes per parameter (default: the regime's, the model dtype's size)")
    p.add_argument("--grad-bytes", type=nonnegative_int, help="bytes per gradient (default: the regime's)")
    p.add_argument("--optimizer-bytes", type=nonnegative_int,
                   help="optimizer bytes per parameter (default: the regime's)")
    p.add_argument("--reserve", default="2GiB", help="stated workspace reserve (default 2GiB)")
    p.add_argument("--host-memory", help="host memory PER GPU for offloaded activations (default: the preset's, e.g. "
                                         "256 GiB = a DGX's 2 TB ÷ 8 GPUs)")


def _gpu_args(p) -> None:
    """`remat plan`'s arguments: overrides of the GPU preset's rates and host link."""
    p.add_argument("--peak-tflops", type=positive_float, help="override peak 16-bit TFLOP/s")
    p.add_argument("--achievable", type=positive_float,
                   help="fraction of the dense peak a large GEMM reaches (roofline time model; default 0.8, see "
                        "remat.timemodel.gpus)")
    p.add_argument("--link-gbps", type=positive_float,
                   help="override the host link's GB/s (10^9 B/s) per direction, before --gpus-per-host-link "
                        "shares it")
    p.add_argument("--link-t0-us", type=nonnegative_float, help="override the per-copy latency (microseconds)")
    p.add_argument("--gpus-per-host-link", type=positive_int,
                   help="GPUs copying through one host-link uplink at once; offload gets --link-gbps ÷ this per "
                        "GPU (default: the preset's — 2 on a100-*: DGX A100 puts 8 GPUs on 4 PCIe switches; 1 "
                        "elsewhere, an assumption; sources in remat.timemodel.gpus)")


def _search_args(p) -> None:
    """`remat plan`'s arguments: what the search may use, calibration, baselines."""
    p.add_argument("--policies", default="none,selective,full,offload",
                   help="policies the plan may use (comma-separated; default all four)")
    p.add_argument("--granularity", choices=["block", "tensor"], default="block",
                   help="block (default): one policy per layer; tensor: also, per block, which op outputs the "
                        "selective checkpoint keeps (the exact Pareto frontier of bytes against recompute time; "
                        "a transformers model only: --hf; output md or json, whose torch_policy torch applies "
                        "alone)")
    p.add_argument("--compiled", action="store_true",
                   help="the model trains under torch.compile: price elementwise ops as fused (each reads its "
                        "inputs once, launches and writes nothing), so a plan keeps what costs FLOPs to recompute "
                        "(--hf only; memory is still the eager accounting)")
    p.add_argument("--calibrate", action="store_true",
                   help="measure per-layer forward/backward time on this machine instead of the roofline model")
    p.add_argument("--no-baselines", action="store_true", help="skip the baselines")
    p.add_argument("--sac-time-limit", type=positive_float, default=20.0,
                   help="seconds for torch's sac_milp baseline (torch's own default is 180)")


def _transformers_args(p) -> None:
    """`remat plan`'s arguments: the transformers path and its check on this CPU."""
    p.add_argument("--hf", action="store_true",
                   help="plan the transformers model itself (any model_type transformers knows; random weights, "
                        "nothing downloaded): each decoder block measured under fake tensors by remat.auto. "
                        "Automatic for a config.json whose model_type remat's own reader does not cover. Needs "
                        "pip install -e '.[hf]'; t = p = 1")
    p.add_argument("--check-small", action="store_true",
                   help="also check the plan by measurement on this CPU: a small instance of the same "
                        "transformers architecture (--check-layers, --check-seq) planned, applied and run — "
                        "measured peak vs predicted, gradients bitwise vs no recompute, HF gradient checkpointing "
                        "as a baseline. Needs transformers")
    p.add_argument("--check-layers", type=positive_int, default=4, help="blocks of the --check-small instance "
                                                                          "(default 4)")
    p.add_argument("--check-seq", type=positive_int, default=None,
                   help="sequence length of the --check-small instance (default: the shortest of 128, 256, 512, "
                        "1024 at which the activations, not the parameters' gradients, set the peak)")


def _output_args(p) -> None:
    """`remat plan`'s arguments: the output."""
    p.add_argument("--format", choices=["md", "json", "hf", "nemo", "torchtitan", "sac", "all"], default="md",
                   help="md (default): a Markdown report with the per-layer table; json: the plan and its costs; "
                        "hf: transformers TrainingArguments (JSON); nemo: Megatron-Bridge / NeMo model overrides "
                        "(YAML); torchtitan: its [activation_checkpoint] section (TOML); sac: a torch-only Python "
                        "module (selective-checkpoint policy, POLICIES, apply(blocks)). A trainer that cannot "
                        "run the optimal plan gets the nearest plan it can, with its peak and step time; all: "
                        "every format from one planning run, into the --out folder (plan.md, plan.json, hf.json, "
                        "nemo.yaml, torchtitan.toml, sac.py; a format that cannot hold the plan is named, not "
                        "written)")
    p.add_argument("--out", help="write the plan here (atomically) instead of printing it; its folder must exist "
                                 "(--format all: the folder)")


def _run_plan(args) -> int:
    from remat.cli import plan_run  # imports torch (remat.planner, remat.auto): kept out of `remat --help`
    return plan_run.run_plan(args)
