"""``posenc export`` faithful and complete: the tokenizer transformers needs (chat template, special tokens, BOS rule),
the weights' dtype (``--dtype``), a GGUF source's quantised blocks kept byte for byte (or ``--gguf-type``), file
modes, transformers 4's RoPE spelling beside 5's, and the refusals (an ``--out`` in the source, a non-empty
``--out``, non-finite weights and options out of range)."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0")
gguf = pytest.importorskip("gguf")
pytest.importorskip("accelerate")  # transformers' GGUF loading path imports it
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pretrained"))
from gguf_helpers import smollm2_path, spm_fields, tiny_hf, tokenizer_fields, train_tokenizer, write_gguf  # noqa: E402

from posenc.cli import main  # noqa: E402
from posenc.extend.export import export_model, gguf_tensor_types  # noqa: E402
from posenc.formats.gguf import open_gguf, read_metadata  # noqa: E402
from posenc.models.decoder import build_decoder  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402
from posenc.pretrained.tokenizer import load_tokenizer  # noqa: E402

L0 = 32
YARN = {"factor": 4.0, "beta_fast": 16.0}
MESSAGES = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
            {"role": "user", "content": "And 3 + 3?"}]
TEXTS = ["Hello world!  12345 café", "The quick brown fox.\n\nrotary position embeddings rotate queries and keys",
         "<|im_start|>user\nhi<|im_end|>\n"]
#: Gemma's chat template as its tokenizer_config.json states it (bos_token, turns, raise_exception)
GEMMA_TEMPLATE = (
    "{{ bos_token }}{%- if messages[0]['role'] == 'system' -%}{%- set first = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}{%- else -%}{%- set first = '' -%}{%- set loop_messages = messages -%}"
    "{%- endif -%}{%- for message in loop_messages -%}{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif -%}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first if loop.first else '') + message['content'] | trim + "
    "'<end_of_turn>\n' }}{%- endfor -%}{%- if add_generation_prompt -%}{{ '<start_of_turn>model\n' }}{%- endif -%}")


def mode_of_a_plain_open(folder: Path) -> int:
    """The permission bits ``open(path, "w")`` gives a new file in ``folder`` (umask and default ACL applied)."""
    probe = folder / ".probe"
    probe.write_text("")
    mode = stat.S_IMODE(probe.stat().st_mode)
    probe.unlink()
    return mode


def variant_logits(source, position, options, ids, *, rounded: torch.dtype | None = None, matrices_only=False,
                   **load):
    """posenc's model of ``source`` with the scheme replaced (its weights — ``matrices_only``: its matrices —
    rounded to ``rounded`` first): the numbers an export must reproduce."""
    pm = load_pretrained(source, pairing="half", **load)
    opts = {**options, **({"original_max_len": pm.config.max_position_embeddings}
                          if position in ("rope-yarn", "rope-llama3") else {})}
    cfg = dataclasses.replace(pm.config, position=position, position_options={**pm.config.position_options, **opts})
    model = build_decoder(cfg).eval()
    state = pm.model.state_dict()
    if rounded is not None:
        state = {k: v.to(rounded).float() if v.dim() >= 2 or not matrices_only else v for k, v in state.items()}
    model.load_state_dict(state)
    with torch.no_grad():
        return model(ids)


def close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * max(1.0, float(want.abs().max())))


def hf_logits(out, ids, **kw):
    model = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32, **kw).eval()
    with torch.no_grad():
        return model(ids).logits


def same_blocks(a: Path, b: Path) -> bool:
    """Every tensor of GGUF ``b`` is ``a``'s: name, GGML type and bytes."""
    ta, tb = open_gguf(a).tensors, open_gguf(b).tensors
    return len(ta) == len(tb) and all(x.name == y.name and x.tensor_type == y.tensor_type
                                      and np.array_equal(np.asarray(x.data), np.asarray(y.data))
                                      for x, y in zip(ta, tb))


def tiny_llama(vocab_size: int):
    """A tiny random HF llama trained to L0 positions (float32; norms random too, so a swapped one shows)."""
    cfg = transformers.LlamaConfig(vocab_size=vocab_size, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=L0,
                                   rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                                   rope_parameters={"rope_type": "default", "rope_theta": 500.0})
    model = transformers.LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.3)
    return model


@pytest.fixture
def quantised(tmp_path, seed):
    """A tiny llama GGUF as llama.cpp quantises one: Q4_1 matrices, a Q8_0 token table, F32 norms, a chat template."""
    tok = train_tokenizer()
    fields = tokenizer_fields(tok)
    model = tiny_llama(len(fields["tokens"]))
    embed = model.model.embed_tokens.weight.detach().numpy()
    q8 = gguf.quants.quantize(embed, gguf.GGMLQuantizationType.Q8_0)
    (tmp_path / "src").mkdir()
    return write_gguf(tmp_path / "src" / "tiny.gguf", model, fields, qtype="Q4_1",
                      replace={"token_embd.weight": (q8, "Q8_0")})


@pytest.fixture
def folder(tmp_path, seed):
    """A tiny float32 HF llama folder (byte-level BPE, tokenizer_config.json with BOS/EOS and a chat template)."""
    tok = train_tokenizer()
    model = tiny_llama(tok.get_vocab_size())
    model.save_pretrained(tmp_path / "hf", safe_serialization=True)
    tok.save(str(tmp_path / "hf" / "tokenizer.json"))
    (tmp_path / "hf" / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "tokenizer_class": "PreTrainedTokenizerFast",
        "chat_template": "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
                         "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"}))
    return tmp_path / "hf"


# -- the real SmolLM2-135M-Instruct (Q4_1) ----------------------------------------------------------------------


@pytest.mark.slow
def test_smollm2_instruct_exports_whole(tmp_path):
    """The 98 MB Q4_1 file: the GGUF keeps every block (98 MB, not 540), the HF folder is bfloat16 (269 MB, not
    538), transformers' tokenizer of the folder gives posenc's ids and chat, and transformers reads the folder and
    the GGUF to the variant's logits."""
    src = smollm2_path()
    out = tmp_path / "out"
    assert main(["export", str(src), "--position", "rope-yarn", "--position-option", "factor=2", "--out", str(out),
                 "--quiet"]) == 0
    # the GGUF: the source's blocks and metadata, but the context length and the RoPE keys
    assert same_blocks(src, out / "model.gguf")
    assert gguf_tensor_types(out / "model.gguf") == gguf_tensor_types(src) == {"Q4_1": 210, "F32": 61, "Q8_0": 1}
    want, got = (read_metadata(open_gguf(p)) for p in (src, out / "model.gguf"))
    for key in want:
        if key != "llama.context_length":
            assert got[key] == want[key], key
    assert got["llama.context_length"] == 2 * 8192 and got["llama.rope.scaling.type"] == "yarn"
    assert got["tokenizer.chat_template"] == want["tokenizer.chat_template"]
    assert abs((out / "model.gguf").stat().st_size - src.stat().st_size) < 4096
    # the HF folder: bfloat16 weights, the tokenizer transformers needs, and every file as a plain open makes it
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        assert {f.get_slice(k).get_dtype() for k in f.keys()} == {"BF16"}
    assert (out / "model.safetensors").stat().st_size < 0.51 * 538_090_408  # the float32 folder's weights
    config = json.loads((out / "config.json").read_text())
    assert config["dtype"] == config["torch_dtype"] == "bfloat16"
    assert config["rope_scaling"] == {k: v for k, v in config["rope_parameters"].items() if k != "rope_theta"}
    mode = mode_of_a_plain_open(tmp_path)
    files = [p for p in out.iterdir() if p.name != ".lock"]  # the run lock's, not the export's
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files} == {p.name: oct(mode) for p in files}
    ours = load_tokenizer(src)
    theirs = transformers.AutoTokenizer.from_pretrained(out)
    assert (theirs.bos_token, theirs.eos_token, theirs.pad_token, theirs.unk_token) == (
        "<|im_start|>", "<|im_end|>", "<|im_end|>", "<|endoftext|>")
    for text in TEXTS:
        assert theirs(text).input_ids == ours.encode(text), text
    for generate in (True, False):
        for messages in (MESSAGES, [{"role": "system", "content": "Be brief."}, *MESSAGES]):
            rendered = theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=generate)
            assert rendered == ours.apply_chat_template(messages, add_generation_prompt=generate)
    # logits: the folder (bfloat16 weights) and the GGUF (the source's blocks) against posenc's variant
    ids = torch.tensor([ours.encode(" ".join(TEXTS) * 3)])
    want = variant_logits(src, "rope-yarn", {"factor": 2.0}, ids, rounded=torch.bfloat16, weights="dequantised")
    close(hf_logits(out, ids), want)
    exact = variant_logits(src, "rope-yarn", {"factor": 2.0}, ids, weights="dequantised")
    close(hf_logits(out, ids, gguf_file="model.gguf", config=transformers.AutoConfig.from_pretrained(out)), exact)
    assert not torch.allclose(exact, variant_logits(src, "rope", {}, ids, weights="dequantised"), atol=1e-2)


# -- tokenizer files -----------------------------------------------------------------------------------------------


def test_gemma3_gguf_tokenizer_with_its_chat_template_and_bos(tmp_path, seed):
    """A SentencePiece Gemma 3 GGUF that wants BOS first and carries Gemma's chat template: transformers' tokenizer
    of the exported folder puts BOS first as posenc does, names <s>/</s>/<unk> and renders posenc's chat; the GGUF
    keeps the template, the ids and the BOS flag."""
    fields = spm_fields()
    hf = tiny_hf("gemma3", len(fields["tokens"]), max_position_embeddings=L0)
    meta = {"tokenizer.ggml.add_bos_token": True, "tokenizer.chat_template": GEMMA_TEMPLATE}
    src = write_gguf(tmp_path / "gemma3.gguf", hf, fields, arch="gemma3", tokenizer_model="llama", pre="default",
                     meta=meta)
    export_model(src, "rope-linear", {"factor": 2.0}, tmp_path / "out")
    out = tmp_path / "out"
    ours, theirs = load_tokenizer(src), transformers.AutoTokenizer.from_pretrained(out)
    assert ours.add_bos and theirs.bos_token == ours.token(ours.bos_id) and theirs.unk_token is not None
    for text in TEXTS:
        ids = theirs(text).input_ids
        assert ids == ours.encode(text) and ids[0] == ours.bos_id, text
    for generate in (True, False):
        rendered = theirs.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=generate)
        assert rendered == ours.apply_chat_template(MESSAGES, add_generation_prompt=generate)
        assert rendered.startswith(theirs.bos_token + "<start_of_turn>user\n")
    assert (out / "chat_template.jinja").read_text() == GEMMA_TEMPLATE
    assert json.loads((out / "tokenizer_config.json").read_text())["add_bos_token"] is True
    meta_out = read_metadata(open_gguf(out / "model.gguf"))
    for key in ("tokenizer.chat_template", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                "tokenizer.ggml.add_bos_token"):
        assert meta_out[key] == read_metadata(open_gguf(src))[key], key
    assert same_blocks(src, out / "model.gguf")


@pytest.mark.slow
def test_real_gemma3_tokenizer_files(request, tmp_path):
    """Gemma 3 270M's 262,144 pieces: the files export writes beside tokenizer.json make transformers' tokenizer
    give posenc's ids, BOS first (its GGUF says add_bos_token), with its special tokens (the file has no chat
    template: both refuse one). Only the tokenizer is written: the weights are another test's."""
    from gguf_helpers import gemma3_path

    from posenc.extend.export import hf_tokenizer_files

    path = gemma3_path(request.config.cache.mkdir("gemma3-270m"))
    ours = load_tokenizer(path)
    (tmp_path / "tok").mkdir()
    (tmp_path / "tok" / "tokenizer.json").write_text(ours.tokenizer.to_str())
    for name, data in hf_tokenizer_files(ours, extra_special={"unk_token": "<unk>", "pad_token": "<pad>"}).items():
        (tmp_path / "tok" / name).write_bytes(data)
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "tok")
    assert (theirs.bos_token, theirs.eos_token, theirs.pad_token, theirs.unk_token) == ("<bos>", "<eos>", "<pad>",
                                                                                         "<unk>")
    for text in [*TEXTS, "<start_of_turn>user\nWhat is RoPE?<end_of_turn>\n<start_of_turn>model\n"]:
        assert theirs(text).input_ids == ours.encode(text) and ours.encode(text)[0] == 2, text
    with pytest.raises(ValueError):
        theirs.apply_chat_template(MESSAGES, tokenize=False)
    with pytest.raises(ValueError, match="no chat template"):
        ours.apply_chat_template(MESSAGES)


def test_an_hf_source_keeps_its_own_tokenizer_files(folder, tmp_path):
    (folder / "special_tokens_map.json").write_text(json.dumps({"bos_token": "<|im_start|>"}))
    (folder / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    export_model(folder, "rope-linear", {"factor": 2.0}, tmp_path / "out", formats=("hf",))
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"):
        assert (tmp_path / "out" / name).read_bytes() == (folder / name).read_bytes(), name
    theirs = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert theirs.apply_chat_template(MESSAGES, tokenize=False) == load_tokenizer(folder).apply_chat_template(
        MESSAGES, add_generation_prompt=False)


# -- dtype and GGUF types ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_hf_dtype_loads_to_the_variant_of_the_rounded_weights(folder, tmp_path, dtype):
    out = tmp_path / "out"
    result = export_model(folder, "rope-yarn", YARN, out, formats=("hf",), dtype=dtype)
    assert result["dtype"] == dtype == json.loads((out / "config.json").read_text())["dtype"]
    from safetensors import safe_open

    with safe_open(str(out / "model.safetensors"), framework="pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {getattr(torch, dtype)}
    ids = torch.randint(0, 300, (1, 3 * L0))
    want = variant_logits(folder, "rope-yarn", YARN, ids, rounded=getattr(torch, dtype))
    close(hf_logits(out, ids), want)
    if dtype != "float32":  # the test can tell the rounding apart
        assert not torch.allclose(want, variant_logits(folder, "rope-yarn", YARN, ids), rtol=1e-6, atol=1e-6)


def test_default_dtype_is_the_sources(folder, quantised, tmp_path):
    """float32 safetensors stay float32; a quantised GGUF's weights go bfloat16."""
    assert export_model(folder, "rope", {}, tmp_path / "a", formats=("hf",))["dtype"] == "float32"
    assert export_model(quantised, "rope", {}, tmp_path / "b", formats=("hf",))["dtype"] == "bfloat16"


def test_quantised_gguf_keeps_its_blocks(quantised, tmp_path):
    """No weight changes with the RoPE setting: every block of the source GGUF is written as it was (llama's
    interleaved q/k rows included), and transformers and posenc read the file (+ config.json) to the variant."""
    out = tmp_path / "out"
    result = export_model(quantised, "rope-yarn", YARN, out)
    assert same_blocks(quantised, out / "model.gguf")
    assert result["gguf_types"] == gguf_tensor_types(quantised) == {"Q4_1": 15, "F32": 5, "Q8_0": 1}
    ids = torch.randint(3, 300, (1, 3 * L0))
    want = variant_logits(quantised, "rope-yarn", YARN, ids, weights="dequantised")
    with torch.no_grad():
        close(load_pretrained(out / "model.gguf", weights="dequantised").model(ids), want)
    close(hf_logits(out, ids, gguf_file="model.gguf", config=transformers.AutoConfig.from_pretrained(out)), want)
    got, want = (read_metadata(open_gguf(p)) for p in (out / "model.gguf", quantised))
    assert got.get("general.file_type") == want.get("general.file_type")
    assert {k: v for k, v in got.items() if k.startswith("tokenizer.")} == {
        k: v for k, v in want.items() if k.startswith("tokenizer.")}


@pytest.mark.parametrize("gguf_type, matrices", [("q8_0", "Q8_0"), ("f16", "F16"), ("bf16", "BF16"),
                                                 ("f32", "F32")])
def test_gguf_type_requantises_the_matrices(folder, tmp_path, gguf_type, matrices):
    """``--gguf-type``: every matrix in the type, norms F32; transformers' GGUF loader and posenc read the file to
    the same logits, the float types to the variant of the rounded weights."""
    out = tmp_path / "out"
    result = export_model(folder, "rope-yarn", YARN, out, gguf_type=gguf_type)
    assert result["gguf_types"] == ({"F32": 21} if matrices == "F32" else {matrices: 16, "F32": 5})
    ids = torch.randint(0, 300, (1, 3 * L0))
    with torch.no_grad():
        ours = load_pretrained(out / "model.gguf", weights="dequantised").model(ids)
    close(hf_logits(out, ids, gguf_file="model.gguf", config=transformers.AutoConfig.from_pretrained(out)), ours)
    rounded = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32}.get(matrices)
    if rounded is not None:  # norms stay float32 in the file
        close(ours, variant_logits(folder, "rope-yarn", YARN, ids, rounded=rounded, matrices_only=True))
    else:  # Q8_0: within its quantisation error of the variant
        assert float((ours - variant_logits(folder, "rope-yarn", YARN, ids)).abs().max()) < 0.05 * float(
            ours.abs().max())


def test_command_line_dtype_and_gguf_type(quantised, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", str(quantised), "--position", "rope-linear", "--position-option", "factor=2", "--dtype",
                 "float16", "--gguf-type", "q8_0", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "HF weights: float16" in printed and "GGUF tensor types: Q8_0 16, F32 5" in printed
    assert f"wrote {out / 'model.gguf'} (" in printed
    with pytest.raises(SystemExit):
        main(["export", str(quantised), "--dtype", "float64", "--out", str(tmp_path / "x")])
    assert "invalid choice: 'float64'" in capsys.readouterr().err


# -- transformers 4's spelling -------------------------------------------------------------------------------------


def test_transformers4_spelling_beside_rope_parameters(folder, tmp_path):
    """config.json states each setting twice, in one block: rope_parameters (transformers 5) and rope_scaling +
    rope_theta (4.x; checked on 4.57.1 by hand). transformers 5 reads rope_scaling first: a config with only the 4.x
    keys loads to the same logits."""
    ids = torch.randint(0, 300, (1, 3 * L0))
    for position, options in (("rope-yarn", YARN), ("rope-ntk", {"factor": 3.0}), ("rope", {})):
        out = tmp_path / position
        export_model(folder, position, options, out, formats=("hf",))
        config = json.loads((out / "config.json").read_text())
        block = config["rope_parameters"]
        assert config["rope_theta"] == block["rope_theta"]
        assert config["rope_scaling"] == (None if block["rope_type"] == "default" else
                                          {k: v for k, v in block.items() if k != "rope_theta"})
        want = hf_logits(out, ids)
        del config["rope_parameters"]
        (out / "config.json").write_text(json.dumps(config))
        close(hf_logits(out, ids), want)


def test_gemma3_transformers4_spelling(tmp_path, seed):
    """Gemma 3: rope_scaling is the global layers' block, rope_local_base_freq the sliding layers' base; with every
    layer scaled, transformers 4 has no field for the sliding layers: the result says so."""
    fields = spm_fields()
    hf = tiny_hf("gemma3", len(fields["tokens"]), max_position_embeddings=L0)
    src = write_gguf(tmp_path / "g.gguf", hf, fields, arch="gemma3", tokenizer_model="llama", pre="default")
    result = export_model(src, "rope-yarn", YARN, tmp_path / "global", formats=("hf",))
    config = json.loads((tmp_path / "global" / "config.json").read_text())
    full = config["rope_parameters"]["full_attention"]
    assert config["rope_scaling"] == {k: v for k, v in full.items() if k != "rope_theta"}
    assert (config["rope_theta"], config["rope_local_base_freq"]) == (1e6, 1e4) and result["transformers4"] is None
    ids = torch.randint(3, 300, (1, 3 * L0))
    want = hf_logits(tmp_path / "global", ids)
    del config["rope_parameters"]
    (tmp_path / "global" / "config.json").write_text(json.dumps(config))
    close(hf_logits(tmp_path / "global", ids), want)
    every = export_model(src, "rope-yarn", YARN, tmp_path / "all", formats=("hf",), layers="all")
    assert "transformers 4 has no field for a scaled Gemma 3 sliding layer" in every["transformers4"]
    assert export_model(src, "rope-ntk", {"factor": 2.0}, tmp_path / "ntk", formats=("hf",),
                        layers="all")["transformers4"] is None  # NTK on the sliding layers is their base


# -- files ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_every_file_has_the_mode_a_plain_open_gives(folder, tmp_path, umask):
    old = os.umask(umask)
    try:
        out = tmp_path / "out"
        result = export_model(folder, "rope-linear", {"factor": 2.0}, out)
        mode = mode_of_a_plain_open(tmp_path)
    finally:
        os.umask(old)
    assert mode == 0o666 & ~umask
    written = [Path(p) for p in result["sizes"]]
    assert {p.name for p in written} >= {"model.safetensors", "config.json", "tokenizer.json", "model.gguf"}
    assert {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in written} == {p.name: oct(mode) for p in written}
    assert not [p for p in out.iterdir() if "posenc-tmp" in p.name]


# -- refusals --------------------------------------------------------------------------------------------------------


def test_out_in_the_source_is_refused_before_anything_is_written(folder, quantised, tmp_path, capsys):
    before = sorted(p.name for p in folder.iterdir())
    for out in (folder, folder / "sub", folder.parent):
        with pytest.raises(ValueError, match="export never writes into its input"):
            export_model(folder, "rope", {}, out, formats=("hf",), force=True)
        assert main(["export", str(folder), "--format", "hf", "--force", "--out", str(out)]) == 2
        assert "export never writes into its input" in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == before and not (folder / "sub").exists()  # no .lock either
    home = quantised.parent
    for out in (home, home.parent):
        with pytest.raises(ValueError, match=f"the folder of the source file {quantised.name}"):
            export_model(quantised, "rope", {}, out, force=True)
    assert sorted(p.name for p in home.iterdir()) == [quantised.name]
    # a folder under the file's folder, beside the file, is not the source: `posenc export m.gguf --out m-yarn`
    export_model(quantised, "rope", {}, home / "m-rope", formats=("gguf",))
    assert same_blocks(quantised, home / "m-rope" / "model.gguf")


def test_a_non_empty_out_needs_force_which_replaces_the_earlier_export(folder, tmp_path, capsys):
    out = tmp_path / "out"
    export_model(folder, "rope-linear", {"factor": 2.0}, out)
    with pytest.raises(ValueError, match="is not empty.*--force"):
        export_model(folder, "rope-yarn", YARN, out)
    assert main(["export", str(folder), "--position", "rope-yarn", "--position-option", "factor=4", "--out",
                 str(out)]) == 2
    assert "is not empty" in capsys.readouterr().err
    (out / "notes.txt").write_text("mine")
    export_model(folder, "rope-yarn", YARN, out, formats=("hf",), force=True)
    assert json.loads((out / "config.json").read_text())["rope_parameters"]["rope_type"] == "yarn"
    assert not (out / "model.gguf").exists()  # the earlier export's GGUF (linear) would contradict the folder
    assert (out / "notes.txt").read_text() == "mine"


def test_non_finite_weights_are_refused_by_name(folder, tmp_path):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(folder / "model.safetensors"))
    tensors["model.layers.1.mlp.up_proj.weight"][3, 5] = float("nan")
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match="model.layers.1.mlp.up_proj.weight.*non-finite"):
        export_model(folder, "rope", {}, tmp_path / "out")
    tensors["model.layers.1.mlp.up_proj.weight"][3, 5] = 1e5  # beyond float16's 65,504
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(ValueError, match="model.layers.1.mlp.up_proj.weight.*float16"):
        export_model(folder, "rope", {}, tmp_path / "out", dtype="float16")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("options, match", [
    ({"factor": 2.0, "mscale": -5}, "mscale=-5: must be a number > 0"),
    ({"factor": 2.0, "mscale": 1.0, "mscale_all_dim": 0}, "mscale_all_dim=0: must be a number > 0"),
    ({"factor": 1e308}, "factor=1e\\+308: the extended context"),
    ({"factor": math.inf}, "factor=inf: not a finite number"),
    ({"factor": math.nan}, "factor=nan: not a finite number"),
    ({"factor": 0.5}, "factor=0.5: must be a number >= 1"),
    ({"factor": 2.0, "beta_fast": math.inf}, "beta_fast=inf: not a finite number"),
    ({"factor": 2.0, "attention_factor": -1.0}, "attention_factor must be a finite number > 0"),
])
def test_options_out_of_range_are_refused_by_name(folder, tmp_path, options, match):
    with pytest.raises(ValueError, match=match):
        export_model(folder, "rope-yarn", options, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_command_line_refuses_an_option_by_name(folder, tmp_path, capsys):
    for option, said in (("mscale=-5", "mscale=-5"), ("factor=1e308", "factor=1e+308")):
        assert main(["export", str(folder), "--position", "rope-yarn", "--position-option", "factor=2",
                     "--position-option", option, "--out", str(tmp_path / "x")] if option.startswith("mscale") else
                    ["export", str(folder), "--position", "rope-yarn", "--position-option", option,
                     "--out", str(tmp_path / "x")]) == 2
        assert said in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
