"""``posenc export``: an HF folder and a GGUF that transformers and posenc read back to the variant's logits."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0")
pytest.importorskip("gguf")
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM  # noqa: E402

from posenc.cli import main  # noqa: E402
from posenc.extend.export import export_model  # noqa: E402
from posenc.models.decoder import build_decoder  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

L0 = 32
TEXT = "The grass is green. The pass key is 12345. What is the pass key? Licence terms and conditions apply. " * 8
SETTINGS = {  # scheme: options measured in posenc
    "rope": {},
    "rope-ntk": {"factor": 3.0},
    "rope-linear": {"factor": 2.0},
    "rope-yarn": {"factor": 4.0, "beta_fast": 16.0},
    "rope-llama3": {"factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
}


@pytest.fixture
def folder(tmp_path, seed):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<s>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=L0, bos_token_id=1,
                         eos_token_id=0, rope_theta=500.0, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    model.save_pretrained(tmp_path / "src", safe_serialization=True)
    tok.save(str(tmp_path / "src" / "tokenizer.json"))
    (tmp_path / "src" / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>",
                                                                        "eos_token": "<|endoftext|>"}))
    return tmp_path / "src"


def variant_logits(folder, position, options, ids):
    """posenc's model of the source with the scheme replaced: the numbers the export must reproduce."""
    pm = load_pretrained(folder, pairing="half")
    opts = {**options, **({"original_max_len": L0} if position in ("rope-yarn", "rope-llama3") else {})}
    cfg = dataclasses.replace(pm.config, position=position, position_options={**pm.config.position_options, **opts})
    model = build_decoder(cfg).eval()
    model.load_state_dict(pm.model.state_dict())
    with torch.no_grad():
        return model(ids)


def ids_for(folder, length=3 * L0):
    return torch.randint(0, 300, (1, length))


@pytest.mark.parametrize("position", sorted(SETTINGS))
def test_hf_folder_loads_in_transformers_with_the_variants_logits(folder, tmp_path, position):
    out = tmp_path / "out"
    result = export_model(folder, position, SETTINGS[position], out, formats=("hf",))
    ids = ids_for(folder)
    want = variant_logits(folder, position, SETTINGS[position], ids)
    hf = AutoModelForCausalLM.from_pretrained(out).eval()
    with torch.no_grad():
        got = hf(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    config = json.loads((out / "config.json").read_text())
    assert config["rope_parameters"] == result["rope_parameters"]
    assert config["max_position_embeddings"] == (L0 if position == "rope" else round(SETTINGS[position]["factor"] * L0))
    # posenc reads its own export back to the same numbers
    back = load_pretrained(out)
    with torch.no_grad():
        torch.testing.assert_close(back.model(ids), want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("position", ["rope", "rope-ntk", "rope-linear", "rope-yarn"])
def test_gguf_read_back_by_posenc_and_by_transformers(folder, tmp_path, position):
    import gguf

    out = tmp_path / "out"
    export_model(folder, position, SETTINGS[position], out)
    ids = ids_for(folder)
    want = variant_logits(folder, position, SETTINGS[position], ids)
    pm = load_pretrained(out / "model.gguf")  # q/k rows in llama.cpp's order, run with the interleaved pairing
    with torch.no_grad():
        torch.testing.assert_close(pm.model(ids), want, rtol=1e-4, atol=1e-4)
    fields = gguf.GGUFReader(str(out / "model.gguf")).fields
    keys = {k for k in fields if k.startswith("llama.rope.")}
    expected = {"llama.rope.freq_base", "llama.rope.dimension_count"}
    if position == "rope-linear":
        expected |= {"llama.rope.scaling.type", "llama.rope.scaling.factor"}
    if position == "rope-yarn":
        # no attn_factor: llama.cpp applies YaRN's own 0.1·ln s + 1 itself, and the key would multiply it again
        expected |= {"llama.rope.scaling.type", "llama.rope.scaling.factor", "llama.rope.scaling.original_context_length",
                     "llama.rope.scaling.yarn_beta_fast", "llama.rope.scaling.yarn_beta_slow"}
    assert keys == expected
    # the tokenizer: the same ids as the source's tokenizer.json
    src = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert pm.tokenizer.tokenizer.encode(TEXT[:200]).ids == src.encode(TEXT[:200]).ids
    # transformers' GGUF loader reads weights and base; for llama it drops rope.scaling.* (only gpt-oss reads them),
    # so the scaled files need the exported config.json beside them
    config = transformers.AutoConfig.from_pretrained(out) if position in ("rope-linear", "rope-yarn") else None
    hf = AutoModelForCausalLM.from_pretrained(out, gguf_file="model.gguf", config=config).eval()
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, want, rtol=1e-4, atol=1e-4)


def test_a_yarn_attention_factor_of_its_own_is_written_beyond_yarns_default(folder, tmp_path):
    """attention_factor A ≠ 0.1·ln s + 1: the GGUF holds A ÷ (0.1·ln s + 1), the part llama.cpp does not apply
    itself, and posenc reads A back — the variant's logits, which differ from the default factor's."""
    import math

    import gguf

    options = {"factor": 4.0, "attention_factor": 1.3}
    out = tmp_path / "out"
    export_model(folder, "rope-yarn", options, out)
    field = gguf.GGUFReader(str(out / "model.gguf")).fields["llama.rope.scaling.attn_factor"]
    assert float(field.contents()) == pytest.approx(1.3 / (0.1 * math.log(4.0) + 1), rel=1e-6)
    ids = ids_for(folder)
    want = variant_logits(folder, "rope-yarn", options, ids)
    with torch.no_grad():
        torch.testing.assert_close(load_pretrained(out / "model.gguf").model(ids), want, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(want, variant_logits(folder, "rope-yarn", {"factor": 4.0}, ids), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("length", [L0 // 2, 3 * L0])
def test_longrope_fixed_mode_loads_in_transformers_with_the_variants_logits(folder, tmp_path, length, gen):
    """A LongRoPE setting as ``posenc finetune search`` writes it for n̂ = 0 (short factors 1, searched long
    factors, one list for every position: ``max_seq_len`` past L0), and one whose list in use is the short one
    (``max_seq_len`` ≤ L0): HF's longrope, which picks its list per call, computes posenc's logits at lengths
    below and above L0."""
    pairs = 8 // 2  # head width 8, every pair rotated
    long = sorted((1 + 3 * torch.rand(pairs, generator=gen)).tolist())
    short = (1 + 0.5 * torch.rand(pairs, generator=gen)).tolist()
    for max_seq_len, used in ((4 * L0, long), (L0, short)):
        options = {"factor": 4.0, "short_factor": short, "long_factor": long, "max_seq_len": max_seq_len}
        out = tmp_path / f"out{max_seq_len}"
        result = export_model(folder, "rope-longrope", options, out, formats=("hf",))
        block = result["rope_parameters"]
        assert block["rope_type"] == "longrope" and block["short_factor"] == block["long_factor"] == used
        assert block["original_max_position_embeddings"] == L0 and result["max_position_embeddings"] == 4 * L0
        ids = ids_for(folder, length)
        want = variant_logits(folder, "rope-longrope", {**options, "original_max_len": L0}, ids)
        hf = AutoModelForCausalLM.from_pretrained(out).eval()
        with torch.no_grad():
            torch.testing.assert_close(hf(ids).logits, want, rtol=1e-4, atol=1e-4)
    # the other list's logits differ: the test can tell them apart
    other = variant_logits(folder, "rope-longrope", {"factor": 4.0, "short_factor": short, "long_factor": long,
                                                     "max_seq_len": L0, "original_max_len": L0}, ids)
    assert not torch.allclose(other, variant_logits(folder, "rope-longrope", {
        "factor": 4.0, "short_factor": short, "long_factor": long, "max_seq_len": 4 * L0, "original_max_len": L0},
        ids), rtol=1e-3, atol=1e-3)


def test_command_line_exports_a_longrope_search_result(folder, tmp_path, capsys):
    """``--setting result.json`` as ``posenc finetune search`` writes it (n̂ = 0: short factors 1, max_seq_len the
    target length): the HF block holds the searched factors; a file without a method is refused by name."""
    long = [1.0, 1.5, 2.5, 4.0]
    result = {"method": "rope-longrope", "options": {"short_factor": [1.0] * 4, "long_factor": long, "factor": 4.0,
                                                     "attention_factor": 1.2, "original_max_len": L0,
                                                     "max_seq_len": 4 * L0}}
    (tmp_path / "result.json").write_text(json.dumps(result))
    out = tmp_path / "out"
    assert main(["export", str(folder), "--setting", str(tmp_path / "result.json"), "--format", "hf",
                 "--out", str(out)]) == 0
    block = json.loads((out / "config.json").read_text())["rope_parameters"]
    assert block["long_factor"] == block["short_factor"] == long and block["attention_factor"] == 1.2
    (tmp_path / "bad.json").write_text(json.dumps({"options": {}}))
    assert main(["export", str(folder), "--setting", str(tmp_path / "bad.json"), "--out", str(tmp_path / "o2")]) != 0
    assert "bad.json: needs a 'method' (or 'position') name" in capsys.readouterr().err
    assert not (tmp_path / "o2").exists()


def test_longrope_per_position_mode_and_gguf_are_refused_by_name(folder, tmp_path):
    with pytest.raises(ValueError, match="per-position mode.*max_seq_len=N"):
        export_model(folder, "rope-longrope", {"factor": 4.0}, tmp_path / "a", formats=("hf",))
    with pytest.raises(ValueError, match="rope-longrope.*GGUF: llama.cpp takes per-pair factors.*--format hf"):
        export_model(folder, "rope-longrope", {"factor": 4.0, "max_seq_len": 4 * L0}, tmp_path / "b")
    assert not any((tmp_path / n).exists() for n in "ab")


def test_methods_without_a_spelling_are_refused_by_name(folder, tmp_path):
    with pytest.raises(ValueError, match="self-extend.*HF: no field.*GGUF: GGUF metadata has no key"):
        export_model(folder, "self-extend", {"group_size": 4}, tmp_path / "a")
    with pytest.raises(ValueError, match="rope-llama3.*GGUF: llama.cpp spells Llama 3.1.*--format hf"):
        export_model(folder, "rope-llama3", {"factor": 4.0}, tmp_path / "b")
    with pytest.raises(ValueError, match="rope-dynamic-ntk.*HF: HF's 'dynamic'"):
        export_model(folder, "rope-dynamic-ntk", {"factor": 2.0}, tmp_path / "c", formats=("hf",))
    with pytest.raises(ValueError, match="needs --position-option factor"):
        export_model(folder, "rope-yarn", {}, tmp_path / "d")
    assert not any((tmp_path / n).exists() for n in "abcd")  # refused before anything is written


def test_command_line(folder, tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["export", str(folder), "--position", "rope-yarn", "--position-option", "factor=2", "--out", str(out)]
    assert main(argv) == 0
    assert (out / "model.gguf").exists() and (out / "config.json").exists()
    assert "rope_type': 'yarn'" in capsys.readouterr().out
    assert main(["export", str(folder), "--position", "string", "--out", str(tmp_path / "x")]) == 2
    assert "cannot be exported" in capsys.readouterr().err


def test_transformers_gguf_loader_alone_drops_llama_rope_scaling(folder, tmp_path):
    """Why the scaled GGUF needs its config.json for transformers: without it, transformers runs plain RoPE."""
    out = tmp_path / "out"
    export_model(folder, "rope-linear", SETTINGS["rope-linear"], out, formats=("gguf",))
    ids = ids_for(folder)
    hf = AutoModelForCausalLM.from_pretrained(out, gguf_file="model.gguf").eval()
    with torch.no_grad():
        got = hf(ids).logits
    torch.testing.assert_close(got, variant_logits(folder, "rope", {}, ids), rtol=1e-4, atol=1e-4)
