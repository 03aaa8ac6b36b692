"""The thresholds of remat.auto.explain's traps, each side of the boundary, on per-block rows written by hand:
a checkpointed block keeping at least KEEPS_ALL (90 %) of its plain bytes saves nothing (no-saving), and so does
one that recomputes no op in a backward that ran; bytes live at backward start beyond the accounted ones are the
caller's (caller-keeps) from CALLER_SHARE (5 %) of the saved bytes up, never at zero."""

from __future__ import annotations

from remat.auto import traps


def _row(kept: int, plain: int, recompute_ops: int = 3, index: int = 0) -> dict:
    """One checkpointed block's row as remat.auto.explain_rows makes it (kept_share = kept / plain)."""
    return {"index": index, "block": f"layers.{index}", "calls": 1, "kept_bytes": kept, "plain_bytes": plain,
            "kept_share": kept / plain if plain else None, "recompute_ops": recompute_ops}


def test_a_block_keeping_90_percent_of_its_plain_bytes_saves_nothing_and_one_keeping_less_saves():
    assert traps.KEEPS_ALL == 0.9
    trap = traps._keeps_all([_row(900, 1000)], set(), True)
    assert trap.code == traps.NO_SAVING and trap.blocks == ("layers.0",)
    assert "keeps 90 % of its plain bytes" in trap.message
    assert traps._keeps_all([_row(899, 1000)], set(), True) is None
    assert traps._keeps_all([_row(1000, 1000)], set(), True).blocks == ("layers.0",)
    # of two blocks only the one at the limit is named; a block the caller skips is not
    assert traps._keeps_all([_row(899, 1000), _row(9, 10, index=1)], set(), True).blocks == ("layers.1",)
    assert traps._keeps_all([_row(9, 10)], {0}, True) is None


def test_a_block_recomputing_no_op_saves_nothing_only_when_backward_ran_and_it_had_plain_bytes():
    idle = _row(100, 1000, recompute_ops=0)
    assert traps._keeps_all([idle], set(), True).blocks == ("layers.0",)
    assert "recomputes nothing in backward" in traps._keeps_all([idle], set(), True).message
    assert traps._keeps_all([_row(100, 1000, recompute_ops=1)], set(), True) is None
    assert traps._keeps_all([idle], set(), False) is None                 # no backward: nothing to recompute
    assert traps._keeps_all([_row(0, 0, recompute_ops=0)], set(), True) is None


def test_live_bytes_beyond_5_percent_of_the_saved_bytes_are_the_callers():
    """Saved 1,000 bytes: 50 bytes beyond the accounted (5 %) are the caller's, 49 are allocator noise; with
    nothing saved, any positive excess counts, none does not."""
    assert traps.CALLER_SHARE == 0.05
    trap = traps._caller_keeps({"excess": {"hidden_states": 30, "attentions": 20}}, 1000)
    assert trap.code == traps.CALLER_KEEPS
    assert trap.message.index("hidden_states") < trap.message.index("attentions")      # largest holder first
    assert traps._caller_keeps({"excess": {"hidden_states": 49}}, 1000) is None
    assert traps._caller_keeps({"excess": {"x": 1}}, 0) is not None
    assert traps._caller_keeps({"excess": {}}, 0) is None
    assert traps._caller_keeps({"excess": {"x": 0}}, 0) is None
