"""Copy the executed course notebooks into the docs tree for the site: notebooks/LANG/X.ipynb →
docs/course/LANG/X.ipynb (mkdocs-jupyter renders them with their outputs). Run by `make docs`; not committed there."""

import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for lang in ("en", "ko"):
    out = ROOT / "docs" / "course" / lang
    out.mkdir(parents=True, exist_ok=True)
    for nb in sorted((ROOT / "notebooks" / lang).glob("*.ipynb")):
        shutil.copyfile(nb, out / nb.name)
