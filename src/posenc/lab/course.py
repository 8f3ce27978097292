"""The course companion: the lab's claims in the order of the four source articles, for ``notebooks/``.

    >>> from posenc.lab import course
    >>> f = course.claim("sinusoid-norm")             # run at the articles' settings: d 64, L 512, base 10000, seed 0
    >>> abs(f.values["norm"] - (64 / 2) ** 0.5) < 1e-9  # √(d/2), measured
    True
    >>> course.show(f, lang="en")                      # doctest: +ELLIPSIS
    ■ sinusoid-norm — Every sinusoid row has norm √(d/2) · holds
    ...
    >>> course.try_this("shift-is-linear", length=64, lang="en")  # doctest: +ELLIPSIS
    ■ shift-is-linear — ... · does NOT hold
    ...

Nothing here measures anything. ``claim`` runs a registered experiment (``posenc.lab.experiments.run_lab``);
``render`` writes its plain data with the report's own words (``report.headline``, ``report.claim_text``) and
ends with the ``posenc lab`` command that prints the same numbers — ``tests/notebooks`` runs that command and
checks that the notebook printed exactly what the command's JSON renders to. ``plot`` draws the report's own
figures (``report.FIGURES``) inline.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from posenc.lab.core import Finding, LabConfig
from posenc.lab.i18n import check_lang, default_lang, ui

__all__ = ["CHAPTERS", "Chapter", "WALL_CLOCK", "chapter", "claim", "command", "language", "plot", "properties",
           "render", "settings", "show", "try_this"]


@dataclass(frozen=True, kw_only=True)
class Chapter:
    """One source article: its notebook (the English edition; notebooks/ko holds the Korean one of the same name),
    its claims in the article's order."""

    article: str
    notebook: str
    title_en: str
    title_ko: str
    claims: tuple[str, ...]

    def title(self, lang: str) -> str:
        return self.title_ko if check_lang(lang) == "ko" else self.title_en


#: The four articles in their own order; every lab claim belongs to exactly one (tests/notebooks checks it).
#: The lab files articles 001 and 002 together (``Finding.article == "002"``); here they are apart: 001 opens
#: with what position breaks (permutation) and ends with the decoder's mask, 002 is d2l's section 11.6.
CHAPTERS: dict[str, Chapter] = {c.article: c for c in (
    Chapter(article="000", notebook="notebooks/en/01-order-into-attention.ipynb",
            title_en="How a positional encoding puts order into attention",
            title_ko="위치 인코딩은 순서를 어떻게 집어넣나",
            claims=("naive-position", "sinusoid-norm", "distance-only", "not-monotonic", "shift-is-linear",
                    "beyond-training-length", "position-vs-content")),
    Chapter(article="001", notebook="notebooks/en/02-what-position-breaks.ipynb",
            title_en="Permutation, the positional encoding, encoder and decoder",
            title_ko="순열, 위치 인코딩, 인코더와 디코더",
            claims=("permutation", "encoder-decoder-causal")),
    Chapter(article="002", notebook="notebooks/en/03-relative-positions.ipynb",
            title_en="Self-attention and positional encoding (d2l 11.6): relative positions and a shift",
            title_ko="셀프 어텐션과 위치 인코딩 (d2l 11.6): 상대 위치와 이동",
            claims=("multihead-shapes", "complexity", "pe-module", "exercises-depth", "exercises-learned",
                    "exercises-relative")),
    Chapter(article="003", notebook="notebooks/en/04-ids-vectors-scores.ipynb",
            title_en="Ids become vectors, vectors become scores: embeddings, tying and √d",
            title_ko="번호가 벡터가 되고, 벡터가 다시 점수가 된다: 임베딩, 묶기, √d",
            claims=("lookup-is-matmul", "table-size", "tying", "self-score", "cosine-vs-dot", "sqrt-d",
                    "no-context")),
)}

#: Values that are wall-clock times: they differ on every run and machine, so ``render`` leaves them out
#: (the figure shows them). Every other value is a deterministic function of the settings.
WALL_CLOCK: dict[str, tuple[str, ...]] = {"complexity": ("milliseconds",)}

#: The settings a "try this" cell may change (``LabConfig``'s fields).
KNOBS = tuple(f.name for f in fields(LabConfig))

_cache: dict[tuple[str, LabConfig], Finding] = {}


def language() -> str:
    """The output language when a notebook does not set one: the locale's, as ``posenc lab`` decides."""
    return default_lang()


def chapter(article: str) -> Chapter:
    """The chapter of ``article`` ("000" … "003"); another value raises with the valid list."""
    if article not in CHAPTERS:
        raise ValueError(f"no chapter for article {article!r}; the articles are {', '.join(CHAPTERS)}")
    return CHAPTERS[article]


def settings(**change: Any) -> LabConfig:
    """The articles' settings (``LabConfig()``) with ``change`` applied; an unknown knob raises naming the four."""
    unknown = sorted(set(change) - set(KNOBS))
    if unknown:
        raise ValueError(f"unknown setting(s) {unknown}; a lab run has {', '.join(KNOBS)}")
    return LabConfig(**change)


def claim(exp_id: str, **change: Any) -> Finding:
    """Run experiment ``exp_id`` at the articles' settings with ``change`` applied (each run once, then kept)."""
    from posenc.lab.experiments import run_lab

    cfg = settings(**change)
    key = (exp_id, cfg)
    if key not in _cache:
        _cache[key] = run_lab(cfg, only=[exp_id])[0]
    return _cache[key]


def _number(x: float) -> str:
    """``x`` as a flag value that parses back to exactly ``x``."""
    short = f"{x:g}"
    return short if float(short) == x else repr(x)


def command(exp_id: str, cfg: LabConfig) -> str:
    """The ``posenc lab`` command that prints the same numbers as JSON."""
    return (f"posenc lab --only {exp_id} --dim {cfg.dim} --length {cfg.length} --base {_number(cfg.base)} "
            f"--seed {cfg.seed} --json - --out -")


def _value(v: Any, lang: str, limit: int = 8) -> str:
    """One value as printed: floats to 6 significant digits, lists past ``limit`` items cut with a count."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:.6g}"
    if v is None:
        return "null"
    if isinstance(v, (list, tuple)):
        items = [_value(x, lang, limit) for x in v[:limit]]
        if len(v) > limit:
            items.append(ui("more", lang, n=len(v) - limit))
        return "[" + ", ".join(items) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_value(x, lang, limit)}" for k, x in v.items()) + "}"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    return str(v)


def _as_finding(record: Finding | dict[str, Any]) -> Finding:
    if isinstance(record, Finding):
        return record
    return Finding(id=record["id"], claim=record["claim"], params=record["params"], values=record["values"],
                   holds=record["holds"])


def verdict(holds: bool, lang: str) -> str:
    return ui("verdict_yes" if holds else "verdict_no", lang)


def render(record: Finding | dict[str, Any], cfg: LabConfig | dict[str, Any], lang: str) -> str:
    """The text a notebook prints for one finding — or for one record of ``posenc lab --json -`` with its
    ``config``, which renders to the same text when the numbers are the same."""
    from posenc.lab.report import claim_text, headline, title_text

    check_lang(lang)
    f = _as_finding(record)
    cfg = cfg if isinstance(cfg, LabConfig) else LabConfig(**cfg)
    skipped = WALL_CLOCK.get(f.id, ())
    lines = [f"■ {f.id} — {title_text(f.id, lang)} · {verdict(f.holds, lang)}",
             f"  {ui('claim', lang)}: {claim_text(f, lang)}",
             f"  {ui('measured', lang)}: {headline(f, lang)}",
             f"  {ui('values', lang)}:"]
    lines.extend(f"    {key} = {_value(v, lang)}" for key, v in f.values.items() if key not in skipped)
    if skipped:
        lines.append(f"    ({ui('wall_clock', lang, keys=', '.join(skipped))})")
    lines.append(f"  {ui('command', lang)} {command(f.id, cfg)}")
    return "\n".join(lines)


def show(finding: Finding, lang: str | None = None) -> None:
    """Print ``render`` of a finding made by ``claim`` (its settings are those it was run with)."""
    print(render(finding, _settings_of(finding), lang or language()))


def _settings_of(finding: Finding) -> LabConfig:
    for (exp_id, cfg), f in _cache.items():
        if f is finding:
            return cfg
    raise ValueError(f"finding {finding.id!r} was not made by course.claim, so its settings are unknown; "
                     "run it with course.claim(id, ...) or use course.render(finding, cfg, lang)")


def try_this(exp_id: str, *, lang: str | None = None, **change: Any) -> None:
    """Run ``exp_id`` with one setting changed, print it, and say whether the claim still holds."""
    if not change:
        raise ValueError(f"try_this({exp_id!r}) needs a setting to change: one of {', '.join(KNOBS)}, "
                         "e.g. try_this(id, dim=128)")
    lang = lang or language()
    before, after = claim(exp_id), claim(exp_id, **change)
    show(after, lang)
    what = ", ".join(f"{k}={v}" for k, v in change.items())
    print("  → " + ui("try_same", lang, before=verdict(before.holds, lang), change=what,
                      after=ui("try_unchanged", lang) if before.holds and after.holds else verdict(after.holds, lang)))


def properties(names: Sequence[str], lang: str | None = None, **change: Any) -> None:
    """Print the property-table rows (``posenc lab properties``) of the registered schemes ``names``."""
    from posenc.lab.experiments import lab_scheme
    from posenc.lab.measures import scheme_properties
    from posenc.lab.report import property_text
    from posenc.positions import canonical

    import torch

    lang = lang or language()
    cfg = settings(**change)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors, as in run_lab: threads only oversubscribe
    try:
        rows = [scheme_properties(lab_scheme(canonical(n), cfg), length=cfg.length) for n in names]
    finally:
        torch.set_num_threads(threads)
    print(property_text(rows, lang=lang))
    print(f"  {ui('command', lang)} posenc lab properties --dim {cfg.dim} --length {cfg.length} "
          f"--base {_number(cfg.base)} --seed {cfg.seed} --json - --out -")


def figures(findings: Iterable[Finding], out: str | Path) -> list[Path]:
    """The report's figures of ``findings`` as PNG files in ``out`` (what ``posenc lab`` puts in its report)."""
    from posenc.lab.report import FIGURES, fig_exercises

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    by_id = {f.id: f for f in findings}
    names = [name for f in by_id.values() if f.id in FIGURES for name in FIGURES[f.id](f, out)]
    if {"exercises-learned", "exercises-relative"} & set(by_id):
        names += fig_exercises(by_id, out)
    return [out / n for n in names]


def plot(*findings: Finding) -> None:
    """Show the report's figures of ``findings`` inline in a notebook (IPython's display)."""
    from posenc.checks import require

    require("IPython", "showing figures in a notebook", "notebooks")
    from IPython.display import Image, display

    from posenc.lab.report import FIGURES

    with tempfile.TemporaryDirectory(prefix="posenc-course-") as tmp:
        paths = figures(findings, tmp)
        if not paths:
            ids = ", ".join(f.id for f in findings)
            raise ValueError(f"no figure for {ids}; the report draws figures for: {', '.join(FIGURES)}, "
                             "exercises-learned")
        for path in paths:
            display(Image(data=path.read_bytes(), format="png"))
