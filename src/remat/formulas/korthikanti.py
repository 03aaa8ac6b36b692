"""Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models" (arXiv 2205.05198).

Closed forms, in BYTES (16-bit activations, 1-byte dropout masks) and FLOPs, with the paper's symbols:
s sequence length, b micro-batch, h hidden size, a attention heads, L layers, t tensor-parallel size,
p pipeline-parallel size, m interleaving stages (virtual stages per GPU), v vocabulary size, B batch.

* ``TERMS`` — the §4.1 itemization of one layer's saved activations, one ``Term`` per stored tensor.
* ``layer_bytes`` — bytes per layer derived from ``TERMS`` for any (t, sp, recompute); ``table2_bytes`` —
  the six rows of Table 2 as printed (Eq. 1–4 and the recompute rows). Tests check that the two agree.
* ``first_stage_bytes`` (Eq. 5/6 with the interleave factor), ``outside_layer_bytes`` (§4.3) and
  ``outside_layer_share`` (§4.3's extra terms over Eq. 5), ``params_per_gpu`` (first pipeline stage),
  ``params_total``, ``params_even_share`` (P/(t·p), the paper's Figure 1 bars), ``first_stage_params_excess``
  (the difference, by cause) and ``model_state_bytes`` (parameters + optimizer state).
* FLOPs (Appendix A): ``layer_forward_flops``, ``model_flops`` (Eq. 7), ``hardware_flops_eq8`` (Eq. 8 as
  printed), ``hardware_flops`` (forward + backward + the recompute the paper's text describes),
  ``recompute_overhead`` (selective's, by either count) and ``flops_utilization`` (MFU / HFU).
* ``paper_term`` (in korthikanti_labels.py) — maps one saved tensor of the GPT layer (module, op, shape, dtype)
  to its ``Term`` name, ``None`` for what the paper does not count (LayerNorm statistics, the causal mask, ...).

All functions are pure integer arithmetic (``fractions.Fraction`` where the paper divides); a result that is
not a whole number of bytes is rounded to the nearest int and the docstring says where that can happen.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from remat.errors import UsageError

RECOMPUTE = ("none", "selective", "full")
ACT_BYTES = 2   # 16-bit activations (fp16/bf16), the paper's assumption
MASK_BYTES = 1  # dropout masks: 1 byte per element


# --- validation ----------------------------------------------------------------------------------------------

def check_parallel(s: int, h: int, a: int, t: int = 1, sp: bool = False, recompute: str = "none") -> None:
    """Validate a (t, sp, recompute) choice for a layer of size (s, h, a).

    Raises UsageError naming the field: ``tp`` if t < 1 or t does not divide a or h (Megatron shards heads
    and the hidden dimension), ``sp`` if sequence parallelism is asked without tensor parallelism (t = 1),
    ``seq`` if t does not divide s under SP (the sequence is split across the t ranks), ``mode`` if
    ``recompute`` is not one of none|selective|full.
    """
    if recompute not in RECOMPUTE:
        raise UsageError("mode", f"unknown mode {recompute!r} (use {'|'.join(RECOMPUTE)})")
    if isinstance(t, bool) or not isinstance(t, int) or t < 1:
        raise UsageError("tp", f"must be an integer ≥ 1, got {t!r}")
    if a % t:
        raise UsageError("tp", f"t={t} does not divide the number of heads a={a}")
    if h % t:
        raise UsageError("tp", f"t={t} does not divide the hidden size h={h}")
    if sp and t == 1:
        raise UsageError("sp", "sequence parallelism needs tensor parallelism (tp ≥ 2)")
    if sp and s % t:
        raise UsageError("seq", f"t={t} does not divide the sequence length s={s} (needed by --sp)")


def _whole(x: Fraction) -> int:
    """A Fraction of bytes/FLOPs as an int (rounded half-even if not whole)."""
    return int(round(x))


# --- §4.1 itemization ------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Term:
    """One tensor the paper counts in §4.1: ``sbh_coeff``·sbh + ``as2b_coeff``·as²b bytes (t = 1).

    ``tp_split``: divided by t under tensor parallelism (it lives inside the column/row-parallel region);
    the others are replicated on every TP rank (the "10" of Eq. 2) unless sequence parallelism shards them.
    ``core_attn``: inside Megatron's core attention (QKᵀ, softmax, softmax dropout, ·V), i.e. what selective
    recompute does not store (§5).
    ``ffn_wide``: the tensor is the MLP's inner width wide (GeLU input, fc2 input); ``sbh_coeff`` is written
    for the paper's 4h, so with an inner width ``ffn`` the term is sbh_coeff·sb·ffn/4 (= 2sb·ffn bytes).
    """

    name: str
    label: str
    block: str
    sbh_coeff: int
    as2b_coeff: int
    tp_split: bool
    core_attn: bool = False
    ffn_wide: bool = False

    def bytes(self, s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, ffn: int | None = None) -> int:
        """Bytes of this term on one TP rank (Korthikanti §4.1, §4.2.1/§4.2.2). ``ffn``: the MLP's inner width
        (None: the paper's 4h); it scales the ``ffn_wide`` terms only."""
        width = Fraction(ffn, 4) if self.ffn_wide and ffn is not None else h
        full = self.sbh_coeff * s * b * width + Fraction(self.as2b_coeff * a * s * s * b)
        return _whole(full / t if (self.tp_split or sp) else full)


TERMS: tuple[Term, ...] = (
    Term("ln1_input", "LayerNorm 1 input", "layernorm", 2, 0, False),
    Term("qkv_input", "QKV input (LayerNorm 1 output)", "attention", 2, 0, False),
    Term("q_k", "Q and K (inputs of QKᵀ)", "attention", 4, 0, True),
    Term("softmax_output", "softmax output", "attention", 0, 2, True, core_attn=True),
    Term("softmax_dropout_mask", "softmax-dropout mask", "attention", 0, 1, True, core_attn=True),
    Term("attn_probs_dropped", "softmax-dropout output (input of ·V)", "attention", 0, 2, True, core_attn=True),
    Term("v", "V (input of ·V)", "attention", 2, 0, True),
    Term("proj_input", "output-projection input", "attention", 2, 0, True),
    Term("attn_dropout_mask", "dropout mask after the projection", "attention", 1, 0, False),
    Term("ln2_input", "LayerNorm 2 input", "layernorm", 2, 0, False),
    Term("fc1_input", "fc1 input (LayerNorm 2 output)", "mlp", 2, 0, False),
    Term("gelu_input", "GeLU input (fc1 output)", "mlp", 8, 0, True, ffn_wide=True),
    Term("fc2_input", "fc2 input (GeLU output)", "mlp", 8, 0, True, ffn_wide=True),
    Term("mlp_dropout_mask", "dropout mask after the MLP", "mlp", 1, 0, False),
)
TERM_BY_NAME = {term.name: term for term in TERMS}
MASK_TERMS = frozenset({"softmax_dropout_mask", "attn_dropout_mask", "mlp_dropout_mask"})
FULL_RECOMPUTE_TERM = "layer_input"  # what full recompute stores: the layer input (= LayerNorm 1 input)
QKV_GROUP = "q_k_v"  # a saved core-attention input that is one of Q, K, V (selective recompute's checkpoint)


def paper_element_bytes(term: str) -> int:
    """Bytes per element the paper assumes for ``term``: 1 for dropout masks, 2 for everything else."""
    return MASK_BYTES if term in MASK_TERMS else ACT_BYTES


def stored_terms(recompute: str = "none") -> tuple[str, ...]:
    """Names of the §4.1 terms a layer stores under ``recompute`` (none: all 14; selective: all but the three
    core-attention terms; full: the layer input only). Raises UsageError("mode") for an unknown mode."""
    check_parallel(1, 1, 1, recompute=recompute)
    if recompute == "full":
        return (FULL_RECOMPUTE_TERM,)
    return tuple(term.name for term in TERMS if not (recompute == "selective" and term.core_attn))


def term_bytes(name: str, s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False,
               ffn: int | None = None) -> int:
    """Bytes of the §4.1 term ``name`` on one TP rank; ``layer_input`` is the full-recompute checkpoint
    (2sbh, or 2sbh/t when SP shards the layer input). ``ffn``: the MLP inner width (None: 4h, the paper's)."""
    if name == FULL_RECOMPUTE_TERM:
        return _whole(Fraction(2 * s * b * h, t if sp else 1))
    return TERM_BY_NAME[name].bytes(s, b, h, a, t, sp, ffn)


def layer_bytes(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, recompute: str = "none",
                ffn: int | None = None) -> int:
    """Activation bytes of one transformer layer on one TP rank, summed from the §4.1 itemization.

    s, b, h, a, t as in the paper; sp: sequence parallelism (§4.2.2); recompute: none | selective (core
    attention recomputed, §5) | full (only the layer input kept: 2sbh; 2sbh/t when SP shards that input —
    Table 2's full-recompute row is written without SP). ``ffn``: the MLP inner width (None: the paper's 4h;
    otherwise the GeLU and fc2 inputs are 2sb·ffn bytes each instead of 8sbh, so Eq. 1 becomes
    sbh(18 + 5as/h) + 4sb·ffn). Returns int bytes (exact for valid inputs).
    Raises UsageError (tp, sp, seq, mode) via ``check_parallel``; UsageError("tp") if t does not divide ffn.
    """
    check_parallel(s, h, a, t, sp, recompute)
    _check_ffn(ffn, t)
    return sum(term_bytes(name, s, b, h, a, t, sp, ffn) for name in stored_terms(recompute))


def _check_ffn(ffn: int | None, t: int) -> None:
    """UsageError("tp") if t does not divide the MLP inner width (Megatron shards fc1's columns over t)."""
    if ffn is not None and ffn % t:
        raise UsageError("tp", f"t={t} does not divide the MLP inner width {ffn}")


def table2_bytes(s: int, b: int, h: int, a: int, t: int = 1, sp: bool = False, recompute: str = "none") -> int:
    """Table 2 of the paper as printed (bytes per layer); ``layer_bytes`` must agree with it.

    none, t=1:             sbh(34 + 5as/h)                  (Eq. 1)
    none, t:               sbh(10 + 24/t + 5as/(ht))        (Eq. 2)
    none, t, SP:           sbh(34/t + 5as/(ht))             (Eq. 4)
    selective, t:          sbh(10 + 24/t)
    selective, t, SP:      34·sbh/t
    full:                  2sbh  (2sbh/t with SP: the layer input is the sequence shard)
    Raises UsageError (tp, sp, seq, mode).
    """
    check_parallel(s, h, a, t, sp, recompute)
    sbh, ash = Fraction(s * b * h), Fraction(5 * a * s, h)
    if recompute == "full":
        return _whole(2 * sbh / (t if sp else 1))
    attn = ash / t if recompute == "none" else 0
    if sp:
        return _whole(sbh * (Fraction(34, t) + attn))
    return _whole(sbh * (10 + Fraction(24, t) + attn))


# --- §4.2 pipeline, §4.3 outside the layers, Figure 1 model state -----------------------------------------------

def interleave_factor(p: int, m: int = 1) -> Fraction:
    """Activation multiplier of the first pipeline stage under the interleaved schedule (§4.2.3):
    1 + (p − 1)/(p·m) when m > 1 (m virtual stages per GPU); 1 for plain 1F1B (m = 1) or p = 1."""
    return Fraction(1) if m <= 1 or p <= 1 else 1 + Fraction(p - 1, p * m)


def first_stage_bytes(per_layer: int, L: int, p: int = 1, m: int = 1) -> int:
    """Activation bytes on the first pipeline stage (Eq. 5/6): 1F1B keeps p micro-batches in flight on the
    first stage, each for L/p layers, i.e. L layers' worth — ``per_layer``·L·interleave_factor(p, m).
    ``per_layer``: bytes per layer (formula or measured). Rounded to int bytes."""
    return _whole(per_layer * L * interleave_factor(p, m))


def outside_layer_bytes(s: int, b: int, h: int, v: int, t: int = 1, p: int = 1, sp: bool = True,
                        held: int | None = None) -> dict[str, int]:
    """Activation bytes outside the transformer layers on the first stage (§4.3), as a dict of named terms:
    embedding dropout mask sbhp/t (p micro-batches in flight — or ``held`` of them when given, e.g. min(p, N)
    under 1F1B with N < p micro-batches per step); when p = 1 (first stage = last stage) also the final
    LayerNorm input 2sbh/t, the output-projection input 2sbh/t and the fp32 logits 4sbv/t.

    The paper writes these with sequence parallelism (sp=True, its setting). Without SP (sp=False) the
    embedding-dropout mask, the final LayerNorm input and the output-projection input are replicated on the
    TP ranks (no /t); the logits stay /t (the output layer is vocabulary-parallel). Bytes rounded to int.
    """
    sbh = Fraction(s * b * h)
    shard = t if sp else 1
    terms = {"embedding_dropout_mask": _whole(sbh * (p if held is None else held) / shard)}
    if p == 1:
        terms |= {"final_ln_input": _whole(2 * sbh / shard), "output_proj_input": _whole(2 * sbh / shard),
                  "logits_fp32": _whole(Fraction(4 * s * b * v, t))}
    return terms


def params_per_layer(h: int, t: int = 1, ffn: int | None = None) -> int:
    """Parameters of one GPT layer on one TP rank, with MLP inner width f = ``ffn`` (None: the paper's 4h):
    QKV (3h²+3h)/t, projection h²/t + h (bias replicated), fc1 (hf + f)/t, fc2 fh/t + h, two LayerNorms 4h
    (replicated). For t = 1: 4h² + 2hf + f + 9h, i.e. 12h² + 13h at f = 4h."""
    f = 4 * h if ffn is None else ffn
    return (4 * h * h + 3 * h + 2 * h * f + f) // t + 6 * h


def params_per_gpu(h: int, L: int, v: int, s: int, t: int = 1, p: int = 1, ffn: int | None = None,
                   tied: bool = True) -> int:
    """Parameters held by one GPU of the FIRST pipeline stage: L/p layers (``params_per_layer`` with the MLP
    inner width ``ffn``, None = 4h), the vocabulary-parallel word embedding v·h/t and the (replicated)
    position embedding s·h (s = the position table's length); when p = 1 (first stage = last stage) also the
    final LayerNorm (2h) and, if the output layer does not share the word embedding (``tied`` False, e.g.
    GPT-2's ``tie_word_embeddings: false``), its own vocabulary-parallel v·h/t. L/p rounded up."""
    layers = -(-L // p)
    extra = 2 * h + (0 if tied else (v * h) // t) if p == 1 else 0
    return layers * params_per_layer(h, t, ffn) + (v * h) // t + s * h + extra


def params_total(h: int, L: int, v: int, s: int, ffn: int | None = None, tied: bool = True) -> int:
    """Parameters of the whole model (all GPUs together): L layers (``params_per_layer``, t = 1, inner width
    ``ffn``, None = 4h), the word embedding v·h (shared with the output layer unless ``tied`` is False: then
    another v·h), the position embedding s·h and the final LayerNorm 2h; at ffn = 4h and tied
    = 12Lh²(1 + 13/(12h) + (v + s)/(12Lh)) + 2h (Narayanan et al. 2021's count plus the final LayerNorm).
    Equals ``params_per_gpu(h, L, v, s, t=1, p=1, ffn, tied)``."""
    return L * params_per_layer(h, 1, ffn) + v * h * (1 if tied else 2) + s * h + 2 * h


def params_even_share(h: int, L: int, v: int, s: int, t: int = 1, p: int = 1) -> Fraction:
    """P/(t·p): the parameters of one GPU if the model (``params_total``) were split evenly over t·p GPUs —
    what the paper's Figure 1 bars use (18·P/(t·p) bytes of parameters and optimizer state per GPU).
    A Fraction of parameters (exact; not whole when t·p does not divide P)."""
    return Fraction(params_total(h, L, v, s), t * p)


def first_stage_params_excess(h: int, L: int, v: int, s: int, t: int = 1, p: int = 1) -> dict[str, Fraction]:
    """Why one GPU of the FIRST pipeline stage (``params_per_gpu``) holds more than the even share P/(t·p)
    (``params_even_share``): the difference split into named parts, in parameters (exact Fractions whose
    sum is ``params_per_gpu − params_even_share``):

    * ``word_embedding``: the first stage holds the vocabulary-parallel word embedding v·h/t alone, not its
      1/p share v·h/(t·p);
    * ``position_embedding``: s·h on the first stage, replicated on its t ranks, not s·h/(t·p);
    * ``replicated_in_layers``: per layer, the LayerNorms and the projection/fc2 biases (6h) are replicated
      on the TP ranks, not divided by t: (L/p)·params_per_layer(h, t) − L·params_per_layer(h)/(t·p);
    * ``uneven_layers``: ⌈L/p⌉ − L/p extra layers when p does not divide L;
    * ``final_layernorm``: 2h on the stage when p = 1 (the last stage otherwise), less its share 2h/(t·p).
    Source: the parameter layout of Megatron-LM (Korthikanti et al. §2/§4; Narayanan et al. 2021)."""
    tp = t * p
    per_layer_t = Fraction(params_per_layer(h, t))
    return {
        "word_embedding": Fraction(v * h // t) - Fraction(v * h, tp),
        "position_embedding": Fraction(s * h) - Fraction(s * h, tp),
        "replicated_in_layers": Fraction(L, p) * per_layer_t - Fraction(L * params_per_layer(h), tp),
        "uneven_layers": (-(-L // p) - Fraction(L, p)) * per_layer_t,
        "final_layernorm": Fraction(2 * h if p == 1 else 0) - Fraction(2 * h, tp),
    }


BYTES_PER_PARAM = 18
BYTES_PER_PARAM_WHY = (
    "16-bit weights (2) + fp32 gradients accumulated in main_grad (4) + fp32 master weights (4) + Adam m and "
    "v (4 + 4): Megatron's non-distributed mixed-precision optimizer, as the paper trained (the Megatron-Core "
    "distributed-optimizer guide lists 'float16 param, fp32 grads: 18'); ZeRO's count, without fp32 "
    "gradients, is 16")


def model_state_bytes(n_params: int, bytes_per_param: int = BYTES_PER_PARAM) -> int:
    """Parameters + gradients + optimizer state (bytes) for ``n_params`` parameters (see BYTES_PER_PARAM_WHY)."""
    return n_params * bytes_per_param


def outside_layer_share(s: int, b: int, h: int, a: int, v: int, L: int, t: int = 1, p: int = 1, m: int = 1,
                        sp: bool = True, recompute: str = "none") -> Fraction:
    """Activations outside the layers (§4.3, ``outside_layer_bytes``) as a fraction of the layers' activations
    on the first stage (``first_stage_bytes`` of the Table 2 formula ``table2_bytes``), exact.

    With the paper's setting (sp=True, recompute none, m = 1) this is §4.3's extra terms over Eq. 5:
    (p/L + δ(p=1)·(4/L)(1 + v/h)) / (34 + 5as/h) — for the 22B model (p = 1, L = 48, v/h = 25/3,
    5as/h = 320/3) (1/48 + (4/48)(1 + 25/3)) / (34 + 320/3) ≈ 0.57 %, which §4.3 states as "less than 0.01 %".
    Raises UsageError (tp, sp, seq, mode) via ``table2_bytes``."""
    layers = first_stage_bytes(table2_bytes(s, b, h, a, t, sp, recompute), L, p, m)
    return Fraction(sum(outside_layer_bytes(s, b, h, v, t, p, sp).values()), layers)


# --- FLOPs (Appendix A: only the GEMMs are counted) ---------------------------------------------------------------

def layer_forward_flops(s: int, b: int, h: int, ffn: int | None = None) -> int:
    """Forward FLOPs of one layer (all TP ranks together): 24bsh² + 4bs²h — QKV 6bsh², QKᵀ 2bs²h, ·V 2bs²h,
    projection 2bsh², MLP 16bsh² (Appendix A). Backward is 2× forward. With an MLP inner width ``ffn``
    (None: 4h) the MLP is 4bsh·ffn: 8bsh² + 4bsh·ffn + 4bs²h."""
    f = 4 * h if ffn is None else ffn
    return 8 * b * s * h * h + 4 * b * s * h * f + 4 * b * s * s * h


def core_attn_forward_flops(s: int, b: int, h: int) -> int:
    """Forward FLOPs of core attention (QKᵀ and ·V): 4bs²h — what selective recompute re-executes (§5)."""
    return 4 * b * s * s * h


def logits_flops(s: int, b: int, h: int, v: int) -> int:
    """Forward FLOPs of the output projection to the vocabulary: 2bshv (Appendix A)."""
    return 2 * b * s * h * v


def recompute_flops(s: int, b: int, h: int, recompute: str, ffn: int | None = None) -> int:
    """FLOPs one layer re-executes in backward: none 0; selective 4bs²h (core attention forward, per the
    paper's §5 text); full 24bsh² + 4bs²h (one extra forward, ``layer_forward_flops`` with the MLP inner
    width ``ffn``, None = 4h). Raises UsageError("mode")."""
    check_parallel(s, 1, 1, recompute=recompute)
    return {"none": 0, "selective": core_attn_forward_flops(s, b, h),
            "full": layer_forward_flops(s, b, h, ffn)}[recompute]


def model_flops(B: int, s: int, h: int, L: int, v: int) -> int:
    """Eq. 7: model FLOPs per iteration, 72·B·L·s·h²·(1 + s/(6h) + v/(12hL)) = 3·(L·(24Bsh² + 4Bs²h) + 2Bshv)."""
    return 72 * B * L * s * h * h + 12 * B * L * s * s * h + 6 * B * s * h * v


def hardware_flops_eq8(B: int, s: int, h: int, L: int, v: int) -> int:
    """Eq. 8 AS PRINTED: hardware FLOPs with selective recompute, 72·B·L·s·h²·(1 + s/(3h) + v/(12hL)).

    Its s-term (24BLs²h) exceeds Eq. 7's (12BLs²h) by 12BLs²h = 3× the core-attention forward — i.e. it
    charges forward + backward of attention again, while the paper's text says only the forward QKᵀ and ·V
    (4Bs²h per layer) are recomputed. See ``hardware_flops``; the report shows both against FlopCounterMode.
    """
    return 72 * B * L * s * h * h + 24 * B * L * s * s * h + 6 * B * s * h * v


def hardware_flops(B: int, s: int, h: int, L: int, v: int, recompute: str = "selective") -> int:
    """Hardware FLOPs per iteration = model FLOPs (Eq. 7) + L·``recompute_flops`` (logits never recomputed).

    selective: 72BLsh²(1 + 2s/(9h) + v/(12hL)) — the recompute the paper's text describes (4Bs²h per layer);
    full: 96BLsh²(1 + s/(6h)) + 6Bshv; none: Eq. 7. Raises UsageError("mode")."""
    return model_flops(B, s, h, L, v) + L * recompute_flops(s, B, h, recompute)


def recompute_overhead(B: int, s: int, h: int, L: int, v: int, hardware: str = "text") -> Fraction:
    """Selective recompute's FLOPs overhead per iteration, (hardware − model)/model (a fraction), exact:
    hardware = ``hardware_flops(..., "selective")`` (the recompute the paper's §5 text describes, 4Bs²h per
    layer) for ``hardware="text"``, ``hardware_flops_eq8`` (Eq. 8 as printed, 12Bs²h per layer) for
    ``hardware="eq8"``; model = ``model_flops`` (Eq. 7). Eq. 8's is (s/(6h)) / (1 + s/(6h) + v/(12hL)):
    2.69 % for GPT-3 175B and 1.64 % for MT-NLG 530B (the paper's quoted 2.7 % and 1.6 %); the text's is a
    third of that. Raises UsageError("hardware") for another value."""
    model = model_flops(B, s, h, L, v)
    if hardware == "text":
        hw = hardware_flops(B, s, h, L, v, "selective")
    elif hardware == "eq8":
        hw = hardware_flops_eq8(B, s, h, L, v)
    else:
        raise UsageError("hardware", f"unknown {hardware!r} (use text|eq8)")
    return Fraction(hw - model, model)


def flops_utilization(flops: int, seconds: float, gpus: int, peak_flops: float) -> float:
    """FLOPs utilization = flops / (seconds · gpus · peak_flops) (a fraction): MFU with model FLOPs (Eq. 7),
    HFU with hardware FLOPs (Eq. 8 or ``hardware_flops``), as in the paper's Table 5. flops per iteration,
    seconds per iteration, peak_flops in FLOP/s per GPU (A100: 312·10¹²,
    ``remat.timemodel.gpus.GPUS["a100-80gb"].peak_flops``). Raises ValueError for a non-positive seconds, gpus
    or peak_flops."""
    if not (seconds > 0 and gpus > 0 and peak_flops > 0):
        raise ValueError(f"seconds, gpus and peak_flops must be > 0, got {seconds}, {gpus}, {peak_flops}")
    return flops / (seconds * gpus * peak_flops)
