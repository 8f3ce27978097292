"""The cells a chapter source is written in: prose in both languages, code shared by both.

A chapter (``chNN_*.py`` beside this file) is a list of cells; ``scripts/build_notebooks.py`` turns it into
``notebooks/ko/SLUG.ipynb`` and ``notebooks/en/SLUG.ipynb``. Code is the same in both notebooks except for
``«한국어|English»`` spans (plot labels, printed words), which each notebook resolves to its own language.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from posenc.lab.book import EXERCISES

SPAN = re.compile(r"«([^|«»]*)\|([^«»]*)»")


@dataclass(frozen=True)
class Cell:
    kind: str  # "markdown" | "code"
    ko: str
    en: str

    def text(self, lang: str) -> str:
        return self.ko if lang == "ko" else self.en


def md(ko: str = "", en: str = "", *, both: str | None = None) -> Cell:
    return Cell("markdown", both if both is not None else ko, both if both is not None else en)


def code(source: str) -> Cell:
    source = source.strip("\n")
    return Cell("code", SPAN.sub(lambda m: m.group(1), source), SPAN.sub(lambda m: m.group(2), source))


def setup_cells(article: str) -> list[Cell]:
    """The two cells every chapter opens with: how to read it, and the set-up code."""
    return [
        md(ko=f"""이 노트북은 글 {article} 의 주장을 **코드로** 보여 준다. 주장마다 먼저 글의 식을 PyTorch 몇 줄로 직접 쓰고,
같은 것을 posenc 의 공개 부품(`posenc.positions`, `posenc.embedding`, `posenc.attention`, …)으로 다시 만든 뒤,
둘이 같은지 `torch.testing.assert_close` 로 확인한다. 잰 숫자는 실험실(`posenc lab`)이 기록하는 숫자와 같아야 하므로,
마지막에 `course.show(course.claim(…))` 가 실험실의 결과와 같은 숫자를 JSON 으로 내는 `posenc lab` 명령을 보여 준다.
설정은 글과 같은 d = 64, L = 512, base 10000, seed 0 이다. **해 보기** 셀은 설정 하나를 바꾸고, 끝의 **연습문제**는
답을 셀에 쓰면 검사 셀이 채점한다. 코드는 마음껏 고쳐서 다시 실행해 보라. 같은 노트북의 영어판은 `notebooks/en/` 에 있다.""",
           en=f"""This notebook shows the claims of article {article} **as code**. For each claim the article's formula is first
written out in a few lines of PyTorch, then the same thing is built from posenc's public parts (`posenc.positions`,
`posenc.embedding`, `posenc.attention`, …), and `torch.testing.assert_close` checks that the two agree. The numbers
measured must be the ones the lab (`posenc lab`) records, so `course.show(course.claim(…))` ends each section with the lab's
result and the `posenc lab` command that prints the same numbers as JSON. The settings are the articles': d = 64, L = 512,
base 10000, seed 0. The **try this** cells change one setting; the **exercises** at the end are checked by the cell below
each answer. Change any code and run it again. The Korean edition of this notebook is in `notebooks/ko/`."""),
        code("""import math

import matplotlib.pyplot as plt
import torch

from posenc.lab import book, course

LANG = "«ko|en»"  # «이 노트북의 언어: 출력과 그림이 이 언어로 나온다|this notebook's language: output and figures speak it»
book.setup(LANG)  # «그림에 한글 글꼴 (없으면 오류: 네모 글자로 대신하지 않는다)|figures: a Korean font where needed»
_ = torch.manual_seed(0)"""),
    ]


def exercise(exercise_id: str, *, ko: str, en: str, stub: str = "answer = ...") -> list[Cell]:
    """An exercise: the question, a folded reference solution, the answer cell and the check cell."""
    solution = EXERCISES[exercise_id].solution
    fold = "<details><summary>{}</summary>\n\n```python\n" + solution + "\n```\n\n</details>"
    return [
        md(ko=f"**연습문제 {exercise_id}** — {ko}\n\n" + fold.format("풀이 보기"),
           en=f"**Exercise {exercise_id}** — {en}\n\n" + fold.format("Show a solution")),
        code(stub),
        code(f'book.check("{exercise_id}", answer, LANG);'),
    ]
