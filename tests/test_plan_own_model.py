"""`remat plan` for one's own model: the s and b used on the first line, GPU presets with datasheet numbers,
--zero without --dp refused, what would make an infeasible plan fit, --attention refused for Llama-style layers.

Expected values are written out (MiB reported by nvidia-smi, datasheet TFLOP/s, parameter counts by hand)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import run_cli as run

from remat.errors import UsageError
from remat.models.presets import from_name
from remat.timemodel.gpus import GPUS
from remat.units import GiB, MiB, format_bytes

ROOT = Path(__file__).resolve().parents[1]
MISTRAL_7B = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
              "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32768, "hidden_act": "silu",
              "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1e6, "sliding_window": None,
              "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def config(tmp_path, name="mymistral", **changes) -> str:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**MISTRAL_7B, **changes}))
    return str(folder / "config.json")


def tiny(tmp_path) -> str:
    return config(tmp_path, hidden_size=256, intermediate_size=512, num_attention_heads=8, num_key_value_heads=2,
                  num_hidden_layers=2, vocab_size=1000, max_position_embeddings=4096)


# the default regime's phrase for 16-bit parameters (remat.planner.regime: 2 + 4 + 4 + 4 + 4 bytes)
MIXED_BF16 = "; regime mixed: 2 B weights + 4 B gradients (held all step) + 12 B optimizer = 18 B per parameter"


# --- 1. the s and b used, on the first line --------------------------------------------------------------------

@pytest.mark.slow
def test_first_line_states_the_context_length_used_as_s(capsys, tmp_path):
    path = tiny(tmp_path)
    code, out, _ = run(capsys, "plan", "--model", path, "--memory", "80GiB", "--no-baselines")
    assert code == 0
    assert out.splitlines()[0] == (
        "# Recompute plan: mymistral on NVIDIA A100 SXM4 80GB (a100-80gb), s = 4096 (config.json "
        "max_position_embeddings, the context length; set --seq to your training length), b = 1 (default; set "
        "--micro-batch)" + MIXED_BF16)
    code, out, _ = run(capsys, "plan", "--model", path, "--memory", "80GiB", "--no-baselines", "--format", "json",
                       "--seq", "512", "--micro-batch", "2", "--gpu", "rtx4090-24gb")
    doc = json.loads(out)
    assert code == 0 and next(iter(doc)) == "title"
    assert doc["title"] == ("Recompute plan: mymistral on NVIDIA GeForce RTX 4090 24GB (rtx4090-24gb), "
                            "s = 512 (--seq), b = 2 (--micro-batch)" + MIXED_BF16)
    assert (doc["settings"]["s"], doc["settings"]["b"]) == (512, 2)


@pytest.mark.slow
def test_a_pipelined_config_plans_the_micro_batches_real_1f1b_holds(capsys, tmp_path):
    """--pp 4 on a config.json without --global-batch: N = 4·p = 16 micro-batches per step (stated), so 1F1B's
    first stage holds min(p, N) = 4 in flight on each of its layers — one micro-batch per step would plan for one
    and run out of memory in real training. The same plan as --global-batch 64 at --dp 4 (64 / (1 · 4) = 16)."""
    path = config(tmp_path, num_hidden_layers=8, max_position_embeddings=2048)
    common = ("plan", "--model", path, "--memory", "80GiB", "--pp", "4", "--dp", "4", "--no-baselines",
              "--format", "json")
    code, out, _ = run(capsys, *common)
    doc = json.loads(out)
    assert code == 0 and doc["settings"]["micro_batches"] == 16 and doc["settings"]["in_flight"] == [4, 4]
    assert doc["title"].endswith(", N = 16 micro-batches per step (default 4·p; set --global-batch), 4 in flight "
                                 "on the first stage" + MIXED_BF16)
    per_mb = doc["settings"]["bytes_per_micro_batch"]
    assert {layer["kind"] for layer in doc["layers"]} == {"4 micro-batches in flight"}
    assert doc["memory"]["stored activations (layers)"] == sum(4 * per_mb[layer["policy"]] for layer in doc["layers"])
    code, given, _ = run(capsys, *common, "--global-batch", "64")
    given = json.loads(given)
    assert code == 0 and given["title"].endswith("N = 16 micro-batches per step (--global-batch), 4 in flight on "
                                                 "the first stage" + MIXED_BF16)
    assert given["predicted"] == doc["predicted"] and given["layers"] == doc["layers"]


def test_preset_title_and_help_name_the_default_s(capsys):
    code, out, _ = run(capsys, "plan", "--model", "gpt-22b", "--memory", "80GiB", "--no-baselines")
    assert code == 0 and out.splitlines()[0] == ("# Recompute plan: gpt-22b on NVIDIA A100 SXM4 80GB (a100-80gb), "
                                                 "s = 2048 (the preset's), b = 4 (the preset's)" + MIXED_BF16)
    code, out, _ = run(capsys, "plan", "--help")
    seq_help = " ".join(out.split("\n  --seq SEQ", 1)[1].split("\n  --micro-batch", 1)[0].split())
    assert code == 0 and "max_position_embeddings" in seq_help and "32768 for Mistral-7B" in seq_help


# --- 2. GPU presets ------------------------------------------------------------------------------------------

# preset: (memory.total in MiB as nvidia-smi reports it, dense BF16 TFLOP/s, memory GB/s, PCIe gen)
DATASHEET = {
    "a100-40gb": (40960, 312, 1555, 4), "a100-80gb": (81920, 312, 2039, 4),
    "h100-pcie-80gb": (81559, 756, 2000, 5), "h100-80gb": (81559, 989, 3350, 5),
    "h200-141gb": (143771, 989, 4800, 5), "rtx4090-24gb": (24564, 165.2, 1008, 4),
    "rtx-a6000-48gb": (49140, 154.8, 768, 4), "l40s-48gb": (46068, 362.05, 864, 4),
}


def test_gpu_presets_carry_the_datasheet_numbers():
    assert set(GPUS) == set(DATASHEET)
    for name, (mib, tflops, gb_s, gen) in DATASHEET.items():
        g = GPUS[name]
        assert g.memory_bytes == mib * 2**20 and g.peak_flops == pytest.approx(tflops * 1e12, rel=1e-12)
        assert g.memory_bandwidth == pytest.approx(gb_s * 1e9) and g.link_bytes_per_s == 0.8 * 2**(gen - 4) * 32e9
        assert g.full_name.startswith("NVIDIA ") and re.search(r"Datasheet|whitepaper", g.source)
        assert "dense" in g.source and "sparsity" in g.source
    assert GPUS["a100-80gb"].memory_bytes == 80 * GiB and GPUS["rtx4090-24gb"].memory_bytes == 24 * GiB - 12 * MiB


def test_config_schema_lists_the_same_gpu_presets():
    schema = yaml.safe_load((ROOT / "workflow/schemas/config.schema.yaml").read_text())
    assert schema["$defs"]["gpu"]["enum"] == list(GPUS)


def test_default_budget_is_the_cards_reported_memory(capsys):
    code, out, _ = run(capsys, "plan", "--model", "gpt-tiny", "--gpu", "l40s-48gb", "--format", "json",
                       "--no-baselines")
    assert code == 0 and json.loads(out)["budget_bytes"] == 46068 * 2**20


# --- 3. --zero without --dp ----------------------------------------------------------------------------------

def test_zero_without_data_parallel_is_refused(capsys):
    code, out, err = run(capsys, "plan", "--model", "gpt3-175b", "--memory", "80GiB", "--zero", "3",
                         "--no-baselines")
    assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1
    assert err.startswith("remat plan: error: --zero: ") and "--dp" in err
    code, _, _ = run(capsys, "plan", "--model", "gpt3-175b", "--memory", "80GiB", "--zero", "3", "--dp", "2",
                     "--no-baselines")
    assert code == 0


# --- 4. an infeasible answer says what would fit ----------------------------------------------------------------

def _bytes_in(err: str, label: str) -> int:
    return int(re.search(label + r" [0-9.]+ GiB \(([0-9]+) bytes\)", err).group(1))


def zero3_saving(params: int, n: int) -> int:
    """Bytes ZeRO-3 over n ranks saves: 2 + 4 + 12 bytes per parameter -> each divided by n (rounded up)."""
    return 18 * params - sum(-(-params * k // n) for k in (2, 4, 12))


def test_infeasible_gpt_names_dp_zero3_with_its_budget(capsys):
    code, _, err = run(capsys, "plan", "--model", "gpt3-175b", "--memory", "10GiB", "--no-baselines")
    assert code == 3 and len(err.strip().splitlines()) == 1
    assert "s = 2048 (the preset's), b = 1 (the preset's)" in err
    h, v, s, t = 12288, 51200, 2048, 8                    # first stage of p = 8: 12 layers, embeddings
    params = 12 * ((12 * h * h + 7 * h) // t + 6 * h) + v * h // t + s * h
    # dp = 8 also makes N = 64/8 = p: every forward runs before the first backward, so chunk 0 holds p = 8
    # micro-batches instead of 2p − 1 = 15 — and with them 7 fewer embedding-dropout masks (sbh bytes each:
    # without SP the mask is replicated on the TP ranks, Korthikanti §4.3)
    fewer_masks = (15 - 8) * s * h
    need = _bytes_in(err, "the smallest budget that works is") - zero3_saving(params, 8) - fewer_masks
    assert f"Fits 10.00 GiB with --dp 8 --zero 3 ({format_bytes(need)})" in err
    assert need <= 10 * GiB < _bytes_in(err, "the smallest budget that works is") - zero3_saving(params, 4)
    assert "Not enough even with --tp 32 (" in err and "--seq 128 (" in err   # model state binds


@pytest.mark.slow
def test_infeasible_gpt_suggestions_fit_when_run_and_the_next_step_does_not(capsys):
    base = ("plan", "--model", "gpt-22b", "--memory", "50GiB", "--no-baselines")   # t = 8, s = 2048, b = 4
    code, _, err = run(capsys, *base)
    assert code == 3
    fits = err.split("Fits 50.00 GiB with ", 1)[1]
    seq, tp = (int(re.search(flag + r" (\d+) \(", fits).group(1)) for flag in ("--seq", "--tp"))
    assert (seq, tp) == (1024, 16) and "--micro-batch 1 (" in fits and "Not enough" not in err
    for flags, expect in ((["--seq", "1024"], 0), (["--tp", "16"], 0), (["--micro-batch", "1"], 0),
                          (["--dp", "2", "--zero", "3"], 0)):
        code, _, err = run(capsys, *base, *flags)
        assert code == expect, (flags, err)


@pytest.mark.slow
def test_infeasible_mistral_7b_on_24gib_states_s_and_suggests_the_least_dp(capsys, tmp_path):
    code, _, err = run(capsys, "plan", "--model", config(tmp_path), "--memory", "24GiB", "--no-baselines")
    assert code == 3 and len(err.strip().splitlines()) == 1
    assert "s = 32768 (config.json max_position_embeddings" in err and "b = 1 (default" in err
    h, kv, f, L, v = 4096, 1024, 14336, 32, 32768        # untied head; RMSNorm weights, no biases
    params = 2 * v * h + L * (h * (h + 2 * kv) + h * h + 3 * h * f + 2 * h) + h
    assert params == 7_248_023_552                       # Mistral-7B-v0.3 (vocabulary 32768)
    least = _bytes_in(err, "the smallest budget that works is")
    dp = next(d for d in (2 ** k for k in range(1, 11)) if least - zero3_saving(params, d) <= 24 * GiB)
    assert f"Fits 24.00 GiB with --dp {dp} --zero 3 ({format_bytes(least - zero3_saving(params, dp))})" in err
    assert "--seq 128 (" in err.partition("Not enough even with ")[2]      # the model state alone is over 24 GiB
    # tensor parallelism of the Llama layer: a t that splits the 8 key/value groups (Megatron-LM's rule)
    t = int(re.search(r"--tp (\d+) \(", err).group(1))
    assert 8 % t == 0 and 32 % t == 0


# --- 5. --attention for Llama-style layers ------------------------------------------------------------------------

def test_attention_math_is_refused_for_llama_style_layers(capsys, tmp_path):
    code, out, err = run(capsys, "measure", "--model", "llama-tiny", "--policy", "none", "--device", "fake",
                         "--attention", "math", "--no-timing")
    assert (code, out) == (2, "") and len(err.strip().splitlines()) == 1
    assert err.startswith("remat measure: error: attention: ") and "--attention" in err
    for model in ("llama3-8b", tiny(tmp_path)):
        with pytest.raises(UsageError, match="attention"):
            from_name(model, attention="math")
        assert from_name(model, attention="sdpa").attention == "sdpa"
    assert from_name("gpt-tiny", attention="math").attention == "math"
