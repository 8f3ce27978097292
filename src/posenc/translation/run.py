"""Prepare the corpus, train a translation model with ``posenc.train``, and score it.

A *data directory* holds one split and its tokenizer, so several models (position
schemes, the ``torch.nn.Transformer`` baseline) are trained and scored on exactly
the same verses and subwords. A *run directory* holds one model: checkpoints,
``run.json`` (options, history, timings) and ``metrics.json``.

Evaluation sets, all drawn from the held-out test chapters:

* ``test`` — every test verse;
* ``long`` — test verses whose source is longer (in subwords) than 90 % of the
  training sources;
* ``x3`` — three consecutive test verses of one chapter joined into one input,
  about three times the typical training length.

Tiny CPU example (about a minute)::

    data = prepare_data("runs/data", vocab_size=1000)
    opts = TranslateOptions(model=model_config(data.codec, dim=64, num_layers=1),
                            train=TrainConfig(steps=50, lr=2e-3, warmup_steps=5), batch_tokens=1000)
    train_run(opts, data, "runs/tiny")
    evaluate_run("runs/tiny", beam=1, limit=50)
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.checkpoint import load_weights
from posenc.models import ModelConfig, build_encoder_decoder
from posenc.train import TrainConfig, step_generator, train
from posenc.translation.baseline import BaselineConfig, TorchTransformer
from posenc.translation.corpus import (
    DEFAULT_SOURCE,
    DEFAULT_TARGET,
    Split,
    VersePair,
    load_corpus,
    split_by_book,
    split_by_chapter,
)
from posenc.translation.decode import translate_ids
from posenc.translation.metrics import score
from posenc.translation.tokenizer import BOS, EOS, PAD, TextCodec


# -- data ---------------------------------------------------------------------------
@dataclass
class Prepared:
    directory: Path
    split: Split
    codec: TextCodec
    info: dict


def prepare_data(
    directory: str | Path, *, source: str = DEFAULT_SOURCE, target: str = DEFAULT_TARGET, split: str = "chapters",
    valid: float = 0.02, test: float = 0.03, seed: int = 0, valid_books: tuple[str, ...] = (),
    test_books: tuple[str, ...] = (), vocab_size: int = 4000, shared_vocab: bool = True, root: str | None = None,
) -> Prepared:
    """Build (or reuse, when the options match) the aligned split and its BPE tokenizer in ``directory``."""
    directory = Path(directory)
    options = {"source": source, "target": target, "split": split, "valid": valid, "test": test, "seed": seed,
               "valid_books": list(valid_books), "test_books": list(test_books), "vocab_size": vocab_size,
               "shared_vocab": shared_vocab}
    info_path = directory / "data.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        if info["options"] == options:
            return Prepared(directory, Split.load(directory / "split.json"), TextCodec.load(directory), info)
        raise ValueError(f"{directory} holds data prepared with other options ({info['options']}); "
                         "use another --data directory or the same options")
    if split not in ("chapters", "books"):
        raise ValueError(f"split must be 'chapters' or 'books', got {split!r}")
    pairs, corpus_info = load_corpus(source, target, root=root)
    if split == "chapters":
        parts = split_by_chapter(pairs, valid=valid, test=test, seed=seed)
    else:
        if not test_books:
            raise ValueError("split='books' needs test_books (OSIS ids such as Ruth,Jonah,Phlm)")
        parts = split_by_book(pairs, valid_books=valid_books, test_books=test_books)
    return prepare_from_split(directory, parts, vocab_size=vocab_size, shared_vocab=shared_vocab,
                              info={"options": options, "corpus": corpus_info})


def prepare_from_split(directory: str | Path, parts: Split, *, vocab_size: int, shared_vocab: bool = True,
                       info: dict | None = None) -> Prepared:
    """Train the BPE tokenizer on ``parts.train`` and write split + tokenizer + data.json to ``directory``."""
    directory = Path(directory)
    codec = TextCodec.train([p.src for p in parts.train], [p.tgt for p in parts.train],
                            vocab_size=vocab_size, shared=shared_vocab)
    directory.mkdir(parents=True, exist_ok=True)
    parts.save(directory / "split.json")
    codec.save(directory)
    info = {**(info or {"options": None}), "split": parts.summary(),
            "vocab": {"src": codec.src_vocab_size, "tgt": codec.tgt_vocab_size, "shared": codec.shared}}
    (directory / "data.json").write_text(json.dumps(info, indent=2, ensure_ascii=False))
    return Prepared(directory, parts, codec, info)


def eval_sets(prepared: Prepared, *, long_quantile: float = 0.9, group: int = 3) -> dict[str, list[VersePair]]:
    """The ``test``, ``long`` and ``x{group}`` evaluation sets (see the module docstring)."""
    codec, sp = prepared.codec, prepared.split
    train_len = sorted(len(x) for x in codec.encode_src([p.src for p in sp.train]))
    threshold = train_len[min(len(train_len) - 1, int(long_quantile * len(train_len)))]
    test_len = [len(x) for x in codec.encode_src([p.src for p in sp.test])]
    long = [p for p, n in zip(sp.test, test_len) if n > threshold]
    grouped: list[VersePair] = []
    i = 0
    while i + group <= len(sp.test):
        run = sp.test[i:i + group]
        same = all((p.ref.book, p.ref.chapter) == (run[0].ref.book, run[0].ref.chapter) for p in run)
        consecutive = all(b.ref.verse == a.ref.verse + 1 for a, b in zip(run, run[1:]))
        if same and consecutive:
            grouped.append(VersePair(run[0].ref, " ".join(p.src for p in run), " ".join(p.tgt for p in run)))
            i += group
        else:
            i += 1
    return {"test": list(sp.test), "long": long, f"x{group}": grouped, "_long_threshold": threshold}  # type: ignore[dict-item]


# -- model --------------------------------------------------------------------------
#: The CPU-sized run recorded in benchmarks/translation (see docs/translation.md): 250 updates, warm-up 25,
#: peak lr 2e-3 decaying to 5 % of it, validation every 50 updates.
DEFAULT_TRAIN = TrainConfig(steps=250, lr=2e-3, min_lr=1e-4, warmup_steps=25, eval_every=50, log_every=10)
Backbone = Literal["posenc", "torch"]


def model_config(codec: TextCodec, **fields: Any) -> ModelConfig:
    """A ``ModelConfig`` for the data's tokenizer: its vocabularies (one shared table when it has one).

    ``fields`` are the other ModelConfig fields; the defaults are the recorded
    run's model (d = 128, 4 heads, 2 + 2 layers, tied head, sinusoidal).
    """
    share = codec.shared
    return ModelConfig(**{"dim": 128, "num_heads": 4, "num_layers": 2, **fields,
                          "vocab_size": codec.src_vocab_size,
                          "tgt_vocab_size": None if share else codec.tgt_vocab_size, "share_embeddings": share})


@dataclass(frozen=True, kw_only=True)
class TranslateOptions:
    """One run: which implementation, its model, its training, and the batching (plain data, in run.json).

    Args:
        backbone: "posenc" (``posenc.models.EncoderDecoder``) or "torch" (the
            ``torch.nn.Transformer`` baseline, which always uses the sinusoidal table).
        model: the model, vocabularies included (``model_config(codec, ...)`` fills them from the data).
        train: the training loop's settings; ``train.seed`` also seeds the weights and the batch order.
        batch_tokens: padded tokens per side per batch.
        max_tokens: training pairs longer than this (either side) are left out.
        label_smoothing: of the training cross-entropy.
        eval_sentences: validation sentences decoded greedily for BLEU at each evaluation.
    """

    backbone: Backbone = "posenc"
    model: ModelConfig
    train: TrainConfig = field(default_factory=lambda: DEFAULT_TRAIN)
    batch_tokens: int = 2000
    max_tokens: int = 160
    label_smoothing: float = 0.1
    eval_sentences: int = 0

    def __post_init__(self) -> None:
        if self.backbone not in ("posenc", "torch"):
            raise ValueError(f"backbone must be 'posenc' or 'torch', got {self.backbone!r}")
        if self.backbone == "torch" and (self.model.position != "sinusoidal" or self.model.position_options):
            raise ValueError("the torch.nn.Transformer baseline uses the sinusoidal encoding with its defaults, not "
                             f"{self.model.position!r} {self.model.position_options or ''}; drop --position and "
                             "--position-option, or use --model posenc")

    @property
    def seed(self) -> int:
        return self.train.seed

    def to_dict(self) -> dict[str, Any]:
        return {"backbone": self.backbone, "model": self.model.to_dict(), "train": self.train.to_dict(),
                "batch_tokens": self.batch_tokens, "max_tokens": self.max_tokens,
                "label_smoothing": self.label_smoothing, "eval_sentences": self.eval_sentences}

    @classmethod
    def from_dict(cls, data: dict[str, Any], codec: TextCodec | None = None) -> "TranslateOptions":
        """Options saved by ``to_dict``; runs recorded before the nested form (flat fields) need ``codec``."""
        if "backbone" not in data:
            return cls._from_flat(data, codec)
        return cls(backbone=data["backbone"], model=ModelConfig.from_dict(data["model"]),
                   train=TrainConfig(**{**data["train"], "betas": tuple(data["train"]["betas"])}),
                   **{k: data[k] for k in ("batch_tokens", "max_tokens", "label_smoothing", "eval_sentences")})

    @classmethod
    def _from_flat(cls, data: dict[str, Any], codec: TextCodec | None) -> "TranslateOptions":
        if codec is None:
            raise ValueError("options of a run recorded before posenc.models need the data's tokenizer (codec)")
        lr = data.get("lr", DEFAULT_TRAIN.lr)
        train_cfg = replace(DEFAULT_TRAIN, steps=data.get("steps", DEFAULT_TRAIN.steps), lr=lr, min_lr=lr * 0.05,
                            warmup_steps=data.get("warmup_steps", DEFAULT_TRAIN.warmup_steps),
                            eval_every=data.get("eval_every", DEFAULT_TRAIN.eval_every), seed=data.get("seed", 0))
        model = model_config(codec, dim=data.get("dim", 128), num_heads=data.get("heads", 4),
                             num_layers=data.get("layers", 2), ffn_dim=data.get("ffn_dim"),
                             dropout=data.get("dropout", 0.0), position=data.get("position", "sinusoidal"),
                             tie_embeddings=data.get("tie_embeddings", True))
        return cls(backbone=data.get("model", "posenc"), model=model, train=train_cfg,
                   **{k: data[k] for k in ("batch_tokens", "max_tokens", "label_smoothing", "eval_sentences")
                      if k in data})

    @property
    def label(self) -> str:
        return "torch.nn.Transformer+sinusoidal" if self.backbone == "torch" else f"posenc+{self.model.position}"


def build_model(opts: TranslateOptions, codec: TextCodec) -> nn.Module:
    """The run's model; its vocabularies must be the tokenizer's."""
    cfg = opts.model
    want = (codec.src_vocab_size, None if codec.shared else codec.tgt_vocab_size, codec.shared)
    if (cfg.vocab_size, cfg.tgt_vocab_size, cfg.share_embeddings) != want:
        raise ValueError(f"the model's vocabularies (vocab_size={cfg.vocab_size}, tgt_vocab_size={cfg.tgt_vocab_size}, "
                         f"share_embeddings={cfg.share_embeddings}) are not the tokenizer's {want}; "
                         "build the config with model_config(codec, ...)")
    if opts.backbone == "torch":
        if not codec.shared:
            raise ValueError("the torch baseline needs a shared vocabulary (prepare the data with shared_vocab)")
        return TorchTransformer(BaselineConfig(vocab_size=cfg.vocab_size, dim=cfg.dim, num_heads=cfg.num_heads,
                                               num_layers=cfg.num_layers, ffn_dim=cfg.ffn_dim, dropout=cfg.dropout))
    return build_encoder_decoder(cfg)


# -- batches ------------------------------------------------------------------------
def length_batches(src: list[list[int]], tgt: list[list[int]], *, batch_tokens: int, seed: int) -> list[list[int]]:
    """Group example indices of similar length so each batch pads to ≤ ``batch_tokens`` per side."""
    g = torch.Generator().manual_seed(seed)
    jitter = torch.rand(len(src), generator=g).tolist()
    order = sorted(range(len(src)), key=lambda i: (max(len(src[i]), len(tgt[i]) + 1), jitter[i]))
    batches, current, longest = [], [], 0
    for i in order:
        n = max(len(src[i]), len(tgt[i]) + 1)
        if current and max(longest, n) * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, n)
    if current:
        batches.append(current)
    return batches


def collate(src: list[list[int]], tgt: list[list[int]], rows: list[int]) -> tuple[Tensor, Tensor, Tensor]:
    """(src (B, S), tgt_in (B, T) = BOS + y, tgt_out (B, T) = y + EOS), right-padded with PAD."""
    s_len = max(len(src[i]) for i in rows)
    t_len = max(len(tgt[i]) for i in rows) + 1
    s = torch.full((len(rows), s_len), PAD, dtype=torch.long)
    t_in = torch.full((len(rows), t_len), PAD, dtype=torch.long)
    t_out = torch.full((len(rows), t_len), PAD, dtype=torch.long)
    for r, i in enumerate(rows):
        s[r, :len(src[i])] = torch.tensor(src[i])
        y = torch.tensor(tgt[i], dtype=torch.long)
        t_in[r, 0] = BOS
        t_in[r, 1:len(y) + 1] = y
        t_out[r, :len(y)] = y
        t_out[r, len(y)] = EOS
    return s, t_in, t_out


def seq_loss(model: nn.Module, batch: tuple[Tensor, Tensor, Tensor], label_smoothing: float) -> tuple[Tensor, int]:
    """Summed cross-entropy over non-pad target tokens, and their count."""
    s, t_in, t_out = batch
    logits = model(s, t_in, src_padding_mask=s == PAD)  # (B, T, V)
    loss = F.cross_entropy(logits.flatten(0, 1).float(), t_out.flatten(), ignore_index=PAD, reduction="sum",
                           label_smoothing=label_smoothing)
    return loss, int((t_out != PAD).sum())


# -- training -----------------------------------------------------------------------
def train_run(opts: TranslateOptions, prepared: Prepared, run_dir: str | Path, *, progress: bool = True,
              resume: bool = False) -> dict:
    """Train one model on ``prepared`` and write ``run_dir``; returns the run record (also in run.json)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(opts.seed)  # the weights
    codec = prepared.codec
    sp = prepared.split
    src_all, tgt_all = codec.encode_src([p.src for p in sp.train]), codec.encode_tgt([p.tgt for p in sp.train])
    keep = [i for i in range(len(src_all)) if len(src_all[i]) <= opts.max_tokens and len(tgt_all[i]) < opts.max_tokens]
    src, tgt = [src_all[i] for i in keep], [tgt_all[i] for i in keep]
    batches_list = length_batches(src, tgt, batch_tokens=opts.batch_tokens, seed=opts.seed)
    n = len(batches_list)

    def batches(step: int, rank: int, world: int) -> tuple[Tensor, Tensor, Tensor]:
        epoch, k = divmod(step, n)
        perm = torch.randperm(n, generator=step_generator(opts.seed, epoch))
        rows = batches_list[int(perm[k])][rank::world]
        return collate(src, tgt, rows)

    model = build_model(opts, codec)
    v_src, v_tgt = codec.encode_src([p.src for p in sp.valid]), codec.encode_tgt([p.tgt for p in sp.valid])
    valid_batches = length_batches(v_src, v_tgt, batch_tokens=opts.batch_tokens, seed=0)
    bleu_pairs = sp.valid[:opts.eval_sentences]

    def evaluate(m: nn.Module, step: int) -> dict[str, float]:
        total, count = 0.0, 0
        for rows in valid_batches:
            loss, c = seq_loss(m, collate(v_src, v_tgt, rows), 0.0)
            total, count = total + float(loss), count + c
        out = {"valid_loss": total / max(count, 1), "valid_ppl": math.exp(min(total / max(count, 1), 50))}
        if bleu_pairs:
            hyp = codec.decode_tgt(translate_ids(m, codec.encode_src([p.src for p in bleu_pairs]), beam=1))
            s = score(hyp, [p.tgt for p in bleu_pairs])
            out.update(valid_bleu=s["bleu"], valid_chrf=s["chrf"])
        return out

    cfg = replace(opts.train, progress=progress)
    record_state = {"translate": {"options": opts.to_dict(), "data": str(prepared.directory.resolve())}}
    began = time.perf_counter()
    result = train(model, lambda m, b: seq_loss(m, b, opts.label_smoothing), batches, cfg, evaluate=evaluate,
                   checkpoint_dir=run_dir / "checkpoints", resume=resume, extra_state=record_state)
    record = {
        "label": opts.label, "options": opts.to_dict(), "data": str(prepared.directory.resolve()),
        "model": model.describe() if hasattr(model, "describe") else {},
        "train_pairs": len(src), "train_pairs_left_out_as_too_long": len(src_all) - len(src), "batches_per_epoch": n,
        "steps": result.step, "interrupted": result.interrupted, "train_seconds": round(time.perf_counter() - began, 1),
        "tokens": result.tokens, "history": result.history, "evals": result.evals, "checkpoint": result.checkpoint,
        "threads": torch.get_num_threads(),
    }
    (run_dir / "run.json").write_text(json.dumps(record, indent=2, ensure_ascii=False))
    return record


# -- evaluation ---------------------------------------------------------------------
def load_run(run_dir: str | Path) -> tuple[nn.Module, Prepared, dict]:
    """The trained model (eval mode), its data and its run record."""
    run_dir = Path(run_dir)
    record_path = run_dir / "run.json"
    if not record_path.exists():
        raise FileNotFoundError(f"{record_path} not found: train first with `posenc translate train --run {run_dir}`")
    record = json.loads(record_path.read_text())
    data_dir = Path(record["data"])
    info = json.loads((data_dir / "data.json").read_text())
    prepared = Prepared(data_dir, Split.load(data_dir / "split.json"), TextCodec.load(data_dir), info)
    opts = TranslateOptions.from_dict(record["options"], prepared.codec)
    model = build_model(opts, prepared.codec)
    load_weights(run_dir / "checkpoints", model)
    model.eval()
    return model, prepared, record


def evaluate_run(run_dir: str | Path, *, beam: int = 4, alpha: float = 0.6, sets: tuple[str, ...] = ("test", "long", "x3"),
                 limit: int | None = None, examples: int = 5, progress: bool = True) -> dict:
    """Translate the evaluation sets, score them with sacreBLEU, write ``metrics.json``; return the metrics."""
    model, prepared, record = load_run(run_dir)
    available = eval_sets(prepared)
    threshold = available.pop("_long_threshold")
    unknown = sorted(set(sets) - set(available))
    if unknown:
        raise ValueError(f"unknown evaluation set(s) {unknown}; choose from {sorted(available)}")
    out: dict[str, Any] = {"label": record["label"], "beam": beam, "alpha": alpha,
                           "long_threshold_tokens": threshold, "sets": {}}
    codec = prepared.codec
    for name in sets:
        pairs = available[name][:limit] if limit else available[name]
        if not pairs:
            out["sets"][name] = {"n": 0}
            continue
        src_ids = codec.encode_src([p.src for p in pairs])
        began = time.perf_counter()
        hyp = codec.decode_tgt(translate_ids(model, src_ids, beam=beam, alpha=alpha, progress=progress))
        seconds = time.perf_counter() - began
        s = score(hyp, [p.tgt for p in pairs])
        s["mean_src_tokens"] = round(sum(map(len, src_ids)) / len(src_ids), 1)
        s["decode_seconds"] = round(seconds, 1)
        s["examples"] = [{"ref": str(p.ref), "source": p.src, "reference": p.tgt, "hypothesis": h}
                         for p, h in list(zip(pairs, hyp))[:examples]]
        out["sets"][name] = s
    name = f"metrics-beam{beam}.json"
    (Path(run_dir) / name).write_text(json.dumps(out, indent=2, ensure_ascii=False))
    return out


def translate_texts(run_dir: str | Path, texts: list[str], *, beam: int = 4, alpha: float = 0.6) -> list[str]:
    model, prepared, _ = load_run(run_dir)
    codec = prepared.codec
    return codec.decode_tgt(translate_ids(model, codec.encode_src(texts), beam=beam, alpha=alpha))
