"""remat.auto.diagnose (auto.explain): one step as it is, per block bytes kept vs plain, and each known trap named.

Toy model: an nn.ModuleList of pre-norm blocks (attention + MLP children, a ``mask`` keyword); HuggingFace: a tiny
LlamaForCausalLM (skipped without transformers). Each trap is built on purpose and must be named; the correct
setups must name none, and explain's per-block bytes must equal SavedTensorLog's on an identical step.
"""

from __future__ import annotations

import functools
import json
import warnings
from types import SimpleNamespace

import pytest
import torch
from torch import nn
from torch.utils.checkpoint import (CheckpointPolicy, checkpoint, checkpoint_sequential,
                                    create_selective_checkpoint_contexts)

from remat import auto
from remat.auto.diagnose import (CALLER_KEEPS, LAST_SEGMENT, NO_SAVING, PER_CHILD, REENTRANT_NO_GRAD, SIDE_EFFECTS,
                                 explain)
from remat.errors import UsageError
from remat.measure.saved import SavedTensorLog

H, V, L, B, S = 32, 50, 4, 2, 16


class Attn(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv, self.o = nn.Linear(H, 3 * H), nn.Linear(H, H)

    def forward(self, x, mask=None):                          # x: [b, s, h]
        q, k, v = self.qkv(x).chunk(3, -1)
        scores = q @ k.transpose(-1, -2) / H ** 0.5            # [b, s, s]
        return self.o(torch.softmax(scores if mask is None else scores + mask, -1) @ v)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(H, 4 * H), nn.Linear(4 * H, H)

    def forward(self, x):
        return self.down(nn.functional.gelu(self.up(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.n1, self.attn, self.n2, self.mlp = nn.LayerNorm(H), Attn(), nn.LayerNorm(H), MLP()

    def forward(self, x, mask=None):
        x = x + self.attn(self.n1(x), mask=mask)
        return x + self.mlp(self.n2(x))


class Toy(nn.Module):
    """``how``: none (plain calls), manual (checkpoint(block) in the loop), reentrant, sequential:k."""

    def __init__(self, how: str = "none"):
        super().__init__()
        self.how = how
        self.emb = nn.Embedding(V, H)
        self.layers = nn.ModuleList(Block() for _ in range(L))
        self.head = nn.Linear(H, V)

    def forward(self, ids, mask=None):
        x = self.emb(ids)
        if self.how.startswith("sequential"):
            x = checkpoint_sequential(self.layers, int(self.how.split(":")[1]), x, use_reentrant=False)
        else:
            for block in self.layers:
                if self.how == "manual":
                    x = checkpoint(block, x, mask=mask, use_reentrant=False)
                elif self.how == "reentrant":
                    x = checkpoint(block, x, use_reentrant=True)
                else:
                    x = block(x, mask=mask)
        return self.head(x)


def toy(how="none") -> Toy:
    torch.manual_seed(0)
    return Toy(how)


def ids() -> torch.Tensor:
    return torch.randint(0, V, (B, S), generator=torch.Generator().manual_seed(1))


def mask() -> torch.Tensor:
    return torch.triu(torch.full((S, S), float("-inf")), 1)


def per_block(log: SavedTensorLog, names) -> list[int]:
    by = log.bytes_by_module()
    return [sum(v for k, v in by.items() if k == n or k.startswith(n + ".")) for n in names]


def saved_log_step(model, *args, **kwargs) -> SavedTensorLog:
    with SavedTensorLog(model) as log:
        out = model(*args, **kwargs)
    out.sum().backward()
    return log


# --- correct setups ------------------------------------------------------------------------------------------

def test_correct_full_setup_no_trap_and_bytes_equal_saved_tensor_log():
    model = toy()
    auto.apply(model, "full")
    e = explain(model, (ids(),), {"mask": mask()})
    assert e.traps == [], [str(t) for t in e.traps]
    names = [r["block"] for r in e.rows]
    assert names == [f"layers.{i}" for i in range(L)]
    twin = toy()
    auto.apply(twin, "full")
    expected = per_block(saved_log_step(twin, ids(), mask=mask()), names)
    assert [r["kept_bytes"] for r in e.rows] == expected
    assert all(r["mechanism"] == "non-reentrant" and r["region"] == "block" for r in e.rows)
    # full recompute (remat's wrapper: early_stop=False) re-runs the whole block forward
    assert all(r["recompute_flops"] == r["forward_flops"] > 0 for r in e.rows)
    # the plain bytes are those of the same model with no checkpointing
    plain = per_block(saved_log_step(toy(), ids(), mask=mask()), names)
    assert [r["plain_bytes"] for r in e.rows] == plain
    assert all(r["kept_bytes"] < 0.1 * r["plain_bytes"] for r in e.rows)
    assert all(r["got_grads"] for r in e.rows)


def test_no_checkpointing_keeps_plain_bytes_and_names_no_trap():
    e = explain(toy(), (ids(),), {"mask": mask()})
    assert e.traps == []
    assert all(r["kept_bytes"] == r["plain_bytes"] and r["mechanism"] == "none" for r in e.rows)
    assert e.totals["recompute_flops"] == 0


def test_selective_keeps_cache_and_recomputes_only_cheap_ops():
    model = toy()
    auto.apply(model, "selective")
    e = explain(model, (ids(),))
    assert e.traps == []
    for r in e.rows:
        assert r["mechanism"] == "selective (SAC)" and r["cache_bytes"] > 0
        assert r["recompute_flops"] == 0 < r["recompute_ops"]       # matmuls served from the cache
        assert r["kept_bytes"] < r["plain_bytes"]


def test_manual_checkpoint_inputs_count_for_the_block_taking_them():
    e = explain(toy("manual"), (ids(),), {"mask": mask()})
    assert e.traps == []
    assert all(r["region"] == "block" and r["kept_bytes"] > 0 for r in e.rows)
    assert e.rows[1]["kept_bytes"] == B * S * H * 4                    # its input; the mask counts once, for block 0


def test_predicted_bytes_from_an_auto_plan():
    model = toy()
    auto.apply(model, "full")
    layer = SimpleNamespace(options=[SimpleNamespace(stored_bytes=0), SimpleNamespace(stored_bytes=1234)])
    result = SimpleNamespace(policies=("full",) * L, block_names=tuple(f"layers.{i}" for i in range(L)),
                             blocks="layers", problem=SimpleNamespace(layers=[layer] * L),
                             plan=SimpleNamespace(choices=(1,) * L))
    e = explain(model, (ids(),), result=result)
    assert [r["predicted_bytes"] for r in e.rows] == [1234] * L and e.totals["predicted_bytes"] == 1234 * L
    text = str(e)
    assert "1.21 KiB" in text and "traps: none seen" in text
    assert json.loads(e.to_json())["rows"][0]["predicted_bytes"] == 1234


def test_a_tensor_plans_predicted_bytes_are_its_kept_sets():
    """A tensor plan applied: each block's predicted bytes are its chosen kept set's (not the plain selective
    policy's), and equal what explain measures the block keeps."""
    model = toy()
    full, none = (auto.plan(model, (ids(),), budget="1GiB", choices=(c,)).plan.peak_bytes for c in ("full", "none"))
    result = auto.plan(model, (ids(),), budget=(full + none) // 2, choices=("none", "selective", "full"),
                       granularity="tensor")
    assert any(k is not None for k in result.kept_sets)
    auto.apply(model, result)
    rows = explain(model, (ids(),), result=result).rows
    chosen = [layer.options[c].stored_bytes for layer, c in zip(result.problem.layers, result.plan.choices)]
    assert [r["predicted_bytes"] for r in rows] == chosen
    assert [r["kept_bytes"] for r in rows][1:] == chosen[1:]


@pytest.mark.parametrize("call, field", [
    (lambda: explain(toy(), (ids().float(),)), "example_args"),             # float ids: the embedding refuses
    (lambda: explain(toy(), (ids(),), [1]), "example_kwargs"),
    (lambda: explain(toy(), (ids(),), result={"apply": {}}), "result"),     # a plan's JSON, not the plan
    (lambda: explain(toy(), (ids(),), loss_fn=lambda o: None), "loss_fn"),
    (lambda: explain("model", (ids(),)), "model")])
def test_bad_input_to_explain_names_the_field(call, field):
    with pytest.raises(UsageError) as exc:
        call()
    assert exc.value.field == field


def test_fake_tensors_give_the_bytes_of_real_ones():
    from torch._subclasses.fake_tensor import FakeTensorMode
    real = explain(toy("manual"), (ids(),))
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = toy("manual")
        fake_ids = torch.randint(0, V, (B, S))
    e = explain(model, (fake_ids,))                                    # the parameters' mode is entered
    assert [r["kept_bytes"] for r in e.rows] == [r["kept_bytes"] for r in real.rows]
    assert [r["plain_bytes"] for r in e.rows] == [r["plain_bytes"] for r in real.rows]
    assert e.device.startswith("fake") and e.traps == []


# --- the traps ----------------------------------------------------------------------------------------------

def test_trap_no_saving_sac_policy_that_saves_everything():
    model = toy()
    save_all = functools.partial(create_selective_checkpoint_contexts,
                                 lambda ctx, op, *a, **k: CheckpointPolicy.MUST_SAVE)
    for block in model.layers:
        block.forward = functools.partial(checkpoint, functools.partial(type(block).forward, block),
                                          use_reentrant=False, context_fn=save_all)
    e = explain(model, (ids(),))
    assert e.codes() == [NO_SAVING]
    assert e.traps[0].blocks == tuple(f"layers.{i}" for i in range(L))
    assert all(r["kept_share"] >= 0.9 and r["recompute_ops"] == 0 for r in e.rows)


def test_trap_last_segment_of_checkpoint_sequential():
    e = explain(toy("sequential:2"), (ids(),))
    assert e.codes() == [LAST_SEGMENT]
    assert e.traps[0].blocks == ("layers.2", "layers.3")
    assert [r["region"] for r in e.rows] == ["segment", "segment", "none", "none"]
    assert e.rows[1]["kept_bytes"] == 0 < e.rows[0]["kept_bytes"]    # the segment's input counts for its first block
    one = explain(toy("sequential:1"), (ids(),))                       # one segment: nothing is checkpointed
    assert one.codes() == [LAST_SEGMENT] and len(one.traps[0].blocks) == L


def test_trap_reentrant_checkpoint_with_frozen_embeddings():
    model = toy("reentrant")
    model.emb.weight.requires_grad_(False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)                   # torch: "None of the inputs have requires_grad"
        e = explain(model, (ids(),))
    assert REENTRANT_NO_GRAD in e.codes() and NO_SAVING not in e.codes()
    assert all(r["got_grads"] is False and r["mechanism"] == "reentrant" for r in e.rows)
    assert all(p.grad is None for p in model.layers.parameters())
    fine = toy("reentrant")                                            # trainable embeddings: the input requires grad
    assert explain(fine, (ids(),)).traps == []


def test_trap_per_child_checkpointing():
    model = toy()
    for block in model.layers:
        for child in (block.attn, block.mlp):
            child.forward = functools.partial(checkpoint, functools.partial(type(child).forward, child),
                                              use_reentrant=False)
    e = explain(model, (ids(),))
    assert e.codes() == [PER_CHILD]
    whole = toy()
    auto.apply(whole, "full")
    per_child = sum(r["kept_bytes"] for r in e.rows)
    assert per_child > 3 * sum(r["kept_bytes"] for r in explain(whole, (ids(),)).rows)


def test_trap_caller_keeps_hook_held_activations():
    model = toy()
    auto.apply(model, "full")
    kept = []
    for block in model.layers:
        block.mlp.up.register_forward_hook(lambda mod, args, out: kept.append(out))
    e = explain(model, (ids(),))
    # the hook holds activations (caller-keeps), and under full it runs again when each block recomputes
    assert e.codes() == [CALLER_KEEPS, SIDE_EFFECTS]
    assert e.traps[-1].blocks == tuple(f"layers.{i}" for i in range(L)) and "layers.0.mlp.up (forward hook)" in \
        e.traps[-1].message
    held = e.totals["excess_by_holder"]
    assert sum(held.values()) >= L * B * S * 4 * H * 4                  # every block's MLP hidden, fp32


# --- HuggingFace ----------------------------------------------------------------------------------------------

def llama(attn="sdpa"):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                      num_key_value_heads=2, num_hidden_layers=2, vocab_size=128,
                                      max_position_embeddings=64, use_cache=False, attn_implementation=attn)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    model.train()
    tokens = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(2))
    return model, {"input_ids": tokens, "labels": tokens}


def hf_checkpointing(model, reentrant=False):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})


@pytest.mark.parametrize("reentrant", [False, True])
def test_hf_gradient_checkpointing_is_correct(reentrant):
    model, kwargs = llama()
    hf_checkpointing(model, reentrant)
    e = explain(model, (), kwargs)
    assert e.traps == [], [str(t) for t in e.traps]
    assert [r["block"] for r in e.rows] == ["model.layers.0", "model.layers.1"]
    assert all(r["region"] == "block" and r["kept_bytes"] < 0.1 * r["plain_bytes"] for r in e.rows)
    assert all(r["recompute_flops"] > 0 and r["got_grads"] for r in e.rows)
    twin, _ = llama()
    hf_checkpointing(twin, reentrant)
    with SavedTensorLog(twin) as log:
        loss = twin(**kwargs).loss
    loss.backward()
    assert [r["kept_bytes"] for r in e.rows] == per_block(log, ["model.layers.0", "model.layers.1"])


def test_hf_trap_checkpointing_on_in_eval_mode():
    model, kwargs = llama()
    hf_checkpointing(model)
    model.eval()                                                       # from_pretrained's default
    e = explain(model, (), kwargs)
    assert e.codes() == [NO_SAVING] and "model.train()" in e.traps[0].fix


def test_hf_trap_output_attentions_kept_by_the_caller():
    model, kwargs = llama("eager")
    hf_checkpointing(model)
    e = explain(model, (), {**kwargs, "output_attentions": True})
    assert e.codes() == [CALLER_KEEPS]
    assert e.totals["excess_by_holder"]["attentions"] == 2 * (2 * 4 * 32 * 32 * 4)   # L × b·a·s²·4 bytes


# --- CLI --------------------------------------------------------------------------------------------------------

def test_cli_explain_json_and_bad_input(capsys, monkeypatch):
    pytest.importorskip("transformers")
    from remat.cli import main
    assert main(["explain", "--model", "llama-tiny", "--checkpointing", "hf", "--device", "cpu", "--seq", "16",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["traps"] == [] and len(out["rows"]) == 2
    assert main(["explain", "--model", "llama-tiny", "--checkpointing", "sometimes", "--seq", "16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--checkpointing" in err[0]
    import remat.auto.hf as hf
    monkeypatch.setattr(hf, "available", lambda: False)
    assert main(["explain", "--model", "llama-tiny"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pip install -e '.[hf]'" in err[0]
