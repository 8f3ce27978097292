"""Training steps shared by the benchmark workers: built once, called for every timed step."""

from __future__ import annotations

from typing import Any


def train_step(logits: Any, targets: Any, opt: Any, vocab: int) -> Any:
    """One training step: ``logits()`` (B, T, V) against ``targets`` (B, T), cross-entropy, backward, update."""
    import torch.nn.functional as F

    def step() -> float:
        loss = F.cross_entropy(logits().reshape(-1, vocab), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return float(loss.detach())
    return step


def seq2seq_train_step(forward: Any, opt: Any, src: Any, tgt: Any, vocab: int) -> Any:
    """Teacher forcing: ``forward(src, tgt_in)`` (a model, or its compiled form) predicts tgt[:, 1:]."""
    return train_step(lambda: forward(src, tgt[:, :-1]), tgt[:, 1:], opt, vocab)
