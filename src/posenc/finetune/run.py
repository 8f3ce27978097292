"""Fine-tune a checkpoint at a longer length with one context-extension method: the loop and its settings.

``finetune(start, cfg, out_dir)`` builds the method's model from the start
checkpoint (``posenc.finetune.model.method_model``: config with the position
replaced, same weights), optionally wraps projections with LoRA
(``posenc.models.lora``), and trains it with ``posenc.train.train`` — AdamW,
linear warm-up then cosine, gradient clipping, atomic checkpoints with exact
resume, DDP (or FSDP, ``fsdp=True``) under ``torchrun``, a tqdm bar — on windows of ``cfg.length``
tokens of a real text (``posenc.finetune.data``). The measures of ``posenc
extend`` (``posenc.finetune.measure``) are taken before the first update and
every ``eval_every`` updates.

The loss is computed from the final hidden states ``chunk`` positions at a
time, each chunk's head + cross-entropy recomputed in the backward pass, so the
(T, V) logits never exist at once (SmolLM2 at 16k tokens: 16k × 49k floats =
3 GB). The model's ``forward`` is pointed at that loss for the run, so DDP's
forward (which synchronises the gradients) is what computes it.

Defaults follow the YaRN paper's fine-tuning (Peng et al., 2023, §4.1): AdamW
lr 2e-5, no weight decay, 20 warm-up steps, β = (0.9, 0.95), clipping at 1.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint

from posenc.finetune.measure import MeasureSpec, Measurer
from posenc.finetune.model import Start, autocast, gradient_checkpointing, method_model

#: projections LoRA adapts by default (LongLoRA and the LoRA paper: the attention projections)
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "out_proj")


#: The largest learning rate ``FinetuneConfig`` accepts (an AdamW step moves a weight by about lr).
MAX_LR = 10.0


@dataclass(frozen=True, kw_only=True)
class FinetuneConfig:
    """One fine-tuning run (plain data: stored in every checkpoint and checked on resume).

    Args:
        method: ``rope`` (no scaling) or a scaled scheme (``rope-linear`` = PI, ``rope-ntk``, ``rope-yarn``, …,
            ``rope-longrope`` with ``searched``).
        factor: s (None for plain ``rope``).
        original_max_len: L₀ given to the scheme.
        searched: the ``rope-longrope`` options a search wrote.
        length: training window in tokens (s·L₀ to fine-tune at the target length).
        batch_size: windows per update (over all processes).
        steps, lr, min_lr, warmup_steps, weight_decay, betas, grad_clip: the ``posenc.train`` optimiser settings.
        lora_rank: 0 for full fine-tuning; else the LoRA rank r on ``lora_targets``.
        lora_alpha: LoRA's α (update scaled by α/r).
        lora_targets: projection names.
        lora_train: parameter-name substrings kept trainable besides the LoRA factors (LongLoRA: embed, norm).
        grad_checkpoint: recompute each layer's activations in the backward pass.
        autocast: ``float32`` or ``bfloat16`` (torch.autocast) for the training forward/backward.
        chunk: positions per logits block in the loss.
        train_text: the training document (``bible-rest`` by default: no text the measures read).
        seed: seeds the windows drawn.
        eval_every, checkpoint_every, keep_checkpoints, log_every: as in ``posenc.train.TrainConfig``.
        eval_steps: measure only at these steps (of the ``eval_every`` ones, and the last); empty: at all.
        measure: what the evaluations measure.
    """

    method: str
    factor: float | None
    original_max_len: int
    searched: dict[str, Any] | None = None
    length: int
    batch_size: int = 1
    steps: int
    lr: float = 2e-5
    min_lr: float = 0.0
    warmup_steps: int = 20
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float | None = 1.0
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_targets: tuple[str, ...] = LORA_TARGETS
    lora_train: tuple[str, ...] = ()
    grad_checkpoint: bool = False
    autocast: str = "float32"
    chunk: int = 1024
    train_text: str = "bible-rest"
    seed: int = 0
    eval_every: int = 0
    eval_steps: tuple[int, ...] = ()
    checkpoint_every: int = 0
    keep_checkpoints: int = 1
    log_every: int = 1
    measure: MeasureSpec | None = None

    def __post_init__(self) -> None:
        from posenc.validation import positive_int

        positive_int(self.length, "length")
        positive_int(self.batch_size, "batch_size")
        from posenc.validation import number

        # an AdamW step moves each weight by about lr: above MAX_LR no model survives one step, and 1e300 overflowed
        # torch's float update (RuntimeError) mid-run instead of being refused here
        number(self.lr, "--lr", above=0, maximum=MAX_LR, fix="fine-tuning uses 1e-5 to 1e-3 (YaRN: 2e-5)")
        positive_int(self.chunk, "chunk")
        if self.lora_rank < 0:
            raise ValueError(f"lora_rank must be >= 0 (0: full fine-tuning), got {self.lora_rank}")
        if self.autocast not in ("float32", "bfloat16"):
            raise ValueError(f"autocast must be float32 or bfloat16, got {self.autocast!r}")
        if self.warmup_steps > self.steps:
            object.__setattr__(self, "warmup_steps", self.steps)
        for name in ("lora_targets", "lora_train", "betas", "eval_steps"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["measure"] = None if self.measure is None else self.measure.to_dict()
        return json.loads(json.dumps(data))

    def before_key(self) -> dict[str, Any]:
        """What the measures before fine-tuning depend on (not the seed of the windows, nor the optimiser)."""
        d = self.to_dict()
        return {k: d[k] for k in ("method", "factor", "original_max_len", "searched", "lora_rank", "lora_alpha",
                                  "lora_targets", "measure")}

    def train_config(self, *, progress: bool) -> Any:
        from posenc.train import TrainConfig

        return TrainConfig(steps=self.steps, lr=self.lr, min_lr=self.min_lr, warmup_steps=self.warmup_steps,
                           weight_decay=self.weight_decay, betas=self.betas, grad_clip=self.grad_clip,
                           eval_every=self.eval_every, checkpoint_every=self.checkpoint_every,
                           keep_checkpoints=self.keep_checkpoints, log_every=self.log_every, seed=self.seed,
                           progress=progress)


# -- the loss -------------------------------------------------------------------------------------------
def _chunk_loss(head: nn.Module, h: Tensor, targets: Tensor) -> Tensor:
    return F.cross_entropy(head(h).float().flatten(0, -2), targets.flatten(), reduction="sum")


def sequence_loss(model: nn.Module, rows: Tensor, *, chunk: int, recompute: bool = True) -> Tensor:
    """Summed next-token loss of rows (B, T + 1): hidden states once, the head ``chunk`` positions at a time.

    ``recompute``: each chunk's logits are rebuilt in the backward pass instead of kept (only one chunk's
    (B, c, V) logits exist at any time).
    """
    ids, targets = rows[:, :-1], rows[:, 1:]
    h = model.hidden(ids)  # (B, T, D)
    head = model.logits if hasattr(model, "logits") else model.head
    total = h.new_zeros((), dtype=torch.float32)
    for start in range(0, ids.shape[1], chunk):
        piece, tgt = h[:, start:start + chunk], targets[:, start:start + chunk]
        if recompute and torch.is_grad_enabled():
            total = total + checkpoint(_chunk_loss, head, piece, tgt, use_reentrant=False)
        else:
            total = total + _chunk_loss(head, piece, tgt)
    return total


@contextlib.contextmanager
def loss_forward(model: nn.Module, *, chunk: int) -> Iterator[None]:
    """Within the block ``model(rows)`` returns ``sequence_loss(model, rows)`` (what DDP's forward then calls)."""
    model.forward = lambda rows: sequence_loss(model, rows, chunk=chunk)  # instance attribute, state dict untouched
    try:
        yield
    finally:
        del model.forward


# -- the run --------------------------------------------------------------------------------------------
#: float32 values one layer keeps per position and width unit for the backward pass (attention's q, k, v and
#: output, the norms, the MLP's three hidden widths…): a generous round figure, so the budget errs on refusing.
ACTIVATIONS_PER_LAYER = 16


def check_training_memory(model: nn.Module, cfg: FinetuneConfig) -> None:
    """Refuse, before anything is allocated, a ``--lora-rank`` or ``--batch-size`` the run cannot hold.

    A LoRA rank above a target projection's smaller side adds nothing a full update would not (and allocates
    rank × (in + out) per projection); the training footprint — trainable weights with gradients and AdamW's
    two moments, each layer's activations for ``batch_size`` windows of ``length`` tokens (one layer's with
    ``grad_checkpoint``) and a logits block — is checked against ``posenc.validation.memory_budget``.
    """
    from posenc.validation import check_memory

    linears = [(name.rsplit(".", 1)[-1], m) for name, m in model.named_modules() if type(m) is nn.Linear]
    embeddings = [m for m in model.modules() if isinstance(m, nn.Embedding)]
    width = embeddings[0].embedding_dim if embeddings else max((m.in_features for _, m in linears), default=1)
    vocab = max((m.num_embeddings for m in embeddings), default=1)
    layers = max(1, len(getattr(model, "layers", [])))
    params = sum(p.numel() for p in model.parameters())
    if cfg.lora_rank:
        targets = [(n, m) for n, m in linears if n in cfg.lora_targets]
        if targets:
            name, smallest = min(targets, key=lambda t: min(t[1].in_features, t[1].out_features))
            side = min(smallest.in_features, smallest.out_features)
            if cfg.lora_rank > side:
                raise ValueError(f"--lora-rank {cfg.lora_rank}: above {side}, the smaller side of {name} "
                                 f"({smallest.in_features} → {smallest.out_features}), a LoRA update has no more "
                                 f"to give than a full one; give a rank <= {side}, or --lora-rank 0 (full "
                                 "fine-tuning)")
        trainable = sum(cfg.lora_rank * (m.in_features + m.out_features) for _, m in targets)
    else:
        trainable = params
    windows = cfg.batch_size * cfg.length
    kept = layers if not cfg.grad_checkpoint else 1 + layers / max(1, ACTIVATIONS_PER_LAYER)
    nbytes = (16.0 * trainable + 4.0 * windows * width * ACTIVATIONS_PER_LAYER * kept
              + 12.0 * cfg.batch_size * min(cfg.chunk, cfg.length) * vocab + 8.0 * windows)
    check_memory(nbytes, f"fine-tuning {params:,} parameters ({trainable:,} trainable, with gradients and AdamW "
                 f"moments) on {cfg.batch_size} window(s) of {cfg.length} tokens",
                 fix="lower --batch-size, --length or --lora-rank (or add --grad-checkpoint)")


def prepare(start: Start, cfg: FinetuneConfig) -> nn.Module:
    """The method's model built from ``start`` (with LoRA when asked), in train mode, on start's device."""
    from posenc.models.lora import apply_lora

    model = method_model(start.model, cfg.method, factor=cfg.factor, original_max_len=cfg.original_max_len,
                         searched=cfg.searched)
    if cfg.lora_rank:
        # A drawn from the run's seed alone: every process (and every resume) starts from the same adapters
        apply_lora(model, targets=cfg.lora_targets, rank=cfg.lora_rank, alpha=cfg.lora_alpha, train=cfg.lora_train,
                   generator=torch.Generator().manual_seed(cfg.seed))
    else:
        for p in model.parameters():
            p.requires_grad_(True)
    return model.train()


def peak_memory_mb(device: torch.device) -> float:
    """Peak resident memory of this process (CPU: ru_maxrss) or peak allocated CUDA memory, in MiB."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


@dataclass
class FinetuneResult:
    model: nn.Module
    before: dict[str, Any] | None
    evals: list[dict[str, Any]]
    history: list[dict[str, Any]]
    step: int
    interrupted: bool
    seconds: float
    total_seconds: float
    peak_memory_mb: float
    trainable: int
    tokens: int
    extra: dict[str, Any] = field(default_factory=dict)


def finetune(start: Start, cfg: FinetuneConfig, *, out_dir: str | Path | None = None, resume: bool = False,
             progress: bool = True, tokens: Tensor | None = None, log: Any = print,
             fsdp: bool = False) -> FinetuneResult:
    """Fine-tune ``start`` as ``cfg`` says; checkpoints in ``out_dir/checkpoints``, measures in ``out_dir``.

    Args:
        start: the starting checkpoint (``posenc.finetune.model.load_start``).
        out_dir: run folder (None: nothing on disk, no resume).
        resume: continue the run in ``out_dir`` exactly (same config).
        tokens: the training text as token ids (default: ``cfg.train_text`` read and tokenised).
        fsdp: under ``torchrun``, shard the model, its gradients and AdamW's state over the processes
            (``posenc.fsdp``) instead of replicating them (DDP); same result, same checkpoints. The returned
            model is then rank 0's gathered copy (the other ranks get their sharded module).

    Returns:
        A FinetuneResult (the trained model, the measures before and at each evaluation, the loss history).
    """
    from posenc.finetune.data import token_stream, training_document, window_batches
    from posenc.train import dist_info, train
    from posenc.validation import dumps

    info = dist_info()
    out = None if out_dir is None else Path(out_dir)
    ckpt_dir = None if out is None else out / "checkpoints"
    device = next(start.model.parameters()).device
    check_training_memory(start.model, cfg)  # before LoRA's factors, the windows or AdamW are allocated
    model = prepare(start, cfg)
    if tokens is None:
        tokens = token_stream(training_document(cfg.train_text), start.tokenizer)
    batches = window_batches(tokens, length=cfg.length, batch_size=cfg.batch_size, seed=cfg.seed)
    measurer = None if cfg.measure is None else Measurer(cfg.measure, start.tokenizer)

    before = None
    if measurer is not None and info.is_main:
        saved = None if out is None or not (out / "before.json").exists() else json.loads(
            (out / "before.json").read_text(encoding="utf-8"))
        if saved is not None and saved.get("key") == cfg.before_key() and saved.get("start") == start.source:
            before = saved["measures"]
        else:
            log(f"finetune: measuring {cfg.method} before fine-tuning")
            before = measurer(model)
            model.train()
            if out is not None:
                from posenc.checkpoint import atomic_write_text

                out.mkdir(parents=True, exist_ok=True)
                atomic_write_text(out / "before.json", dumps({"key": cfg.before_key(), "config": cfg.to_dict(),
                                                              "start": start.source, "measures": before}))
    if info.world_size > 1:
        torch.distributed.barrier()

    def loss_fn(m: nn.Module, rows: Tensor) -> tuple[Tensor, int]:
        rows = rows.to(device)
        with autocast(cfg.autocast, device):
            loss = m(rows)
        return loss, rows[:, 1:].numel()

    def evaluate(m: nn.Module, step: int) -> dict[str, Any]:
        if measurer is None or (cfg.eval_steps and step not in cfg.eval_steps):
            return {"measured": False}
        return measurer(m)

    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    extra = {"finetune": cfg.to_dict(), "start": start.source, "tokenizer": getattr(start.tokenizer, "name", None)
             or start.source, "trainable_parameters": trainable}
    began = time.perf_counter()
    with loss_forward(model, chunk=cfg.chunk), gradient_checkpointing(model, cfg.grad_checkpoint):
        result = train(model, loss_fn, batches, cfg.train_config(progress=progress), evaluate=evaluate,
                       checkpoint_dir=ckpt_dir, resume=resume, extra_state=extra, fsdp=fsdp)
    seconds = time.perf_counter() - began
    res = FinetuneResult(model=result.model if result.model is not None else model, before=before, evals=result.evals, history=result.history, step=result.step,
                         interrupted=result.interrupted, seconds=seconds, total_seconds=result.total_seconds,
                         peak_memory_mb=peak_memory_mb(device), trainable=trainable, tokens=result.tokens)
    if out is not None and info.is_main:
        from posenc.checkpoint import atomic_write_text

        load = os.getloadavg() if hasattr(os, "getloadavg") else None
        atomic_write_text(out / "result.json", dumps({
            "config": cfg.to_dict(), "start": start.source, "step": res.step, "interrupted": res.interrupted,
            "before": before, "evals": res.evals, "history": res.history, "seconds_this_call": seconds,
            "total_seconds": res.total_seconds, "peak_memory_mb": res.peak_memory_mb,
            "trainable_parameters": trainable, "tokens_this_call": res.tokens, "world_size": info.world_size,
            "torch_threads": torch.get_num_threads(), "load_average_at_end": load}, indent=1))
    return res
