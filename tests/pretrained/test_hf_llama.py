"""posenc's Decoder loaded from HF folders against HF ``transformers`` running the same weights.

Every test builds a tiny model with fresh random weights through HF's own
classes, saves it with ``save_pretrained`` (safetensors), loads the folder with
``load_pretrained`` and compares logits: full forward and cached decoding
token by token, for Llama, Mistral, Qwen2 (q/k/v biases), multi-query and
tied-embedding models, and every RoPE scaling type HF and posenc share.
"""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0",
                                   reason="reference tests need HF transformers >= 5, a test-only dependency")
from transformers import AutoModelForCausalLM  # noqa: E402

from posenc.formats.safetensors import CheckpointError  # noqa: E402
from posenc.models.decoder import build_decoder  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 97


def hf_model(model_type: str = "llama", **overrides):
    """A tiny HF causal LM of ``model_type`` with random weights (seeded by the test's seed fixture)."""
    config_cls = transformers.AutoConfig.for_model
    base = dict(vocab_size=VOCAB, hidden_size=48, intermediate_size=80, num_hidden_layers=2, num_attention_heads=6,
                num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-5, tie_word_embeddings=False)
    if model_type == "mistral":
        base["sliding_window"] = None
    config = config_cls(model_type, **(base | overrides))
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval()
    with torch.no_grad():  # HF zero-initialises biases and ones norms: randomise so they are tested
        for name, p in model.named_parameters():
            if name.endswith("bias") or "norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    return model


def save(model, folder, **kwargs):
    model.save_pretrained(folder, safe_serialization=True, **kwargs)
    return folder


def tolerance(ref: torch.Tensor) -> dict[str, float]:
    """float32 round-off of two implementations of the same sums, scaled to the logits."""
    return {"rtol": 1e-4, "atol": 1e-5 * max(1.0, float(ref.abs().max()))}


def assert_matches_hf(hf, folder, ids, *, pairing="interleaved"):
    pm = load_pretrained(folder, pairing=pairing)
    with torch.no_grad():
        ref = hf(ids).logits
        full = pm.model(ids)
        torch.testing.assert_close(full, ref, **tolerance(ref))
        cache = pm.model.new_cache()
        steps = torch.cat([pm.model(ids[:, i:i + 1], cache=cache) for i in range(ids.shape[1])], dim=1)
        torch.testing.assert_close(steps, ref, **tolerance(ref))
    return pm


MODELS = {
    "llama-gqa": ("llama", {}),
    "llama-mha-tied": ("llama", {"num_key_value_heads": 6, "tie_word_embeddings": True}),
    "llama-mqa": ("llama", {"num_key_value_heads": 1}),
    "llama-bias": ("llama", {"attention_bias": True, "mlp_bias": True}),
    "llama-head-dim": ("llama", {"head_dim": 12}),  # head_dim · heads ≠ hidden_size
    "mistral": ("mistral", {}),
    "qwen2": ("qwen2", {}),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_logits_equal_hf_full_and_cached(name, seed, tmp_path):
    model_type, overrides = MODELS[name]
    hf = hf_model(model_type, **overrides)
    ids = torch.randint(0, VOCAB, (2, 11))
    pm = assert_matches_hf(hf, save(hf, tmp_path), ids)
    assert pm.config.kv_heads == hf.config.num_key_value_heads
    assert pm.model.layers[0].attn.k_proj.out_features == hf.config.num_key_value_heads * pm.config.attention_head_dim
    if model_type == "qwen2":  # q/k/v biases, none on the output projection
        assert pm.model.layers[0].attn.q_proj.bias is not None and pm.model.layers[0].attn.out_proj.bias is None


def test_cache_holds_the_kv_heads_unrepeated(seed, tmp_path):
    hf = hf_model("llama", num_key_value_heads=1)
    pm = load_pretrained(save(hf, tmp_path))
    cache = pm.model.new_cache()
    pm.model(torch.randint(0, VOCAB, (3, 5)), cache=cache)
    assert tuple(cache[0].k.shape) == (3, 1, 5, pm.config.attention_head_dim)


def test_sharded_checkpoint(seed, tmp_path):
    hf = hf_model("llama")
    folder = save(hf, tmp_path, max_shard_size="20KB")
    assert (folder / "model.safetensors.index.json").is_file()
    assert_matches_hf(hf, folder, torch.randint(0, VOCAB, (1, 9)))


def test_half_and_interleaved_pairing_give_the_same_logits(seed, tmp_path):
    hf = hf_model("qwen2")  # with q/k biases, whose rows must be permuted too
    folder = save(hf, tmp_path)
    half = load_pretrained(folder, pairing="half")
    inter = load_pretrained(folder, pairing="interleaved")
    assert half.config.position_options["pairing"] == "half"
    assert inter.config.position_options["pairing"] == "interleaved"
    # the rows really differ: the permutation was applied, not skipped
    assert not torch.equal(half.model.layers[0].attn.q_proj.weight, inter.model.layers[0].attn.q_proj.weight)
    ids = torch.randint(0, VOCAB, (2, 13))
    with torch.no_grad():
        a, b = half.model(ids), inter.model(ids)
    torch.testing.assert_close(a, b, **tolerance(a))


def _scaling_cases(gen):
    """HF rope_parameters of every type posenc shares, with random factors; contexts short so T crosses L₀."""
    factor = 1.5 + 6 * float(torch.rand((), generator=gen))
    return {
        "linear": ({"rope_type": "linear", "factor": factor}, 16),
        "dynamic": ({"rope_type": "dynamic", "factor": factor}, 32),
        "yarn": ({"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": 8,
                  "beta_fast": 8.0, "beta_slow": 1.0}, 16),
        "llama3": ({"rope_type": "llama3", "factor": factor, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                    "original_max_position_embeddings": 8}, 16),
        "longrope": ({"rope_type": "longrope", "factor": factor, "original_max_position_embeddings": 32,
                      "short_factor": [1 + float(v) for v in torch.rand(4, generator=gen)],
                      "long_factor": [1 + 4 * float(v) for v in torch.rand(4, generator=gen)]}, 64),
    }


@pytest.mark.parametrize("rope_type", ["linear", "dynamic", "yarn", "llama3", "longrope"])
def test_rope_scaling_types_equal_hf(rope_type, seed, gen, tmp_path):
    """Each HF rope type → the posenc scheme of that name, same logits.

    Dynamic NTK and LongRoPE choose frequencies from a length; HF takes it from
    the forward call, posenc from each position (see rotary_scaling). They agree
    while the sequence stays within the trained context, which is what is
    compared here; the other three types are compared past L₀.
    """
    params, max_pos = _scaling_cases(gen)[rope_type]
    hf = hf_model("llama", hidden_size=48, num_attention_heads=6, max_position_embeddings=max_pos,
                  rope_parameters={"rope_theta": 10 ** (2 + 3 * float(torch.rand((), generator=gen))), **params})
    length = 24 if rope_type in ("linear", "yarn", "llama3") else 20  # past L₀ = 8 / 16, or within 32 / 64
    pm = assert_matches_hf(hf, save(hf, tmp_path), torch.randint(0, VOCAB, (2, length)))
    assert pm.config.position == {"linear": "rope-linear", "dynamic": "rope-dynamic-ntk", "yarn": "rope-yarn",
                                  "llama3": "rope-llama3", "longrope": "rope-longrope"}[rope_type]


def test_another_rope_scaling_is_a_config_replace(seed, tmp_path):
    """CONTRACTS: a model with other RoPE settings = build_decoder(replace(cfg, ...)) + the same state dict."""
    hf = hf_model("llama")
    pm = load_pretrained(save(hf, tmp_path))
    cfg = dataclasses.replace(pm.config, position="rope-linear",
                              position_options={**pm.config.position_options, "factor": 1.0})
    other = build_decoder(cfg).eval()
    other.load_state_dict(pm.model.state_dict())
    ids = torch.randint(0, VOCAB, (1, 10))
    with torch.no_grad():
        torch.testing.assert_close(other(ids), pm.model(ids))  # factor 1 interpolation is plain RoPE


def test_greedy_generation_equals_hf_generate(seed, tmp_path):
    hf = hf_model("llama")
    pm = load_pretrained(save(hf, tmp_path))
    prompt = torch.randint(0, VOCAB, (1, 5))
    # No EOS on either side: HF's default generation config names eos id 2, and `min_new_tokens` would mask
    # that token's logit (posenc's generate without eos_id would still pick it where it is the argmax).
    hf.generation_config.eos_token_id = None
    # an explicit mask: without one HF infers padding from pad_token_id and masks every prompt token equal to 0
    ref = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12, do_sample=False,
                      pad_token_id=0)
    out = pm.model.generate(prompt, 12)
    assert out.tolist() == ref.tolist()


def test_sampling_is_seeded_and_respects_filters(seed, tmp_path):
    hf = hf_model("llama")
    model = load_pretrained(save(hf, tmp_path)).model
    prompt = torch.randint(0, VOCAB, (2, 4))
    a = model.generate(prompt, 10, temperature=1.0, seed=seed)
    b = model.generate(prompt, 10, temperature=1.0, seed=seed)
    assert torch.equal(a, b)
    # top_k=1 and a tiny top_p both leave only the most likely token: greedy
    greedy = model.generate(prompt, 10)
    assert torch.equal(model.generate(prompt, 10, temperature=0.7, top_k=1, seed=seed), greedy)
    assert torch.equal(model.generate(prompt, 10, temperature=0.7, top_p=1e-9, seed=seed), greedy)


def test_generation_stops_at_eos(seed, tmp_path):
    hf = hf_model("llama")
    model = load_pretrained(save(hf, tmp_path)).model
    prompt = torch.randint(0, VOCAB, (1, 4))
    greedy = model.generate(prompt, 8)
    eos = int(greedy[0, 6])  # the third generated token: generation must end right there
    first = int((greedy[0, 4:] == eos).nonzero()[0]) + 4
    out = model.generate(prompt, 8, eos_id=eos)
    assert out.shape[1] == first + 1 and int(out[0, -1]) == eos


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_loading_stays_close_to_float32(dtype, seed, tmp_path):
    hf = hf_model("llama")
    folder = save(hf, tmp_path)
    pm = load_pretrained(folder, dtype=dtype)
    assert {p.dtype for p in pm.model.parameters()} == {dtype}
    ids = torch.randint(0, VOCAB, (1, 12))
    with torch.no_grad():
        ref = hf(ids).logits
        got = pm.model(ids)
    assert got.dtype == dtype
    eps = torch.finfo(dtype).eps
    # a few roundings per layer, relative to the logits' scale
    assert float((got.float() - ref).abs().max()) < 50 * eps * max(1.0, float(ref.abs().max()))


def test_loaded_weights_are_the_checkpoint_tensors(seed, tmp_path):
    """Loaded in place: no parameter left on the meta device, a tied head is the table itself."""
    hf = hf_model("llama", tie_word_embeddings=True)
    pm = load_pretrained(save(hf, tmp_path))
    assert all(p.device.type == "cpu" for p in pm.model.parameters())
    assert pm.model.head.weight is pm.model.embed.weight
    torch.testing.assert_close(pm.model.embed.weight, hf.model.embed_tokens.weight, rtol=0, atol=0)


# -- bad folders ---------------------------------------------------------------------


def _rewrite_config(folder, **changes):
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.update(changes)
    path.write_text(json.dumps(config))


def test_missing_tensor_is_named(seed, tmp_path):
    from safetensors.torch import load_file, save_file

    folder = save(hf_model("llama"), tmp_path)
    tensors = load_file(folder / "model.safetensors")
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"missing tensor.*layers\.1\.ffn\.up_proj.*download every file"):
        load_pretrained(folder)


def test_wrong_shape_is_named(seed, tmp_path):
    folder = save(hf_model("llama"), tmp_path)
    _rewrite_config(folder, intermediate_size=96)
    with pytest.raises(CheckpointError, match=r"mlp\.\w+_proj\.weight' has shape .* config implies"):
        load_pretrained(folder)


@pytest.mark.parametrize("model_type", ["falcon", "gemma"])
def test_unsupported_model_type_is_refused_by_name(model_type, seed, tmp_path):
    folder = save(hf_model("llama"), tmp_path)
    _rewrite_config(folder, model_type=model_type)
    with pytest.raises(ValueError, match=f"model_type '{model_type}' is not supported.*llama, .*mistral, .*qwen2"):
        load_pretrained(folder)


def test_unsupported_rope_type_is_refused_by_name(seed, tmp_path):
    folder = save(hf_model("llama"), tmp_path)
    _rewrite_config(folder, rope_parameters={"rope_type": "mrope", "rope_theta": 10000.0})
    with pytest.raises(ValueError, match="RoPE type 'mrope' is not supported.*llama3"):
        load_pretrained(folder)


def test_sliding_window_equals_hf_within_and_beyond_the_window(seed, tmp_path):
    hf = hf_model("mistral", sliding_window=8, max_position_embeddings=64)
    folder = save(hf, tmp_path)
    assert_matches_hf(hf, folder, torch.randint(0, VOCAB, (1, 8)))
    pm = assert_matches_hf(hf, folder, torch.randint(0, VOCAB, (2, 29)))  # 29 > 8: the window binds
    assert all(str(layer.attn.window) == "sliding 8" for layer in pm.model.layers)
    cache = pm.model.new_cache()
    pm.model(torch.randint(0, VOCAB, (1, 29)), cache=cache)
    assert {c.stored for c in cache} == {7} and {c.length for c in cache} == {29}  # O(W) cache, true positions
    _rewrite_config(folder, model_type="qwen2", use_sliding_window=True)
    with pytest.raises(ValueError, match="use_sliding_window=true"):
        load_pretrained(folder)


def test_truncated_safetensors_is_named(seed, tmp_path):
    folder = save(hf_model("llama"), tmp_path)
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(CheckpointError, match="model.safetensors"):
        load_pretrained(folder)


def test_pickle_weights_are_refused(seed, tmp_path):
    folder = save(hf_model("llama"), tmp_path)
    (folder / "model.safetensors").rename(folder / "pytorch_model.bin")
    with pytest.raises(CheckpointError, match="pickle.*safetensors"):
        load_pretrained(folder)
    with pytest.raises(CheckpointError, match="pickle"):
        load_pretrained(folder / "pytorch_model.bin")


def test_missing_folder_and_config(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        load_pretrained(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_pretrained(tmp_path)
    with pytest.raises(ValueError, match="dtype must be one of"):
        load_pretrained(tmp_path, dtype="int8")


def test_rms_norm_matches_formula(gen):
    """RMSNorm against the float64 formula x / sqrt(mean(x²) + eps) · g."""
    from posenc.models.decoder import RMSNorm

    norm = RMSNorm(16, eps=1e-5)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(16, generator=gen))
    x = torch.randn(3, 5, 16, generator=gen)
    x64 = x.double()
    ref = x64 / torch.sqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5) * norm.weight.double()
    torch.testing.assert_close(norm(x).double(), ref, rtol=1e-6, atol=1e-6)
    assert math.isclose(norm.eps, 1e-5)


def test_config_is_json_round_trippable(seed, tmp_path):
    hf = hf_model("llama", rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                            "high_freq_factor": 4.0, "original_max_position_embeddings": 16,
                                            "rope_theta": 500000.0})
    cfg = load_pretrained(save(hf, tmp_path)).config
    again = type(cfg).from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg and again.position == "rope-llama3" and again.position_options["base"] == 500000.0
    with pytest.raises(ValueError, match="unknown DecoderConfig field"):
        type(cfg).from_dict({**cfg.to_dict(), "hidden_size": 3})
