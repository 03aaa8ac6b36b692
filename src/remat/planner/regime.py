"""The precision / optimizer regime: the bytes per parameter of the weights, the gradients and the optimizer
state, and how long the gradients live. One setting (``remat plan --regime``) for every planning path — remat's
own layers and a transformers model (``--hf``) — stated on the plan's first line.

With d the bytes of the model's dtype (config.json ``torch_dtype``: 2 for bfloat16/float16, 4 for float32) and
Adam(W) as the optimizer (two moments per parameter):

* ``mixed`` (default) — mixed-precision training as Megatron-LM, NeMo and DeepSpeed run it: weights in the model
  dtype (d), gradients accumulated into an fp32 buffer allocated for the whole step (4: Megatron's ``main_grad``,
  ``accumulate_allreduce_grads_in_fp32``), fp32 master weights and fp32 Adam m, v (4 + 4 + 4 = 12). For a 16-bit
  model 2 + 4 + 12 = 18 bytes per parameter — the row "bf16 param, fp32 grads: 18" of Megatron-LM's
  distributed-optimizer table (docs/source/api-guide/dist_optimizer.md); Rajbhandari et al. 2020 (ZeRO, §3.1)
  count 16 with fp16 gradients (2 + 2 + 12: ``--grad-bytes 2``). A float32 model needs no master copy:
  4 + 4 + 8 = 16.
* ``pure`` — every state in the parameters' dtype, as torch.optim.AdamW keeps it for a model loaded in bf16
  (its ``exp_avg`` and ``exp_avg_sq`` are ``zeros_like(param)``): weights d, gradients d, m and v 2d — 4d per
  parameter (8 for bf16). The gradients are eager PyTorch's ``.grad`` tensors, made by backward as it
  reaches each parameter (``optimizer.zero_grad(set_to_none=True)`` frees them after the step).

``--weight-bytes``, ``--grad-bytes`` and ``--optimizer-bytes`` override one term each; the plan states the
result. ZeRO sharding over ``--dp`` divides the terms afterwards (remat.planner.layer_costs.sharded_state).
"""

from __future__ import annotations

from dataclasses import dataclass

REGIMES = ("mixed", "pure")
DEFAULT = "mixed"


@dataclass(frozen=True)
class Regime:
    """Bytes per parameter (ints) and whether the gradients are held for the whole step (a buffer) or made
    by backward as it goes (eager ``.grad``)."""

    name: str
    weight: int
    grad: int
    optimizer: int
    grads_held_all_step: bool

    @property
    def per_parameter(self) -> int:
        return self.weight + self.grad + self.optimizer

    def describe(self) -> str:
        """One phrase for the plan's first line, e.g. "regime mixed: 2 B weights + 4 B gradients (held all
        step) + 12 B optimizer = 18 B per parameter"."""
        held = "held all step" if self.grads_held_all_step else "made by backward"
        return (f"regime {self.name}: {self.weight} B weights + {self.grad} B gradients ({held}) + "
                f"{self.optimizer} B optimizer = {self.per_parameter} B per parameter")


def resolve(name: str, itemsize: int, weight: int | None = None, grad: int | None = None,
            optimizer: int | None = None) -> Regime:
    """The regime ``name`` for a model whose parameters take ``itemsize`` bytes (module docstring), with any of
    the three terms overridden. ValueError for an unknown name (the CLI's choices keep it out)."""
    if name == "mixed":
        base = (itemsize, 4, 4 + 8 if itemsize < 4 else 8, True)
    elif name == "pure":
        base = (itemsize, itemsize, 2 * itemsize, False)
    else:
        raise ValueError(f"unknown regime {name!r} (known: {', '.join(REGIMES)})")
    w, g, o, held = base
    return Regime(name, w if weight is None else weight, g if grad is None else grad,
                  o if optimizer is None else optimizer, held)
