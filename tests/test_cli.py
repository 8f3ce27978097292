"""The command line: discovery, errors, one vocabulary, and a frozen flag set per command."""

import argparse
import json

import pytest

from posenc.cli import build_parser, main
from posenc.cli_options import position_name, position_names
from posenc.positions import names

#: Every command's flags. A change here is a change of the public CLI: make it on purpose, say it in the
#: README's changelog. New commands are added here by their author.
FLAGS = {
    "bench": ["--alloc", "--compile", "--full", "--json", "--markdown", "--no-compile", "--out", "--quiet", "--seed",
              "--size", "--suites", "--threads"],
    "demo": ["--dim", "--heads", "--kind", "--layers", "--position", "--position-option", "--seed", "--vocab"],
    "extend": ["--depths", "--device", "--dtype", "--factors", "--force", "--json", "--layers", "--lengths", "--max-tokens", "--methods",
               "--no-shared-prefix", "--original-max-len", "--out", "--passkey-trials", "--quick", "--quiet", "--report-only", "--seed",
               "--shard", "--tasks", "--text", "--threads", "--weights"],
    "export": ["--dtype", "--force", "--format", "--gguf-type", "--json", "--layers", "--out", "--position",
               "--position-option", "--quiet", "--setting"],
    "explore": ["--host", "--no-browser", "--port", "--quiet", "--threads"],
    "finetune": [],
    "finetune grid": ["--force", "--out", "--quick", "--quiet", "--set", "--shard", "--stage", "--threads"],
    "finetune run": ["--autocast", "--batch-size", "--checkpoint-every", "--chunk", "--constant-lr", "--device",
                     "--dtype", "--eval-every", "--eval-length", "--factor", "--force", "--fsdp", "--grad-checkpoint", "--json",
                     "--length",
                     "--lengths", "--longrope", "--lora-rank", "--lora-targets", "--lora-train", "--lr", "--method",
                     "--original-max-len", "--out", "--passkey-trials", "--quiet", "--resume", "--seed", "--steps",
                     "--text", "--threads", "--train-text", "--warmup", "--weight-decay"],
    "finetune search": ["--crossovers", "--factor", "--force", "--generations", "--json", "--length", "--mutations",
                        "--original-max-len", "--out", "--population", "--quiet", "--samples", "--seed",
                        "--start-tokens", "--threads", "--train-text"],
    "generate": ["--cache", "--chat", "--device", "--dtype", "--json", "--max-new-tokens", "--pairing", "--prompt", "--quiet",
                 "--seed", "--system", "--temperature", "--threads", "--top-k", "--top-p", "--weights"],
    "inspect": ["--force", "--head-tensor", "--json", "--list-tensors", "--max-positions", "--neighbours", "--out",
                "--position-offset", "--position-tensor", "--rows", "--sample", "--seed", "--token-tensor", "--tokens"],
    "lab": ["--base", "--dim", "--force", "--json", "--lang", "--length", "--only", "--out", "--quiet", "--seed"],
    "lengthgen": ["--batch-size", "--dim", "--dropout", "--eval-every", "--eval-examples", "--force", "--framing",
                  "--fresh",
                  "--gate-examples",
                  "--heads", "--jobs", "--layers", "--lr", "--out", "--position", "--quick", "--quiet", "--report-only",
                  "--seeds", "--shard", "--steps", "--task", "--task-option", "--test-max", "--threads", "--threshold",
                  "--train-max"],
    "models": ["--json"],
    "perplexity": ["--cache", "--device", "--dtype", "--json", "--max-tokens", "--pairing", "--per-token", "--quiet", "--stride", "--threads",
                   "--weights", "--window"],
    "rope": ["--base", "--calc", "--engines", "--head-dim", "--hf-config", "--json", "--lint", "--logits-tokens", "--no-hf",
             "--original-max-len", "--pairing-check", "--positions", "--target-len"],
    "engines": ["--json"],
    "schemes": ["--dim", "--heads", "--json"],
    "train": ["--batch-size", "--checkpoint-dir", "--checkpoint-every", "--dim", "--dropout", "--eval-every",
              "--eval-examples", "--framing", "--gate-examples", "--heads", "--json", "--layers", "--lr", "--position", "--quick",
              "--quiet", "--resume", "--seed", "--steps", "--task", "--task-option", "--test-max", "--threads",
              "--threshold", "--train-max"],
    "translate": ["--threads"],
    "translate compare": ["--alpha", "--batch-tokens", "--beam", "--data", "--dim", "--dropout", "--eval-every",
                          "--eval-sentences", "--ffn-dim", "--heads", "--label-smoothing", "--layers", "--limit", "--lr",
                          "--max-tokens", "--model", "--out", "--position", "--position-option", "--quiet", "--seed",
                          "--separate-vocab", "--source", "--split", "--split-seed", "--steps", "--sword-root",
                          "--target", "--test", "--test-books", "--untied", "--valid", "--valid-books", "--vocab",
                          "--warmup"],
    "translate eval": ["--alpha", "--beam", "--examples", "--limit", "--quiet", "--run", "--sets"],
    "translate prepare": ["--data", "--separate-vocab", "--source", "--split", "--split-seed", "--sword-root",
                          "--target", "--test", "--test-books", "--valid", "--valid-books", "--vocab"],
    "translate train": ["--batch-tokens", "--data", "--dim", "--dropout", "--eval-every", "--eval-sentences",
                        "--ffn-dim", "--heads", "--label-smoothing", "--layers", "--lr", "--max-tokens", "--model",
                        "--position", "--position-option", "--quiet", "--resume", "--run", "--seed",
                        "--separate-vocab", "--source", "--split", "--split-seed", "--steps", "--sword-root",
                        "--target", "--test", "--test-books", "--untied", "--valid", "--valid-books", "--vocab",
                        "--warmup"],
    "translate translate": ["--alpha", "--beam", "--run"],
}
#: Spellings retired for the shared vocabulary (the README changelog lists each with its replacement).
RETIRED = {"--scheme": "--position", "--no-progress": "--quiet", "--models": "--model/--position"}
#: Commands that still use a retired spelling, and why (remove the entry when the command moves).
PENDING: dict[str, str] = {}


def commands(parser: argparse.ArgumentParser | None = None, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command and nested action ("translate train"), by its command line."""
    parser = parser or build_parser()
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[prefix + name] = sub
                out.update(commands(sub, prefix + name + " "))
    return out


def flags(parser: argparse.ArgumentParser) -> list[str]:
    return sorted(o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help")


@pytest.mark.parametrize("command", sorted(commands()))
def test_flag_set_is_frozen(command):
    assert command in FLAGS, (f"`posenc {command}` is new: add its flags to FLAGS in tests/test_cli.py "
                              f"({flags(commands()[command])}), using the shared ones of posenc.cli_options")
    assert flags(commands()[command]) == FLAGS[command], (
        f"`posenc {command}` flags changed; if on purpose, update FLAGS and the README changelog")


def test_no_frozen_command_has_disappeared():
    assert sorted(FLAGS) == sorted(commands()), "a command was removed: drop it from FLAGS and say so in the changelog"


@pytest.mark.parametrize("command", sorted(commands()))
def test_one_vocabulary(command):
    parser = commands()[command]
    if command not in PENDING:
        used = sorted(set(flags(parser)) & set(RETIRED))
        assert not used, f"`posenc {command}` uses retired spelling(s) {used}: use {[RETIRED[u] for u in used]}"
    for action in parser._actions:
        if "--position" in action.option_strings:  # the registry checks it and resolves aliases
            assert action.type in (position_name, position_names), f"`posenc {command} --position` is not shared"


def test_schemes_lists_every_registered_name_with_its_aliases(capsys):
    assert main(["schemes", "--json", "-"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in rows] == names()
    assert next(r for r in rows if r["name"] == "none")["aliases"] == ["nope"]


def test_unknown_scheme_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["demo", "--position", "ropee"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "unknown position scheme 'ropee'" in err and "rope" in err and "nope (= none)" in err


@pytest.mark.parametrize(("alias", "real"), [("nope", "none"), ("absolute", "sinusoidal")])
def test_demo_accepts_aliases_and_describes_the_model(alias, real, capsys):
    assert main(["demo", "--position", alias, "--kind", "decoder-only"]) == 0
    out = capsys.readouterr().out
    described = json.loads(out[: out.index("greedy")])
    assert described["position"]["name"] == real


def test_demo_passes_position_options(capsys):
    assert main(["demo", "--position", "rope", "--position-option", "base=500000", "--kind", "decoder-only"]) == 0
    out = capsys.readouterr().out
    assert json.loads(out[: out.index("greedy")])["position"]["base"] == 500000.0


def test_out_dash_writes_no_files(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["lab", "--only", "sinusoid-norm", "--out", "-", "--json", "-", "--quiet"]) == 0
    assert json.loads(capsys.readouterr().out)["experiments"][0]["id"] == "sinusoid-norm"
    assert list(tmp_path.iterdir()) == []


def test_subcommands_are_discovered():
    assert {"schemes", "demo", "lab", "translate train"} <= set(commands())


def test_version_names_posenc_torch_and_each_optional_part(capsys, monkeypatch):
    import importlib.util

    import torch

    import posenc
    from posenc.cli import OPTIONAL_PARTS

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"posenc {posenc.__version__} (torch {torch.__version__}")
    assert len(lines) == 1 + len(OPTIONAL_PARTS)
    assert any(line.split()[0] == "gguf" and "absent" in line and "posenc[models]" in line for line in lines[1:])
