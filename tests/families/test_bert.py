"""BERT on posenc's parts (learned positions + token types, post-norm encoder, pooling) against HF ``BertModel``:
tiny random checkpoints, and the real all-MiniLM-L6-v2 sentence embeddings."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.24",
                                   reason="reference tests need HF transformers >= 5.24, a test-only dependency")

from classic import perturb  # noqa: E402
from installed import MINILM, folder, missing  # noqa: E402

from posenc.formats import CheckpointError  # noqa: E402
from posenc.models.encoder import mean_pool  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

VOCAB = 67


def bert(**overrides):
    base = dict(hidden_size=48, num_hidden_layers=2, num_attention_heads=4, intermediate_size=80, vocab_size=VOCAB,
                max_position_embeddings=24, type_vocab_size=2)
    return transformers.BertConfig(**(base | overrides))


def test_hidden_states_equal_hf_with_padding_and_token_types(seed, tmp_path):
    hf = perturb(transformers.BertModel(bert()))
    hf.save_pretrained(tmp_path)
    pm = load_pretrained(tmp_path)
    ids = torch.randint(0, VOCAB, (3, 13))
    mask = torch.ones(3, 13, dtype=torch.long)
    mask[1, 9:], mask[2, 4:] = 0, 0  # right padding
    types = (torch.arange(13) >= 6).long().expand(3, -1)
    with torch.no_grad():
        ref = hf(ids, attention_mask=mask, token_type_ids=types)
        ours = pm.model(ids, attention_mask=mask, token_types=types)
        real = mask.bool()
        torch.testing.assert_close(ours[real], ref.last_hidden_state[real], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(pm.model.pooled(ours), ref.pooler_output, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(pm.model.sentence_embedding(ids, attention_mask=mask, token_types=types),
                                   mean_pool(ref.last_hidden_state, mask), rtol=1e-4, atol=1e-5)
    d = pm.model.describe()["position"]
    assert d["name"] == "learned" and d["max_len"] == 24


def test_task_model_prefix_loads_and_its_head_is_refused(seed, tmp_path):
    """``bert.`` names of a task model load; its MLM head has no place in an encoder and is named."""
    hf = transformers.BertForMaskedLM(bert())
    hf.save_pretrained(tmp_path)
    with pytest.raises(CheckpointError, match="cls.predictions"):
        load_pretrained(tmp_path)
    from safetensors.torch import load_file, save_file

    tensors = {k: v for k, v in load_file(tmp_path / "model.safetensors").items() if k.startswith("bert.")}
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(CheckpointError, match="missing tensor.*pooler"):  # BertForMaskedLM has no pooler
        load_pretrained(tmp_path)


def test_relative_position_types_are_refused_by_name(tmp_path):
    transformers.BertModel(bert()).save_pretrained(tmp_path)
    data = json.loads((tmp_path / "config.json").read_text()) | {"position_embedding_type": "relative_key"}
    (tmp_path / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match="position_embedding_type 'relative_key'"):
        load_pretrained(tmp_path)


def test_inspect_and_lab_read_the_learned_table(seed, tmp_path):
    from posenc.inspect import inspect_checkpoint
    from posenc.lab.measures import scheme_similarity

    hf = perturb(transformers.BertModel(bert()))
    hf.save_pretrained(tmp_path)
    pos = inspect_checkpoint(tmp_path)["position"]
    assert pos["kind"] == "learned" and pos["tensor"] == "embeddings.position_embeddings.weight"
    table = hf.embeddings.position_embeddings.weight.detach().double()
    torch.testing.assert_close(scheme_similarity(load_pretrained(tmp_path).model.position, 24), table @ table.T)


SENTENCES = ["The cat sits on the mat.", "A feline rests on a rug.",
             "Positional encodings tell a Transformer where each token is.", "Paris is the capital of France."]


@pytest.mark.skipif(folder(MINILM) is None, reason=missing(MINILM))
def test_real_minilm_sentence_embeddings_equal_hf():
    path = folder(MINILM)
    pm = load_pretrained(path)
    tok = pm.tokenizer.tokenizer
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    batch = tok.encode_batch(SENTENCES)
    ids = torch.tensor([e.ids for e in batch])
    mask = torch.tensor([e.attention_mask for e in batch])
    diffs = {}
    with torch.no_grad():
        ours = pm.model.sentence_embedding(ids, attention_mask=mask)
        for impl in ("sdpa", "eager"):  # HF's two attention paths: the same sums, in other orders
            hf = transformers.BertModel.from_pretrained(path, attn_implementation=impl).eval()
            ref = mean_pool(hf(ids, attention_mask=mask).last_hidden_state, mask)
            torch.testing.assert_close(ours, ref, rtol=1e-4, atol=1e-5)
            diffs[impl] = float((ours - ref).abs().max())
    unit = torch.nn.functional.normalize(ours, dim=-1)
    cos = unit @ unit.T
    assert cos[0, 1] > cos[0, 2] and cos[0, 1] > cos[0, 3]  # the paraphrase is the nearest sentence
    print(f"MiniLM sentence embeddings, max |posenc − HF|: sdpa {diffs['sdpa']:.2e}, eager {diffs['eager']:.2e}; "
          f"cos(cat, feline) = {float(cos[0, 1]):.3f}")
