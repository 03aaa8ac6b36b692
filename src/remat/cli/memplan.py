"""`remat memplan`: Chen et al. 2016's memory strategies on the paper's ResNet or LSTM, traced at any size
under fake tensors (no memory used): planned feature-map bytes and recomputed FLOPs per strategy."""

from __future__ import annotations

import dataclasses

from remat.cli.args import command, emit, positive_int
from remat.errors import UsageError
from remat.units import format_bytes, parse_bytes

CHOICES = ("no-opt", "inplace", "sharing", "drop-cheap", "sublinear", "sqrt", "optimal")


def add_memplan(sub):
    p = command(sub, "memplan", "Chen 2016 memory planning (§3, Alg. 2/3) of the paper's ResNet or LSTM at any "
                                "size, under fake tensors: planned feature-map bytes per strategy",
                ["remat memplan --net resnet --depth 1000", "remat memplan --net lstm --length 64 --json",
                 "remat memplan --net resnet --depth 200 --strategy sharing --budget 1GiB"],
                "strategies: no-opt, inplace, sharing, drop-cheap (recompute BN/activations/pooling), sublinear "
                "(Algorithm 3 with its grid), and the comparisons sqrt (⌈√n⌉ stages) and optimal (least x + y)")
    p.add_argument("--net", choices=("resnet", "lstm"), required=True, help="§5.2 ResNet or §5.3 LSTM")
    p.add_argument("--depth", type=positive_int, help="ResNet layers (default 1000; ≥ 14; blocks per stage by "
                                                       "remat.models.resnet.blocks_for_depth, shown in the output)")
    p.add_argument("--length", type=positive_int, help="LSTM time steps (default 64)")
    p.add_argument("--batch", type=positive_int, help="batch size (default: the paper's, 32 / 64)")
    p.add_argument("--strategy", action="append", choices=CHOICES,
                   help="a strategy to plan (repeatable; default: all)")
    p.add_argument("--budget", help="also run Algorithm 3 once at this budget B (bytes, e.g. 2GiB; ≥ 0): B bounds "
                                    "the output bytes a segment accumulates before the next split, not the total "
                                    "memory; the row shows B, the bytes kept at splits (x) and the largest "
                                    "segment (y)")
    p.add_argument("--grid-points", type=positive_int, default=6, help="Algorithm 3's grid points (default 6)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=_run)


def _budget(text: str | None) -> int | None:
    if text is None:
        return None
    if text.strip().startswith("-"):
        raise UsageError("--budget", f"must be ≥ 0 bytes, got {text!r}")
    return parse_bytes(text, "--budget")


def _run(args) -> int:
    from remat.experiments import chen_graph  # pandas and numpy: kept out of `remat --help`
    from remat.graph import budget as alg3, strategies  # numpy: kept out of `remat --help`

    budget = _budget(args.budget)
    names = list(dict.fromkeys(args.strategy or CHOICES))
    sizes = {} if args.batch is None else {"batch": args.batch}
    wrong = {"resnet": ("--length", args.length), "lstm": ("--depth", args.depth)}[args.net]
    if wrong[1] is not None:
        raise UsageError(wrong[0], f"does not apply to --net {args.net}")
    if args.net == "resnet":
        graph = chen_graph.resnet_graph(args.depth or 1000, dataclasses.replace(chen_graph.ResNetParams(), **sizes))
    else:
        graph = chen_graph.lstm_graph(args.length or 64, dataclasses.replace(chen_graph.LSTMParams(), **sizes))
    rows = chen_graph.strategy_rows(graph, names, args.grid_points)
    if budget is not None:
        rows.append({**strategies.segmented(graph, alg3.greedy(graph, budget), "budget").row(), "plan_s": None})
    for row in rows:
        row["graph"] = graph.name
    text = "\n".join([f"{graph.name}: {len(graph.nodes)} nodes, forward {graph.forward_flops() / 1e9:.1f} GFLOP",
                      *(f"  {r['strategy']:10s} planned {format_bytes(r['planned_bytes']):>11s}  live peak "
                        f"{format_bytes(r['live_peak_bytes']):>11s}  recomputed {r['recomputed_nodes']:5d} nodes, "
                        f"{r['recompute_ratio']:.2f} of the forward FLOPs"
                        + (f"  ({r['splits']} splits)" if r["splits"] is not None else "")
                        + (f"  B {format_bytes(r['budget_bytes'])}, x {format_bytes(r['x_bytes'])}, "
                           f"y {format_bytes(r['y_bytes'])}" if r["budget_bytes"] is not None else "")
                        for r in rows),
                      "(FLOPs are FlopCounterMode's: matmuls and convolutions; element-wise ops count none)"])
    emit(rows, args.json, text)
    return 0
