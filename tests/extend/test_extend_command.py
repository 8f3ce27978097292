"""``posenc extend`` end to end on a tiny HF Llama folder (random weights, trained byte-level BPE tokenizer)."""

from __future__ import annotations

import json

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0",
                                   reason="the tiny checkpoint is written with HF transformers, a test-only dependency")
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from posenc.cli import build_parser, main  # noqa: E402
from posenc.commands.extend import grid_config  # noqa: E402
from posenc.extend.methods import METHODS, build_variant, needs_length, scheme_name  # noqa: E402
from posenc.models.decoder import build_decoder  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402
from posenc.pretrained.tokenizer import load_tokenizer  # noqa: E402

TEXT = "The grass is green. The pass key is 12345. What is the pass key? Licence terms and conditions apply. " * 8


@pytest.fixture
def folder(tmp_path, seed):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>", "<s>"],
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "eos_token": "<|endoftext|>"}))
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=96,
                         bos_token_id=1, eos_token_id=0)
    LlamaForCausalLM(config).save_pretrained(tmp_path / "model", safe_serialization=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (tmp_path / "model" / name).write_bytes((tmp_path / name).read_bytes())
    return tmp_path / "model"


@pytest.mark.parametrize("method", [m for m in METHODS if m != "rope"])
def test_llama_variant_is_checkpoint_plus_scheme(folder, method):
    pm = load_pretrained(folder)
    variant = build_variant(pm.model, method, factor=2.0, original_max_len=96, builder=build_decoder,
                            length=192 if needs_length(method) else None)
    assert type(variant) is type(pm.model) and variant.config.position == scheme_name(method)
    assert {k for k, v in vars(pm.config).items() if getattr(variant.config, k) != v} == {"position",
                                                                                          "position_options"}
    mine, theirs = pm.model.state_dict(), variant.state_dict()
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


@pytest.mark.slow
def test_command_runs_resumes_and_reports(folder, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["extend", str(folder), "--text", "licenses", "--methods", "rope,rope-yarn", "--factors", "2",
            "--max-tokens", "192", "--lengths", "250,400", "--passkey-trials", "2", "--out", str(out), "--quiet",
            "--json", str(tmp_path / "summary.json")]
    assert main(argv) == 0
    names = sorted(p.name for p in (out / "cells").glob("*.json"))
    assert names == ["control-licenses-rope-T192.json", "loss-licenses-rope-T192.json", "loss-licenses-rope-yarn-x2-T192.json",
                     "passkey-rope-L250.json", "passkey-rope-L400.json",
                     "passkey-rope-yarn-x2-L250.json", "passkey-rope-yarn-x2-L400.json"]
    data = json.loads((out / "results.json").read_text())
    assert data["meta"]["declared_context"] == 96 and data["summary"]["loss"]["licenses"]["original_max_len"] == 96
    assert all(c["sdpa"]["causal_path_only"] for c in data["cells"] if c["kind"] == "loss")
    assert data["meta"]["grid"]["share_prefixes"] is True  # the default; --no-shared-prefix turns it off
    parsed = build_parser().parse_args(["extend", str(folder), "--no-shared-prefix"])
    assert grid_config(parsed, 96).share_prefixes is False
    assert (out / "index.html").exists() and (out / "loss-licenses-x2.png").exists()
    stamps = {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}
    argv_again = [a for a in argv if a != "--quiet"]
    assert main(argv_again) == 0
    assert capsys.readouterr().out.count("done earlier, kept") == 7
    assert stamps == {p.name: p.stat().st_mtime_ns for p in (out / "cells").glob("*.json")}


def test_command_usage_errors_exit_2(folder, tmp_path, capsys):
    assert main(["extend", str(folder), "--methods", "rope-longrope", "--out", "-"]) == 2
    assert "search" in capsys.readouterr().err
    assert main(["extend", str(folder), "--max-tokens", "1", "--out", "-"]) == 2
    assert "--max-tokens" in capsys.readouterr().err
    assert main(["extend", str(tmp_path / "missing"), "--out", "-"]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["extend", str(folder), "--report-only", "--out", str(tmp_path / "empty")]) == 2
    assert main(["extend", str(folder), "--lengths", "20", "--out", "-"]) == 2
    assert "too short" in capsys.readouterr().err


def test_a_second_run_into_a_held_out_folder_is_refused_naming_the_first(folder, tmp_path, capsys):
    """Another process holds the folder (train's lock, ``posenc.checkpoint.run_lock``): extend is refused at once,
    naming that process, and touches nothing; once it exits the folder is free."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import posenc
    from posenc.checkpoint import run_lock

    out = tmp_path / "out"
    (out / "cells").mkdir(parents=True)
    (out / "cells" / "kept.json").write_text("{}")
    src = str(Path(posenc.__file__).resolve().parents[1])
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from posenc.checkpoint import run_lock\n"
         f"with run_lock({str(out)!r}, what='--out folder'):\n    print('held', flush=True); sys.stdin.read()",
         "extend", "first-run"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": src})
    try:
        assert holder.stdout.readline().strip() == "held"
        before = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
        for extra in ([], ["--report-only"]):
            assert main(["extend", str(folder), "--methods", "rope", "--factors", "2", "--text", "licenses",
                         "--max-tokens", "32", "--passkey-trials", "0", "--out", str(out), "--quiet", *extra]) == 2
            err = capsys.readouterr().err
            assert f"--out folder {out} is in use by another posenc run (pid {holder.pid}), started as " in err
            assert "extend first-run" in err and err.count("\n") == 1
            # shards at the same time are the likely cause: the refusal gives their documented route
            assert ("shards that run at the same time need one --out each: when they are done, copy their cells/ "
                    "folders into one and run `posenc extend MODEL --report-only --out DIR`") in err
        assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*")) == before
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    with run_lock(out):  # the holder exited: the kernel released its lock
        pass


def test_the_tokenizer_alone_is_the_checkpoints(folder, tmp_path):
    tokenizer = load_tokenizer(folder)
    assert tokenizer.encode(TEXT) == load_pretrained(folder).tokenizer.encode(TEXT)
    (tmp_path / "bare").mkdir()
    with pytest.raises(ValueError, match=r"bare: no tokenizer.json; give a model folder with one, or a .gguf file"):
        load_tokenizer(tmp_path / "bare")


def test_a_cell_made_in_another_dtype_or_weights_is_not_reused(folder, tmp_path, capsys):
    """The dtype and the weights are part of the model a cell was made with: a float32 cell is not taken as
    done by a bfloat16 run (it is recomputed and says so in its settings), while the defaults keep the plain
    file name, so cells saved before dtype and weights were named stay valid."""
    from posenc.commands.extend import _model_id

    out = tmp_path / "out"
    argv = ["extend", str(folder), "--text", "licenses", "--methods", "rope", "--factors", "2", "--max-tokens", "128",
            "--passkey-trials", "0", "--out", str(out)]
    cell = out / "cells" / "loss-licenses-rope-T128.json"
    assert main(argv) == 0
    f32 = json.loads(cell.read_text())
    assert f32["settings"]["model"] == _model_id(folder) == _model_id(folder, "float32", "dequantised")
    capsys.readouterr()
    assert main(argv + ["--dtype", "bfloat16"]) == 0
    assert "done earlier, kept" not in capsys.readouterr().out
    bf16 = json.loads(cell.read_text())
    assert bf16["settings"]["model"] == _model_id(folder, "bfloat16") != f32["settings"]["model"]
    assert bf16["settings"]["model"].endswith("; bfloat16")
    assert bf16["mean_nll"] != f32["mean_nll"]  # computed again, in bfloat16
    assert main(argv + ["--dtype", "bfloat16"]) == 0
    assert "done earlier, kept" in capsys.readouterr().out
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"0")
    assert _model_id(gguf, "float32", "as-stored") == _model_id(gguf)
    assert _model_id(gguf, "float32", "dequantised").endswith("; dequantised weights")
    assert _model_id(gguf, "bfloat16", "dequantised").endswith("; bfloat16, dequantised weights")


def test_recorded_cells_of_the_other_depth_mode_are_refused_not_overwritten(folder, tmp_path, capsys):
    """A passkey cell made with --depths grid (how cells before 2026-12-05 were made) is recorded work: a run with
    the default stratified depths into that folder stops naming the flag, leaving the cell as it was; with the
    flag it continues the cell. A stratified cell records its mode and puts its trials at distinct depths."""
    out = tmp_path / "out"
    argv = ["extend", str(folder), "--methods", "rope", "--max-tokens", "0", "--lengths", "250",
            "--passkey-trials", "2", "--out", str(out), "--quiet"]
    assert main(argv + ["--depths", "grid"]) == 0
    cell = out / "cells" / "passkey-rope-L250.json"
    grid = cell.read_bytes()
    assert json.loads(grid)["settings"]["depths"] == "grid-5"
    assert [t["depth"] for t in json.loads(grid)["trials"]] == [0.0, 0.25]
    capsys.readouterr()
    assert main(argv) == 2
    assert "--depths grid" in capsys.readouterr().err and cell.read_bytes() == grid
    assert main([("3" if a == "2" else a) for a in argv] + ["--depths", "grid"]) == 0
    assert len(json.loads(cell.read_text())["trials"]) == 3
    assert main([(str(tmp_path / "strata") if a == str(out) else a) for a in argv]) == 0
    strata = json.loads((tmp_path / "strata" / "cells" / "passkey-rope-L250.json").read_text())
    assert strata["settings"]["depths"] == "strata-5"
    assert 0 <= strata["trials"][0]["depth"] < 0.2 <= strata["trials"][1]["depth"] < 0.4


@pytest.mark.parametrize("l0", [96, 8192, 131072])
def test_quick_shortens_the_work_never_the_models_trained_context(l0):
    """--quick once set L0 = 256 on a model trained to 8,192 and then reported "past L0" findings at 512."""
    from posenc.commands.extend import QUICK_TOKENS, shortened

    args = build_parser().parse_args(["extend", "m.gguf", "--quick"])
    cfg = grid_config(args, l0)
    assert cfg.original_max_len == l0
    assert max(cfg.passkey_lengths) <= QUICK_TOKENS and cfg.loss_length <= QUICK_TOKENS
    (note,) = shortened(args, l0, l0)
    assert ("nothing past L0" in note) == (2 * l0 > QUICK_TOKENS and min(2 * l0, QUICK_TOKENS) <= l0)
    if 2 * l0 <= QUICK_TOKENS:  # a model this short is still measured past its L0
        assert cfg.loss_length == 2 * l0 and max(cfg.passkey_lengths) == 2 * l0
    given = build_parser().parse_args(["extend", "m.gguf", "--original-max-len", "64"])
    assert grid_config(given, l0).original_max_len == 64
    assert shortened(given, 64, l0) == [f"L0 = 64 given by --original-max-len; the model was trained to {l0}"]
