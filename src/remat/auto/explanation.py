"""What remat.auto.explain returns: an Explanation (per-block rows, the traps seen, totals), its Trap, and the
text they print as (a table of bytes kept vs plain per block, what is live at backward start, the traps).

    report = auto.explain(model, (), batch); print(report); report.to_json()

What each number counts: remat.auto.diagnose. Bytes print in binary units (KiB/MiB/GiB), FLOPs in the
matmul-like scope of torch's flop_counter.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

from remat.units import format_bytes


@dataclass(frozen=True)
class Trap:
    """One known trap seen in the step: ``code`` (remat.auto.traps.TRAPS), the ``blocks`` it concerns (qualified names),
    ``message`` (one sentence with the measured numbers) and ``fix`` (what to do)."""

    code: str
    blocks: tuple[str, ...]
    message: str
    fix: str

    def __str__(self) -> str:
        return f"[{self.code}] {self.message} Fix: {self.fix}"


@dataclass
class Explanation:
    """What one step kept and recomputed, per block, and the traps seen.

    rows: one dict per block (keys: index, block, mechanism, region, kept_bytes, plain_bytes, kept_share,
    predicted_bytes, recompute_flops, recompute_ops, forward_flops, inputs_require_grad, got_grads; bytes
    int, FLOPs int, None where not measured); traps: list of Trap; totals: dict of int bytes / FLOPs (kept,
    plain, predicted, recompute, outside the blocks, live at backward start and what explains it, excess).
    Row keys also: saved_bytes / cache_bytes (the two parts of kept_bytes), input_bytes, declared (an
    auto.apply policy, "hf", or None), calls.
    """

    rows: list[dict]
    traps: list[Trap]
    totals: dict
    blocks: str = ""
    device: str = ""

    def codes(self) -> list[str]:
        """The trap codes seen, in order."""
        return [t.code for t in self.traps]

    def to_json(self) -> str:
        """The explanation as a JSON string (bytes as int bytes, FLOPs as int FLOPs)."""
        return json.dumps({"blocks": self.blocks, "device": self.device, "rows": self.rows,
                           "traps": [dataclasses.asdict(t) for t in self.traps], "totals": self.totals},
                          indent=2, default=str)

    def __str__(self) -> str:
        return render(self)


def names_of(rows) -> tuple[str, ...]:
    """The qualified block names of ``rows``."""
    return tuple(r["block"] for r in rows)


def span_of(rows) -> str:
    """``rows`` named in a sentence: "block x" or "blocks first … last (n)"."""
    if len(rows) == 1:
        return f"block {rows[0]['block']}"
    return f"blocks {rows[0]['block']} … {rows[-1]['block']} ({len(rows)})"


def bytes_text(n) -> str:
    """Bytes (int) in binary units, "—" for None."""
    return "—" if n is None else format_bytes(n)


def share_text(part, whole) -> str:
    """``part`` of ``whole`` as a whole percent, "—" when ``whole`` is 0 or None."""
    return "—" if not whole else f"{100 * part / whole:.0f} %"


def flops_text(n) -> str:
    """FLOPs (int) in the largest decimal unit it reaches, "—" for None."""
    if n is None:
        return "—"
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n} FLOP"


def render(e: Explanation) -> str:
    """The text of ``print(explanation)``: the per-block table, its totals, live bytes at backward start, traps."""
    t = e.totals
    head = ["block", "checkpointing", "kept", "plain", "kept/plain", "predicted", "recompute", "fwd (plain)"]
    rows = [[r["block"], r["mechanism"], bytes_text(r["kept_bytes"]), bytes_text(r["plain_bytes"]),
             share_text(r["kept_bytes"], r["plain_bytes"]), bytes_text(r["predicted_bytes"]),
             flops_text(r["recompute_flops"]),
             flops_text(r["forward_flops"])] for r in e.rows]
    rows.append(["total", "", bytes_text(t["kept_bytes"]), bytes_text(t["plain_bytes"]),
                 share_text(t["kept_bytes"], t["plain_bytes"]), bytes_text(t["predicted_bytes"]),
                 flops_text(t["recompute_flops"]), flops_text(t["forward_flops"])])
    widths = [max(len(str(x[j])) for x in [head] + rows) for j in range(len(head))]
    line = lambda cells: "  ".join(str(c).ljust(w) if j < 2 else str(c).rjust(w)  # noqa: E731
                                   for j, (c, w) in enumerate(zip(cells, widths))).rstrip()
    out = [f"remat explain: one training step as it is, {len(e.rows)} blocks ({e.blocks or 'given'}), "
           f"device {e.device}; bytes in KiB/MiB/GiB (binary), FLOPs matmul-like (torch flop_counter)",
           line(head), line(["-" * w for w in widths])]
    out += [line(r) for r in rows[:-1]] + [line(["-" * w for w in widths]), line(rows[-1])]
    acc = t["accounted_bytes"]
    out.append("")
    out.append(f"kept: autograd's saved tensors + SAC caches, per block; plain: the block's forward re-run alone "
               f"with no checkpoint; outside the blocks: {bytes_text(t['outside_blocks_bytes'])}")
    out.append(f"live at backward start: {bytes_text(t['live_at_backward_bytes'])} = "
               + " + ".join(f"{k} {bytes_text(v)}" for k, v in acc.items() if v)
               + (f" + unexplained {bytes_text(t['excess_bytes'])}" if t["excess_bytes"] else ""))
    out.append("")
    if e.traps:
        out.append(f"traps ({len(e.traps)}):")
        out += [f"  {trap}" for trap in e.traps]
    else:
        out.append("traps: none seen")
    return "\n".join(out)
