"""Any model, one call: plan and apply per-block recomputation on an eager nn.Module (HuggingFace included),
with no GPU needed to plan, and explain what checkpointing actually saved.

    from remat import auto
    result = auto.plan(model, example_args, example_kwargs=None, budget="24GiB", gpu="h100-80gb",
                       choices=("none", "selective", "full", "offload"))  # choices=("full",): every block full
    auto.apply(model, result)     # wraps the chosen blocks in place; parameter names and state_dict unchanged
    print(result)                 # per block: policy, bytes kept, extra time; totals vs budget

Modules: ``blocks`` (which modules are the blocks), ``measure`` (per-block bytes and seconds under
FakeTensorMode; the whole step in ``whole_step``), ``planning`` (the exact planner's problem, the AutoPlan result),
``tensors`` (a block's op stream and the kept set torch's selective checkpoint applies: granularity="tensor"),
``tensor_offload`` (a kept set's op outputs on the host between forward and backward), ``wrap`` (apply / clear),
``hf`` (transformers models from a config, nothing downloaded), ``check`` (a plan checked by measurement on this
CPU), ``diagnose`` (``explain``: one step as it is: bytes kept per block, recompute FLOPs,
the known traps; its parts in ``explain_step``, ``instruments``, ``explain_rows``, ``traps``, ``explanation``).
"""

from __future__ import annotations

from typing import Sequence

from remat.auto import diagnose
from remat.auto.blocks import Blocks, find_blocks
from remat.auto.fake import keyword_inputs
from remat.auto.measure import measure_model
from remat.auto.planning import build_problem, solve_blocks
from remat.auto.wrap import apply, clear
from remat.errors import InfeasibleError, UsageError
from remat.planner.problem import POLICIES, check_dp_zero, check_policies
from remat.planner.regime import Regime
from remat.timemodel.gpus import gpu as gpu_preset
from remat.timemodel.roofline import TIME_SOURCE
from remat.units import parse_bytes

GRANULARITIES = ("block", "tensor")
TIME_SOURCES = {False: TIME_SOURCE, True: f"{TIME_SOURCE}, elementwise ops fused as under torch.compile"}
"""A plan's time source by ``compiled``."""
__all__ = ["plan", "apply", "clear", "explain", "find_blocks", "Blocks", "POLICIES"]


def plan(model, example_args=(), example_kwargs: dict | None = None, budget: str | int | None = None,
         gpu: str = "h100-80gb", choices: Sequence[str] = POLICIES, blocks=None, loss_fn=None,
         optimizer_state_bytes: int | None = None, host_memory: str | int | None = None,
         reserve: str | int = 0, regime=None, dp: int = 1, zero: int = 0, granularity: str = "block",
         compiled: bool = False):
    """The per-block policy of least predicted step time whose predicted peak fits ``budget``.

    model: any eager nn.Module (real or fake parameters; nothing real is allocated: it runs under
    FakeTensorMode). example_args / example_kwargs: one training micro-batch as the model takes it (the
    loss is ``loss_fn(output)``, default ``output.loss`` or the sum of the first tensor). budget: device
    bytes (int, or text such as "24GiB" / "80GB"; None = the GPU preset's memory). gpu: a preset of
    remat.timemodel.gpus (rates for the roofline time model, the host link for offload). choices: the
    policies a block may take. blocks: None (found: remat.auto.find_blocks), a container's name or a list of
    modules. optimizer_state_bytes: None = Adam's two moments in the parameters' dtype. reserve: bytes set
    aside for what no tensor of the model accounts for (CUDA context, allocator fragmentation, communication
    buffers; ``remat plan`` states 2 GiB); 0 by default, so the peak is the model's tensors alone. regime: None
    (the model state as this eager model keeps it: its parameters, Adam's moments in their dtype, gradients made
    by backward) or a remat.planner.regime.Regime (``remat plan --regime``: the same bytes per parameter on
    every planning path; then ``optimizer_state_bytes`` is not used). dp, zero: the model state sharded by ZeRO
    stage ``zero`` over ``dp`` data-parallel ranks (remat.auto.planning.shard_state). granularity: "block" (one
    of ``choices`` per block) or "tensor" (selective also as any kept set of the block's op outputs on the exact
    Pareto frontier of bytes against recompute time: remat.auto.measure.tensor_variants; with "offload" among
    ``choices`` also with some or all of the set on the host: remat.auto.tensor_offload; ``result.kept_sets``
    per block, applied by ``auto.apply`` through torch's selective-checkpoint contexts). compiled: the model
    will train under torch.compile — time at fused rates (remat.timemodel.roofline ``Rates.fused``: elementwise,
    normalisation and softmax ops launch and write nothing, inductor fusing them, but read their inputs once;
    GEMMs, convolutions and attention keep their roofline time), so a plan's kept sets hold outputs whose
    recompute costs FLOPs. Memory stays the eager accounting: a budget the eager step fits.

    Returns an AutoPlan (remat.auto.planning): ``policies``, ``plan.peak_bytes`` (bytes), ``plan.step_time_s``
    (seconds), ``print(result)``. Raises UsageError naming the argument for bad input, InfeasibleError with the
    smallest budget that works when nothing fits. Source: remat.auto.measure (costs), remat.planner.solve
    (exact).
    """
    choices = _checked(choices, dp, zero, compiled)
    _check_state(optimizer_state_bytes, regime)
    if granularity not in GRANULARITIES:
        raise UsageError("granularity", f"{granularity!r} is not one of {', '.join(GRANULARITIES)}")
    device = gpu_preset(gpu, field="gpu")
    budget_bytes = device.memory_bytes if budget is None else parse_bytes(budget, "budget")
    if budget_bytes <= 0:
        raise UsageError("budget", f"must be a positive size, got {budget!r}")
    host = device.host_memory_bytes if host_memory is None else parse_bytes(host_memory, "host_memory")
    found = find_blocks(model, blocks)
    args = example_args if isinstance(example_args, (tuple, list)) else (example_args,)
    costs = measure_model(model, tuple(args), keyword_inputs(example_kwargs), found, device, loss_fn, choices,
                          granularity, compiled)
    problem = build_problem(costs, budget_bytes, choices, optimizer_state_bytes, host,
                            reserve_bytes=parse_bytes(reserve, "reserve"), regime=regime, dp=dp, zero=zero,
                            meta={"gpu": device.name, "gpu_name": device.full_name or device.name,
                                  "time_source": TIME_SOURCES[compiled], "blocks": len(found),
                                  "granularity": granularity})
    try:
        return solve_blocks(problem, found, costs)
    except InfeasibleError as exc:
        raise InfeasibleError(str(exc), exc.minimum_bytes, problem) from None


def _check_state(optimizer_state_bytes, regime) -> None:
    """UsageError naming ``optimizer_state_bytes`` (not None or an int ≥ 0) or ``regime`` (not None or a Regime)."""
    given = optimizer_state_bytes
    if given is not None and (isinstance(given, bool) or not isinstance(given, int) or given < 0):
        raise UsageError("optimizer_state_bytes", f"None (Adam's two moments) or bytes ≥ 0, not {given!r}")
    if regime is not None and not isinstance(regime, Regime):
        raise UsageError("regime", f"a remat.planner.regime.Regime (e.g. resolve({regime!r}, 2) for the CLI's "
                                   f"--regime), not {type(regime).__name__}")


def _checked(choices, dp, zero, compiled) -> tuple[str, ...]:
    """``choices`` as a tuple; UsageError naming ``choices``, ``dp``, ``zero`` or ``compiled`` for a value plan
    cannot take."""
    if not isinstance(compiled, bool):
        raise UsageError("compiled", f"True or False, not {compiled!r}")
    check_dp_zero(dp, zero)
    return check_policies(choices, "choices")


def explain(model, example_args=(), example_kwargs: dict | None = None, **options):
    """One step of ``model`` as it is: bytes kept per block, recompute FLOPs, the known traps
    (remat.auto.diagnose.explain)."""
    return diagnose.explain(model, example_args, example_kwargs, **options)
