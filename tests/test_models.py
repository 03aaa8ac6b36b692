"""The GPT and Llama layers and the model: names, shapes, saved bytes against Korthikanti §4.1, numerics."""

from __future__ import annotations

import math

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from remat.measure.saved import SavedTensorLog
from remat.models import build_model, from_name, lm_loss, random_tokens
from remat.models.llama import apply_rope, rope_tables

GPT_NAMES = ["ln_1", "attn.qkv", "attn.core", "attn.proj", "attn.dropout", "ln_2", "mlp.fc1", "mlp.act",
             "mlp.fc2", "mlp.dropout"]


def saved_layer0(cfg):
    torch.manual_seed(0)
    model = build_model(cfg)
    tokens = random_tokens(cfg)
    with SavedTensorLog(model) as log:
        lm_loss(model(tokens), tokens)
    return [r for r in log.activations() if r.module.startswith("layers.0.")]


def test_gpt_layer_submodule_names():
    names = {n for n, _ in build_model(from_name("gpt-tiny", layers=1)).layers[0].named_modules()}
    assert set(GPT_NAMES) <= names


@pytest.mark.parametrize("dtype, e", [("float32", 4), ("bfloat16", 2), ("float64", 8)])
def test_gpt_layer_saves_korthikanti_bytes(dtype, e):
    """Per layer: sbh(16e + 2) + as²b(2e + 1) (Eq. 1 at e = 2) plus four LayerNorm statistics [s, b, 1]."""
    cfg = from_name("gpt-tiny", layers=1, seq=24, micro_batch=3, dtype=dtype)
    s, b, h, a = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads
    records = saved_layer0(cfg)
    stats = [r for r in records if r.op == "native_layer_norm" and r.shape == (s, b, 1)]
    counted = sum(r.storage_nbytes for r in records if r not in stats)
    assert len(stats) == 4
    assert counted == s * b * h * (16 * e + 2) + a * s * s * b * (2 * e + 1)
    if e == 2:
        assert counted == s * b * h * 34 + 5 * a * s * s * b  # sbh(34 + 5as/h), Eq. 1


def test_gpt_layer_saved_tensors_by_op():
    """Masks are 1-byte bools; Q, K, V are views of the one qkv output (one storage, counted once)."""
    cfg = from_name("gpt-tiny", layers=1)
    s, b, h, a = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads
    torch.manual_seed(0)
    model = build_model(cfg)
    with SavedTensorLog(model) as log:
        model(random_tokens(cfg)).sum()
    core = [r for r in log.records if r.module.startswith("layers.0.attn.core")]
    masks = [r for r in log.records if r.op == "native_dropout" and r.module.startswith("layers.0")]
    assert {r.dtype for r in masks} == {"torch.bool"} and len(masks) == 3
    qkv = [r for r in core if r.op in ("baddbmm", "bmm") and r.shape != (b * a, s, s)]  # Q, Kᵀ, V
    assert sorted(r.shape for r in qkv) == sorted([(b * a, s, h // a), (b * a, h // a, s), (b * a, s, h // a)])
    assert len({r.storage_key for r in qkv}) == 1 and qkv[0].storage_nbytes == 3 * s * b * h * 4
    assert [r.op for r in core if r.shape == (b * a, s, s)] == ["_softmax", "native_dropout", "bmm"]


def test_math_and_sdpa_attention_agree():
    cfg = from_name("gpt-tiny", layers=2, dtype="float64", dropout=0.0)
    tokens = random_tokens(cfg)
    outs = []
    for attention in ("math", "sdpa"):
        torch.manual_seed(0)
        outs.append(build_model(from_name("gpt-tiny", layers=2, dtype="float64", dropout=0.0,
                                          attention=attention))(tokens))
    torch.testing.assert_close(outs[0], outs[1], rtol=1e-10, atol=1e-10)


def reference_attention(q, k, v, window=None):
    """Plain causal softmax attention with KV heads repeated: q [s,b,a,d], k/v [s,b,kv,d] -> [s,b,a·d]."""
    s, b, a, d = q.shape
    k = k.repeat_interleave(a // k.shape[2], dim=2)
    v = v.repeat_interleave(a // v.shape[2], dim=2)
    scores = torch.einsum("sbad,tbad->bast", q, k) / math.sqrt(d)
    i = torch.arange(s)
    allowed = i[None, :] <= i[:, None]
    if window is not None:
        allowed &= i[:, None] - i[None, :] < window
    probs = scores.masked_fill(~allowed, float("-inf")).softmax(-1)
    return torch.einsum("bast,tbad->sbad", probs, v).reshape(s, b, a * d)


@pytest.mark.parametrize("window", [None, 5])
def test_llama_core_is_gqa_causal_attention(window):
    cfg = from_name("llama-tiny", dtype="float64", sliding_window=window)
    torch.manual_seed(0)
    core = build_model(cfg).layers[0].attn.core
    s, b, a, kv, d = cfg.seq, cfg.micro_batch, cfg.heads, cfg.kv_heads, cfg.head_dim
    q, k, v = torch.randn(s, b, a, d, dtype=torch.float64), *torch.randn(2, s, b, kv, d, dtype=torch.float64)
    torch.testing.assert_close(core(q, k, v), reference_attention(q, k, v, window), rtol=1e-10, atol=1e-10)


def test_rope_rotates_pairs_and_keeps_norms():
    cos, sin = rope_tables(16, 8, 10000.0)
    x = torch.randn(16, 2, 3, 8)
    y = apply_rope(x, cos, sin)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1))
    torch.testing.assert_close(y[0], x[0])  # position 0: no rotation
    # position p, frequency 0: the pair (x_0, x_4) turns by angle p
    p = 5
    c, s_ = math.cos(p), math.sin(p)
    torch.testing.assert_close(y[p, ..., 0], x[p, ..., 0] * c - x[p, ..., 4] * s_)


def test_model_shapes_tied_head_and_fp32_loss():
    for name in ("gpt-tiny", "llama-tiny"):
        cfg = from_name(name, dtype="bfloat16")
        model = build_model(cfg)
        tokens = random_tokens(cfg)
        logits = model(tokens)
        assert logits.shape == (cfg.seq, cfg.micro_batch, cfg.vocab) and logits.dtype == torch.bfloat16
        assert lm_loss(logits, tokens).dtype == torch.float32
        assert (model.head.weight is model.embed.tok.weight) == cfg.tie_embeddings
        assert all(p.dtype == torch.bfloat16 for p in model.parameters())


def test_paper_layer_builds_under_fake_mode_without_memory():
    cfg = from_name("gpt3-175b", layers=1)
    with FakeTensorMode():
        model = build_model(cfg)
        logits = model(random_tokens(cfg))
    assert all(isinstance(p, FakeTensor) for p in model.parameters())
    assert logits.shape == (2048, 1, 51200)
    assert sum(p.numel() for p in model.layers[0].parameters()) == 12 * 12288**2 + 13 * 12288
