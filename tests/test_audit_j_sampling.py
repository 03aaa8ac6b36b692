"""The sampled value check (remat.policies.values): a region is checked while fewer than FIRST of its recomputes were
compared (the second training step is still checked, the third not), then on its forwards 1, 1 + EVERY, ... counted
over forwards that record a graph only (evaluation forwards under no_grad are not counted). remat's measurements
switch the check off while they run and give the mode back afterwards."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remat import auto
from remat.errors import RecomputeError
from remat.measure.peak import PeakMemory
from remat.measure.timing import time_steps
from remat.policies import recompute_check
from remat.policies.values import EVERY, FIRST, Tally, check_for


class Drifting(nn.Module):
    """tanh(lin(x) · c) with c = 1 on its first ``faithful`` calls and the call number after: a step whose forward
    and recompute both fall in the first calls recomputes faithfully, every later step differs."""

    def __init__(self, faithful: int):
        super().__init__()
        torch.manual_seed(0)
        self.lin, self.calls, self.faithful = nn.Linear(8, 8), 0, faithful

    def forward(self, x):
        self.calls += 1
        return torch.tanh(self.lin(x) * (1.0 if self.calls <= self.faithful else float(self.calls)))


def _model(faithful: int):
    m = nn.Sequential(Drifting(faithful))
    auto.apply(m, "full")
    return m


def test_the_second_training_step_is_checked_and_the_third_is_not():
    # calls 1-2 (step 1) faithful: one recompute compared; step 2 (calls 3, 4) differs and is checked (1 < FIRST);
    # its compare is the second, so step 3 (forward 3, not 1 + k·EVERY) is not checked
    assert FIRST == 2
    m, x = _model(2), torch.randn(4, 8)
    with recompute_check("sample"):
        m(x).sum().backward()
        with pytest.raises(RecomputeError, match=r"^0: recomputing aten\.mul"):
            m(x).sum().backward()
        m(x).sum().backward()


def test_after_the_first_steps_forward_one_plus_every_is_checked_and_evaluations_do_not_count():
    # steps 1 and 2 (calls 1-4) are faithful and use up the FIRST compares; then three evaluation forwards without
    # grad. Training forwards 3 … EVERY are not sampled although they differ; forward 1 + EVERY (step 101) is
    assert EVERY == 100
    m, x = _model(4), torch.randn(4, 8)
    with recompute_check("sample"):
        for _ in range(2):
            m(x).sum().backward()
        with torch.no_grad():
            for _ in range(3):
                m(x)
        for _ in range(3, EVERY + 1):
            m(x).sum().backward()
        with pytest.raises(RecomputeError, match=r"^0: recomputing aten\.mul"):
            m(x).sum().backward()


UNSAMPLED = Tally(forwards=5, checked=FIRST)      # a forward the sample skips: compares done, 5 ≠ 1 + k·EVERY


@pytest.mark.parametrize("mode", ["sample", "every"])
def test_a_peak_measurement_switches_the_check_off_and_gives_the_mode_back(mode):
    # the measurement stays referenced after its block (its peak is read there), as a caller keeps it
    with recompute_check(mode):
        with PeakMemory("cpu") as mem:
            assert check_for(Tally()) is None
        assert check_for(Tally()) is not None
        assert (check_for(UNSAMPLED) is not None) == (mode == "every")
        assert mem.peak_bytes is not None


def test_timing_switches_the_check_off_and_gives_the_mode_back():
    seen = []
    with recompute_check("every"):
        time_steps({"step": lambda: seen.append(check_for(Tally()))}, repeats=5, warmup=1)
        assert check_for(UNSAMPLED) is not None
    assert len(seen) == 6 and all(c is None for c in seen)
    # a model whose recompute differs from its second step on times without the check raising
    m, x = _model(2), torch.randn(4, 8)
    time_steps({"step": lambda: m(x).sum().backward()}, repeats=5, warmup=1)
