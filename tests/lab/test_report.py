"""The report as a person sees it: rendered by headless Chromium, every figure loaded;
and the CLI's JSON interface."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from posenc.cli import main
from posenc.lab.core import EXPERIMENTS, LabConfig
from posenc.lab.experiments import property_table, run_lab
from posenc.lab.report import FIGURES, terminal_table, write_report
from posenc.positions import names

CHEAP = ["naive-position", "sinusoid-norm", "distance-only", "not-monotonic", "shift-is-linear",
         "beyond-training-length", "position-vs-content", "permutation"]

VALUE_NAMES = {
    "naive-position": {"windows"},
    "sinusoid-norm": {"norm", "norm_spread"},
    "distance-only": {"diagonal_spread", "formula_error"},
    "not-monotonic": {"profile_head", "increases", "steps", "argmin", "min", "last"},
    "shift-is-linear": {"offsets", "sinusoid_residual", "random_residual"},
    "beyond-training-length": {"position", "norm", "dot_next", "dot_origin"},
    "permutation": {"no_position", "position_fixed", "position_travels"},
}


def test_json_interface(capsys):
    assert main(["lab", "--json", "-", "--quiet", "--out", "-", "--only", ",".join(CHEAP)]) == 0
    data = json.loads(capsys.readouterr().out)
    exps = {e["id"]: e for e in data["experiments"]}
    assert list(exps) == CHEAP
    for e in exps.values():
        assert set(e) == {"id", "claim", "params", "values", "holds"} and isinstance(e["holds"], bool)
    for exp_id, keys in VALUE_NAMES.items():
        assert keys <= set(exps[exp_id]["values"]), exp_id
    windows = exps["naive-position"]["values"]["windows"]
    assert [w["start"] for w in windows] == [0, 100]
    assert all(set(w) == {"start", "position_spread", "content_spread", "max_prob"} for w in windows)
    assert len(exps["not-monotonic"]["values"]["profile_head"]) == 8
    assert all(isinstance(exps["permutation"]["values"][k], bool)
               for k in ("no_position", "position_fixed", "position_travels"))


def test_defaults_reproduce_the_articles_numbers():
    """At d = 64, L = 512, base 10000 the lab must give the articles' values (docs/lab.md, article 000)."""
    f = {x.id: x.values for x in run_lab(LabConfig(), only=CHEAP[:6])}
    w0, w100 = f["naive-position"]["windows"]
    assert round(w0["position_spread"], 2) == 11.18 and round(w100["position_spread"], 2) == 458.39
    assert round(w100["max_prob"], 3) == 1.0
    assert round(f["sinusoid-norm"]["norm"], 4) == 5.6569 and f["sinusoid-norm"]["norm_spread"] < 1e-14
    assert f["distance-only"]["diagonal_spread"] < 1e-12 and f["distance-only"]["formula_error"] < 1e-12
    m = f["not-monotonic"]
    assert [round(x, 2) for x in m["profile_head"][:7]] == [32.00, 30.92, 28.30, 25.59, 23.93, 23.50, 23.56]
    assert (m["increases"], m["steps"], m["argmin"]) == (244, 511, 406)
    assert round(m["min"], 2) == 2.56 and round(m["last"], 2) == 6.42
    s = f["shift-is-linear"]
    assert max(s["sinusoid_residual"]) < 1e-12 and min(s["random_relative"]) > 0.85
    b = f["beyond-training-length"]
    assert b["position"] == 4000 and round(b["norm"], 4) == 5.6569 and round(b["dot_next"], 3) == 30.917


def test_unknown_id_and_bad_sizes_are_clear_errors(capsys):
    assert main(["lab", "--only", "nope", "--out", "-", "--quiet"]) == 2
    assert "unknown experiment id(s) ['nope']" in capsys.readouterr().err
    assert main(["lab", "--dim", "7", "--out", "-", "--quiet", "--only", "sinusoid-norm"]) == 2
    assert "--dim" in capsys.readouterr().err


def test_properties_command_lists_every_scheme(capsys):
    assert main(["lab", "properties", "--json", "-", "--quiet", "--length", "64", "--dim", "16"]) == 0
    rows = json.loads(capsys.readouterr().out)["properties"]
    assert [r["name"] for r in rows] == names()


def test_terminal_table_fits_100_columns():
    findings = run_lab(LabConfig(dim=16, length=64), only=CHEAP)
    text = terminal_table(findings)
    assert max(len(line) for line in text.splitlines()) <= 100
    assert all(f.id in text for f in findings)


def _browser() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


CHECK_JS = """<script>
window.addEventListener('load', () => {
  const imgs = Array.from(document.images);
  document.body.setAttribute('data-figures', JSON.stringify(imgs.map(i => [i.getAttribute('src'), i.naturalWidth])));
});
</script>"""


@pytest.mark.slow
def test_report_renders_in_headless_chromium(tmp_path: Path):
    browser = _browser()
    if browser is None:
        pytest.skip("headless Chromium not installed: run scripts/ensure-chromium.sh (apt-get install chromium)")
    cfg = LabConfig(dim=32, length=128, seed=1)
    small = {"complexity": {"lengths": (8, 16), "path_lengths": (4,), "repeats": 1},
             "exercises-depth": {"tokens": 8, "sequences": 16, "depths": (0, 2)},
             "exercises-learned": {"steps": 5, "length": 6}, "exercises-relative": {"steps": 5, "length": 6}}
    only = [*CHEAP, "pe-module", "complexity", "exercises-depth", "exercises-learned", "exercises-relative",
            "self-score", "cosine-vs-dot"]
    findings = []
    for exp_id in only:
        finding = EXPERIMENTS[exp_id].run(cfg, **small.get(exp_id, {}))
        finding.id = exp_id
        findings.append(finding)
    index = write_report(findings, tmp_path, cfg=cfg, properties=property_table(cfg))
    html = index.read_text()
    expected = set(re.findall(r"<img src='([^']+)'", html))
    # every figure-drawing experiment drew; pe-module draws two, the exercises one more
    assert len(expected) == len([i for i in only if i in FIGURES]) + 2
    check = tmp_path / "check.html"
    check.write_text(html.replace("</body>", CHECK_JS + "</body>"))
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
             "--virtual-time-budget=10000"]
    dom = subprocess.run([browser, *flags, "--dump-dom", check.as_uri()], capture_output=True, text=True,
                         timeout=120).stdout
    match = re.search(r"data-figures=\"([^\"]*)\"", dom)
    assert match, dom[:500]
    loaded = dict(json.loads(match.group(1).replace("&quot;", '"')))
    assert set(loaded) == expected
    assert all(w > 0 for w in loaded.values()), loaded
    assert "claims hold" in dom and "Every registered scheme" in dom
    shot = tmp_path / "shot.png"
    subprocess.run([browser, *flags, "--window-size=1100,2400", f"--screenshot={shot}", index.as_uri()],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 10_000
    results = json.loads((tmp_path / "results.json").read_text())
    assert [e["id"] for e in results["experiments"]] == only
