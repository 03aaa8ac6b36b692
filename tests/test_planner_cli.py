"""`remat plan`: output keys, formats, --out, and the exit codes of bad input (2) and infeasible budgets (3)."""

from __future__ import annotations

import json

import pytest

from remat.cli import main


def run(capsys, *argv):
    try:
        code = main(["plan", *argv])
    except SystemExit as exc:        # argparse's own errors (exit 2, one line)
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_contract_keys(capsys):
    code, out, _ = run(capsys, "--model", "gpt3-175b", "--memory", "80GiB", "--sp", "--format", "json",
                       "--sac-time-limit", "10")
    assert code == 0
    doc = json.loads(out)
    assert doc["feasible"] is True and doc["budget_bytes"] == 80 * 2**30
    assert len(doc["layers"]) == 12 and {"index", "policy"} <= set(doc["layers"][0])
    assert {"peak_bytes", "step_time_s", "recompute_flops", "offload_bytes"} <= set(doc["predicted"])
    assert doc["predicted"]["peak_bytes"] <= doc["budget_bytes"]
    assert sum(doc["memory"].values()) == doc["predicted"]["peak_bytes"]
    for name in ("none", "full", "sqrt-segments", "megatron-uniform", "megatron-block", "selective",
                 "torch-sac-milp"):
        assert {"peak_bytes", "step_time_s", "feasible"} <= set(doc["baselines"][name])
    assert doc["predicted"]["step_time_s"] <= min(b["step_time_s"] for b in doc["baselines"].values()
                                                  if b["feasible"]) * (1 + 1e-12)


def test_markdown_and_out_file(capsys, tmp_path):
    out_file = tmp_path / "plan.md"
    code, out, _ = run(capsys, "--model", "gpt-22b", "--memory", "80GiB", "--no-baselines", "--out",
                       str(out_file))
    assert code == 0 and out == ""
    text = out_file.read_text()
    assert "# Recompute plan: gpt-22b" in text and "| weights |" in text and "## Which layers and why" in text


def test_format_all_writes_what_each_format_alone_prints(capsys, tmp_path):
    # second method: each format planned and printed on its own
    argv = ["--model", "gpt-22b", "--memory", "60GiB", "--tp", "8", "--no-baselines"]
    code, out, err = run(capsys, *argv, "--format", "all", "--out", str(tmp_path))
    assert code == 0 and out.startswith("remat plan: wrote plan.md, plan.json") and not err, err
    files = {"md": "plan.md", "json": "plan.json", "hf": "hf.json", "nemo": "nemo.yaml",
             "torchtitan": "torchtitan.toml", "sac": "sac.py"}
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files.values())
    for fmt, name in files.items():
        code, alone, _ = run(capsys, *argv, "--format", fmt)
        assert code == 0 and (tmp_path / name).read_text() == alone.removesuffix("\n"), fmt


def test_gib_and_gb_are_different_budgets(capsys):
    docs = []
    for memory in ("80GiB", "80GB", str(80 * 2**30)):
        code, out, _ = run(capsys, "--model", "gpt-1t", "--memory", memory, "--format", "json",
                           "--no-baselines")
        assert code == 0
        docs.append(json.loads(out)["budget_bytes"])
    assert docs == [80 * 2**30, 80 * 10**9, 80 * 2**30]


@pytest.mark.slow
def test_budget_below_the_weights_exits_3_with_the_minimum(capsys, tmp_path):
    out_file = tmp_path / "plan.json"
    code, out, err = run(capsys, "--model", "gpt3-175b", "--memory", "10GiB", "--no-baselines",
                         "--out", str(out_file))
    assert code == 3 and not out_file.exists()
    assert "smallest budget that works is" in err and len(err.strip().splitlines()) == 1
    minimum = int(err.split("smallest budget that works is ")[1].split("(")[1].split(" bytes")[0])
    code, out, _ = run(capsys, "--model", "gpt3-175b", "--memory", str(minimum), "--no-baselines",
                       "--format", "json")
    assert code == 0 and json.loads(out)["predicted"]["peak_bytes"] <= minimum
    code, _, _ = run(capsys, "--model", "gpt3-175b", "--memory", str(minimum - 1), "--no-baselines")
    assert code == 3


@pytest.mark.parametrize("argv, field", [
    (["--memory=-5GiB"], "--memory"),
    (["--memory", "80XB"], "--memory"),
    (["--gpu", "v100"], "--gpu"),
    (["--reserve=-1GiB"], "--reserve"),
    (["--policies", "none,recompute"], "--policies"),
    (["--policies", "none,none"], "--policies"),
    (["--achievable", "0"], "--achievable"),
])
def test_bad_input_exits_2_naming_the_field(capsys, tmp_path, argv, field):
    out_file = tmp_path / "plan.json"
    code, out, err = run(capsys, "--model", "gpt3-175b", *argv, "--out", str(out_file))
    assert code == 2 and field in err and len(err.strip().splitlines()) == 1
    assert not out_file.exists()


def test_malformed_config_json_names_the_field(capsys, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "gpt2", "n_embd": "wide", "n_head": 12, "n_layer": 2,
                                "vocab_size": 100, "n_positions": 64}))
    code, _, err = run(capsys, "--model", str(path))
    assert code == 2 and "n_embd" in err
    path.write_text("{not json")
    code, _, err = run(capsys, "--model", str(path))
    assert code == 2 and len(err.strip().splitlines()) == 1


def test_calibrate_measures_layer_times_here(capsys):
    code, out, _ = run(capsys, "--model", "gpt-tiny", "--calibrate", "--memory", "1GiB", "--reserve", "0",
                       "--format", "json", "--no-baselines", "--policies", "none,full")
    assert code == 0
    doc = json.loads(out)
    assert doc["settings"]["time_source"] == "calibrated on this machine"
    assert doc["predicted"]["step_time_s"] > 0 and set(doc["counts"]) <= {"none", "full"}
    code, _, err = run(capsys, "--model", "gpt-tiny", "--calibrate", "--tp", "2")
    assert code == 2 and "--tp" in err


def test_budget_above_the_gpu_warns_once_and_still_plans(capsys):
    from remat.cli import main
    code = main(["plan", "--model", "gpt3-175b", "--memory", "200GiB", "--tp", "8", "--sp", "--pp", "8",
                 "--no-baselines", "--format", "json"])
    captured = capsys.readouterr()
    assert code == 0 and '"feasible": true' in captured.out
    assert captured.err.strip() == ("remat plan: warning: --memory 200.00 GiB exceeds the NVIDIA A100 SXM4 80GB's "
                                    "80.00 GiB")
