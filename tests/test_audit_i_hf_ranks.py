"""Per-rank plans priced from a model's own block (remat.auto.ranks.priced, remat plan --hf --schedule's geometry):
on a toy causal LM with transformers' interface (no transformers needed), each stage's parameters, the stage
boundary, the logits and a block's weight-op outputs by hand; what each option retains past a split backward's
input-gradient step; the last stage's stored and transient bytes adding up to the head's floor; the phases; and the
--hf geometry taking --layers, --seq and --micro-batch over the config."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from remat.auto import ranks as auto_ranks
from remat.auto.blocks import find_blocks
from remat.auto.measure import measure_model
from remat.cli import build_parser, plan_run
from remat.models.presets import from_name
from remat.planner.make import make_settings

V, H, S, B = 32, 16, 8, 2


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.up, self.down = nn.Linear(H, 2 * H), nn.Linear(2 * H, H)

    def forward(self, x):
        return x + self.down(torch.relu(self.up(x)))


class Toy(nn.Module):
    """Embedding, two blocks, LayerNorm, head (tied to the embedding or not), cross-entropy loss: a causal LM's
    outline as transformers' models have it (get_input_embeddings, get_output_embeddings, output["loss"])."""

    def __init__(self, tie: bool):
        super().__init__()
        self.embed, self.layers = nn.Embedding(V, H), nn.ModuleList(Block() for _ in range(2))
        self.norm, self.head = nn.LayerNorm(H), nn.Linear(H, V, bias=False)
        if tie:
            self.head.weight = self.embed.weight

    def get_input_embeddings(self):
        return self.embed

    def get_output_embeddings(self):
        return self.head

    def forward(self, input_ids, labels):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        return {"loss": F.cross_entropy(self.head(self.norm(x)).flatten(0, 1), labels.flatten())}


def _built(tie: bool):
    ids = torch.randint(0, V, (B, S))
    return SimpleNamespace(model=Toy(tie), kwargs={"input_ids": ids, "labels": ids}, mode=contextlib.nullcontext(),
                           seq=S, micro_batch=B, config=SimpleNamespace(hidden_size=H, vocab_size=V))


@pytest.fixture(scope="module")
def st():
    cfg = from_name("llama-tiny")
    return make_settings(cfg, "a100-80gb", sp=False)


@pytest.mark.parametrize("tie", [False, True])
def test_each_stage_holds_its_own_parameters_and_the_boundary_and_logits_by_hand(st, tie):
    # a block: up 16·32 + 32, down 32·16 + 16 = 1072; stage 0 the embedding v·h = 512; the last stage the LayerNorm
    # (2h = 32) and the head v·h = 512 — its own copy of a tied weight as well. Boundary s·b·h·4 = 1024 B, logits
    # s·b·v·4 = 2048 B; a block's weight-op outputs: up's s·b·2h·4 = 2048 and down's s·b·h·4 = 1024
    rc, _ = auto_ranks.priced(_built(tie), st, st.gpu)
    assert (rc.layer_params, rc.first_params, rc.last_params) == (1072, 512, 32 + 512)
    assert (rc.boundary, rc.logits, rc.weight_grads) == (1024, 2048, 3072)
    assert rc.first == (S * B * 8, 0)          # the embedding saves its int64 token ids


def test_only_recomputing_options_retain_their_dropped_bytes_and_the_last_stage_adds_up_to_the_floor(st):
    # retained (held from a split backward's input-gradient step to its weight step): what selective and full
    # recompute beyond none's stored bytes; none nothing, offload nothing (its copies are on the host).
    # The last stage: what its norm and head store per micro-batch plus its backward transient is the head's floor
    built = _built(False)
    rc, phases = auto_ranks.priced(built, st, st.gpu)
    opt = {o["policy"]: o for o in rc.options}
    none = opt["none"]["stored"]
    assert opt["none"]["retained"] == opt["offload"]["retained"] == 0 and opt["offload"]["stored"] < none
    assert opt["full"]["retained"] == none - opt["full"]["stored"] > 0
    assert opt["selective"]["retained"] == max(0, none - opt["selective"]["stored"])
    model = built.model
    floor = measure_model(model, (), built.kwargs, find_blocks(model), st.gpu, None, st.policies).floor_bytes
    assert floor > rc.last[0] > 0 and rc.last[0] + rc.last[1] == floor
    # phases: the block's forward and half its backward under none, which add up to none's seconds
    assert phases[0] + 2 * phases[1] == pytest.approx(opt["none"]["time"], rel=1e-9)


def _args(*flags):
    return build_parser().parse_args(["plan", "--model", "cfg.json", "--hf", "--pp", "2", "--schedule", "1F1B",
                                      *flags])


def test_the_hf_geometry_takes_the_flags_over_the_config_and_the_block_is_built_at_them(monkeypatch):
    config = SimpleNamespace(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=4,
                             intermediate_size=176, vocab_size=128, max_position_embeddings=64, torch_dtype="float32")
    monkeypatch.setattr(plan_run, "config_of", lambda model: config)
    plain = plan_run._hf_geometry(_args())
    assert (plain.layers, plain.seq, plain.micro_batch, plain.pp) == (4, 64, 1, 2)     # the config's, b = 1
    args = _args("--layers", "8", "--seq", "32", "--micro-batch", "2", "--global-batch", "8")
    cfg = plan_run._hf_geometry(args)
    assert (cfg.layers, cfg.seq, cfg.micro_batch, cfg.global_batch) == (8, 32, 2, 8)
    built = []

    def build(model, device, **kw):
        built.append(kw)
        raise LookupError("stop here")

    monkeypatch.setattr(plan_run, "build", build)
    with pytest.raises(LookupError):
        plan_run._schedule_text(args, cfg, {}, hf=True)
    assert built == [{"layers": 2, "seq": 32, "micro_batch": 2}]   # the block measured at the plan's s and b
