"""``posenc translate``: real English→Spanish translation on two public-domain Bibles.

    posenc translate prepare --data runs/bible            # read, align, split, train BPE
    posenc translate train   --data runs/bible --run runs/rope --position rope
    posenc translate train   --data runs/bible --run runs/torch --model torch   # the nn.Transformer baseline
    posenc translate eval    --run runs/rope --beam 4
    posenc translate translate --run runs/rope "In the beginning was the Word."
    posenc translate compare --data runs/bible --out runs/cmp --model torch,posenc --position sinusoidal,rope
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from posenc.cli_options import (add_out, add_position, add_quiet, add_seed, add_threads, apply_threads, command_help,
                                hold_out, out_dir)
from posenc.validation import check_output, positive_int

BACKBONES = ("posenc", "torch")


def backbone_list(text: str) -> list[str]:
    """argparse type: a comma list of ``posenc`` / ``torch``."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if t not in BACKBONES]
    if bad or not items:
        raise argparse.ArgumentTypeError(f"--model takes a comma list of {', '.join(BACKBONES)}, got {text!r}")
    return list(dict.fromkeys(items))


def _prepare(args: argparse.Namespace):
    from posenc.translation.run import prepare_data

    check_output(args.data, "--data", kind="dir")  # before reading and tokenising the corpus
    if getattr(args, "run", None):
        check_output(args.run, "--run", kind="dir")
    if getattr(args, "out", None):
        check_output(args.out, "--out", kind="dir")
    return prepare_data(args.data, source=args.source, target=args.target, split=args.split, valid=args.valid,
                        test=args.test, seed=args.split_seed, vocab_size=args.vocab,
                        shared_vocab=not args.separate_vocab, root=args.sword_root,
                        valid_books=tuple(b for b in args.valid_books.split(",") if b),
                        test_books=tuple(b for b in args.test_books.split(",") if b))


def _options(args: argparse.Namespace, prepared: Any, *, backbone: str, position: str):
    """The run's options from the flags: a ModelConfig for the data's tokenizer and a TrainConfig."""
    from posenc.cli_options import position_options
    from posenc.train import TrainConfig
    from posenc.translation.run import TranslateOptions, model_config

    model = model_config(prepared.codec, dim=args.dim, num_heads=args.heads, num_layers=args.layers,
                         ffn_dim=args.ffn_dim, dropout=args.dropout, tie_embeddings=not args.untied,
                         position=position, position_options=position_options(args))
    train = TrainConfig(steps=args.steps, lr=args.lr, min_lr=args.lr * 0.05, warmup_steps=args.warmup,
                        eval_every=args.eval_every, log_every=10, seed=args.seed)
    return TranslateOptions(backbone=backbone, model=model, train=train, batch_tokens=args.batch_tokens,
                            max_tokens=args.max_tokens, label_smoothing=args.label_smoothing,
                            eval_sentences=args.eval_sentences)


def run_prepare(args: argparse.Namespace) -> int:
    prepared = _prepare(args)
    print(json.dumps(prepared.info, indent=2, ensure_ascii=False))
    return 0


def run_train(args: argparse.Namespace) -> int:
    apply_threads(args)
    from posenc.translation.run import train_run

    prepared = _prepare(args)
    opts = _options(args, prepared, backbone=args.model, position=args.position or "sinusoidal")
    record = train_run(opts, prepared, args.run, resume=args.resume, progress=not args.quiet)
    print(json.dumps({k: record[k] for k in ("label", "steps", "train_seconds", "tokens", "evals")}, indent=2))
    return 0


def run_eval(args: argparse.Namespace) -> int:
    apply_threads(args)
    from posenc.translation.run import evaluate_run

    sets = tuple(s for s in args.sets.split(",") if s)
    metrics = evaluate_run(args.run, beam=args.beam, alpha=args.alpha, sets=sets, limit=args.limit,
                           examples=args.examples, progress=not args.quiet)
    for name, s in metrics["sets"].items():
        if s.get("n"):
            print(f"{name:>5}: BLEU {s['bleu']:6.2f}  chrF {s['chrf']:6.2f}  (n={s['n']}, "
                  f"mean source {s['mean_src_tokens']} subwords, {s['decode_seconds']} s)")
    print(f"sacreBLEU: {metrics['sets'][sets[0]].get('bleu_signature', '')}")
    return 0


def run_translate(args: argparse.Namespace) -> int:
    apply_threads(args)
    from posenc.translation.run import translate_texts

    texts = args.text or [line.rstrip("\n") for line in sys.stdin if line.strip()]
    if not texts:
        raise ValueError("give sentences as arguments or on standard input")
    for out in translate_texts(args.run, texts, beam=args.beam, alpha=args.alpha):
        print(out)
    return 0


def run_compare(args: argparse.Namespace) -> int:
    apply_threads(args)
    from posenc.translation.compare import comparison_runs, run_comparison

    folder = out_dir(args)
    check_output(folder, "--out", kind="dir")  # before the lock makes it
    # one comparison per folder (each run's checkpoints/ has train's own lock)
    with hold_out(folder), tempfile.TemporaryDirectory(prefix="posenc-compare-") as scratch:  # `--out -`: here
        prepared = _prepare(args)
        positions = args.position if "posenc" in args.model else []
        runs = comparison_runs(_options(args, prepared, backbone="posenc", position="sinusoidal"),
                               positions=positions, baseline="torch" in args.model)
        where = folder if folder is not None else Path(scratch)
        rows = run_comparison(prepared, where, runs=runs, beam=args.beam, limit=args.limit, progress=not args.quiet)
        print((where / "results.md").read_text())
    return 0 if rows else 1


def _data_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("data (a --data directory is built once and reused)")
    g.add_argument("--data", default="runs/translate-data", help="directory for the split and tokenizer")
    g.add_argument("--source", default="engWEB2015eb", help="SWORD module of the source language")
    g.add_argument("--target", default="spaRV1909eb", help="SWORD module of the target language")
    g.add_argument("--sword-root", default=None, help="SWORD library root (default: $SWORD_PATH, /usr/share/sword)")
    g.add_argument("--split", choices=["chapters", "books"], default="chapters", help="hold out whole chapters or books")
    g.add_argument("--valid", type=float, default=0.02, help="fraction of chapters held out for validation")
    g.add_argument("--test", type=float, default=0.03, help="fraction of chapters held out for test")
    g.add_argument("--split-seed", type=int, default=0)
    g.add_argument("--valid-books", default="", help="with --split books: OSIS ids, comma-separated")
    g.add_argument("--test-books", default="", help="with --split books: OSIS ids, e.g. Ruth,Jonah,Phlm")
    g.add_argument("--vocab", type=int, default=4000, help="BPE vocabulary size")
    g.add_argument("--separate-vocab", action="store_true", help="one vocabulary per language (no shared table)")


def _model_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("model and training")
    g.add_argument("--dim", type=int, default=128)
    g.add_argument("--heads", type=int, default=4)
    g.add_argument("--layers", type=int, default=2, help="encoder layers = decoder layers")
    g.add_argument("--ffn-dim", type=int, default=None, help="default 4·dim")
    g.add_argument("--dropout", type=float, default=0.0)
    g.add_argument("--untied", action="store_true", help="separate output matrix (default: tied to the target table)")
    g.add_argument("--steps", type=int, default=250)
    g.add_argument("--lr", type=float, default=2e-3)
    g.add_argument("--warmup", type=int, default=25)
    g.add_argument("--batch-tokens", type=int, default=2000, help="padded tokens per side per batch")
    g.add_argument("--max-tokens", type=int, default=160, help="leave out longer training pairs")
    g.add_argument("--label-smoothing", type=float, default=0.1)
    g.add_argument("--eval-every", type=int, default=50, help="validation loss (+ greedy BLEU) every N updates")
    g.add_argument("--eval-sentences", type=int, default=0, help="validation sentences decoded for BLEU")
    add_seed(g, help="seed of the weights, the batch order and dropout")


def _decode_args(p: argparse.ArgumentParser, beam: int = 4) -> None:
    p.add_argument("--beam", type=int, default=beam, help="beam width (1 = greedy)")
    p.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty exponent")


def register(sub: Any) -> None:
    p = sub.add_parser("translate", help="English→Spanish translation on real text (SWORD Bibles), scored with sacreBLEU",
                       **command_help(__doc__))
    add_threads(p)
    p.epilog += ("\n\nDefaults are the CPU-sized run recorded in benchmarks/translation/ (d=128, 2+2 layers, BPE "
                 "4000, 250 updates of ≤2000 padded tokens per side).")
    tsub = p.add_subparsers(dest="translate_command", required=True, metavar="ACTION")

    q = tsub.add_parser("prepare", help="read the SWORD modules, align by reference, split, train BPE",
                        **command_help(description=(
                            "Read the source and target SWORD Bible modules, align their verses by reference, hold "
                            "out whole chapters (or books) for validation and test, and train the BPE tokenizer; "
                            "the result goes to --data and is reused by train, eval and compare. Prints what it "
                            "built as JSON."),
                            examples=("posenc translate prepare --data runs/bible",
                                      "posenc translate prepare --data runs/bible-books --split books "
                                      "--test-books Ruth,Jonah,Phlm")))
    _data_args(q)
    q.set_defaults(func=run_prepare)

    q = tsub.add_parser("train", help="train one model",
                        **command_help(description=(
                            "Train one English-to-Spanish model on the --data split (prepared first if missing): "
                            "posenc's encoder-decoder with a chosen position scheme, or the torch.nn.Transformer "
                            "baseline. Checkpoints and run.json go to --run; --resume continues."),
                            examples=("posenc translate train --data runs/bible --run runs/rope --position rope",
                                      "posenc translate train --data runs/bible --run runs/torch --model torch")))
    _data_args(q)
    _model_args(q)
    q.add_argument("--run", required=True, help="run directory (checkpoints, run.json)")
    q.add_argument("--model", choices=BACKBONES, default="posenc",
                   help="posenc's EncoderDecoder (default) or the torch.nn.Transformer baseline (sinusoidal only)")
    add_position(q, default=None, help="position scheme of the posenc model (default sinusoidal); a name from "
                                       "'posenc schemes' or an alias (nope, absolute)")
    q.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    add_quiet(q)
    q.set_defaults(func=run_train)

    q = tsub.add_parser("eval", help="score a trained run on the held-out sets with sacreBLEU BLEU and chrF",
                        **command_help(description=(
                            "Translate the held-out sets of a trained --run with beam search and score them with "
                            "sacreBLEU's BLEU and chrF: test (held-out chapters), long (the longest sentences) and "
                            "x3 (three test sentences joined, longer than any training pair)."),
                            examples=("posenc translate eval --run runs/rope --beam 4",
                                      "posenc translate eval --run runs/rope --sets test --limit 100")))
    q.add_argument("--run", required=True)
    _decode_args(q)
    q.add_argument("--sets", default="test,long,x3", help="comma-separated: test, long, x3")
    q.add_argument("--limit", type=int, default=None, help="first N sentences of each set")
    q.add_argument("--examples", type=int, default=5, help="example translations stored per set")
    add_quiet(q)
    q.set_defaults(func=run_eval)

    q = tsub.add_parser("translate", help="translate sentences (arguments or stdin)",
                        **command_help(description=(
                            "Translate English sentences with a trained --run: each argument, or each non-empty line "
                            "of standard input, printed in Spanish one per line."),
                            examples=('posenc translate translate --run runs/rope "In the beginning was the Word."',
                                      "posenc translate translate --run runs/rope --beam 1 < sentences.txt")))
    q.add_argument("--run", required=True)
    _decode_args(q)
    q.add_argument("text", nargs="*")
    q.set_defaults(func=run_translate)

    q = tsub.add_parser("compare", help="train several models at one budget and tabulate BLEU/chrF",
                        **command_help(description=(
                            "Train one model per implementation and position scheme at the same budget on the same "
                            "split, score each like eval, and write a table of BLEU and chrF (results.md, "
                            "results.json) and the validation curves (curves.png) to --out."),
                            examples=("posenc translate compare --data runs/bible",
                                      "posenc translate compare --data runs/bible --model posenc --position rope,alibi "
                                      "--steps 100 --out runs/cmp")))
    _data_args(q)
    _model_args(q)
    _decode_args(q, beam=1)
    add_out(q, default="runs/translate-compare", help="one run folder per model, results.md/json, curves.png")
    q.add_argument("--model", type=backbone_list, default=["torch", "posenc"], metavar="LIST",
                   help="implementations to compare: posenc (one run per --position) and/or torch "
                        "(the torch.nn.Transformer baseline, sinusoidal) (default: torch,posenc)")
    add_position(q, default="sinusoidal,learned,rope,alibi", many=True)
    q.add_argument("--limit", type=int, default=None, help="first N sentences of each evaluation set")
    add_quiet(q)
    q.set_defaults(func=run_compare)
