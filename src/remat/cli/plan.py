"""`remat plan`: the exact per-layer plan for a model, a GPU and a memory budget."""

from __future__ import annotations

import sys

from remat.cli.args import (command, model_help, nonnegative_float, nonnegative_int, positive_float,
                            positive_int)

def add_plan(sub):
    from remat.timemodel.gpus import GPUS
    p = command(sub, "plan", "exact per-layer recompute/offload plan (none / selective / full / offload) for a "
                             "model, GPU and memory budget",
                ["remat plan --model gpt3-175b --memory 80GiB --tp 8 --sp --pp 8 --gpu a100-80gb",
                 "remat plan --model path/to/config.json --memory 24GiB --format json"],
                "exit 3: no plan fits; the message names the smallest budget that works and what would fit "
                "(--dp/--zero 3, --tp, a shorter --seq) with the budget each needs; exit 1: the exact search hit "
                "its memory guard (no unproven plan is printed)")
    p.add_argument("--model", required=True, help=model_help())
    p.add_argument("--memory", help="device memory budget, e.g. 80GiB, 80GB or bytes (default: the GPU's)")
    p.add_argument("--gpu", default="a100-80gb",
                   help=f"GPU preset ({', '.join(GPUS)}; default a100-80gb): memory as the driver reports it, "
                        "dense 16-bit peak, host link — datasheet sources in remat.timemodel.gpus")
    p.add_argument("--tp", type=positive_int, help="tensor-parallel size t (default: the preset's)")
    p.add_argument("--sp", action="store_true", help="sequence parallelism (Korthikanti §4.2.2)")
    p.add_argument("--pp", type=positive_int, help="pipeline-parallel size p (default: the preset's)")
    p.add_argument("--interleave", type=positive_int, help="interleaved stages per GPU m (default: preset's)")
    p.add_argument("--layers", type=positive_int, help="override L")
    p.add_argument("--seq", type=positive_int,
                   help="sequence length s (default: the preset's; for a config.json its context length "
                        "max_position_embeddings / n_positions, e.g. 32768 for Mistral-7B — set your training "
                        "length). The output's first line states the s used")
    p.add_argument("--micro-batch", type=positive_int,
                   help="micro-batch size b (default: the preset's; 1 for a config.json)")
    p.add_argument("--global-batch", type=positive_int, help="override the global batch B")
    p.add_argument("--dp", type=positive_int, default=1, help="data-parallel size (default 1)")
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=0,
                   help="ZeRO stage sharding model state over --dp (needs --dp > 1): 1 optimizer, 2 +gradients, "
                        "3 +weights")
    p.add_argument("--weight-bytes", type=nonnegative_int,
                   help="bytes per parameter (default 2; with --hf measured from the model's dtype)")
    p.add_argument("--grad-bytes", type=nonnegative_int,
                   help="bytes per gradient (default 4; with --hf measured: the parameters' dtype)")
    p.add_argument("--optimizer-bytes", type=nonnegative_int,
                   help="optimizer bytes per parameter (default 12: fp32 master + Adam m, v; with a transformers "
                        "model (--hf) Adam's m, v in the parameters' dtype)")
    p.add_argument("--reserve", default="2GiB", help="stated workspace reserve (default 2GiB)")
    p.add_argument("--host-memory", help="host memory PER GPU for offloaded activations (default: the preset's, e.g. "
                                         "256 GiB = a DGX's 2 TB ÷ 8 GPUs)")
    p.add_argument("--peak-tflops", type=positive_float, help="override peak 16-bit TFLOP/s")
    p.add_argument("--achievable", type=positive_float, help="fraction of the dense peak a large GEMM reaches "
                                                            "(roofline time model; default 0.8, see remat.timemodel.gpus)")
    p.add_argument("--link-gbps", type=positive_float,
                   help="override the host link's GB/s (10^9 B/s) per direction, before --gpus-per-host-link "
                        "shares it")
    p.add_argument("--link-t0-us", type=nonnegative_float, help="override the per-copy latency (microseconds)")
    p.add_argument("--gpus-per-host-link", type=positive_int,
                   help="GPUs copying through one host-link uplink at once; offload gets --link-gbps ÷ this per "
                        "GPU (default: the preset's — 2 on a100-*: DGX A100 puts 8 GPUs on 4 PCIe switches; 1 "
                        "elsewhere, an assumption; sources in remat.timemodel.gpus)")
    p.add_argument("--policies", default="none,selective,full,offload",
                   help="policies the plan may use (comma-separated; default all four)")
    p.add_argument("--calibrate", action="store_true",
                   help="measure per-layer forward/backward time on this machine instead of the roofline model")
    p.add_argument("--no-baselines", action="store_true", help="skip the baselines")
    p.add_argument("--sac-time-limit", type=positive_float, default=20.0,
                   help="seconds for torch's sac_milp baseline (torch's own default is 180)")
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
    p.add_argument("--check-seq", type=positive_int, default=128, help="sequence length of the --check-small "
                                                                         "instance (default 128)")
    p.add_argument("--format", choices=["md", "json"], default="md",
                   help="md (default): a Markdown report with the per-layer table; json: the plan and its costs")
    p.add_argument("--out", help="write the plan here (atomically) instead of printing it")
    p.set_defaults(func=_run_plan)


def _run_plan(args) -> int:
    from remat.io import write_text
    from remat.models.presets import from_name
    from remat.planner import plan_model
    from remat.units import parse_bytes
    if _use_hf(args):
        text = _hf_plan_text(args)
        check = _check_text(args) if args.check_small else ""
        _emit(args, text + check, write_text)
        return 0
    gpu_overrides = {
        "peak_flops": args.peak_tflops * 1e12 if args.peak_tflops else None,
        "achievable": args.achievable,
        "link_bytes_per_s": args.link_gbps * 1e9 if args.link_gbps else None,
        "link_t0_s": None if args.link_t0_us is None else args.link_t0_us * 1e-6,
        "gpus_per_host_link": args.gpus_per_host_link,
    }
    cfg = from_name(args.model, layers=args.layers, seq=args.seq, micro_batch=args.micro_batch, tp=args.tp,
                    pp=args.pp, interleave=args.interleave, global_batch=args.global_batch)
    from remat.planner.mckp import SearchTooLarge
    try:
        text = _plan_text(args, cfg, gpu_overrides, plan_model, parse_bytes)
    except SearchTooLarge as exc:  # the exact solver's memory guard: no unproven plan is ever printed
        print(f"remat plan: error: {exc}; the exact search is too large at s = {cfg.seq}: plan at your training "
              "length (--seq), or with fewer choices (--policies none,full)", file=sys.stderr)
        return 1
    _warn_budget_above_gpu(args, parse_bytes)
    _emit(args, text + (_check_text(args) if args.check_small else ""), write_text)
    return 0


def _emit(args, text: str, write_text) -> None:
    if args.out:
        write_text(args.out, text)
    else:
        print(text)


def _use_hf(args) -> bool:
    """--hf, or a config.json whose model_type remat's reader does not cover (transformers then reads it)."""
    if args.hf:
        return True
    from pathlib import Path
    from remat.errors import UsageError
    from remat.models.hf_config import SUPPORTED, read_json_object
    path = Path(args.model)
    path = path / "config.json" if path.is_dir() else path
    if path.suffix != ".json":
        return False
    try:
        model_type = read_json_object(path).get("model_type")
    except UsageError:          # remat's own reader reports it, naming the field
        return False
    from remat.auto.hf import available
    return model_type not in SUPPORTED and isinstance(model_type, str) and available()


_HF_UNSUPPORTED = {"tp": ("--tp", (None, 1)), "sp": ("--sp", (False,)), "pp": ("--pp", (None, 1)),
                   "interleave": ("--interleave", (None, 1)), "dp": ("--dp", (1,)), "zero": ("--zero", (0,)),
                   "global_batch": ("--global-batch", (None,)), "calibrate": ("--calibrate", (False,)),
                   "weight_bytes": ("--weight-bytes", (None,)), "grad_bytes": ("--grad-bytes", (None,)),
                   "peak_tflops": ("--peak-tflops", (None,)), "achievable": ("--achievable", (None,)),
                   "link_gbps": ("--link-gbps", (None,)), "link_t0_us": ("--link-t0-us", (None,)),
                   "gpus_per_host_link": ("--gpus-per-host-link", (None,))}
"""Flags the transformers path (remat.auto: t = p = 1, measured bytes, the GPU preset's rates) cannot honour:
argument name -> (flag, the values that mean "not set")."""


def _hf_plan_text(args) -> str:
    """The plan of the transformers model built from --model (remat.auto), rendered like every plan."""
    import json
    from remat import auto
    from remat.auto.hf import build
    from remat.errors import UsageError
    from remat.planner import render
    from remat.units import parse_bytes
    from remat.planner.problem import POLICIES
    for name, (flag, unset) in _HF_UNSUPPORTED.items():
        if not any(getattr(args, name) is v or getattr(args, name) == v for v in unset):
            raise UsageError(flag, "not available with a transformers model (remat.auto plans t = p = 1 on one "
                                   f"GPU, measures the bytes, prices time at the --gpu preset); drop {flag}")
    choices = tuple(x.strip() for x in args.policies.split(","))
    unknown = [c for c in choices if c not in POLICIES]
    if unknown:
        raise UsageError("--policies", f"unknown policy {unknown[0]!r} (known: {', '.join(POLICIES)})")
    budget = None if args.memory is None else parse_bytes(args.memory, "--memory")
    reserve = parse_bytes(args.reserve, "--reserve")
    built = build(args.model, "fake", layers=args.layers, seq=args.seq, micro_batch=args.micro_batch)
    with built.mode:
        params = sum(p.numel() for p in built.model.parameters())
        optimizer = None if args.optimizer_bytes is None else args.optimizer_bytes * params
        result = auto.plan(built.model, (), built.kwargs, budget=budget, gpu=args.gpu, choices=choices,
                           optimizer_state_bytes=optimizer, reserve=reserve,
                           host_memory=None if args.host_memory is None else
                           parse_bytes(args.host_memory, "--host-memory"))
    meta = result.problem.meta
    extra = "".join(f", {k}={v}" for k, v in (("optimizer_state_bytes", optimizer), ("reserve", reserve))
                    if v not in (None, 0))
    meta.update(model=built.source, s=built.seq, b=built.micro_batch, L=len(result.policies),
                s_from="--seq" if args.seq else "the config's context length; set --seq to your training length",
                b_from="--micro-batch" if args.micro_batch else "default; set --micro-batch",
                transformers_class=type(built.model).__name__,
                auto_call=[f"# batch: input_ids and labels, int64 [b, s] = [{built.micro_batch}, {built.seq}]",
                           f"result = auto.plan(model, (), batch, budget={result.problem.budget_bytes}, "
                           f'gpu="{args.gpu}"{extra})  # budget in bytes'])
    _warn_budget_above_gpu(args, parse_bytes)
    if args.format == "json":
        return json.dumps(result.to_json(), indent=2, default=str)
    return render.to_markdown(result.problem, result.plan, result.baselines)


def _check_text(args) -> str:
    """--check-small: the CPU check (remat.auto.check) as a Markdown section (or JSON lines under "check")."""
    import json
    from remat.auto.check import check_small
    from remat.units import format_bytes
    rows = check_small(args.model, layers=args.check_layers, seq=args.check_seq, gpu=args.gpu)
    if args.format == "json":
        return "\n" + json.dumps({"check": rows}, indent=2, default=str)
    lines = ["", f"## Check on this CPU: {args.check_layers} blocks, s = {args.check_seq}, b = 1, vocabulary ≤ "
                 f"1024, float32, budget {format_bytes(rows[0]['budget_bytes'])} (between every block full and "
                 "none, so the plan mixes; no optimizer state)", "",
             "| setup | policies | saved | predicted peak | measured peak | error | step (CPU) | gradients = none |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        predicted = "—" if r["predicted_peak_bytes"] is None else format_bytes(r["predicted_peak_bytes"])
        error = "—" if r["peak_error"] is None else f"{r['peak_error']:+.2%}"
        lines.append(f"| {r['setup']} | {r['policies']} | {format_bytes(r['saved_bytes'])} | {predicted} | "
                     f"{format_bytes(r['measured_peak_bytes'])} | {error} | {r['step_time_s'] * 1e3:.1f} ms | "
                     f"{'yes' if r['grads_equal'] else 'NO'} |")
    if not rows[0]["activations_set_peak"]:
        lines += ["", "At this size the activations do not set the peak (every block full and none peak alike: "
                      "the parameters' gradients at the end of backward do), so the plan is all none; a longer "
                      "--check-seq makes the check informative."]
    return "\n".join(lines) + "\n"


def _warn_budget_above_gpu(args, parse_bytes) -> None:
    """One warning line on stderr when --memory exceeds the GPU preset's memory (the plan is still made)."""
    from remat.timemodel.gpus import GPUS
    from remat.units import format_bytes
    gpu = GPUS.get(args.gpu)
    if args.memory is not None and gpu is not None:
        budget = parse_bytes(args.memory, "--memory")
        if budget > gpu.memory_bytes:
            print(f"remat plan: warning: --memory {format_bytes(budget)} exceeds the {gpu.full_name}'s "
                  f"{format_bytes(gpu.memory_bytes)}", file=sys.stderr)


def _plan_text(args, cfg, gpu_overrides, plan_model, parse_bytes) -> str:
    return plan_model(
        cfg, gpu_name=args.gpu, gpu_overrides=gpu_overrides,
        memory=None if args.memory is None else parse_bytes(args.memory, "--memory"),
        host_memory=None if args.host_memory is None else parse_bytes(args.host_memory, "--host-memory"),
        reserve=parse_bytes(args.reserve, "--reserve"), sp=args.sp, dp=args.dp, zero=args.zero,
        weight_bytes=2 if args.weight_bytes is None else args.weight_bytes,
        grad_bytes=4 if args.grad_bytes is None else args.grad_bytes,
        optimizer_bytes=12 if args.optimizer_bytes is None else args.optimizer_bytes,
        policies=tuple(x.strip() for x in args.policies.split(",")), calibrate=args.calibrate,
        baselines=not args.no_baselines, sac_time_limit_s=args.sac_time_limit, fmt=args.format,
        given=tuple(k for k in ("seq", "micro_batch") if getattr(args, k) is not None))
