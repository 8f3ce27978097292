"""Take the README's screenshots of `posenc explore` with headless Chromium (Selenium + chromium-driver).

    PYTHONPATH=src python scripts/screenshot-explore.py docs/img   # explore-en.png, explore-ko.png

Starts the server in-process on a free port, opens the page in each language, waits for the plots and saves
a PNG of the top of the page.
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service

from posenc.explore.server import make_server

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--no-first-run", "--window-size=1400,1150", "--hide-scrollbars"]


def main(out: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    server = make_server("127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for flag in FLAGS:
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        for lang in ("en", "ko"):
            driver.get(f"{server.url}?lang={lang}")
            end = time.monotonic() + 120
            while time.monotonic() < end and driver.execute_script("return document.body.dataset.renders") == "0":
                time.sleep(0.2)
            time.sleep(1.0)  # plotly's transitions
            path = out / f"explore-{lang}.png"
            driver.save_screenshot(str(path))
            print(path)
    finally:
        driver.quit()
        server.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/img")))
