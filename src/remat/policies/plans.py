"""Plans: the per-layer policies a model runs under (``LayerPolicies``) and the spec parser (``parse_plan``):
a policy name, a comma-separated list, or the Megatron/Chen shorthands uniform:N, block:N, segments:k.

No torch: the planner, the CLI and the accounting read these names without building a model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Literal, Sequence, get_args

from remat.errors import UsageError
from remat.formulas.chen import segment_bounds

Policy = Literal["none", "selective", "full", "offload"]
"""The per-layer recompute policies the planner chooses among (runtime and CLI accept RUNTIME_POLICIES)."""
POLICIES: tuple[str, ...] = get_args(Policy)
RUNTIME_POLICIES: tuple[str, ...] = POLICIES + ("drop-cheap",)
"""What ``parse_plan``/``apply_plan`` accept: POLICIES (the planner's options) plus Chen §4.2's drop-cheap."""
SHORTHANDS = ("uniform", "block", "segments")
STEP_POLICIES = ("none", "full", "drop-cheap")
"""The per-step policies of a model checkpointed over time steps (``apply_step_plan``, remat.models.lstm)."""


# --- plans ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LayerPolicies:
    """A model's per-layer policies, plus multi-layer checkpoint units: what ``apply_plan`` applies (the
    planner's solved plan, with its costs, is ``remat.planner.Plan``).

    policies: one of RUNTIME_POLICIES per layer; groups: half-open layer ranges [start, stop) of ≥ 2 layers
    checkpointed as one unit (their layers read "full"); spec: the text it was parsed from.
    Iterates, indexes and compares like the list of per-layer policies.
    """

    policies: tuple[str, ...]
    groups: tuple[tuple[int, int], ...] = ()
    spec: str = ""

    def __len__(self) -> int:
        return len(self.policies)

    def __iter__(self) -> Iterator[str]:
        return iter(self.policies)

    def __getitem__(self, i):
        return self.policies[i]

    def grouped(self) -> set[int]:
        """Indices of layers inside a multi-layer unit."""
        return {i for start, stop in self.groups for i in range(start, stop)}


def _count(text: str, lo: int, hi: int) -> int:
    """The N of "kind:N" as an int in [lo, hi]; UsageError("policy") otherwise."""
    try:
        n = int(text)
    except ValueError:
        raise UsageError("policy", f"{text!r} is not an integer") from None
    if not lo <= n <= hi:
        raise UsageError("policy", f"must be in [{lo}, {hi}] for a model of {hi} layers, got {n}")
    return n


def _units(layers: int, bounds: list[tuple[int, int]], spec: str) -> LayerPolicies:
    """LayerPolicies checkpointing each [start, stop) of ``bounds`` as one unit; the other layers none."""
    policies = ["none"] * layers
    for start, stop in bounds:
        policies[start:stop] = ["full"] * (stop - start)
    return LayerPolicies(tuple(policies), tuple(b for b in bounds if b[1] - b[0] > 1), spec)


def parse_plan(spec: str | Sequence[str], layers: int) -> LayerPolicies:
    """Parse a policy spec for a model of ``layers`` layers into a LayerPolicies.

    spec: a policy name (all layers), "uniform:N", "block:N", "segments:k", a comma-separated list of one
    policy per layer, or a sequence of policy names. Raises UsageError("policy") for an unknown name, a bad
    count (``segments:1``, which checkpoints nothing, included), or a list whose length is not ``layers``.
    Sources: Megatron-LM TransformerConfig.recompute_method (uniform, block); Chen et al. 2016 Alg. 1
    (segments, split by remat.formulas.chen.segment_sizes).
    """
    if isinstance(spec, LayerPolicies):
        return spec
    if not isinstance(spec, str):
        spec = ",".join(spec)
    text = spec.strip()
    kind, _, arg = text.partition(":")
    if kind in SHORTHANDS and arg:
        if kind == "block":    # Megatron block: the first N layers recomputed, one by one
            n = _count(arg, 0, layers)
            return LayerPolicies(tuple(["full"] * n + ["none"] * (layers - n)), (), text)
        if kind == "uniform":  # Megatron uniform: every chunk of N layers recomputed as one unit
            n = _count(arg, 1, layers)
            return _units(layers, [(s, min(s + n, layers)) for s in range(0, layers, n)], text)
        k = _count(arg, 1, layers)  # Chen segments (remat.formulas.chen.segment_bounds); the last one kept
        if k == 1:                  # one segment is the last one, kept: nothing would be checkpointed
            raise UsageError("policy", "segments:1 checkpoints nothing (Chen's last segment is kept, so one "
                                       "segment is policy none): use \"full\" to recompute every layer, or "
                                       "segments:k with k ≥ 2")
        return _units(layers, segment_bounds(layers, k)[:-1], text)
    names = [t.strip() for t in text.split(",")]
    for name in names:
        if name not in RUNTIME_POLICIES:
            raise UsageError("policy", f"unknown policy {name!r} (policies: {', '.join(RUNTIME_POLICIES)}; "
                                       "shorthands: uniform:N, block:N, segments:k)")
    if len(names) == 1:
        names = names * layers
    if len(names) != layers:
        raise UsageError("policy", f"{len(names)} per-layer policies for {layers} layers")
    return LayerPolicies(tuple(names), (), text)
