"""Labels for the saved tensors of the GPT layer: ``paper_term`` maps one saved tensor (module, op, shape, dtype)
to its Korthikanti §4.1 ``Term`` name (remat.formulas.korthikanti.TERMS), ``None`` for what the paper does not
count (LayerNorm statistics, the causal mask, ...); ``layer_relative`` strips a module name to its place in the
layer. Used by remat.measure.saved and remat.accounting.
"""

from __future__ import annotations

from remat.formulas.korthikanti import FULL_RECOMPUTE_TERM, QKV_GROUP

_LINEAR = None  # any op: a Linear (serial, column- or row-parallel) saves only its input
_MODULE_TERMS = {  # module -> (term, ops that save it; None = any)
    "ln_1": ("ln1_input", {"native_layer_norm", "layer_norm"}),
    "attn.qkv": ("qkv_input", _LINEAR),
    "attn.proj": ("proj_input", _LINEAR),
    "attn.dropout": ("attn_dropout_mask", {"native_dropout", "mul", "bernoulli", "dropout"}),
    "ln_2": ("ln2_input", {"native_layer_norm", "layer_norm"}),
    "mlp.fc1": ("fc1_input", _LINEAR),
    "mlp.act": ("gelu_input", {"gelu"}),
    "mlp.fc2": ("fc2_input", _LINEAR),
    "mlp.dropout": ("mlp_dropout_mask", {"native_dropout", "mul", "bernoulli", "dropout"}),
}


def paper_term(module: str, op: str, shape, dtype, shares_storage: bool | None = None) -> str | None:
    """The §4.1 term a tensor saved by the GPT layer stands for, or None if the paper does not count it.

    module: qualified submodule name relative to the layer (a model prefix such as "layers.3." is ignored);
    op: the aten op that saved it (overload suffix ignored); shape: the saved tensor's shape; dtype: its dtype
    (str or torch.dtype). Serial and TP/SP layers share submodule names (ln_1, attn.qkv, attn.core,
    attn.proj, attn.dropout, ln_2, mlp.fc1, mlp.act, mlp.fc2, mlp.dropout), so one map serves both.
    Not counted (None): LayerNorm mean/rstd (trailing dim 1), the causal mask (bool, s×s without batch),
    anything outside these modules. Returns a ``TERMS`` name, ``"layer_input"`` (full recompute: the
    checkpointed layer input) or ``"q_k_v"`` (selective recompute: a checkpointed core-attention input).
    shares_storage: whether the tensor's storage was already saved by an earlier op (SavedRecord.duplicate);
    it tells V (a view of the fused QKV output, whose storage QKᵀ saved) from the dropped-out probabilities
    of the ·V product when their shapes coincide (s = h/a); without it the shape decides.
    """
    module = layer_relative(module)
    op = str(op).split(".")[0].removeprefix("aten::").removeprefix("aten.")
    shape = tuple(int(d) for d in shape)
    if module == "":
        # the layer itself: under full recompute the checkpoint keeps only the layer input
        return FULL_RECOMPUTE_TERM if op in _CHECKPOINT_OPS else None
    if module.startswith("attn.core"):
        return _core_term(op, shape, str(dtype), shares_storage)
    term, ops = _MODULE_TERMS.get(module, (None, set()))
    if term is None or (ops is not None and op not in ops):
        return None  # e.g. a Llama layer's RMSNorm or SiLU under the same module names: not §4.1 terms
    if term in ("ln1_input", "ln2_input") and shape and shape[-1] == 1:
        return None  # LayerNorm statistics (mean, rstd): the paper ignores them (§4.1)
    return term


_CHECKPOINT_OPS = {"checkpoint", "checkpoint_input", "_NoopSaveInputs", "NoopSaveInputs"}
_LAYER_PARTS = ("ln_1", "attn", "ln_2", "mlp")


def layer_relative(module: str) -> str:
    """Strip a model prefix ("layers.3.", "h.0.") so the name starts at the layer's own submodules."""
    parts = module.split(".") if module else []
    for i, part in enumerate(parts):
        if part in _LAYER_PARTS:
            return ".".join(parts[i:])
    return ""


def _core_term(op: str, shape: tuple, dtype: str, shares_storage: bool | None) -> str | None:
    """Terms inside core attention (remat.models.gpt.CoreAttention): baddbmm saves Q and K (QKᵀ), _softmax
    its output, native_dropout its mask, bmm the dropout output (the s×s operand) and V; checkpoint inputs
    (selective recompute keeps core attention's inputs q, k, v) are "q_k_v": one of Q, K or V, which the
    shape cannot tell apart (all [s, b, a/t, d]) — ``remat.accounting`` splits them by argument order."""
    if "bool" in dtype and len(shape) == 2:
        return None  # the causal mask (s×s, no batch): a buffer in our layer; the paper does not count it
    if op in ("_softmax", "softmax", "_safe_softmax"):
        return "softmax_output"
    if op in ("native_dropout", "mul", "bernoulli", "dropout"):
        return "softmax_dropout_mask"
    if op in _CHECKPOINT_OPS:
        return QKV_GROUP
    if op == "baddbmm":
        return "q_k"
    if op in ("bmm", "matmul"):
        if shares_storage is not None:
            return "v" if shares_storage else "attn_probs_dropped"
        return "attn_probs_dropped" if len(shape) >= 2 and shape[-1] == shape[-2] else "v"
    return None
