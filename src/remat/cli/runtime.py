"""`remat measure | account | bandwidth`: one training step, one layer's saved bytes, the copy link. Their
arguments here; their work in remat.cli.runtime_run."""

from __future__ import annotations

from remat.cli.args import command, model_help, nonnegative_int, number, positive_int
from remat.models.presets import DTYPES


def add_measure(sub):
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


def _run_measure(args) -> int:
    return _work().run_measure(args)


def _run_account(args) -> int:
    return _work().run_account(args)


def _run_bandwidth(args) -> int:
    return _work().run_bandwidth(args)


def _work():
    """remat.cli.runtime_run, where these commands' work is, imported when one of them runs."""
    from remat.cli import runtime_run  # imports torch, numpy and pandas: kept out of `remat --help`
    return runtime_run
