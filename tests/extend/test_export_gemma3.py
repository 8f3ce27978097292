"""``posenc export`` of a Gemma 3 checkpoint: the scheme on the global layers (or all), written as an HF folder
with per-layer-type ``rope_parameters`` and as a llama.cpp ``gemma3`` GGUF; transformers and posenc read both
back to the logits of posenc's variant. The source is a tiny random Gemma 3 GGUF written as llama.cpp's converter
writes one (SentencePiece vocabulary, norm gains stored as 1 + w)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0")
pytest.importorskip("gguf")
pytest.importorskip("accelerate")  # transformers' GGUF loading path imports it
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pretrained"))
from gguf_helpers import spm_fields, tiny_hf, write_gguf  # noqa: E402

from posenc.cli import main  # noqa: E402
from posenc.extend.export import export_model  # noqa: E402
from posenc.extend.methods import ROPE_KEYS, selected_layers  # noqa: E402
from posenc.models.decoder import build_decoder  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

L0 = 32
GLOBAL_LAYER = 5  # tiny_hf's Gemma 3: seven layers, the sixth global
SETTINGS = {
    "rope": {},
    "rope-ntk": {"factor": 3.0},
    "rope-linear": {"factor": 2.0},
    "rope-yarn": {"factor": 4.0, "beta_fast": 16.0},
    "rope-llama3": {"factor": 4.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
}
TEXT = "The grass is green. The pass key is 12345. Remember it."


@pytest.fixture
def source(tmp_path, seed):
    fields = spm_fields()
    hf = tiny_hf("gemma3", len(fields["tokens"]), max_position_embeddings=L0)
    return write_gguf(tmp_path / "gemma3.gguf", hf, fields, arch="gemma3", tokenizer_model="llama", pre="default")


def variant_logits(source, position, options, ids, layers=None):
    """posenc's Gemma 3 with the scheme on the chosen layers (each keeping its own base): what the export must
    reproduce."""
    pm = load_pretrained(source, pairing="half")
    opts = {**options, **({"original_max_len": L0} if position in ("rope-yarn", "rope-llama3") else {})}
    plan = [s.to_dict() for s in pm.config.plan]
    for i in selected_layers(pm.config, layers):
        kept = {k: v for k, v in plan[i]["position_options"].items() if k in ROPE_KEYS}
        plan[i] = {**plan[i], "position": position, "position_options": {**kept, **opts}}
    model = build_decoder(dataclasses.replace(pm.config, layer_plan=plan, sliding_window=None)).eval()
    model.load_state_dict(pm.model.state_dict())
    with torch.no_grad():
        return model(ids)


def close(got, want):
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5 * max(1.0, float(want.abs().max())))


def ids_for(length=3 * L0):
    return torch.randint(3, 300, (1, length))  # past L0 and past the window (5)


@pytest.mark.parametrize("position", sorted(SETTINGS))
def test_hf_folder_scales_the_global_layers_only(source, tmp_path, position):
    out = tmp_path / "out"
    result = export_model(source, position, SETTINGS[position], out, formats=("hf",))
    ids = ids_for()
    want = variant_logits(source, position, SETTINGS[position], ids)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    assert type(hf).__name__ == "Gemma3ForCausalLM"
    with torch.no_grad():
        close(hf(ids).logits, want)
    config = json.loads((out / "config.json").read_text())
    blocks = config["rope_parameters"]
    assert blocks == result["rope_parameters"] and result["layers"] == "global"
    assert blocks["sliding_attention"] == {"rope_type": "default", "rope_theta": 10000.0}
    assert blocks["full_attention"]["rope_theta"] == (1e6 if position != "rope-ntk" else pytest.approx(
        1e6 * 3.0 ** (16 / 14)))  # NTK: the global base grown by s^(d/(d−2)), d = 16
    assert config["max_position_embeddings"] == (L0 if position == "rope" else round(SETTINGS[position]["factor"] * L0))
    with torch.no_grad():  # posenc reads its own export back to the same numbers
        close(load_pretrained(out).model(ids), want)


def test_hf_folder_with_every_layer_scaled(source, tmp_path):
    """``--layers all``: the sliding layers take the scheme too, each on its own base; HF computes it, and it
    is not the global-only model (the test tells them apart)."""
    options = SETTINGS["rope-yarn"]
    out = tmp_path / "all"
    result = export_model(source, "rope-yarn", options, out, formats=("hf",), layers="all")
    assert result["layers"] == "all"
    blocks = result["rope_parameters"]
    assert blocks["sliding_attention"]["rope_type"] == blocks["full_attention"]["rope_type"] == "yarn"
    assert (blocks["sliding_attention"]["rope_theta"], blocks["full_attention"]["rope_theta"]) == (1e4, 1e6)
    ids = ids_for()
    want = variant_logits(source, "rope-yarn", options, ids, layers="all")
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
        close(hf(ids).logits, want)
    assert not torch.allclose(want, variant_logits(source, "rope-yarn", options, ids), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("position", ["rope", "rope-ntk", "rope-linear", "rope-yarn"])
def test_gguf_read_back_by_posenc_and_by_transformers(source, tmp_path, position):
    import gguf

    out = tmp_path / "out"
    export_model(source, position, SETTINGS[position], out)
    ids = ids_for()
    want = variant_logits(source, position, SETTINGS[position], ids)
    back = load_pretrained(out / "model.gguf")
    with torch.no_grad():
        close(back.model(ids), want)
    fields = gguf.GGUFReader(str(out / "model.gguf")).fields
    assert bytes(fields["general.architecture"].parts[-1]).decode() == "gemma3"
    keys = {k.removeprefix("gemma3.rope.") for k in fields if k.startswith("gemma3.rope.")}
    expected = {"freq_base", "dimension_count"}
    if position == "rope-linear":
        expected |= {"scaling.type", "scaling.factor"}
    if position == "rope-yarn":
        expected |= {"scaling.type", "scaling.factor", "scaling.original_context_length", "scaling.yarn_beta_fast",
                     "scaling.yarn_beta_slow"}  # no attn_factor: llama.cpp would apply it to the sliding layers too
    assert keys == expected
    # the SentencePiece vocabulary goes through whole: scores and all, so the ids are the source's
    src = load_pretrained(source)
    assert back.tokenizer.encode(TEXT) == src.tokenizer.encode(TEXT)
    assert list(fields["tokenizer.ggml.scores"].contents()) == list(gguf.GGUFReader(str(source)).fields[
        "tokenizer.ggml.scores"].contents())
    # transformers' GGUF loader reads the weights (norms back from 1 + w); the scaling comes from config.json
    config = transformers.AutoConfig.from_pretrained(out)
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, gguf_file="model.gguf", config=config,
                                                           dtype=torch.float32).eval()
    with torch.no_grad():
        close(hf(ids).logits, want)


def test_plain_gguf_holds_the_source_tensors(source, tmp_path):
    """Exported with plain RoPE, every tensor read back equals the source's (Gemma's 1 + w norms undone)."""
    from posenc.formats.gguf import read_gguf

    export_model(source, "rope", {}, tmp_path / "out", formats=("gguf",))
    a, b = read_gguf(source), read_gguf(tmp_path / "out" / "model.gguf")
    assert set(a.tensors) == set(b.tensors)
    for name, t in a.tensors.items():
        torch.testing.assert_close(b.tensors[name], t, rtol=0, atol=2**-23 * (2 + float(t.abs().max())), msg=name)


def test_what_a_gemma3_gguf_cannot_state_is_refused_before_writing(source, tmp_path):
    with pytest.raises(ValueError, match="--layers all cannot be written as a Gemma 3 GGUF.*--layers global"):
        export_model(source, "rope-yarn", {"factor": 2.0}, tmp_path / "a", layers="all")
    with pytest.raises(ValueError, match="rope-llama3.*GGUF"):
        export_model(source, "rope-llama3", {"factor": 2.0}, tmp_path / "b")
    with pytest.raises(ValueError, match="attention factor other than YaRN's own.*sliding.*--format hf"):
        export_model(source, "rope-yarn", {"factor": 2.0, "attention_factor": 1.3}, tmp_path / "g")
    assert not (tmp_path / "g").exists()
    with pytest.raises(ValueError, match="--layers 'middle' is not one of"):
        export_model(source, "rope-yarn", {"factor": 2.0}, tmp_path / "c", layers="middle")
    assert not any((tmp_path / n).exists() for n in "abc")
    # an HF Gemma 3 whose plan is not llama.cpp's (every sixth layer global): HF yes, GGUF no
    plan = ["sliding_attention", "full_attention"] * 3 + ["sliding_attention"]
    hf = tiny_hf("gemma3", 400, max_position_embeddings=L0, layer_types=plan)
    hf.save_pretrained(tmp_path / "hf")
    from tokenizers import Tokenizer, models

    Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>")).save(str(tmp_path / "hf" / "tokenizer.json"))
    with pytest.raises(ValueError, match="not the plan llama.cpp hard-codes for gemma3.*--format hf"):
        export_model(tmp_path / "hf", "rope-linear", {"factor": 2.0}, tmp_path / "d", formats=("gguf",))
    # llama.cpp's plan, but a vocabulary with no GGUF spelling (WordLevel): refused before the HF folder is written
    tiny_hf("gemma3", 400, max_position_embeddings=L0).save_pretrained(tmp_path / "hf2")
    (tmp_path / "hf2" / "tokenizer.json").write_text((tmp_path / "hf" / "tokenizer.json").read_text())
    with pytest.raises(ValueError, match="tokenizer has no GGUF spelling.*--format hf"):
        export_model(tmp_path / "hf2", "rope", {}, tmp_path / "f")
    assert not (tmp_path / "d").exists() and not (tmp_path / "f").exists()
    export_model(tmp_path / "hf", "rope-linear", {"factor": 2.0}, tmp_path / "e", formats=("hf",))
    back = json.loads((tmp_path / "e" / "config.json").read_text())
    assert back["layer_types"] == plan
    assert back["rope_parameters"]["full_attention"]["rope_type"] == "linear"


def test_command_line_layers(source, tmp_path, capsys):
    out = tmp_path / "cli"
    argv = ["export", str(source), "--position", "rope-yarn", "--position-option", "factor=2", "--layers", "all",
            "--format", "hf", "--out", str(out)]
    assert main(argv) == 0
    blocks = json.loads((out / "config.json").read_text())["rope_parameters"]
    assert blocks["sliding_attention"]["rope_type"] == "yarn"
    assert main(["export", str(source), "--position", "rope-yarn", "--position-option", "factor=2", "--layers", "all",
                 "--out", str(tmp_path / "x")]) != 0
    assert "cannot be written as a Gemma 3 GGUF" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_gguf_from_an_hf_folder_with_a_sentencepiece_tokenizer(source, tmp_path, seed):
    """GGUF → HF folder (tokenizer.json) → GGUF: the vocabulary comes back piece for piece (types, special ids, BOS
    flag, and every mergeable piece's score), the ids equal llama.cpp's encoder written out step by step, and the
    logits the variant's."""
    from gguf_helpers import spm_reference
    from test_gguf_tokenizer import random_texts

    from posenc.formats.gguf import open_gguf, read_metadata

    export_model(source, "rope", {}, tmp_path / "hf", formats=("hf",))
    tok = json.loads((tmp_path / "hf" / "tokenizer.json").read_text())
    assert tok["model"]["byte_fallback"] and tok["normalizer"]["type"] == "Sequence"  # Prepend("▁") + Replace
    export_model(tmp_path / "hf", "rope-yarn", SETTINGS["rope-yarn"], tmp_path / "out", formats=("gguf",))
    ids = ids_for()
    back = load_pretrained(tmp_path / "out" / "model.gguf")
    with torch.no_grad():
        close(back.model(ids), variant_logits(source, "rope-yarn", SETTINGS["rope-yarn"], ids))
    want, got = (read_metadata(open_gguf(p)) for p in (source, tmp_path / "out" / "model.gguf"))
    for key in ("tokens", "token_type", "bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id",
                "add_bos_token", "model"):
        assert got[f"tokenizer.ggml.{key}"] == want[f"tokenizer.ggml.{key}"], key
    prefix = want.get("tokenizer.ggml.add_space_prefix", True)  # llama.cpp's default: absent in the tiny file
    assert got["tokenizer.ggml.add_space_prefix"] is prefix is True
    mergeable = [i for i, (t, k) in enumerate(zip(want["tokenizer.ggml.tokens"], want["tokenizer.ggml.token_type"]))
                 if k == 1 and len(t) > 1]
    assert [got["tokenizer.ggml.scores"][i] for i in mergeable] == [want["tokenizer.ggml.scores"][i] for i in mergeable]
    fields = {"tokens": want["tokenizer.ggml.tokens"], "scores": want["tokenizer.ggml.scores"],
              "types": want["tokenizer.ggml.token_type"]}
    for text in [TEXT, *random_texts(seed, 40)]:
        assert back.tokenizer.encode(text) == spm_reference(fields, text, add_space_prefix=prefix, bos_id=None), text


def test_a_sentencepiece_tokenizer_json_posenc_cannot_spell_is_refused(source, tmp_path):
    """Merges out of the vocabulary's order (scores read from that order would merge differently) and Metaspace's
    "first" prefix (llama.cpp prefixes every fragment) are refused by name; nothing is written."""
    from posenc.formats.gguf_spm import spm_gguf_vocabulary

    export_model(source, "rope", {}, tmp_path / "hf", formats=("hf",))
    data = json.loads((tmp_path / "hf" / "tokenizer.json").read_text())
    assert spm_gguf_vocabulary(data, source="t")["tokenizer.ggml.model"] == "llama"
    shuffled = json.loads(json.dumps(data))
    shuffled["model"]["merges"] = shuffled["model"]["merges"][::-1]
    with pytest.raises(ValueError, match="comes after one making id.*vocabulary's order"):
        spm_gguf_vocabulary(shuffled, source="t")
    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(shuffled))
    with pytest.raises(ValueError, match="no GGUF spelling.*--format hf.*comes after one making id"):
        export_model(tmp_path / "hf", "rope", {}, tmp_path / "s")
    export_model(tmp_path / "hf", "rope", {}, tmp_path / "s", formats=("hf",))  # the HF folder still goes
    hostile = json.loads(json.dumps(data))
    hostile["model"]["vocab"]["\u2581zzz"] = 10**12  # refused before a list of that length is made
    with pytest.raises(ValueError, match="largest token id is 1,000,000,000,000.*no holes"):
        spm_gguf_vocabulary(hostile, source="t")
    first = {**data, "normalizer": None,
             "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False}}
    assert spm_gguf_vocabulary(first, source="t") is None
    (tmp_path / "hf" / "tokenizer.json").write_text(json.dumps(first))
    with pytest.raises(ValueError, match="tokenizer has no GGUF spelling.*--format hf"):
        export_model(tmp_path / "hf", "rope-linear", {"factor": 2.0}, tmp_path / "x")
    assert not (tmp_path / "x").exists()
    always = {**first, "pre_tokenizer": {**first["pre_tokenizer"], "prepend_scheme": "always"}}
    assert spm_gguf_vocabulary(always, source="t")["tokenizer.ggml.add_space_prefix"] is True


def test_real_gemma3_vocabulary_round_trips_through_tokenizer_json(request, seed):
    """Gemma 3 270M's 262,144 pieces: written as tokenizer.json and spelled back as GGUF metadata, everything but the
    single characters' scores (31 lower in the file, never read: a merge makes two characters or more) is the file's,
    and the two vocabularies encode text id for id."""
    import numpy as np
    from gguf_helpers import gemma3_path
    from test_gguf_tokenizer import FIXED, random_texts

    from posenc.extend.export import gguf_tokenizer_from_json
    from posenc.formats.gguf import open_gguf, read_metadata, read_tokenizer
    from posenc.formats.gguf_tokenizer import tokenizer_from_metadata

    path = gemma3_path(request.config.cache.mkdir("gemma3-270m"))
    want = read_metadata(open_gguf(path))
    original = read_tokenizer(path)
    config = {"bos_token_id": 2, "eos_token_id": [1, 106], "pad_token_id": 0}  # HF Gemma 3's config.json
    got = gguf_tokenizer_from_json(original.to_str(), config, None, source="gemma3")
    for key in ("tokens", "token_type", "bos_token_id", "eos_token_id", "unknown_token_id", "padding_token_id",
                "add_bos_token", "add_eos_token", "add_space_prefix", "model", "pre"):
        assert got[f"tokenizer.ggml.{key}"] == want[f"tokenizer.ggml.{key}"], key
    tokens = want["tokenizer.ggml.tokens"]
    moved = np.array(got["tokenizer.ggml.scores"]) != np.array(want["tokenizer.ggml.scores"])
    assert all(len(tokens[i]) == 1 for i in np.flatnonzero(moved))
    rebuilt = tokenizer_from_metadata(got, Path("rebuilt"))
    texts = [t.replace("<|im_start|>", "<start_of_turn>").replace("<|im_end|>", "<end_of_turn>")
             for t in FIXED + random_texts(seed, 60)] + ["a" + " " * 45 + "b\t\t\tc"]
    for text in texts:
        assert rebuilt.encode(text).ids == original.encode(text).ids, text[:80]


def test_an_hf_folder_expects_bos_as_its_gguf_does(tmp_path, seed):
    """A model that wants BOS first keeps it through export: the HF folder's tokenizer (post-processor, or
    tokenizer_config.json's add_bos_token, which wins) starts extend's texts with BOS exactly as the GGUF's flag does.
    Before, an HF folder's texts for extend, passkeys and fine-tuning went without it."""
    from posenc.extend.texts import Document, doc_tokens
    from posenc.pretrained.tokenizer import load_tokenizer

    fields = spm_fields()
    hf = tiny_hf("gemma3", len(fields["tokens"]), max_position_embeddings=L0)
    gguf_path = write_gguf(tmp_path / "bos.gguf", hf, fields, arch="gemma3", tokenizer_model="llama", pre="default",
                           meta={"tokenizer.ggml.add_bos_token": True})
    export_model(gguf_path, "rope", {}, tmp_path / "hf", formats=("hf",))
    ours, theirs = load_tokenizer(gguf_path), load_tokenizer(tmp_path / "hf")
    assert ours.add_bos and theirs.add_bos
    d = Document("t", TEXT * 3, "t")
    assert doc_tokens(d, theirs, 20) == doc_tokens(d, ours, 20)
    assert doc_tokens(d, theirs, 20)[0] == ours.bos_id
    (tmp_path / "hf" / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": False}))
    assert not load_tokenizer(tmp_path / "hf").add_bos
    assert doc_tokens(d, load_tokenizer(tmp_path / "hf"), 20) == doc_tokens(d, ours, 21)[1:]
