"""The exact planner equals brute force on random small instances — and an independent dynamic program on
longer ones with many ties, binding host limits and tiny search budgets — never exceeds the budget, and reports
the smallest budget that works when none fits. (No hypothesis package: numpy random with fixed seeds.)"""

from __future__ import annotations

import dataclasses
import itertools
import os

import numpy as np
import pytest

from remat.errors import InfeasibleError, UsageError
from remat.planner import dominance, mckp
from remat.planner.problem import Layer, Option, Problem, evaluate, plan_from_policies
from remat.planner.solve import minimum_budget, solve
from remat.policies import POLICIES


def random_layers(rng, L, tie_times: bool):
    """L layers; each offers 'none' and a random subset of the other three policies (all four most often)."""
    layers = []
    for i in range(L):
        opts = []
        for p in POLICIES:
            if p != "none" and rng.random() < 0.15:
                continue
            time = float(rng.integers(0, 6)) if tie_times else float(rng.uniform(0, 5))
            opts.append(Option(p, int(rng.integers(0, 60)), int(rng.integers(0, 60)), time,
                               recompute_flops=int(rng.integers(0, 100)),
                               offload_bytes=int(rng.integers(1, 40)) if p == "offload" else 0))
        layers.append(Layer(i, tuple(opts)))
    if rng.random() < 0.4:  # repeated layers, as in a real model
        layers = [Layer(i, layers[int(rng.integers(0, max(1, L // 2)))].options) for i in range(L)]
    return tuple(layers)


def brute_force(problem: Problem):
    """(least step time over feasible plans or None, least peak over host-feasible plans or None)."""
    best, least_peak = None, None
    for choices in itertools.product(*[range(len(layer.options)) for layer in problem.layers]):
        plan = evaluate(problem, choices)
        host_ok = problem.host_limit_bytes is None or plan.offload_bytes <= problem.host_limit_bytes
        if host_ok and (least_peak is None or plan.peak_bytes < least_peak):
            least_peak = plan.peak_bytes
        if plan.feasible and (best is None or plan.step_time_s < best):
            best = plan.step_time_s
    return best, least_peak


def random_problem(rng):
    L = int(rng.integers(1, 9)) if rng.random() < 0.3 else int(rng.integers(1, 7))
    layers = random_layers(rng, L, tie_times=rng.random() < 0.3)
    fixed = int(rng.integers(0, 30))
    budget = int(rng.integers(max(0, fixed - 10), fixed + 60 * L + 60))
    host = None if rng.random() < 0.4 else int(rng.integers(0, 40 * L))
    floor = int(rng.integers(0, 50)) if rng.random() < 0.4 else 0
    return Problem(layers, {"weights": fixed}, budget, host, fixed_time_s=float(rng.uniform(0, 1)),
                   transient_floor_bytes=floor, prefix=bool(rng.random() < 0.5))


@pytest.mark.parametrize("seed", range(6))
def test_equals_brute_force(seed):
    rng = np.random.default_rng(seed)
    infeasible = feasible = prefix = 0
    for _ in range(70):
        problem = random_problem(rng)
        best, least_peak = brute_force(problem)
        if best is None:
            infeasible += 1
            with pytest.raises(InfeasibleError) as err:
                solve(problem)
            assert err.value.minimum_bytes == least_peak
            continue
        feasible += 1
        prefix += problem.prefix
        plan = solve(problem)
        assert plan.feasible and plan.peak_bytes <= problem.budget_bytes
        assert plan.step_time_s == pytest.approx(best, rel=1e-12, abs=1e-12)
        assert minimum_budget(problem).peak_bytes == least_peak
    assert infeasible > 5 and feasible > 30 and prefix > 10  # every branch exercised


def test_ample_budget_prefers_none_over_hidden_offload():
    # offload's transfer is hidden (same time as none): at a budget where none fits, none is kept
    opts = (Option("none", 100, 0, 1.0), Option("offload", 0, 60, 1.0, offload_bytes=100),
            Option("full", 10, 90, 1.5))
    problem = Problem(tuple(Layer(i, opts) for i in range(4)), {"w": 50}, 50 + 400, None)
    assert solve(problem).policies == ("none",) * 4
    tight = Problem(problem.layers, {"w": 50}, 50 + 399, None)   # one layer must give way, at no cost
    plan = solve(tight)
    assert plan.step_time_s == 4.0 and plan.policies.count("offload") == 1 and plan.peak_bytes == 410


def test_prefix_model_counts_only_earlier_layers():
    # backward of layer i: layers before it + its own stored + its transient; the head floor meets them all
    opts = (Option("none", 100, 0, 1.0), Option("full", 10, 95, 1.3))
    layers = (Layer(0, opts), Layer(1, opts), Layer(2, opts))
    problem = Problem(layers, {"w": 7}, 10**6, None, transient_floor_bytes=20, prefix=True)
    plan = evaluate(problem, (1, 1, 0))        # full, full, none
    assert plan.peak_bytes == 7 + max(10 + 10 + 100 + 20, 10 + 95, 20 + 95, 120 + 0)
    conservative = evaluate(dataclasses.replace(problem, prefix=False), (1, 1, 0))
    assert conservative.peak_bytes == 7 + 120 + 95


def test_identical_layers_get_full_first():
    opts = (Option("none", 100, 0, 1.0), Option("full", 10, 90, 1.3))
    problem = Problem(tuple(Layer(i, opts) for i in range(6)), {}, 100 * 3 + 10 * 3 + 90, None)
    plan = solve(problem)
    assert sorted(plan.policies) == ["full"] * 3 + ["none"] * 3
    assert plan.peak_bytes == 420 and plan.step_time_s == pytest.approx(6.9)


def test_budget_below_fixed_bytes_names_minimum():
    opts = (Option("none", 100, 0, 1.0), Option("full", 10, 90, 1.3))
    problem = Problem((Layer(0, opts), Layer(1, opts)), {"weights": 1000}, 999, None)
    with pytest.raises(InfeasibleError) as err:
        solve(problem)
    assert err.value.minimum_bytes == 1000 + 10 + 10 + 90
    assert "1110 bytes" in str(err.value)


def test_host_limit_rules_out_every_plan():
    opts = (Option("offload", 0, 10, 1.0, offload_bytes=50),)
    problem = Problem((Layer(0, opts),), {}, 10**6, host_limit_bytes=49)
    with pytest.raises(InfeasibleError) as err:
        solve(problem)
    assert err.value.minimum_bytes is None


def count_mixes(L, k):
    """All count vectors (n_0..n_{k-1}) with Σ = L, as an int array [M, k]."""
    rows = [c for c in itertools.product(range(L + 1), repeat=k - 1) if sum(c) <= L]
    return np.array([list(c) + [L - sum(c)] for c in rows])


@pytest.mark.parametrize("budget", [30_000, 45_000, 52_000, 58_000, 70_000])
def test_identical_layers_equal_best_count_mix(budget):
    # 60 identical layers: brute force over the count of each option (a plan's cost depends only on those)
    opts = (Option("none", 1000, 0, 1.0), Option("selective", 600, 300, 1.05),
            Option("full", 50, 950, 1.4), Option("offload", 0, 1000, 1.2, offload_bytes=1000))
    L = 60
    n = count_mixes(L, 4)
    stored = n @ np.array([o.stored_bytes for o in opts])
    top = np.where(n > 0, np.array([o.transient_bytes for o in opts]), 0).max(axis=1)
    time = n @ np.array([o.time_s for o in opts])
    best = time[stored + top <= budget].min()
    plan = solve(Problem(tuple(Layer(i, opts) for i in range(L)), {}, budget, None))
    assert plan.feasible and plan.step_time_s == pytest.approx(best, rel=1e-12)


def test_plan_from_policies_and_bad_input():
    opts = (Option("none", 100, 0, 1.0), Option("full", 10, 90, 1.3))
    problem = Problem((Layer(0, opts),), {"weights": 5}, 200, None)
    assert plan_from_policies(problem, ["full"]).peak_bytes == 5 + 10 + 90
    assert plan_from_policies(problem, ["selective"]) is None
    with pytest.raises(UsageError, match="stored_bytes"):
        Option("none", -1, 0, 1.0)
    with pytest.raises(UsageError, match="policy"):
        Option("checkpoint", 1, 0, 1.0)
    with pytest.raises(UsageError, match="time_s"):
        Option("none", 1, 0, float("nan"))
    with pytest.raises(UsageError, match="weights"):
        Problem((Layer(0, opts),), {"weights": -5}, 200, None)


@pytest.mark.parametrize("running", [False, True])
def test_mckp_two_rows_equals_brute_force(running):
    # two capacity rows, with or without the running constraint on row 0; integer costs half of the time (ties)
    rng = np.random.default_rng(7 + running)
    for _ in range(60):
        L, K = int(rng.integers(1, 7)), int(rng.integers(1, 5))
        cost = rng.uniform(0, 3, (L, K)) if rng.random() < 0.5 else rng.integers(0, 4, (L, K)).astype(float)
        w0, w1 = rng.integers(0, 20, (L, K)).astype(float), rng.integers(0, 20, (L, K)).astype(float)
        prefix = rng.integers(0, 25, (L, K)).astype(float) if running else None
        allowed = rng.random((L, K)) < 0.8
        allowed[:, 0] = True
        caps = [float(rng.integers(0, 12 * L)), float(rng.integers(0, 12 * L))]
        ks = mckp.Knapsack(cost, [w0, w1], caps, allowed, prefix, caps[0] + float(rng.integers(0, 25)))
        values = [ks.value(np.array(ch)) for ch in itertools.product(*[np.flatnonzero(a) for a in allowed])
                  if ks.fits(np.array(ch))]
        found = mckp.solve(ks)
        if not values:
            assert found is None
        else:
            assert found is not None and found[0] == pytest.approx(min(values), rel=1e-12, abs=1e-12)
            assert ks.fits(found[1]) and ks.value(found[1]) == pytest.approx(found[0], rel=1e-12, abs=1e-12)


# --- prefix instances with many ties, binding host limits, the search's schedule under tiny budgets ----------

def reference(problem: Problem):
    """(least step time over feasible plans or None, least peak over host-feasible plans or None) by an exact
    dynamic program over integer states (stored so far, host so far, running peak or worst transient) — an
    independent check of the solver on instances too long for brute force (small byte counts)."""
    limit = problem.host_limit_bytes
    states = {(0, 0, 0): 0.0}
    for layer in problem.layers:
        nxt = {}
        for (held, host, top), time in states.items():
            for o in layer.options:
                key = (held + o.stored_bytes, host + o.offload_bytes,
                       max(top, held + o.stored_bytes + o.transient_bytes if problem.prefix else o.transient_bytes))
                if (limit is None or key[1] <= limit) and time + o.time_s < nxt.get(key, np.inf):
                    nxt[key] = time + o.time_s
        states = nxt
    floor, best, least = problem.transient_floor_bytes, None, None
    for (held, _, top), time in states.items():
        peak = problem.fixed_bytes + (max(held + floor, top) if problem.prefix else held + max(floor, top))
        least = peak if least is None or peak < least else least
        if peak <= problem.budget_bytes and (best is None or time < best):
            best = problem.fixed_time_s + time
    return best, least


def tied_problem(rng, L: int, prefix: bool = True):
    """L layers with small integer bytes and integer times (many ties in time, in bytes and in time per byte),
    a few layer kinds repeated, a host limit that binds half of the time and a budget near the least peak."""
    kinds = random_layers(rng, max(1, L // 4), tie_times=True)
    layers = tuple(Layer(i, kinds[int(rng.integers(0, len(kinds)))].options) for i in range(L))
    layers = tuple(Layer(i, tuple(dataclasses.replace(o, stored_bytes=o.stored_bytes % 10,
                                                      transient_bytes=o.transient_bytes % 12,
                                                      offload_bytes=o.offload_bytes % 8)
                                  for o in layer.options)) for i, layer in enumerate(layers))
    host = None if rng.random() < 0.5 else int(rng.integers(0, 4 * L))
    floor = int(rng.integers(0, 15))
    problem = Problem(layers, {"weights": 5}, 10**6, host, transient_floor_bytes=floor, prefix=prefix)
    least = reference(problem)[1]
    if least is None:
        return problem
    return dataclasses.replace(problem, budget_bytes=least + int(rng.integers(0, 3 * L)))


def check_against_reference(problem: Problem):
    best, least = reference(problem)
    if best is None:
        with pytest.raises(InfeasibleError) as err:
            solve(problem)
        assert err.value.minimum_bytes == least
        return False
    plan = solve(problem)
    assert plan.feasible and plan.optimal
    assert plan.step_time_s == pytest.approx(best, rel=1e-12, abs=1e-12)
    assert minimum_budget(problem).peak_bytes == least
    return True


@pytest.mark.parametrize("seed", range(4))
def test_prefix_ties_equal_reference(seed):
    # 14–22 layers: past brute force, long enough for the tail merge, the core and the deepening cuts
    rng = np.random.default_rng(100 + seed)
    feasible = sum(check_against_reference(tied_problem(rng, int(rng.integers(14, 23)))) for _ in range(6))
    assert feasible >= 3


def test_prefix_ties_small_equal_brute_force():
    rng = np.random.default_rng(11)
    for _ in range(40):
        problem = tied_problem(rng, int(rng.integers(1, 7)), prefix=bool(rng.random() < 0.8))
        best, least = brute_force(problem)
        assert (best, least) == pytest.approx(reference(problem))
        check_against_reference(problem)


def test_tiny_search_budgets_stay_exact(monkeypatch):
    # every search runs over budget, the beam holds one state, cuts grow one dropped state at a time:
    # the schedule's every branch runs, and the answers stay exact
    monkeypatch.setattr(mckp, "_BUDGET", 1)
    monkeypatch.setattr(mckp, "_BEAM", 1)
    monkeypatch.setattr(mckp, "_GROWN", 1)
    rng = np.random.default_rng(5)
    for _ in range(12):
        check_against_reference(tied_problem(rng, int(rng.integers(8, 16)), prefix=bool(rng.random() < 0.7)))


def test_binding_host_limit_equals_reference():
    # offload is free in time and stores nothing: without a limit every layer offloads; the host limit
    # (three layers' worth) decides, and the device budget forces at least some layers off `none`
    opts = (Option("none", 9, 0, 1.0), Option("full", 1, 8, 1.5), Option("offload", 0, 9, 1.0, offload_bytes=9))
    layers = tuple(Layer(i, opts) for i in range(12))
    problem = Problem(layers, {"weights": 4}, 4 + 60, host_limit_bytes=27, prefix=True)
    plan = solve(problem)
    assert plan.offload_bytes <= 27 and plan.policies.count("offload") == 3
    assert plan.step_time_s == pytest.approx(reference(problem)[0], rel=1e-12)
    assert minimum_budget(problem).peak_bytes == reference(problem)[1]
    free = dataclasses.replace(problem, host_limit_bytes=None)
    assert solve(free).step_time_s < plan.step_time_s


def test_lagrangian_one_row_is_the_lp_bound():
    from scipy.optimize import linprog
    rng = np.random.default_rng(3)
    for _ in range(20):
        L, K = int(rng.integers(1, 12)), int(rng.integers(1, 5))
        cost, weight = rng.uniform(0, 3, (L, K)), rng.integers(0, 20, (L, K)).astype(float)
        allowed = rng.random((L, K)) < 0.8
        allowed[:, 0] = True
        light = np.where(allowed, weight, np.inf).min(axis=1).sum()
        cap = float(light + rng.integers(0, 10 * L))
        bound, _ = mckp.lagrangian(mckp.Knapsack(cost, [weight], [cap], allowed))
        lp = linprog(cost.ravel(), A_ub=weight.ravel()[None], b_ub=[cap],
                     A_eq=np.kron(np.eye(L), np.ones(K)), b_eq=np.ones(L),
                     bounds=[(0, float(a)) for a in allowed.ravel()], method="highs")
        assert bound == pytest.approx(lp.fun, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("guard", ["MAX_STATES", "MAX_BRANCH"])
def test_memory_guard_falls_back_to_the_milp(monkeypatch, guard):
    # every exact search "outgrows" its guard (the states it holds, or those it would branch into at once): solve
    # and minimum_budget answer through HiGHS, still exactly
    monkeypatch.setattr(mckp, guard, 0)
    rng = np.random.default_rng(21)
    for _ in range(25):
        problem = random_problem(rng)
        best, least = brute_force(problem)
        assert (minimum_budget(problem) or None) is None if least is None else \
            minimum_budget(problem).peak_bytes == least
        if best is None:
            with pytest.raises(InfeasibleError):
                solve(problem)
        else:
            plan = solve(problem)
            assert plan.feasible and plan.step_time_s == pytest.approx(best, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("scale", [1.0, 2.0 ** 40, 0.5])
def test_pareto_filter_keeps_the_cheapest_of_each_weight_and_drops_only_dominated_states(scale):
    """dominance.pareto on states with two weights (integers small and large enough that the one-key radix sort
    does not fit, and fractions: lexsort), against brute force: every state it drops is dominated by one it
    keeps (no more of each weight, no more cost); every state no other dominates is kept (among equal weights and
    cost, the first by index); of equal weight vectors at most one is kept."""
    rng = np.random.default_rng(int(scale) % 7)
    for _ in range(200):
        n = int(rng.integers(1, 40))
        W = rng.integers(0, 5, size=(2, n)) * scale + rng.integers(0, 3, size=(2, n))
        C = rng.integers(0, 4, size=n).astype(float)
        kept = set(dominance.pareto(W, C).tolist())
        for i in range(n):
            dominated = any((W[:, j] <= W[:, i]).all() and C[j] <= C[i] and
                            ((W[:, j] < W[:, i]).any() or C[j] < C[i] or j < i) for j in range(n))
            if not dominated:
                assert i in kept
            if i not in kept:
                assert any(j in kept and (W[:, j] <= W[:, i]).all() and C[j] <= C[i] for j in range(n))
        weights = [tuple(W[:, i]) for i in sorted(kept)]
        assert len(weights) == len(set(weights))


@pytest.mark.parametrize("seed", range(4))
def test_runs_of_identical_layers_equal_reference(seed):
    """Runs of 2–7 identical adjacent layers under the running constraint, where the search keeps one order of
    their options (remat.planner.symmetry): the least step time and least peak equal the independent DP's."""
    rng = np.random.default_rng(300 + seed)
    feasible = 0
    for _ in range(6):
        problem = tied_problem(rng, 1)
        kinds = random_layers(rng, 3, tie_times=bool(rng.random() < 0.5))
        runs = [kinds[int(rng.integers(0, 3))].options for _ in range(int(rng.integers(2, 5)))]
        options = [o for run in runs for o in [run] * int(rng.integers(2, 8))]
        layers = tuple(Layer(i, tuple(dataclasses.replace(o, stored_bytes=o.stored_bytes % 10,
                                                          transient_bytes=o.transient_bytes % 12) for o in opts))
                       for i, opts in enumerate(options))
        problem = dataclasses.replace(problem, layers=layers, budget_bytes=10**6)
        least = reference(problem)[1]
        if least is not None:
            problem = dataclasses.replace(problem, budget_bytes=least + int(rng.integers(0, 2 * len(layers))))
        feasible += check_against_reference(problem)
    assert feasible >= 3


@pytest.mark.parametrize("prefix", [True, False])
def test_runs_of_identical_layers_as_counts_equal_brute_force(prefix, monkeypatch):
    """Problems of few groups of identical adjacent layers, each offering many options (a tensor plan's variants,
    transients often tied), past the exact search's guard: the MILP of counts (remat.planner.milp) gives plans
    equal to brute force over every assignment — the rank order inside a run loses no plan."""
    monkeypatch.setattr(mckp, "MAX_STATES", 0)
    rng = np.random.default_rng(5 if prefix else 6)
    checked = 0
    for _ in range(40):
        kinds = [tuple(Option("selective", int(rng.integers(0, 40)), int(rng.integers(0, 4)) * 10,
                              float(rng.integers(0, 8)), variant=f"k{j}") for j in range(int(rng.integers(2, 6))))
                 for _ in range(int(rng.integers(1, 3)))]
        sizes = [int(rng.integers(2, 4)) for _ in kinds]
        layers = tuple(Layer(i, options) for i, options in
                       enumerate(o for options, n in zip(kinds, sizes) for o in [options] * n))
        budget = int(rng.integers(20, 40 * len(layers)))
        host = None if rng.random() < 0.5 else int(rng.integers(0, 60))
        problem = Problem(layers, {"weights": 5}, budget, host, transient_floor_bytes=int(rng.integers(0, 30)),
                          prefix=prefix)
        assert 2 * len(kinds) <= len(layers)          # each kind a run of two or more identical layers
        best, _ = brute_force(problem)
        if best is None:
            with pytest.raises(InfeasibleError):
                solve(problem)
            continue
        plan = solve(problem)
        assert plan.feasible and plan.step_time_s == pytest.approx(best, rel=1e-12, abs=1e-12)
        checked += 1
    assert checked > 20


def test_highs_output_is_kept_off_stdout_and_stderr(capfd):
    """HiGHS' C++ core writes debugging lines to the process's file descriptors (not Python's streams): the MILP
    runs with fds 1 and 2 on /dev/null, and both come back afterwards."""
    from remat.planner.milp import _quiet
    with _quiet():
        os.write(1, b"from the C core\n")
        os.write(2, b"from the C core\n")
    os.write(1, b"after\n")
    out, err = capfd.readouterr()
    assert out == "after\n" and err == ""
