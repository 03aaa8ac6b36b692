"""What `remat measure | account | bandwidth` run once their arguments are parsed (remat.cli.runtime): one training
step measured, one layer's saved bytes (and its roofline times), the host<->device copy link. Imports torch,
numpy and pandas, so the parser loads it only when one of these commands runs."""

from __future__ import annotations

import pandas as pd

from remat.accounting import account_layer, format_account, resolve
from remat.cli.args import emit
from remat.errors import UsageError
from remat.measure.bandwidth import bandwidth_summary
from remat.measure.provenance import provenance, stamp
from remat.measure import step  # step.measure looked up when called: a test replaces it
from remat.models.presets import from_name
from remat.timemodel import predict
from remat.timemodel.gpus import gpu
from remat.units import parse_bytes


def run_measure(args) -> int:
    """`remat measure`: one training step of the preset under --policy on --device (remat.measure.step)."""
    cfg = from_name(args.model, layers=args.layers, seq=args.seq, micro_batch=args.micro_batch,
                    dtype=args.dtype, attention=args.attention)
    row = step.measure(cfg, args.policy, args.device, seed=args.seed, warmup=args.warmup, repeats=args.repeats,
                       timing=not args.no_timing, early_stop=args.early_stop)
    row = stamp(row, provenance(device=args.device, dtype=cfg.dtype, seed=args.seed))
    emit(row, args.json, "\n".join(f"{k}: {v}" for k, v in row.items()))
    return 0


_ACCOUNT_FLAGS = {"mode": "--mode", "tp": "--tp", "sp": "--sp", "seq": "--seq", "micro_batch": "--micro-batch",
                  "device": "--device", "dtype": "--dtype", "model": "--model"}


def run_account(args) -> int:
    """`remat account`: one layer's saved bytes beside Korthikanti Table 2 (remat.accounting); with --gpu, its
    roofline times."""
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
    cfg, t = resolve(args.model, args.mode, args.tp, args.sp, args.seq, args.micro_batch,
                     **({"dtype": args.dtype} if args.dtype else {}))
    times = predict(cfg, device, args.mode, t, args.sp)
    return {"gpu": device.name, "time_source": "roofline model (remat.timemodel)", **times.to_ms()}


def run_bandwidth(args) -> int:
    """`remat bandwidth`: the host<->device copy fits t = t0 + bytes/BW (remat.measure.bandwidth)."""
    lo = parse_bytes(args.min_size, "--min-size")
    hi = None if args.max_size is None else parse_bytes(args.max_size, "--max-size")
    out = bandwidth_summary(args.device, lo, hi, args.repeats, (False,) if args.no_overlap else (False, True))
    if args.json:
        emit(out, True)
        return 0
    cols = ["direction", "memory", "overlap", "t0_s", "bw_gb_s", "bw_gib_s", "max_rel_error_ge_1mib", "link"]
    print(f"remat bandwidth --device {out['device']} ({out['link']}); {out['units']}")
    print(pd.DataFrame(out["fits"])[cols].to_string(index=False))
    return 0
