"""A measured layer's backward workspace and buffers (remat.planner.measured): the workspace is what the backward
allocates beyond what is live when it starts (by hand on a linear layer), every option's backward holds it on top of
what it recomputes, and a layer's own buffers are its RoPE tables, not the sliding-window mask every layer shares."""

from __future__ import annotations

import json

import torch
from torch import nn

from remat.models.presets import from_name
from remat.planner import measured
from remat.planner.make import make_settings


def test_the_workspace_is_what_the_backward_allocates_beyond_what_is_live_when_it_starts(monkeypatch):
    # y = x·Wᵀ, x [32, 64] (a leaf that wants its gradient), W [64, 64], float32. When backward starts x, W and y
    # are live; backward(ones) allocates the ones [32, 64] (8192 B), x's gradient ones·W [32, 64] (8192 B) and W's
    # gradient onesᵀ·x [64, 64] (16384 B), all alive at its end: 32768 B. y is not counted (live before)
    n, h = 32, 64
    monkeypatch.setattr(measured, "build", lambda cfg, t, sp, policy, group, mode: (nn.Linear(h, h, bias=False), None))
    monkeypatch.setattr(measured, "layer_input", lambda cfg, t, sp, mode: torch.randn(n, h, requires_grad=True))
    # both measurements are cached on the config: an earlier test's real llama-tiny must not answer for the stand-in
    monkeypatch.setattr(measured, "_backward_peak", measured._backward_peak.__wrapped__)
    assert measured.backward_workspace.__wrapped__(from_name("llama-tiny"), 1, False) == 4 * (n * h + n * h + h * h)


def test_every_options_backward_holds_the_workspace_on_top_of_what_it_recomputes():
    # llama-tiny, one stage of two (no head). none recomputes nothing: its transient is the workspace alone. full
    # recomputes what none stores beyond its own stored input, and holds the workspace besides
    cfg = from_name("llama-tiny", pp=2, global_batch=8)
    costs = measured.measured_costs(cfg, make_settings(cfg, "a100-80gb", sp=False))["per_micro_batch"]
    none, full = costs["none"], costs["full"]
    workspace = measured.backward_workspace(cfg, 1, False)
    assert none["transient"] == workspace > 0
    assert full["transient"] == (none["stored"] - full["stored"]) + workspace


def test_a_layers_buffers_are_its_rope_tables_not_the_shared_sliding_window_mask(tmp_path):
    # a Mistral with a 8-token window at s = 32: the mask, one additive [s, s] float32 buffer every layer reads, is
    # counted once outside the layers (4·32·32 B); a layer's own buffers are its RoPE cos and sin tables
    # [positions, head dim] = [64, 16] float32: 2·64·16·4 = 8192 B
    raw = {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 176, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 64,
           "sliding_window": 8, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "float32",
           "tie_word_embeddings": False}
    (tmp_path / "config.json").write_text(json.dumps(raw))
    facts = measured.measure_layer(from_name(str(tmp_path / "config.json"), seq=32, micro_batch=2))
    assert (facts["mask"], facts["buffers"]) == (4 * 32 * 32, 2 * 64 * 16 * 4)
