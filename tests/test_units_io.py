"""Byte sizes at the edges (GiB vs GB never confused), atomic writes, and the number formatters of remat.units."""

from __future__ import annotations

import pandas as pd
import pytest

from remat import units as u
from remat.errors import UsageError
from remat.io import atomic_path, write_csv, write_json
from remat.units import format_bytes, parse_bytes


@pytest.mark.parametrize("text,expected", [
    ("80GiB", 80 * 2**30), ("80GB", 80 * 10**9), ("80 gib", 80 * 2**30), ("85899345920", 85899345920),
    (1024, 1024), ("1.5KiB", 1536), ("2e9", 2 * 10**9), ("512MiB", 512 * 2**20), ("1TB", 10**12),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["80GiBs", "-1GB", "eighty", "", "1.2.3GB", "80 XB", True, False])
def test_parse_bytes_rejects_naming_field(text):
    with pytest.raises(UsageError, match="^--memory: "):
        parse_bytes(text, field="--memory")


def test_format_bytes():
    assert format_bytes(1536) == "1.50 KiB"
    assert format_bytes(1.6e9, binary=False) == "1.60 GB"
    assert format_bytes(12) == "12 B"


def test_atomic_write_leaves_nothing_on_failure(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_write_csv_and_json_roundtrip(tmp_path):
    frame = pd.DataFrame({"a": [1, 2], "b": ["x", "y"]})
    write_csv(tmp_path / "t.csv", frame)
    assert pd.read_csv(tmp_path / "t.csv").equals(frame)
    write_json(tmp_path / "d" / "t.json", {"k": 1})
    assert (tmp_path / "d" / "t.json").read_text().strip() == '{\n  "k": 1\n}'


def test_atomic_write_gives_normal_file_mode(tmp_path):
    import os
    write_json(tmp_path / "m.json", {})
    mask = os.umask(0)
    os.umask(mask)
    assert (tmp_path / "m.json").stat().st_mode & 0o777 == 0o666 & ~mask


# --- the number formatters the reports and the planner print with ---------------------------------------------

def test_span_and_span_text():
    assert (u.span("0.80", "0.80"), u.span("0.80", "0.90")) == ("0.80", "0.80–0.90")
    assert u.span_text([58.3, 66.8]) == "58–67%"
    assert u.span_text([33.33, 33.34]) == "33%"                   # ends that round alike: one value
    assert u.span_text([0.44, 1.75], 1) == "0.4–1.8%"
    assert u.span_text([1.0, 1.0], 3, "") == "1.000"
    assert u.span_text([1.361, 1.392], 2, "×") == "1.36–1.39×"
    with pytest.raises(ValueError):
        u.span_text([])


def test_ceil_text():
    assert u.ceil_text(3.24, 1) == "3.3" and u.ceil_text(14.5, 1) == "14.5"
    assert u.ceil_text(0.1, 1) == "0.1"   # no float noise pushing it to 0.2
    assert u.ceil_text(0.011, 2) == "0.02" and u.ceil_text(2, 0) == "2"


def test_percent():
    assert u.percent(0.1234) == "12.3%" and u.percent(0.02, 0) == "2%"


def test_signed_percent():
    assert u.signed_percent(0.464, 0) == "+46%" and u.signed_percent(-0.02, 0) == "−2%"   # a true minus sign
    assert u.signed_percent(0.0123, 2, "") == "+1.23" and u.signed_percent(-0.0625, 2, "") == "−6.25"
    assert u.MINUS == "−" and "-" not in u.signed_percent(-0.5)
    # what rounds to zero has no sign, whatever the digits or the unit
    zeros = (u.signed_percent(0.0, 0), u.signed_percent(-1e-9, 2, ""), u.signed_percent(0.004, 0))
    assert zeros == ("0%", "0.00", "0%")
    assert u.signed_percent(0.1234) == "+12.3%" and u.signed_percent(float("nan")) == "—"
