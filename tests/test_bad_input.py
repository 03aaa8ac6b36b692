"""Bad input, table-driven: each case gives one line on stderr naming the field, exit 2, and writes nothing.

Covers CLI flags, experiment parameters and HuggingFace config.json files (pipeline config errors are in
test_config_validation.py). Runs `remat.cli.main` in-process (same code path as the console script).
"""

from __future__ import annotations

import json

import pytest

from remat.cli import main

CONFIG_JSON = {
    "malformed.json": "{bad json",
    "t5.json": json.dumps({"model_type": "t5", "hidden_size": 64}),
    "heads.json": json.dumps({"model_type": "gpt2", "n_embd": 100, "n_head": 3, "n_layer": 2,
                              "n_positions": 64, "vocab_size": 128}),
    "kv.json": json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                           "num_key_value_heads": 3, "num_hidden_layers": 2, "intermediate_size": 128,
                           "vocab_size": 128}),
    "nohidden.json": json.dumps({"model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2,
                                 "vocab_size": 128}),
    "neglayers.json": json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                                  "num_hidden_layers": -2, "intermediate_size": 128, "vocab_size": 128}),
    "list.json": json.dumps([1, 2, 3]),
    "deep.json": json.dumps({"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
                             "num_hidden_layers": 2000, "intermediate_size": 128, "vocab_size": 128}),
    "naneps.json": '{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, '
                   '"intermediate_size": 128, "vocab_size": 128, "rms_norm_eps": NaN}',
    "notype.json": json.dumps({"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}),
    "empty.csv": "",
    "header.csv": "a,b\n",
}

M = ["measure", "--model", "gpt-tiny", "--device", "cpu", "--no-timing"]

CASES = [
    # (argv, text the one line must contain)
    (["check", "--layers", "-3"], "--layers"),
    (["check", "--layers", "2.5"], "--layers"),
    (["check", "--layers", "abc"], "--layers"),
    (["check", "--width", "0"], "--width"),
    (["check", "--bogus"], "--bogus"),
    (["measure", "--model", "nonesuch", "--policy", "none", "--device", "cpu"], "model"),
    ([*M, "--policy", "bogus"], "policy"),
    ([*M, "--policy", "uniform:0"], "policy"),
    ([*M, "--policy", "segments:x"], "policy"),
    ([*M, "--policy", "block:99"], "policy"),
    ([*M, "--policy", "none", "--seq", "0"], "--seq"),
    ([*M, "--policy", "none", "--seq", "-5"], "--seq"),
    ([*M, "--policy", "none", "--micro-batch", "0"], "--micro-batch"),
    ([*M, "--policy", "none", "--layers", "0"], "--layers"),
    ([*M, "--policy", "none", "--dtype", "int8"], "--dtype"),
    (["measure", "--model", "gpt-tiny", "--policy", "none", "--device", "tpu"], "--device"),
    (["measure", "--model", "{tmp}/missing.json", "--policy", "none", "--device", "cpu"], "model"),
    (["measure", "--model", "{tmp}/malformed.json", "--policy", "none", "--device", "cpu"], "config.json"),
    (["measure", "--model", "{tmp}/t5.json", "--policy", "none", "--device", "cpu"], "model_type"),
    (["measure", "--model", "{tmp}/heads.json", "--policy", "none", "--device", "cpu"], "head"),
    (["measure", "--model", "{tmp}/kv.json", "--policy", "none", "--device", "cpu"], "key_value_heads"),
    (["measure", "--model", "{tmp}/nohidden.json", "--policy", "none", "--device", "cpu"], "hidden_size"),
    (["measure", "--model", "{tmp}/neglayers.json", "--policy", "none", "--device", "cpu"], "num_hidden_layers"),
    (["measure", "--model", "{tmp}/list.json", "--policy", "none", "--device", "cpu"], "config.json"),
    (["measure", "--model", "{tmp}", "--policy", "none", "--device", "cpu"], "folder without a config.json"),
    (["plan", "--model", "{tmp}/deep.json"], "num_hidden_layers: 2000 layers: at most 1024"),
    (["plan", "--model", "{tmp}/naneps.json"], "rms_norm_eps"),
    (["plan", "--model", "{tmp}/notype.json"], "model_type: missing"),
    (["plan", "--model", "gpt3-175b", "--pp", "1", "--interleave", "2"], "--interleave"),
    (["plan", "--model", "gpt3-175b", "--dp", "4", "--global-batch", "6"], "--global-batch"),
    (["plan", "--model", "gpt3-175b", "--memory", "0"], "--memory"),
    (["plan", "--model", "gpt3-175b", "--memory", "80GiB", "--out", "{tmp}/missing/plan.md"],
     "--out: folder {tmp}/missing does not exist"),
    (["plan", "--model", "gpt3-175b", "--memory", "80GiB", "--out", "{tmp}"], "is a directory"),
    (["plan", "--model", "gpt3-175b", "--memory", "80GiB", "--out", "/proc/plan.md"], "cannot write into folder /proc"),
    (["plan", "--model", "gpt3-175b", "--memory", "80GiB", "--format", "all"], "--out: --format all writes one file"),
    (["plan", "--model", "gpt3-175b", "--memory", "80GiB", "--format", "all", "--out", "{tmp}/t5.json"],
     "give an existing folder"),
    (["plan", "--model", "gpt3-175b", "--memory", "-5GiB"], "--memory: must not be negative, got '-5GiB'"),
    (["plan", "--model", "gpt3-175b", "--memory", "80GiB", "--seq", "-1e3"], "'-1e3' is not an integer"),
    (["bandwidth", "--device", "tpu"], "--device"),
    (["bandwidth", "--min-size", "3KiB"], "--min-size"),
    (["bandwidth", "--max-size=-1GB"], "--max-size"),
    (["bandwidth", "--max-size", "12XB"], "--max-size"),
    (["bandwidth", "--repeats", "0"], "--repeats"),
    (["experiment", "chen-segments", "--params", '{"layers": 4, "ks": [5]}', "--out", "{tmp}/x.csv"], "ks"),
    (["experiment", "chen-depth", "--params", '{"depths": []}', "--out", "{tmp}/x.csv"], "depths"),
    (["experiment", "chen-check", "--params", '{"bogus": 1}', "--out", "{tmp}/x.csv"], "bogus"),
    (["experiment", "chen-check", "--params", '{"layers": 0}', "--out", "{tmp}/x.csv"], "layers"),
    (["experiment", "chen-segments", "--params", "notjson", "--out", "{tmp}/x.csv"], "--params"),
    (["experiment", "chen-segments", "--params", "[1, 2]", "--out", "{tmp}/x.csv"], "--params"),
    (["experiment", "nonesuch", "--params", "{}", "--out", "{tmp}/x.csv"], "name"),
    (["experiment", "planner-paired", "--params", '{"table": "{tmp}/nope.csv"}', "--out", "{tmp}/x.csv"],
     "planner.paired.table"),
    (["experiment", "planner-paired", "--params", '{"table": "{tmp}/header.csv"}', "--out", "{tmp}/x.csv"],
     "planner.paired.table"),
    (["figure", "chen-depth", "--inputs", "{tmp}/nope.csv", "--out", "{tmp}/f.png"], "--inputs"),
    (["figure", "chen-depth", "--inputs", "{tmp}/empty.csv", "--out", "{tmp}/f.png"], "--inputs"),
    (["figure", "chen-depth", "--inputs", "{tmp}/header.csv", "--out", "{tmp}/f.png"], "--inputs"),
    (["experiment", "chen-check", "--params", '{"layers": 2}', "--out", "{tmp}"], "--out"),
    (["report", "nonesuch"], "NAME"),
    (["report", "--engine", "quarto", "chen2016"], "--engine"),
    (["report", "--engine", "sideways"], "--engine"),
]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    for name, text in CONFIG_JSON.items():
        (tmp_path / name).write_text(text)
    monkeypatch.setenv("PATH", "/nonexistent")     # no quarto on PATH, whatever the machine has
    return tmp_path


@pytest.mark.parametrize("argv,field", CASES, ids=[" ".join(a[:3]) + f" [{i}]" for i, (a, _) in enumerate(CASES)])
def test_bad_input_one_line_exit_2_nothing_written(workdir, capsys, argv, field, root, monkeypatch):
    monkeypatch.chdir(root)            # report names resolve against the real reports/
    before = sorted(p.name for p in workdir.iterdir())
    argv = [a.replace("{tmp}", str(workdir)) for a in argv]
    try:
        code = main(argv)
    except SystemExit as exc:          # argparse errors
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert err.startswith("remat"), err
    assert field.replace("{tmp}", str(workdir)) in err, err
    assert sorted(p.name for p in workdir.iterdir()) == before


def test_plan_refuses_its_output_before_it_plans(tmp_path, capsys, monkeypatch):
    import remat.planner

    def planned(*args, **kwargs):
        raise AssertionError("planned before --out was checked")

    monkeypatch.setattr(remat.planner, "plan_model", planned)
    code = main(["plan", "--model", "gpt3-175b", "--memory", "80GiB", "--out", str(tmp_path / "no" / "plan.md")])
    assert code == 2 and "--out" in capsys.readouterr().err and not (tmp_path / "no").exists()


def test_an_allocation_that_does_not_fit_is_one_line(monkeypatch, capsys):
    # a real oversize run can be OOM-killed instead of failing its allocation, so the allocator's error is
    # raised where the measurement would allocate
    import remat.measure.step as step

    def refuse(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: "
                           "you tried to allocate 320000000000 bytes.")

    monkeypatch.setattr(step, "measure", refuse)
    code = main([*M, "--policy", "full", "--seq", "100000"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "does not fit in memory" in err, err
