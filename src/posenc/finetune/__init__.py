"""Extend by training: fine-tune a checkpoint to a longer context with one method, and search LongRoPE's factors.

* ``run`` — ``FinetuneConfig`` and ``finetune(start, cfg, out_dir)``: the method's model (config with the
  position replaced, same weights), full or LoRA fine-tuning on a real text with ``posenc.train``'s loop
  (AdamW, warm-up + cosine, atomic checkpoints, exact resume, DDP under torchrun), the measures of
  ``posenc extend`` before and every N updates.
* ``longrope`` — LongRoPE's evolutionary search (Ding et al., 2024) for per-pair factors and n̂; its result is
  a ``rope-longrope`` configuration.
* ``data`` — training documents that the measures never read, ``ByteTokenizer``, step-determined batches.
* ``measure`` — loss by position and passkey, as ``posenc extend`` measures them.
* ``model`` — the start checkpoint (posenc run or real model), the method's variant, gradient checkpointing.
* ``grid`` — the mini-scale replication (pretrain at L₀, then method × factor × steps × seed), resumable, sharded;
  ``report`` — its results.json, results.md and plots, with intervals over seeds.

``posenc finetune`` is the command line.
"""

from posenc.finetune.data import ByteTokenizer, token_stream, training_document, window_batches
from posenc.finetune.longrope import Search, SearchConfig
from posenc.finetune.measure import MeasureSpec, Measurer
from posenc.finetune.model import Start, gradient_checkpointing, load_start, method_model
from posenc.finetune.run import FinetuneConfig, finetune, sequence_loss

__all__ = [
    "ByteTokenizer",
    "FinetuneConfig",
    "MeasureSpec",
    "Measurer",
    "Search",
    "SearchConfig",
    "Start",
    "finetune",
    "gradient_checkpointing",
    "load_start",
    "method_model",
    "sequence_loss",
    "token_stream",
    "training_document",
    "window_batches",
]
