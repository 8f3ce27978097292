"""The lab report's language switch in a real browser: Debian's Chromium, headless, driven by Selenium and
chromium-driver, with a Korean font (scripts/ensure-chromium.sh installs all three; skipped, saying so, without).

Checks what a reader sees: only the chosen language's text is visible, the button switches and the choice is
remembered, ``--lang`` fixes the first view, and Hangul is drawn as glyphs (not boxes from a missing font).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from posenc.lab.core import LabConfig
from posenc.lab.experiments import run_lab
from posenc.lab.report import claim_text, write_report

selenium = pytest.importorskip("selenium", reason="selenium not installed (pip install -e '.[test]')")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

BROWSER = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
DRIVER = shutil.which("chromedriver")


def _korean_font() -> bool:
    if shutil.which("fc-list") is None:
        return False
    return bool(subprocess.run(["fc-list", ":lang=ko"], capture_output=True, text=True).stdout.strip())


pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(BROWSER is None or DRIVER is None,
                       reason="headless Chromium or chromedriver not installed: run scripts/ensure-chromium.sh "
                       "(apt-get install chromium chromium-driver fonts-nanum)"),
    pytest.mark.skipif(not _korean_font(), reason="no Korean font (fc-list :lang=ko is empty), Hangul would draw as "
                       "boxes: run scripts/ensure-chromium.sh (apt-get install fonts-nanum)"),
]

#: Draws two different syllables in the page's own font and compares the pixels: with no Korean font both come
#: out as the same "missing glyph" box (or nothing), so equal pixels mean Korean does not render.
GLYPHS_DIFFER = """
const font = getComputedStyle(document.body).fontFamily;
function draw(ch) {
  const c = document.createElement("canvas"); c.width = 48; c.height = 48;
  const g = c.getContext("2d"); g.font = "32px " + font; g.fillText(ch, 4, 36);
  return Array.from(g.getImageData(0, 0, 48, 48).data).join(",");
}
const a = draw("한"), b = draw("글"), blank = draw(" ");
return a !== b && a !== blank && b !== blank;
"""


@pytest.fixture(scope="module")
def driver():
    opts = webdriver.ChromeOptions()
    opts.binary_location = BROWSER
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--no-first-run", "--allow-file-access-from-files", "--window-size=1100,1400", "--lang=en-US"):
        opts.add_argument(flag)
    drv = webdriver.Chrome(service=Service(DRIVER), options=opts)
    yield drv
    drv.quit()


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    cfg = LabConfig(dim=16, length=64, seed=2)
    findings = run_lab(cfg, only=["sinusoid-norm", "not-monotonic", "permutation"])
    base = tmp_path_factory.mktemp("reports")
    auto = write_report(findings, base / "auto", cfg=cfg)
    fixed = write_report(findings, base / "fixed", cfg=cfg, lang="ko", lang_fixed=True)
    return findings, auto, fixed


def visible(drv) -> str:
    return drv.find_element(By.TAG_NAME, "body").text


def lang(drv) -> str:
    return drv.execute_script("return document.documentElement.lang")


def test_switch_shows_one_language_at_a_time_and_is_remembered(driver, reports, tmp_path):
    findings, auto, _ = reports
    f = findings[0]
    driver.get(auto.as_uri() + "?lang=ko")
    assert lang(driver) == "ko" and driver.title == "posenc 실험실"
    text = visible(driver)
    assert claim_text(f, "ko") in text and f.claim not in text and "주장 3개 중 3개 성립" in text
    assert driver.execute_script(GLYPHS_DIFFER), "Hangul is not drawn: no usable Korean font"
    driver.save_screenshot(str(tmp_path / "ko.png"))
    assert (tmp_path / "ko.png").stat().st_size > 20_000
    driver.find_element(By.ID, "lang").click()
    assert lang(driver) == "en" and f.claim in visible(driver) and claim_text(f, "ko") not in visible(driver)
    driver.get(auto.as_uri())  # no ?lang: the remembered choice (English) beats the browser's language
    assert lang(driver) == "en"
    driver.find_element(By.ID, "lang").click()
    driver.get(auto.as_uri())
    assert lang(driver) == "ko" and "3 of 3 claims hold" not in visible(driver)
    driver.execute_script("localStorage.clear()")
    driver.get(auto.as_uri())  # nothing asked, nothing remembered: the browser's language (en-US here)
    assert lang(driver) == "en" and "English" not in driver.find_element(By.ID, "lang").text


def test_report_written_with_lang_opens_in_it(driver, reports):
    findings, auto, fixed = reports
    driver.get(auto.as_uri() + "?lang=en")
    driver.find_element(By.ID, "lang").click()
    driver.find_element(By.ID, "lang").click()  # remembered: English
    driver.get(fixed.as_uri())
    assert lang(driver) == "ko" and claim_text(findings[1], "ko") in visible(driver)  # --lang ko wins
    driver.get(fixed.as_uri() + "?lang=en")
    assert lang(driver) == "en"  # and the address beats --lang
