"""A quantised GGUF checkpoint as a fine-tuning start: loaded with float weights (a GGUF otherwise loads as stored,
its projections quantised modules with no gradient), LoRA on its projections, and a training step that moves it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch import nn

pytest.importorskip("gguf")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pretrained"))
from gguf_helpers import tiny_llama, tokenizer_fields, train_tokenizer, write_gguf  # noqa: E402


def test_a_gguf_start_loads_float_weights_and_takes_lora(tmp_path: Path, seed: int) -> None:
    from posenc.models.lora import apply_lora
    from posenc.finetune.model import load_start
    from posenc.pretrained import load_pretrained

    tok = train_tokenizer()
    path = write_gguf(tmp_path / "m.gguf", tiny_llama(tok.get_vocab_size()), tokenizer_fields(tok), qtype="Q8_0")
    assert load_pretrained(path).weights == "as-stored"  # what a plain load gives: not trainable
    start = load_start(path)
    linears = [n for n, m in start.model.named_modules() if type(m) is nn.Linear]
    assert any(n.endswith("attn.q_proj") for n in linears), linears
    ref = load_pretrained(path, weights="dequantised").model
    ids = torch.randint(0, tok.get_vocab_size(), (1, 12), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        torch.testing.assert_close(start.model(ids), ref(ids), rtol=0, atol=0)  # the float32 model itself
    apply_lora(start.model, targets=("q_proj", "v_proj"), rank=2, alpha=4)
    trainable = [p for p in start.model.parameters() if p.requires_grad]
    assert trainable and len(trainable) == 2 * 2 * 2  # two A/B pairs per layer, two layers
    loss = start.model(ids).float().logsumexp(-1).mean()
    loss.backward()
    assert all(p.grad is not None for p in trainable)
