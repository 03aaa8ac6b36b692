"""The planning problem as data: per layer, a list of options (none / selective / full / offload), each with
its memory cost and its time cost; plus the bytes and seconds outside the layers, the budget, the host limit.

The memory model of one GPU — the first pipeline stage, the most loaded one:

    peak = fixed_bytes + Σ_i stored_bytes[i] + max(transient_floor_bytes, max_i transient_bytes[i])

or, with ``prefix=True`` (one micro-batch in flight: backward frees the layers from the last one back, so
while layer i's backward runs only the layers before it still hold their activations):

    peak = fixed_bytes + max(Σ_i stored_bytes[i] + transient_floor_bytes,
                             max_i (Σ_{k≤i} stored_bytes[k] + transient_bytes[i]))

* ``fixed_bytes`` = weights + gradients + optimizer state + terms outside the layers (Korthikanti §4.3)
  + a stated workspace reserve (named parts in ``fixed_parts``);
* ``stored_bytes`` of a layer's option = device bytes it keeps from its forward to its backward, summed over
  the micro-batches in flight (Korthikanti §4.2: the interleave factor is folded in by the cost builder);
* ``transient_bytes`` = device bytes that exist only while that layer's backward runs (the recomputed
  activations of ``full``/``selective``, the activations fetched back for ``offload``). Backward runs one
  layer at a time, so only the worst transient counts — the term that makes the problem non-separable;
* ``transient_floor_bytes`` = the worst transient outside the layers (the LM head's backward), which meets
  every stored activation.

Host memory: Σ_i offload_bytes[i] ≤ host_limit_bytes (None = unlimited).

Step time = fixed_time_s + Σ_i time_s[i] (forward + backward + recompute + exposed offload time).

Everything here is plain data (frozen dataclasses, int bytes, float seconds); ``evaluate`` computes a plan's
peak and time exactly in integers, so every solver and baseline is scored by the same function.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from remat.errors import UsageError
from remat.policies import POLICIES, Policy



@dataclass(frozen=True)
class Option:
    """One choice for one layer.

    policy: "none" | "selective" | "full" | "offload".
    stored_bytes: device bytes kept from forward to backward, all micro-batches in flight (int ≥ 0).
    transient_bytes: extra device bytes while this layer's backward runs (int ≥ 0).
    time_s: seconds this layer adds to a step: forward + backward + recompute + exposed transfer (≥ 0).
    recompute_flops: FLOPs re-run in backward (int ≥ 0; Korthikanti Appendix A counting).
    offload_bytes: bytes held in host memory (and copied each way) by this layer (int ≥ 0).
    variant: "" or, for one of several options of one policy, its name (a tensor plan's kept sets: "k3").
    """

    policy: Policy
    stored_bytes: int
    transient_bytes: int
    time_s: float
    recompute_flops: int = 0
    offload_bytes: int = 0
    variant: str = ""

    @property
    def key(self) -> tuple[str, str]:
        """(policy, variant): what names the option within its layer."""
        return self.policy, self.variant

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise UsageError("policy", f"unknown policy {self.policy!r} (known: {', '.join(POLICIES)})")
        for name in ("stored_bytes", "transient_bytes", "recompute_flops", "offload_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(name, f"must be an integer number of bytes/FLOPs, got {value!r}")
            if value < 0:
                raise UsageError(name, f"must not be negative, got {value}")
        if not self.time_s >= 0:  # also rejects NaN
            raise UsageError("time_s", f"must be a non-negative number of seconds, got {self.time_s!r}")


@dataclass(frozen=True)
class Layer:
    """A layer's options (at least one) and a label saying what kind of layer it is (e.g. "first")."""

    index: int
    options: tuple[Option, ...]
    kind: str = "layer"

    def __post_init__(self):
        if not self.options:
            raise UsageError("options", f"layer {self.index} has no option")
        keys = [o.key for o in self.options]
        if len(set(keys)) != len(keys):
            raise UsageError("options", f"layer {self.index} lists a policy twice: {[o.policy for o in self.options]}")

    def option(self, policy: str, variant: str = "") -> Option | None:
        """The option with this policy (and variant), or None when the layer does not offer it."""
        return next((o for o in self.options if o.key == (policy, variant)), None)


@dataclass(frozen=True)
class Problem:
    """The whole instance.

    layers: the layers of the planned GPU in forward order.
    fixed_parts: named bytes outside the per-layer choices (weights, gradients, optimizer, outside, reserve…).
    budget_bytes: device memory budget (int bytes).
    host_limit_bytes: host memory for offload (int bytes) or None for unlimited.
    fixed_time_s: seconds of a step spent outside the layers (embedding, logits, optimizer step).
    transient_floor_bytes: the worst transient outside the layers (bytes).
    prefix: the memory model of one micro-batch in flight (module docstring); False = the conservative
    "every stored activation + the worst transient" model (several micro-batches in flight).
    """

    layers: tuple[Layer, ...]
    fixed_parts: dict[str, int]
    budget_bytes: int
    host_limit_bytes: int | None = None
    fixed_time_s: float = 0.0
    transient_floor_bytes: int = 0
    prefix: bool = False
    meta: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if not self.layers:
            raise UsageError("layers", "the problem has no layer")
        for name, value in list(self.fixed_parts.items()) + [("budget_bytes", self.budget_bytes),
                                                             ("host_limit_bytes", self.host_limit_bytes),
                                                             ("transient_floor_bytes",
                                                              self.transient_floor_bytes)]:
            if value is None and name == "host_limit_bytes":
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise UsageError(name, f"must be an integer number of bytes, got {value!r}")
            if value < 0:
                raise UsageError(name, f"must not be negative, got {value}")

    @property
    def fixed_bytes(self) -> int:
        """Σ fixed_parts (bytes)."""
        return sum(self.fixed_parts.values())


@dataclass(frozen=True)
class Plan:
    """A choice of one option per layer, scored by ``evaluate`` (exact integers for bytes)."""

    choices: tuple[int, ...]          # index into each layer's options
    policies: tuple[str, ...]
    peak_bytes: int
    stored_bytes: int                 # Σ stored over layers
    transient_bytes: int              # max transient over layers (and the floor)
    step_time_s: float
    recompute_flops: int
    offload_bytes: int
    feasible: bool                    # peak ≤ budget and offload ≤ host limit
    optimal: bool = False             # proven optimal by the exact solver


def evaluate(problem: Problem, choices, optimal: bool = False) -> Plan:
    """Score a plan: ``choices[i]`` indexes ``problem.layers[i].options``.

    Returns a Plan with peak_bytes from the problem's memory model (module docstring; int bytes, exact),
    step_time_s = fixed_time_s + Σ time_s (seconds) and feasible = (peak ≤ budget and offload ≤ host limit).
    Raises ValueError when the number of choices does not match the layers or an index is out of range.
    """
    choices = tuple(int(c) for c in choices)
    if len(choices) != len(problem.layers):
        raise ValueError(f"{len(choices)} choices for {len(problem.layers)} layers")
    opts = []
    for layer, c in zip(problem.layers, choices):
        if not 0 <= c < len(layer.options):
            raise ValueError(f"layer {layer.index}: option {c} out of range")
        opts.append(layer.options[c])
    stored = sum(o.stored_bytes for o in opts)
    transient = max([problem.transient_floor_bytes] + [o.transient_bytes for o in opts])
    offload = sum(o.offload_bytes for o in opts)
    if problem.prefix:
        running, layers_peak = 0, 0
        for o in opts:
            running += o.stored_bytes
            layers_peak = max(layers_peak, running + o.transient_bytes)
        peak = problem.fixed_bytes + max(stored + problem.transient_floor_bytes, layers_peak)
    else:
        peak = problem.fixed_bytes + stored + transient
    host_ok = problem.host_limit_bytes is None or offload <= problem.host_limit_bytes
    return Plan(
        choices=choices,
        policies=tuple(o.policy for o in opts),
        peak_bytes=peak,
        stored_bytes=stored,
        transient_bytes=transient,
        step_time_s=problem.fixed_time_s + sum(o.time_s for o in opts),
        recompute_flops=sum(o.recompute_flops for o in opts),
        offload_bytes=offload,
        feasible=peak <= problem.budget_bytes and host_ok,
        optimal=optimal,
    )


def plan_from_policies(problem: Problem, policies) -> Plan | None:
    """Score a plan given as policy names per layer; None when a layer does not offer the named policy."""
    choices = []
    for layer, policy in zip(problem.layers, policies, strict=True):
        idx = next((k for k, o in enumerate(layer.options) if o.key == (policy, "")), None)
        if idx is None:
            return None
        choices.append(idx)
    return evaluate(problem, choices)


def check_policies(choices, field: str) -> tuple[str, ...]:
    """``choices`` (policy names) as a tuple; UsageError(``field``) for a string, an unknown policy, one given
    twice, or none."""
    if isinstance(choices, str):
        raise UsageError(field, f"a list of policies, not the string {choices!r}: e.g. ({choices!r},)")
    choices = tuple(choices)
    unknown = [c for c in choices if c not in POLICIES]
    if unknown or not choices or len(set(choices)) < len(choices):
        raise UsageError(field, f"unknown policy {unknown[0]!r} (known: {', '.join(POLICIES)})" if unknown
                         else "each policy at most once" if choices else "at least one policy")
    return choices


def check_dp_zero(dp, zero, fields: tuple[str, str] = ("dp", "zero")) -> None:
    """UsageError naming ``fields[0]`` unless ``dp`` is an integer ≥ 1, ``fields[1]`` unless ``zero`` is a ZeRO
    stage 0–3 and, for a stage above 0, ``dp`` > 1 (ZeRO shards the model state over the data-parallel ranks: with
    one it shards nothing). ``fields``: the names the caller's user gave them (the CLI's "--dp", "--zero")."""
    if isinstance(dp, bool) or not isinstance(dp, int) or dp < 1:
        raise UsageError(fields[0], f"must be an integer ≥ 1, got {dp!r}")
    if isinstance(zero, bool) or zero not in (0, 1, 2, 3):
        raise UsageError(fields[1], f"ZeRO stage must be 0, 1, 2 or 3, got {zero!r}")
    if zero and dp == 1:
        raise UsageError(fields[1], f"ZeRO stage {zero} shards the model state over data-parallel ranks: it needs "
                                    f"{fields[0]} > 1 (got {fields[0]} 1)")
