"""Activation offload hooks (remat.offload): gradients bitwise equal to no offload, views copied once, the size
threshold, device-side saved bytes, host bytes back at baseline every step, prefetch order, save_on_cpu.

On the CPU the "device" is host memory (simulated: host memcpy); the CUDA tests run only where CUDA is.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from torch.distributed._tools.mem_tracker import MemTracker

from remat.errors import UsageError
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


def test_a_storage_modified_in_place_between_saves_is_copied_again():
    w1, w2 = torch.randn(8, requires_grad=True), torch.randn(8, requires_grad=True)
    t = torch.randn(8) * 1.0
    before = t.clone()
    hooks = OffloadHooks("cpu", min_bytes=0)
    with hooks.layer():
        y1 = (t * w1).sum()
        with torch.no_grad():
            t.add_(1.0)  # plain autograd would refuse the first save in backward; the hooks copied it already
        y2 = (t * w2).sum()
    assert hooks.copies == 2
    (y1 + y2).backward()
    assert torch.equal(w1.grad, before) and torch.equal(w2.grad, t)


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
    live_offload = _activation_bytes(model, tokens, hooks)
    pool_live = hooks.pool.peak_live_bytes  # the simulated host buffers are CPU memory too: not the device's
    device_saved = live_offload - pool_live - not_saved
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
    per layer offloaded; a link of d2h 1 GB/s (t0 2 µs) and h2d 2 GB/s (t0 1 µs), copies alone, pageable."""
    base = {"s": 32, "h": 64, "a": 4, "b": 2, "L": 2, "device": "cpu", "achieved_flops_s": 1e10,
            "step_time_s": 0.010, "offloaded_bytes": None, "offloaded_tensors": None}
    overheads = {"none": 0.0, "selective": 0.001, "full": 0.003, "offload": 0.0005, "save_on_cpu": 0.002}
    steps = pd.DataFrame([{**base, "variant": v, "overhead_vs_none_s": o} for v, o in overheads.items()])
    steps.loc[steps["variant"] == "offload", ["offloaded_bytes", "offloaded_tensors"]] = [2 * 10**6, 2 * 10]
    fits = {"d2h": (2e-6, 1.0), "h2d": (1e-6, 2.0)}
    bandwidth = pd.DataFrame([{"direction": d, "memory": "pageable", "overlap": ov, "bytes": 2**20,
                               "fit_t0_s": t0, "fit_bw_gb_s": bw * (0.5 if ov else 1)}
                              for d, (t0, bw) in fits.items() for ov in (False, True)])
    paths = tmp_path / "steps.csv", tmp_path / "bandwidth.csv"
    steps.to_csv(paths[0], index=False)
    bandwidth.to_csv(paths[1], index=False)
    return paths


def test_breakeven_measured_row_against_hand_computed_costs(tmp_path):
    """Hand computation, per layer: forward = (24·b·s·h² + 4·b·s²·h) / F = 6 815 744 / 10^10 s, backward
    twice that; t0 = max(2, 1) µs; each way 10 copies. d2h: 10·2 µs + 10^6 B / 10^9 B/s = 1.02 ms, h2d:
    20 µs + 0.5 ms = 0.52 ms. Serial: both exposed, 2 layers -> 3.08 ms. Overlapped: d2h exposes
    1.02 − 0.6815744 ms, h2d is hidden under the backward -> 2 × 0.3384256 ms. Full: one more forward per
    layer; selective: 4·b·s²·h / F = 524 288 / 10^10 s per layer. Break-even vs full: T* = 2·forward
    (the h2d side stays hidden), BW* = 10^6 / (T* − 20 µs)."""
    from remat.experiments.offload import breakeven_table
    steps, bandwidth = _hand_tables(tmp_path)
    frame = breakeven_table(load("offload-breakeven", {"steps": str(steps), "bandwidth": str(bandwidth),
                                                       "seqs": [1024], "hiddens": [4096], "tensors": 10}))
    (m,) = frame[frame["kind"] == "measured"].itertuples()
    assert (m.layer_bytes, m.tensors, m.t0_s, m.memory) == (10**6, 10, 2e-6, "pageable")
    assert m.bw_gb_s == 1.0  # the slower direction
    assert m.forward_s == pytest.approx(6.815744e-4, rel=1e-12)
    assert m.predicted_offload_serial_s == pytest.approx(3.08e-3, rel=1e-12)
    assert m.predicted_offload_overlap_s == pytest.approx(2 * 0.3384256e-3, rel=1e-12)
    assert m.predicted_full_s == pytest.approx(1.3631488e-3, rel=1e-12)
    assert m.predicted_selective_s == pytest.approx(1.048576e-4, rel=1e-12)
    assert m.breakeven_full_gb_s == pytest.approx(10**6 / (1.3631488e-3 - 20e-6) / 1e9, rel=1e-12)
    assert (m.measured_offload_s, m.measured_full_s, m.measured_selective_s) == (0.0005, 0.003, 0.001)
    assert m.best_measured == "offload"  # 0.5 ms < 1 ms (selective) < 3 ms (full)
    assert (frame["link"] == SIMULATED).all()
    curve = frame[frame["kind"] == "curve"]
    assert len(curve) == 25 and curve["bw_gb_s"].min() == pytest.approx(1 / 30)


def test_breakeven_grid_frontier_agrees_with_the_costs(tmp_path):
    """The grid: layer bytes are Korthikanti Eq. 1 (s = 1024, b = 1, h = 4096, a = 32: sbh(34 + 5as/h) =
    4 194 304 · 74 bytes), and at every point the cheaper of offload and recompute (compared directly)
    is offload exactly when the link is faster than the break-even bandwidth (solved in closed form)."""
    from remat.experiments.offload import breakeven_table
    from remat.figures import draw
    steps, bandwidth = _hand_tables(tmp_path)
    frame = breakeven_table(load("offload-breakeven", {
        "steps": str(steps), "bandwidth": str(bandwidth), "seqs": [1024, 4096], "hiddens": [4096],
        "flops_per_s": [1e14, 4e14], "bandwidths_gb_s": [4, 16, 64, 256], "tensors": 10}))
    grid = frame[frame["kind"] == "grid"]
    assert len(grid) == 2 * 1 * 2 * 4
    assert set(grid.loc[grid["s"] == 1024, "layer_bytes"]) == {4_194_304 * 74}
    for against in ("full", "selective"):
        cheaper = grid["offload_exposed_s"] < grid[f"{against}_recompute_s"]
        assert (cheaper == (grid["bw_gb_s"] > grid[f"breakeven_{against}_gb_s"])).all()
    frame.to_csv(tmp_path / "b.csv", index=False)
    draw("offload-breakeven", [str(tmp_path / "b.csv")], str(tmp_path / "b.png"))
    assert (tmp_path / "b.png").stat().st_size > 0 and (tmp_path / "b.svg").stat().st_size > 0


def test_breakeven_needs_readable_tables(tmp_path):
    from remat.experiments.offload import breakeven_table
    steps, bandwidth = _hand_tables(tmp_path)
    with pytest.raises(UsageError, match="offload.breakeven.steps"):
        breakeven_table(load("offload-breakeven", {"steps": str(tmp_path / "missing.csv"),
                                                   "bandwidth": str(bandwidth)}))
    with pytest.raises(UsageError, match="offload.breakeven.bandwidth"):
        breakeven_table(load("offload-breakeven", {"steps": str(steps)}))
    with pytest.raises(UsageError, match="offload.breakeven.flops_per_s"):
        load("offload-breakeven", {"flops_per_s": [0]})
