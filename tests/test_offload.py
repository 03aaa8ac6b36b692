"""Activation offload hooks (remat.offload): gradients bitwise equal to no offload, views copied once, the size
threshold, device-side saved bytes, host bytes back at baseline every step, prefetch order, save_on_cpu.

On the CPU the "device" is host memory (simulated: host memcpy); the CUDA tests run only where CUDA is.
"""

from __future__ import annotations

import contextlib

import pandas as pd
import pytest
import torch
from torch.distributed._tools.mem_tracker import MemTracker

from remat.errors import RecomputeError, UsageError
from remat.experiments import load
from remat.measure.bandwidth import SIMULATED
from remat.measure.saved import SavedTensorLog
from remat.models.presets import from_name
from remat.models.transformer import build_model, lm_loss, random_tokens
from remat.offload import HostBufferPool, OffloadHooks

LAYERS = 3


def _model(dtype="float32", device="cpu", **over):
    cfg = from_name("gpt-tiny", layers=LAYERS, dtype=dtype, **over)
    torch.manual_seed(0)
    model = build_model(cfg, device=device)
    return model, random_tokens(cfg, device=device)


def _forward(model, tokens, hooks, seed=1):
    """The model's forward with each layer call one offload group (hooks=None: plain)."""
    torch.manual_seed(seed)
    x = model.embed(tokens)
    for layer in model.layers:
        if hooks is None:
            x = layer(x)
        else:
            with hooks.layer():
                x = layer(x)
    return lm_loss(model.head(model.norm(x)), tokens)


def _step(model, tokens, hooks, seed=1):
    """One forward + backward; returns (loss, {name: grad}) and clears the grads."""
    loss = _forward(model, tokens, hooks, seed)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return loss.detach(), grads


def _assert_bitwise(a, b):
    (loss_a, grads_a), (loss_b, grads_b) = a, b
    assert torch.equal(loss_a, loss_b)
    assert grads_a.keys() == grads_b.keys()
    for name in grads_a:
        assert torch.equal(grads_a[name], grads_b[name]), name


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("min_bytes", [0, 8 * 1024])
def test_gradients_bitwise_equal_to_none(dtype, min_bytes):
    model, tokens = _model(dtype)  # dropout 0.1 active: the masks travel through the host too
    hooks = OffloadHooks("cpu", min_bytes=min_bytes)
    reference = _step(model, tokens, None)
    _assert_bitwise(_step(model, tokens, hooks), reference)
    assert hooks.offloaded_bytes > 0
    _assert_bitwise(_step(model, tokens, hooks), reference)  # second step: reused pool buffers


def test_same_gradients_as_torch_save_on_cpu():
    model, tokens = _model()
    reference = _step(model, tokens, None)

    class _SaveOnCpu:  # torch's synchronous reference, one context per layer
        def layer(self):
            return torch.autograd.graph.save_on_cpu(pin_memory=False, device_type="cpu")

    _assert_bitwise(_step(model, tokens, _SaveOnCpu()), reference)
    _assert_bitwise(_step(model, tokens, OffloadHooks("cpu", min_bytes=0)), reference)


def test_offloaded_plus_kept_bytes_equal_the_layers_saved_bytes():
    model, tokens = _model()
    with SavedTensorLog(model) as log:
        loss = _forward(model, tokens, None)
    loss.backward()
    layer_bytes = sum(log.bytes_per_layer(LAYERS))
    sizes = sorted({r.storage_nbytes for r in log.activations() if r.module.startswith("layers.")})
    threshold = sizes[len(sizes) // 2]  # some storages under it, some over
    hooks = OffloadHooks("cpu", min_bytes=threshold, keep=model)  # the causal-mask buffer is model state
    _forward(model, tokens, hooks).backward()
    assert hooks.kept_bytes > 0 and hooks.offloaded_bytes > 0
    assert hooks.offloaded_bytes + hooks.kept_bytes == layer_bytes
    small = sum(r.storage_nbytes for r in log.activations()
                if r.module.startswith("layers.") and r.storage_nbytes < threshold)
    assert hooks.kept_bytes == small


def test_views_of_one_storage_are_copied_once():
    w = torch.randn(64, 64, requires_grad=True)
    base = torch.randn(4, 64, 64) * 1.0  # one non-leaf storage, 64 KiB
    hooks = OffloadHooks("cpu", min_bytes=0)
    with hooks.layer():
        # matmul saves each view of ``base`` for the weight gradient; three views, one storage
        out = sum((base[i] @ w).sum() for i in range(3)) + (base.transpose(1, 2)[3] @ w).sum()
    assert hooks.copies == 1
    assert hooks.offloaded_bytes == base.untyped_storage().nbytes()
    out.backward()
    expected = torch.autograd.grad(sum((base[i] @ w).sum() for i in range(3))
                                   + (base.transpose(1, 2)[3] @ w).sum(), w)[0]
    assert torch.equal(w.grad, expected)


def test_a_storage_modified_in_place_after_its_save_is_refused_as_autograd_does():
    def step(hooks):
        w1, w2 = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
        t = torch.randn(8) * 1.0
        with hooks.layer() if hooks else contextlib.nullcontext():
            y1 = (t * w1).sum()
            with torch.no_grad():
                t.add_(1.0)  # the first save of t now holds other values
            y2 = (t * w2).sum()
        (y1 + y2).backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        step(None)       # plain autograd refuses it
    with pytest.raises(RecomputeError, match="modified by an in-place operation after it was saved"):
        step(OffloadHooks("cpu", min_bytes=0))


def test_a_storage_written_between_two_layers_is_copied_again_for_the_second():
    """One storage saved by two layers, written in place in between: the second layer's save holds the new
    values and must not reuse the first layer's host copy (that would give w2 the old base[1] silently). Each
    gradient is the forward's own input as it was when used: w1 ← base[0] before the write, w2 ← base[1] after."""
    w1, w2 = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    base = torch.randn(4, 8) * 1.0
    before = base[0].clone()
    hooks = OffloadHooks("cpu", min_bytes=0)
    with hooks.layer():
        y1 = (base[0] * w1).sum()
    with torch.no_grad():
        base.add_(1.0)
    with hooks.layer():
        y2 = (base[1] * w2).sum()
    (y1 + y2).backward()
    assert hooks.copies == 2
    assert torch.equal(w1.grad, before) and torch.equal(w2.grad, base[1])


def _activation_bytes(model, tokens, hooks) -> int:
    """MemTracker's 'Activation' bytes on the CPU right after forward (then backward, to free the graph)."""
    tracker = MemTracker()
    tracker.track_external(model)
    with tracker:
        loss = _forward(model, tokens, hooks)
        snapshot = tracker.get_tracker_snapshot("current")[torch.device("cpu")]
        loss.backward()
    model.zero_grad(set_to_none=True)
    return [v for k, v in snapshot.items() if getattr(k, "value", None) == "Activation"][0]


def test_device_side_saved_bytes_are_the_kept_tensors_only():
    """Device-resident saved bytes under offload, measured by torch's MemTracker (not by the hooks' own
    counters): equal to what stays outside the layers plus the tensors kept under the threshold, which is at
    most the layer inputs plus those tensors (the acceptance bound), and far below `none`'s activations."""
    model, tokens = _model()
    with SavedTensorLog(model) as log:
        loss = _forward(model, tokens, None)
    loss.backward()
    saved_none, saved_layers = log.total_bytes(), sum(log.bytes_per_layer(LAYERS))
    live_none = _activation_bytes(model, tokens, None)
    not_saved = live_none - saved_none  # live after forward but not saved (the loss): the same in both runs

    hooks = OffloadHooks("cpu", min_bytes=4096, keep=model)
    _step(model, tokens, hooks)  # warm the pool: the measured step allocates no host buffer
    hooks.reset_counters()
    live_offload = _activation_bytes(model, tokens, hooks)   # host copies made out of MemTracker's sight
    assert hooks.pool.peak_live_bytes > 0
    device_saved = live_offload - not_saved
    outside_layers = saved_none - saved_layers
    layer_inputs = LAYERS * tokens.numel() * model.cfg.hidden * 4  # [s, b, h] float32 per layer
    assert device_saved - outside_layers == hooks.kept_bytes
    assert device_saved - outside_layers <= layer_inputs + hooks.kept_bytes
    assert device_saved < saved_none / 4


def test_host_bytes_back_at_baseline_after_each_of_10_steps():
    model, tokens = _model()
    hooks = OffloadHooks("cpu", min_bytes=0)
    reserved = []
    for _ in range(10):
        hooks.pool.reset_peak()
        _step(model, tokens, hooks)
        assert hooks.pool.live_bytes == 0  # every host buffer returned after the step
        assert hooks.pool.peak_live_bytes > 0
        reserved.append(hooks.pool.reserved_bytes)
    assert len(set(reserved)) == 1  # no growth: step 1 sized the pool, steps 2..10 reuse it
    assert reserved[0] == hooks.pool.peak_live_bytes


def test_graph_dropped_without_backward_returns_host_buffers():
    model, tokens = _model()
    hooks = OffloadHooks("cpu", min_bytes=0)
    loss = _forward(model, tokens, hooks)
    assert hooks.pool.live_bytes > 0
    del loss
    assert hooks.pool.live_bytes == 0


@pytest.mark.parametrize("prefetch", [True, False])
def test_backward_fetches_the_last_layer_and_prefetches_the_next(prefetch):
    model, tokens = _model()
    hooks = OffloadHooks("cpu", min_bytes=0, prefetch=prefetch)
    reference = _step(model, tokens, None)
    _assert_bitwise(_step(model, tokens, hooks), reference)
    order = list(range(LAYERS - 1, -1, -1))
    expected = [(order[0], "demand")] + [(g, "prefetch" if prefetch else "demand") for g in order[1:]]
    assert hooks.fetches == expected


def test_pool_reuses_buffers_and_accounts_bytes():
    pool = HostBufferPool(pin=False)
    a, b = pool.acquire(1000), pool.acquire(24)
    assert (pool.live_bytes, pool.reserved_bytes, pool.allocations) == (1024, 1024, 2)
    pool.release(a)
    assert pool.acquire(1000).data_ptr() == a.data_ptr()  # reused, not reallocated
    assert pool.allocations == 2 and pool.peak_live_bytes == 1024
    pool.release(b)
    pool.clear()
    assert pool.reserved_bytes == 1000 and pool.live_bytes == 1000


def test_cpu_stats_say_simulated_and_bad_arguments_name_the_field():
    assert OffloadHooks("cpu").stats()["link"] == SIMULATED
    assert OffloadHooks("cpu").pool.pin is False  # pinning needs CUDA
    with pytest.raises(UsageError, match="min_bytes"):
        OffloadHooks("cpu", min_bytes=-1)
    with pytest.raises(UsageError, match="device"):
        OffloadHooks("meta")


def test_fake_tensors_are_accounted_not_copied():
    """Under FakeTensorMode (paper sizes, no memory) the hooks account bytes and backward runs; nothing is
    allocated on the host."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        model, tokens = _model("bfloat16", hidden=128, heads=4)
        with SavedTensorLog(model) as log:
            _forward(model, tokens, None)
        hooks = OffloadHooks("cpu", min_bytes=0, keep=model)
        _forward(model, tokens, hooks).backward()
    assert hooks.offloaded_bytes == sum(log.bytes_per_layer(LAYERS)) > 0
    assert hooks.pool.reserved_bytes == 0 and hooks.fetches[0] == (LAYERS - 1, "demand")
    assert all(p.grad is not None for p in model.layers.parameters())


# --- CUDA: the real asynchronous path (pinned pool, side stream, events) ---------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_gradients_bitwise_equal_to_none(dtype):
    model, tokens = _model(dtype, device="cuda", seq=64)
    hooks = OffloadHooks("cuda", min_bytes=0)
    reference = _step(model, tokens, None)
    for _ in range(3):
        hooks.reset_counters()
        _assert_bitwise(_step(model, tokens, hooks), reference)
        assert hooks.pool.pin and hooks.pool.live_bytes == 0
        assert hooks.fetches == [(LAYERS - 1, "demand")] + [(g, "prefetch") for g in range(LAYERS - 2, -1, -1)]


@pytest.mark.gpu
def test_cuda_device_memory_released_during_forward():
    model, tokens = _model("float32", device="cuda", seq=64)
    hooks = OffloadHooks("cuda", min_bytes=0)
    _step(model, tokens, hooks)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    loss_none = _forward(model, tokens, None)
    held_none = torch.cuda.memory_allocated() - before
    del loss_none
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    loss = _forward(model, tokens, hooks)
    torch.cuda.synchronize()
    held_offload = torch.cuda.memory_allocated() - before
    loss.backward()
    assert held_offload < held_none / 2


# --- the offload-steps experiment (policy hooks via remat.policies.apply_plan, save_on_cpu) -----------------------

TINY_STEPS = {"seqs": [32], "hiddens": [64], "layers": 2, "rounds": 1}


def test_steps_experiment_small_cpu():
    from remat.experiments.offload import VARIANTS, steps_table
    frame = steps_table(load("offload-steps", TINY_STEPS)).set_index("variant")
    assert list(frame.index) == list(VARIANTS)
    assert frame["grads_bitwise_equal"].all()
    assert (frame["link"] == SIMULATED).all() and (frame["threads"] == 1).all()
    held = frame["device_held_after_forward_bytes"]
    assert held["offload"] < held["full"] < held["none"]  # offload keeps no layer input; full keeps it
    assert frame.loc["offload", "host_live_after_step_bytes"] == 0
    assert frame.loc["save_on_cpu", "host_live_after_step_bytes"] == 0
    # torch's save_on_cpu copies each saved tensor (views separately, parameters too); ours each storage once
    assert frame.loc["save_on_cpu", "offloaded_bytes"] > frame.loc["offload", "offloaded_bytes"] > 0
    assert frame.loc["offload", "host_reserved_bytes"] == frame.loc["offload", "host_peak_bytes"]
    assert (frame["step_time_s"] > 0).all()


def test_steps_time_all_variants_in_one_interleaved_run_per_size(monkeypatch):
    """Per size, ONE timing run covers every variant: 5 variants × rounds × repeats timed steps in all, and
    each row's median is over rounds × repeats samples. (Timing all variants once per row would run
    5 × 5 × rounds × repeats timed steps per size, each row from a different run.)"""
    import remat.measure.timing as timing
    from remat.experiments.offload import steps_table
    timed = []
    real = timing._cpu_time

    def counting(step, device):
        timed.append(device)
        return real(step, device)
    monkeypatch.setattr(timing, "_cpu_time", counting)
    frame = steps_table(load("offload-steps", {"seqs": [32], "hiddens": [32, 64], "layers": 1, "rounds": 2,
                                               "repeats": 5}))
    assert len(timed) == 2 * 5 * 2 * 5  # sizes × variants × rounds × repeats
    assert (frame["step_time_samples"] == 2 * 5).all()


def test_steps_experiment_bad_params_name_the_key():
    with pytest.raises(UsageError, match="offload.steps.bogus"):
        load("offload-steps", {"bogus": 1})
    with pytest.raises(UsageError, match="offload.steps.repeats"):
        load("offload-steps", {"repeats": 2})
    with pytest.raises(UsageError, match="offload.steps.device"):
        load("offload-steps", {"device": "tpu"})
    with pytest.raises(UsageError, match="offload.steps.dropout"):
        load("offload-steps", {"dropout": 1.0})
    with pytest.raises(UsageError, match="offload.steps.heads"):
        load("offload-steps", {"heads": 3})  # 3 does not divide h = 64


# --- offload-breakeven on hand-made tables ----------------------------------------------------------------------

def _hand_tables(tmp_path):
    """One measured size (s = 32, h = 64, a = 4, b = 2, L = 2) at 10^10 FLOP/s achieved, 10^6 bytes in 10 copies
    per layer offloaded; device bytes held after forward: none 5·10^6, selective 4·10^6, full 10^6, offload
    0.8·10^6 (freed per step: selective 10^6, full 4·10^6, offload 4.2·10^6); a link of d2h 1 GB/s (t0 2 µs)
    and h2d 2 GB/s (t0 1 µs), copies alone, pageable."""
    base = {"s": 32, "h": 64, "a": 4, "b": 2, "L": 2, "device": "cpu", "achieved_flops_s": 1e10,
            "step_time_s": 0.010, "offloaded_bytes": None, "offloaded_tensors": None}
    overheads = {"none": 0.0, "selective": 0.001, "full": 0.003, "offload": 0.0005, "save_on_cpu": 0.002}
    held = {"none": 5e6, "selective": 4e6, "full": 1e6, "offload": 0.8e6, "save_on_cpu": 0.8e6}
    steps = pd.DataFrame([{**base, "variant": v, "overhead_vs_none_s": o, "device_held_after_forward_bytes": held[v]}
                          for v, o in overheads.items()])
    steps.loc[steps["variant"] == "offload", ["offloaded_bytes", "offloaded_tensors"]] = [2 * 10**6, 2 * 10]
    fits = {"d2h": (2e-6, 1.0), "h2d": (1e-6, 2.0)}
    bandwidth = pd.DataFrame([{"direction": d, "memory": "pageable", "overlap": ov, "bytes": 2**20,
                               "fit_t0_s": t0, "fit_bw_gb_s": bw * (0.5 if ov else 1)}
                              for d, (t0, bw) in fits.items() for ov in (False, True)])
    paths = tmp_path / "steps.csv", tmp_path / "bandwidth.csv"
    steps.to_csv(paths[0], index=False)
    bandwidth.to_csv(paths[1], index=False)
    return paths


SMALL_GRID = {"seqs": [1024], "hiddens": [4096], "gpus": ["a100-80gb"]}


def test_breakeven_measured_row_against_hand_computed_costs(tmp_path):
    """Hand computation, per layer: forward = (24·b·s·h² + 4·b·s²·h) / F = 6 815 744 / 10^10 s, backward
    twice that; t0 = max(2, 1) µs; each way 10 copies. d2h: 10·2 µs + 10^6 B / 10^9 B/s = 1.02 ms, h2d:
    20 µs + 0.5 ms = 0.52 ms. Serial: both exposed, 2 layers -> 3.08 ms. Overlapped: d2h exposes
    1.02 − 0.6815744 ms, h2d is hidden under the backward -> 2 × 0.3384256 ms. Full: one more forward per
    layer; selective: 4·b·s²·h / F = 524 288 / 10^10 s per layer.
    Equal freed bytes, per layer: full frees 4·10^6 / 2 = 2·10^6 B (13 copies): T* = 2·forward (the h2d side
    stays hidden), BW* = 2·10^6 / (T* − 13·2 µs). Selective frees 10^6 / 2 = 5·10^5 B (3 copies): T* =
    forward + selective recompute = 0.7340032 ms, BW* = 5·10^5 / (T* − 3·2 µs); offloading those bytes
    serially: 2 × (6 µs + 0.5 ms + 6 µs + 0.25 ms) = 1.524 ms, overlapped: hidden (0)."""
    from remat.experiments.offload import breakeven_table
    steps, bandwidth = _hand_tables(tmp_path)
    frame = breakeven_table(load("offload-breakeven", {"steps": str(steps), "bandwidth": str(bandwidth),
                                                       **SMALL_GRID}))
    (m,) = frame[frame["kind"] == "measured"].itertuples()
    assert (m.layer_bytes, m.tensors, m.t0_s, m.memory) == (10**6, 10, 2e-6, "pageable")
    assert (m.freed_offload_bytes, m.freed_full_bytes, m.freed_selective_bytes) == (4_200_000, 4_000_000, 1_000_000)
    assert m.bw_gb_s == 1.0  # the slower direction
    assert m.forward_s == pytest.approx(6.815744e-4, rel=1e-12)
    assert m.predicted_offload_serial_s == pytest.approx(3.08e-3, rel=1e-12)
    assert m.predicted_offload_overlap_s == pytest.approx(2 * 0.3384256e-3, rel=1e-12)
    assert m.predicted_full_s == pytest.approx(1.3631488e-3, rel=1e-12)
    assert m.predicted_selective_s == pytest.approx(1.048576e-4, rel=1e-12)
    assert m.breakeven_full_gb_s == pytest.approx(2e6 / (1.3631488e-3 - 26e-6) / 1e9, rel=1e-12)
    assert m.breakeven_selective_gb_s == pytest.approx(5e5 / (7.340032e-4 - 6e-6) / 1e9, rel=1e-12)
    assert m.predicted_offload_selective_bytes_serial_s == pytest.approx(1.524e-3, rel=1e-12)
    assert m.predicted_offload_selective_bytes_overlap_s == 0.0
    assert (m.measured_offload_s, m.measured_full_s, m.measured_selective_s) == (0.0005, 0.003, 0.001)
    assert "best_measured" not in frame.columns
    assert (frame.loc[frame["kind"] != "grid", "link"] == SIMULATED).all()
    assert (frame.loc[frame["kind"] == "grid", "link"] == "model: a100-80gb host link ÷ 2").all()
    curve = frame[frame["kind"] == "curve"]
    assert len(curve) == 25 and curve["bw_gb_s"].min() == pytest.approx(1 / 30)


def test_breakeven_grid_compares_equal_freed_bytes_on_the_shared_link(tmp_path):
    """The grid at s = 1024, b = 1, h = 4096, a = 32, t = 8 on a100-80gb: selective frees 5as²b/t =
    5·32·1024²/8 = 20 971 520 B in 3 copies; full frees none − 2sbh = sbh(10 + 24/8 + 5as/(ht)) − 2sbh =
    16·sbh = 67 108 864 B in 13 copies. The link is 25.6 GB/s shared by 2 GPUs: 12.8 GB/s each. Times are the
    roofline's (remat.timemodel.predict), and at every point offload is the cheaper exactly when the per-GPU
    link is faster than the break-even bandwidth (solved in closed form). 256 GiB of host memory holds
    2^38 // 67 108 864 = 4096 full-sized offloads."""
    from remat.experiments.offload import breakeven_table
    from remat.experiments.offload_breakeven import grid_layer
    from remat.figures import draw
    from remat.formulas import offload as formulas
    from remat.timemodel import predict
    from remat.timemodel.gpus import gpu
    steps, bandwidth = _hand_tables(tmp_path)
    frame = breakeven_table(load("offload-breakeven", {
        "steps": str(steps), "bandwidth": str(bandwidth), "seqs": [1024], "hiddens": [4096],
        "gpus": ["a100-80gb", "h100-80gb"]}))
    grid = frame[frame["kind"] == "grid"].set_index("gpu")
    a100 = grid.loc["a100-80gb"]
    assert (a100["freed_selective_bytes"], a100["copies_selective"]) == (20_971_520, 3)
    assert (a100["freed_full_bytes"], a100["copies_full"]) == (67_108_864, 13)
    assert (a100["link_gb_s"], a100["gpus_per_host_link"], a100["link_per_gpu_gb_s"]) == (25.6, 2, 12.8)
    assert grid.loc["h100-80gb", "link_per_gpu_gb_s"] == 51.2  # 1 GPU per uplink: an assumption, stated
    assert a100["host_layers_full"] == 4096 and "WP-10083-001" in a100["host_source"]
    cfg, g = grid_layer(1024, 4096, 1, 8), gpu("a100-80gb")
    none = predict(cfg, g, "none", t=8)
    assert a100["forward_s"] == pytest.approx(none.forward_s, rel=1e-12)
    assert a100["backward_s"] == pytest.approx(none.backward.total_s, rel=1e-12)
    for k in ("selective", "full"):
        assert a100[f"{k}_recompute_s"] == pytest.approx(predict(cfg, g, k, t=8).recompute_s, rel=1e-12)
        exposed = formulas.exposed_offload_s(int(a100[f"freed_{k}_bytes"]), int(a100[f"copies_{k}"]), none.forward_s,
                                             none.backward.total_s, formulas.Link.symmetric(12.8e9, 10e-6))
        assert a100[f"offload_{k}_exposed_s"] == pytest.approx(exposed, rel=1e-12)
        offload_wins = grid["link_per_gpu_gb_s"] > grid[f"breakeven_{k}_gb_s"]
        assert ((grid[f"cheaper_{k}"] == "offload") == offload_wins).all()
        assert ((grid[f"offload_{k}_exposed_s"] < grid[f"{k}_recompute_s"]) == offload_wins).all()
    frame.to_csv(tmp_path / "b.csv", index=False)
    draw("offload-breakeven", [str(tmp_path / "b.csv")], str(tmp_path / "b.png"))
    assert (tmp_path / "b.png").stat().st_size > 0 and (tmp_path / "b.svg").stat().st_size > 0


def test_breakeven_host_settings_override_the_presets(tmp_path):
    """gpus_per_host_link = 4 -> 25.6 / 4 = 6.4 GB/s per GPU; host_memory = 128 GiB -> 2^37 // 67 108 864 =
    2048 full-sized offloads; link_gb_s = 20 -> 5 GB/s per GPU; each override named in host_source."""
    from remat.experiments.offload import breakeven_table
    steps, bandwidth = _hand_tables(tmp_path)
    tables = {"steps": str(steps), "bandwidth": str(bandwidth), **SMALL_GRID}
    grid = breakeven_table(load("offload-breakeven", {**tables, "gpus_per_host_link": 4, "host_memory": "128GiB"}))
    (r,) = grid[grid["kind"] == "grid"].itertuples()
    assert (r.link_per_gpu_gb_s, r.host_memory_bytes, r.host_layers_full) == (6.4, 2**37, 2048)
    assert "gpus_per_host_link set by offload.breakeven.gpus_per_host_link" in r.host_source
    assert "host_memory set by offload.breakeven.host_memory" in r.host_source
    grid = breakeven_table(load("offload-breakeven", {**tables, "link_gb_s": 20.0, "gpus_per_host_link": 4}))
    assert grid.loc[grid["kind"] == "grid", "link_per_gpu_gb_s"].tolist() == [5.0]


def test_breakeven_needs_readable_tables_and_valid_settings(tmp_path):
    from remat.experiments.offload import breakeven_table
    steps, bandwidth = _hand_tables(tmp_path)
    with pytest.raises(UsageError, match="offload.breakeven.steps"):
        breakeven_table(load("offload-breakeven", {"steps": str(tmp_path / "missing.csv"),
                                                   "bandwidth": str(bandwidth)}))
    with pytest.raises(UsageError, match="offload.breakeven.bandwidth"):
        breakeven_table(load("offload-breakeven", {"steps": str(steps)}))
    for key, value in [("gpus", ["a100"]), ("tp", 3), ("link_gb_s", 0), ("gpus_per_host_link", 0),
                       ("host_memory", 0), ("t0_s", -1e-6), ("flops_per_s", [1e14])]:
        with pytest.raises(UsageError, match=f"offload.breakeven.{key}"):
            load("offload-breakeven", {key: value})
