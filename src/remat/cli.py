"""`remat <subcommand>`: argument parsing only; the work happens in the modules it calls.

Contract (scripts, rules and reports depend on these names):
    remat check      [--layers N] [--json]
    remat account    --model M --mode none|selective|full [--tp T] [--sp] [--seq S] [--micro-batch B] [--json]
    remat measure    --model M --policy P --device cpu|cuda|fake [--layers N] [--seq S] [--micro-batch B] [--json]
    remat bandwidth  --device cpu|cuda [--json]
    remat plan       --model M --memory 80GiB [...] [--format md|json]
    remat report     [--engine auto|quarto|fallback] [NAME ...]
    remat experiment NAME --params JSON --out FILE     (pipeline rules: one tidy table per call)
    remat figure     NAME --inputs CSV... --out PNG    (pipeline rules: tables -> one figure, PNG + SVG)

Exit codes: 0 ok; 1 a check failed; 2 bad input (one line naming the field, nothing written);
3 infeasible plan (names the smallest budget that works).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading

from remat.errors import InfeasibleError, UsageError


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit 2 (no usage dump)."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message}\n")


def _number(kind: type, minimum: float, strict: bool = False):
    """An argparse type: ``kind`` (int or float) ≥ ``minimum`` (> when ``strict``); the error names the value."""
    noun = "an integer" if kind is int else "a number"
    bound = f"{'>' if strict else '≥'} {minimum:g}"

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if value < minimum or (strict and value == minimum) or value != value:  # value != value: NaN
            raise argparse.ArgumentTypeError(f"{text!r} must be {bound}")
        return value

    convert.__name__ = f"{kind.__name__} {bound}"
    return convert


positive_int = _number(int, 1)
_nonnegative_int = _number(int, 0)
_positive_float = _number(float, 0, strict=True)
_nonnegative_float = _number(float, 0)


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _emit(obj, as_json: bool, text: str | None = None) -> None:
    print(json.dumps(obj, indent=2, default=str) if as_json else (text if text is not None else obj))


# --- check -------------------------------------------------------------------------------------------------

def _add_check(sub):
    p = sub.add_parser("check", help="numpy gradient checks of every checkpoint schedule (Chen 2016)")
    p.add_argument("--layers", type=positive_int, default=16, help="chain length L (default 16)")
    p.add_argument("--width", type=positive_int, default=8, help="layer width d (default 8)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_run_check)


def _run_check(args) -> int:
    from remat.experiments import chen
    table = chen.gradient_check(layers=args.layers, width=args.width)
    shown = ["schedule", "bitwise_equal", "max_abs_diff_vs_naive", "fd_rel_error", "peak_bytes",
             "peak_bytes_formula", "forwards", "forwards_formula", "passed"]
    if table["error"].notna().any():
        shown.append("error")
    _emit(table.to_dict(orient="records"), args.json, table[shown].to_string(index=False))
    failed = table.loc[~table["passed"], "schedule"].tolist()
    if failed:
        print(f"remat check: FAILED schedules: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


# --- experiment / figure (pipeline rules) --------------------------------------------------------------------

def _add_experiment(sub):
    from remat.experiments import REGISTRY
    p = sub.add_parser("experiment", help="run one experiment and write its tidy table (CSV)")
    p.add_argument("name", choices=sorted(REGISTRY))
    p.add_argument("--params", type=_json_object, default={}, help="experiment parameters as a JSON object")
    p.add_argument("--out", required=True, help="output CSV path (written atomically)")
    p.set_defaults(func=_run_experiment)


def _run_experiment(args) -> int:
    from remat.experiments import run_experiment
    run_experiment(args.name, args.params, args.out)
    return 0


def _add_figure(sub):
    from remat.figures import REGISTRY
    p = sub.add_parser("figure", help="draw one figure (PNG + SVG) from result tables")
    p.add_argument("name", choices=sorted(REGISTRY))
    p.add_argument("--inputs", nargs="+", required=True, help="result CSV paths")
    p.add_argument("--out", required=True, help="output .png path; an .svg is written beside it")
    p.set_defaults(func=_run_figure)


def _run_figure(args) -> int:
    from pathlib import Path

    from remat.figures import draw
    for path in args.inputs:
        if not Path(path).is_file():
            raise UsageError("--inputs", f"no such results table: {path}")
    draw(args.name, args.inputs, args.out)
    return 0


# --- report ----------------------------------------------------------------------------------------------------

def _add_report(sub):
    p = sub.add_parser("report", help="render the Quarto reports (quarto if on PATH, else the fallback)")
    p.add_argument("names", nargs="*", help="report names (reports/NAME.qmd); default: all")
    p.add_argument("--engine", choices=["auto", "quarto", "fallback"], default="auto")
    p.set_defaults(func=_run_report)


def _run_report(args) -> int:
    from remat.report import RenderError, render
    try:
        paths = render(args.names or None, engine=args.engine)
    except RenderError as exc:
        print(f"remat report: failed: {exc}", file=sys.stderr)
        return exc.exit_code
    for path in paths:
        print(path)
    return 0


# --- measure (runtime) -----------------------------------------------------------------------------------------

def _add_measure(sub):
    from remat.models.presets import DTYPES
    p = sub.add_parser("measure", help="measure one training step under a recompute policy: saved bytes, "
                                       "peak bytes, FLOPs, step time")
    p.add_argument("--model", required=True, help="preset (gpt2-124m, gpt3-175b, gpt-tiny, ...) or config.json")
    p.add_argument("--policy", required=True, help="none|selective|full|offload, uniform:N, block:N, "
                                                   "segments:k, or one policy per layer, comma-separated")
    p.add_argument("--device", required=True, choices=["cpu", "cuda", "fake"])
    p.add_argument("--layers", type=positive_int, help="override L")
    p.add_argument("--seq", type=positive_int, help="override s")
    p.add_argument("--micro-batch", type=positive_int, help="override b")
    p.add_argument("--dtype", choices=DTYPES, help="override the parameter/activation dtype")
    p.add_argument("--attention", choices=["math", "sdpa"],
                   help="override core attention: materialized softmax (math) or scaled_dot_product_attention")
    p.add_argument("--repeats", type=_number(int, 5), default=5, help="timed steps (≥ 5; default 5)")
    p.add_argument("--warmup", type=_nonnegative_int, default=1, help="untimed steps before timing (default 1)")
    p.add_argument("--no-timing", action="store_true", help="skip the timed steps (step_time_s null)")
    p.add_argument("--early-stop", action="store_true",
                   help="torch checkpoint early stop (recompute stops at the last saved tensor)")
    p.add_argument("--seed", type=_nonnegative_int, default=0)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run_measure)


def _run_measure(args) -> int:
    from remat.measure.step import measure
    from remat.models.presets import from_name
    cfg = from_name(args.model, layers=args.layers, seq=args.seq, micro_batch=args.micro_batch,
                    dtype=args.dtype, attention=args.attention)
    row = measure(cfg, args.policy, args.device, seed=args.seed, warmup=args.warmup, repeats=args.repeats,
                  timing=not args.no_timing, early_stop=args.early_stop)
    _emit(row, args.json, "\n".join(f"{k}: {v}" for k, v in row.items()))
    return 0

# --- account (Korthikanti accounting) --------------------------------------------------------------------------

_ACCOUNT_FLAGS = {"mode": "--mode", "tp": "--tp", "sp": "--sp", "seq": "--seq", "micro_batch": "--micro-batch",
                  "device": "--device", "dtype": "--dtype", "model": "--model"}


def _add_account(sub):
    p = sub.add_parser("account", help="saved-activation bytes of one GPT layer (one TP rank) beside "
                                       "Korthikanti Table 2, itemized by the paper's terms")
    p.add_argument("--model", required=True, help="preset (gpt-22b, gpt3-175b, mt-nlg-530b, gpt-1t, ...) or "
                                                  "config.json")
    p.add_argument("--mode", required=True, help="recompute: none|selective|full")
    p.add_argument("--tp", type=positive_int, help="tensor-parallel size t (default: the preset's, 8 for the "
                                                   "paper's models)")
    p.add_argument("--sp", action="store_true", help="sequence parallelism (needs t ≥ 2)")
    p.add_argument("--seq", type=positive_int, help="override s")
    p.add_argument("--micro-batch", type=positive_int, help="override b (default: the preset's, the paper's "
                                                            "for Table 3 models)")
    p.add_argument("--dtype", help="override the activation dtype (default: the preset's)")
    p.add_argument("--device", default="fake", help="fake (FakeTensorMode + fake process group; default) or "
                                                    "cpu (real tensors, t = 1)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run_account)


def _run_account(args) -> int:
    from remat.accounting import account_layer, format_account
    try:
        acc = account_layer(args.model, args.mode, args.tp, args.sp, args.seq, args.micro_batch,
                            device=args.device, **({"dtype": args.dtype} if args.dtype else {}))
    except UsageError as exc:  # name the flag, not the library's field
        flag = _ACCOUNT_FLAGS.get(exc.field)
        if flag is None:
            raise
        raise UsageError(flag, str(exc).removeprefix(f"{exc.field}: ")) from None
    _emit(acc.to_dict(), args.json, format_account(acc))
    return 0

# --- bandwidth (offload) ---------------------------------------------------------------------------------------

def _add_bandwidth(sub):
    p = sub.add_parser("bandwidth", help="host<->device copy bandwidth: pinned/pageable, both directions, fit "
                                         "t = t0 + bytes/BW (without CUDA: simulated, a host memcpy)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--min-size", default="64KiB", help="smallest copy (power of two; default 64KiB)")
    p.add_argument("--max-size", default=None, help="largest copy (power of two; default 1GiB cuda, 256MiB cpu)")
    p.add_argument("--repeats", type=positive_int, default=20, help="most repeats per size (big sizes: fewer)")
    p.add_argument("--no-overlap", action="store_true", help="skip the runs overlapped with a matmul")
    p.add_argument("--json", action="store_true", help="print JSON (fits and every point) instead of a table")
    p.set_defaults(func=_run_bandwidth)


def _run_bandwidth(args) -> int:
    from remat.measure.bandwidth import bandwidth_summary
    from remat.units import parse_bytes
    lo = parse_bytes(args.min_size, "--min-size")
    hi = None if args.max_size is None else parse_bytes(args.max_size, "--max-size")
    out = bandwidth_summary(args.device, lo, hi, args.repeats, (False,) if args.no_overlap else (False, True))
    if args.json:
        _emit(out, True)
        return 0
    import pandas as pd
    cols = ["direction", "memory", "overlap", "t0_s", "bw_gb_s", "bw_gib_s", "max_rel_error_ge_1mib", "link"]
    print(f"remat bandwidth --device {out['device']} ({out['link']}); {out['units']}")
    print(pd.DataFrame(out["fits"])[cols].to_string(index=False))
    return 0

# --- plan (planner) --------------------------------------------------------------------------------------------

def _add_plan(sub):
    from remat.planner.gpus import GPUS
    p = sub.add_parser("plan", help="exact per-layer recompute/offload plan for a model, GPU and memory budget")
    p.add_argument("--model", required=True, help="preset (gpt-22b, gpt3-175b, ...) or a config.json path")
    p.add_argument("--memory", help="device memory budget, e.g. 80GiB, 80GB or bytes (default: the GPU's)")
    p.add_argument("--gpu", default="a100-80gb", help=f"GPU preset ({', '.join(GPUS)}; default a100-80gb)")
    p.add_argument("--tp", type=positive_int, help="tensor-parallel size t (default: the preset's)")
    p.add_argument("--sp", action="store_true", help="sequence parallelism (Korthikanti §4.2.2)")
    p.add_argument("--pp", type=positive_int, help="pipeline-parallel size p (default: the preset's)")
    p.add_argument("--interleave", type=positive_int, help="interleaved stages per GPU m (default: preset's)")
    p.add_argument("--layers", type=positive_int, help="override L")
    p.add_argument("--seq", type=positive_int, help="override s")
    p.add_argument("--micro-batch", type=positive_int, help="override b")
    p.add_argument("--global-batch", type=positive_int, help="override the global batch B")
    p.add_argument("--dp", type=positive_int, default=1, help="data-parallel size (default 1)")
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=0,
                   help="ZeRO stage sharding model state over --dp: 1 optimizer, 2 +gradients, 3 +weights")
    p.add_argument("--weight-bytes", type=_nonnegative_int, default=2, help="bytes per parameter (default 2)")
    p.add_argument("--grad-bytes", type=_nonnegative_int, default=4, help="bytes per gradient (default 4)")
    p.add_argument("--optimizer-bytes", type=_nonnegative_int, default=12,
                   help="optimizer bytes per parameter (default 12: fp32 master + Adam m, v)")
    p.add_argument("--reserve", default="2GiB", help="stated workspace reserve (default 2GiB)")
    p.add_argument("--host-memory", help="host memory for offloaded activations (default: the GPU preset's)")
    p.add_argument("--peak-tflops", type=_positive_float, help="override peak 16-bit TFLOP/s")
    p.add_argument("--achievable", type=_positive_float, help="override the achievable fraction of peak")
    p.add_argument("--link-gbps", type=_positive_float, help="override host-link GB/s (10^9 B/s) per direction")
    p.add_argument("--link-t0-us", type=_nonnegative_float, help="override the per-copy latency (microseconds)")
    p.add_argument("--policies", default="none,selective,full,offload",
                   help="policies the plan may use (comma-separated; default all four)")
    p.add_argument("--calibrate", action="store_true",
                   help="measure per-layer forward/backward time on this machine instead of the FLOP model")
    p.add_argument("--no-baselines", action="store_true", help="skip the baselines")
    p.add_argument("--sac-time-limit", type=_positive_float, default=20.0,
                   help="seconds for torch's sac_milp baseline (torch's own default is 180)")
    p.add_argument("--format", choices=["md", "json"], default="md")
    p.add_argument("--out", help="write the plan here (atomically) instead of printing it")
    p.set_defaults(func=_run_plan)


def _run_plan(args) -> int:
    from remat.io import write_text
    from remat.models.presets import from_name
    from remat.planner import plan_model
    from remat.units import parse_bytes
    gpu_overrides = {
        "peak_flops": args.peak_tflops * 1e12 if args.peak_tflops else None,
        "achievable": args.achievable,
        "link_bytes_per_s": args.link_gbps * 1e9 if args.link_gbps else None,
        "link_t0_s": None if args.link_t0_us is None else args.link_t0_us * 1e-6,
    }
    cfg = from_name(args.model, layers=args.layers, seq=args.seq, micro_batch=args.micro_batch, tp=args.tp,
                    pp=args.pp, interleave=args.interleave, global_batch=args.global_batch)
    from remat.planner.mckp import SearchTooLarge
    try:
        text = _plan_text(args, cfg, gpu_overrides, plan_model, parse_bytes)
    except SearchTooLarge as exc:
        print(f"remat plan: error: {exc}", file=sys.stderr)
        return 1
    _warn_budget_above_gpu(args, parse_bytes)
    if args.out:
        write_text(args.out, text)
    else:
        print(text)
    return 0


def _warn_budget_above_gpu(args, parse_bytes) -> None:
    """One warning line on stderr when --memory exceeds the GPU preset's memory (the plan is still made)."""
    from remat.planner.gpus import GPUS
    from remat.units import format_bytes
    gpu = GPUS.get(args.gpu)
    if args.memory is not None and gpu is not None:
        budget = parse_bytes(args.memory, "--memory")
        if budget > gpu.memory_bytes:
            print(f"remat plan: warning: --memory {format_bytes(budget)} exceeds the {gpu.name}'s "
                  f"{format_bytes(gpu.memory_bytes)}", file=sys.stderr)


def _plan_text(args, cfg, gpu_overrides, plan_model, parse_bytes) -> str:
    return plan_model(
        cfg, gpu_name=args.gpu, gpu_overrides=gpu_overrides,
        memory=None if args.memory is None else parse_bytes(args.memory, "--memory"),
        host_memory=None if args.host_memory is None else parse_bytes(args.host_memory, "--host-memory"),
        reserve=parse_bytes(args.reserve, "--reserve"), sp=args.sp, dp=args.dp, zero=args.zero,
        weight_bytes=args.weight_bytes, grad_bytes=args.grad_bytes, optimizer_bytes=args.optimizer_bytes,
        policies=tuple(x.strip() for x in args.policies.split(",")), calibrate=args.calibrate,
        baselines=not args.no_baselines, sac_time_limit_s=args.sac_time_limit, fmt=args.format)


_SECTIONS = [_add_check, _add_experiment, _add_figure, _add_report, _add_bandwidth, _add_measure, _add_account,
             _add_plan]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="remat", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for add in _SECTIONS:
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    with _exit_on_interrupt():
        return _main(argv)


@contextlib.contextmanager
def _exit_on_interrupt():
    """While remat runs: SIGINT (Ctrl-C) or SIGTERM deletes the temp files being written, prints one line and
    exits at once (130 / 143), whatever Python is doing — importing torch, inside a weakref callback, where a
    KeyboardInterrupt could be swallowed. Handlers are restored afterwards (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum, frame):
        from remat.io import discard_pending
        discard_pending()
        os.write(2, f"remat: interrupted ({signal.Signals(signum).name}); nothing written\n".encode())
        os._exit(128 + signum)

    before = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UsageError as exc:
        print(f"remat {args.command}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except InfeasibleError as exc:
        print(f"remat {args.command}: infeasible: {exc}", file=sys.stderr)
        return exc.exit_code
    except (MemoryError, RuntimeError) as exc:
        from remat.device import is_out_of_memory
        if not is_out_of_memory(exc):
            raise
        print(f"remat {args.command}: error: does not fit in memory ({str(exc).splitlines()[0][:160]}); "
              "use smaller --seq / --micro-batch / --layers, or --device fake", file=sys.stderr)
        return UsageError.exit_code


if __name__ == "__main__":
    sys.exit(main())
