"""The course book's helpers (``notebooks/ko``, ``notebooks/en``): figures in the notebook's language, and the
exercises' hidden checks.

    >>> from posenc.lab import book
    >>> book.check("02.pairs", 55, lang="en")
    ✓ 02.pairs — correct
    True
    >>> book.check("02.pairs", ..., lang="en")  # not answered yet: says so, raises nothing
    … 02.pairs — write your answer in the cell above, then run this cell again
    False

``setup(lang)`` makes matplotlib draw Korean: the NanumGothic font shipped by the PyPI package
``koreanize-matplotlib`` (the ``notebooks`` extra; its file is registered without importing the package), or a
system NanumGothic / Noto Sans CJK (Debian ``fonts-nanum``). With none it raises — a figure never falls back
silently to empty boxes. ``show(fig)`` puts a figure inline as PNG bytes without a timestamp, so an executed
notebook is the same file every time it is regenerated.

``check(id, answer, lang)`` runs an exercise's hidden tests on a learner's answer: a number, or a function the
exercise asks for. A right answer prints ✓; a wrong one raises ``AssertionError`` saying what was wrong, in the
notebook's language; ``...`` (the placeholder the notebook ships with) prints what to do. Every exercise has a
``solution`` (source code, shown folded in the notebook) that passes and a ``wrong`` answer that fails — the tests
check both.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from posenc.lab.i18n import check_lang

__all__ = ["EXERCISES", "Exercise", "check", "korean_font", "setup", "show", "solution_value"]

#: Korean-capable fonts looked for on the system when koreanize-matplotlib's file is absent, best first.
SYSTEM_KOREAN = ("NanumGothic", "Noto Sans CJK KR", "Noto Sans KR", "UnDotum")


def korean_font() -> tuple[str, str]:
    """(family name, file) of the Korean font matplotlib will use, registering it with the font manager.

    Raises:
        RuntimeError: no Korean font at all, with the two ways to get one.
    """
    from matplotlib import font_manager

    spec = find_spec("koreanize_matplotlib")  # the package's font file, without running its import-time code
    if spec is not None and spec.submodule_search_locations:
        ttf = Path(next(iter(spec.submodule_search_locations))) / "fonts" / "NanumGothic.ttf"
        if ttf.is_file():
            font_manager.fontManager.addfont(str(ttf))
            return font_manager.FontProperties(fname=str(ttf)).get_name(), str(ttf)
    for entry in font_manager.fontManager.ttflist:
        if entry.name in SYSTEM_KOREAN:
            return entry.name, entry.fname
    raise RuntimeError("no Korean font for matplotlib: pip install 'posenc[notebooks]' (koreanize-matplotlib ships "
                       "NanumGothic) or apt-get install fonts-nanum")


def setup(lang: str) -> None:
    """Set matplotlib up for a notebook in ``lang``: a Korean font where the language is Korean, small figures."""
    import matplotlib

    check_lang(lang)
    matplotlib.rcParams.update({"figure.figsize": (6.4, 3.2), "figure.dpi": 80, "axes.unicode_minus": False,
                                "svg.hashsalt": "posenc"})
    if lang == "ko":
        name, _ = korean_font()
        matplotlib.rcParams["font.family"] = [name, "DejaVu Sans"]


def show(fig: Any) -> None:
    """Display ``fig`` inline as PNG (no timestamp or software tag: the same bytes on every run) and close it."""
    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    display(Image(data=buf.getvalue(), format="png"))


# ---------------------------------------------------------------------------------------------------- exercises

@dataclass(frozen=True, kw_only=True)
class Exercise:
    """One exercise: its hidden test (``test(answer) -> None``, raising AssertionError with a message per
    language), the reference ``solution`` (Python source that leaves ``answer`` defined) and a ``wrong`` one."""

    id: str
    test: Callable[[Any, str], None]
    solution: str
    wrong: str


def solution_value(source: str) -> Any:
    """The ``answer`` that the source of a solution (or of a wrong answer) defines."""
    import torch

    scope: dict[str, Any] = {"torch": torch, "math": math}
    exec(source, scope)  # noqa: S102 — the registry's own solution text, shown to the learner as is
    return scope["answer"]


def _say(lang: str, ko: str, en: str) -> str:
    return ko if lang == "ko" else en


def _number(answer: Any, expected: float, lang: str, *, rel: float = 1e-4) -> None:
    try:
        value = float(answer)
    except (TypeError, ValueError):
        raise AssertionError(_say(lang, f"숫자 하나를 답하세요 (받은 것: {answer!r})",
                                  f"answer with one number (got {answer!r})")) from None
    if not math.isclose(value, expected, rel_tol=rel, abs_tol=1e-9):
        raise AssertionError(_say(lang, f"{value:g} 은(는) 아닙니다. 위의 식을 다시 보세요.",
                                  f"{value:g} is not it. Look at the formula above again."))


def _function(answer: Any, lang: str) -> Callable[..., Any]:
    if not callable(answer):
        raise AssertionError(_say(lang, "함수를 답하세요: answer = 여러분의_함수",
                                  "answer with a function: answer = your_function"))
    return answer


def _close(got: Any, want: Any, lang: str, case: str, *, atol: float = 1e-6) -> None:
    import torch

    if not isinstance(got, torch.Tensor):
        raise AssertionError(_say(lang, f"{case}: 텐서를 돌려줘야 합니다 (받은 것: {type(got).__name__})",
                                  f"{case}: return a tensor (got {type(got).__name__})"))
    if tuple(got.shape) != tuple(want.shape):
        raise AssertionError(_say(lang, f"{case}: 모양이 {tuple(got.shape)} 인데 {tuple(want.shape)} 이어야 합니다",
                                  f"{case}: shape {tuple(got.shape)}, expected {tuple(want.shape)}"))
    if want.dtype == torch.bool:
        ok = bool((got.to(torch.bool) == want).all())
        worst = "" if ok else str(int((got.to(torch.bool) != want).sum()))
    else:
        diff = (got.double() - want.double()).abs().max().item() if got.numel() else 0.0
        ok, worst = diff <= atol, f"{diff:.3g}"
    if not ok:
        raise AssertionError(_say(lang, f"{case}: 값이 다릅니다 (차이 {worst})", f"{case}: wrong values (off by {worst})"))


def _test_norm(answer: Any, lang: str) -> None:
    _number(answer, math.sqrt(256 / 2), lang)


def _test_sinusoid(answer: Any, lang: str) -> None:
    import torch

    from posenc import positions

    fn = _function(answer, lang)
    for length, dim, base in ((5, 8, 10000.0), (9, 12, 100.0)):
        want = positions.build("sinusoidal", dim=dim, num_heads=1, base=base).encode(torch.arange(length))
        _close(fn(length, dim, base), want, lang, f"sinusoid({length}, {dim}, {base:g})", atol=1e-5)


def _test_shift(answer: Any, lang: str) -> None:
    import torch

    from posenc import positions

    fn = _function(answer, lang)
    for k, dim in ((1, 8), (7, 16)):
        table = positions.build("sinusoidal", dim=dim, num_heads=1).encode(torch.arange(40))
        m = fn(k, dim, 10000.0)
        if not isinstance(m, torch.Tensor) or tuple(m.shape) != (dim, dim):
            raise AssertionError(_say(lang, f"shift_matrix({k}, {dim}): ({dim}, {dim}) 행렬이어야 합니다",
                                      f"shift_matrix({k}, {dim}): must be a ({dim}, {dim}) matrix"))
        _close(table[:-k] @ m.double().T, table[k:], lang, f"PE(i) @ shift_matrix({k}, {dim}).T = PE(i+{k})",
               atol=1e-6)


def _test_mask(answer: Any, lang: str) -> None:
    import torch

    fn = _function(answer, lang)
    for n in (1, 4, 7):
        _close(fn(n), torch.ones(n, n, dtype=torch.bool).tril(), lang, f"causal_mask({n})")


def _test_pairs(answer: Any, lang: str) -> None:
    _number(answer, 10 * 11 / 2, lang)


def _test_rope(answer: Any, lang: str) -> None:
    import torch

    from posenc import positions

    fn = _function(answer, lang)
    gen = torch.Generator().manual_seed(1)
    for length, dim in ((6, 8), (5, 16)):
        x = torch.randn(length, dim, generator=gen)
        pos = torch.arange(length) + 3
        want = positions.build("rope", dim=dim, num_heads=1).rotate_one(x, pos)
        _close(fn(x, pos, 10000.0), want, lang, f"rope(x {tuple(x.shape)}, positions 3…{length + 2})", atol=1e-5)


def _test_attention_params(answer: Any, lang: str) -> None:
    from posenc.attention import MultiHeadAttention

    _number(answer, sum(p.numel() for p in MultiHeadAttention(dim=64, num_heads=4).parameters()), lang, rel=0)


def _test_onehot(answer: Any, lang: str) -> None:
    import torch

    fn = _function(answer, lang)
    gen = torch.Generator().manual_seed(2)
    table = torch.randn(11, 5, generator=gen)
    ids = torch.tensor([[3, 0, 10], [3, 3, 7]])
    _close(fn(ids, table), table[ids], lang, "embed(ids (2, 3), table (11, 5))")


def _test_tied(answer: Any, lang: str) -> None:
    _number(answer, 32000 * 512, lang, rel=0)


def _test_scale(answer: Any, lang: str) -> None:
    _number(answer, 16.0, lang)


def _test_head(answer: Any, lang: str) -> None:
    import torch

    fn = _function(answer, lang)
    gen = torch.Generator().manual_seed(3)
    h, table = torch.randn(2, 4, 6, generator=gen), torch.randn(9, 6, generator=gen)
    _close(fn(h, table), h @ table.T, lang, "tied_logits(h (2, 4, 6), table (9, 6))", atol=1e-5)


def _test_head_params(answer: Any, lang: str) -> None:
    _number(answer, 0, lang, rel=0)


_SINUSOID = """def sinusoid(length, dim, base):
    pos = torch.arange(length, dtype=torch.float64)[:, None]
    freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    angle = pos * freq
    return torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # sin, cos, sin, cos, …

answer = sinusoid"""

_SHIFT = """def shift_matrix(k, dim, base):
    freq = base ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    m = torch.zeros(dim, dim, dtype=torch.float64)
    c, s = (k * freq).cos(), (k * freq).sin()
    m[0::2, 0::2] = torch.diag(c)   # sin(a + b) = sin a cos b + cos a sin b
    m[0::2, 1::2] = torch.diag(s)
    m[1::2, 0::2] = torch.diag(-s)  # cos(a + b) = cos a cos b − sin a sin b
    m[1::2, 1::2] = torch.diag(c)
    return m

answer = shift_matrix"""

_ROPE = """def rope(x, positions, base):
    half = x.shape[-1] // 2
    freq = base ** (-torch.arange(half, dtype=torch.float32) * 2 / x.shape[-1])
    angle = positions[:, None].float() * freq            # (T, half)
    a, b = x[..., :half], x[..., half:]                   # pair i is (i, i + half)
    return torch.cat([a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()], dim=-1)

answer = rope"""

#: Every exercise of the five notebooks, by id ("chapter.name").
EXERCISES: dict[str, Exercise] = {e.id: e for e in (
    Exercise(id="01.norm", test=_test_norm, solution="answer = math.sqrt(256 / 2)", wrong="answer = 16"),
    Exercise(id="01.sinusoid", test=_test_sinusoid, solution=_SINUSOID,
             wrong=_SINUSOID.replace("[angle.sin(), angle.cos()]", "[angle.cos(), angle.sin()]")),
    Exercise(id="01.shift", test=_test_shift, solution=_SHIFT, wrong=_SHIFT.replace("diag(-s)", "diag(s)")),
    Exercise(id="02.mask", test=_test_mask,
             solution="def causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).tril()\n\n"
                      "answer = causal_mask",
             wrong="def causal_mask(n):\n    return torch.ones(n, n, dtype=torch.bool).triu()\n\n"
                   "answer = causal_mask"),
    Exercise(id="02.pairs", test=_test_pairs, solution="answer = 10 * 11 // 2", wrong="answer = 10 * 10"),
    Exercise(id="03.rope", test=_test_rope, solution=_ROPE, wrong=_ROPE.replace("a * angle.sin() + b", "a * angle.sin() - b")),
    Exercise(id="03.params", test=_test_attention_params,
             solution="answer = 4 * (64 * 64 + 64)  # W_q, W_k, W_v, W_o, each with a bias", wrong="answer = 4 * 64 * 64"),
    Exercise(id="04.onehot", test=_test_onehot,
             solution="def embed(ids, table):\n"
                      "    one_hot = torch.nn.functional.one_hot(ids, table.shape[0]).to(table.dtype)\n"
                      "    return one_hot @ table\n\nanswer = embed",
             wrong="def embed(ids, table):\n    return table[ids.flip(-1)]\n\nanswer = embed"),
    Exercise(id="04.tied", test=_test_tied, solution="answer = 32000 * 512", wrong="answer = 2 * 32000 * 512"),
    Exercise(id="04.scale", test=_test_scale, solution="answer = math.sqrt(256)", wrong="answer = 256"),
    Exercise(id="05.head", test=_test_head,
             solution="def tied_logits(h, table):\n    return h @ table.T\n\nanswer = tied_logits",
             wrong="def tied_logits(h, table):\n    return h @ table[:, :h.shape[-1]].T.flip(0)\n\n"
                   "answer = tied_logits"),
    Exercise(id="05.head-params", test=_test_head_params, solution="answer = 0", wrong="answer = 14 * 32"),
)}


def check(exercise_id: str, answer: Any, lang: str = "en") -> bool:
    """Run the hidden tests of ``exercise_id`` on ``answer``: True and ✓ when it passes, AssertionError when not.

    ``...`` (the placeholder a notebook ships with) prints what to do and returns False.
    """
    check_lang(lang)
    if exercise_id not in EXERCISES:
        raise ValueError(f"no exercise {exercise_id!r}; the exercises are {', '.join(EXERCISES)}")
    if answer is ...:
        print(f"… {exercise_id} — " + _say(lang, "위 셀에 답을 쓰고 이 셀을 다시 실행하세요",
                                             "write your answer in the cell above, then run this cell again"))
        return False
    try:
        EXERCISES[exercise_id].test(answer, lang)
    except AssertionError as err:
        raise AssertionError(f"✗ {exercise_id} — {err}") from None
    print(f"✓ {exercise_id} — " + _say(lang, "맞았습니다", "correct"))
    return True
