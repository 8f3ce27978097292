"""RoPE and every scaling type against HF ``transformers`` (the peer's own code, offline).

Fresh random configurations per test: head width, rotated width, base,
factors, trained length. HF builds frequencies in float32; posenc in float64,
so frequencies are compared at float32 accuracy (rtol 1e-5).
"""

import math

import pytest
import torch

transformers = pytest.importorskip(
    "transformers", minversion="5.0",
    reason="reference tests need HF transformers >= 5 (its modeling_rope_utils API), a test-only dependency")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb  # noqa: E402

from posenc.positions import ROPE_SCALINGS, RoPE, build  # noqa: E402
from posenc.positions.rotary_scaling import DynamicNTKRoPE, LongRoPE  # noqa: E402


def randint(gen, lo, hi):
    return int(torch.randint(lo, hi + 1, (1,), generator=gen))


def uniform(gen, lo, hi):
    return lo + (hi - lo) * float(torch.rand((), generator=gen, dtype=torch.float64))


def random_widths(gen):
    """(head_dim, rotary_dim) with 4 ≤ R ≤ Dh, both even, and R/Dh exact for HF's partial_rotary_factor."""
    while True:
        head_dim = 2 * randint(gen, 2, 32)
        rotary_dim = 2 * randint(gen, 2, head_dim // 2)
        if int(head_dim * (rotary_dim / head_dim)) == rotary_dim:
            return head_dim, rotary_dim


def hf_config(head_dim, rotary_dim, base, max_pos=2048, **params):
    return LlamaConfig(hidden_size=2 * head_dim, num_attention_heads=2, head_dim=head_dim,
                       max_position_embeddings=max_pos,
                       rope_parameters={"rope_theta": base, "partial_rotary_factor": rotary_dim / head_dim, **params})


def hf_inv_freq(rope_type, config, seq_len=None):
    inv_freq, factor = ROPE_INIT_FUNCTIONS[rope_type](config, None, seq_len=seq_len)
    return inv_freq.double(), factor


def random_case(gen, rope_type):
    """A random (posenc options, HF rope parameters, HF max_position_embeddings) triple for one type."""
    head_dim, rotary_dim = random_widths(gen)
    base = 10 ** uniform(gen, 2, 6)
    factor = uniform(gen, 1.5, 16)
    original = randint(gen, 16, 8192)
    common = {"head_dim": head_dim, "rotary_dim": rotary_dim, "base": base}
    if rope_type == "linear":
        return common | {"factor": factor}, {"rope_type": "linear", "factor": factor}, original
    if rope_type == "dynamic":
        return (common | {"factor": factor, "original_max_len": original},
                {"rope_type": "dynamic", "factor": factor}, original)
    if rope_type == "yarn":
        mscale = uniform(gen, 0.5, 2) if randint(gen, 0, 1) else None
        yarn = {"factor": factor, "beta_fast": uniform(gen, 8, 64), "beta_slow": uniform(gen, 0.5, 4),
                "mscale": mscale, "mscale_all_dim": uniform(gen, 0.5, 2) if mscale else None,
                "truncate": bool(randint(gen, 0, 1))}
        return (common | yarn | {"original_max_len": original},
                {"rope_type": "yarn", **yarn, "original_max_position_embeddings": original}, 4 * original)
    if rope_type == "llama3":
        low = uniform(gen, 0.5, 2)
        bands = {"factor": factor, "low_freq_factor": low, "high_freq_factor": low + uniform(gen, 0.5, 8)}
        return (common | bands | {"original_max_len": original},
                {"rope_type": "llama3", **bands, "original_max_position_embeddings": original}, 4 * original)
    if rope_type == "longrope":
        pairs = rotary_dim // 2
        short = [uniform(gen, 0.8, 2) for _ in range(pairs)]
        long = [uniform(gen, 1, 40) for _ in range(pairs)]
        return (common | {"short_factor": short, "long_factor": long, "factor": factor, "original_max_len": original},
                {"rope_type": "longrope", "short_factor": short, "long_factor": long, "factor": factor,
                 "original_max_position_embeddings": original}, int(factor * original))
    raise AssertionError(rope_type)


NAMES = {"linear": "rope-linear", "dynamic": "rope-dynamic-ntk", "yarn": "rope-yarn", "llama3": "rope-llama3",
         "longrope": "rope-longrope"}


@pytest.mark.parametrize("rope_type", sorted(NAMES))
def test_frequencies_and_attention_factor_match_hf(rope_type, gen):
    for _ in range(5):
        ours, params, max_pos = random_case(gen, rope_type)
        config = hf_config(ours["head_dim"], ours["rotary_dim"], ours["base"], max_pos, **params)
        options = {k: v for k, v in ours.items() if k not in ("head_dim", "rotary_dim", "base")}
        original = ours.get("original_max_len", max_pos)
        for seq_len in (None, randint(gen, 1, original), randint(gen, original + 1, 8 * original)):
            ref, ref_factor = hf_inv_freq(rope_type, config, seq_len)
            got, factor = ROPE_SCALINGS[rope_type](ours["rotary_dim"], ours["base"], seq_len=seq_len, **options)
            torch.testing.assert_close(got, ref, rtol=1e-5, atol=0)
            assert factor == pytest.approx(ref_factor, rel=1e-12)


def test_static_ntk_is_hf_dynamic_at_twice_the_length(gen):
    """HF has no static NTK type; its dynamic formula at factor−1 and seq_len 2·L₀ is exactly base·factor^(R/(R−2))."""
    for _ in range(10):
        head_dim, rotary_dim = random_widths(gen)
        base, factor, original = 10 ** uniform(gen, 2, 6), uniform(gen, 1.5, 16), randint(gen, 16, 8192)
        config = hf_config(head_dim, rotary_dim, base, original, rope_type="dynamic", factor=factor - 1)
        ref, _ = hf_inv_freq("dynamic", config, seq_len=2 * original)
        scheme = build("rope-ntk", dim=2 * head_dim, num_heads=2, rotary_dim=rotary_dim, base=base, factor=factor)
        torch.testing.assert_close(scheme.inv_freq(), ref, rtol=1e-5, atol=0)
        # the lowest frequency is divided by exactly `factor`
        plain = RoPE(head_dim=head_dim, rotary_dim=rotary_dim, base=base).inv_freq()
        assert float(plain[-1] / scheme.inv_freq()[-1]) == pytest.approx(factor, rel=1e-12)


def test_per_position_frequencies_are_hf_at_length_p_plus_one(gen):
    """Dynamic NTK and LongRoPE rotate position p with what HF computes for seq_len = p + 1."""
    for rope_type, cls in (("dynamic", DynamicNTKRoPE), ("longrope", LongRoPE)):
        ours, params, max_pos = random_case(gen, rope_type)
        config = hf_config(ours["head_dim"], ours["rotary_dim"], ours["base"], max_pos, **params)
        scheme = cls(**ours)
        original = scheme.original_max_len
        positions = torch.cat([torch.randint(0, original, (4,), generator=gen),
                               torch.randint(original, 10 * original, (8,), generator=gen),
                               torch.tensor([original - 1, original])])
        per_position = scheme.inv_freq_per_position(positions)
        for row, p in zip(per_position, positions.tolist()):
            torch.testing.assert_close(row, hf_inv_freq(rope_type, config, p + 1)[0], rtol=1e-5, atol=0)
            torch.testing.assert_close(row, scheme.inv_freq_at(p + 1), rtol=1e-12, atol=0)


@pytest.mark.parametrize("rope_type", ["default", *sorted(NAMES)])
def test_rotation_matches_hf_rotary_embedding(rope_type, gen):
    """HF's own rotary module (cos/sin with attention scaling) + apply_rotary_pos_emb vs posenc, float32."""
    if rope_type == "default":
        head_dim, _ = random_widths(gen)  # Llama's default type rotates the whole head
        ours = {"head_dim": head_dim, "rotary_dim": head_dim, "base": 10 ** uniform(gen, 2, 6)}
        params, max_pos, name = {"rope_type": "default"}, 2048, "rope"
    else:
        ours, params, max_pos = random_case(gen, rope_type)
        name = NAMES[rope_type]
    positions = torch.randint(0, 512, (2, 7), generator=gen)  # float32 angles stay accurate to ~3e-5 here
    if rope_type in ("dynamic", "longrope"):
        # HF picks the frequencies from this call's length: posenc's fixed mode with that length
        ours = ours | {"max_seq_len": int(positions.max()) + 1}
    config = hf_config(ours["head_dim"], ours["rotary_dim"], ours["base"], max_pos, **params)
    hf_rope = LlamaRotaryEmbedding(config)
    q = torch.randn(2, 3, 7, ours["head_dim"], generator=gen)
    k = torch.randn(2, 3, 7, ours["head_dim"], generator=gen)
    r = ours["rotary_dim"]
    cos, sin = hf_rope(q, positions)  # (B, T, R)
    q_ref, k_ref = apply_rotary_pos_emb(q[..., :r], k[..., :r], cos, sin)
    scheme = build(name, dim=3 * ours["head_dim"], num_heads=3, pairing="half",
                   **{key: v for key, v in ours.items() if key != "head_dim"})
    q_got, k_got = scheme.rotate(q, k, positions, positions)
    # HF forms its angles p·θ in float32: each is off by up to ~p·θ·2⁻²⁴ rad (θ ≤ 1), so an output
    # coordinate may differ by that times the attention factor and the largest pair element.
    bound = 4 * int(positions.max()) * 2.0**-24 * scheme.attention_factor * float(torch.cat([q, k]).abs().max())
    torch.testing.assert_close(q_got[..., :r], q_ref, atol=max(bound, 1e-5), rtol=1e-4)
    torch.testing.assert_close(k_got[..., :r], k_ref, atol=max(bound, 1e-5), rtol=1e-4)
    assert torch.equal(q_got[..., r:], q[..., r:])


def test_half_pairing_is_hf_rotate_half_exactly(gen):
    """Same float64 cos/sin into HF's apply_rotary_pos_emb and into posenc: the layouts agree to rounding."""
    head_dim = 2 * randint(gen, 1, 32)
    rope = RoPE(head_dim=head_dim, base=10 ** uniform(gen, 2, 6))
    positions = torch.randint(0, 10**6, (1, 9), generator=gen)
    q = torch.randn(1, 2, 9, head_dim, generator=gen, dtype=torch.float64)
    k = torch.randn(1, 2, 9, head_dim, generator=gen, dtype=torch.float64)
    cos, sin = rope.cos_sin(positions, dtype=torch.float64)  # (1, 9, P)
    q_ref, k_ref = apply_rotary_pos_emb(q, k, torch.cat((cos, cos), -1), torch.cat((sin, sin), -1))
    q_got, k_got = rope.rotate(q, k, positions, positions)
    torch.testing.assert_close(q_got, q_ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(k_got, k_ref, rtol=1e-12, atol=1e-12)


def test_yarn_default_attention_factor_is_paper_formula(gen):
    factor = uniform(gen, 1.0, 64)
    scheme = build("rope-yarn", dim=64, num_heads=4, factor=factor)
    assert scheme.attention_factor == pytest.approx(0.1 * math.log(factor) + 1, rel=1e-12)


def test_per_position_rotation_through_rotate_matches_hf_frequencies(gen):
    """Through the model's path (rotate), position p beyond L₀ is rotated by p·θ_HF(seq_len = p + 1)."""
    for rope_type, name in (("dynamic", "rope-dynamic-ntk"), ("longrope", "rope-longrope")):
        ours, params, max_pos = random_case(gen, rope_type)
        ours = ours | {"original_max_len": 16}
        params = params | ({"original_max_position_embeddings": 16} if rope_type == "longrope" else {})
        config = hf_config(ours["head_dim"], ours["rotary_dim"], ours["base"], 16 if rope_type == "dynamic" else max_pos,
                           **params)
        positions = torch.randint(0, 64, (9,), generator=gen)
        scheme = build(name, dim=2 * ours["head_dim"], num_heads=2, pairing="half",
                       **{key: v for key, v in ours.items() if key != "head_dim"})
        q = torch.randn(1, 2, 9, ours["head_dim"], generator=gen, dtype=torch.float64)
        r = ours["rotary_dim"]
        theta = torch.stack([hf_inv_freq(rope_type, config, p + 1)[0] for p in positions.tolist()])  # (T, P)
        angles = positions.double()[:, None] * theta
        factor = scheme.attention_factor
        cos, sin = factor * torch.cat((angles.cos(),) * 2, -1), factor * torch.cat((angles.sin(),) * 2, -1)
        q_ref, _ = apply_rotary_pos_emb(q[..., :r], q[..., :r], cos[None], sin[None])
        q_got, _ = scheme.rotate(q, q, positions, positions)
        torch.testing.assert_close(q_got[..., :r], q_ref, rtol=1e-4, atol=1e-4)  # HF θ is float32
