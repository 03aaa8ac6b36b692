"""Shared pieces of the command line: one-line argparse errors, numeric argument types, the help style."""

from __future__ import annotations

import argparse
import json
import math
import re

from remat.models.presets import PRESETS

EXIT_CODES = ("exit codes: 0 ok, 1 a check failed, 2 bad input (one line naming the field; nothing written),\n"
              "            3 infeasible plan (names the smallest budget that works), 130 interrupted")


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit 2 (no usage dump), and a value that starts
    with a minus and a digit (``--memory -5GiB``, ``--seq -1e3``) is a value, judged by its field's own check,
    not a flag argparse would call missing."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = re.compile(r"^-\.?\d")   # argparse's own: plain negative numbers only

    def error(self, message: str):  # noqa: D401 - argparse API
        self.exit(2, f"{self.prog}: error: {message}\n")


def command(sub, name: str, summary: str, examples: list[str], details: str = "") -> argparse.ArgumentParser:
    """A subcommand in the house style: ``summary`` as its help and description (plus ``details``), its
    ``examples`` and the exit codes as the epilog."""
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples) + "\n\n" + EXIT_CODES
    return sub.add_parser(name, help=summary, description=summary + (f"\n\n{details}" if details else ""),
                          epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter)


def model_help() -> str:
    """The --model help: every preset, a config.json, or a model folder."""
    return f"a preset ({', '.join(PRESETS)}), a HuggingFace config.json, or a model folder holding one"


def number(kind: type, minimum: float, strict: bool = False):
    """An argparse type: ``kind`` (int or float) ≥ ``minimum`` (> when ``strict``); the error names the value."""
    noun = "an integer" if kind is int else "a number"
    bound = f"{'>' if strict else '≥'} {minimum:g}"

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {noun}") from None
        if value < minimum or (strict and value == minimum) or value != value:  # value != value: NaN
            raise argparse.ArgumentTypeError(f"{text!r} must be {bound}")
        return value

    convert.__name__ = f"{kind.__name__} {bound}"
    return convert


positive_int = number(int, 1)
nonnegative_int = number(int, 0)
positive_float = number(float, 0, strict=True)
nonnegative_float = number(float, 0)


def json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not valid JSON ({exc.msg})") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def emit(obj, as_json: bool, text: str | None = None) -> None:
    """Print ``obj`` as strict JSON (NaN and infinities as null) or ``text``."""
    print(json.dumps(_finite(obj), indent=2, default=str, allow_nan=False) if as_json
          else (text if text is not None else obj))


def _finite(obj):
    """``obj`` with every float NaN / ±inf replaced by None (JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj
