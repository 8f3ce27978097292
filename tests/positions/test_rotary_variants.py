"""Proportional RoPE (Gemma 4), mixed NTK, HunYuan's NTK-α: against HF's own functions where HF has them.

Fresh random configurations per test. HF forms frequencies in float32, posenc
in float64: frequencies are compared at float32 accuracy (rtol 1e-5).
"""

import math

import pytest
import torch

from posenc.positions import ROPE_SCALINGS, RoPE, build
from posenc.positions.rotary_variants import proportional_pairs

transformers = pytest.importorskip(
    "transformers", minversion="5.0",
    reason="reference tests need HF transformers >= 5 (its modeling_rope_utils API), a test-only dependency")
from transformers import Gemma4TextConfig, HunYuanDenseV1Config, LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.gemma4.modeling_gemma4 import Gemma4TextRotaryEmbedding, apply_rotary_pos_emb  # noqa: E402
from transformers.models.hunyuan_v1_dense.modeling_hunyuan_v1_dense import HunYuanDenseV1RotaryEmbedding  # noqa: E402


def randint(gen, lo, hi):
    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def uniform(gen, lo, hi):
    return lo + (hi - lo) * float(torch.rand((), generator=gen, dtype=torch.float64))


def random_proportional(gen):
    head_dim = 2 * randint(gen, 1, 128)
    proportion = [0.0, 0.25, 0.5, 0.75, 1.0][randint(gen, 0, 4)] if randint(gen, 0, 1) else uniform(gen, 0, 1)
    return head_dim, proportion, 10 ** uniform(gen, 2, 7), uniform(gen, 0.5, 16) if randint(gen, 0, 1) else 1.0


def test_proportional_frequencies_match_hf_on_40_random_configs(gen):
    for _ in range(40):
        head_dim, proportion, base, factor = random_proportional(gen)
        config = LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                             rope_parameters={"rope_type": "proportional", "rope_theta": base,
                                              "partial_rotary_factor": proportion, "factor": factor})
        ref, ref_factor = ROPE_INIT_FUNCTIONS["proportional"](config, None)
        scheme = build("rope-proportional", dim=2 * head_dim, num_heads=2, base=base, proportion=proportion,
                       factor=factor)
        torch.testing.assert_close(scheme.inv_freq(), ref.double(), rtol=1e-5, atol=0)
        assert scheme.attention_factor == ref_factor == 1.0
        assert int((scheme.inv_freq() > 0).sum()) == proportional_pairs(head_dim, proportion) == scheme.rotated_pairs


def test_proportional_rotation_matches_gemma4_global_layers(gen):
    """Gemma 4's own rotary module (full_attention layers: proportional, global head width) + its rotation."""
    head_dim, proportion, base, _ = random_proportional(gen)
    config = Gemma4TextConfig(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                              global_head_dim=head_dim, num_hidden_layers=2, layer_types=["sliding_attention",
                                                                                           "full_attention"],
                              rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                                               "full_attention": {"rope_type": "proportional", "rope_theta": base,
                                                                  "partial_rotary_factor": proportion}})
    hf = Gemma4TextRotaryEmbedding(config)
    positions = torch.randint(0, 512, (2, 7), generator=gen)
    q = torch.randn(2, 3, 7, head_dim, generator=gen)
    cos, sin = hf(q, positions, "full_attention")
    ref = apply_rotary_pos_emb(q, cos, sin)
    scheme = build("rope-proportional", dim=3 * head_dim, num_heads=3, base=base, proportion=proportion)
    got = scheme.rotate_query(q, positions)
    bound = 4 * 512 * 2.0**-24 * float(q.abs().max())  # HF's float32 angles
    torch.testing.assert_close(got, ref, atol=max(bound, 1e-5), rtol=1e-4)
    # the pairs past ⌊proportion·Dh/2⌋ are not rotated at all
    rotated, half = scheme.rotated_pairs, head_dim // 2
    for lo in (rotated, half + rotated):
        assert torch.equal(got[..., lo:lo + half - rotated], q[..., lo:lo + half - rotated])


def test_proportional_is_not_partial_rotary(gen):
    """p-RoPE keeps a full head's fastest frequencies; partial rotary gives R coordinates an R-wide head's."""
    head_dim = 2 * randint(gen, 4, 64)
    scheme = build("rope-proportional", dim=head_dim, num_heads=1, proportion=0.5)
    full = RoPE(head_dim=head_dim).inv_freq()
    torch.testing.assert_close(scheme.inv_freq()[:scheme.rotated_pairs], full[:scheme.rotated_pairs], rtol=1e-15,
                               atol=0)
    partial = RoPE(head_dim=head_dim, rotary_dim=2 * scheme.rotated_pairs).inv_freq()
    assert not torch.allclose(partial[1:], full[1:scheme.rotated_pairs])


def test_proportional_pairing_conversion_keeps_scores(gen):
    """Interleaved and half pairings give the same scores once q/k rows are permuted (the zero pairs too)."""
    from posenc.positions import pairing_permutation
    head_dim = 2 * randint(gen, 2, 32)
    half = build("rope-proportional", dim=head_dim, num_heads=1, proportion=uniform(gen, 0, 1)).double()
    inter = build("rope-proportional", dim=head_dim, num_heads=1, proportion=half.proportion,
                  pairing="interleaved").double()
    q, k = torch.randn(2, 1, 1, 5, head_dim, generator=gen, dtype=torch.float64)
    pos = torch.randint(0, 10**4, (5,), generator=gen)
    perm = pairing_permutation(head_dim)
    qh, kh = half.rotate(q[..., perm], k[..., perm], pos, pos)
    qi, ki = inter.rotate(q, k, pos, pos)
    torch.testing.assert_close(qh @ kh.transpose(-1, -2), qi @ ki.transpose(-1, -2), rtol=1e-10, atol=1e-10)


def test_proportional_from_hf_config():
    from posenc.families.hf_config import HFConfig
    from posenc.families.rope import rope_blocks, rope_scheme
    config = HFConfig({"rope_parameters": {"rope_type": "proportional", "rope_theta": 1e6,
                                           "partial_rotary_factor": 0.25}})
    (block,) = rope_blocks(config).values()
    name, options = rope_scheme(block, head_dim=512, max_position_embeddings=4096, pairing="interleaved")
    assert name == "rope-proportional"
    assert options == {"base": 1e6, "pairing": "interleaved", "proportion": 0.25, "factor": 1.0}
    assert build(name, dim=1024, num_heads=2, **options).rotated_pairs == 64


@pytest.mark.parametrize(("option", "value", "match"), [
    ("proportion", 1.5, r"proportion=1.5 must be .*<= 1"), ("proportion", -0.1, "proportion=-0.1"),
    ("factor", 0.0, "factor=0.0"), ("base", 1.0, "base=1.0"),
])
def test_proportional_bad_options(option, value, match):
    with pytest.raises(ValueError, match=match):
        build("rope-proportional", dim=64, num_heads=2, **{option: value})
    with pytest.raises(ValueError, match="takes no option"):
        build("rope-proportional", dim=64, num_heads=2, rotary_dim=16)


def test_mixed_ntk_formula_in_float64(gen):
    """θ_m = base^(−2(m−1)/R)/exp(a·m^b), a = ln s/(R/2)^b, as an explicit loop; slowest pair / s exactly."""
    for _ in range(20):
        head_dim = 2 * randint(gen, 1, 64)
        rotary_dim = 2 * randint(gen, 1, head_dim // 2)
        base, factor, b = 10 ** uniform(gen, 2, 6), uniform(gen, 0.5, 64), uniform(gen, 0.05, 4)
        scheme = build("rope-ntk-mixed", dim=head_dim, num_heads=1, rotary_dim=rotary_dim, base=base,
                       factor=factor, mixed_b=b)
        pairs = rotary_dim // 2
        a = math.log(factor) / pairs**b
        ref = torch.tensor([base ** (-2 * (m - 1) / rotary_dim) / math.exp(a * m**b) for m in range(1, pairs + 1)],
                           dtype=torch.float64)
        torch.testing.assert_close(scheme.inv_freq(), ref, rtol=1e-12, atol=0)
        plain = RoPE(head_dim=head_dim, rotary_dim=rotary_dim, base=base).inv_freq()
        assert float(plain[-1] / scheme.inv_freq()[-1]) == pytest.approx(factor, rel=1e-12)
        got, att = ROPE_SCALINGS["ntk-mixed"](rotary_dim, base, factor=factor, mixed_b=b)
        assert torch.equal(got, scheme.inv_freq()) and att == 1.0


def test_mixed_ntk_bad_b():
    with pytest.raises(ValueError, match=r"mixed_b=0.0 must be a finite number > 0"):
        build("rope-ntk-mixed", dim=64, num_heads=2, mixed_b=0.0)


def test_hunyuan_ntk_alpha_is_rope_ntk(gen):
    """HunYuan's NTK-α (base·α^(Dh/(Dh−2)), HF hunyuan_v1_dense) is rope-ntk with factor = α, on 40 configs."""
    for _ in range(40):
        head_dim = 2 * randint(gen, 2, 128)
        base, alpha = 10 ** uniform(gen, 2, 6), uniform(gen, 1, 1000)
        config = HunYuanDenseV1Config(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                                      rope_parameters={"rope_type": "dynamic", "rope_theta": base, "alpha": alpha,
                                                       "factor": 1.0})
        hf = HunYuanDenseV1RotaryEmbedding(config)
        assert hf.rope_type == "ntk_alpha"
        scheme = build("rope-ntk", dim=2 * head_dim, num_heads=2, base=base, factor=alpha)
        torch.testing.assert_close(scheme.inv_freq(), hf.inv_freq.double(), rtol=1e-5, atol=0)
        assert hf.attention_scaling == scheme.attention_factor == 1.0
