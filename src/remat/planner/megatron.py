"""A per-layer plan as Megatron-LM command-line flags, when Megatron can express it.

    megatron_flags(["full"] * 16 + ["none"] * 8)
    # ['--recompute-granularity', 'full', '--recompute-method', 'block', '--recompute-num-layers', '16']
    why_not(["full", "selective"])      # "mixes selective and full: Megatron-LM has one recompute_granularity …"

Megatron-LM applies one setting to every transformer layer of a pipeline stage, so a per-layer plan maps to
flags only in these shapes (L = the layers of the planned GPU, ``plan`` = its policies in forward order):

* every layer ``none``                  → no flag (Megatron's default, recompute_granularity None);
* every layer ``selective``             → ``--recompute-granularity selective`` (recompute_modules' default
  ["core_attn"] is this package's selective: QKᵀ, softmax, dropout, ·V);
* every layer ``full``                  → ``--recompute-granularity full --recompute-method uniform
  --recompute-num-layers 1`` (each layer its own checkpoint unit);
* the first N layers ``full``, the rest ``none`` → ``--recompute-granularity full --recompute-method block
  --recompute-num-layers N``;
* the first N < L layers ``offload``, the rest ``none``, one pipeline stage → ``--cpu-offloading-num-layers N``
  (Megatron sets cpu_offloading itself when N > 0; activations only, cpu_offloading_activations defaults to
  True; Transformer Engine offloads layers 0 … N − 1).

Anything else (selective and full mixed, full not a prefix, offload with recompute, offload of every layer or
with pipeline parallelism) has no Megatron-LM flags; ``why_not`` says why.

Sources (NVIDIA/Megatron-LM, main as mirrored at commit d98e8a64, Aug 2026):
* megatron/core/transformer/transformer_config.py, ``TransformerConfig.recompute_granularity`` ('full' |
  'selective'; "'selective' always uses all layers"), ``recompute_method`` ('uniform' | 'block'; block: "only a
  set number of transformer layers per pipeline stage"), ``recompute_num_layers`` (uniform: layers per unit;
  block: layers recomputed "within each pipeline stage"; must be None for selective), ``recompute_modules``
  (default ["core_attn"]); its ``__post_init__`` raises "CPU offloading does not work when activation
  recomputation is enabled", "Currently there is no support for Pipeline parallelism with CPU offloading", and
  requires cpu_offloading_num_layers < num_layers.
* megatron/core/model_parallel_config.py, ``ModelParallelConfig.cpu_offloading_num_layers`` ("the number of
  transformer layers for which activations has to be offloaded"), ``cpu_offloading_activations`` (default True).
* megatron/training/arguments.py: the flags are generated from those dataclass fields by
  ``ArgumentGroupFactory(TransformerConfig, exclude=...)`` (megatron/training/argument_utils.py: "--" + name
  with "_" → "-"); ``cpu_offloading`` itself is excluded from the CLI and set when
  ``args.cpu_offloading_num_layers > 0``.
* NVIDIA/TransformerEngine transformer_engine/pytorch/cpu_offload.py, ``OffloadSynchronizer``: "offload layers
  0, ..., num_offloaded_layers - 1".
"""

from __future__ import annotations

from typing import Sequence

RECOMPUTE_SOURCE = ("Megatron-LM TransformerConfig.recompute_granularity / recompute_method / "
                    "recompute_num_layers (megatron/core/transformer/transformer_config.py)")
OFFLOAD_SOURCE = ("Megatron-LM ModelParallelConfig.cpu_offloading_num_layers "
                  "(megatron/core/model_parallel_config.py; flag generated in megatron/training/arguments.py)")


def _prefix(policies: Sequence[str], policy: str) -> int | None:
    """N when ``policies`` is ``policy`` on the first N ≥ 1 layers and ``none`` on the rest, else None."""
    n = next((i for i, p in enumerate(policies) if p != policy), len(policies))
    return n if n and all(p == "none" for p in policies[n:]) else None


def megatron_fields(policies: Sequence[str], pp: int = 1) -> dict | None:
    """The Megatron-core config fields equivalent to ``policies`` (one of none / selective / full / offload per
    layer of one pipeline stage, forward order) — TransformerConfig's recompute_granularity / recompute_method /
    recompute_num_layers, ModelParallelConfig's cpu_offloading_num_layers — or None when Megatron-LM cannot
    express the plan (``why_not`` says why). ``pp``: the pipeline-parallel size (CPU offloading needs pp = 1).

    Returns {} for a plan of ``none`` only (Megatron's default). Source: the module docstring."""
    policies = list(policies)
    kinds = set(policies)
    if not policies or kinds == {"none"}:
        return {}
    if kinds == {"selective"}:
        return {"recompute_granularity": "selective"}
    if kinds == {"full"}:
        return {"recompute_granularity": "full", "recompute_method": "uniform", "recompute_num_layers": 1}
    n = _prefix(policies, "full")
    if n is not None:
        return {"recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": n}
    n = _prefix(policies, "offload")
    if n is not None and n < len(policies) and pp == 1:
        return {"cpu_offloading_num_layers": n}
    return None


def megatron_flags(policies: Sequence[str], pp: int = 1) -> list[str] | None:
    """Megatron-LM command-line flags equivalent to ``policies``: ``megatron_fields`` as Megatron's argument
    factory spells them ("--" + name with "_" -> "-"), or None when Megatron-LM cannot express the plan.
    Returns [] for a plan of ``none`` only (Megatron's default)."""
    fields = megatron_fields(policies, pp)
    if fields is None:
        return None
    return [part for name, value in fields.items() for part in ("--" + name.replace("_", "-"), str(value))]


def why_not(policies: Sequence[str], pp: int = 1) -> str | None:
    """One sentence saying why ``policies`` has no Megatron-LM flags, or None when ``megatron_flags`` gives
    some. Source: the constraints of TransformerConfig.__post_init__ (module docstring)."""
    if megatron_flags(policies, pp) is not None:
        return None
    policies = list(policies)
    kinds = set(policies)
    if "offload" in kinds and kinds & {"full", "selective"}:
        return ("it mixes offload with recompute: Megatron-LM raises \"CPU offloading does not work when "
                "activation recomputation is enabled\"")
    if "offload" in kinds:
        if pp > 1:
            return f"Megatron-LM's CPU offloading does not support pipeline parallelism (here p = {pp})"
        if kinds == {"offload"}:
            return ("it offloads every layer: Megatron-LM needs cpu_offloading_num_layers < num_layers "
                    "(the last layer stays on the device)")
        return ("its offloaded layers are not the first N: Megatron-LM (Transformer Engine) offloads layers "
                "0 … N − 1 of --cpu-offloading-num-layers N")
    if kinds >= {"selective", "full"}:
        return ("it mixes selective and full per layer: Megatron-LM has one recompute_granularity for every "
                "layer")
    if kinds == {"selective", "none"}:
        return ("it recomputes selectively on some layers only: Megatron-LM's selective granularity always uses "
                "all layers (recompute_num_layers must be None)")
    return ("its full layers are not the first N of the stage: Megatron-LM's recompute_method block recomputes "
            "the first recompute_num_layers layers, uniform recomputes every layer")
