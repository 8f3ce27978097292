"""End to end on a synthetic parallel corpus (no SWORD modules needed): prepare, train, eval, translate, CLI."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from pathlib import Path

import pytest

from posenc.cli import main
from posenc.models import ModelConfig
from posenc.train import TrainConfig
from posenc.translation.compare import comparison_runs
from posenc.translation.corpus import Split, VersePair
from posenc.translation.run import (
    TranslateOptions,
    build_model,
    collate,
    eval_sets,
    evaluate_run,
    length_batches,
    model_config,
    prepare_from_split,
    train_run,
    translate_texts,
)
from posenc.translation.tokenizer import BOS, EOS, PAD
from posenc.translation.versification import Ref

WORDS = {"uno": "one", "dos": "two", "tres": "three", "cuatro": "four", "cinco": "five", "seis": "six"}


def toy_split(seed: int) -> Split:
    rng = random.Random(seed)

    def pairs(book: str, chapters: int) -> list[VersePair]:
        out = []
        for c in range(1, chapters + 1):
            for v in range(1, 9):
                es = [rng.choice(list(WORDS)) for _ in range(rng.randint(2, 6))]
                out.append(VersePair(Ref(book, c, v), " ".join(WORDS[w] for w in es), " ".join(es)))
        return out

    return Split(pairs("Gen", 30), pairs("Ruth", 1), pairs("John", 2), "toy", {"valid": ["Ruth"], "test": ["John"]})


def test_batches_and_collate(seed: int) -> None:
    src = [[5, 6, 7], [5], [8, 9], [5, 6, 7, 8, 9, 10]]
    tgt = [[11, 12], [13], [14, 15, 16], [17]]
    batches = length_batches(src, tgt, batch_tokens=8, seed=seed)
    assert sorted(i for b in batches for i in b) == [0, 1, 2, 3]
    for b in batches:
        assert max(max(len(src[i]), len(tgt[i]) + 1) for i in b) * len(b) <= 8 or len(b) == 1
    s, t_in, t_out = collate(src, tgt, [0, 2])
    assert s.tolist() == [[5, 6, 7], [8, 9, PAD]]
    assert t_in.tolist() == [[BOS, 11, 12, PAD], [BOS, 14, 15, 16]]
    assert t_out.tolist() == [[11, 12, EOS, PAD], [14, 15, 16, EOS]]


@pytest.mark.slow
def test_train_eval_translate_end_to_end(tmp_path: Path, seed: int, capsys: pytest.CaptureFixture[str]) -> None:
    prepared = prepare_from_split(tmp_path / "data", toy_split(seed), vocab_size=80)
    sets = eval_sets(prepared)
    assert sets["test"] and all(len(p.src.split()) > 3 for p in sets["x3"])
    opts = TranslateOptions(model=model_config(prepared.codec, position="rope", dim=32, num_heads=2, num_layers=1),
                            train=TrainConfig(steps=60, lr=3e-3, warmup_steps=5, eval_every=30, seed=seed),
                            batch_tokens=400, eval_sentences=8)
    record = train_run(opts, prepared, tmp_path / "run", progress=False)
    assert record["steps"] == 60 and record["history"][-1]["loss"] < record["history"][0]["loss"]
    assert [e["step"] for e in record["evals"]] == [30, 60] and "valid_bleu" in record["evals"][-1]
    metrics = evaluate_run(tmp_path / "run", beam=2, limit=6, progress=False)
    assert set(metrics["sets"]) == {"test", "long", "x3"}
    assert json.loads((tmp_path / "run" / "metrics-beam2.json").read_text())["sets"]["test"]["n"] == 6
    assert len(translate_texts(tmp_path / "run", ["one two", "three"], beam=2)) == 2
    assert main(["translate", "translate", "--run", str(tmp_path / "run"), "--beam", "1", "five six"]) == 0
    assert capsys.readouterr().out.strip()  # one line of Spanish-ish output
    assert main(["translate", "eval", "--run", str(tmp_path / "run"), "--beam", "1", "--limit", "4", "--sets", "test"]) == 0
    assert "BLEU" in capsys.readouterr().out
    assert main(["translate", "eval", "--run", str(tmp_path / "nope")]) == 2  # clear error, no traceback


def test_options_validation() -> None:
    model = ModelConfig(vocab_size=50, position="rope")
    with pytest.raises(ValueError, match="'posenc' or 'torch'"):
        TranslateOptions(backbone="rnn", model=model)
    with pytest.raises(ValueError, match="sinusoidal encoding with its defaults, not 'rope'.*--model posenc"):
        TranslateOptions(backbone="torch", model=model)
    with pytest.raises(ValueError, match="--position-option"):
        TranslateOptions(backbone="torch", model=ModelConfig(vocab_size=50, position_options={"base": 500.0}))
    assert TranslateOptions(backbone="torch", model=ModelConfig(vocab_size=50)).label.startswith("torch.nn")


def test_options_compose_model_and_train_configs_and_round_trip(tmp_path: Path, seed: int) -> None:
    prepared = prepare_from_split(tmp_path / "data", toy_split(seed), vocab_size=80)
    opts = TranslateOptions(model=model_config(prepared.codec, position="alibi", dim=32),
                            train=TrainConfig(steps=7, lr=1e-3, seed=seed), batch_tokens=300)
    assert opts.model.vocab_size == prepared.codec.src_vocab_size and opts.model.share_embeddings
    assert TranslateOptions.from_dict(json.loads(json.dumps(opts.to_dict()))) == opts
    # run.json written before the nested form: flat fields, read with the data's tokenizer
    flat = {"model": "posenc", "position": "rope", "dim": 32, "heads": 2, "layers": 1, "ffn_dim": None,
            "dropout": 0.0, "tie_embeddings": True, "steps": 60, "lr": 3e-3, "warmup_steps": 5, "batch_tokens": 400,
            "max_tokens": 160, "label_smoothing": 0.1, "eval_every": 30, "eval_sentences": 8, "seed": seed}
    old = TranslateOptions.from_dict(flat, prepared.codec)
    assert (old.model.position, old.model.num_heads, old.train.steps, old.train.min_lr) == ("rope", 2, 60, 3e-3 * 0.05)
    with pytest.raises(ValueError, match="tokenizer"):
        TranslateOptions.from_dict(flat)
    # a config for another tokenizer is refused, naming both
    with pytest.raises(ValueError, match="not the tokenizer's"):
        build_model(replace(opts, model=replace(opts.model, vocab_size=3)), prepared.codec)


def test_comparison_runs_choose_backbone_and_scheme_apart(tmp_path: Path, seed: int) -> None:
    prepared = prepare_from_split(tmp_path / "data", toy_split(seed), vocab_size=80)
    base = TranslateOptions(model=model_config(prepared.codec, dim=32))
    runs = comparison_runs(base, positions=["rope", "none"], baseline=True)
    assert {k: (o.backbone, o.model.position) for k, o in runs.items()} == {
        "torch": ("torch", "sinusoidal"), "rope": ("posenc", "rope"), "none": ("posenc", "none")}
