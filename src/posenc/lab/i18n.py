"""The lab's two languages, English and Korean: which one a run speaks, and the words of its frame.

The rule is the explorer's (``posenc/explore/static/app.js``): an explicit choice wins, otherwise the
reader's own language, and English for anything that is not Korean.

* Terminal (``posenc lab``): ``--lang en|ko``; without it the locale — the first of ``LC_ALL``,
  ``LC_MESSAGES``, ``LANG`` that is set — where ``ko…`` (``ko_KR.UTF-8``) means Korean.
* HTML report (``index.html``): ``?lang=en|ko`` in its address, then the ``--lang`` it was written with,
  then the reader's last choice of the page's language button (remembered in the browser), then the
  browser's language (``ko…`` → Korean).

The per-experiment texts (titles, claims, headlines) in Korean live in ``posenc.lab.texts_ko``; the English
ones are the experiments' own (``Finding.claim``, ``Entry.title``, ``report.HEADLINES``).
"""

from __future__ import annotations

import os
import unicodedata
from collections.abc import Mapping

from posenc import report_style

#: The languages the lab writes, English first (the fallback).
LANGS = ("en", "ko")

#: The environment variables that name the terminal's language, in the order the C library reads them.
LOCALE_VARIABLES = ("LC_ALL", "LC_MESSAGES", "LANG")


def check_lang(value: str, flag: str = "--lang") -> str:
    """``value`` if it is a language the lab writes; otherwise a ValueError naming it and the fix."""
    if value in LANGS:
        return value
    raise ValueError(f"{flag} must be 'en' (English) or 'ko' (Korean), got {value!r}; leave it out to follow "
                     "the locale (LANG=ko_KR.UTF-8 → Korean, anything else → English)")


def default_lang(environ: Mapping[str, str] | None = None) -> str:
    """The terminal's language when none was asked for: Korean where the locale is Korean, else English."""
    env = os.environ if environ is None else environ
    for name in LOCALE_VARIABLES:
        value = env.get(name, "")
        if value:
            return "ko" if value.lower().startswith("ko") else "en"
    return "en"


def resolve_lang(asked: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``asked`` (checked) when given, otherwise ``default_lang``."""
    return check_lang(asked) if asked is not None else default_lang(environ)


# -- the frame's words -------------------------------------------------------------------------------------

UI: dict[str, dict[str, str]] = {
    "en": {
        "experiment": "experiment", "holds": "holds", "sec": "sec", "measured": "measured", "claim": "claim",
        "yes": "yes", "no": "no", "mark_yes": "yes", "mark_no": "NO",
        "held": "{held}/{total} claims hold",
        "verdict_yes": "holds", "verdict_no": "does NOT hold",
        "col_name": "scheme", "col_family": "family", "col_norm_constant": "norm const",
        "col_translation_invariant": "i−j only", "col_monotone_decay": "decays", "col_symmetric": "symmetric",
        "col_shift_relative": "shift resid", "col_defined_beyond": "beyond L",
        "error": "error",
        "lang_button": "한국어", "lang_label": "Language",
        "title": "posenc lab",
        "sub": "{held} of {total} claims hold · d = {dim}, L = {length}, base = {base}, seed = {seed} · every number "
               "below was computed by the library's own modules in this run; full data in {results}",
        "properties_title": "Every registered scheme, measured",
        "properties_note": "From the similarity each scheme induces between positions alone (positions 0…{last}; "
                           "a learned table on the rows it has). Bias schemes are measured per head. “decays” is "
                           "blank where the similarity is not a function of distance; “shift resid” is "
                           "‖T[p+k] − M_k·T[p]‖ ÷ ‖T[p+k]‖ for the best single map M_k (worst over k = 1, 2, 5, "
                           "17, 50), blank where a scheme has no position vectors.",
        "meta": "article {article} · {seconds} s · parameters:",
        "figures_note": "Figure labels are in English; the numbers are those of the table above.",
        "value": "value",
        "values": "values",
        "command": "same numbers:",
        "wall_clock": "{keys}: wall-clock times, different on every run and machine — not printed (see the figure)",
        "more": "… {n} more",
        "try_same": "at the articles' settings it {before}; with {change} it {after}",
        "try_unchanged": "still holds",
    },
    "ko": {
        "experiment": "실험", "holds": "성립", "sec": "초", "measured": "측정값", "claim": "주장",
        "yes": "예", "no": "아니오", "mark_yes": "예", "mark_no": "아니오",
        "held": "주장 {total}개 중 {held}개 성립",
        "verdict_yes": "성립", "verdict_no": "성립하지 않음",
        "col_name": "방식", "col_family": "계열", "col_norm_constant": "노름 일정",
        "col_translation_invariant": "i−j 만", "col_monotone_decay": "감소", "col_symmetric": "대칭",
        "col_shift_relative": "이동 잔차", "col_defined_beyond": "L 너머",
        "error": "오류",
        "lang_button": "English", "lang_label": "언어",
        "title": "posenc 실험실",
        "sub": "주장 {total}개 중 {held}개 성립 · d = {dim}, L = {length}, base = {base}, seed = {seed} · 아래 숫자는 "
               "모두 이번 실행에서 라이브러리 자신의 모듈이 계산한 값이다. 전체 데이터: {results}",
        "properties_title": "등록된 모든 방식을 잰 결과",
        "properties_note": "각 방식이 위치들 사이에 만드는 유사도만으로 잰다 (위치 0…{last}; 학습형 표는 가진 행까지). "
                           "바이어스 방식은 헤드마다 잰다. 유사도가 거리만의 함수가 아니면 “감소” 칸은 비운다. "
                           "“이동 잔차” 는 가장 잘 맞는 사상 하나 M_k 에 대한 ‖T[p+k] − M_k·T[p]‖ ÷ ‖T[p+k]‖ "
                           "(k = 1, 2, 5, 17, 50 중 최악)이고, 위치 벡터가 없는 방식에서는 비운다.",
        "meta": "글 {article} · {seconds} 초 · 설정:",
        "figures_note": "그림 속 글자(축 이름, 범례)는 영어로 둔다. 숫자는 위 표와 같다.",
        "value": "값",
        "values": "값",
        "command": "같은 숫자:",
        "wall_clock": "{keys}: 벽시계 시간이라 실행·기계마다 다르다 — 출력하지 않는다 (그림 참고)",
        "more": "… {n}개 더",
        "try_same": "글의 설정에서는 {before}, {change} 에서는 {after}",
        "try_unchanged": "여전히 성립",
    },
}


def ui(key: str, lang: str, **fields: object) -> str:
    """The frame's word ``key`` in ``lang``, with ``{fields}`` filled in."""
    text = UI[check_lang(lang)][key]
    return text.format(**fields) if fields else text


# -- numbers -----------------------------------------------------------------------------------------------


def fmt_number(x: object, digits: int = 3, lang: str = "en") -> str:
    """A compact number (``posenc.report_style.fmt_number``: every report's format); booleans as yes/no in
    ``lang``."""
    return report_style.fmt_number(x, digits, yes=ui("yes", lang), no=ui("no", lang))


# -- terminal width of mixed Korean / Latin text ------------------------------------------------------------


def display_width(text: str) -> int:
    """Columns ``text`` takes in a terminal: Hangul and other wide characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def pad(text: str, width: int) -> str:
    """``text`` left-aligned in ``width`` terminal columns."""
    return text + " " * max(width - display_width(text), 0)


def wrap(text: str, width: int) -> list[str]:
    """Greedy word wrap by terminal columns (``textwrap`` counts characters, which Korean overflows)."""
    lines: list[str] = []
    line = ""
    for word in text.split():
        candidate = f"{line} {word}" if line else word
        if line and display_width(candidate) > width:
            lines.append(line)
            line = word
        else:
            line = candidate
    if line:
        lines.append(line)
    return lines or [""]
