"""The per-op roofline time model (remat.timemodel): the trace's FLOPs, bytes and collectives against hand
counts, the roofline and ring formulas, Megatron's overlap, and the acceptance against the paper's Table 4 and
Figure 8 (values in REFERENCE.md; nothing of the model is fitted to them)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from conftest import run_cli
from remat.formulas import korthikanti
from remat.formulas.op_flops import FUSED_ATTENTION
from remat.models.presets import from_name
from remat.timemodel import Rates, predict
from remat.timemodel.gpus import gpu
from remat.timemodel.paper import figure8_rows, table4_rows
from remat.timemodel.roofline import layer_times, op_seconds, phase_time
from remat.timemodel.trace import Op, trace_layer

A100 = gpu("a100-80gb")
CFG = from_name("gpt-22b")                     # s = 2048, b = 4, h = 6144, a = 64, t = 8
S, B, H, A, T = CFG.seq, CFG.micro_batch, CFG.hidden, CFG.heads, 8


def test_trace_flops_are_appendix_a_per_rank():
    fwd = korthikanti.layer_forward_flops(S, B, H) // T
    for mode in ("none", "selective", "full"):
        trace = trace_layer(CFG, T, False, mode)
        assert trace.totals("forward")["flops"] == fwd
        assert trace.totals("backward")["flops"] == 2 * fwd
        assert trace.totals("recompute")["flops"] == korthikanti.recompute_flops(S, B, H, mode) // T


def test_collective_message_bytes_tp_and_sp():
    """TP: one all-reduce of the [s, b, h] output per block in forward and of the input gradient per block in
    backward; SP: all-gather + reduce-scatter instead, and backward also re-gathers the saved input shard."""
    size = 2 * S * B * H
    kinds = lambda trace, phase: sorted((o.collective, o.comm_bytes) for o in trace.phase(phase) if o.collective)
    tp = trace_layer(CFG, T, False, "none")
    assert kinds(tp, "forward") == kinds(tp, "backward") == [("all_reduce", size)] * 2
    sp = trace_layer(CFG, T, True, "none")
    assert kinds(sp, "forward") == [("all_gather", size)] * 2 + [("reduce_scatter", size)] * 2
    assert kinds(sp, "backward") == [("all_gather", size)] * 4 + [("reduce_scatter", size)] * 2


def test_attention_dropout_bytes_and_fused_softmax():
    """Softmax dropout reads the probabilities and writes its output (2 bytes each) and a 1-byte mask over
    a/t · s² · b elements; with Megatron's FusedScaleMaskSoftmax the masked scores are neither written nor
    read back (fuse_ops=False keeps both passes)."""
    n = A // T * S * S * B
    fused, unfused = trace_layer(CFG, T, False, "none"), trace_layer(CFG, T, False, "none", fuse_ops=False)
    dropout = max((o for o in fused.phase("forward") if o.name == "native_dropout"), key=lambda o: o.bytes)
    assert dropout.bytes == 5 * n
    pair = lambda trace: sum(o.bytes for o in trace.phase("forward") if o.name in ("masked_fill", "_softmax"))
    assert pair(fused) == 2 * n * 2 + S * S            # scores in, probabilities out, the causal mask [s, s]
    assert pair(unfused) - pair(fused) == 2 * 2 * n    # the masked scores' write and read-back


def test_checkpointed_forward_runs_the_same_kernels():
    """A checkpointed forward saves less but runs the baseline's kernels (bytes and FLOPs equal)."""
    none = trace_layer(CFG, T, False, "none").totals("forward")
    for mode in ("selective", "full"):
        assert trace_layer(CFG, T, False, mode).totals("forward") == none


def test_roofline_and_ring_formulas():
    rates = Rates(flops_per_s=100e12, memory_bytes_per_s=1e12, link_bytes_per_s=200e9)
    assert op_seconds(Op("forward", "mm", 10**12, 10**9), rates, 8) == pytest.approx(10e-3)   # FLOP-bound
    assert op_seconds(Op("forward", "add", 0, 3 * 10**9), rates, 8) == pytest.approx(3e-3)    # bandwidth-bound
    reduce = Op("forward", "allreduce_", 0, 0, "all_reduce", 10**9)
    assert op_seconds(reduce, rates, 8) == pytest.approx(2 * 7 / 8 * 1e9 / 200e9)
    gather = Op("forward", "_allgather_base_", 0, 0, "all_gather", 10**9)
    assert op_seconds(gather, rates, 8) == pytest.approx(7 / 8 * 1e9 / 200e9)
    assert op_seconds(reduce, rates, 1) == 0.0
    a100 = Rates.of(A100)
    assert (a100.flops_per_s, a100.memory_bytes_per_s, a100.link_bytes_per_s) == pytest.approx(
        (312e12 * 0.8, 2039e9 * 0.85, 300e9 * 0.7))


def test_backward_all_reduce_hides_behind_the_weight_gradient_gemm():
    """Megatron overlaps the backward all-reduce with the weight-gradient GEMM: exposed only when the link is
    slow enough; forward and recompute collectives are always exposed."""
    trace = trace_layer(CFG, T, False, "full")
    fast = layer_times(trace, Rates.of(A100))
    assert fast.backward.exposed_comm_s == 0 < fast.backward.comm_s
    assert fast.forward.exposed_comm_s == fast.forward.comm_s > 0
    assert fast.recompute.exposed_comm_s == fast.recompute.comm_s == fast.forward.comm_s
    slow = layer_times(trace, Rates.of(dataclasses.replace(A100, nvlink_bytes_per_s=3e9)))
    ops = trace.phase("backward")
    hiders = [next(o for o in reversed(ops[:i]) if o.wgrad) for i, o in enumerate(ops) if o.collective]
    assert [o.comm_bytes for o in ops if o.collective] == [2 * S * B * H] * 2
    hidden = sum(op_seconds(o, Rates.of(A100), T) for o in hiders)    # fc1's and qkv's weight gradients
    assert slow.backward.comm_s - slow.backward.exposed_comm_s == pytest.approx(hidden)


def test_paper_table4_acceptance():
    """Paper Table 4 (22B layer, t = 8, A100): every predicted phase within 25 % of the paper, every overhead
    within 4 percentage points (the issue's acceptance; the report explains what remains)."""
    for row in table4_rows(A100):
        for phase in ("forward", "backward", "combined"):
            assert abs(row[f"{phase}_ms"] / row[f"paper_{phase}_ms"] - 1) < 0.25, (row["experiment"], phase)
        assert abs(row["overhead_pct"] - row["paper_overhead_pct"]) < 4, row["experiment"]


def test_paper_figure8_acceptance():
    """Paper Figure 8: the recompute share of every bar within 3 percentage points; and the FLOP-only model
    (what the planner used before) misses the SP + selective bars by more than that."""
    for row in figure8_rows(A100):
        assert abs(row["recompute_pct"] - row["paper_recompute_pct"]) < 3, (row["model"], row["variant"])
    for model, paper_pct in (("gpt3-175b", 3.9), ("mt-nlg-530b", 2.1), ("gpt-1t", 1.8)):
        cfg = from_name(model)
        flop_only = korthikanti.core_attn_forward_flops(cfg.seq, 1, cfg.hidden) / (
            3 * korthikanti.layer_forward_flops(cfg.seq, 1, cfg.hidden))
        assert 100 * flop_only < paper_pct / 2


def test_selective_costs_more_than_its_flop_share():
    """Selective recompute re-runs memory-bound softmax and dropout: its time is several times its FLOPs'."""
    times = predict(CFG, A100, "selective", T)
    flop_time = korthikanti.core_attn_forward_flops(S, B, H) / T / Rates.of(A100).flops_per_s
    assert times.recompute_s > 3 * flop_time
    assert times.recompute.memory_s > times.recompute.compute_s


def test_llama_layer_traces_with_fused_attention_flops():
    cfg = from_name("llama-tiny")
    trace = trace_layer(cfg, 1, False, "selective")
    s = cfg.seq   # a causal FlashAttention kernel computes s(s + 1)/2 of the s² query–key pairs
    assert trace.totals("recompute")["flops"] == 4 * cfg.micro_batch * s * (s + 1) // 2 * cfg.hidden


def test_account_predicts_milliseconds(capsys):
    code, out, _ = run_cli(capsys, "account", "--model", "gpt-22b", "--mode", "selective", "--gpu", "a100-80gb",
                           "--json")
    assert code == 0
    time = json.loads(out)["time"]
    expected = predict(CFG, A100, "selective", T)
    assert time["gpu"] == "a100-80gb" and time["forward_ms"] == pytest.approx(1e3 * expected.forward_s)
    assert time["backward_ms"] == pytest.approx(1e3 * expected.backward_s)
    assert time["recompute_ms"] == pytest.approx(1e3 * expected.recompute_s)
    code, out, err = run_cli(capsys, "account", "--model", "gpt-22b", "--mode", "none", "--gpu", "x100")
    assert code == 2 and out == "" and "--gpu" in err and len(err.strip().splitlines()) == 1


def test_experiments_name_a_bad_gpu_preset():
    from remat.errors import UsageError
    from remat.experiments import load
    for name in ("korthikanti-table4", "korthikanti-figure8", "korthikanti-table5"):
        section = name.replace("-", ".")
        with pytest.raises(UsageError, match=f"{section}.gpu"):
            load(name, {"gpu": "x100"})


def test_table5_difference_and_ratio():
    """Paper Table 5 by the planner's cost model: full recompute slower than SP + selective; the ratio and the
    difference are what the rows say they are."""
    from remat.planner.table5 import table5_rows
    (row,) = table5_rows(A100, ["gpt-22b"])
    assert row["full_s"] > row["present_s"] > 0
    assert row["ratio"] == pytest.approx(row["full_s"] / row["present_s"])
    assert row["difference_s"] == pytest.approx(row["full_s"] - row["present_s"])
    assert row["paper_ratio"] == pytest.approx(1.42 / 1.10)


def test_time_model_sweep_rows():
    """The CPU validation on a tiny layer: one row per mode × phase, backward = combined − forward for both
    columns, overheads on the combined rows, the measured rates recorded."""
    from remat.experiments import load
    from remat.experiments.time_model import time_model_sweep
    frame = time_model_sweep(load("sweep-time-model", {"hiddens": [32], "heads": 2, "seq": 16, "rounds": 1}))
    assert len(frame) == 3 * 3 and set(frame["phase"]) == {"forward", "backward", "combined"}
    by = frame.set_index(["mode", "phase"])
    for mode in ("none", "selective", "full"):
        for col in ("predicted_s", "measured_s"):
            assert by.loc[(mode, "backward"), col] == pytest.approx(
                by.loc[(mode, "combined"), col] - by.loc[(mode, "forward"), col])
    assert by.loc[("none", "combined"), "predicted_overhead"] == 0
    assert by.loc[("full", "combined"), "predicted_overhead"] > by.loc[("selective", "combined"), "predicted_overhead"]
    assert (frame["flops_per_s"] > 0).all() and (frame["memory_bytes_per_s"] > 0).all()
    assert frame["error"].notna().all()


def test_the_per_op_overhead_is_paid_once_per_kernel():
    """A CPU pays its dispatch cost on every kernel: with FLOPs and bytes free, a phase costs overhead × kernels.
    Hand-built phase: two kernels and a collective (no kernel launch of its own here) → 2 s. The unfused GPT
    layer's forward at t = 1 runs 18 kernels (Megatron's eager layer, counted by hand): LayerNorm, QKV addmm,
    the baddbmm's zero-filled output, QKᵀ baddbmm, mask fill, softmax, dropout, ·V bmm, the contiguous copy
    before the projection, projection addmm, dropout, residual add, LayerNorm, fc1 addmm, GeLU, fc2 addmm,
    dropout, residual add."""
    free = Rates(float("inf"), float("inf"), float("inf"), op_overhead_s=1.0)
    ops = (Op("forward", "mm", 10, 10), Op("forward", "add", 0, 10),
           Op("forward", "allreduce_", 0, 0, collective="all_reduce", comm_bytes=0))
    phase = phase_time(ops, free, 1, overlap=False)
    assert phase.overhead_s == 2.0 and phase.total_s == 2.0
    forward = predict(CFG, A100, "none", 1, rates=free).forward
    assert forward.overhead_s == 18.0 and forward.total_s == 18.0


def test_the_cpu_validation_predicts_within_its_stated_band():
    """A sanity band, not an agreement claim: on this tiny layer the model predicts 8–15 % of the measured time
    (its per-op overhead is one bare add's dispatch, about 1 µs; an op under autograd costs several times that —
    the sweeps report shows the gap shrink to −25 %/−16 % at h = 256/512). Checked: every error lies in
    (−0.99, 0.5), i.e. the prediction is neither vanishing (under 1 % of measured: a unit slip) nor above measured
    by half. The band's floor leaves room for a loaded machine, which inflates the measured time several-fold
    (−0.97 was crossed so with the suite beside a pipeline run); the overhead's count per kernel is pinned by the
    hand-built test above (counted once per phase it moves the error here only from about −0.88 to −0.95)."""
    from remat.experiments import load
    from remat.experiments.time_model import time_model_sweep
    frame = time_model_sweep(load("sweep-time-model", {"hiddens": [32], "heads": 2, "seq": 16, "rounds": 3}))
    assert frame["error"].between(-0.99, 0.5).all(), frame[["mode", "phase", "error"]]


def test_collectives_leave_nvlink_beyond_its_domain():
    """t GPUs within one NVLink domain use NVLink; a larger group (or a bridge that joins only a pair) is as
    fast as its per-GPU scale-out link: A100 t = 16 → 25 GB/s InfiniBand; H100 PCIe t = 8 → PCIe Gen5."""
    assert Rates.of(A100, 8).link_bytes_per_s == pytest.approx(300e9 * 0.7)
    assert Rates.of(A100, 16).link_bytes_per_s == pytest.approx(25e9 * 0.7)
    assert Rates.of(gpu("h100-pcie-80gb"), 2).link_bytes_per_s == pytest.approx(300e9 * 0.7)
    assert Rates.of(gpu("h100-pcie-80gb"), 8).link_bytes_per_s == pytest.approx(64e9 * 0.7)
    nv, pcie = (predict(CFG, g, "none", T).forward.comm_s for g in (A100, gpu("h100-pcie-80gb")))
    assert pcie == pytest.approx(nv * 300 / 64)


def test_matmuls_run_at_their_dtype_peak():
    """float32 matmuls run at the FP32 rate (19.5 TFLOP/s on an A100), not the 16-bit tensor-core peak."""
    assert Rates.of(A100, 1, "float32").flops_per_s == pytest.approx(19.5e12 * 0.8)
    assert Rates.of(A100, 1, "float64").flops_per_s == pytest.approx(19.5e12 * 0.8)
    cfg32 = dataclasses.replace(CFG, dtype="float32")
    fp32 = predict(cfg32, A100, "none", T)
    flop_time = trace_layer(cfg32, T, False, "none").totals("forward")["flops"] / (19.5e12 * 0.8)
    assert flop_time <= fp32.forward.compute_s + fp32.forward.memory_s
    assert fp32.forward.compute_s > 0.95 * flop_time          # at the FP32 rate nearly every matmul is FLOP-bound


@pytest.mark.parametrize("window, pairs", [
    (None, 8192 * 8193 // 2),                         # causal: the lower triangle with its diagonal
    (4096, 4096 * 4097 // 2 + (8192 - 4096) * 4096),  # sliding window: the first w rows grow, then w per row
    (16384, 8192 * 8193 // 2),                        # a window longer than s is plain causal
])
def test_fused_attention_is_priced_at_the_pairs_it_attends(window, pairs):
    """A FlashAttention kernel computes only the causal (windowed) query–key pairs: the time model's forward
    attention FLOPs are Korthikanti's 4bs²h scaled by pairs / s², counted here by hand; backward keeps torch's
    2.5 × forward ratio."""
    cfg = dataclasses.replace(from_name("llama3-8b", seq=8192, micro_batch=1), sliding_window=window)
    forward, backward = (op.flops for op in trace_layer(cfg, 1, False, "none").ops if op.name in FUSED_ATTENTION)
    assert forward == pytest.approx(4 * 8192 * 8192 * 4096 * pairs / 8192 ** 2, abs=1)
    assert backward == pytest.approx(2.5 * 4 * 8192 * 8192 * 4096 * pairs / 8192 ** 2, abs=1)
