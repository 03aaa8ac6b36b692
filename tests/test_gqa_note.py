"""The --hf plan's note on what a transformers block keeps beyond remat's layer (remat.auto.hf.per_layer_mask_terms):
the additive sliding-window mask (e·b·s²) and the key/value groups repeated to the query heads — only the copies
beyond the kv groups the block holds anyway, 2·e·b·s·(a − kv)·d. Bytes by hand; the window's boundary both ways."""

from __future__ import annotations

from types import SimpleNamespace

from remat.auto.hf import per_layer_mask_terms

MIB = 2**20
MASK, REPEATED = "additive sliding-window mask", "keys and values repeated to every head"


def _mistral(**changes) -> SimpleNamespace:
    """Mistral-7B's attention fields: h 4096, a 32 heads, kv 8 groups, window 4096, SDPA."""
    fields = dict(hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, sliding_window=4096,
                  _attn_implementation="sdpa")
    return SimpleNamespace(**{**fields, **changes})


def test_mistral_7b_at_8192_keeps_a_128_mib_mask_and_96_mib_of_repeated_keys_and_values():
    """s 8192, b 1, bf16 (e 2), d = 4096 / 32 = 128: mask 2·8192² = 128 MiB; the repeat adds 32 − 8 = 24 heads of
    keys and of values, 2·2·8192·24·128 = 96 MiB (all 32 heads would be 128 MiB: the groups are not extra)."""
    terms = per_layer_mask_terms(_mistral(), 8192, 1, 2)
    assert terms == {MASK: 128 * MIB, REPEATED: 96 * MIB}
    assert terms[REPEATED] == 2 * 2 * 8192 * (32 - 8) * 128


def test_the_terms_scale_with_the_batch_dtype_and_head_dim_and_vanish_without_grouping():
    """b 2, fp32 (e 4), an explicit head_dim 64 beside h / a: mask 4·2·1024² = 8 MiB; repeat 2·4·2·1024·(16 − 4)·64
    = 12 MiB. With as many kv groups as heads nothing is repeated (0 bytes); without num_key_value_heads the
    groups are the heads (a multi-head model)."""
    config = _mistral(num_attention_heads=16, num_key_value_heads=4, head_dim=64, sliding_window=512)
    assert per_layer_mask_terms(config, 1024, 2, 4) == {MASK: 8 * MIB, REPEATED: 12 * MIB}
    assert per_layer_mask_terms(_mistral(num_key_value_heads=32), 8192, 1, 2)[REPEATED] == 0
    assert per_layer_mask_terms(_mistral(num_key_value_heads=None), 8192, 1, 2)[REPEATED] == 0


def test_the_terms_need_sdpa_and_a_window_shorter_than_the_sequence():
    """Window 4096: s = 4096 (the window covers it) keeps nothing extra, s = 4097 keeps both terms; no window, or
    an attention other than SDPA, nothing."""
    assert per_layer_mask_terms(_mistral(), 4096, 1, 2) == {}
    above = per_layer_mask_terms(_mistral(), 4097, 1, 2)
    assert above == {MASK: 2 * 4097 * 4097, REPEATED: 2 * 2 * 4097 * 24 * 128}
    assert per_layer_mask_terms(_mistral(sliding_window=4095), 4096, 1, 2)[MASK] == 2 * 4096 * 4096
    assert per_layer_mask_terms(_mistral(sliding_window=None), 8192, 1, 2) == {}
    assert per_layer_mask_terms(_mistral(_attn_implementation="eager"), 8192, 1, 2) == {}
