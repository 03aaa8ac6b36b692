"""The stacked LSTM of Chen et al. 2016 §5.3, unrolled over time in Python so time steps can be checkpointed.

    cfg = LSTMConfig()                               # the paper: 4 layers, hidden 1024, input 50, 5000 classes,
    model = build_lstm(cfg)                          #            batch 64, 64 steps
    x, targets = random_sequence(cfg)                # x [T, B, input], targets [T, B]
    apply_step_plan(model, "segments:8")             # remat.policies: a plan over the T time steps
    loss = model(x, targets)                         # Σ_t cross-entropy(classifier(h_t of the top layer), y_t)

Per step t and layer l (input x_t for l = 0, else the layer below's new h):
    gates = x·W_ihᵀ + b_ih + h·W_hhᵀ + b_hh          (two F.linear = addmm, [B, 4H]), chunked into i, f, g, o
    c' = σ(f)·c + σ(i)·tanh(g);  h' = σ(o)·tanh(c')
then logits_t = h'_top·W_cᵀ + b_c ([B, classes]) and loss += cross_entropy(logits_t, y_t) (mean over B): a
running sum, so no op gathers all steps. ``step`` is one time step; ``forward`` runs the steps in ``units``,
[start, stop) runs of steps each with the wrapper it runs under (None: plain). The model knows no policy:
remat.policies.apply_step_plan sets ``units`` from a plan over time steps: "none"; "full" (each step
checkpointed); "drop-cheap" (each step under remat.drop_cheap: matmul outputs kept); "segments:k" (Chen Alg. 1:
the steps split by remat.formulas.chen.segment_bounds, every segment but the last one checkpointed as one unit,
as torch.utils.checkpoint.checkpoint_sequential does); or one policy per step. The state between steps is
(h_0..h_{L-1}, c_0..c_{L-1}), each [B, H].
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from remat.formulas.chen import check_count
from remat.models.transformer import default_dtype

State = tuple[torch.Tensor, ...]
"""(h_0, ..., h_{L-1}, c_0, ..., c_{L-1}), each [B, H]."""

Unit = tuple[int, int, Callable[[Callable], Callable] | None]
"""[start, stop) of time steps run as one unit, and the wrapper its runner is called under (None: plain)."""


@dataclass(frozen=True)
class LSTMConfig:
    """Sizes (Chen §5.3 defaults): layers L, hidden H, input dim, classes (softmax width), steps T, batch B,
    and the dtype name. Raises UsageError(<field>) for a size < 1."""

    layers: int = 4
    hidden: int = 1024
    input: int = 50
    classes: int = 5000
    steps: int = 64
    batch: int = 64
    dtype: str = "float32"

    def __post_init__(self):
        for name in ("layers", "hidden", "input", "classes", "steps", "batch"):
            check_count(getattr(self, name), name)


class LSTMCell(nn.Module):
    """One layer's cell: (x [B, in], h [B, H], c [B, H]) -> (h' [B, H], c' [B, H]); ``ih``, ``hh`` Linear
    (in -> 4H, H -> 4H), gate order i, f, g, o (torch.nn.LSTM's)."""

    def __init__(self, cin: int, hidden: int):
        super().__init__()
        self.ih = nn.Linear(cin, 4 * hidden)
        self.hh = nn.Linear(hidden, 4 * hidden)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        i, f, g, o = (self.ih(x) + self.hh(h)).chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(c), c


class StackedLSTM(nn.Module):
    """``cells`` (nn.ModuleList of LSTMCell, bottom first) and ``classifier`` (Linear H -> classes).

    forward(x [T, B, input], targets [T, B] int64) -> scalar loss Σ_t mean-over-B cross-entropy.
    """

    def __init__(self, cfg: LSTMConfig):
        super().__init__()
        self.cfg = cfg
        self.cells = nn.ModuleList(LSTMCell(cfg.input if l == 0 else cfg.hidden, cfg.hidden)
                                   for l in range(cfg.layers))
        self.classifier = nn.Linear(cfg.hidden, cfg.classes)
        self.units: list[Unit] = [(t, t + 1, None) for t in range(cfg.steps)]  # policy none

    def initial_state(self, x: torch.Tensor) -> State:
        """Zeros for every h and c: 2L tensors [B, H] like ``x``'s dtype and device."""
        zero = x.new_zeros(x.shape[1], self.cfg.hidden)
        return (zero,) * (2 * self.cfg.layers)

    def step(self, x_t: torch.Tensor, y_t: torch.Tensor, state: State, loss: torch.Tensor) -> tuple:
        """One time step through every layer and the classifier: x_t [B, input], y_t [B], state, loss (scalar)
        -> (*new state, loss + cross-entropy of this step)."""
        layers = self.cfg.layers
        hs, cs = list(state[:layers]), list(state[layers:])
        inp = x_t
        for l, cell in enumerate(self.cells):
            hs[l], cs[l] = cell(inp, hs[l], cs[l])
            inp = hs[l]
        return (*hs, *cs, loss + F.cross_entropy(self.classifier(inp), y_t))

    def run_steps(self, start: int, stop: int, x: torch.Tensor, targets: torch.Tensor, *carry) -> tuple:
        """Steps [start, stop) from ``carry`` = (*state, loss); returns the new (*state, loss)."""
        for t in range(start, stop):
            carry = self.step(x[t], targets[t], carry[:-1], carry[-1])
        return carry

    def forward(self, x: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        carry = (*self.initial_state(x), x.new_zeros(()))
        for start, stop, wrapper in self.units:
            run = partial(self.run_steps, start, stop)
            carry = (run if wrapper is None else wrapper(run))(x, targets, *carry)
        return carry[-1]


def build_lstm(cfg: LSTMConfig, device: str | torch.device = "cpu") -> StackedLSTM:
    """A StackedLSTM of ``cfg`` on ``device`` in ``cfg.dtype`` (training mode; fake under FakeTensorMode)."""
    with torch.device(device), default_dtype(getattr(torch, cfg.dtype)):
        return StackedLSTM(cfg).train()


def random_sequence(cfg: LSTMConfig, device: str | torch.device = "cpu",
                    generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(x [T, B, input] in cfg.dtype, targets [T, B] int64 in [0, classes)) from ``generator``."""
    x = torch.randn(cfg.steps, cfg.batch, cfg.input, generator=generator, dtype=getattr(torch, cfg.dtype))
    targets = torch.randint(0, cfg.classes, (cfg.steps, cfg.batch), generator=generator)
    return x.to(device), targets.to(device)
