"""A decoder-only model: embedding + L layers (GPT or Llama) + final norm + LM head; and its loss.

    cfg = from_name("gpt-tiny")
    model = build_model(cfg)                      # on the CPU, in cfg.dtype
    tokens = random_tokens(cfg)                   # [s, b] int64
    loss = lm_loss(model(tokens), tokens)         # fp32 cross-entropy

For paper sizes, build under ``torch._subclasses.fake_tensor.FakeTensorMode()``: every parameter is a fake
tensor (shapes and dtypes only, no memory).

``Transformer.run_layers`` runs ``layers`` in order; ``remat.policies.apply_plan`` may replace it (on the
instance) to checkpoint several layers as one unit (Megatron's uniform method, Chen's segments).
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch
import torch.nn.functional as F
from torch import nn

from remat.models.gpt import GPTEmbedding, GPTLayer
from remat.models.llama import LlamaEmbedding, LlamaLayer, RMSNorm
from remat.models.presets import ModelConfig

_PARTS = {"gpt": (GPTEmbedding, GPTLayer, nn.LayerNorm), "llama": (LlamaEmbedding, LlamaLayer, RMSNorm)}


class Transformer(nn.Module):
    """embed -> layers (nn.ModuleList) -> norm -> head. tokens [s, b] int64 -> logits [s, b, v].

    The head is a bias-free Linear h -> v whose weight is the token embedding's when cfg.tie_embeddings
    (GPT-2, Megatron). Logits stay in the model dtype; ``lm_loss`` casts them to fp32 (Korthikanti §4.3).
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        embedding, layer, norm = _PARTS[cfg.arch]
        self.cfg = cfg
        self.embed = embedding(cfg)
        self.layers = nn.ModuleList(layer(cfg) for _ in range(cfg.layers))
        if cfg.arch == "llama":     # one sliding-window mask for every layer (SDPACore)
            for later in self.layers[1:]:
                later.attn.core.window_mask = self.layers[0].attn.core.window_mask
        self.norm = norm(cfg.hidden, cfg.norm_eps) if cfg.arch == "llama" else \
            nn.LayerNorm(cfg.hidden, eps=cfg.norm_eps, bias=cfg.bias)
        self.head = nn.Linear(cfg.hidden, cfg.vocab, bias=False)
        if cfg.tie_embeddings:
            self.head.weight = self.embed.tok.weight

    def run_layers(self, x: torch.Tensor) -> torch.Tensor:
        """x [s, b, h] through every layer in order -> [s, b, h]."""
        for layer in self.layers:
            x = layer(x)
        return x

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.run_layers(self.embed(tokens))))


def _init_weights(module: nn.Module) -> None:
    """GPT-2 style init: N(0, 0.02) for Linear and Embedding weights, zero biases (norms keep ones/zeros)."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)


def build_model(cfg: ModelConfig, device: str | torch.device = "cpu") -> Transformer:
    """A Transformer for ``cfg`` on ``device``, parameters in ``cfg.dtype``, in training mode.

    Seed torch (``torch.manual_seed``) first for reproducible weights. Under an active FakeTensorMode the
    parameters are fake (no memory), which is how paper-size models are measured.
    """
    with torch.device(device), default_dtype(getattr(torch, cfg.dtype)):
        model = Transformer(cfg)  # built in the dtype: Module.to(dtype) cannot swap tied fake parameters
        model.apply(_init_weights)
    return model.train()


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Create floating-point tensors in ``dtype`` inside the block (torch.set_default_dtype, restored after).

    Used instead of ``module.to(dtype)``, which under FakeTensorMode swaps parameters with
    torch.utils.swap_tensors and fails on fake parameters ("Cannot swap ... weakref")."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def random_tokens(cfg: ModelConfig, device: str | torch.device = "cpu",
                  generator: torch.Generator | None = None) -> torch.Tensor:
    """Uniform random token ids [s, b] (int64) in [0, v)."""
    return torch.randint(0, cfg.vocab, (cfg.seq, cfg.micro_batch), device=device, generator=generator)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy in fp32 of logits [s, b, v] against targets [s, b] (int64, already shifted).

    The fp32 cast of the logits is what Korthikanti §4.3 counts as 4sbv bytes (log_softmax keeps it).
    Returns a 0-dim fp32 tensor.
    """
    v = logits.shape[-1]
    return F.cross_entropy(logits.float().reshape(-1, v), targets.reshape(-1))
