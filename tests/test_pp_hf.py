"""Per-rank plans for a transformers model (``remat plan --hf --pp P --schedule NAME``, remat.auto.ranks): its
LlamaDecoderLayer measured by remat.auto against remat's own Llama layer for the same config.json (a second,
independent measurement), the parameters of each stage by hand, and the flags the transformers path refuses."""

from __future__ import annotations

import json

import pytest

from remat.cli import main

pytest.importorskip("transformers")

SMALL = {"model_type": "llama", "hidden_size": 128, "intermediate_size": 352, "num_attention_heads": 4,
         "num_key_value_heads": 2, "num_hidden_layers": 4, "vocab_size": 512, "max_position_embeddings": 256,
         "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "torch_dtype": "float32", "tie_word_embeddings": False}


def _plan(capsys, path, *args):
    code = main(["plan", "--model", str(path), "--pp", "2", "--seq", "256", "--global-batch", "4", "--reserve", "0",
                 "--format", "json", *args])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out)


@pytest.fixture(scope="module")
def config(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf") / "config.json"
    path.write_text(json.dumps(SMALL))
    return path


def test_the_transformers_layer_and_remats_own_plan_each_rank_alike(capsys, config):
    own, hf = (_plan(capsys, config, "--schedule", "1F1B", "--memory", "40MiB", *flag) for flag in ((), ("--hf",)))
    assert [r["policies"] for r in hf["ranks"]] == [r["policies"] for r in own["ranks"]]
    for a, b in zip(own["ranks"], hf["ranks"]):     # two implementations of the layer, the head and the loss
        assert b["peak_bytes"] == pytest.approx(a["peak_bytes"], rel=0.05)
    # model state by hand, float32 (4 B weights, 4 B gradients, 8 B Adam moments per parameter), plus one receive
    # buffer s·b·h·4 per micro-batch (N = 4): the output gradient on rank 0, the input on rank 1. A layer: q and o
    # 128·128, k and v 128·64, gate, up and down 128·352, two norms 128; rank 0 adds the embedding 512·128, rank 1
    # the final norm 128 and the head 512·128. remat's own layer keeps its RoPE tables besides (2 × 256·32·4 B).
    layer, buffers = 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 352 + 2 * 128, 4 * 256 * 128 * 4
    assert hf["ranks"][0]["fixed_bytes"] == 16 * (2 * layer + 512 * 128) + buffers
    assert hf["ranks"][1]["fixed_bytes"] == 16 * (2 * layer + 128 + 512 * 128) + buffers
    assert own["ranks"][0]["fixed_bytes"] - hf["ranks"][0]["fixed_bytes"] == 2 * 2 * 256 * 32 * 4


def test_flags_the_transformers_path_cannot_honour_are_refused_by_name(capsys, config):
    code = main(["plan", "--model", str(config), "--hf", "--pp", "2", "--schedule", "1F1B", "--tp", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "--tp" in err and len(err.strip().splitlines()) == 1


def test_every_format_of_a_transformers_models_per_rank_plan_is_written(capsys, config, tmp_path):
    # the sac module's uniform plan is priced from the same measured block (it once re-planned remat's own layer)
    code = main(["plan", "--model", str(config), "--hf", "--pp", "2", "--seq", "256", "--global-batch", "4",
                 "--reserve", "0", "--schedule", "1F1B", "--memory", "40MiB", "--format", "all",
                 "--out", str(tmp_path)])
    out = capsys.readouterr()
    assert code == 0 and not out.err, out.err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["plan.md", "plan.json", "hf.json", "nemo.yaml", "torchtitan.toml", "sac.py"])
    assert "POLICIES" in (tmp_path / "sac.py").read_text()
