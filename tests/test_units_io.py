"""Byte sizes at the edges (GiB vs GB never confused) and atomic writes."""

from __future__ import annotations

import pandas as pd
import pytest

from remat.errors import UsageError
from remat.io import atomic_path, write_csv, write_json
from remat.units import format_bytes, parse_bytes


@pytest.mark.parametrize("text,expected", [
    ("80GiB", 80 * 2**30), ("80GB", 80 * 10**9), ("80 gib", 80 * 2**30), ("85899345920", 85899345920),
    (1024, 1024), ("1.5KiB", 1536), ("2e9", 2 * 10**9), ("512MiB", 512 * 2**20), ("1TB", 10**12),
])
def test_parse_bytes(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["80GiBs", "-1GB", "eighty", "", "1.2.3GB", "80 XB"])
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
