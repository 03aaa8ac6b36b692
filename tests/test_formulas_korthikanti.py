"""Korthikanti 2022 closed forms: the §4.1 itemization reproduces Table 2, Eq. 7/8 and §4.2/§4.3 terms."""

from fractions import Fraction

import pytest

from remat.errors import UsageError
from remat.formulas import korthikanti, korthikanti_labels

# Table 3 of the paper: (name, a, h, L, p, m, b)
TABLE3 = [("22B", 64, 6144, 48, 1, 1, 4), ("175B", 96, 12288, 96, 8, 3, 1),
          ("530B", 128, 20480, 105, 35, 3, 1), ("1T", 160, 25600, 128, 64, 1, 1)]
S, V, T = 2048, 51200, 8
CASES = [(t, sp, r) for t in (1, 2, 4, 8) for sp in (False, True) for r in korthikanti.RECOMPUTE if not (sp and t == 1)]


def test_itemization_coefficients_are_the_papers():
    assert sum(term.sbh_coeff for term in korthikanti.TERMS) == 34
    assert sum(term.as2b_coeff for term in korthikanti.TERMS) == 5
    assert sum(term.sbh_coeff for term in korthikanti.TERMS if not term.tp_split) == 10   # replicated under TP (Eq. 2)
    assert sum(term.sbh_coeff for term in korthikanti.TERMS if term.tp_split) == 24
    assert {t.name for t in korthikanti.TERMS if t.core_attn} == {"softmax_output", "softmax_dropout_mask",
                                                         "attn_probs_dropped"}


@pytest.mark.parametrize("name,a,h,L,p,m,b", TABLE3)
@pytest.mark.parametrize("t,sp,recompute", CASES)
def test_itemized_sum_equals_table2(name, a, h, L, p, m, b, t, sp, recompute):
    assert korthikanti.layer_bytes(S, b, h, a, t, sp, recompute) == \
        korthikanti.table2_bytes(S, b, h, a, t, sp, recompute)


def test_table2_rows_by_hand():
    # 175B: s=2048, b=1, h=12288, a=96, t=8 -> 5as/(ht) = 10 exactly
    s, b, h, a, t = 2048, 1, 12288, 96, 8
    sbh = s * b * h
    assert korthikanti.table2_bytes(s, b, h, a, 1) == sbh * 34 + 5 * a * s * s * b           # Eq. 1
    assert korthikanti.table2_bytes(s, b, h, a, t) == sbh * (10 + 3 + 10)                       # Eq. 2
    assert korthikanti.table2_bytes(s, b, h, a, t, sp=True) == sbh * 34 // 8 + sbh * 10         # Eq. 4
    assert korthikanti.table2_bytes(s, b, h, a, t, recompute="selective") == sbh * 13
    assert korthikanti.table2_bytes(s, b, h, a, t, sp=True, recompute="selective") == sbh * 34 // 8
    assert korthikanti.table2_bytes(s, b, h, a, t, recompute="full") == 2 * sbh
    assert korthikanti.table2_bytes(s, b, h, a, t, sp=True, recompute="full") == 2 * sbh // 8


def test_stored_terms_by_mode():
    assert len(korthikanti.stored_terms("none")) == 14
    assert "softmax_output" not in korthikanti.stored_terms("selective") and \
        "v" in korthikanti.stored_terms("selective")
    assert korthikanti.stored_terms("full") == ("layer_input",)


@pytest.mark.parametrize("kwargs,field", [
    (dict(t=3), "tp"),                         # 3 does not divide a=64
    (dict(t=5), "tp"),
    (dict(t=1, sp=True), "sp"),
    (dict(t=8, recompute="offload"), "mode"),
    (dict(t=0), "tp"),
])
def test_bad_input_names_the_field(kwargs, field):
    with pytest.raises(UsageError) as exc:
        korthikanti.layer_bytes(2048, 1, 6144, 64, **kwargs)
    assert exc.value.field == field


def test_sp_needs_t_to_divide_s():
    with pytest.raises(UsageError) as exc:
        korthikanti.layer_bytes(100, 1, 64, 8, t=8, sp=True)
    assert exc.value.field == "seq"


def test_interleave_and_first_stage():
    assert korthikanti.interleave_factor(8, 3) == 1 + Fraction(7, 24)
    assert korthikanti.interleave_factor(8, 1) == 1 and korthikanti.interleave_factor(1, 3) == 1
    per_layer = korthikanti.table2_bytes(S, 1, 12288, 96, 8, sp=True, recompute="selective")
    # Eq. 6 with the interleave factor: 34 sbhL/t * (1 + (p-1)/(pm))
    expected = Fraction(34 * S * 12288 * 96, 8) * (1 + Fraction(7, 24))
    assert korthikanti.first_stage_bytes(per_layer, 96, 8, 3) == round(expected)


def test_outside_layers():
    s, b, h, v, t = 2048, 4, 6144, V, 8
    one = korthikanti.outside_layer_bytes(s, b, h, v, t, p=1)
    assert one == {"embedding_dropout_mask": s * b * h // t, "final_ln_input": 2 * s * b * h // t,
                   "output_proj_input": 2 * s * b * h // t, "logits_fp32": 4 * s * b * v // t}
    assert korthikanti.outside_layer_bytes(s, 1, h, v, t, p=8) == {"embedding_dropout_mask": s * h}
    no_sp = korthikanti.outside_layer_bytes(s, b, h, v, t, p=1, sp=False)
    assert no_sp["final_ln_input"] == 2 * s * b * h and no_sp["logits_fp32"] == 4 * s * b * v // t


@pytest.mark.parametrize("name,a,h,L,p,m,b", TABLE3)
def test_parameter_count_matches_model_name(name, a, h, L, p, m, b):
    nominal = {"22B": 22e9, "175B": 175e9, "530B": 530e9, "1T": 1e12}[name]
    total = L * korthikanti.params_per_layer(h) + V * h + S * h
    assert abs(total / nominal - 1) < 0.03
    assert korthikanti.params_per_layer(h) == 12 * h * h + 13 * h
    assert korthikanti.params_per_gpu(h, L, V, S, T, p) == _first_stage_by_hand(h, L, p)


def test_flops_eq7_eq8():
    B, s, h, L, v = 64, 2048, 12288, 96, V
    base = Fraction(72 * B * L * s * h * h)
    assert korthikanti.model_flops(B, s, h, L, v) == base * (1 + Fraction(s, 6 * h) + Fraction(v, 12 * h * L))
    assert korthikanti.hardware_flops_eq8(B, s, h, L, v) == base * (1 + Fraction(s, 3 * h) + Fraction(v, 12 * h * L))
    text = korthikanti.hardware_flops(B, s, h, L, v, "selective")
    assert text == base * (1 + Fraction(2 * s, 9 * h) + Fraction(v, 12 * h * L))
    # Eq. 8 as printed charges 3x the recomputed core-attention forward, the text 1x
    assert korthikanti.hardware_flops_eq8(B, s, h, L, v) - korthikanti.model_flops(B, s, h, L, v) == \
        3 * L * 4 * B * s * s * h
    assert text - korthikanti.model_flops(B, s, h, L, v) == L * korthikanti.core_attn_forward_flops(s, B, h)
    assert korthikanti.hardware_flops(B, s, h, L, v, "full") - korthikanti.model_flops(B, s, h, L, v) == \
        L * korthikanti.layer_forward_flops(s, B, h)
    assert korthikanti.layer_forward_flops(s, 1, h) * 3 * L + 3 * korthikanti.logits_flops(s, 1, h, v) == \
        korthikanti.model_flops(1, s, h, L, v)


@pytest.mark.parametrize("record,term", [
    (("layers.3.ln_1", "native_layer_norm", (2048, 1, 12288), "torch.bfloat16"), "ln1_input"),
    (("ln_1", "native_layer_norm", (2048, 1, 1), "torch.float32"), None),          # mean / rstd
    (("ln_1", "rsqrt", (2048, 1, 1), "torch.float32"), None),                      # RMSNorm (Llama): not §4.1
    (("attn.qkv", "_SequenceGatherLinear", (256, 1, 12288), "torch.bfloat16"), "qkv_input"),
    (("attn.core", "baddbmm", (12, 128, 2048), "torch.bfloat16"), "q_k"),
    (("attn.core", "bmm", (12, 2048, 128), "torch.bfloat16"), "v"),
    (("attn.core", "bmm", (12, 2048, 2048), "torch.bfloat16"), "attn_probs_dropped"),
    (("attn.core", "_softmax", (12, 2048, 2048), "torch.bfloat16"), "softmax_output"),
    (("attn.core.dropout", "native_dropout", (12, 2048, 2048), "torch.bool"), "softmax_dropout_mask"),
    (("attn.core", "masked_fill", (2048, 2048), "torch.bool"), None),             # causal mask
    (("attn.core", "checkpoint", (2048, 1, 12, 128), "torch.bfloat16"), "q_k_v"),
    (("mlp.act", "gelu", (2048, 1, 6144), "torch.bfloat16"), "gelu_input"),
    (("mlp.act", "silu", (2048, 1, 6144), "torch.bfloat16"), None),
    (("mlp.dropout", "native_dropout", (2048, 1, 12288), "torch.bool"), "mlp_dropout_mask"),
    (("layers.0", "checkpoint", (2048, 1, 12288), "torch.bfloat16"), "layer_input"),
    (("head", "mm", (2048, 12288), "torch.bfloat16"), None),
])
def test_paper_term(record, term):
    assert korthikanti_labels.paper_term(*record) == term


def test_paper_term_tells_v_from_dropped_probs_when_shapes_coincide():
    # at s = h/a the ·V product's two saved operands are both [b·a, s, s]: V is a view of the fused QKV
    # output (its storage already saved by QKᵀ), the dropped-out probabilities a storage of their own
    square = (8, 16, 16)
    assert korthikanti_labels.paper_term("attn.core", "bmm", square, "torch.bfloat16", shares_storage=True) == "v"
    assert korthikanti_labels.paper_term("attn.core", "bmm", square, "torch.bfloat16", shares_storage=False) == \
        "attn_probs_dropped"
    assert korthikanti_labels.paper_term("attn.core", "bmm", square, "torch.bfloat16") == \
        "attn_probs_dropped"  # shape alone


# --- paper Figure 1's parameter bars, §4.3's share, the selective overhead and HFU ----------------------------

@pytest.mark.parametrize("name,a,h,L,p,m,b", TABLE3)
def test_first_stage_excess_adds_up_to_the_difference(name, a, h, L, p, m, b):
    assert korthikanti.params_total(h, L, V, S) == korthikanti.params_per_gpu(h, L, V, S, 1, 1)
    even = korthikanti.params_even_share(h, L, V, S, T, p)
    assert even == Fraction(korthikanti.params_total(h, L, V, S), T * p)
    parts = korthikanti.first_stage_params_excess(h, L, V, S, T, p)
    assert sum(parts.values()) == korthikanti.params_per_gpu(h, L, V, S, T, p) - even
    assert parts["word_embedding"] == Fraction(V * h, T) * (1 - Fraction(1, p))
    assert parts["position_embedding"] == S * h * (1 - Fraction(1, T * p))


def _first_stage_by_hand(h: int, L: int, p: int) -> int:
    """Parameters on one GPU of the first stage, by hand (Megatron's layout, t = T): ⌈L/p⌉ layers of
    (12h² + 7h)/t + 6h (the QKV and fc1 weights and biases split, the projection/fc2 biases and LayerNorms
    replicated), the word embedding v·h/t, the position embedding s·h, and the final LayerNorm 2h when p = 1."""
    return -(-L // p) * ((12 * h * h + 7 * h) // T + 6 * h) + V * h // T + S * h + (2 * h if p == 1 else 0)


def test_model_state_first_stage_vs_even_share_gib():
    """18 B/parameter on one GPU of the first stage (``_first_stage_by_hand``) against the paper's even share
    18·P/(t·p) with P = L(12h² + 13h) + vh + sh + 2h. GiB = 2**30 bytes."""
    gib = 2 ** 30
    for _, a, h, L, p, m, b in TABLE3:
        hand = _first_stage_by_hand(h, L, p)
        assert korthikanti.params_per_gpu(h, L, V, S, T, p) == hand
        assert korthikanti.model_state_bytes(hand) / gib == pytest.approx(18 * hand / gib)
        total = L * (12 * h * h + 13 * h) + V * h + S * h + 2 * h
        assert float(18 * korthikanti.params_even_share(h, L, V, S, T, p)) == pytest.approx(18 * total / (T * p))
        # the first stage always holds more than the even share (its embeddings are not divided by p)
        assert hand > total / (T * p)
    # p = 1 (22B): no word-embedding excess; the position embedding (replicated on 8 ranks) is most of it
    parts = korthikanti.first_stage_params_excess(6144, 48, V, S, T, 1)
    assert parts["word_embedding"] == 0 and parts["uneven_layers"] == 0
    assert parts["position_embedding"] == S * 6144 * Fraction(7, 8)


def test_a_tensor_parallel_layer_holds_the_parameters_counted():
    """Second method: the parameters of rank 0's ParallelGPTLayer (t = 4) and of the serial layer, counted on
    the torch modules, equal params_per_layer's (12h² + 7h)/t + 6h and 12h² + 13h, at h = 64 and an MLP of
    3h (ffn ≠ 4h: 4h² + 2hf + f + 9h)."""
    import dataclasses

    from torch._subclasses.fake_tensor import FakeTensorMode

    from remat.models.presets import from_name
    from remat.models.tensor_parallel import build_layer, fake_process_group
    for ffn in (None, 3 * 64):
        cfg = dataclasses.replace(from_name("gpt-tiny"), hidden=64, heads=4, ffn_hidden=ffn or 4 * 64)
        with FakeTensorMode(), fake_process_group(4) as group:
            rank0 = sum(p.numel() for p in build_layer(cfg, group).parameters())
        serial = sum(p.numel() for p in build_layer(cfg).parameters())
        assert (rank0, serial) == (korthikanti.params_per_layer(64, 4, ffn), korthikanti.params_per_layer(64, 1, ffn))
    assert korthikanti.params_per_layer(64, 4) == (12 * 64 * 64 + 7 * 64) // 4 + 6 * 64



def test_outside_share_22b_is_057_percent_not_below_001_percent():
    # §4.3: (p/L + (4/L)(1 + v/h)) / (34 + 5as/h) for 22B with SP, no recompute
    s, b, h, a, L = 2048, 4, 6144, 64, 48
    share = korthikanti.outside_layer_share(s, b, h, a, V, L, T, p=1)
    expected = (Fraction(1, L) + Fraction(4, L) * (1 + Fraction(V, h))) / (34 + Fraction(5 * a * s, h))
    assert share == expected
    assert round(100 * float(share), 3) == 0.568          # the paper says "less than 0.01 %"
    assert 100 * share > 50 * Fraction(1, 100)           # more than 50× that bound
    # with selective recompute (Eq. 6: 34 sbhL/t) the same terms are a larger share
    assert round(100 * float(korthikanti.outside_layer_share(s, b, h, a, V, L, T, 1, sp=True,
                                                             recompute="selective")), 2) == 2.35


def test_selective_overhead_quoted_in_the_text_is_eq8s():
    # the text's 2.7 % (GPT-3) and 1.6 % (MT-NLG) round from Eq. 8 − Eq. 7, not from the recompute it describes
    gpt3 = (64, 2048, 12288, 96, V)
    mtnlg = (280, 2048, 20480, 105, V)
    assert round(100 * float(korthikanti.recompute_overhead(*gpt3, hardware="eq8")), 1) == 2.7
    assert round(100 * float(korthikanti.recompute_overhead(*mtnlg, hardware="eq8")), 1) == 1.6
    for args in (gpt3, mtnlg):
        assert korthikanti.recompute_overhead(*args, hardware="text") * 3 == korthikanti.recompute_overhead(
            *args, hardware="eq8")
    B, s, h, L, v = gpt3
    assert korthikanti.recompute_overhead(*gpt3, hardware="eq8") == \
        Fraction(s, 6 * h) / (1 + Fraction(s, 6 * h) + Fraction(v, 12 * h * L))
    assert round(100 * float(korthikanti.recompute_overhead(*gpt3, hardware="text")), 2) == 0.90
    with pytest.raises(UsageError) as exc:
        korthikanti.recompute_overhead(*gpt3, hardware="printed")
    assert exc.value.field == "hardware"


def test_hfu_of_paper_table5_by_eq8_and_by_the_text():
    # GPT-3 175B, paper Table 5: 13.75 s per iteration on 64 A100s (312 TFLOP/s), printed MFU 51.4 %, HFU 52.8 %
    B, s, h, L, v, seconds, gpus, peak = 64, 2048, 12288, 96, V, 13.75, 64, 312e12
    mfu = korthikanti.flops_utilization(korthikanti.model_flops(B, s, h, L, v), seconds, gpus, peak)
    hfu8 = korthikanti.flops_utilization(korthikanti.hardware_flops_eq8(B, s, h, L, v), seconds, gpus, peak)
    hfu_text = korthikanti.flops_utilization(korthikanti.hardware_flops(B, s, h, L, v), seconds, gpus, peak)
    assert round(100 * mfu, 1) == 51.4 and round(100 * hfu8, 1) == 52.8
    assert round(100 * hfu_text, 2) == 51.85
    assert mfu < hfu_text < hfu8
    with pytest.raises(ValueError):
        korthikanti.flops_utilization(1, 0, gpus, peak)


def test_full_recompute_flops_follow_the_mlp_width():
    """One extra forward with an MLP of inner width ffn ≠ 4h, GEMM by GEMM by hand (s = 2, b = 1, h = 4,
    ffn = 10): QKV 2·bs·h·3h = 192, QKᵀ 2·b·s²·h = 32, ·V 32, projection 2·bs·h² = 64, MLP up and down
    2·(2·bs·h·ffn) = 320 — 640 in all; with ffn = 4h the MLP is 512 and the sum 832."""
    assert korthikanti.recompute_flops(2, 1, 4, "full", ffn=10) == 192 + 32 + 32 + 64 + 320
    assert korthikanti.recompute_flops(2, 1, 4, "full") == 192 + 32 + 32 + 64 + 512


def test_section5_and_6_1_memory_ratios_from_table2():
    # with SP, selective drops 5as/h of 34 + 5as/h: 80/114 (175B, §5 "70 %"), 64/98 (530B, "65 %"); at t = 8 SP +
    # selective keeps 34/8 of 10 + 24/8 + 5as/(8h) of the TP baseline: 4.25/21 = 20.24 % for 530B and 1T (§6.1 "under
    # 20 %"), 4.25/23 = 18.48 % for 175B
    saving = {n: 1 - Fraction(korthikanti.table2_bytes(S, b, h, a, T, True, "selective"),
                              korthikanti.table2_bytes(S, b, h, a, T, True)) for n, a, h, L, p, m, b in TABLE3}
    kept = {n: Fraction(korthikanti.table2_bytes(S, b, h, a, T, True, "selective"), korthikanti.table2_bytes(
        S, b, h, a, T)) for n, a, h, L, p, m, b in TABLE3}
    assert saving["175B"] == Fraction(80, 114) and saving["530B"] == Fraction(64, 98)
    assert kept["530B"] == kept["1T"] == Fraction(17, 84) and kept["175B"] == Fraction(17, 92)


def test_selective_recompute_over_the_forward_is_the_quoted_overhead():
    # §5 "2.7 %" / "1.6 %": 4bs²h over the forward 24bsh² + 4bs²h (Appendix A), i.e. (s/6h) / (1 + s/6h)
    for h, quoted in ((12288, 2.7), (20480, 1.6)):
        share = korthikanti.recompute_flops(S, 1, h, "selective") / korthikanti.layer_forward_flops(S, 1, h)
        assert share == pytest.approx((S / (6 * h)) / (1 + S / (6 * h))) and round(100 * share, 1) == quoted
