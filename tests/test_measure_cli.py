"""`remat measure`: the JSON contract and one-line errors with exit 2 (in-process and in a subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import run_cli

REQUIRED = ["model", "policy", "device", "dtype", "layers", "seq", "micro_batch", "activation_bytes",
            "activation_bytes_per_layer", "peak_bytes", "peak_method", "flops_forward", "flops_backward",
            "flops_recompute", "step_time_s", "torch_version"]


def run_main(capsys, *argv):
    return run_cli(capsys, "measure", *argv)


def test_json_has_the_contract_fields(capsys):
    code, out, err = run_main(capsys, "--model", "gpt-tiny", "--policy", "selective", "--device", "fake",
                              "--layers", "3", "--seq", "16", "--micro-batch", "2", "--dtype", "bfloat16", "--json")
    assert code == 0 and err == ""
    row = json.loads(out)
    assert set(REQUIRED) <= row.keys()
    assert (row["model"], row["policy"], row["device"], row["dtype"], row["layers"], row["seq"],
            row["micro_batch"]) == ("gpt-tiny", "selective", "fake", "bfloat16", 3, 16, 2)
    assert len(row["activation_bytes_per_layer"]) == 3 and row["step_time_s"] is None


def test_cpu_run_times_the_step(capsys):
    code, out, _ = run_main(capsys, "--model", "llama-tiny", "--policy", "full", "--device", "cpu",
                            "--layers", "1", "--json")
    row = json.loads(out)
    assert code == 0 and row["step_time_s"] > 0 and len(row["step_time_samples"]) == 5


def bad_config(tmp_path, **changes):
    raw = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
           "num_hidden_layers": 2, "intermediate_size": 128, "vocab_size": 100, **changes}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw))
    return str(path)


@pytest.mark.parametrize("argv, field", [
    (["--model", "gpt-9000"], "model"),
    (["--model", "gpt-tiny", "--seq", "0"], "--seq"),
    (["--model", "gpt-tiny", "--seq", "-3"], "--seq"),
    (["--model", "gpt-tiny", "--policy", "sometimes"], "policy"),
    (["--model", "gpt-tiny", "--policy", "uniform:0"], "policy"),
    (["--model", "gpt-tiny", "--repeats", "4"], "--repeats"),
    (["--model", "gpt-tiny", "--dtype", "int8"], "--dtype"),
])
def test_bad_input_one_line_exit_2(capsys, argv, field):
    argv = [*argv, "--device", "fake"] + ([] if "--policy" in argv else ["--policy", "none"])
    code, out, err = run_main(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and field in err


@pytest.mark.parametrize("changes, field", [
    ({"num_attention_heads": 5}, "num_attention_heads"),     # heads not dividing hidden
    ({"num_key_value_heads": 3}, "num_key_value_heads"),     # KV groups not dividing heads
    ({"model_type": "t5"}, "model_type"),                    # unsupported
    ({"hidden_size": "64"}, "hidden_size"),                  # malformed
])
def test_bad_config_json_one_line_exit_2(capsys, tmp_path, changes, field):
    code, out, err = run_main(capsys, "--model", bad_config(tmp_path, **changes), "--policy", "none",
                              "--device", "fake")
    assert code == 2 and out == "" and err.count("\n") == 1 and field in err


@pytest.mark.slow
def test_subprocess_exit_code_and_one_line(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{ not json")
    proc = subprocess.run([sys.executable, "-m", "remat.cli", "measure", "--model", str(path), "--policy",
                           "none", "--device", "fake", "--json"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "config.json" in proc.stderr
