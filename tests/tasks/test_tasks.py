"""Task generators: exact lengths, determinism, answers checked by plain Python."""

from __future__ import annotations

import pytest
import torch

from posenc.tasks import SPECIALS, Vocab, build_task, task_names
from posenc.tasks.scan import by_length, commands


@pytest.mark.parametrize("name", ["copy", "reverse", "sort", "addition", "scan"])
def test_lengths_are_exact_and_draws_are_deterministic(name, seed):
    task = build_task(name)
    lengths = [n for n in range(1, 30) if name != "scan" or n in by_length()]
    first = task.examples(lengths, torch.Generator().manual_seed(seed))
    again = task.examples(lengths, torch.Generator().manual_seed(seed))
    assert first == again
    vocab = task.vocab()
    for n, ex in zip(lengths, first):
        assert ex.length == n
        vocab.encode(ex.source + ex.target)  # every token is in the task's vocabulary
        if name in ("copy", "reverse", "sort"):
            assert len(ex.source) == len(ex.target) == n
        elif name == "addition":
            a, b = "".join(ex.source).split("+")
            assert len(a) == len(b) == n and (n == 1 or (a[0] != "0" and b[0] != "0"))
        else:
            assert len(ex.target) == n


def test_answers_match_python(gen):
    letters = build_task("copy").symbols()
    for name, reference in [("copy", list), ("reverse", lambda s: list(reversed(s))), ("sort", sorted)]:
        task = build_task(name)
        for ex in task.examples([int(n) for n in torch.randint(1, 40, (50,), generator=gen)], gen):
            assert list(ex.target) == reference(list(ex.source))
            assert set(ex.source) <= set(letters)
    for ex in build_task("addition").examples(list(range(1, 25)) * 3, gen):
        a, b = "".join(ex.source).split("+")
        assert int("".join(ex.target)) == int(a) + int(b)


def test_symbol_draws_cover_the_alphabet(gen):
    ex = build_task("sort", num_symbols=4).sample(400, gen)
    counts = [ex.source.count(c) for c in "abcd"]
    assert min(counts) > 60  # ~100 each; a biased draw would starve a letter


def test_scan_grammar_matches_the_paper():
    cmds = commands()
    assert len(cmds) == 20_910 == len({c for c, _ in cmds})  # Lake & Baroni (2018): 20,910 commands
    buckets = by_length()
    assert min(buckets) == 1 and max(buckets) == 48
    assert sum(len(v) for n, v in buckets.items() if n <= 22) == 16_990  # SCAN length split: 16,990 train
    table = dict(cmds)
    assert table[("jump",)] == ("JUMP",)
    assert table[("turn", "left", "twice")] == ("LTURN", "LTURN")
    assert table[("walk", "opposite", "right")] == ("RTURN", "RTURN", "WALK")
    assert table[("look", "around", "left")] == ("LTURN", "LOOK") * 4
    assert table[("run", "twice", "after", "jump", "right")] == ("RTURN", "JUMP", "RUN", "RUN")
    assert table[("jump", "thrice", "and", "turn", "around", "right")] == ("JUMP",) * 3 + ("RTURN",) * 4


def test_bad_names_and_lengths_are_clear_errors(gen):
    with pytest.raises(ValueError, match="unknown task 'nope'.*copy"):
        build_task("nope")
    assert task_names() == ["copy", "reverse", "sort", "addition", "scan"]
    with pytest.raises(ValueError, match=r"lengths 1\.\.∞, got 0"):
        build_task("copy").sample(0, gen)
    with pytest.raises(ValueError, match="no command with 23 actions"):
        build_task("scan").sample(23, gen)
    with pytest.raises(ValueError, match=r"1\.\.48, got 49"):
        build_task("scan").sample(49, gen)
    with pytest.raises(ValueError, match="num_symbols"):
        build_task("copy", num_symbols=30)
    with pytest.raises(ValueError, match="collide"):
        Vocab(["a", SPECIALS[0]])


@pytest.mark.parametrize("name", ["copy", "addition", "scan"])
def test_size_bound_holds_and_is_reached(name, gen):
    task = build_task(name)
    for n in [1, 2, 5, 8, 22]:
        src_max, tgt_max = task.size_bound(n)
        exs = task.examples([n] * 300, gen)
        assert max(len(e.source) for e in exs) <= src_max and max(len(e.target) for e in exs) <= tgt_max
        if name != "scan":  # (SCAN's longest command of a length is rare; its bound is checked by enumeration)
            assert max(len(e.source) for e in exs) == src_max
    assert build_task("scan").size_bound(48) == (max(len(c) for c, a in commands() if len(a) == 48), 48)


@pytest.mark.parametrize("operand_order", ["msd", "lsd"])
@pytest.mark.parametrize("answer_order", ["msd", "lsd"])
def test_addition_digit_orders(answer_order, operand_order, gen):
    """Each order writes the same numbers, reversed where asked; the operands drawn do not change."""
    lengths = [int(n) for n in torch.randint(1, 12, (60,), generator=gen)]
    seed = int(torch.randint(0, 2**31, (1,), generator=gen))
    plain = build_task("addition").examples(lengths, torch.Generator().manual_seed(seed))
    task = build_task("addition", answer_order=answer_order, operand_order=operand_order)
    ordered = task.examples(lengths, torch.Generator().manual_seed(seed))

    def read(digits, order):  # the number a digit string means, read independently of the task
        return int("".join(digits if order == "msd" else reversed(digits)))

    for p, o in zip(plain, ordered):
        a, b = "".join(o.source).split("+")
        assert len(a) == len(b) == o.length
        assert read(o.target, answer_order) == read(a, operand_order) + read(b, operand_order)
        assert (read(a, operand_order), read(b, operand_order)) == tuple(map(int, "".join(p.source).split("+")))
    assert task.describe()["answer_order"] == answer_order and task.options()["operand_order"] == operand_order
    assert build_task("addition").options() == {"answer_order": "msd", "operand_order": "msd"}


def test_bad_task_options_name_the_valid_ones():
    with pytest.raises(ValueError, match="answer_order must be one of msd, lsd, got 'reversed'"):
        build_task("addition", answer_order="reversed")
    with pytest.raises(ValueError, match="operand_order must be one of msd, lsd, got 1"):
        build_task("addition", operand_order=1)
    with pytest.raises(ValueError, match="task 'copy' has no option 'answer_order'; its options: num_symbols"):
        build_task("copy", answer_order="lsd")
    with pytest.raises(ValueError, match="task 'scan' has no option 'x'; its options: none"):
        build_task("scan", x=1)
