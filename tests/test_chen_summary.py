"""The chen2016 findings (remat.analysis.chen2016): each judge rule the report uses fails on a wrong value
(expected values from the paper or by hand), and findings on small hand-made tables take every status."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from remat.analysis import catalog, chen2016 as chen
from remat.analysis.findings import INVALID, MINOR, NOT_MEASURED, NOT_REPRODUCED, NOT_REPRODUCIBLE, REPRODUCED, Findings
from remat.paper import PAPER


def holds(id: str, ours: float) -> bool:
    paper, rule = chen.RULES[id]
    return rule.check(ours, PAPER[paper].value)[0]


@pytest.mark.parametrize("id,good,bad", [
    ("sqrt", 0.55, 0.62),              # within_abs: |exponent − 0.5| ≤ 0.1; logarithmic (≈ 0.2) is not
    ("sqrt-forwards", 0.96, 0.5),      # one extra forward pass ± 0.1; half a pass is another schedule
    ("recursion", 1.0, 2.0),           # one checkpoint per doubling ± 0.25
    ("recursion-forwards", 0.6, 0.0),  # O(n log n): ½ forward per layer per doubling ± 0.25; O(n) adds none
    ("resnet-sqrt", 0.6, 0.84),        # sub-linear: slope ≤ 0.75; a linear law bent by a fixed part is not
    ("resnet", 7.5, 10.5),             # 48/7 = 6.86×; 10.5 / 6.86 − 1 = +53 %, beyond ±25 %
    ("resnet-limit", 240, 294),        # 200 layers ± 25 %: 150–250
    ("resnet-sharing", 2.5, 3.6),      # the paper's band, 2–3×
    ("lstm", 6.4, 9.0),                # "more than 4×" read as 4–8×
    ("speed", 43, 46),                 # about 30 % ± 15 pp
    ("drop-cheap", 10, 20),            # "little": at most 15 %, half of the extra forward's 30 %
    ("backward", 1.8, 1.5),            # backward ≈ 2× forward ± 0.25
])
def test_each_rule_fails_on_a_wrong_value(id, good, bad):
    assert holds(id, good) and not holds(id, bad)


def test_range_rule_is_two_sided():
    assert not holds("lstm", 3.9) and not holds("resnet-sharing", 1.9) and not holds("drop-cheap", -1)


def found_with(root, table: str, frame: pd.DataFrame, device: str | None = None) -> Findings:
    """The chen2016 findings once ``frame`` is table ``chen.<table>`` (of ``device``) under ``root``."""
    path = catalog.path(f"chen.{table}", device, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    frame.to_csv(path, index=False)
    return Findings(chen.findings(root))


def depth_table(sqrt_exponent: float) -> pd.DataFrame:
    """Four schedules over L = 4…256: √L segments with peak ∝ L^sqrt_exponent; the recursion and Revolve add one
    x (256 bytes) per doubling of L."""
    L = np.array([4, 16, 64, 256])
    rows = {"none": (L * 512, L * 0 + 1, L),
            "sqrt": (100 * L ** sqrt_exponent, np.ceil(np.sqrt(L)), 2 * L - np.sqrt(L)),
            "recursive": (256 * np.log2(L) + 512, L * 0 + 1, L + L / 2 * np.log2(L)),
            "revolve": (256 * np.log2(L) + 512, np.log2(L), 1.5 * L)}
    return pd.concat([pd.DataFrame({"family": f, "layers": L, "peak_bytes": peak, "param": param, "forwards": fwd,
                                    "extra_forwards": fwd - L, "x_bytes": 256})
                      for f, (peak, param, fwd) in rows.items()])


def resnet_table(after_gb: float) -> pd.DataFrame:
    """Depths 100…1000; sharing linear (60 GB at 1000), sublinear ∝ √depth; 1 MB of parameters per layer."""
    d = np.array([100, 200, 500, 1000])
    plans = {"no-opt": 3 * 60e9 * d / 1000, "sharing": 60e9 * d / 1000, "sublinear": after_gb * 1e9 * np.sqrt(d / 1000),
             "sqrt": 1.1 * after_gb * 1e9 * np.sqrt(d / 1000), "optimal": after_gb * 1e9 * np.sqrt(d / 1000)}
    return pd.concat([pd.DataFrame({"depth": d, "strategy": s, "planned_bytes": b, "live_peak_bytes": b,
                                    "recompute_ratio": 0.0, "batch": 32, "image": 224, "blocks": "3-4-6-3",
                                    "layers": d, "nodes": 10 * d, "trace_s": 1.0, "other_ops": 0,
                                    "params": 250_000 * d, "param_bytes": 1e6 * d})
                      for s, b in plans.items()])


def test_depth_findings_reproduced_and_differs(tmp_path):
    found = found_with(tmp_path, "depth", depth_table(0.5))
    assert found["sqrt"].status == REPRODUCED and found["sqrt"].value == pytest.approx(0.5)
    assert found["recursion"].status == REPRODUCED and found["recursion"].value == pytest.approx(1.0)
    assert found["sqrt-forwards"].value == pytest.approx(1 - 1 / 16)   # L = 256: 256 − 16 extra of 256
    assert found["recursion-forwards"].value == pytest.approx(0.5)     # forwards / L = 1 + ½·log₂ L
    assert found_with(tmp_path, "depth", depth_table(0.8))["sqrt"].status == NOT_REPRODUCED


def test_resnet_is_judged_with_weights_gradients_and_momentum(tmp_path):
    """At 1000 layers: feature maps + 3 × 1 GB (weights, gradients, momentum); (60 + 3) / (a + 3) = 48 / 7 for
    a = 63 · 7 / 48 − 3. The 12 GB limit: 60 MB + 3 MB per layer, 12e9 / 63e6 = 190.5 layers (200 maps alone)."""
    found = found_with(tmp_path, "resnet", resnet_table(after_gb=63 * 7 / 48 - 3))
    assert found["resnet"].status == REPRODUCED and found["resnet"].value == pytest.approx(48 / 7)
    assert found["resnet-limit"].status == REPRODUCED and found["resnet-limit"].value == pytest.approx(12e9 / 63e6)
    assert found["resnet-limit"].ours == "190 layers with weights, gradients and momentum (200 with feature maps alone)"
    assert found["resnet-sharing"].status == REPRODUCED                  # 3 × 60 → 60: 3×, the band's edge
    assert found["resnet-sqrt"].status == REPRODUCED                     # slope 0.5: sub-linear
    resnet = found_with(tmp_path, "resnet", resnet_table(after_gb=4))["resnet"]       # 63 / 7 = 9×: +31 %
    assert resnet.status == MINOR and resnet.value == pytest.approx(9)        # 9 / 6.9 = +30 %: within 2 × 25 %
    assert "(10.3×, 62.00 GB → 6.00 GB without momentum; feature maps alone 15.0×, 60.00 GB" in resnet.ours


def speed_table(device: str, sublinear_overhead: float, drop_cheap: float = 0.1) -> pd.DataFrame:
    rows = [("none", 0.0), ("sublinear", sublinear_overhead), ("drop-cheap", drop_cheap)]
    return pd.DataFrame([{"device": device, "net": net, "strategy": s, "overhead": o, "step_time_s": 1 + o,
                          "step_time_iqr_s": 0.01, "flops_forward": 1e9, "flops_backward": 2.1e9}
                         for net in ("resnet", "lstm") for s, o in rows])


def test_speed_statuses(tmp_path):
    found = found_with(tmp_path, "speed", speed_table("cpu", 0.3, drop_cheap=0.5), "cpu")
    assert found["speed"].status == NOT_REPRODUCIBLE and "outside 0–15 %" in found["drop-cheap"].reason
    found = found_with(tmp_path, "speed", speed_table("cuda", 0.3), "cuda")
    assert found["speed"].status == found["drop-cheap"].status == found["backward"].status == REPRODUCED
    assert found["speed"].where == "GPU" and found["backward"].value == pytest.approx(2.1)
    found = found_with(tmp_path, "speed", speed_table("cuda", 0.6, drop_cheap=0.5), "cuda")
    # 60 % is 30 pp off; 50 % is not little
    assert found["speed"].status == found["drop-cheap"].status == NOT_REPRODUCED
    speed = found_with(tmp_path, "speed", speed_table("cuda", -0.2), "cuda")["speed"]   # recompute made it faster
    assert speed.status == INVALID and "below zero" in speed.reason


def test_missing_tables_give_every_finding_not_measured(tmp_path):
    found = chen.findings(tmp_path)
    assert [f.id for f in found] == [id for part in chen.GROUPS.values() for id in part]
    assert {f.status for f in found} == {NOT_MEASURED}
    by = Findings(found)
    assert by["sqrt"].reason == "snakemake results/chen/depth.csv" and by["sqrt"].paper == "O(√n)"
    assert by["speed"].scorecard == "Chen et al. 2016" and by["speed"].link == "chen2016.html#sec-speed"
    assert math.isnan(by["lstm"].value)
    assert list(chen.tables(tmp_path)["resnet"].columns) == ["not measured yet"]
