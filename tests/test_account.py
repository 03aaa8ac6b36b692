"""Per-layer accounting vs Korthikanti Table 2 at the paper's sizes (FakeTensorMode), the `remat account` CLI,
and the experiments/figures built on it."""

import json

import pytest

from remat.accounting import Item, _paper_faithful, account_layer
from remat.cli import main
from remat.experiments import korthikanti as tables
from remat.formulas import korthikanti

PAPER = ["gpt-22b", "gpt3-175b", "mt-nlg-530b", "gpt-1t"]
CONFIGS = tables.configurations(8)   # six TP techniques at t = 8, three without parallelism


@pytest.mark.parametrize("model", PAPER)
def test_every_model_and_mode_matches_table2(model):
    for technique, t, sp, mode in CONFIGS:
        acc = account_layer(model, mode, t, sp)
        where = (model, technique)
        assert abs(acc.rel_error) <= 0.005, where
        # term by term, the measured tensors are the paper's §4.1 terms
        cfg = (acc.seq, acc.micro_batch, acc.hidden, acc.heads, t, sp)
        assert acc.terms() == {name: korthikanti.term_bytes(name, *cfg)
                               for name in korthikanti.stored_terms(mode)}, where
        # the gap to the actual bytes is itemized, not hidden
        assert acc.bytes_per_layer_actual - acc.bytes_per_layer_measured == sum(acc.gap().values()), where


def test_what_the_paper_does_not_count_is_listed():
    acc = account_layer("gpt3-175b", "none", 8, False)
    apart = [i for i in acc.items if i.paper_term is None]
    assert [(i.module, i.shape) for i in apart] == [("ln_1", (2048, 1, 1))] * 2 + [("ln_2", (2048, 1, 1))] * 2
    assert all("statistics" in i.note for i in apart)
    assert acc.bytes_per_layer_actual - acc.bytes_per_layer_measured == sum(i.bytes for i in apart)
    assert account_layer("gpt3-175b", "full", 8, False).gap() == {}


def test_real_cpu_tensors_equal_fake_accounting():
    real = account_layer("gpt-tiny", "selective", 1, device="cpu")
    fake = account_layer("gpt-tiny", "selective", 1, device="fake")
    assert real.bytes_per_layer_actual == fake.bytes_per_layer_actual
    assert [(i.name, i.shape, i.bytes) for i in real.items] == [(i.name, i.shape, i.bytes) for i in fake.items]
    # fp32 run: every counted tensor but the bool masks is twice the paper's 16-bit size
    assert real.gap()["element size (stored vs the paper's 2 B / 1 B)"] == real.bytes_per_layer_measured - sum(
        i.paper_bytes for i in real.items if i.dtype == "torch.bool")


def test_cli_json(capsys):
    assert main(["account", "--model", "gpt-22b", "--mode", "selective", "--tp", "8", "--sp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["micro_batch"] == 4 and out["seq"] == 2048 and out["tp"] == 8 and out["sp"] is True
    assert out["bytes_per_layer_measured"] == out["bytes_per_layer_formula"] == 34 * 2048 * 4 * 6144 // 8
    assert out["bytes_per_layer_actual"] >= out["bytes_per_layer_measured"] and out["rel_error"] == 0
    assert {"name", "shape", "dtype", "bytes", "paper_term"} <= set(out["items"][0])
    assert {i["paper_term"] for i in out["items"]} - {None} == set(korthikanti.stored_terms("selective"))


@pytest.mark.parametrize("argv,flag", [
    (["--model", "gpt-22b", "--mode", "none", "--tp", "3"], "--tp"),          # t does not divide a = 64
    (["--model", "gpt-22b", "--mode", "none", "--tp", "1", "--sp"], "--sp"),   # SP without TP
    (["--model", "gpt-22b", "--mode", "offload"], "--mode"),                  # unknown mode
    (["--model", "gpt-tiny", "--mode", "none", "--tp", "2", "--sp", "--seq", "31"], "--seq"),
    (["--model", "llama-tiny", "--mode", "none", "--tp", "4"], "--tp"),       # t = 4 does not divide kv = 2
])
def test_cli_bad_input_one_line_exit_2(argv, flag, capsys):
    assert main(["account", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"remat account: error: {flag}:")


def test_flops_per_layer_match_appendix_a():
    frame = tables.flops(tables.FlopsParams(models=["gpt3-175b"], tp=[8]))
    s, b, h = 2048, 1, 12288
    for row in frame.to_dict("records"):
        assert row["flops_forward"] == 24 * b * s * h * h + 4 * b * s * s * h
        assert row["flops_backward"] == 2 * row["flops_forward"]
        assert row["flops_recompute"] == row["recompute_text"]   # the text's 4bs²h, not Eq. 8's 12bs²h
    selective = frame[frame["mode"] == "selective"].iloc[0]
    assert selective["recompute_eq8"] == 3 * selective["flops_recompute"]


def test_table2_items_memory_experiments_and_figures(tmp_path):
    from remat.figures import draw
    params = tables.AccountingParams(models=["gpt-tiny"], tp=2)
    table = tables.table2(params)
    assert len(table) == 9 and (table["rel_error"].abs() <= 0.005).all()
    base = table[(table["technique"] == "TP baseline")].iloc[0]
    assert base["percent_of_baseline"] == 100
    items = tables.items(params)
    counted = items.dropna(subset=["paper_term"])
    for (technique, t, term), group in counted.groupby(["technique", "tp", "paper_term"]):
        assert group["paper_bytes"].sum() == group["term_formula_bytes"].iloc[0], (technique, term)
    memory = tables.memory(tables.MemoryParams(models=["gpt3-175b"]))
    row = memory[memory["technique"] == "TP+SP+selective"].iloc[0]
    assert row["activations_layers"] == round(34 * 2048 * 12288 // 8 * 96 * (1 + 7 / 24))
    assert row["model_state_bytes"] == 18 * row["params_per_gpu"]
    for name, frame in (("korthikanti-percent", table), ("korthikanti-memory", memory)):
        csv = tmp_path / f"{name}.csv"
        frame.to_csv(csv, index=False)
        draw(name, [str(csv)], str(tmp_path / f"{name}.png"))
        assert (tmp_path / f"{name}.png").stat().st_size > 10_000 and (tmp_path / f"{name}.svg").exists()


def test_overlapping_saved_views_are_counted_once_in_the_paper_faithful_bytes():
    """Two saved views of one 150-byte storage, 100 bytes each (they overlap by 50: slack −50), count the
    storage's bytes once — each at 3/4 — while a view with a storage larger than itself counts whole:
    (100 + 100)·3/4 + 200 = 350 paper bytes, by hand."""
    item = lambda storage, nbytes: Item(f"m/{storage}", "m", "op", (nbytes,), "torch.uint8", nbytes, "q_k",
                                        nbytes, storage, "")
    items = [item("shared", 100), item("shared", 100), item("alone", 200)]
    assert _paper_faithful(items, {"shared": 150 - 200, "alone": 300 - 200}) == 350
    assert _paper_faithful(items, {}) == 400          # no overlap reported: every view counts whole
