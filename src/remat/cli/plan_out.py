"""Where `remat plan` puts its plan: printed, written to --out, or with ``--format all`` one file per format into the
--out folder (``FILES``), each checked before any planning."""

from __future__ import annotations

import sys
from pathlib import Path

from remat.errors import UsageError
from remat.io import check_writable, write_text


FILES = {"md": "plan.md", "json": "plan.json", "hf": "hf.json", "nemo": "nemo.yaml", "torchtitan": "torchtitan.toml",
         "sac": "sac.py"}
"""``--format all``: the file each format is written to in the --out folder."""


def check_out(args) -> None:
    """--out, before any planning: a file that can be written, or with --format all an existing folder."""
    if args.format != "all":
        if args.out:
            check_writable(args.out)
        return
    if not args.out or not Path(args.out).is_dir():
        given = f", not {args.out!r}" if args.out else ""
        raise UsageError("--out", f"--format all writes one file per format ({', '.join(FILES.values())}): give an "
                                  f"existing folder{given}")
    for name in FILES.values():
        check_writable(Path(args.out) / name)


def formats(args, render):
    """``render(format)`` for --format, or with --format all a dict: format -> its text, or the UsageError of a
    trainer format that cannot hold this plan (not written; said on stderr)."""
    if args.format != "all":
        return render(args.format)
    out = {}
    for fmt in FILES:
        try:
            out[fmt] = render(fmt)
        except UsageError as exc:
            out[fmt] = exc
    return out


def emit(args, text) -> None:
    """The plan printed, or written to --out; with --format all (``formats``' dict) each format's file into the
    --out folder, and on stderr each format not written and why."""
    if not isinstance(text, dict):
        if args.out:
            write_text(args.out, text)
        else:
            print(text)
        return
    done = {fmt: one for fmt, one in text.items() if not isinstance(one, UsageError)}
    for fmt, one in done.items():
        write_text(Path(args.out) / FILES[fmt], one)
    print(f"remat plan: wrote {', '.join(FILES[fmt] for fmt in done)} to {args.out}")
    for fmt, one in text.items():
        if fmt not in done:
            print(f"remat plan: not written: {FILES[fmt]} ({one})", file=sys.stderr)
