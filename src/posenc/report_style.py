"""One look for every posenc report: the HTML page style, the figure style and the number format.

The lab's report (``posenc.lab.report``), ``posenc inspect``'s (``posenc.inspect.report``) and the
context-extension report (``posenc.extend.report``) all take them from here. The module imports nothing of
posenc, so a report of the running layer and one of the measuring layer share one look without either
importing the other (docs/architecture.md, "Layers").
"""

from __future__ import annotations

from typing import Any

#: The page style of every HTML report.
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,"Noto Sans CJK KR","Nanum Gothic","Malgun Gothic",
"Apple SD Gothic Neo",sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#222;line-height:1.45}
h1{margin-bottom:.2em} .sub{color:#666;margin-top:0}
table{border-collapse:collapse;width:100%;font-size:.9em;margin:1em 0}
th,td{border-bottom:1px solid #ddd;padding:.35em .5em;text-align:left;vertical-align:top}
th{background:#f5f5f5} td:first-child a{white-space:nowrap} .yes{color:#137333;font-weight:600} .no{color:#c5221f;font-weight:600}
section{border-top:2px solid #eee;margin-top:2em;padding-top:.5em}
.claim{font-size:1.05em} .meta{color:#666;font-size:.85em}
pre{background:#f8f8f8;padding:.6em;overflow-x:auto;font-size:.8em;max-height:22em}
img{max-width:100%;display:block;margin:.8em 0;border:1px solid #eee}
code{background:#f3f3f3;padding:0 .2em;word-break:break-word}
table.values td:first-child{width:14em}
"""


def pyplot() -> Any:
    """matplotlib.pyplot on the non-interactive Agg backend with the reports' figure style."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 110, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.grid": True, "grid.alpha": 0.3, "font.size": 9})
    return plt


def fmt_number(x: object, digits: int = 3, *, yes: str = "yes", no: str = "no") -> str:
    """A compact number: ``digits`` decimals, scientific when tiny or huge; booleans as ``yes`` / ``no``
    (``posenc.lab.i18n.fmt_number`` passes them in the reader's language)."""
    if x is None:
        return "—"
    if isinstance(x, bool):
        return yes if x else no
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        if x == 0:
            return "0"
        if abs(x) < 1e-3 or abs(x) >= 1e5:
            return f"{x:.1e}"
        return f"{x:.{digits}f}" if abs(x) < 100 else f"{x:.1f}"
    return str(x)
