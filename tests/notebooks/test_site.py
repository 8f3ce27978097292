"""The site (`make docs`): the docs and the executed course notebooks in both languages, built offline by MkDocs.

Builds the site into a temporary folder from the committed notebooks, then checks that every course page exists in
English and Korean with the notebook's outputs (figures included), that no internal link or image of the course
and home pages points at a missing file, and that Korean renders: a Korean font is installed for the browser and
headless Chromium (Debian's, as tests/lab/test_report.py drives it; skipped where absent) draws the Korean first
page. ``POSENC_UPDATE_SCREENSHOTS=1`` keeps the screenshots of the course's first page in docs/img/course-{en,ko}.png.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest.importorskip("mkdocs", reason="mkdocs not installed (pip install -e '.[docs]')")
pytest.importorskip("mkdocs_jupyter", reason="mkdocs-jupyter not installed (pip install -e '.[docs]')")
SLUGS = sorted(p.stem for p in (ROOT / "notebooks" / "en").glob("*.ipynb"))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, str(ROOT / "scripts" / "site_notebooks.py")], check=True)
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "-q", "-d", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
def test_every_course_page_is_built_with_its_outputs_in_both_languages(site):
    assert len(SLUGS) == 5
    for lang in ("en", "ko"):
        assert (site / "course" / lang / "index.html").is_file()
        for slug in SLUGS:
            html = (site / "course" / lang / f"{slug}.html").read_text(encoding="utf-8")
            assert html.lstrip().startswith("<!doctype html>"), f"{lang}/{slug} not rendered"
            assert "image/png;base64" in html, f"{lang}/{slug}: no figure"
            assert ("■ " in html or slug.startswith("05")) and (bool(re.search(r"[가-힣]", html)) or lang == "en")
            assert 'hreflang="ko"' in html and 'hreflang="en"' in html  # the language switch
    assert (site / "search" / "search_index.js").is_file() or (site / "search" / "search_index.json").is_file()
    assert "MultiHeadAttention" in (site / "api.html").read_text(encoding="utf-8")


@pytest.mark.slow
def test_no_broken_internal_link_in_the_course(site):
    pages = [site / "index.html", *sorted((site / "course").rglob("*.html"))]
    broken = []
    for page in pages:
        for ref in re.findall(r'(?:href|src)="([^"]+)"', page.read_text(encoding="utf-8")):
            parts = urlsplit(ref)
            if parts.scheme or ref.startswith(("#", "//", "data:", "mailto:")) or not parts.path:
                continue
            target = (page.parent / unquote(parts.path)).resolve()
            if target.is_dir():
                target = target / "index.html"
            if not target.exists():
                broken.append(f"{page.relative_to(site)} → {ref}")
    assert not broken, broken[:20]


def _browser() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


@pytest.mark.slow
def test_course_first_page_renders_korean_in_headless_chromium(site, tmp_path):
    browser = _browser()
    if browser is None:
        pytest.skip("headless Chromium not installed: run scripts/ensure-chromium.sh (apt-get install chromium)")
    fonts = subprocess.run(["fc-list", ":lang=ko", "family"], capture_output=True, text=True).stdout
    assert fonts.strip(), "no Korean font for the browser: Hangul would show as boxes (apt-get install fonts-nanum)"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
             "--virtual-time-budget=8000", "--hide-scrollbars"]
    keep = os.environ.get("POSENC_UPDATE_SCREENSHOTS") == "1"
    for lang, words in (("en", "The course"), ("ko", "강의")):
        page = site / "course" / lang / f"{SLUGS[0]}.html"
        dom = subprocess.run([browser, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True,
                             timeout=120).stdout
        assert "<article" in dom and ("■ " in dom)
        assert words in subprocess.run([browser, *flags, "--dump-dom", (page.parent / "index.html").as_uri()],
                                       capture_output=True, text=True, timeout=120).stdout
        shot = (ROOT / "docs" / "img" / f"course-{lang}.png") if keep else tmp_path / f"course-{lang}.png"
        subprocess.run([browser, *flags, "--window-size=1200,1500", f"--screenshot={shot}", page.as_uri()],
                       capture_output=True, timeout=120)
        assert shot.is_file() and shot.stat().st_size > 20_000, shot
