"""Measurement: saved bytes (two independent ways), peak bytes, FLOPs, timing — CPU, fake, CUDA."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from remat.measure.peak import CUDA_METHOD, TRACKER_METHOD, PeakMemory
from remat.measure.saved import SavedTensorLog
from remat.measure.step import measure
from remat.measure.timing import time_step
from remat.models import build_model, from_name, lm_loss, random_tokens
from remat.policies import apply_plan

CUDA = pytest.mark.gpu


def layer_fwd_flops(s, b, h):
    """Korthikanti Appendix A: 24bsh² + 4bs²h per layer forward (GEMMs only)."""
    return 24 * b * s * h * h + 4 * b * s * s * h


@pytest.fixture(scope="module")
def gpt2_s256():
    """gpt2-124m shapes (h 768, a 12, v 50257) at s = 256 on the CPU, one layer, three policies."""
    cfg = from_name("gpt2-124m", seq=256, layers=1)
    return cfg, {p: measure(cfg, p, "cpu", timing=False) for p in ("none", "selective", "full")}


@pytest.mark.slow
def test_gpt2_activation_bytes_none_selective_full(gpt2_s256):
    cfg, rows = gpt2_s256
    assert rows["none"]["activation_bytes"] > rows["selective"]["activation_bytes"] > rows["full"]["activation_bytes"]
    s, b, h, a, e = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads, 4
    # per layer: selective drops exactly the core-attention internals, as²b(2e + 1); full keeps the input only
    none, sel, full = (rows[p]["activation_bytes_per_layer"] for p in ("none", "selective", "full"))
    assert [n - m for n, m in zip(none, sel)] == [a * s * s * b * (2 * e + 1)]
    assert full == [s * b * h * e]


@pytest.mark.slow
def test_gpt2_recompute_flops(gpt2_s256):
    cfg, rows = gpt2_s256
    s, b, h = cfg.seq, cfg.micro_batch, cfg.hidden
    for row in rows.values():
        assert row["flops_forward_layers"] == cfg.layers * layer_fwd_flops(s, b, h)
        assert row["flops_backward"] == 2 * row["flops_forward"]  # recompute excluded: same for every policy
    assert rows["none"]["flops_recompute"] == 0
    assert rows["full"]["flops_recompute"] == cfg.layers * layer_fwd_flops(s, b, h)  # every layer's forward again
    share = 4 * b * s * s * h / layer_fwd_flops(s, b, h)  # core attention: QKᵀ and ·V
    assert rows["selective"]["flops_recompute"] / rows["selective"]["flops_forward_layers"] == pytest.approx(
        share, rel=1e-12)


@pytest.mark.slow
def test_hooks_and_tracker_agree_within_one_percent(gpt2_s256):
    _, rows = gpt2_s256
    for row in rows.values():
        hooks, tracker = row["activation_bytes"], row["activation_bytes_tracker"]
        assert abs(hooks - tracker) <= 0.01 * hooks
        assert row["peak_method"] == TRACKER_METHOD and row["peak_bytes"] > hooks


def test_fake_paper_layer_bytes_and_flops():
    """One gpt3-175b layer (s 2048, h 12288, a 96, 16-bit) under FakeTensorMode against Eq. 1 and Table 2."""
    cfg = from_name("gpt3-175b", layers=1)
    s, b, h, a, v = cfg.seq, cfg.micro_batch, cfg.hidden, cfg.heads, cfg.vocab
    ln_stats = 4 * s * b * 2  # LayerNorm mean and rstd (bf16 on CPU), not counted by the paper
    rows = {p: measure(cfg, p, "fake") for p in ("none", "selective", "full")}
    assert rows["none"]["activation_bytes_per_layer"] == [s * b * h * 34 + 5 * a * s * s * b + ln_stats]
    assert rows["selective"]["activation_bytes_per_layer"] == [34 * s * b * h + ln_stats]
    assert rows["full"]["activation_bytes_per_layer"] == [2 * s * b * h]
    for row in rows.values():
        assert row["flops_forward"] == layer_fwd_flops(s, b, h) + 2 * b * s * h * v
        assert row["step_time_s"] is None and row["device"] == "fake"
    assert rows["full"]["flops_recompute"] == layer_fwd_flops(s, b, h)
    assert rows["selective"]["flops_recompute"] == 4 * b * s * s * h


def test_peak_follows_the_policy():
    cfg = from_name("gpt-tiny", layers=4, seq=64, micro_batch=4)
    peak = {p: measure(cfg, p, "fake")["peak_bytes"] for p in ("none", "selective", "full")}
    assert peak["none"] > peak["selective"] > peak["full"]


def test_instrumentation_does_not_change_the_peak():
    cfg = from_name("gpt-tiny", layers=3, seq=64)
    for plan in ("none", "full"):
        with FakeTensorMode():
            torch.manual_seed(0)
            model = build_model(cfg)
            apply_plan(model, plan)
            tokens, targets = random_tokens(cfg), random_tokens(cfg)
            with PeakMemory("cpu", model, tokens, targets) as plain:
                lm_loss(model(tokens), targets).backward()
        assert measure(cfg, plan, "fake")["peak_bytes"] == plain.peak_bytes


@pytest.mark.parametrize("plan", ["selective", "offload,full"])
def test_following_modules_labels_bytes_without_changing_the_totals(plan):
    # the module tracker (off by default: it only labels) as the second method: same peak and live bytes
    cfg = from_name("gpt-tiny", layers=2, seq=16)
    seen = []
    for follow in (True, False):
        torch.manual_seed(0)
        model = build_model(cfg, "cpu")
        apply_plan(model, plan)
        tokens, targets = random_tokens(cfg, "cpu"), random_tokens(cfg, "cpu")
        lm_loss(model(tokens), targets).backward()                       # gradients exist before the block
        with PeakMemory("cpu", model, tokens, targets, follow_modules=follow) as mem:
            before = mem.current_bytes()
            loss = lm_loss(model(tokens), targets)
            during = mem.current_bytes()
            loss.backward()
        seen.append((before, during, mem.peak_bytes))
    assert seen[0] == seen[1] and seen[0][1] > seen[0][0]


def test_keep_grads_adds_exactly_the_gradients_to_the_base():
    cfg = from_name("gpt-tiny", layers=2)
    params = sum(p.numel() for p in build_model(cfg).parameters())
    fresh, kept = (measure(cfg, "full", "cpu", timing=False, keep_grads=k) for k in (False, True))
    assert kept["base_bytes"] - fresh["base_bytes"] == params * 4       # float32 gradients, allocated first
    assert kept["activation_bytes"] == fresh["activation_bytes"]
    for row in (fresh, kept):
        assert row["peak_activation_bytes"] == row["peak_bytes"] - row["base_bytes"]


def test_peak_tracker_sees_a_known_allocation():
    with PeakMemory("cpu") as memory:
        x = torch.empty(1000, dtype=torch.float64)
        del x
        y = torch.empty(10, dtype=torch.float32)
        assert memory.current_bytes() == 40
        del y
    assert memory.peak_bytes == 8000 and memory.method == TRACKER_METHOD


def test_offload_reports_simulated_host_copy():
    row = measure(from_name("gpt-tiny"), "offload", "cpu", timing=False)
    assert row["offload_note"] == "simulated: host memcpy" and row["offloaded_bytes"] > 0
    assert row["activation_bytes_per_layer"] == [0, 0]


def test_timing_takes_median_and_iqr_of_five():
    row = measure(from_name("gpt-tiny", layers=1), "full", "cpu", warmup=1, repeats=5)
    samples = row["step_time_samples"]
    assert len(samples) == 5 and min(samples) <= row["step_time_s"] <= max(samples)
    assert 0 <= row["step_time_iqr_s"] <= max(samples) - min(samples)
    assert row["timing_method"] == "time.perf_counter"
    with pytest.raises(ValueError):
        time_step(lambda: None, repeats=4)


@pytest.mark.parametrize("fake", [False, True])
def test_saved_log_labels_survive_other_modes(fake):
    """Op labels are the same with FlopCounterMode, MemTracker and FakeTensorMode stacked around the log."""
    from torch.utils.flop_counter import FlopCounterMode
    cfg = from_name("gpt-tiny", layers=1)

    def labels(instrumented: bool):
        with FakeTensorMode() if fake and instrumented else contextlib.nullcontext():
            torch.manual_seed(0)
            model = build_model(cfg)
            apply_plan(model, "selective")
            tokens = random_tokens(cfg)
            with PeakMemory("cpu", model, tokens) if instrumented else contextlib.nullcontext():
                with SavedTensorLog(model) as log, \
                        FlopCounterMode(display=False) if instrumented else contextlib.nullcontext():
                    lm_loss(model(tokens), tokens)
        return [(r.module, r.op, r.shape, r.dtype, r.storage_nbytes, r.duplicate) for r in log.records]
    assert labels(True) == labels(False)


def test_paper_terms_label_the_gpt_layer():
    cfg = from_name("gpt-tiny", layers=1, dtype="bfloat16")
    model = build_model(cfg)
    with SavedTensorLog(model) as log:
        model(random_tokens(cfg)).sum()
    items = [i for i in log.items() if i["module"].startswith("layers.0.")]
    terms = {i["paper_term"] for i in items} - {None}
    assert len(terms) == 14  # every §4.1 item of the layer
    assert all(i["paper_term"] is None for i in items if i["shape"][-1] == 1)  # LayerNorm statistics


@CUDA
def test_cuda_measure_uses_allocator_statistics():
    rows = {p: measure(from_name("gpt-tiny", layers=4, seq=64), p, "cuda") for p in ("none", "full")}
    for row in rows.values():
        assert row["peak_method"] == CUDA_METHOD and row["step_time_s"] > 0
        assert row["timing_method"] == "torch.cuda.Event"
        assert abs(row["activation_bytes"] - row["activation_bytes_tracker"]) <= 0.02 * row["activation_bytes"]
    assert rows["none"]["activation_bytes"] > rows["full"]["activation_bytes"]


def test_fused_attention_flops_count_on_cpu_and_fake():
    """F.scaled_dot_product_attention runs the CPU flash kernel under FakeTensorMode, which torch's FLOP
    registry misses: 4bs²h per layer forward (QKᵀ and ·V over the full s × s) must be counted, and selective
    recompute re-runs exactly that. llama-tiny: s = 32, b = 2, h = 64, L = 2."""
    row = measure(from_name("llama-tiny"), "selective", "fake", timing=False)
    attention = 4 * 2 * 32**2 * 64
    assert row["flops_recompute"] == 2 * attention == 1_048_576
    assert row["flops_forward_layers"] == 12_845_056 == 11_796_480 + 2 * attention


def test_hf_config_measure_counts_attention_flops(tmp_path):
    """A Qwen2 config.json measured under fake tensors: selective recomputes 4bs²h per layer (the planner's
    number for the same layer), not 0."""
    import json
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "qwen2", "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
                                "vocab_size": 96, "max_position_embeddings": 64, "tie_word_embeddings": True}))
    cfg = from_name(str(path), seq=16, micro_batch=3)
    row = measure(cfg, "selective", "fake", timing=False)
    assert row["flops_recompute"] == 2 * 4 * 3 * 16**2 * 64


def test_drop_cheap_counts_its_checkpoint_cache():
    """drop-cheap keeps matmul outputs in the selective-checkpoint cache, invisible to saved-tensor hooks:
    activation_bytes adds the cache and agrees with the tracker, and saves less than none."""
    cfg = from_name("gpt-tiny")
    rows = {p: measure(cfg, p, "cpu", timing=False) for p in ("none", "drop-cheap")}
    cheap = rows["drop-cheap"]
    assert cheap["activation_bytes_sac_cache"] > 0 and rows["none"]["activation_bytes_sac_cache"] == 0
    assert abs(cheap["activation_bytes"] - cheap["activation_bytes_tracker"]) <= 0.01 * cheap["activation_bytes"]
    assert cheap["activation_bytes"] < rows["none"]["activation_bytes"]
