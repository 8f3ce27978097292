"""Optional packages: each feature that needs one refuses, where it is absent, with the extra that brings it.

A package is made absent by ``sys.modules[name] = None`` (``import name`` then raises ``ModuleNotFoundError``),
so these tests run in the full test environment. ``posenc.checks.OPTIONAL_PARTS`` (what ``posenc --version``
lists) must agree with pyproject.toml's extras, and the core install (no extras) must run the CLI and the lab.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from posenc.checks import OPTIONAL_PARTS, MissingPart, require

ROOT = Path(__file__).resolve().parents[1]
#: every optional package posenc or its notebooks import, and those they bring (absent in a core install)
OPTIONAL_MODULES = ("tokenizers", "jinja2", "gguf", "ninja", "transformers", "accelerate", "sacrebleu", "IPython",
                    "ipykernel", "nbclient", "nbformat")


def absent(monkeypatch: pytest.MonkeyPatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def names_extra(err: BaseException, module: str, extra: str) -> None:
    assert f"needs the '{module}' package: pip install 'posenc[{extra}]'" in str(err), str(err)


def extras() -> dict[str, list[str]]:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def requirement_names(extra: str, table: dict[str, list[str]]) -> set[str]:
    """The distributions an extra installs, its own extras (``posenc[models]``) followed."""
    names: set[str] = set()
    for req in table[extra]:
        name = re.match(r"[A-Za-z0-9_.-]+", req)[0].lower()
        inner = re.match(r"posenc\[(.*)\]", req)
        if inner:
            for sub in inner[1].split(","):
                names |= requirement_names(sub.strip(), table)
        else:
            names.add(name)
    return names


@pytest.mark.parametrize("module,what,extra", OPTIONAL_PARTS)
def test_require_names_the_extra_of_each_optional_part(monkeypatch, module, what, extra):
    absent(monkeypatch, module)
    with pytest.raises(MissingPart) as err:
        require(module, what)
    names_extra(err.value, module, extra)
    assert str(err.value).startswith(what)
    assert isinstance(err.value, ImportError) and isinstance(err.value, ValueError)  # skippable; the CLI's exit 2
    assert err.value.name == module and err.value.extra == extra


def test_require_returns_the_module_and_lets_a_broken_package_say_what_it_lacks(tmp_path, monkeypatch):
    assert require("json", "reading JSON", "models").__name__ == "json"
    (tmp_path / "posenc_broken_part").mkdir()
    (tmp_path / "posenc_broken_part" / "__init__.py").write_text("import posenc_no_such_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as err:
        require("posenc_broken_part", "a feature", "models")
    assert not isinstance(err.value, MissingPart) and err.value.name == "posenc_no_such_dependency"


def test_optional_parts_agree_with_pyproject_extras():
    table = extras()
    assert {"models", "hf", "text", "notebooks", "test", "all"} <= set(table)
    for module, _, extra in OPTIONAL_PARTS:
        assert module.lower() in requirement_names(extra, table), f"{module} is not in posenc[{extra}]"
    everything = requirement_names("all", table)
    for extra in ("models", "hf", "text", "notebooks"):
        assert requirement_names(extra, table) <= everything <= requirement_names("test", table)


def test_every_extra_named_in_the_source_exists():
    """``require(..., "EXTRA")`` and every ``posenc[EXTRA]`` written in src/ name an extra of pyproject.toml."""
    table = extras()
    named = {}
    for path in (ROOT / "src" / "posenc").rglob("*.py"):
        for extra in re.findall(r"posenc\[([a-z,]+)\]", path.read_text(encoding="utf-8")):
            for one in extra.split(","):
                named.setdefault(one, path.name)
    assert named and set(named) <= set(table), {k: v for k, v in named.items() if k not in table}


def test_core_dependencies_are_only_what_the_lab_needs():
    tomllib = pytest.importorskip("tomllib", reason="tomllib is Python 3.11's")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {re.match(r"[A-Za-z0-9_.-]+", d)[0] for d in deps} == {"torch", "numpy", "matplotlib", "safetensors", "tqdm"}


# -- each place that imports an optional package ----------------------------------------------------------
def test_gguf_reading_names_models(monkeypatch, tmp_path):
    from posenc.formats.gguf import _gguf, open_gguf

    absent(monkeypatch, "gguf")
    with pytest.raises(MissingPart) as err:
        _gguf()
    names_extra(err.value, "gguf", "models")
    empty = tmp_path / "empty.gguf"  # magic, version 3, no tensors, no metadata: the header check reaches gguf
    empty.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + bytes(16))
    with pytest.raises(MissingPart) as err:
        open_gguf(empty)
    names_extra(err.value, "gguf", "models")


def test_gguf_writing_names_models(monkeypatch, tmp_path):
    from posenc.extend.export import write_gguf

    absent(monkeypatch, "gguf")
    with pytest.raises(MissingPart) as err:
        write_gguf(tmp_path / "out.gguf", None, {}, None)  # refused before anything is read or written
    names_extra(err.value, "gguf", "models")
    assert not (tmp_path / "out.gguf").exists()


def test_tokenizers_of_real_models_name_models(monkeypatch, tmp_path):
    from posenc.formats.gguf_tokenizer import tokenizer_from_metadata
    from posenc.pretrained.tokenizer import load_hf_tokenizer

    absent(monkeypatch, "tokenizers")
    with pytest.raises(MissingPart) as err:
        tokenizer_from_metadata({"tokenizer.ggml.model": "gpt2"}, tmp_path / "m.gguf")
    names_extra(err.value, "tokenizers", "models")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(MissingPart) as err:
        load_hf_tokenizer(tmp_path, {})
    names_extra(err.value, "tokenizers", "models")
    assert str(err.value).startswith(str(tmp_path / "tokenizer.json"))


def test_chat_templates_name_models(monkeypatch):
    from posenc.pretrained.chat_template import render
    from posenc.pretrained.tokenizer import Tokenizer

    absent(monkeypatch, "jinja2")
    with pytest.raises(MissingPart) as err:
        render("{{ messages }}", messages=[])
    names_extra(err.value, "jinja2", "models")
    tok = Tokenizer(None, chat_template="{{ messages }}")
    with pytest.raises(ValueError, match=re.escape("pip install 'posenc[models]'")):
        tok.apply_chat_template([{"role": "user", "content": "hi"}])


def test_translation_names_text(monkeypatch):
    from posenc.translation.metrics import score
    from posenc.translation.tokenizer import train_bpe

    absent(monkeypatch, "tokenizers", "sacrebleu")
    with pytest.raises(MissingPart) as err:
        train_bpe(["a b c"], vocab_size=64)
    names_extra(err.value, "tokenizers", "text")
    with pytest.raises(MissingPart) as err:
        score(["a"], ["a"])
    names_extra(err.value, "sacrebleu", "text")


def test_hf_comparisons_name_hf(monkeypatch, tmp_path):
    from posenc.bench.compiled import llama_pair
    from posenc.ropecheck import hf

    absent(monkeypatch, "transformers")
    _, why = hf.config_of_gguf(tmp_path / "m.gguf")
    assert "pip install 'posenc[hf]'" in why
    assert "pip install 'posenc[hf]'" in llama_pair({"llama": True})


def test_kernel_build_without_ninja_names_models(monkeypatch):
    import shutil

    import posenc.kernels as kernels

    absent(monkeypatch, "ninja")
    monkeypatch.setattr(shutil, "which", lambda name, *a, **k: None)
    with pytest.raises(ModuleNotFoundError, match=re.escape("'ninja' package: pip install 'posenc[models]'")):
        kernels._find_ninja()


def test_notebook_figures_name_notebooks(monkeypatch):
    from posenc.lab.course import plot

    absent(monkeypatch, "IPython")
    with pytest.raises(MissingPart) as err:
        plot()
    names_extra(err.value, "IPython", "notebooks")


def test_the_cli_prints_a_missing_part_as_one_line_exit_2():
    from posenc.cli import _failure

    assert _failure(MissingPart("gguf", "reading .gguf files", "models")) == (
        2, "reading .gguf files needs the 'gguf' package: pip install 'posenc[models]'")


# -- the core install -------------------------------------------------------------------------------------
CORE = r"""
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None  # as if not installed: import raises ModuleNotFoundError
from posenc.cli import main
for argv in (["--version"], ["schemes"], ["lab", "--only", "sinusoid-norm,shift-is-linear", "--dim", "16",
                                         "--length", "64", "--json", "-", "--out", "-", "--quiet"]):
    try:
        code = main(argv)
    except SystemExit as done:  # --version exits through argparse
        code = done.code
    assert code == 0, (argv, code)
"""


def test_the_cli_and_the_lab_run_without_any_optional_package():
    """What a core install (``pip install posenc``, no extras) gives: every command loads, the lab runs, and
    ``--version`` lists each optional part as absent with its extra."""
    done = subprocess.run([sys.executable, "-c", CORE, ",".join(OPTIONAL_MODULES)], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    first, *version = done.stdout.splitlines()[: 1 + len(OPTIONAL_PARTS)]
    assert first.startswith("posenc ")
    for (module, _, extra), line in zip(OPTIONAL_PARTS, version):
        assert line.split()[:2] == [module, "absent"] and f"pip install 'posenc[{extra}]'" in line, line
