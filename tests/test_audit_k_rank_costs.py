"""The per-rank planner's bytes from hand-made per-layer costs (remat.planner.rank_costs.RankCosts given to
remat.planner.ranks through ``priced``): expert state under ZeRO with expert parallelism, what ``runtime=False``
leaves out, and the gradients a split backward keeps between its input- and weight-gradient steps. Expected values
worked out by hand or followed event by event from the schedule's own timeline."""

from __future__ import annotations

import dataclasses

from remat.models.presets import from_name
from remat.planner.make import make_settings
from remat.planner.rank_costs import RankCosts
from remat.planner.ranks import plan_pipeline
from remat.planner.schedules import timeline

NONE = {"policy": "none", "stored": 1000, "transient": 300, "time": 1e-3, "host": 0, "retained": 0}


def _costs(**kw) -> RankCosts:
    """One option (none: 1000 bytes stored per layer and micro-batch, 300 transient), 7 bytes outside stage 0 and
    11 (+ 5 transient) outside the last; parameters 10 per layer, 20 and 30 on the first and last stage."""
    return RankCosts(**{"options": (NONE,), "first": (7, 0), "last": (11, 5), "layer_params": 10,
                        "expert_params": 0, "first_params": 20, "last_params": 30, **kw})


def _cfg(pp=2, m=2, layers=8, gb=8):
    return dataclasses.replace(from_name("gpt-tiny"), layers=layers, pp=pp, interleave=m, global_batch=gb)


def test_expert_state_is_sharded_over_the_data_parallel_ranks_that_hold_the_same_experts():
    # one layer of 6000 expert parameters over ep = 2: 3000 on each GPU; dp = 4, so 4 / 2 = 2 ranks hold the same
    # experts. ZeRO-3 shards weights (4 B), gradients (4 B) and optimizer state (8 B) over those 2: 3000·16/2 =
    # 24000 bytes; ZeRO-1 the optimizer state only: 3000·(4 + 4) + 3000·8/2 = 36000. No dense parameters, no reserve
    rc = RankCosts((NONE,), (0, 0), (0, 0), 0, 6000, 0, 0)
    st = dataclasses.replace(make_settings(_cfg(), "a100-80gb"), dp=4, reserve_bytes=0)
    assert (st.weight_bytes, st.grad_bytes, st.optimizer_bytes) == (4, 4, 8)
    assert rc.fixed(dataclasses.replace(st, zero=3), 1, False, False, ep=2) == 24000
    assert rc.fixed(dataclasses.replace(st, zero=1), 1, False, False, ep=2) == 36000
    # without expert parallelism every one of the 4 ranks holds all 6000: ZeRO-3 shards over 4, 6000·16/4
    assert rc.fixed(dataclasses.replace(st, zero=3), 1, False, False, ep=1) == 24000


def test_without_the_runtime_the_stage_boundary_bytes_count_nowhere():
    # runtime=False counts the model's tensors only: neither torch's receive buffers nor the outputs and input
    # gradients an interleaved schedule keeps until the step ends. A stage-boundary activation of 0 bytes or of 1 MB
    # gives the same peaks; with the runtime the larger one costs more on every rank
    for name in ("Interleaved1F1B", "1F1B"):
        cfg = _cfg(m=2 if name == "Interleaved1F1B" else 1)
        st = make_settings(cfg, "a100-80gb", memory=10**15)
        peaks = {(runtime, boundary): [r.peak_bytes for r in plan_pipeline(
            cfg, st, name, runtime=runtime, priced=(_costs(boundary=boundary), (1e-4, 1e-4))).ranks]
            for runtime in (False, True) for boundary in (0, 10**6)}
        assert peaks[False, 0] == peaks[False, 10**6], name
        assert all(a < b for a, b in zip(peaks[True, 0], peaks[True, 10**6])), name


def test_a_split_backward_holds_each_layers_weight_op_gradients_until_its_weight_step():
    # ZBVZeroBubble, p = 2, two stages per rank, 2 layers each. After a micro-batch's input-gradient step (I) the
    # rank keeps, per layer of that stage, the gradients of its weight ops' outputs (weight_grads) until the
    # weight-gradient step (W). Followed by hand over the schedule's events: per event Σ_c held_c·(2·1000 + outside
    # of c) + Σ_c split_c·2·weight_grads + the running backward's transient, plus the rank's fixed bytes
    cfg = _cfg(layers=8, m=2)
    st = make_settings(cfg, "a100-80gb", memory=10**15)
    wg = 10**5
    plan = plan_pipeline(cfg, st, "ZBVZeroBubble", runtime=False, priced=(_costs(weight_grads=wg), (1e-4, 1e-4)))
    tl = timeline("ZBVZeroBubble", 2, plan.micro_batches, 2)
    assert any(sum(e.split) for r in range(2) for e in tl.events[r])
    for rank in plan.ranks:
        outside = [7 * (s == 0) + 11 * (s == 3) for s in rank.stages]
        transient = [max(300, 5 * (s == 3)) for s in rank.stages]
        most = max(sum(h * (2 * 1000 + o) for h, o in zip(e.held, outside)) + 2 * wg * sum(e.split)
                   + (transient[e.backward] if e.backward is not None else 0) for e in tl.events[rank.rank])
        assert rank.peak_bytes == rank.fixed_bytes + most, rank.rank
