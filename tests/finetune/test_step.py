"""One fine-tuning step equals a reference computation: the loss path's gradients and the AdamW update."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from posenc.finetune.data import ByteTokenizer
from posenc.finetune.model import Start, gradient_checkpointing
from posenc.finetune.run import FinetuneConfig, finetune, sequence_loss
from posenc.models.lora import apply_lora

from .conftest import tiny_model


def _reference_grads(model, rows):
    model.zero_grad()
    logits = model(rows[:, :-1])  # (B, T, V): the plain forward, every logit at once
    F.cross_entropy(logits.flatten(0, 1), rows[:, 1:].flatten(), reduction="sum").backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.parametrize("recompute, checkpointing", [(False, False), (True, False), (True, True)])
def test_chunked_recomputed_loss_has_the_reference_gradients(seed, recompute, checkpointing):
    model = tiny_model(seed).train()
    rows = torch.randint(0, 256, (2, 23))
    want = _reference_grads(copy.deepcopy(model), rows)
    with gradient_checkpointing(model, checkpointing):
        loss = sequence_loss(model, rows, chunk=5, recompute=recompute)  # 22 positions: chunks of 5 and a 2
        loss.backward()
    got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert got.keys() == want.keys()
    for name in want:  # a summed loss over 44 targets: gradients of order 1, float32 sums in another order
        scale = want[name].abs().max().item()
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-5 * scale, msg=name)


@pytest.mark.parametrize("lora", [0, 2])
def test_one_update_equals_adamw_on_the_reference_loss(seed, lora, tmp_path):
    """finetune(steps=1) == torch.optim.AdamW on mean cross-entropy of the same window, after clipping."""
    base = tiny_model(seed)
    tokens = torch.randint(0, 256, (400,))
    cfg = FinetuneConfig(method="rope-yarn", factor=2.0, original_max_len=16, length=32, batch_size=2, steps=1,
                         lr=1e-2, warmup_steps=0, weight_decay=0.1, grad_clip=0.5, lora_rank=lora, lora_alpha=4,
                         chunk=7, grad_checkpoint=True, seed=seed)
    res = finetune(Start(base, ByteTokenizer(), 16, "tiny", "test"), cfg, tokens=tokens, progress=False)

    from posenc.extend.methods import build_variant
    from posenc.finetune.data import window_batches

    ref = build_variant(base, "rope-yarn", factor=2.0, original_max_len=16).train()
    if lora:  # finetune draws A from the run's seed
        apply_lora(ref, targets=cfg.lora_targets, rank=lora, alpha=4, generator=torch.Generator().manual_seed(seed))
    rows = window_batches(tokens, length=32, batch_size=2, seed=seed)(0, 0, 1)
    params = [p for p in ref.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
    loss = F.cross_entropy(ref(rows[:, :-1]).flatten(0, 1), rows[:, 1:].flatten())
    loss.backward()
    torch.nn.utils.clip_grad_norm_(params, 0.5)
    grads = {n: p.grad.clone() for n, p in ref.named_parameters() if p.grad is not None}
    opt.step()
    assert math.isclose(res.history[0]["loss"], loss.item(), rel_tol=1e-5)
    got = dict(res.model.named_parameters())
    for name, p in ref.named_parameters():
        # Adam's first step is lr·g/(|g| + eps): where |g| is near eps (1e-8) it turns float32 round-off of g
        # into a visible change, so those entries are compared within lr/100; all others tightly
        g = grads.get(name, torch.zeros_like(p))
        sure = g.abs() > 1e-6
        torch.testing.assert_close(got[name][sure], p[sure], rtol=1e-5, atol=1e-6, msg=name)
        torch.testing.assert_close(got[name], p, rtol=0, atol=1e-4, msg=name)

