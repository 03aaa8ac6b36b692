"""`remat measure | account | bandwidth`: one training step, one layer's saved bytes, the copy link."""

from __future__ import annotations

from remat.cli.args import command, emit, model_help, nonnegative_int, number, positive_int
from remat.errors import UsageError

def add_measure(sub):
    from remat.models.presets import DTYPES
    p = command(sub, "measure", "measure one training step under a recompute policy: saved bytes, peak bytes, "
                                "FLOPs, step time",
                ["remat measure --model gpt2-124m --policy selective --device cpu --seq 256 --json",
                 "remat measure --model gpt3-175b --policy full --device fake --layers 1 --json"])
    p.add_argument("--model", required=True, help=model_help())
    p.add_argument("--policy", required=True, help="none|selective|full|offload, uniform:N, block:N, "
                                                   "segments:k, or one policy per layer, comma-separated")
    p.add_argument("--device", required=True, choices=["cpu", "cuda", "fake"],
                   help="cpu or cuda: run it; fake: FakeTensorMode (any size, no memory, no time)")
    p.add_argument("--layers", type=positive_int, help="override L")
    p.add_argument("--seq", type=positive_int, help="override s")
    p.add_argument("--micro-batch", type=positive_int, help="override b")
    p.add_argument("--dtype", choices=DTYPES, help="override the parameter/activation dtype")
    p.add_argument("--attention", choices=["math", "sdpa"],
                   help="override core attention: materialized softmax (math) or scaled_dot_product_attention")
    p.add_argument("--repeats", type=number(int, 5), default=5, help="timed steps (≥ 5; default 5)")
    p.add_argument("--warmup", type=nonnegative_int, default=1, help="untimed steps before timing (default 1)")
    p.add_argument("--no-timing", action="store_true", help="skip the timed steps (step_time_s null)")
    p.add_argument("--early-stop", action="store_true",
                   help="torch checkpoint early stop (recompute stops at the last saved tensor)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the weights and tokens (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run_measure)


def _run_measure(args) -> int:
    from remat.measure.provenance import provenance, stamp
    from remat.measure.step import measure
    from remat.models.presets import from_name
    cfg = from_name(args.model, layers=args.layers, seq=args.seq, micro_batch=args.micro_batch,
                    dtype=args.dtype, attention=args.attention)
    row = measure(cfg, args.policy, args.device, seed=args.seed, warmup=args.warmup, repeats=args.repeats,
                  timing=not args.no_timing, early_stop=args.early_stop)
    row = stamp(row, provenance(device=args.device, dtype=cfg.dtype, seed=args.seed))
    emit(row, args.json, "\n".join(f"{k}: {v}" for k, v in row.items()))
    return 0


_ACCOUNT_FLAGS = {"mode": "--mode", "tp": "--tp", "sp": "--sp", "seq": "--seq", "micro_batch": "--micro-batch",
                  "device": "--device", "dtype": "--dtype", "model": "--model"}


def add_account(sub):
    p = command(sub, "account", "saved-activation bytes of one GPT layer (one TP rank) beside Korthikanti "
                                "Table 2, itemized by the paper's terms",
                ["remat account --model gpt3-175b --mode selective --tp 8 --sp --json"])
    p.add_argument("--model", required=True, help=model_help())
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
    p.add_argument("--gpu", help="also predict the layer's forward / backward / recompute milliseconds on this "
                                 "GPU preset (roofline time model, remat.timemodel; e.g. a100-80gb)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=_run_account)


def _run_account(args) -> int:
    from remat.accounting import account_layer, format_account
    from remat.timemodel.gpus import gpu
    device = None if args.gpu is None else gpu(args.gpu)   # a bad preset fails before any work
    try:
        acc = account_layer(args.model, args.mode, args.tp, args.sp, args.seq, args.micro_batch,
                            device=args.device, **({"dtype": args.dtype} if args.dtype else {}))
    except UsageError as exc:  # name the flag, not the library's field
        flag = _ACCOUNT_FLAGS.get(exc.field)
        if flag is None:
            raise
        raise UsageError(flag, str(exc).removeprefix(f"{exc.field}: ")) from None
    out, text = acc.to_dict(), format_account(acc)
    if device is not None:
        out["time"] = _predicted_ms(args, device)
        text += "\n  predicted on {gpu} (roofline model, one layer, one micro-batch): forward {forward_ms:.3f} ms, " \
                "backward {backward_ms:.3f} ms (of which recompute {recompute_ms:.3f} ms)".format(**out["time"])
    emit(out, args.json, text)
    return 0


def _predicted_ms(args, device) -> dict:
    """The roofline model's milliseconds for the account's layer, mode, t and SP on GPU ``device``."""
    from remat.accounting import resolve
    from remat.timemodel import predict
    cfg, t = resolve(args.model, args.mode, args.tp, args.sp, args.seq, args.micro_batch,
                     **({"dtype": args.dtype} if args.dtype else {}))
    times = predict(cfg, device, args.mode, t, args.sp)
    return {"gpu": device.name, "time_source": "roofline model (remat.timemodel)", **times.to_ms()}


def add_bandwidth(sub):
    p = command(sub, "bandwidth", "host<->device copy bandwidth: pinned/pageable, both directions, fit "
                                  "t = t0 + bytes/BW (without CUDA: simulated, a host memcpy)",
                ["remat bandwidth", "remat bandwidth --device cuda --json"])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu",
                   help="cpu (default: a simulation, host memcpy) or cuda (the real host<->GPU link)")
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
        emit(out, True)
        return 0
    import pandas as pd
    cols = ["direction", "memory", "overlap", "t0_s", "bw_gb_s", "bw_gib_s", "max_rel_error_ge_1mib", "link"]
    print(f"remat bandwidth --device {out['device']} ({out['link']}); {out['units']}")
    print(pd.DataFrame(out["fits"])[cols].to_string(index=False))
    return 0
