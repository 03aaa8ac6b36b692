"""Chen et al. 2016 §3 + Algorithms 2/3 on general graphs: every strategy's gradients bitwise equal to the
naive backward's, counted bytes against closed forms, Algorithm 3 against brute force, bad input."""

from __future__ import annotations

import dataclasses
import itertools
import math

import numpy as np
import pytest

from remat.errors import UsageError
from remat.graph import budget, engine, nets, strategies
from remat.graph.ir import Graph, Node, Value
from remat.graph.memory import plan_memory
from remat.graph.program import Program, Step, build_program

NETS = {"mlp_chain": lambda: nets.mlp_chain(layers=6),
        "residual_net": lambda: nets.residual_net(blocks=5),
        "lstm_net": lambda: nets.lstm_net(layers=2, steps=5)}


def _same(result, reference) -> bool:
    (loss, grads), (loss0, grads0) = result, reference
    return loss == loss0 and grads.keys() == grads0.keys() and all(
        np.array_equal(grads[k], grads0[k]) for k in grads0)


@pytest.mark.parametrize("net", NETS)
def test_every_strategy_bitwise_equal_to_naive_backward(net):
    graph, params, inputs = NETS[net]()
    reference = engine.execute(build_program(graph), params, inputs)
    outcomes = [strategies.evaluate(graph, s) for s in (*strategies.STRATEGIES, "sqrt", "optimal")]
    outcomes += strategies.budgeted(graph)
    for o in outcomes:
        assert _same(engine.execute(o.program, params, inputs, o.memory), reference), o.strategy
        recomputed = [s.node for s in o.program.steps if s.phase == "recompute"]
        assert len(recomputed) == len(set(recomputed)), "a node recomputed twice (mirror count > 1)"


def test_a_wrong_plan_is_caught():
    graph, params, inputs = nets.residual_net(blocks=3)
    o = strategies.evaluate(graph, "sharing")
    wrong = dataclasses.replace(o.memory, tag_of={v: 0 for v in o.memory.tag_of},
                                tag_bytes=(max(o.memory.tag_bytes),))
    with pytest.raises(engine.PlanError):
        engine.execute(o.program, params, inputs, wrong)


def test_no_opt_bytes_equal_the_sum_of_every_value():
    layers, width, batch, classes = 5, 6, 3, 4
    graph, _, _ = nets.mlp_chain(layers=layers, width=width, batch=batch, classes=classes)
    act = batch * width * 8                                    # float64 [B, d]
    forward = 3 * layers * act + batch * classes * 8 + 8       # z, h, x per layer; logits; loss
    grads = 3 * layers * act + batch * classes * 8             # every act but the loss
    data = batch * width * 8 + batch * 8                       # x_0, int64 targets
    o = strategies.evaluate(graph, "no-opt")
    assert o.memory.planned_bytes == forward + grads + data
    assert o.memory.tags == len(o.program.sizes)


def test_inplace_and_sharing_order_and_counts():
    graph, _, _ = nets.mlp_chain(layers=5)
    plans = [strategies.evaluate(graph, s).memory for s in ("no-opt", "inplace", "sharing")]
    assert plans[0].planned_bytes > plans[1].planned_bytes > plans[2].planned_bytes
    assert plans[2].planned_bytes >= plans[2].live_peak_bytes
    # ReLU's input z_i is read by the ReLU only: its output takes z_i's storage in every layer, and each
    # ReLU's gradient may overwrite d(h_i) (the ReLU is its last reader).
    assert plans[1].inplace_count >= 5


def test_segmentation_recomputes_every_dropped_node_once():
    """Splits at chain states x_i (Algorithm 1's checkpoints): m(v) = 1 for every node up to the last split
    but the split producers (the last segment is kept), and each is recomputed exactly once:
    last split + 1 − splits."""
    layers = 9
    graph, _, _ = nets.mlp_chain(layers=layers)
    states = [3 * i + 2 for i in range(layers)]       # positions of linear2's output x_{i+1}
    for picks in (states[::3], states[1::2], states):
        o = strategies.segmented(graph, budget._segmentation(graph, picks), "seg")
        assert o.program.recomputed_nodes == picks[-1] + 1 - len(picks)
    assert strategies.segmented(graph, budget._segmentation(graph, []), "none").program.recomputed_nodes == 0


def test_greedy_by_hand_on_a_three_layer_chain():
    """mlp_chain(layers=3): nodes 0–8 write [4, 8] float64 activations (256 B), the head 128 B, the loss 8 B;
    every node but the loss is a candidate and keeps exactly its output. By hand:
    B = 0: split at every candidate, x = 9·256 + 128 = 2432, y = 256 (each segment one node);
    B₀ = ⌊√(2432·256)⌋ = 789; the grid spans [394.5, 1578] in 6 points;
    B = 600: splits at 2, 5, 8 (768 B > 600 after three nodes), x = 768, y = 768;
    B = ∞ and B = 2436: no split, the one segment holds every output: y = 9·256 + 128 + 8 = 2440 (> 2436:
    the loss after the last candidate still counts)."""
    graph, _, _ = nets.mlp_chain(layers=3)
    assert budget.candidates(graph) == list(range(10))
    zero = budget.greedy(graph, 0)
    assert list(zero.splits) == list(range(10)) and (zero.x, zero.y) == (2432, 256)
    b0, *grid = budget.budget_grid(graph)
    assert b0 == 789 and grid == [394, 631, 868, 1105, 1341, 1578]
    mid = budget.greedy(graph, 600)
    assert (mid.splits, mid.x, mid.y) == ((2, 5, 8), 768, 768)
    for b in (float("inf"), 2436):
        whole = budget.greedy(graph, b)
        assert (whole.splits, whole.x, whole.y) == ((), 0, 2440)


def test_candidates_are_block_outputs_and_lstm_state_handovers():
    graph, _, _ = nets.residual_net(blocks=3)
    assert all(len(graph.crossing[i]) == 1 for i in budget.candidates(graph))
    lstm, _, _ = nets.lstm_net(layers=2, steps=6)
    counts = {len(lstm.crossing[i]) for i in budget.candidates(lstm)}
    assert max(counts) == 5  # h and c of two layers + the running loss


def _score_by_brute_force(graph: Graph, splits: tuple[int, ...]) -> tuple[int, int]:
    """Algorithm 3's (x, y) of a split set, written apart from remat.graph.budget: x = bytes of the activations
    written at or before a split and read by a forward node after it; y = the largest segment's output bytes."""
    x = 0
    for i in splits:
        alive = {v for node in graph.nodes[:i + 1] for v in node.outputs}
        read_later = {v for node in graph.nodes[i + 1:] for v in node.inputs}
        x += sum(graph.values[v].nbytes for v in alive & read_later)
    bounds = [-1, *splits, len(graph.nodes) - 1]
    y = max(sum(graph.values[v].nbytes for node in graph.nodes[a + 1:b + 1] for v in node.outputs)
            for a, b in zip(bounds, bounds[1:]))
    return x, y


@pytest.mark.parametrize("net", ["residual_net", "lstm_net"])
def test_optimal_splits_match_brute_force(net):
    graph, _, _ = {"residual_net": lambda: nets.residual_net(blocks=3),
                   "lstm_net": lambda: nets.lstm_net(layers=1, steps=2)}[net]()
    cands = budget.candidates(graph)
    best = min(sum(_score_by_brute_force(graph, c)) for r in range(len(cands) + 1)
               for c in itertools.combinations(cands, r))
    found = budget.optimal_splits(graph)
    assert (found.x, found.y) == _score_by_brute_force(graph, found.splits)
    assert found.x + found.y == best


def _program(sizes: dict[str, int], initial: tuple[str, ...], *steps: tuple) -> Program:
    return Program(None, tuple(Step("forward", f"n{i}", r, w) for i, (r, w) in enumerate(steps)), sizes,
                   initial, {})


def test_sharing_takes_the_best_fitting_free_tag():
    """Hand-built: a (100 B) and b (10 B) die at step 0 while c (10 B) is written; d (10 B) then takes b's tag
    (the smallest that holds it), so e (100 B) finds a's. Handing d the largest free tag instead would grow
    another tag to 100 B: 210 B planned instead of 120 B. Live bytes by hand: 110 → 120 (c written before a and
    b are released) → 10 → 20 → 10 → 110: the peak is 120."""
    program = _program({"a": 100, "b": 10, "c": 10, "d": 10, "e": 100}, ("a", "b"),
                       (("a", "b"), ("c",)), (("c",), ("d",)), (("d",), ("e",)))
    plan = plan_memory(program, "sharing")
    assert plan.tag_of["d"] == plan.tag_of["b"] and plan.tag_of["e"] == plan.tag_of["a"]
    assert plan.planned_bytes == 120 and plan.tags == 3
    assert plan.live_peak_bytes == 120


def test_sharing_grows_the_largest_free_tag_when_none_fits():
    """Hand-built: a (50 B) and b (10 B) die while c (1 B) is written; d (100 B) fits no free tag, so the largest
    (a's) grows to 100 B: 100 + 10 + 1 = 111 B planned (growing b's instead would plan 50 + 100 + 1 = 151 B)."""
    program = _program({"a": 50, "b": 10, "c": 1, "d": 100}, ("a", "b"), (("a", "b"), ("c",)), (("c",), ("d",)))
    plan = plan_memory(program, "sharing")
    assert plan.tag_of["d"] == plan.tag_of["a"] and plan.planned_bytes == 111


@pytest.mark.parametrize("net", NETS)
def test_live_peak_equals_a_separate_liveness_count(net):
    """Without in-place or sharing the live peak is the most bytes of values written and not yet past their
    last reader, at any step: counted here from the steps alone (values never read live only at their step)."""
    graph, _, _ = NETS[net]()
    o = strategies.evaluate(graph, "no-opt")
    steps, sizes = o.program.steps, o.program.sizes
    born = {v: -1 for v in o.program.initial}
    last = {}
    for i, step in enumerate(steps):
        born.update({v: i for v in step.writes})
        last.update({v: i for v in step.reads})
    peak = max(sum(sizes[v] for v, b in born.items() if b <= i <= max(b, last.get(v, b)))
               for i in range(len(steps)))
    assert o.memory.live_peak_bytes == peak


def test_bad_input_names_the_field():
    graph, _, _ = nets.mlp_chain(layers=3)
    with pytest.raises(UsageError, match="budget"):
        budget.greedy(graph, -1)
    with pytest.raises(UsageError, match="grid"):
        budget.budget_grid(graph, 0)
    with pytest.raises(UsageError, match="strategy"):
        strategies.evaluate(graph, "nope")
    with pytest.raises(UsageError, match="strategy"):
        plan_memory(build_program(graph), "nope")
    with pytest.raises(UsageError, match="mirror"):
        build_program(graph, {graph.nodes[0].name: 2})
    with pytest.raises(UsageError, match="layers"):
        nets.mlp_chain(layers=0)
    with pytest.raises(UsageError, match="steps"):
        nets.lstm_net(steps=0)


def test_a_cycle_is_rejected():
    values = {name: Value(name, 8, (1,), "float64", "act") for name in ("a", "b")}
    nodes = [Node("f", "relu", ("b",), ("a",), ("a",)), Node("g", "relu", ("a",), ("b",), ("b",))]
    with pytest.raises(UsageError, match="cycle"):
        Graph.checked(values, nodes, "b")


def test_a_traced_loss_with_two_outputs_back_propagates_every_node():
    """torch's nll_loss_forward writes (loss, total_weight): the backward still starts at the loss node."""
    import torch
    from torch import nn

    from remat.graph.trace import trace

    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 36, 5))
    x, y = torch.randn(2, 3, 8, 8), torch.tensor([1, 3])
    graph = trace(model, (x,), loss_fn=lambda out: nn.functional.cross_entropy(out, y))
    program = build_program(graph)
    assert len(graph.nodes[-1].outputs) == 2
    assert sum(s.phase == "backward" for s in program.steps) == len(graph.nodes)


def test_an_output_sharing_its_own_dying_input_is_caught():
    """A matmul's gradient written into the storage of the gradient it reads (not in place): the engine
    keeps a step's inputs in their storage while it writes, so the plan is refused (a real kernel would
    read a half-overwritten input)."""
    from remat.graph.memory import readers

    graph, params, inputs = nets.mlp_chain(layers=3)
    o = strategies.evaluate(graph, "sharing")
    last_reader = {}
    for i, step in enumerate(o.program.steps):
        for v in step.reads:
            last_reader[v] = i
    step = next(s for i, s in enumerate(o.program.steps) if s.phase == "backward" and s.writes
                and graph.nodes[[n.name for n in graph.nodes].index(s.node)].op == "linear"
                and any(last_reader[r] == i and r.startswith("d:") for r in s.reads))
    i = o.program.steps.index(step)
    source = next(r for r in step.reads if last_reader[r] == i and r.startswith("d:"))
    tag_of = {**o.memory.tag_of, step.writes[0]: o.memory.tag_of[source]}
    sizes = list(o.memory.tag_bytes)
    sizes[tag_of[source]] = max(sizes[tag_of[source]], o.program.sizes[step.writes[0]])
    wrong = dataclasses.replace(o.memory, tag_of=tag_of, tag_bytes=tuple(sizes))
    assert readers(o.program)[source] >= 1
    with pytest.raises(engine.PlanError, match="still live"):
        engine.execute(o.program, params, inputs, wrong)
