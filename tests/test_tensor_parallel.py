"""The TP/SP GPT layer: real gloo processes (world 2 and 4) against the single-process layer, and per-rank
saved bytes against the fake-process-group accounting at the same sizes; plus the fake group alone."""

import json
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch._subclasses.fake_tensor import FakeTensorMode

from remat.accounting import account_layer
from remat.errors import UsageError
from remat.models.presets import from_name
from remat.models.tensor_parallel import (ParallelGPTLayer, allreduce_sequence_parallel_grads, build_layer,
                                          fake_process_group, shard_sequence)

MODEL = "gpt-tiny"                      # h = 64, a = 4, ffn = 256, s = 32, b = 2
CASES = [(sp, mode) for sp in (False, True) for mode in ("none", "selective", "full")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _grads_as_layer(layer, cfg, device, build=build_layer):
    """A serial layer whose parameters hold ``layer``'s gradients (to shard them like the weights)."""
    out = build(cfg, device=device)
    with torch.no_grad():
        for p, q in zip(out.parameters(), layer.parameters()):
            p.copy_(q.grad)
    return out


def _check_numerics(world: int, rank: int, device: str = "cpu", tol: float = 1e-5, build=build_layer,
                    cfg=None) -> None:
    """TP/SP layer outputs and every gradient equal the serial layer's (fp32, dropout off). ``build``: the
    layer builder (cfg, group, sp, device) — the GPT layer's, or another architecture's; ``cfg``: default
    gpt-tiny without dropout."""
    from remat.accounting import _OneLayer
    from remat.policies import apply_plan
    cfg = from_name(MODEL, dropout=0.0) if cfg is None else cfg
    torch.manual_seed(0)
    serial = build(cfg, device=device)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(cfg.seq, cfg.micro_batch, cfg.hidden, generator=gen).to(device).requires_grad_()
    w = torch.randn(cfg.seq, cfg.micro_batch, cfg.hidden, generator=gen).to(device)
    y = serial(x)
    (y * w).sum().backward()
    for sp, mode in CASES:
        layer = build(cfg, dist.group.WORLD, sp, device).load_serial(serial)
        apply_plan(_OneLayer(layer), [mode])
        part = (lambda t: shard_sequence(t)) if sp else (lambda t: t)
        x_in = part(x.detach()).clone().requires_grad_()
        y_par = layer(x_in)
        (y_par * part(w)).sum().backward()
        if sp:
            allreduce_sequence_parallel_grads(layer)
        where = f"world={world} rank={rank} sp={sp} mode={mode}"
        _assert_close(y_par, part(y.detach()), f"{where} output", tol)
        _assert_close(x_in.grad, part(x.grad), f"{where} input grad", tol)
        expected = build(cfg, dist.group.WORLD, sp, device).load_serial(_grads_as_layer(serial, cfg, device, build))
        for (name, p), q in zip(layer.named_parameters(), expected.parameters()):
            _assert_close(p.grad, q, f"{where} grad of {name}", tol)


def _assert_close(got: torch.Tensor, want: torch.Tensor, where: str, tol: float = 1e-5) -> None:
    """fp32 tolerance (|got − want| ≤ tol + tol·|want|). Not torch.testing.assert_close: it imports
    torch.distributed.tensor, seconds per spawned process on a 2-core machine."""
    assert got.shape == want.shape, f"{where}: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not torch.allclose(got, want, rtol=tol, atol=tol):
        raise AssertionError(f"{where}: max |diff| {(got - want).abs().max().item():.3g}")


def _saved_bytes(rank: int, device: str = "cpu") -> dict:
    """Per-rank saved-activation accounting with real tensors (dropout on, so masks are saved)."""
    out = {}
    for sp, mode in CASES:
        acc = account_layer(MODEL, mode, tp=dist.get_world_size(), sp=sp, device=device, dropout=0.1)
        out[f"{sp}-{mode}"] = {"actual": acc.bytes_per_layer_actual, "measured": acc.bytes_per_layer_measured,
                               "items": [[i.name, list(i.shape), i.dtype, i.bytes, i.paper_term]
                                         for i in acc.items]}
    return out


def _worker(rank: int, world: int, port: int, outdir: str, backend: str = "gloo") -> None:
    torch.set_num_threads(1)  # world ≤ 4 processes on a small CPU: no thread oversubscription
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = f"cuda:{rank}"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    try:
        _check_numerics(world, rank, device, tol=1e-5 if backend == "gloo" else 1e-4)
        result = _saved_bytes(rank, device)
        with open(f"{outdir}/rank{rank}.json", "w") as f:
            json.dump(result, f)
    finally:
        dist.destroy_process_group()


# Workers start from a forkserver that has already imported these (torch.utils.checkpoint pulls in
# torch._dynamo and sympy on first use: seconds per process on a 2-core machine, paid once here).
_PRELOAD = ["torch", "torch.distributed", "torch.utils.checkpoint", "torch._dynamo", "remat.accounting",
            "remat.policies", "remat.measure.saved", "remat.models.tensor_parallel"]


@pytest.mark.slow
@pytest.mark.parametrize("world", [2, 4])
def test_gloo_matches_serial_and_fake_accounting(world, tmp_path):
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    mp.start_processes(_worker, args=(world, _free_port(), str(tmp_path)), nprocs=world, join=True,
                       start_method="forkserver")
    for rank in range(world):
        real = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for sp, mode in CASES:
            fake = account_layer(MODEL, mode, tp=world, sp=sp, device="fake", rank=rank, dropout=0.1)
            got = real[f"{sp}-{mode}"]
            assert got["actual"] == fake.bytes_per_layer_actual, (rank, sp, mode)
            assert got["measured"] == fake.bytes_per_layer_measured, (rank, sp, mode)
            assert got["items"] == [[i.name, list(i.shape), i.dtype, i.bytes, i.paper_term] for i in fake.items]


@pytest.mark.gpu(devices=2)  # NCCL needs one GPU per rank
def test_nccl_matches_serial_and_fake_accounting(tmp_path):
    world = 4 if torch.cuda.device_count() >= 4 else 2
    mp.start_processes(_worker, args=(world, _free_port(), str(tmp_path), "nccl"), nprocs=world, join=True,
                       start_method="spawn")
    for rank in range(world):
        real = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for sp, mode in CASES:
            fake = account_layer(MODEL, mode, tp=world, sp=sp, device="fake", rank=rank, dropout=0.1)
            # CUDA keeps LayerNorm statistics in fp32 (the CPU in the activation dtype): compare what the paper
            # counts, and the counted tensors one by one
            assert real[f"{sp}-{mode}"]["measured"] == fake.bytes_per_layer_measured, (rank, sp, mode)
            counted = [i for i in real[f"{sp}-{mode}"]["items"] if i[4] is not None]
            assert counted == [[i.name, list(i.shape), i.dtype, i.bytes, i.paper_term]
                               for i in fake.items if i.paper_term], (rank, sp, mode)


def test_fake_group_paper_size_matches_table2():
    # one 175B layer, rank 3 of 8, TP + SP: the paper-faithful bytes are Eq. 4 exactly
    acc = account_layer("gpt3-175b", "none", tp=8, sp=True, rank=3)
    assert acc.bytes_per_layer_measured == acc.bytes_per_layer_formula
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    assert acc.bytes_per_layer_formula == s * b * h * 34 // t + 5 * a * s * s * b // t


def test_shapes_of_one_rank():
    cfg = from_name("gpt-tiny")
    with fake_process_group(4, rank=1) as group, FakeTensorMode():
        layer = build_layer(cfg, group, sp=True)
        assert tuple(layer.attn.qkv.weight.shape) == (3 * 64 // 4, 64)
        assert tuple(layer.attn.proj.weight.shape) == (64, 64 // 4)
        assert tuple(layer.mlp.fc1.weight.shape) == (256 // 4, 64)
        assert tuple(layer.mlp.fc2.weight.shape) == (64, 256 // 4)
        assert layer.attn.core.dropout.p == cfg.dropout and layer.attn.heads == 1
        y = layer(torch.randn(32 // 4, 2, 64))
        assert tuple(y.shape) == (8, 2, 64)


def test_bad_parallel_config():
    cfg = from_name("gpt-tiny")
    with fake_process_group(3) as group:
        with pytest.raises(UsageError) as exc:
            ParallelGPTLayer(cfg, group)
        assert exc.value.field == "tp"
