"""The mutation audit: plant one realistic bug at a time in a clean copy of the project, run the tests
that should catch it, and print whether they did. Prints one line per bug and the figure "caught N of M".

    python benchmarks/mutation_audit.py              # every bug (about 3 minutes on 2 cores)
    python benchmarks/mutation_audit.py --check      # only that each bug's text occurs exactly once (seconds)
    python benchmarks/mutation_audit.py 9 B          # the named bugs only

The bugs were planted by a second reviewer (not the tests' author), in the core claims: Korthikanti's and
Chen's closed forms, the numpy engine and its schedules, Chen §3's allocator and Algorithm 3, the exact
planner, the byte accounting, the time model, recompute's guards, the findings' judge and gates, offload.
Bugs 1–20 are the audit's count (bug 8 of the first pick behaved exactly like the original and was replaced
by 8b); A–E probe further; F1–F7 (F5b: kind 5's second bug) are the kinds a second auditor planted that
the fast tier missed; G1–G20 a third reviewer's, in the per-rank pipeline planner (schedules, ranks,
rank_costs, pipeline_text, plan --schedule) and the recompute-safety messages, 16 of them missed by the fast
tier when planted, each now caught by a fast test; H1–H24 a fourth reviewer's, in the per-rank planner's stage
costs and trainer formats, the gloo-rank experiment, the calibration's re-timing and the validate findings, the
dtype gates and the recompute-safety code, some missed by the fast tier when planted (counted in that stop's
note), each now caught by a fast test (tests/test_audit_h_*.py); J1–J36 a fifth reviewer's, in the value check
(sampling, checksums, the cache watcher, what is skipped), side effects, autocast and data-dependent planning, the
torch-version guard and the per-rank step time, 22 of 36 caught by the fast tier when planted, each now caught
(tests/test_audit_j_*.py); K1–K40 a sixth reviewer's, in the per-rank planner, the calibration gate, the value check,
the recompute region's state and the side-effects trap, 31 of 40 caught by the fast tier when planted (25 of its first
30, planted before any result), each now caught (tests/test_audit_k_*.py). Each is an exact, single-occurrence text
replacement; a bug whose text no longer occurs is reported as stale (the code moved: update the entry, do not drop
it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import copy_project  # noqa: E402  (the tests' own copy of the shipped files)

# id: (file under src/remat, text, replacement, test files)
KORT = "tests/test_formulas_korthikanti.py"
CHEN = ("tests/test_formulas_chen.py", "tests/test_schedules.py", "tests/test_chain.py")
PLAN = ("tests/test_planner_solve.py", "tests/test_planner_costs.py", "tests/test_planner_mistral.py")
GRAPH = ("tests/test_graph_plan.py", "tests/test_chen_graph.py", "tests/test_graph_trace.py")
PP = ("tests/test_pp_schedules.py", "tests/test_pp_ranks.py")
SAFE = ("tests/test_clear_errors.py", "tests/test_recompute_safety.py", "tests/test_policies.py",
        "tests/test_offload.py", "tests/test_auto.py", "tests/test_auto_explain.py")
AH = "tests/test_audit_h_"   # the H series' own tests: test_audit_h_<topic>.py
BUGS = {
    "1": ("formulas/korthikanti.py", "full / t if (self.tp_split or sp)", "full / t if self.tp_split", (KORT,)),
    "2": ("formulas/korthikanti.py", "attn = ash / t if", "attn = ash if", (KORT,)),
    "3": ("formulas/korthikanti.py", "12 * B * L * s * s * h + 6 * B * s * h * v",
          "12 * B * L * s * s * h + 2 * B * s * h * v", (KORT,)),
    "4": ("formulas/chen.py", "live = [k * x_bytes", "live = [(k - 1) * x_bytes", CHEN),
    "5": ("formulas/chen.py", "return root if root * root == layers else root + 1", "return root", CHEN),
    "6": ("formulas/revolve.py", "r * l - beta(s + 1, r - 1)", "r * l - beta(s, r - 1)", CHEN),
    "7": ("chain.py", "dh *= h > 0", "dh *= h >= 0", CHEN[1:]),
    "8b": ("schedules.py", "reverse(lo + m, hi, s - 1)", "reverse(lo + m, hi, s)", CHEN),
    "9": ("graph/memory.py", "self.pool.pop(i if i < len(self.pool) else -1)",
          "self.pool.pop(i if i < len(self.pool) else 0)", GRAPH),
    "10": ("graph/budget.py", "x, max(y, temp)", "x, y", GRAPH),
    "11": ("graph/program.py", "lambda v: mirror(v) if self._dropped(v) else v", "lambda v: v", GRAPH),
    "12": ("planner/problem.py", "feasible=peak <= problem.budget_bytes", "feasible=peak < problem.budget_bytes", PLAN),
    "13": ("planner/problem.py", "running += o.stored_bytes\n            layers_peak = max(layers_peak, running + "
           "o.transient_bytes)", "layers_peak = max(layers_peak, running + o.transient_bytes)\n            running += "
           "o.stored_bytes", PLAN),
    "14": ("planner/costs.py", "[min(p, n)] * per_stage", "[min(p - 1, n)] * per_stage", PLAN),
    "15": ("planner/knapsack.py", "ks.lightest(k).sum() > cap", "ks.lightest(k).sum() >= cap", PLAN),
    "16": ("measure/saved.py", "not r.is_parameter and not r.duplicate]", "not r.is_parameter]",
           ("tests/test_measure.py", "tests/test_account.py")),
    "17": ("accounting.py", "numel = r.nbytes // _element_size(r.dtype)", "numel = r.nbytes // 2",
           ("tests/test_account.py", "tests/test_measure.py")),
    "18": ("timemodel/roofline.py", '"all_reduce": 2.0', '"all_reduce": 1.0', ("tests/test_timemodel.py",)),
    "19": ("policies/checkpoint.py", "        if any(version_of(t) != version for t, version in inputs):",
           "        inputs = [(t, version_of(t)) for t, _ in inputs]\n"
           "        if any(version_of(t) != version for t, version in inputs):",
           ("tests/test_recompute_safety.py", "tests/test_policies.py", "tests/test_recompute_reports.py")),
    "20": ("analysis/findings.py", "return abs(gap) <= k * tol.value, (f\"ours {_num(ours)} is",
           "return gap <= k * tol.value, (f\"ours {_num(ours)} is", ("tests/test_findings.py",)),
    "A": ("analysis/gates.py", "abs(a - b) > max(iqr_a, iqr_b)", "abs(a - b) > iqr_a + iqr_b",
          ("tests/test_findings.py",)),
    "B": ("offload.py", " \\\n                and hit[1]().version == tensor._version:", ":",
          ("tests/test_offload.py",)),
    "C": ("drop_cheap.py", "self.kept[t.untyped_storage()._cdata]", "self.kept[id(t)]",
          ("tests/test_drop_cheap.py", "tests/test_recompute_safety.py", "tests/test_recompute_reports.py")),
    "D": ("timemodel/trace.py", '_nbytes(inputs[-1] if kind == "reduce_scatter" else inputs[0])', "_nbytes(inputs[0])",
          ("tests/test_timemodel.py",)),
    "E": ("formulas/revolve.py", "while beta(s, r) < l:", "while beta(s, r) <= l:", CHEN),
    # F: the seven kinds a second auditor planted that the fast tier missed, each now caught by a fast test
    "F1": ("auto/tensors.py", "i not in stream.written and i not in returned", "i not in returned",
           ("tests/test_inplace_keep.py",)),
    "F2": ("auto/hf.py", "2 * itemsize * b * s * (heads - groups) * d", "2 * itemsize * b * s * heads * d",
           ("tests/test_gqa_note.py",)),
    "F3": ("auto/check.py", 'predicted / row["measured_peak_bytes"] - 1', 'row["measured_peak_bytes"] / predicted - 1',
           ("tests/test_check_peak_error.py",)),
    "F4": ("policies/region.py", "nbytes() <= SNAPSHOT_BYTES)", "nbytes() < SNAPSHOT_BYTES)",
           ("tests/test_snapshot_boundary.py",)),
    "F5": ("policies/values.py", " | (f.isnan() & r.isnan())", "", ("tests/test_value_check.py",)),
    "F5b": ("policies/values.py", "index, got = self.pairs[first]", "index, got = self.pairs[-1]",
            ("tests/test_value_check.py",)),
    "F6": ("offload.py", "stored.modified or (source is not None and source._version != stored.version),",
           "stored.modified,", ("tests/test_offload_stale_copy.py",)),
    "F7": ("planner/measured.py", "dataclasses.replace(st, dp=st.dp // cfg.ep)", "st", ("tests/test_moe.py",)),
    # G: a third reviewer's bugs in the per-rank pipeline planner and the recompute-safety changes
    "G1": ("planner/schedules.py", 'back[i] += kind in ("B", "I")', 'back[i] += kind == "B"', PP),
    "G2": ("planner/schedules.py", 'split[i] -= kind == "W"', 'split[i] -= kind == "B"', PP),
    "G3": ("planner/schedules.py", 'i if kind in ("B", "I") else None', 'i if kind == "B" else None', PP),
    "G4": ("planner/rank_costs.py", "self.boundary * (stage != 0)", "self.boundary * (stage != last)", PP),
    "G5": ("planner/rank_costs.py", "out[0] += output - (self.boundary if stage else 0)", "out[0] += output", PP),
    "G6": ("planner/rank_costs.py", "int(Fraction(4 * s * b * v, t))", "int(Fraction(2 * s * b * v, t))", PP),
    "G7": ("planner/rank_costs.py", 'RECOMPUTED = ("selective", "full")', 'RECOMPUTED = ("full",)', PP),
    "G8": ("planner/ranks.py", "rc.fixed(st, per_stage * len(stages),", "rc.fixed(st, per_stage,", PP),
    "G9": ("planner/ranks.py", "plan.peak_bytes <= st.budget_bytes for", "plan.peak_bytes < st.budget_bytes for", PP),
    "G10": ("planner/ranks.py", "[[0] * k for _ in ranks]", "[list(range(k)) for _ in ranks]", PP),
    "G11": ("planner/ranks.py", "[x - margin for x in room]", "room", PP),
    "G12": ("planner/ranks.py", 'm * opt["host"] / MIB', 'opt["host"] / MIB', PP),
    "G13": ("planner/pipeline_text.py", "{format_bytes(r.peak_bytes)} | {format_bytes(r.fixed_bytes)}",
            "{format_bytes(r.fixed_bytes)} | {format_bytes(r.peak_bytes)}", PP),
    "G14": ("cli/plan_run.py", 'args.global_batch is None and cfg.source != "preset"',
            'args.global_batch is None and cfg.source == "preset"', PP),
    "G15": ("policies/region.py", "_PASSED = (RecomputeError, UsageError, _StopRecomputationError)",
            "_PASSED = (RecomputeError, UsageError)", SAFE),
    "G16": ("policies/apply.py", "for i in range(start, stop)}", "for i in range(start, stop - 1)}", SAFE),
    "G17": ("auto/fake.py", '(", …" if len(meta) > 1 else "")', '(", …" if len(meta) > 2 else "")', SAFE),
    "G18": ("auto/whole_step.py", "module.sparse and module.weight.requires_grad:", "module.sparse:", SAFE),
    "G19": ("offload.py", "is_functorch_wrapped_tensor(tensor) or tensor._is_zerotensor()",
            "is_functorch_wrapped_tensor(tensor)", SAFE),
    "G20": ("auto/planning.py", r'r"\. Give (this block|it) policy none or offload$"',
            r'r"\. Give this block policy none or offload$"', SAFE),
    # H: a fourth reviewer's bugs (per-rank planner, gloo-rank experiment, calibration, findings, dtype, safety)
    "H1": ("planner/rank_costs.py", "2 * h + v * h // t, 0,", "v * h // t, 0,", (AH + "rank_costs.py",)),
    "H2": ("planner/rank_costs.py", "int(Fraction(2 * s * b * h, t if st.sp else 1))",
           "int(Fraction(2 * s * b * h, t))", (AH + "rank_costs.py",)),
    "H3": ("planner/rank_costs.py", 'not r.module.startswith(("layers", "embed"))', 'not r.module.startswith("layers")',
           (AH + "rank_costs.py",)),
    "H4": ("planner/pipeline_text.py", "min(scored, key=lambda x: max(r.peak_bytes for r in x[1]))",
           "min(scored, key=lambda x: min(r.peak_bytes for r in x[1]))", (AH + "rank_costs.py",)),
    "H5": ("planner/pipeline_text.py", "all(r.peak_bytes <= plan.budget_bytes for r in x[1])",
           "all(r.peak_bytes < plan.budget_bytes for r in x[1])", (AH + "rank_costs.py",)),
    "H6": ("experiments/pipeline_ranks.py", 'frame["predicted_peak_bytes"] / frame["measured_peak_bytes"] - 1',
           'frame["measured_peak_bytes"] / frame["predicted_peak_bytes"] - 1', (AH + "pipeline_experiment.py",)),
    "H7": ("experiments/pipeline_ranks.py", "peaks = [max(r.peak_bytes for r in", "peaks = [min(r.peak_bytes for r in",
           (AH + "pipeline_experiment.py",)),
    "H8": ("experiments/pipeline_ranks.py", "global_batch=2 * p.micro_batches", "global_batch=p.micro_batches",
           (AH + "pipeline_experiment.py",)),
    "H9": ("experiments/pipeline_rank.py", "(lm_loss(model(x.t()), y.t()) / n).backward()",
           "lm_loss(model(x.t()), y.t()).backward()", (AH + "pipeline_experiment.py",)),
    "H10": ("experiments/pipeline_rank.py", "if index == n - 1 else (None, None)", "if index == n else (None, None)",
            (AH + "pipeline_experiment.py",)),
    "H11": ("experiments/planner.py", "if all(steps[a] < steps[b] for a, b in",
            "if all(steps[a] <= steps[b] for a, b in", (AH + "calibration.py",)),
    "H12": ("experiments/planner.py", '(steps[p] - steps["none"]) / L for p in RECOMPUTE}',
            '(steps[p] - steps["none"]) for p in RECOMPUTE}', (AH + "calibration.py",)),
    "H13": ("experiments/planner.py", 'if entry["k"] > 1 else "none"', 'if entry["k"] >= 1 else "none"',
            (AH + "calibration.py",)),
    "H14": ("analysis/planner.py", '(v["predicted_base_bytes"] - v["measured_base_bytes"]).abs().max()',
            '(v["predicted_base_bytes"] - v["measured_base_bytes"]).max()', (AH + "findings.py",)),
    "H15": ("analysis/planner.py", 'int((rows["measured_peak_bytes"] <= rows["budget_bytes"]).sum())',
            'int((rows["measured_peak_bytes"] < rows["budget_bytes"]).sum())', (AH + "findings.py",)),
    "H16": ("precision.py", 'return has and dtype == "bfloat16", evidence', "return has, evidence",
            (AH + "findings.py",)),
    "H17": ("analysis/gates.py", '.str.lower() == "false"]', '.str.lower() != "true"]', (AH + "findings.py",)),
    "H18": ("analysis/catalog.py", 'rows["dtype"].dropna().astype(str)', 'rows["dtype"].astype(str)',
            (AH + "findings.py",)),
    "H19": ("auto/fake.py", "nn.Parameter(new, t.requires_grad)", "nn.Parameter(new)", (AH + "safety.py",)),
    "H20": ("auto/whole_step.py", "for p in m.parameters(recurse=False) if p.requires_grad}",
            "for p in m.parameters(recurse=False)}", (AH + "safety.py",)),
    "H21": ("offload.py", "return _Kept(tensor, tensor._version, name)", "return _Kept(tensor, 0, name)",
            (AH + "safety.py",)),
    "H22": ("auto/planning.py", "(exc.minimum_bytes or 0) < (error.minimum_bytes or 0)",
            "(exc.minimum_bytes or 0) > (error.minimum_bytes or 0)", (AH + "safety.py",)),
    "H23": ("policies/apply.py", 'name=f"layers.{i}–{starts[i] - 1}")(x)', 'name=f"layers.{i}–{starts[i]}")(x)',
            (AH + "safety.py",)),
    "H24": ("policies/region.py", "(version != now or id(t) in self.stats)", "version != now", (AH + "safety.py",)),
    "J1": ("policies/values.py", "tally.checked < FIRST", "tally.checked <= FIRST",
           ("tests/test_recompute_state.py", "tests/test_audit_j_sampling.py")),
    "J2": ("policies/values.py", "same = (f == r) | ((f - r).abs()", "same = ((f - r).abs()",
           ("tests/test_audit_j_value_check.py", "tests/test_auto_explain.py")),
    "J3": ("policies/values.py", "(f.isnan() & r.isnan())", "(f.isnan() | r.isnan())", ("tests/test_value_check.py",)),
    "J4": ("policies/values.py", "return int(bad[0, 0])", "return int(bad[-1, 0])", ("tests/test_value_check.py",)),
    "J5": ("policies/values.py", "t.untyped_storage()._cdata in stats", "t.untyped_storage()._cdata not in stats",
           ("tests/test_recompute_safety.py",)),
    "J6": ("drop_cheap.py", "if not ctx.is_recompute and KEPT_WATCHERS:", "if ctx.is_recompute and KEPT_WATCHERS:",
           ("tests/test_audit_j_value_check.py", "tests/test_tensor_offload.py")),
    "J7": ("policies/values.py", "Mismatch(self.region, name, place,", "Mismatch(self.region, name, index,",
           ("tests/test_value_check.py",)),
    "J8": ("policies/values.py", "return _ACTIVE[-1]", "return _ACTIVE[0]",
           ("tests/test_value_check.py", "tests/test_audit_j_value_check.py")),
    "J9": ("policies/values.py", "\"set_\")", ")", ("tests/test_tensor_offload.py",)),
    "J10": ("auto/tensors.py", "not func.is_view and not parameter_cast(func, args)", "not func.is_view",
           ("tests/test_tensor_plan_autocast.py",)),
    "J11": ("auto/tensors.py", "and name != \"_to_copy\")", ")",
           ("tests/test_tensor_plan_autocast.py", "tests/test_audit_j_plans.py")),
    "J12": ("policies/values.py", "(tally.forwards - 1) % EVERY == 0", "tally.forwards % EVERY == 0",
           ("tests/test_recompute_state.py", "tests/test_audit_j_sampling.py")),
    "J13": ("policies/checkpoint.py", "check_hooks_on(name, \"recompute\")\n            tally.forwards += 1",
           "check_hooks_on(name, \"recompute\")\n        tally.forwards += 1",
           ("tests/test_recompute_state.py", "tests/test_audit_j_sampling.py")),
    "J14": ("policies/checkpoint.py", "if first <= release <= last:", "if first < release <= last:",
           ("tests/test_torch_versions.py",)),
    "J15": ("policies/checkpoint.py", "recompute.append(Compare(sums, check, name, stats, tally))",
           "recompute.append(Compare(sums, check, name, tally=tally))",
           ("tests/test_recompute_safety.py", "tests/test_audit_j_value_check.py")),
    "J16": ("policies/region.py", "if _autocasting():", "if not _autocasting():",
           ("tests/test_tensor_plan_autocast.py",)),
    "J17": ("policies/region.py", "for context in self.watch.replays:",
           "for context in [capture() for capture in _REPLAYS]:",
           ("tests/test_recompute_state.py",)),
    "J18": ("auto/preserve.py", "len(m._forward_hooks) + len(m._forward_pre_hooks)", "len(m._forward_hooks)",
           ("tests/test_recompute_state.py", "tests/test_audit_j_side_effects.py")),
    "J19": ("auto/preserve.py", "_SCALARS = (bool, int, float, str)", "_SCALARS = (bool, int, float)",
           ("tests/test_recompute_state.py", "tests/test_audit_j_side_effects.py")),
    "J20": ("auto/preserve.py", "if sub and self.hooks.get(id(module)):", "if self.hooks.get(id(module)):",
           ("tests/test_recompute_state.py", "tests/test_audit_j_side_effects.py")),
    "J21": ("auto/traps.py", "effects = [e for e in effects if e.block in recomputed]", "effects = list(effects)",
           ("tests/test_recompute_state.py",)),
    "J22": ("auto/planning.py", "if sub and (m._forward_hooks or m._forward_pre_hooks)", "if sub and m._forward_hooks",
           ("tests/test_recompute_state.py",)),
    "J23": ("auto/planning.py", "if len(hooked) > 3 else \"\"", "if len(hooked) >= 3 else \"\"",
           ("tests/test_recompute_state.py", "tests/test_audit_j_side_effects.py")),
    "J24": ("auto/fake.py", " and x.device.type != \"meta\"", "", ("tests/test_auto_data_dependent.py",)),
    "J25": ("measure/peak.py", "        self._unchecked.__exit__(*exc)\n", "",
           ("tests/test_recompute_state.py", "tests/test_audit_j_sampling.py")),
    "J26": ("measure/timing.py", "recompute_check(\"off\"):", "recompute_check(\"sample\"):",
           ("tests/test_timing.py", "tests/test_audit_j_sampling.py")),
    "J27": ("planner/schedules.py", "\"I\": b - w", "\"I\": b", ("tests/test_pp_schedules.py",)),
    "J28": ("planner/schedules.py", "    return max(free)\n", "    return free[0]\n", ("tests/test_pp_schedules.py",)),
    "J29": ("planner/ranks.py", "if shared < step:", "if shared <= step:",
           ("tests/test_audit_i_step_timing.py", "tests/test_audit_j_plans.py")),
    "J30": ("planner/measured.py", "            mem.reset_peak()\n", "",
           ("tests/test_audit_i_measured.py", "tests/test_audit_j_plans.py")),
    "J31": ("planner/ranks.py", "forward, weight = (su.per_stage * x for x in su.phases)",
           "forward, weight = su.phases",
           ("tests/test_audit_i_step_timing.py",)),
    "J32": ("auto/fake.py", "    copied = copy.deepcopy(model)\n    if hf", "    copied = model\n    if hf",
           ("tests/test_audit_j_plans.py",)),
    "J33": ("policies/region.py", "        _set_host_rng(self.host_rng)\n", "", ("tests/test_recompute_state.py",)),
    "J34": ("policies/values.py", "flat[offset::stride]", "flat[offset:stride]",
           ("tests/test_recompute_state.py", "tests/test_audit_j_value_check.py")),
    "J35": ("auto/tensors.py", "if \"_to_copy\" in (name, planned)", "if name == \"_to_copy\"",
           ("tests/test_tensor_plan_autocast.py", "tests/test_audit_j_plans.py")),
    "J36": ("policies/values.py", "        self.tally.checked += 1\n", "", ("tests/test_recompute_state.py",)),
    "K1": ("planner/schedules.py", "                sent[i] += 1\n", "", ("tests/test_pp_schedules.py",)),
    "K2": ("planner/schedules.py", '("G", stage + 1, j) if stage < last else ("F", stage, j)',
           '("G", stage + 1, j) if stage < last - 1 else ("F", stage, j)', ("tests/test_pp_schedules.py",)),
    "K3": ("planner/rank_costs.py", "((stage > 0) + (stage < last))",
           "((stage > 0) + (stage <= last))", ("tests/test_pp_ranks.py",)),
    "K4": ("planner/rank_costs.py",
           "output = self.logits if stage == last else 0 if keeps_sends else self.boundary",
           "output = self.logits if stage == last else self.boundary if keeps_sends else 0",
           ("tests/test_pp_ranks.py",)),
    "K5": ("planner/rank_costs.py", "dataclasses.replace(st, dp=max(1, st.dp // ep))",  # missed when planted
           "st", ("tests/test_audit_k_rank_costs.py",)),
    "K6": ("planner/rank_costs.py", "buffers = layers * self.layer_buffers",
           "buffers = self.layer_buffers", ("tests/test_pp_ranks.py",)),
    "K7": ("planner/rank_costs.py", "2 * s * b * (4 * h + (3 * h",
           "2 * s * b * (3 * h + (3 * h", ("tests/test_pp_ranks.py",)),
    "K8": ("planner/ranks.py", "kept = runtime and tl.keeps_sends",  # missed when planted
           "kept = tl.keeps_sends", ("tests/test_audit_k_rank_costs.py",)),
    "K9": ("planner/ranks.py", "last = tl.pp * len(tl.stages[0]) - 1", "last = tl.pp - 1", ("tests/test_pp_ranks.py",)),
    "K10": ("planner/ranks.py", "sum(split) * per_stage * rank.split_grads",
            "sum(split) * rank.split_grads", ("tests/test_pp_ranks.py",)),
    "K11": ("planner/ranks.py", '(options[o]["retained"] + rank.split_grads)',  # missed when planted
            'options[o]["retained"]', ("tests/test_audit_k_rank_costs.py",)),
    "K12": ("planner/pipeline_text.py", "return plan.uniform_step_time_s / plan.step_time_s - 1",
            "return plan.step_time_s / plan.uniform_step_time_s - 1", ("tests/test_pp_ranks.py",)),
    "K13": ("experiments/planner.py", "for a, b in zip(RECOMPUTE, RECOMPUTE[1:])):",
            "for a, b in zip(RECOMPUTE, RECOMPUTE[2:])):", ("tests/test_audit_h_calibration.py",)),
    "K14": ("analysis/planner.py", "gates.negative_overhead(b / a - 1, 0,",
            "gates.negative_overhead(a / b - 1, 0,", ("tests/test_planner_summary.py",)),
    "K15": ("policies/region.py", "if isinstance(error, Exception) and not isinstance(error, _PASSED):",
            "if isinstance(error, RuntimeError) and not isinstance(error, _PASSED):", ("tests/test_clear_errors.py",)),
    "K16": ("policies/values.py", 'rtol = 0.0 if f.device.type == "cpu" else RTOL',
            "rtol = RTOL", ("tests/test_value_check.py",)),
    "K17": ("policies/values.py", "FIRST, EVERY = 2, 100", "FIRST, EVERY = 1, 100", ("tests/test_recompute_state.py",)),
    "K18": ("policies/values.py", "flat = t.reshape(-1) if t.is_contiguous() else None",
            "flat = t.reshape(-1) if not t.is_contiguous() else None", ("tests/test_recompute_state.py",)),
    "K19": ("policies/values.py", "bad = (~same.all(1)).nonzero()",
            "bad = (~same.any(1)).nonzero()", ("tests/test_recompute_state.py",)),
    "K20": ("policies/values.py",
            "{id(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)}, self.count + 1",
            "{id(t) for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)}, self.count",
            ("tests/test_value_check.py",)),
    "K21": ("policies/values.py", 'if mode == "every" or (mode == "sample" and',
            'if (mode == "sample" and', ("tests/test_recompute_state.py",)),
    "K22": ("policies/values.py", "    finally:\n        set_recompute_check(previous)",
            "    finally:\n        pass", ("tests/test_recompute_state.py",)),
    "K23": ("policies/region.py", "    random.setstate(state[0])\n    np.random.set_state(state[1])",
            "    random.setstate(state[0])", ("tests/test_recompute_state.py",)),
    "K24": ("policies/region.py",
            "        self.host_rng = _host_rng()\n        _set_host_rng(watch.host_rng)",
            "        _set_host_rng(watch.host_rng)\n        self.host_rng = _host_rng()",
            ("tests/test_recompute_state.py",)),
    "K25": ("policies/checkpoint.py", "forward.append(Record(sums, stats))",  # missed when planted
            "forward.append(Record(sums))", ("tests/test_audit_k_value_check.py",)),
    "K26": ("policies/checkpoint.py", '.split("+")[0].split(".")[:2])',
            '.split("+")[0].split(".")[:3])', ("tests/test_torch_versions.py",)),
    "K27": ("auto/measure.py", "inputs_real = all(is_real(t) for t in inputs)",
            "inputs_real = any(is_real(t) for t in inputs)", ("tests/test_auto_data_dependent.py",)),
    "K28": ("policies/values.py", "isinstance(args[0], torch.nn.Parameter)",
            "isinstance(args[0], torch.Tensor)", ("tests/test_tensor_plan_autocast.py", "tests/test_audit_j_plans.py")),
    "K29": ("drop_cheap.py", "KEPT_WATCHERS[-1](ctx.op_output)",  # missed when planted
            "KEPT_WATCHERS[0](ctx.op_output)", ("tests/test_audit_k_value_check.py",)),
    "K30": ("auto/tensors.py",
            "            if j in keep:\n                waiting -= self.ops[j].nbytes\n"
            "            peak = max(peak, full_stored + live + waiting)",
            "            peak = max(peak, full_stored + live + waiting)\n"
            "            if j in keep:\n                waiting -= self.ops[j].nbytes",
            ("tests/test_tensor_plans.py",)),
    "K31": ("auto/traps.py", "_side_effects(effects, set(names_of(checkpointed)))",
            "_side_effects(effects, set(names_of(rows)))", ("tests/test_recompute_state.py",)),
    "K32": ("policies/checkpoint.py", "not (self.once and self.entries > 1)",
            "not (self.once and self.entries > 2)", ("tests/test_recompute_safety.py",)),
    "K33": ("measure/peak.py", 'recompute_check("off")',
            'recompute_check("sample")', ("tests/test_audit_j_sampling.py",)),
    "K34": ("policies/region.py",  # when planted caught only through state another test file left in the worker
            "        self._check()\n        self.stack = self._replayed()\n"
            "        _state.depth = getattr(_state, \"depth\", 0) + 1\n",
            "        self._check()\n        _state.depth = getattr(_state, \"depth\", 0) + 1\n"
            "        self.stack = self._replayed()\n",
            ("tests/test_audit_k_recompute_context.py",)),
    "K35": ("auto/preserve.py",  # missed when planted
            "return {(id(m), attr): value for block in modules for m in block.modules()",
            "return {(id(m), attr): value for m in modules",
            ("tests/test_audit_k_side_effects.py",)),
    "K36": ("auto/measure.py", "if not (inputs_real and all(is_real(t) for t in model.parameters())):",
            "if not inputs_real:", ("tests/test_auto_data_dependent.py",)),
    "K37": ("policies/checkpoint.py", "    if version is None:\n        warnings.warn",  # missed when planted
            "    if version is not None:\n        warnings.warn", ("tests/test_audit_k_torch_version.py",)),
    "K38": ("auto/tensors.py", "        if counted(func, args):\n            self.live.append",
            "        if counted(func):\n            self.live.append", ("tests/test_audit_j_plans.py",)),
    "K39": ("auto/planning.py", "if sub and (m._forward_hooks or m._forward_pre_hooks)",  # missed when planted
            "if (m._forward_hooks or m._forward_pre_hooks)", ("tests/test_audit_k_side_effects.py",)),
    "K40": ("policies/region.py",  # missed when planted
            "        except Exception as error:\n            stack.close()\n",
            "        except Exception as error:\n",
            ("tests/test_audit_k_recompute_context.py",)),
}


def run_bug(copy: Path, bug: str) -> str:
    """CAUGHT (by which test), MISSED or STALE for one bug, planted in ``copy`` and reverted after."""
    file, old, new, tests = BUGS[bug]
    path = copy / "src/remat" / file
    original = path.read_text(encoding="utf-8")
    if original.count(old) != 1:
        return f"STALE ({original.count(old)} occurrences of its text)"
    path.write_text(original.replace(old, new), encoding="utf-8")
    try:
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-n", "2",
                              "-m", "not slow", *tests], cwd=copy, capture_output=True, text=True,
                             env={**os.environ, "PYTHONPATH": str(copy / "src")})
    finally:
        path.write_text(original, encoding="utf-8")
    failed = [line.split(" ")[1] for line in run.stdout.splitlines() if line.startswith(("FAILED", "ERROR"))]
    return f"CAUGHT by {failed[0]}" if run.returncode else "MISSED"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bugs", nargs="*", help="bug ids (default: all)")
    parser.add_argument("--check", action="store_true", help="only check that every bug's text occurs once")
    args = parser.parse_args()
    chosen = args.bugs or list(BUGS)
    if args.check:
        stale = [b for b in chosen if (ROOT / "src/remat" / BUGS[b][0]).read_text().count(BUGS[b][1]) != 1]
        print(f"bugs whose text does not occur exactly once: {stale or 'none'}")
        return 1 if stale else 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = copy_project(Path(tmp))
        outcomes = {b: run_bug(copy, b) for b in chosen}
    for bug, outcome in outcomes.items():
        print(f"bug {bug:>3}  {BUGS[bug][0]:<24s} {outcome}")
    counted = [b for b in outcomes if b[0].isdigit()]
    print(f"caught {sum(outcomes[b].startswith('CAUGHT') for b in counted)} of {len(counted)} (bugs 1–20); "
          f"probes A–F7: {sum(outcomes[b].startswith('CAUGHT') for b in outcomes if not b[0].isdigit())} of "
          f"{sum(not b[0].isdigit() for b in outcomes)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
