"""Phi-3 on posenc's parts against HF ``Phi3ForCausalLM``: fused projections, LongRoPE, partial rotary, windows.

The LongRoPE tests pin down what happens when a sequence crosses
``original_max_position_embeddings`` (L₀), where HF's full forward and HF's
cached decoding of the same tokens disagree (module docstring of
``posenc.families.phi3``): each posenc mode is compared with the HF run it
reproduces, full and cached, and the HF runs are shown to differ.
"""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from hf_compare import compare, randomise, tolerance  # noqa: E402

from posenc.families.phi3 import fixed_longrope  # noqa: E402
from posenc.models.decoder import build_decoder  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 131
L0 = 16  # original_max_position_embeddings of the LongRoPE configs


def phi3(**overrides):
    base = dict(num_hidden_layers=3, hidden_size=64, intermediate_size=96, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64, pad_token_id=0,
                bos_token_id=1, eos_token_id=2)
    return transformers.Phi3Config(**(base | overrides))


def longrope(partial: float = 1.0, **overrides):
    """A LongRoPE config: L₀ = 16 extended ×4, searched-looking factors (short near 1, long up to 30)."""
    pairs = int(16 * partial) // 2  # head_dim 16
    short = (1 + 0.5 * torch.rand(pairs, dtype=torch.float64)).tolist()
    long = (1 + 29 * torch.rand(pairs, dtype=torch.float64)).sort().values.tolist()
    return phi3(original_max_position_embeddings=L0, partial_rotary_factor=partial,
                rope_parameters={"rope_type": "longrope", "rope_theta": 10000.0, "short_factor": short,
                                 "long_factor": long}, **overrides)


def hf_cached(hf, ids, prompt):
    """HF's logits for ``ids`` fed as a prompt of ``prompt`` tokens, then one token per call (its own cache)."""
    with torch.no_grad():
        out = hf(ids[:, :prompt], use_cache=True)
        parts, cache = [out.logits], out.cache
        for i in range(prompt, ids.shape[1]):
            out = hf(ids[:, i:i + 1], cache=cache, use_cache=True)
            parts.append(out.logits)
            cache = out.cache
    return torch.cat(parts, dim=1)


def posenc_runs(model, ids, prompt):
    """posenc's full forward and its cached decoding (prompt, then one token per call)."""
    with torch.no_grad():
        cache = model.new_cache()
        parts = [model(ids[:, :prompt], cache=cache)]
        parts += [model(ids[:, i:i + 1], cache=cache) for i in range(prompt, ids.shape[1])]
        return model(ids), torch.cat(parts, dim=1)


def with_mode(pm, max_seq_len):
    model = build_decoder(fixed_longrope(pm.config, max_seq_len))
    model.load_state_dict(pm.model.state_dict())
    return model.eval()


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("variant", ["default", "partial", "window"])
def test_logits_equal_hf_within_the_original_length(variant, pairing, seed, tmp_path):
    """Fused qkv/gate_up split at load; plain RoPE, Phi-4-mini's 3/4 partial rotary, Phi-3-mini-4k's window."""
    overrides = {"default": {}, "partial": {"partial_rotary_factor": 0.75, "tie_word_embeddings": True},
                 "window": {"sliding_window": 5}}[variant]
    hf = randomise(transformers.Phi3ForCausalLM(phi3(**overrides)))
    pm = compare(hf, tmp_path, torch.randint(0, VOCAB, (2, 19)), pairing=pairing)
    options = pm.config.position_options
    assert options.get("rotary_dim") == (12 if variant == "partial" else None)
    assert pm.config.sliding_window == (5 if variant == "window" else None)
    assert "q_proj" in dict(pm.model.layers[0].attn.named_children()) and pm.model.layers[0].ffn.gate_proj.weight.shape == (96, 64)


@pytest.mark.parametrize("pairing", ["interleaved", "half"])
@pytest.mark.parametrize("partial", [1.0, 0.75])
def test_longrope_crossing_the_original_length(partial, pairing, seed, tmp_path):
    """One sequence of 28 tokens across L₀ = 16: which posenc mode equals which HF run, full and cached."""
    hf = randomise(transformers.Phi3ForCausalLM(longrope(partial)))
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path, pairing=pairing)
    assert pm.config.position == "rope-longrope" and pm.config.position_options["original_max_len"] == L0
    ids = torch.randint(0, VOCAB, (2, 28))
    with torch.no_grad():
        hf_full = hf(ids).logits  # one call of 28 > L₀ tokens: long factors at every position
    hf_short_prompt = hf_cached(hf, ids, prompt=10)  # keys 0 … 15 short, 16 … 27 long
    hf_long_prompt = hf_cached(hf, ids, prompt=20)  # the prompt's call already exceeds L₀: long everywhere
    tol = tolerance(hf_full)

    # HF itself: the same tokens, two different sets of logits — at every position, not only past L₀
    assert not torch.allclose(hf_full[:, :L0], hf_short_prompt[:, :L0], **tol)
    assert not torch.allclose(hf_full[:, L0:], hf_short_prompt[:, L0:], **tol)
    torch.testing.assert_close(hf_long_prompt, hf_full, **tol)

    # posenc's default (per position) is HF's cached decoding from a short prompt — full and cached alike
    full, cached = posenc_runs(pm.model, ids, prompt=10)
    torch.testing.assert_close(full, hf_short_prompt, **tol)
    torch.testing.assert_close(cached, hf_short_prompt, **tol)
    # and a prefix's logits do not change as the sequence grows (HF's full forward's do)
    with torch.no_grad():
        torch.testing.assert_close(pm.model(ids[:, :L0 + 1])[:, :L0], full[:, :L0], **tol)
        assert not torch.allclose(hf(ids[:, :L0 + 1]).logits[:, :L0], hf(ids[:, :L0]).logits, **tol)

    # the fixed mode at any length > L₀ is HF's full forward (and its cached run from a long prompt)
    fixed = with_mode(pm, 28)
    full, cached = posenc_runs(fixed, ids, prompt=10)
    torch.testing.assert_close(full, hf_full, **tol)
    torch.testing.assert_close(cached, hf_full, **tol)
    full_at_l0_plus_1, _ = posenc_runs(with_mode(pm, L0 + 1), ids, prompt=20)
    torch.testing.assert_close(full_at_l0_plus_1, hf_long_prompt, **tol)

    # the fixed mode at L ≤ L₀ is HF's full forward of a sequence that does not cross (short everywhere)
    with torch.no_grad():
        torch.testing.assert_close(with_mode(pm, L0)(ids[:, :L0]), hf(ids[:, :L0]).logits, **tol)


def test_transformers_4_style_config(seed, tmp_path):
    """``rope_scaling`` type "su" (HF's old name for longrope), L₀ only at the top level, rope_theta beside it."""
    hf = randomise(transformers.Phi3ForCausalLM(longrope()))
    hf.save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    rope = data.pop("rope_parameters")
    data["rope_scaling"] = {"type": "su", "short_factor": rope["short_factor"], "long_factor": rope["long_factor"]}
    data["rope_theta"] = rope["rope_theta"]
    (tmp_path / "config.json").write_text(json.dumps(data))
    pm = load_pretrained(tmp_path)
    assert pm.config.position == "rope-longrope" and pm.config.position_options["original_max_len"] == L0
    ids = torch.randint(0, VOCAB, (1, 12))
    with torch.no_grad():
        ref = hf(ids).logits
        torch.testing.assert_close(pm.model(ids), ref, **tolerance(ref))


def test_refusals_name_the_field(tmp_path):
    transformers.Phi3ForCausalLM(longrope()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text())
    bad = [({"rope_parameters": {**data["rope_parameters"], "rope_type": "llama3"}}, "not a Phi-3 type"),
           ({"rope_parameters": {**data["rope_parameters"], "short_factor": [1.0] * 3}}, "short_factor has 3"),
           ({"hidden_act": "gelu"}, "hidden_act")]
    for change, message in bad:
        (tmp_path / "config.json").write_text(json.dumps(data | change))
        with pytest.raises(ValueError, match=message):
            load_pretrained(tmp_path)
