"""What ``remat.planner.ranks`` needs of a model, per pipeline stage and rank: the per-layer options per micro-batch,
the bytes outside the layers (per micro-batch stored from a stage's forward to its backward, and what its backward
adds while it runs) of the first and the last stage, and each rank's fixed bytes.

* GPT models (``cfg.arch == "gpt"``): Korthikanti's closed form at one micro-batch (§4.3,
  ``korthikanti.outside_layer_bytes``): stage 0 keeps the embedding-dropout mask; the last stage the final LayerNorm
  input, the output-projection input and the fp32 logits, and its backward adds the logits' gradient (4sbv/t).
  Parameters: ``korthikanti.params_per_layer`` per layer, the word and position embeddings on stage 0, the final
  LayerNorm and the output layer on the last stage (Megatron keeps a copy of a tied embedding there). A layer's
  weight-op outputs: QKV 3h/t, projection h, fc1 f/t, fc2 h and the two LayerNorms' h each (2-byte).
* Other models (Llama, Mistral, Qwen2, Mixtral): measured under fake tensors (``remat.planner.measured``): the layer's
  options, the embedding's saved tensors on stage 0; on the last stage what the final norm, the head and the loss
  save (``head_saved_bytes``) and, while its backward runs, the rest of the head's peak (``measured.head_floor``
  less those); the sliding-window mask (one buffer every layer reads) on every rank and each layer's own buffers
  (the RoPE tables of remat's runtime layer); the outputs of the layer's weight-holding modules
  (``weight_output_bytes``); each option's transient with the layer's backward workspace (``measured.
  backward_workspace``), as the first-stage planner counts it. Parameters as measured (one
  TP rank's layer; embedding and head vocabulary-parallel), the experts' state sharded over dp/ep (as
  ``measured.measured_costs``).

Fixed bytes of a rank: the model state of its parameters (``layer_costs.sharded_state``, ZeRO as set) + the
workspace reserve (+ the mask buffer).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from dataclasses import dataclass
from fractions import Fraction

from remat.formulas import korthikanti
from remat.formulas.torch_gpt import itemsize
from remat.models.presets import ModelConfig
from remat.planner.costs import per_micro_batch
from remat.planner.layer_costs import Settings, sharded_state
from remat.planner import measured


RECOMPUTED = ("selective", "full")
"""Policies whose backward recomputes: under a split backward (zero-bubble schedules) the input-gradient step keeps
the graph for the weight-gradient step (torch's ``stage_backward_input``, retain_graph), so what it recomputed stays
until then — an option's ``retained`` bytes, the none − stored difference."""


@dataclass(frozen=True)
class RankCosts:
    """Per micro-batch: ``options`` [{policy, stored, transient, time, host, retained, …}] of one layer, ``first`` and
    ``last`` (stored, transient) outside the layers of stage 0 and of the last stage. Parameters: per layer (dense
    part, experts part), stage 0's, the last stage's; ``every_rank`` bytes each rank holds besides (int);
    ``boundary`` the bytes of one activation between stages, ``logits`` of the last stage's output (one TP rank,
    one micro-batch, in the activation dtype); ``weight_grads`` the gradients of one layer's weight-op outputs,
    which a split backward keeps from its input-gradient step to its weight-gradient step (``RECOMPUTED``);
    ``layer_buffers`` one layer's buffers (in ``fixed``)."""

    options: tuple[dict, ...]
    first: tuple[int, int]
    last: tuple[int, int]
    layer_params: int
    expert_params: int
    first_params: int
    last_params: int
    every_rank: int = 0
    boundary: int = 0
    logits: int = 0
    weight_grads: int = 0
    layer_buffers: int = 0

    def outside(self, stage: int, last: int, runtime: bool = False, keeps_sends: bool = False) -> tuple[int, int]:
        """(stored per micro-batch, backward transient) outside the layers of stage ``stage``; ``runtime``: with
        what torch.distributed.pipelining keeps besides (``buffers``): the stage's output until its backward (the
        logits on the last stage; the others' counted by ``sent`` where the schedule ``keeps_sends``), less a
        received input, which is its receive buffer (counted there)."""
        out = [0, 0]
        for held, at in ((self.first, 0), (self.last, last)):
            if stage == at:
                out = [out[0] + held[0], max(out[1], held[1])]
        if runtime:
            output = self.logits if stage == last else 0 if keeps_sends else self.boundary
            out[0] += output - (self.boundary if stage else 0)
        return out[0], out[1]

    def sent(self, stage: int, last: int) -> tuple[int, int]:
        """(bytes of the output stage ``stage`` sends on, of the input gradient it sends back), one micro-batch."""
        return self.boundary * (stage != last), self.boundary * (stage != 0)

    def buffers(self, stage: int, last: int, micro_batches: int) -> int:
        """Receive buffers torch.distributed.pipelining allocates for stage ``stage`` when its first step starts, one
        per micro-batch and kept: the input activation (every stage but the first) and the output's gradient
        (every stage but the last), one stage-boundary activation each (``PipelineStage._setup_forward_recv_info``,
        ``_create_grad_recv_info``)."""
        return micro_batches * self.boundary * ((stage > 0) + (stage < last))

    def fixed(self, st: Settings, layers: int, first: bool, last: bool, ep: int = 1) -> int:
        """Model state of a rank with ``layers`` layers (and stage 0 / the last stage when ``first`` / ``last``),
        plus the workspace reserve and ``every_rank``."""
        dense = layers * self.layer_params + self.first_params * first + self.last_params * last
        buffers = layers * self.layer_buffers
        state = [sharded_state(dense, st), sharded_state(layers * self.expert_params // ep,
                                                         dataclasses.replace(st, dp=max(1, st.dp // ep)))]
        return sum(state[0].values()) + sum(state[1].values()) + st.reserve_bytes + self.every_rank + buffers


def rank_costs(cfg: ModelConfig, st: Settings) -> RankCosts:
    """The per-stage and per-rank inputs of ``cfg`` (module docstring)."""
    every = dataclasses.replace(st, policies=tuple(dict.fromkeys(("none", *st.policies))))     # none: retained's base
    costs = per_micro_batch(cfg, every) if cfg.arch == "gpt" else measured.measured_costs(cfg, every,
                                                                                           1)["per_micro_batch"]
    none = costs["none"]["stored"]
    options = tuple(dict(policy=p, **costs[p], retained=max(0, none - costs[p]["stored"]) * (p in RECOMPUTED))
                    for p in st.policies if p in costs)
    return _closed_form(cfg, st, options) if cfg.arch == "gpt" else _measured(cfg, st, options)


def _closed_form(cfg: ModelConfig, st: Settings, options) -> RankCosts:
    s, b, h, v, t = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.vocab, cfg.tp
    terms = korthikanti.outside_layer_bytes(s, b, h, v, t, 1, st.sp, held=1)
    mask = terms.pop("embedding_dropout_mask")
    return RankCosts(options, (mask, 0), (sum(terms.values()), int(Fraction(4 * s * b * v, t))),
                     korthikanti.params_per_layer(h, t, cfg.ffn_hidden), 0,
                     v * h // t + cfg.max_positions * h, 2 * h + v * h // t, 0,
                     int(Fraction(2 * s * b * h, t if st.sp else 1)), int(Fraction(2 * s * b * v, t)),
                     2 * s * b * (4 * h + (3 * h + (cfg.ffn_hidden or 4 * h)) // t))


def _measured(cfg: ModelConfig, st: Settings, options) -> RankCosts:
    m, t, e = measured.measure_layer(cfg), cfg.tp, itemsize(cfg.dtype)
    rank = measured.measure_rank_layer(cfg, t, st.sp) if t > 1 else m
    saved = head_saved_bytes(cfg)
    return RankCosts(options, (measured.outside(cfg, 1)["embedding (measured)"], 0),
                     (saved, max(0, measured.head_floor(cfg) - saved)), rank["layer"] - rank["experts"],
                     rank["experts"], -(-m["embedding"] // t), m["norm"] + -(-m["head"] // t), m["mask"],
                     cfg.seq * cfg.micro_batch * cfg.hidden * e // (t if st.sp else 1),
                     cfg.seq * cfg.micro_batch * -(-cfg.vocab // t) * e, weight_output_bytes(cfg) // t, m["buffers"])


@functools.lru_cache(maxsize=16)
def head_saved_bytes(cfg: ModelConfig) -> int:
    """Bytes the final norm, the head and the loss save for backward, one micro-batch (a 1-layer copy of ``cfg``
    with one TP rank's v/t vocabulary rows under fake tensors, as ``measured.head_floor``;
    remat.measure.saved.SavedTensorLog)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from remat.measure.saved import SavedTensorLog
    from remat.models.transformer import build_model, lm_loss, random_tokens

    one = dataclasses.replace(cfg, layers=1, pp=1, interleave=1, tp=1, ep=1, vocab=-(-cfg.vocab // cfg.tp))
    with FakeTensorMode():
        model = build_model(one)
        with SavedTensorLog(model) as log:
            lm_loss(model(random_tokens(one)), random_tokens(one))
    return sum(r.nbytes for r in log.activations() if not r.module.startswith(("layers", "embed")))


@functools.lru_cache(maxsize=16)
def weight_output_bytes(cfg: ModelConfig) -> int:
    """Bytes of the outputs of one layer's modules that hold weights (their gradients are what a weight-gradient
    step reads), one micro-batch, t = 1: a 1-layer copy of ``cfg`` run under fake tensors (``weight_outputs``)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from remat.models.transformer import build_model, random_tokens

    one = dataclasses.replace(cfg, layers=1, pp=1, interleave=1, tp=1, ep=1)
    with FakeTensorMode():
        model = build_model(one)
        with weight_outputs(model.layers[0]) as total:
            model(random_tokens(one))
    return sum(total)


@contextlib.contextmanager
def weight_outputs(layer):
    """A list that collects, while the block runs, the bytes of the floating-point outputs of ``layer``'s modules
    that hold weights (forward hooks; a module may return a tuple: a router's weights and indices)."""
    from torch.utils._pytree import tree_leaves

    total: list[int] = []
    owners = [m for m in layer.modules() if any(True for _ in m.parameters(recurse=False))]
    hooks = [m.register_forward_hook(lambda _m, _i, out: total.extend(
        t.numel() * t.element_size() for t in tree_leaves(out) if hasattr(t, "is_floating_point")
        and t.is_floating_point())) for m in owners]
    try:
        yield total
    finally:
        for hook in hooks:
            hook.remove()
