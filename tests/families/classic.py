"""Shared by the tests of the pre-Llama families (GPT-2, OPT, BLOOM, MPT, GPT-NeoX, GPT-J, BERT, T5, …).

Their norms are called ``ln_1``, ``norm_1``, ``*_layernorm``, so ``hf_compare.randomise``
(which looks for "norm" in the name) would miss some: ``perturb`` moves every
one-dimensional parameter (every norm gain and bias, every bias) off HF's
initial ones/zeros so that each is tested.
"""

from __future__ import annotations

import torch


def perturb(model, scale: float = 0.3):
    """Add N(0, scale²) to every 1-D parameter (norm gains, norm biases, projection biases); eval mode."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * scale)
    return model.eval()
