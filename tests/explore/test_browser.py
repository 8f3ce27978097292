"""The explore page in a real browser: Debian's Chromium, headless, driven by Selenium and chromium-driver.

Skipped, with the reason, where the browser, the driver or Selenium is missing
(scripts/ensure-chromium.sh installs them). One browser and one server serve the module.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from posenc.positions import names

selenium = pytest.importorskip("selenium", reason="selenium not installed (pip install -e '.[test]')")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import Select  # noqa: E402

BROWSER = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    BROWSER is None or DRIVER is None,
    reason="headless Chromium or chromedriver not installed: run scripts/ensure-chromium.sh "
    "(apt-get install chromium chromium-driver)")

HEADLESS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run", "--window-size=1400,1800"]


@pytest.fixture(scope="module")
def driver() -> Iterator[webdriver.Chrome]:
    opts = webdriver.ChromeOptions()
    opts.binary_location = BROWSER
    for flag in HEADLESS:
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    drv = webdriver.Chrome(service=Service(DRIVER), options=opts)
    drv.set_page_load_timeout(120)
    yield drv
    drv.quit()


def renders(drv) -> int:
    return int(drv.execute_script("return document.body.dataset.renders") or 0)


def wait_for(drv, predicate, *, timeout: float = 120, what: str = "") -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def redraw(drv, action) -> None:
    """Run ``action`` and wait until the page has drawn the answer to it."""
    before = renders(drv)
    action()
    wait_for(drv, lambda: renders(drv) > before, what="a redraw")


def open_page(drv, server, lang: str = "en") -> None:
    drv.get(f"{server.url}?lang={lang}")
    wait_for(drv, lambda: renders(drv) >= 1, what="the first drawing")


def set_value(drv, element_id: str, value: str) -> None:
    field = drv.find_element(By.ID, element_id)
    field.clear()
    field.send_keys(value)


def severe_console(drv) -> list[dict]:
    return [e for e in drv.get_log("browser") if e["level"] == "SEVERE"]


def plot_data(drv, plot_id: str) -> list:
    return drv.execute_script(f"return document.getElementById('{plot_id}').data.map(t => ({{x: t.x, y: t.y, z: t.z}}))")


def test_page_loads_and_draws_without_console_errors(driver, server):
    open_page(driver, server)
    assert severe_console(driver) == []
    for plot in ("plot-table", "plot-profile", "plot-similarity", "plot-attention", "plot-naive"):
        assert driver.find_elements(By.CSS_SELECTOR, f"#{plot} .main-svg"), plot
    assert driver.find_element(By.ID, "error").get_attribute("hidden") is not None
    shown = Select(driver.find_element(By.ID, "scheme"))
    assert sorted(o.get_attribute("value") for o in shown.options) == names()


def test_changing_d_or_the_scheme_redraws(driver, server):
    open_page(driver, server)
    width = len(plot_data(driver, "plot-table")[0]["z"][0])
    assert width == 64
    redraw(driver, lambda: set_value(driver, "dim", "32"))
    assert len(plot_data(driver, "plot-table")[0]["z"][0]) == 32
    redraw(driver, lambda: Select(driver.find_element(By.ID, "scheme")).select_by_value("rope"))
    assert driver.find_element(By.ID, "table-title").text == "Rotation angles"
    assert len(plot_data(driver, "plot-table")[0]["z"][0]) == 32 // 4 // 2  # head width 8: 4 rotation pairs
    assert driver.find_elements(By.ID, "opt-pairing")  # the scheme's own options appear as controls
    redraw(driver, lambda: Select(driver.find_element(By.ID, "scheme")).select_by_value("alibi"))
    assert driver.find_element(By.ID, "table-title").text == "Attention bias"
    assert severe_console(driver) == []


def lab_json(*args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "posenc.cli", "lab", "--json", "-", "--quiet", "--out", "-", *args],
                         capture_output=True, text=True, timeout=600, check=True)
    return json.loads(out.stdout)


@pytest.mark.slow  # runs `posenc lab` twice in subprocesses
def test_numbers_shown_equal_posenc_lab_json(driver, server):
    dim, length, base = 32, 96, 3000
    open_page(driver, server)
    redraw(driver, lambda: (set_value(driver, "dim", str(dim)), set_value(driver, "length", str(length)),
                            set_value(driver, "base", str(base))))
    wait_for(driver, lambda: driver.find_element(By.CSS_SELECTOR, "#props td[data-key=norm_constant]").text,
             what="the property row")
    lab = lab_json("--dim", str(dim), "--length", str(length), "--base", str(base),
                   "--only", "position-vs-content,not-monotonic")
    props = {r["name"]: r for r in
             json.loads(subprocess.run([sys.executable, "-m", "posenc.cli", "lab", "properties", "--json", "-", "--quiet",
                                        "--dim", str(dim), "--length", str(length), "--base", str(base)],
                                       capture_output=True, text=True, timeout=600, check=True).stdout)["properties"]}
    row = props["sinusoidal"]
    for cell in driver.find_elements(By.CSS_SELECTOR, "#props td[data-key]"):
        assert json.loads(cell.get_attribute("data-value")) == pytest.approx(row[cell.get_attribute("data-key")])
    found = {e["id"]: e["values"] for e in lab["experiments"]}
    shown = {c.get_attribute("data-key"): float(c.get_attribute("data-value"))
             for c in driver.find_elements(By.CSS_SELECTOR, "#attention-numbers td[data-key]")}
    for i in range(6):
        assert shown[f"row0_with.{i}"] == pytest.approx(found["position-vs-content"]["example_with"][i], abs=1e-12)
        assert shown[f"row0_without.{i}"] == pytest.approx(found["position-vs-content"]["example_without"][i], abs=1e-12)
    stats = driver.find_element(By.ID, "profile-stats").text
    assert re.search(rf"rises at {found['not-monotonic']['increases']} of {length - 1} steps", stats), stats


def visible_words(drv) -> set[str]:
    text = drv.execute_script("return document.body.innerText + ' ' + "
                              "[...document.querySelectorAll('svg text')].map(e => e.textContent).join(' ')")
    return set(re.findall(r"[A-Za-z]{4,}", text))


def test_the_language_switch_changes_every_visible_text(driver, server):
    open_page(driver, server, "en")
    keyed = lambda: {e.get_attribute("data-i18n"): e.text  # noqa: E731
                     for e in driver.find_elements(By.CSS_SELECTOR, "[data-i18n]") if e.is_displayed()}
    english = keyed()
    english_words = visible_words(driver)
    redraw_titles = plot_data(driver, "plot-attention")
    assert redraw_titles
    driver.find_element(By.ID, "lang").click()
    wait_for(driver, lambda: driver.execute_script("return document.documentElement.lang") == "ko", what="Korean")
    korean = keyed()
    assert korean.keys() == english.keys()
    unchanged = {k for k in english if english[k] == korean[k]}
    assert not unchanged, unchanged
    # no English word of the page's own texts is left anywhere visible (axis titles and legends included);
    # names of schemes, options and tools stay as they are in both languages
    own_words = set(re.findall(r"[A-Za-z]{4,}", " ".join(driver.execute_script("return Object.values(TEXTS.en)"))))
    shared = set(re.findall(r"[A-Za-z]{4,}", " ".join(driver.execute_script("return Object.values(TEXTS.ko)"))))
    shared |= set(re.findall(r"[A-Za-z]{4,}", " ".join(names())))  # scheme names are names in both languages
    left = (visible_words(driver) & own_words) - shared
    assert not left, left
    assert english_words & own_words  # the English page did show them
    driver.find_element(By.ID, "lang").click()
    wait_for(driver, lambda: driver.execute_script("return document.documentElement.lang") == "en", what="English")
    assert keyed() == english


def test_a_bad_value_shows_its_message_in_the_chosen_language(driver, server):
    open_page(driver, server, "en")
    redraw(driver, lambda: set_value(driver, "dim", "63"))
    box = driver.find_element(By.ID, "error")
    assert box.is_displayed() and "63 is odd" in box.text
    assert driver.find_element(By.ID, "dim").get_attribute("aria-invalid") == "true"
    driver.find_element(By.ID, "lang").click()
    wait_for(driver, lambda: "홀수" in driver.find_element(By.ID, "error").text, what="the Korean message")
    redraw(driver, lambda: set_value(driver, "dim", "64"))
    assert not driver.find_element(By.ID, "error").is_displayed()
    # Chromium logs the refused request itself (HTTP 400) as a network error; no script error may follow it
    assert [e for e in severe_console(driver) if not (e["source"] == "network" and "(Bad Request)" in e["message"])] == []
