"""What `remat plan` runs once its arguments are parsed (remat.cli.plan): a preset or config.json planned by the
exact planner (remat.planner.plan_model), or a transformers model measured and planned by remat.auto (``--hf``,
or a config.json whose model_type remat's own reader does not cover), with ``--check-small`` the plan checked on
this CPU (remat.auto.check). Imports torch, so the parser loads it only when the command runs."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

from remat import auto, planner  # planner.plan_model looked up when called: a test replaces it
from remat.cli.plan_out import check_out as _check_out, emit as _emit, formats as _formats
from remat.auto.check import check_small
from remat.auto import ranks as auto_ranks
from remat.auto.hf import available, build, config_dtype, config_of, context_length, per_layer_mask_terms
from remat.auto.planning import kept_lines, shard_state
from remat.errors import InfeasibleError, UsageError
from remat.models.hf_config import SUPPORTED, read_json_object
from remat.models.presets import ModelConfig, from_name
from remat.planner import pipeline_text
from remat.planner.costs import default_global_batch
from remat.planner.make import make_settings
from remat.planner.mckp import SearchTooLarge
from remat.planner.ranks import default_interleave, plan_pipeline
from remat.planner.problem import check_dp_zero, check_policies
from remat.planner.regime import Regime, resolve
from remat.planner.solve import minimum_budget
from remat.planner.suggest import MIN_SEQ, summarize
from remat.timemodel.gpus import GPUS
from remat.units import format_bytes, parse_bytes


def run_plan(args) -> int:
    """`remat plan`: the plan printed (or written to --out); exit 1 when the exact search hits its memory guard."""
    _check_out(args)
    if args.memory is not None and parse_bytes(args.memory, "--memory") <= 0:
        raise UsageError("--memory", f"must be a positive size, got {args.memory!r}")
    check_dp_zero(args.dp, args.zero, ("--dp", "--zero"))
    if args.check_small and args.format not in ("md", "json", "all"):
        raise UsageError("--check-small", f"its section is Markdown or JSON and would break the {args.format} "
                                          "config: use --format md or json with --check-small")
    if _use_hf(args) and args.schedule is not None:
        _emit(args, _schedule_text(args, _hf_geometry(args), {}, hf=True))
        return 0
    if _use_hf(args):
        _emit(args, _with_check(args, _hf_plan_text(args)))
        return 0
    if args.compiled:
        raise UsageError("--compiled", "prices a transformers model's measured ops as torch.compile fuses them: "
                                       "add --hf (without it remat's own layers are priced by formula)")
    if args.granularity != "block":
        raise UsageError("--granularity", "tensor plans measure each block's ops on the transformers model: add "
                                          "--hf (without it remat's own layers are priced by formula)")
    gpu_overrides = {
        "peak_flops": args.peak_tflops * 1e12 if args.peak_tflops else None,
        "achievable": args.achievable,
        "link_bytes_per_s": args.link_gbps * 1e9 if args.link_gbps else None,
        "link_t0_s": None if args.link_t0_us is None else args.link_t0_us * 1e-6,
        "gpus_per_host_link": args.gpus_per_host_link,
    }
    cfg = from_name(args.model, layers=args.layers, seq=args.seq, micro_batch=args.micro_batch, tp=args.tp,
                    pp=args.pp, interleave=args.interleave, global_batch=args.global_batch, ep=args.ep)
    if args.interleave is not None and args.interleave > 1 and cfg.pp == 1:
        raise UsageError("--interleave", f"an interleaved schedule (m = {args.interleave}) needs pipeline stages: "
                                         "give --pp > 1 or --interleave 1")
    if args.global_batch is not None and args.global_batch % (cfg.micro_batch * args.dp):
        raise UsageError("--global-batch", f"{args.global_batch} is not a multiple of --micro-batch × --dp = "
                                           f"{cfg.micro_batch} × {args.dp}: every data-parallel rank runs whole "
                                           "micro-batches")
    if args.schedule is not None:
        _emit(args, _schedule_text(args, cfg, gpu_overrides))
        return 0
    try:
        text = _plan_text(args, cfg, gpu_overrides)
    except SearchTooLarge as exc:  # the exact solver's memory guard: no unproven plan is ever printed
        print(f"remat plan: error: {exc}; the exact search is too large at s = {cfg.seq}: plan at your training "
              "length (--seq), or with fewer choices (--policies none,full)", file=sys.stderr)
        return 1
    _warn_budget_above_gpu(args)
    context = from_name(args.model).max_positions          # the table --seq grows (learned positions refuse)
    if cfg.seq > context:
        print(f"remat plan: warning: s = {cfg.seq} exceeds the model's {context} positions "
              "(max_position_embeddings); planned as given", file=sys.stderr)
    _emit(args, _with_check(args, text))
    return 0


def _use_hf(args) -> bool:
    """--hf, or a config.json whose model_type remat's reader does not cover (transformers then reads it)."""
    if args.hf:
        return True
    path = Path(args.model)
    path = path / "config.json" if path.is_dir() else path
    if path.suffix != ".json":
        return False
    try:
        model_type = read_json_object(path).get("model_type")
    except UsageError:          # remat's own reader reports it, naming the field
        return False
    return model_type not in SUPPORTED and isinstance(model_type, str) and available()


_HF_UNSUPPORTED = {"tp": ("--tp", (None, 1)), "sp": ("--sp", (False,)), "pp": ("--pp", (None, 1)),
                   "ep": ("--ep", (None, 1)), "interleave": ("--interleave", (None, 1)),
                   "global_batch": ("--global-batch", (None,)), "calibrate": ("--calibrate", (False,)),
                   "weight_bytes": ("--weight-bytes", (None,)), "peak_tflops": ("--peak-tflops", (None,)),
                   "achievable": ("--achievable", (None,)),
                   "link_gbps": ("--link-gbps", (None,)), "link_t0_us": ("--link-t0-us", (None,)),
                   "gpus_per_host_link": ("--gpus-per-host-link", (None,))}
"""Flags the transformers path (remat.auto: t = p = 1, measured bytes, the GPU preset's rates) cannot honour:
argument name -> (flag, the values that mean "not set")."""


def _hf_plan_text(args) -> str:
    """The plan of the transformers model built from --model (remat.auto), rendered like every plan."""
    for name, (flag, unset) in _HF_UNSUPPORTED.items():
        if not any(getattr(args, name) is v or getattr(args, name) == v for v in unset):
            raise UsageError(flag, "not available with a transformers model (remat.auto plans t = p = 1 on one "
                                   f"GPU, measures the bytes, prices time at the --gpu preset); drop {flag}")
    choices = _choices(args)
    if args.format != "all":
        _tensor_format(args, args.format)
    budget = None if args.memory is None else parse_bytes(args.memory, "--memory")
    try:
        built, itemsize, result = _hf_run(args, budget, choices)
    except InfeasibleError as exc:
        s = args.seq or context_length(config_of(args.model))
        head = f"{exc}; s = {s}, b = {args.micro_batch or 1}; {exc.problem.meta['regime']}"
        raise InfeasibleError(". ".join([head, *_hf_fits(args, exc.problem, budget, choices, s)]),
                              exc.minimum_bytes) from None
    if args.no_baselines:
        result = dataclasses.replace(result, baselines={})
    meta = result.problem.meta
    extra = "".join(f", {k}={v}" for k, v in (("regime", f"resolve({args.regime!r}, {itemsize}"
                                                           f"{_overrides(args)})"),
                                               ("reserve", result.problem.fixed_parts.get("workspace reserve")),
                                               ("dp", args.dp if args.zero else 0), ("zero", args.zero),
                                               ("granularity", '"tensor"' if args.granularity == "tensor" else None),
                                               ("compiled", args.compiled or None))
                    if v not in (None, 0))
    meta.update(model=built.source, s=built.seq, b=built.micro_batch, L=len(result.policies),
                attention=f"transformers' {getattr(built.config, '_attn_implementation', None) or 'default'} "
                          "(measured as it runs)",
                s_from="--seq" if args.seq else "the config's context length; set --seq to your training length",
                b_from="--micro-batch" if args.micro_batch else "default; set --micro-batch",
                transformers_class=type(built.model).__name__, notes=_transformers_notes(built, itemsize),
                auto_call=["from remat.planner.regime import resolve",
                           f"# batch: input_ids and labels, int64 [b, s] = [{built.micro_batch}, {built.seq}]",
                           f"result = auto.plan(model, (), batch, budget={result.problem.budget_bytes}, "
                           f'gpu="{args.gpu}"{extra})  # budget in bytes'])
    _warn_budget_above_gpu(args)

    def render(fmt: str) -> str:
        _tensor_format(args, fmt)
        if fmt == "json":
            return json.dumps(result.to_json(), indent=2, default=str)
        text, kept = planner.render_plan(result.problem, result.plan, result.baselines, fmt), kept_lines(result)
        return text if not kept else "\n".join([text, "", "## Op outputs kept and offloaded per block (tensor plan)",
                                                 "", *[f"- {line}" for line in kept]])
    return _formats(args, render)


def _tensor_format(args, fmt: str) -> None:
    if args.granularity == "tensor" and fmt not in ("md", "json"):
        raise UsageError("--format", f"{fmt} cannot say which op outputs a block keeps: a tensor plan is "
                                     "written as md or json (its torch_policy: op -> CheckpointPolicy per block)")


def _transformers_notes(built, itemsize: int) -> list[str]:
    """What this transformers model keeps per layer that remat's own layer would not (remat.auto.hf)."""
    terms = per_layer_mask_terms(built.config, built.seq, built.micro_batch, itemsize)
    if not terms:
        return []
    listed = "; ".join(f"{name} {format_bytes(value)}" for name, value in terms.items())
    return [f"Each block of this transformers model keeps, with SDPA and a sliding window shorter than s: {listed} "
            "(torch converts the boolean mask per call; transformers repeats the key/value groups when it passes "
            "a mask), and its attention is priced over every query-key pair (a kernel given a mask computes them "
            "all). remat's own layer (without --hf, where it reads this model_type) builds the mask once, keeps the "
            "groups and is priced as a FlashAttention kernel that skips the pairs outside the window."]


def _hf_run(args, budget: int | None, choices: tuple, seq: int | None = None):
    """(built, the parameters' element size, auto.plan's result) for the transformers model of --model at
    s = ``seq`` (default --seq) under every --hf setting. Raises InfeasibleError (with ``.problem``)."""
    built = build(args.model, "fake", layers=args.layers, seq=seq or args.seq, micro_batch=args.micro_batch)
    with built.mode:
        itemsize = next(built.model.parameters()).element_size()
        result = auto.plan(built.model, (), built.kwargs, budget=budget, gpu=args.gpu, choices=choices,
                           reserve=parse_bytes(args.reserve, "--reserve"), regime=regime_of(args, itemsize),
                           dp=args.dp, zero=args.zero, host_memory=None if args.host_memory is None else
                           parse_bytes(args.host_memory, "--host-memory"), granularity=args.granularity,
                           compiled=args.compiled)
    return built, itemsize, result


def _hf_fits(args, problem, budget: int | None, choices: tuple, s: int) -> list[str]:
    """What would make the transformers model fit (remat.planner.suggest.summarize), each with the budget it
    needs: ZeRO-3 over more data-parallel ranks (the measured problem, its model state sharded) and a shorter
    --seq (measured again at each s tried)."""
    state = problem.meta["unsharded_state"]

    def with_dp(n: int) -> int | None:
        best = minimum_budget(dataclasses.replace(problem, fixed_parts={**problem.fixed_parts,
                                                                         **shard_state(state, n, 3)}))
        return None if best is None else best.peak_bytes

    def with_seq(seq: int) -> int | None:
        try:
            _hf_run(args, 1, choices, seq)
        except InfeasibleError as exc:
            return exc.minimum_bytes
        return None

    dps = [n for n in (2 ** k for k in range(1, 11)) if n > args.dp or args.zero < 3]
    seqs = [x for x in (2 ** k for k in range(30, 6, -1)) if MIN_SEQ <= x < s]
    return summarize([(dps, lambda n: f"--dp {n} --zero 3", with_dp), (seqs, lambda x: f"--seq {x}", with_seq)],
                     budget or GPUS[args.gpu].memory_bytes)


def _with_check(args, text: str) -> str:
    """The plan's text with --check-small's CPU check (remat.auto.check): a Markdown section after it, or its rows
    under "check" in the plan's JSON object (one document)."""
    if not args.check_small:
        return text
    rows = check_small(args.model, layers=args.check_layers, seq=args.check_seq, gpu=args.gpu,
                       granularity=args.granularity, compiled=args.compiled)
    if isinstance(text, dict):
        return {**text, "md": text["md"] + _check_markdown(args, rows),
                "json": json.dumps({**json.loads(text["json"]), "check": rows}, indent=2, default=str) + "\n"}
    if args.format == "json":
        return json.dumps({**json.loads(text), "check": rows}, indent=2, default=str) + "\n"
    return text + _check_markdown(args, rows)


def _check_markdown(args, rows: list[dict]) -> str:
    r0, k = rows[0], rows[0]["width_divisor"]
    width = f"h = {r0['hidden']}" + (f" (the model's ÷ {k}: heads, key/value groups and MLP width alike)" if k > 1
                                     else "") + ("" if r0["experts"] is None else
                                                 f", {r0['experts']} experts (at most 2 × top-k, each token's k kept)")
    lines = ["", f"## Check on this CPU: {args.check_layers} blocks, {width}, s = {r0['seq']}, b = 1, vocabulary ≤ "
                 f"1024, float32, budget {format_bytes(r0['budget_bytes'])} (between every block full and "
                 "none, so the plan mixes; no optimizer state)", "",
             "| setup | policies | saved | predicted peak | measured peak | error | "
             f"step (CPU, median of {r0['timing_samples']}) | gradients = none |",
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


def regime_of(args, itemsize: int) -> Regime:
    """The --regime for a model whose parameters take ``itemsize`` bytes, with --weight/--grad/--optimizer-bytes
    overriding its terms (remat.planner.regime)."""
    return resolve(args.regime, itemsize, args.weight_bytes, args.grad_bytes, args.optimizer_bytes)


def _overrides(args) -> str:
    """The overrides of ``regime_of`` as keyword arguments of remat.planner.regime.resolve ("" when none)."""
    named = (("weight", args.weight_bytes), ("grad", args.grad_bytes), ("optimizer", args.optimizer_bytes))
    return "".join(f", {k}={v}" for k, v in named if v is not None)


def _warn_budget_above_gpu(args) -> None:
    """One warning line on stderr when --memory exceeds the GPU preset's memory (the plan is still made)."""
    gpu = GPUS.get(args.gpu)
    if args.memory is not None and gpu is not None:
        budget = parse_bytes(args.memory, "--memory")
        if budget > gpu.memory_bytes:
            print(f"remat plan: warning: --memory {format_bytes(budget)} exceeds the {gpu.full_name}'s "
                  f"{format_bytes(gpu.memory_bytes)}", file=sys.stderr)


def _choices(args) -> tuple[str, ...]:
    """--policies as a tuple (remat.planner.problem.check_policies)."""
    return check_policies([x.strip() for x in args.policies.split(",")], "--policies")


def _hf_geometry(args):
    """--hf with --schedule: the transformers config's sizes as a ModelConfig (what the per-rank planner reads of
    a model besides its measured block: L, s, b, h, v, the layout and the dtype). Raises UsageError naming the
    field for a flag the transformers path cannot honour or a config it cannot read."""
    for name, (flag, unset) in _HF_UNSUPPORTED.items():
        if name not in ("pp", "interleave", "global_batch") and not any(
                getattr(args, name) is v or getattr(args, name) == v for v in unset):
            raise UsageError(flag, f"not available with a transformers model's per-rank plans; drop {flag}")
    c = config_of(args.model)
    heads = c.num_attention_heads
    return ModelConfig(name=str(args.model), arch="llama", hidden=c.hidden_size, heads=heads,
                       kv_heads=getattr(c, "num_key_value_heads", None) or heads,
                       layers=args.layers or c.num_hidden_layers, ffn_hidden=getattr(c, "intermediate_size", None)
                       or 4 * c.hidden_size, vocab=c.vocab_size, seq=args.seq or context_length(c),
                       micro_batch=args.micro_batch or 1, dtype=str(config_dtype(c)).removeprefix("torch."),
                       pp=args.pp or 1, interleave=args.interleave or 1, source=str(args.model),
                       global_batch=args.global_batch or 1)


def _schedule_text(args, cfg, gpu_overrides, hf: bool = False) -> str:
    """--schedule: the per-rank plans (remat.planner.ranks) as Markdown or JSON; ``hf``: priced from the
    transformers model's measured block (remat.auto.ranks) instead of remat's own layer."""
    if cfg.pp < 2:
        raise UsageError("--pp", "--schedule plans the ranks of a pipeline: give --pp 2 or more")
    if args.interleave is None:
        cfg = dataclasses.replace(cfg, interleave=default_interleave(args.schedule, cfg.interleave))
    if args.global_batch is None and cfg.source != "preset":       # as plan_model: N = 4·p for a config.json
        cfg = dataclasses.replace(cfg, global_batch=default_global_batch(cfg, args.dp))
    settings = make_settings(
        cfg, gpu_name=args.gpu, gpu_overrides=gpu_overrides,
        memory=None if args.memory is None else parse_bytes(args.memory, "--memory"),
        host_memory=None if args.host_memory is None else parse_bytes(args.host_memory, "--host-memory"),
        reserve=parse_bytes(args.reserve, "--reserve"), sp=args.sp, dp=args.dp, zero=args.zero, regime=args.regime,
        weight_bytes=args.weight_bytes, grad_bytes=args.grad_bytes, optimizer_bytes=args.optimizer_bytes,
        policies=_choices(args), calibrate=args.calibrate)
    priced = None
    if hf:
        built = build(args.model, "fake", layers=2, seq=cfg.seq, micro_batch=cfg.micro_batch)
        priced = auto_ranks.priced(built, settings, settings.gpu)
    plan = plan_pipeline(cfg, settings, args.schedule, priced=priced)

    def render(fmt: str) -> str:
        if fmt not in ("md", "json"):
            return pipeline_text.trainer_text(cfg, settings, plan, fmt, priced)
        if fmt == "json":
            return json.dumps(pipeline_text.to_json(plan, cfg.name, args.gpu), indent=2, default=str)
        return pipeline_text.to_markdown(plan, cfg.name, args.gpu)
    return _formats(args, render)


def _plan_text(args, cfg, gpu_overrides):
    """The plan in --format (every format, once solved, with --format all: ``_formats``)."""
    if args.format == "all":
        solved = planner.solve_model(cfg, **_plan_args(args, gpu_overrides))
        return _formats(args, lambda fmt: planner.render_plan(*solved, fmt))
    return planner.plan_model(cfg, fmt=args.format, **_plan_args(args, gpu_overrides))


def _plan_args(args, gpu_overrides) -> dict:
    return dict(
        gpu_name=args.gpu, gpu_overrides=gpu_overrides,
        memory=None if args.memory is None else parse_bytes(args.memory, "--memory"),
        host_memory=None if args.host_memory is None else parse_bytes(args.host_memory, "--host-memory"),
        reserve=parse_bytes(args.reserve, "--reserve"), sp=args.sp, dp=args.dp, zero=args.zero,
        regime=args.regime, weight_bytes=args.weight_bytes, grad_bytes=args.grad_bytes,
        optimizer_bytes=args.optimizer_bytes,
        policies=_choices(args), calibrate=args.calibrate,
        baselines=not args.no_baselines, sac_time_limit_s=args.sac_time_limit,
        given=tuple(k for k in ("seq", "micro_batch", "global_batch") if getattr(args, k) is not None))
