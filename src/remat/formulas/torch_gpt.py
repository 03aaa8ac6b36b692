"""Closed forms for the torch GPT model of ``remat.models`` under per-layer policies and Chen's segments:
bytes saved for backward, the most saved bytes alive at once (the peak), recompute FLOPs, parameters.

    sz = GPTSizes(s=32, b=2, h=64, a=4, v=128, itemsize=2, stats_itemsize=2, dropout=True)
    layer_saved_bytes(sz, "none")                    # Korthikanti §4.1 at element size e + LayerNorm stats
    units = sequential_units(L=16, k=4)              # Chen's segments: [(4, True)]*3 + [(4, False)]
    saved_bytes(sz, units), live_peak_bytes(sz, units), recompute_flops(sz, units)
    sz, state = sizes_of(cfg, stats_itemsize=2), model_bytes(cfg)   # from a remat.models ModelConfig

What the model saves per layer (``remat.models.gpt``) is the paper's §4.1 itemization
(``remat.formulas.korthikanti.TERMS``), each tensor at the run's element size e (dropout masks 1 byte), plus
what the paper ignores: LayerNorm mean and rstd, 2 LayerNorms × 2 × sb elements of the LayerNorm kernel's
statistics dtype (``stats_itemsize``: the activation dtype on CPU, fp32 for 16-bit inputs on CUDA; the
experiments ask torch). At e = 2 the paper part is exactly ``korthikanti.layer_bytes``:
sbh(34 + 5as/h); in general sbh(16e + 2) + as²b(2e + 1). Without dropout the three masks are not saved and
the softmax-dropout output is the softmax output (one storage): sbh·16e + as²b·e.

Outside the layers (Korthikanti §4.3, p = t = 1) the model saves the embedding-dropout mask sbh, the final
LayerNorm input and the output-projection input (sbh·e each) and the fp32 log-softmax of the logits 4sbv,
plus what the paper leaves out: token and position ids (int64, 8sb and 8s), the final LayerNorm statistics
(2sb·e_stats), the loss's targets (int64, 8sb) and its total weight (one fp32 scalar, 4 B).

Plans are written as *units*: a list of (layers, checkpointed). A checkpointed unit keeps only its input
[s, b, h] (sbh·e) and re-runs its forward in backward; an unchecked unit keeps what its layers save
(``layer_saved_bytes`` of its mode). Chen's segments(k) (``remat.formulas.chen.segment_sizes``, as
``remat.policies`` "segments:k" splits them): the first k − 1 segments checkpointed units, the last kept
(never checkpointed). Per-layer full recompute is L checkpointed units of 1 layer; ``plan_units`` reads the
units of any ``remat.policies.LayerPolicies``.

The peak of saved bytes (``live_peak_bytes``, Chen §3 for this model): at the end of the forward pass
everything saved is alive, F = embed + head + Σ_checkpointed sbh·e + Σ_kept n·y; then backward frees the
head's tensors and the units from the last one back; when checkpointed unit j is recomputed the inputs of
units before it (or their saved layers, if kept), the embedding's tensors and its own n_j re-saved layers
are alive, B_j = embed + Σ_{i<j} held_i + n_j·y (its input is its first LayerNorm's input: one storage).
A kept selective layer recomputes its core attention in backward, after its MLP and projection tensors are
freed: B = embed + (what comes before it) + its LayerNorm-1 input and statistics, QKV input, Q K V + the
re-saved softmax output, mask and dropout output. peak = max(F, max B). The gradients and temporaries of the
backward pass itself are not modelled: a measured peak exceeds this by that working set (the experiments
report the difference).

Units: bytes and FLOPs, ints. Sources: Korthikanti et al. 2022 §4.1, §4.3, Appendix A; Chen et al. 2016 §3
(Alg. 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import TYPE_CHECKING, Literal, Sequence, get_args

from remat.errors import UsageError
from remat.formulas import korthikanti
from remat.formulas.chen import segment_sizes

if TYPE_CHECKING:  # annotations only: the formulas import no torch
    from remat.models.presets import ModelConfig
    from remat.policies import LayerPolicies

ITEMSIZE = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2}
INDEX_BYTES = 8    # int64 token / position ids and targets
LOSS_WEIGHT_BYTES = 4  # nll_loss's total_weight: one fp32 scalar
DROPOUT_ONLY = frozenset({"softmax_dropout_mask", "attn_dropout_mask", "mlp_dropout_mask", "attn_probs_dropped"})
Mode = Literal["none", "selective", "full"]  # per-layer recompute modes with a closed form
MODES: tuple[str, ...] = get_args(Mode)

Unit = tuple[int, bool]  # (layers in the unit, checkpointed)


def itemsize(dtype: str) -> int:
    """Bytes per element of a dtype name ("float32", "bfloat16", ...). Raises UsageError("dtype")."""
    name = str(dtype).removeprefix("torch.")
    if name not in ITEMSIZE:
        raise UsageError("dtype", f"unknown dtype {dtype!r} (known: {', '.join(ITEMSIZE)})")
    return ITEMSIZE[name]


@dataclass(frozen=True)
class GPTSizes:
    """Korthikanti's symbols for one run: s sequence, b micro-batch, h hidden, a heads, v vocabulary;
    ``itemsize`` e (bytes per activation element), ``stats_itemsize`` (bytes per LayerNorm mean/rstd element),
    ``dropout`` (p > 0: masks saved). The GPT layer's MLP is h → 4h → h."""

    s: int
    b: int
    h: int
    a: int
    v: int
    itemsize: int = 2
    stats_itemsize: int = 2
    dropout: bool = True

    @property
    def sbh(self) -> int:
        return self.s * self.b * self.h


# --- one layer ----------------------------------------------------------------------------------------------------

def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise UsageError("mode", f"unknown mode {mode!r} (use {'|'.join(MODES)})")


def paper_layer_terms(sz: GPTSizes, mode: str = "none") -> dict[str, int]:
    """Korthikanti §4.1 terms one layer keeps under ``mode`` (none | selective | full), bytes at the run's
    element size (masks 1 B): numel from ``korthikanti.term_bytes`` / the paper's element size, × e.
    Without dropout the masks and the separate softmax-dropout output are absent. Raises UsageError("mode")."""
    _check_mode(mode)
    out = {}
    for name in korthikanti.stored_terms(mode):
        if not sz.dropout and name in DROPOUT_ONLY:
            continue
        numel = korthikanti.term_bytes(name, sz.s, sz.b, sz.h, sz.a) // korthikanti.paper_element_bytes(name)
        out[name] = numel * (korthikanti.MASK_BYTES if name in korthikanti.MASK_TERMS else sz.itemsize)
    return out


def layer_extra_terms(sz: GPTSizes, mode: str = "none") -> dict[str, int]:
    """What the torch layer saves beyond §4.1 (bytes): LayerNorm mean and rstd, 2 LNs × 2 × sb × e_stats, for
    none and selective; nothing under full recompute (only the layer input is kept)."""
    _check_mode(mode)
    return {} if mode == "full" else {"layernorm_stats": 4 * sz.s * sz.b * sz.stats_itemsize}


def layer_saved_bytes(sz: GPTSizes, mode: str = "none") -> int:
    """Bytes one torch GPT layer saves for backward under ``mode``: §4.1 terms + LayerNorm statistics.

    = sbh(16e + 2) + as²b(2e + 1) + 4sb·e_stats for none (e = 2: Korthikanti Eq. 1 + the stats); selective
    drops the core-attention terms; full keeps sbh·e. Raises UsageError("mode")."""
    return sum(paper_layer_terms(sz, mode).values()) + sum(layer_extra_terms(sz, mode).values())


def crossover_seq(h: int, a: int, itemsize: int = 2, dropout: bool = True) -> Fraction:
    """Sequence length s* at which the as²b term of a layer's §4.1 bytes equals the sbh term (the paper's
    34 vs 5as/h at e = 2: s* = 34h/(5a)); for element size e, (16e + 2)h / ((2e + 1)a). Exact Fraction."""
    sz = GPTSizes(s=1, b=1, h=1, a=1, v=1, itemsize=itemsize, dropout=dropout)
    terms = paper_layer_terms(sz, "none")  # at s = b = h = a = 1: each term's coefficient
    sbh_coeff = sum(v for name, v in terms.items() if korthikanti.TERM_BY_NAME[name].sbh_coeff)
    as2b_coeff = sum(v for name, v in terms.items() if korthikanti.TERM_BY_NAME[name].as2b_coeff)
    return Fraction(sbh_coeff * h, as2b_coeff * a)


# --- outside the layers ---------------------------------------------------------------------------------------------

def outside_terms(sz: GPTSizes) -> dict[str, dict[str, int]]:
    """Bytes saved outside the layers, in three groups (each a dict term → bytes):
    "embed" (kept until the end of backward): embedding-dropout mask sbh (with dropout), position ids 8s;
    "head" (freed before the layers' backward): final LayerNorm input sbh·e and its stats 2sb·e_stats, the
    output-projection input sbh·e, fp32 log-softmax 4sbv, the loss's total weight 4 B;
    "inputs" (the step's own input tensors, saved by reference): token ids 8sb, targets 8sb.
    The §4.3 terms come from ``korthikanti.outside_layer_bytes`` (16-bit) rescaled to e."""
    paper = korthikanti.outside_layer_bytes(sz.s, sz.b, sz.h, sz.v)
    scale = Fraction(sz.itemsize, korthikanti.ACT_BYTES)
    embed = {"position_ids": INDEX_BYTES * sz.s}
    if sz.dropout:
        embed["embedding_dropout_mask"] = paper["embedding_dropout_mask"]
    head = {"final_ln_input": int(paper["final_ln_input"] * scale),
            "final_ln_stats": 2 * sz.s * sz.b * sz.stats_itemsize,
            "output_proj_input": int(paper["output_proj_input"] * scale),
            "logits_fp32": paper["logits_fp32"], "loss_total_weight": LOSS_WEIGHT_BYTES}
    inputs = {"token_ids": INDEX_BYTES * sz.s * sz.b, "targets": INDEX_BYTES * sz.s * sz.b}
    return {"embed": embed, "head": head, "inputs": inputs}


def _outside(sz: GPTSizes, group: str) -> int:
    return sum(outside_terms(sz)[group].values())


# --- plans as units ------------------------------------------------------------------------------------------------

def sequential_units(layers: int, k: int) -> list[Unit]:
    """Chen's segments(k) as units (remat.formulas.chen.segment_sizes): the first k − 1 segments checkpointed,
    the last kept. k = 1: no checkpoint. Raises UsageError("layers"/"k") unless 1 ≤ k ≤ L."""
    sizes = segment_sizes(layers, k)
    return [(n, j < k - 1) for j, n in enumerate(sizes)]


def per_layer_units(layers: int, mode: str) -> list[Unit]:
    """One unit per layer: checkpointed for full recompute, kept for none and selective."""
    _check_mode(mode)
    return [(1, mode == "full")] * layers


def plan_units(plan: LayerPolicies) -> tuple[list[Unit], str]:
    """(units, mode of the kept layers) of a per-layer plan: a multi-layer group (``plan.groups``) or a "full"
    layer is a checkpointed unit, any other layer a kept one; the mode is "selective" if any layer is
    selective, else "none"."""
    starts = dict(plan.groups)
    units, i = [], 0
    while i < len(plan):
        stop = starts.get(i, i + 1)
        units.append((stop - i, i in starts or plan[i] == "full"))
        i = stop
    return units, "selective" if "selective" in plan.policies else "none"


def _kept_mode(mode: str) -> str:
    return "selective" if mode == "selective" else "none"


def saved_bytes(sz: GPTSizes, units: Sequence[Unit], mode: str = "none") -> int:
    """Bytes saved for backward at the end of the forward pass (whole model, int): every checkpointed unit's
    input (sbh·e), every kept layer's ``layer_saved_bytes`` (``mode`` none or selective for kept layers) and
    everything outside the layers (``outside_terms``, inputs included). What SavedTensorLog.total_bytes counts."""
    y, x = layer_saved_bytes(sz, _kept_mode(mode)), sz.sbh * sz.itemsize
    held = sum(x if ckpt else n * y for n, ckpt in units)
    return held + sum(sum(g.values()) for g in outside_terms(sz).values())


SELECTIVE_HELD = ("ln1_input", "qkv_input", "q_k", "v")  # a selective layer's tensors alive at its recompute


def selective_recompute_bytes(sz: GPTSizes) -> int:
    """Bytes of one selective layer alive while its core attention is recomputed in backward: what the layer
    still holds then (LayerNorm 1 input and statistics, QKV input, Q K V — the MLP and projection tensors are
    already freed) plus the re-saved core-attention terms (softmax output, its mask and dropout output)."""
    terms = paper_layer_terms(sz, "none")
    held = sum(terms[name] for name in SELECTIVE_HELD) + 2 * sz.s * sz.b * sz.stats_itemsize
    return held + sum(v for name, v in terms.items() if korthikanti.TERM_BY_NAME[name].core_attn)


def live_peak_bytes(sz: GPTSizes, units: Sequence[Unit], mode: str = "none") -> int:
    """The most saved-for-backward bytes alive at once in a step, the step's inputs excluded (int bytes):
    max(F, max_j B_j) of the module docstring, where a checkpointed unit re-saves its layers as policy none
    (``remat.policies`` runs a unit's layers plainly) and a kept selective layer re-saves its core attention
    (``selective_recompute_bytes``). Transient gradients and workspace are not included."""
    y, y_unit, x = layer_saved_bytes(sz, _kept_mode(mode)), layer_saved_bytes(sz, "none"), sz.sbh * sz.itemsize
    embed, head = _outside(sz, "embed"), _outside(sz, "head")
    peak, before = embed + head + sum(x if c else n * y for n, c in units), embed
    for n, ckpt in units:
        if ckpt:
            peak = max(peak, before + n * y_unit)
        elif mode == "selective":
            peak = max(peak, before + (n - 1) * y + selective_recompute_bytes(sz))
        before += x if ckpt else n * y
    return peak


def optimal_segments(sz: GPTSizes, layers: int) -> int:
    """The k in 1..L minimising ``live_peak_bytes`` of ``sequential_units(L, k)`` (ties: smallest k)."""
    return min(range(1, layers + 1), key=lambda k: (live_peak_bytes(sz, sequential_units(layers, k)), k))


def optimal_segments_approx(sz: GPTSizes, layers: int) -> float:
    """k* = √(L·y/x): the minimiser of k·x + (L/k)·y (x = sbh·e a checkpoint, y a kept layer) — Chen's √L
    only when x = y; for this layer y/x ≈ (34 + 5as/h)/2 at e = 2, so k* ≥ √(17L)."""
    return math.sqrt(layers * layer_saved_bytes(sz, "none") / (sz.sbh * sz.itemsize))


# --- FLOPs (Korthikanti Appendix A: matmuls only) ----------------------------------------------------------------

def recompute_flops(sz: GPTSizes, units: Sequence[Unit], mode: str = "none") -> int:
    """FLOPs re-executed in backward: each checkpointed layer's forward (24bsh² + 4bs²h), plus, for kept
    layers under selective recompute, their core attention forward (4bs²h)."""
    layer = korthikanti.layer_forward_flops(sz.s, sz.b, sz.h)
    core = korthikanti.recompute_flops(sz.s, sz.b, sz.h, "selective") if mode == "selective" else 0
    return sum(n * (layer if ckpt else core) for n, ckpt in units)


def step_flops(sz: GPTSizes, layers: int) -> int:
    """Model FLOPs of one step (forward + backward, no recompute): 3·(L·(24bsh² + 4bs²h) + 2bshv)
    (Appendix A; Eq. 7 per micro-batch)."""
    return 3 * (layers * korthikanti.layer_forward_flops(sz.s, sz.b, sz.h)
                + korthikanti.logits_flops(sz.s, sz.b, sz.h, sz.v))


# --- model state ---------------------------------------------------------------------------------------------------

def param_count(h: int, layers: int, v: int, positions: int, ffn: int | None = None, bias: bool = True) -> int:
    """Parameters of ``remat.models.transformer.Transformer`` (GPT, tied head): per layer QKV 3h² (+3h),
    projection h² (+h), fc1 h·ffn (+ffn), fc2 ffn·h (+h), two LayerNorms 2h each (h without bias); token
    and position embeddings (v + positions)·h; final LayerNorm 2h (h). ffn defaults to 4h (12h² + 13h per
    layer with biases, ``korthikanti.params_per_layer``)."""
    ffn = 4 * h if ffn is None else ffn
    ln = 2 * h if bias else h
    per_layer = 4 * h * h + 2 * h * ffn + 2 * ln + ((3 * h + h + ffn + h) if bias else 0)
    return layers * per_layer + (v + positions) * h + ln


# --- a model config's sizes and model state --------------------------------------------------------------------------

def sizes_of(cfg: ModelConfig, stats_itemsize: int) -> GPTSizes:
    """The GPTSizes of a GPT ``remat.models.presets.ModelConfig``: s, b, h, a, v from its fields, e from its
    dtype, masks saved when its dropout > 0. ``stats_itemsize``: bytes per LayerNorm mean/rstd element on
    the device the model runs on (``remat.measure.step.layernorm_stats_itemsize`` asks torch).
    Raises UsageError("dtype") for an unknown dtype."""
    return GPTSizes(s=cfg.seq, b=cfg.micro_batch, h=cfg.hidden, a=cfg.heads, v=cfg.vocab,
                    itemsize=itemsize(cfg.dtype), stats_itemsize=stats_itemsize, dropout=cfg.dropout > 0)


@dataclass(frozen=True)
class ModelBytes:
    """Bytes of the runtime's serial GPT model (one micro-batch, no optimizer) besides the layers' saved
    activations, all ints. weights, gradients: every parameter (``param_count``) at e bytes;
    layer_gradients: one layer's parameter gradients; head_gradients: those the head's backward makes (the
    tied embedding v·h and the final LayerNorm; the LayerNorm alone when untied); causal_masks: the
    layers' bool mask buffers, L·max_positions²; inputs: token ids and targets (int64, 16sb); embed,
    head: the tensors saved outside the layers (``outside_terms``), kept the whole step / freed before the
    layers' backward."""

    weights: int
    gradients: int
    layer_gradients: int
    head_gradients: int
    causal_masks: int
    inputs: int
    embed: int
    head: int

    @property
    def state(self) -> int:
        """Alive before a step whose gradients already exist: weights + gradients + masks + inputs."""
        return self.weights + self.gradients + self.causal_masks + self.inputs


def model_bytes(cfg: ModelConfig, stats_itemsize: int = 2) -> ModelBytes:
    """ModelBytes of a GPT ModelConfig (``stats_itemsize`` as in ``sizes_of``). Source: the parameters of
    ``remat.models.transformer.Transformer`` (``param_count``) and Korthikanti §4.3 (``outside_terms``)."""
    e = itemsize(cfg.dtype)
    ln = 2 * cfg.hidden if cfg.bias else cfg.hidden
    params = param_count(cfg.hidden, cfg.layers, cfg.vocab, cfg.max_positions, cfg.ffn_hidden, cfg.bias)
    per_layer = param_count(cfg.hidden, 1, 0, 0, cfg.ffn_hidden, cfg.bias) - ln
    outside = outside_terms(sizes_of(cfg, stats_itemsize))
    return ModelBytes(weights=params * e, gradients=params * e, layer_gradients=per_layer * e,
                      head_gradients=(cfg.vocab * cfg.hidden + ln) * e if cfg.tie_embeddings else ln * e,
                      causal_masks=cfg.layers * cfg.max_positions ** 2, inputs=sum(outside["inputs"].values()),
                      embed=sum(outside["embed"].values()), head=sum(outside["head"].values()))
