"""Build the course notebooks from their one source, in Korean and English, and execute them.

    python scripts/build_notebooks.py            # write notebooks/{ko,en}/*.ipynb and execute them (make notebooks)
    python scripts/build_notebooks.py --no-execute   # write them without outputs (fast, for editing prose)
    python scripts/build_notebooks.py --only 05  # one chapter

Each chapter is ``notebooks/source/chNN_*.py`` (cells in ``notebooks/source/cells.py``): the code cells are
shared, the prose and ``«한국어|English»`` spans differ. Executing runs every notebook top to bottom in a fresh
Jupyter kernel (one torch thread, like CI) and keeps the outputs; ``normalize`` drops what differs between runs
(timings, kernel metadata), so regenerating gives the same files and tests/notebooks compares a fresh run with the
committed one.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "notebooks" / "source"
LANGS = ("ko", "en")
#: What varies between two executions of the same notebook and is not compared: memory addresses, wall times.
VOLATILE = [(re.compile(r" at 0x[0-9a-f]+"), " at 0x…"),
            (re.compile(r"(\d+(?:\.\d+)?) ?(s|ms) (wall|CPU)"), r"… \2 \3")]


def chapters() -> list[Any]:
    """The chapter modules, in order."""
    sys.path.insert(0, str(SOURCE))
    try:
        return [importlib.import_module(p.stem) for p in sorted(SOURCE.glob("ch[0-9][0-9]_*.py"))]
    finally:
        sys.path.remove(str(SOURCE))


def notebook(chapter: Any, lang: str) -> Any:
    """The unexecuted notebook of ``chapter`` in ``lang``."""
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.metadata = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
                   "language_info": {"name": "python"}, "posenc": {"lang": lang, "source": f"notebooks/source/"
                                                                                          f"{chapter.__name__}.py"}}
    for i, cell in enumerate(chapter.CELLS):
        text = cell.text(lang)
        new = nbformat.v4.new_markdown_cell if cell.kind == "markdown" else nbformat.v4.new_code_cell
        nb.cells.append(new(text, id=f"c{i:02d}"))
    return nb


def path_of(chapter: Any, lang: str) -> Path:
    return ROOT / "notebooks" / lang / f"{chapter.SLUG}.ipynb"


def kernel_env(lang: str) -> dict[str, str]:
    src = str(ROOT / "src")
    return {**os.environ, "OMP_NUM_THREADS": "1", "LC_ALL": "", "LC_MESSAGES": "",
            "LANG": {"ko": "ko_KR.UTF-8", "en": "en_US.UTF-8"}[lang],
            "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
            "PYTHONHASHSEED": "0"}


def execute(nb: Any, lang: str, timeout: int = 600) -> Any:
    """Run ``nb`` top to bottom in a fresh kernel (in notebooks/) and return it, normalized."""
    import nbclient

    env = kernel_env(lang)
    env.pop("MPLBACKEND", None)  # the kernel's own inline backend
    client = nbclient.NotebookClient(nb, kernel_name="python3", timeout=timeout,
                                     resources={"metadata": {"path": str(ROOT / "notebooks")}})
    client.execute(env=env)
    return normalize(nb)


def normalize(nb: Any) -> Any:
    """Drop per-run metadata (timings) so that two executions write the same file."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        for out in cell.get("outputs", []):
            out.get("metadata", {}).pop("execution", None)
    nb.metadata.pop("widgets", None)
    return nb


def comparable(nb: Any) -> list[tuple[str, str]]:
    """What two runs must agree on: each code cell's text outputs (volatile parts masked) and image count."""
    out: list[tuple[str, str]] = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for o in cell.get("outputs", []):
            if o.output_type == "stream":  # one stream may arrive in several chunks: join them
                if out and out[-1][0] == cell.id and out[-1][1].startswith(f"{o.name}:"):
                    out[-1] = (cell.id, out[-1][1] + o.text)
                    continue
                text = f"{o.name}:" + o.text
            elif o.output_type in ("execute_result", "display_data"):
                text = "<image>" if "image/png" in o.data else o.data.get("text/plain", "")
            else:
                text = f"{o.output_type}: {o.get('ename', '')} {o.get('evalue', '')}"
            out.append((cell.id, text))
    return [(cid, _masked(text)) for cid, text in out]


def _masked(text: str) -> str:
    for pattern, repl in VOLATILE:
        text = pattern.sub(repl, text)
    return text


def main(argv: list[str] | None = None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-execute", action="store_true", help="write the notebooks without outputs")
    parser.add_argument("--only", help="chapter number prefix, e.g. 05")
    args = parser.parse_args(argv)
    for chapter in chapters():
        if args.only and not chapter.SLUG.startswith(args.only):
            continue
        for lang in LANGS:
            nb = notebook(chapter, lang)
            start = time.perf_counter()
            if not args.no_execute:
                nb = execute(nb, lang)
            path = path_of(chapter, lang)
            path.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, path)
            print(f"{path.relative_to(ROOT)}: {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
