"""The host side of offload as settings: GPUs sharing one host-link uplink (the per-GPU link the planner and
the break-even price offload with) and host memory per GPU — presets, overrides, `remat plan` flag."""

from __future__ import annotations

import pytest

from remat.errors import UsageError
from remat.timemodel.gpus import GPUS, gpu


def test_dgx_a100_shares_one_x16_uplink_between_two_gpus():
    """A100 SXM4 80GB: 80 % of PCIe Gen4 ×16's 32 GB/s = 25.6 GB/s per direction, 2 GPUs per uplink (DGX A100:
    8 GPUs on 4 PCIe switches) -> 12.8 GB/s each; the link's own rate is unchanged."""
    g = gpu("a100-80gb")
    assert g.gpus_per_host_link == 2 and gpu("a100-40gb").gpus_per_host_link == 2
    assert g.link_bytes_per_s == pytest.approx(25.6e9, rel=1e-15)
    assert g.link_per_gpu_bytes_per_s == pytest.approx(12.8e9, rel=1e-15)
    assert (g.link.bw_d2h, g.link.bw_h2d, g.link.t0_s) == (g.link_per_gpu_bytes_per_s, g.link_per_gpu_bytes_per_s,
                                                           10e-6)
    assert "WP-10083-001" in g.host_source and "2 TB / 8 GPUs" in g.host_source


def test_every_preset_states_its_host_assumptions():
    for name, g in GPUS.items():
        assert g.gpus_per_host_link >= 1 and g.host_source, name
        if g.gpus_per_host_link == 1:
            assert "assumed" in g.host_source, name      # no datasheet says so: the text must say it is assumed
    assert gpu("h100-80gb").link.bw_d2h == pytest.approx(51.2e9, rel=1e-15)  # Gen5: 0.8 × 64 GB/s, 1 per uplink


def test_overrides_divide_the_link_and_set_host_memory():
    """4 GPUs on a 20 GB/s uplink: 5 GB/s each; host memory 128 GiB = 2^37 bytes per GPU."""
    g = gpu("a100-80gb", link_bytes_per_s=20e9, gpus_per_host_link=4, host_memory_bytes=2**37)
    assert g.link.bw_d2h == 5e9 and g.host_memory_bytes == 2**37
    assert gpu("a100-80gb", gpus_per_host_link=None).gpus_per_host_link == 2   # None keeps the preset's


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_bad_sharing_names_the_field(bad):
    with pytest.raises(UsageError, match="gpus_per_host_link"):
        gpu("a100-80gb", gpus_per_host_link=bad)


def test_planner_prices_offload_on_the_per_gpu_link():
    """The planner's exposed offload time with 2 GPUs on a 25.6 GB/s uplink equals the time on an unshared
    12.8 GB/s link, and is longer than with the uplink to itself."""
    from remat.models.presets import from_name
    from remat.planner.costs import Settings, per_micro_batch
    cfg = from_name("gpt3-175b", layers=1)

    def exposed(**over):
        costs = per_micro_batch(cfg, Settings(gpu=gpu("a100-80gb", **over), budget_bytes=80 * 2**30))
        return costs["offload"]["exposed"]

    shared = exposed()
    assert shared == pytest.approx(exposed(link_bytes_per_s=12.8e9, gpus_per_host_link=1), rel=1e-12)
    assert exposed(gpus_per_host_link=1) < shared


def test_plan_flag_reaches_the_gpu_preset(monkeypatch, capsys):
    import remat.planner
    from remat.cli import main
    seen = {}

    def fake_plan_model(cfg, **kwargs):
        seen.update(kwargs["gpu_overrides"])
        return "plan"
    monkeypatch.setattr(remat.planner, "plan_model", fake_plan_model)
    assert main(["plan", "--model", "gpt-22b", "--gpus-per-host-link", "1", "--host-memory", "128GiB"]) == 0
    assert seen["gpus_per_host_link"] == 1
    assert main(["plan", "--model", "gpt-22b"]) == 0
    assert seen["gpus_per_host_link"] is None          # the preset's
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--model", "gpt-22b", "--gpus-per-host-link", "0"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--gpus-per-host-link" in err and len(err.strip().splitlines()) <= 2
