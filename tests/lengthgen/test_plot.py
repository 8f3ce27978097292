"""The accuracy plot: one colour per scheme in every panel, whatever the scheme's rank in each task."""

from __future__ import annotations

import random

from posenc.lengthgen.report import plot, scheme_colors


def _summary(orders: dict[str, list[str]]) -> dict:
    def scheme(i: int) -> dict:
        by = {str(n): {"mean": max(0.0, 1 - 0.1 * n * (i + 1)), "ci": [0.0, 1.0]} for n in range(1, 7)}
        return {"by_length": by, "learned": i % 3 != 2}

    return {task: {"order": order, "train_lengths": [1, 3], "length_unit": "symbols",
                   "schemes": {s: scheme(i) for i, s in enumerate(order)}} for task, order in orders.items()}


def test_each_scheme_keeps_its_colour_across_tasks_ranked_differently(tmp_path):
    names = [f"s{i}" for i in range(random.randint(3, 12))]
    orders = {f"task{k}": random.sample(names, len(names)) for k in range(random.randint(2, 5))}
    colors = scheme_colors(_summary(orders))
    assert set(colors) == set(names)
    assert len(set(colors.values())) == len(names)  # distinct up to 20 schemes
    # the colour depends on the scheme only: reordering the tasks' ranks leaves each scheme's colour
    first = next(iter(orders.values()))
    assert scheme_colors(_summary({"only": first})) == {s: colors[s] for s in first}
    plot(_summary(orders), tmp_path / "accuracy.png")
    assert (tmp_path / "accuracy.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
