"""--check-small (remat.auto.check): the peak error it reports is the prediction's error relative to the measured
peak, predicted / measured − 1 (positive: the plan over-predicts, safe; negative: it under-predicts), with cases
where the two differ both ways; and the check's own boundaries, each side: the activations set the peak once
none's predicted peak is over MARGIN (1.2) × every block full's, and the plan's budget fraction lies in [0, 1].
The model runs are replaced by fixed numbers, so the definitions are checked alone, in milliseconds."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from remat.auto import check
from remat.errors import UsageError


def _rows(monkeypatch, predicted: dict, measured: int) -> dict:
    """check._rows over setups named by their predicted peak (None: not planned, as hf-full), every step measured
    at ``measured`` bytes."""
    monkeypatch.setattr(check, "_configure", lambda model, name, policies: None)
    monkeypatch.setattr(check, "_measure", lambda model, kwargs, seed: {
        "saved_bytes": 0, "measured_peak_bytes": measured, "grads": [torch.zeros(2)]})
    monkeypatch.setattr(check, "_predicted", lambda problem, setup: (predicted[setup], str(setup)))
    rows, _ = check._rows(None, {}, {name: name for name in predicted}, None, 0, {})
    return {r["setup"]: r for r in rows}


def test_the_peak_error_is_predicted_over_measured_minus_one(monkeypatch):
    """Measured 1,000 bytes: predicted 1,250 is +25 % (over-predicted), 800 is −20 % (under), 1,000 is 0; the
    measurement is the reference (the swapped ratio would read −20 % and +25 %)."""
    rows = _rows(monkeypatch, {"over": 1250, "under": 800, "exact": 1000, "hf-full": None}, 1000)
    assert rows["over"]["peak_error"] == pytest.approx(0.25, abs=1e-12)
    assert rows["under"]["peak_error"] == pytest.approx(-0.20, abs=1e-12)
    assert rows["exact"]["peak_error"] == 0
    assert rows["hf-full"]["peak_error"] is None and rows["hf-full"]["predicted_peak_bytes"] is None
    assert rows["over"]["predicted_peak_bytes"] == 1250 and rows["over"]["measured_peak_bytes"] == 1000


class _Stop(Exception):
    """Raised where the tests below have seen what they need (the instance would be built next)."""


def _seqs_tried(monkeypatch, highs: dict, fraction: float = 0.5, seq=None) -> list[int]:
    """The sequence lengths check_small plans at (every block full's predicted peak 1,000 bytes, none's
    ``highs[seq]``) before it builds the instance; a 1,024-position config, not narrowed."""
    tried = []

    def fake_plan(config, layers, s, *rest):
        tried.append(s)
        return SimpleNamespace(policies=("none",) * layers, costs=SimpleNamespace(trainable_bytes=0)), 1000, highs[s]

    def stop(need):
        raise _Stop
    monkeypatch.setattr(check, "_fake_plan", fake_plan)
    monkeypatch.setattr(check, "_check_room", stop)
    config = SimpleNamespace(to_dict=dict, vocab_size=32000, max_position_embeddings=1024)
    with pytest.raises(_Stop):
        check.check_small(config, layers=2, seq=seq, width=None, fraction=fraction)
    assert config.vocab_size == 1024 and config.dtype == "float32"
    return tried


def test_the_shortest_sequence_whose_activations_set_the_peak_by_over_the_margin_is_taken(monkeypatch):
    """none's peak exactly 1.2 × full's (1,200 of 1,000) is not over the margin: the next length is tried; 1,201 is
    over it: that length is taken. None over it: every length up to the context is tried."""
    assert check.MARGIN == 1.2
    assert _seqs_tried(monkeypatch, {128: 1200, 256: 1201, 512: 5000, 1024: 5000}) == [128, 256]
    assert _seqs_tried(monkeypatch, {128: 1201}) == [128]
    assert _seqs_tried(monkeypatch, dict.fromkeys(check.SEQS, 1200)) == [128, 256, 512, 1024]
    assert _seqs_tried(monkeypatch, {64: 1000}, seq=64) == [64]          # a given length is taken as it is


@pytest.mark.parametrize("fraction", [0.0, 1.0])
def test_a_fraction_at_either_end_is_accepted(monkeypatch, fraction):
    assert _seqs_tried(monkeypatch, {128: 2000}, fraction=fraction) == [128]


@pytest.mark.parametrize("fraction", [-1e-9, 1.0 + 1e-9])
def test_a_fraction_outside_zero_to_one_names_the_field(fraction):
    with pytest.raises(UsageError) as exc:
        check.check_small(SimpleNamespace(to_dict=dict), fraction=fraction)
    assert exc.value.field == "fraction"
