"""From finished cells to the numbers of the report (plain data; no printing, no plotting).

Per task and scheme: which seeds passed the convergence gate, each cell's
accuracy with its Wilson interval, and — over the *learned* seeds only — the
mean accuracy by length and beyond the training lengths with bootstrap
intervals, a paired-bootstrap ranking, and the reading of the published claim.
A scheme none of whose seeds learned the task is listed as not learned and
takes no part in any beyond-range number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from posenc.lengthgen import stats

@dataclass(frozen=True)
class Claim:
    """A published length-generalisation claim, read as: every leader is ahead of every laggard beyond the
    training lengths (exact match, paired bootstrap over the learned seeds and the shared test examples).

    Args:
        source: who claims it, e.g. "Kazemnejad et al. (2023)".
        statement: what the paper measured, in a few words (its tasks are not necessarily these).
        leaders, laggards: scheme names of this benchmark.
    """

    source: str
    statement: str
    leaders: tuple[str, ...]
    laggards: tuple[str, ...]


#: Kazemnejad et al. (2023), Fig. 2/3: beyond the training length NoPE and T5's bias come out ahead
#: of ALiBi, RoPE and absolute (sinusoidal) positions. "learned" is the absolute table they left out.
KAZEMNEJAD = Claim("Kazemnejad et al. (2023)", "decoder-only models on copy, reverse, sort, addition, SCAN and "
                   "more: NoPE and T5's bias generalise beyond the training length best",
                   ("none", "t5"), ("alibi", "rope", "sinusoidal", "learned"))
#: The later schemes' own claims, each against the baselines its paper names.
CLAIMS = (
    KAZEMNEJAD,
    # Golovneva et al. (2024), "Contextual Position Encoding": CoPE solves selective copy, counting and
    # Flip-Flop, in and out of distribution, where absolute positions and RoPE fail
    Claim("Golovneva et al. (2024), CoPE", "selective copy, counting, Flip-Flop (out of distribution): CoPE "
          "ahead of absolute positions and RoPE", ("cope",), ("rope", "learned", "sinusoidal")),
    # Hua et al. (2024), "Fourier Position Embedding": more stable perplexity and needle accuracy than RoPE
    # and ALiBi beyond the training window
    Claim("Hua et al. (2024), FoPE", "language modelling and passkey beyond the training window: FoPE ahead of "
          "RoPE and ALiBi", ("fope",), ("rope", "alibi")),
    # Gopalakrishnan et al. (2025), "Decoupling the What and Where": PoPE extrapolates zero-shot where RoPE
    # degrades
    Claim("Gopalakrishnan et al. (2025), PoPE", "music, genome and language modelling at test lengths beyond "
          "training: PoPE ahead of RoPE", ("pope",), ("rope",)),
)


def _verdicts(hits: str) -> np.ndarray:
    return np.frombuffer(hits.encode(), dtype=np.uint8) - ord("0")


def cell_row(cell: dict[str, Any]) -> dict[str, Any]:
    """One cell's table row: gate outcome, in-range and beyond accuracy with Wilson intervals."""
    hi = cell["train_lengths"][1]
    row: dict[str, Any] = {"seed": cell["seed"], "learned": cell["learned"], "passed_at": cell["gate"]["passed_at"],
                           "steps": cell["steps"], "budget": cell["budget"], "gate": cell["gate"]["accuracy"],
                           "cpu_seconds": cell.get("cpu_seconds")}
    for part, keep in (("in_range", lambda n: n <= hi), ("beyond", lambda n: n > hi)):
        flat = "".join(v for n, v in cell["hits"].items() if keep(int(n)))
        k, n = flat.count("1"), len(flat)
        row[part] = k / n if n else math.nan
        row[f"{part}_ci"] = stats.wilson(k, n) if n else (math.nan, math.nan)
    return row


def _matrix(cells: Sequence[dict[str, Any]], lengths: Sequence[str]) -> np.ndarray:
    """(seeds, examples) verdicts of ``cells`` at ``lengths`` (examples of every length side by side)."""
    return np.stack([np.concatenate([_verdicts(c["hits"][n]) for n in lengths]) for c in cells])


def summarise_task(cells: Sequence[dict[str, Any]], *, replicates: int = 2000, seed: int = 0) -> dict[str, Any]:
    """The report's numbers for one task's cells (every scheme, every seed)."""
    first = cells[0]
    lo, hi = first["train_lengths"]
    lengths = sorted({n for c in cells for n in c["hits"]}, key=int)
    beyond_lengths = [n for n in lengths if int(n) > hi]
    schemes: dict[str, Any] = {}
    for c in cells:
        schemes.setdefault(c["scheme"], {"cells": []})["cells"].append(c)
    for s in schemes.values():
        s["rows"] = sorted((cell_row(c) for c in s["cells"]), key=lambda r: r["seed"])
        s["learned_seeds"] = [r["seed"] for r in s["rows"] if r["learned"]]
        s["seeds"] = [r["seed"] for r in s["rows"]]

    learned = {name: [c for c in s["cells"] if c["learned"]] for name, s in schemes.items()}
    learned = {name: cs for name, cs in learned.items() if cs}
    # beyond the training lengths: bootstrap over learned seeds and shared test examples, paired
    reps = stats.bootstrap({k: _matrix(cs, beyond_lengths) for k, cs in learned.items()},
                           replicates=replicates, seed=seed) if beyond_lengths else {}
    pairs = stats.compare(reps)
    means = {k: float(_matrix(cs, beyond_lengths).mean()) for k, cs in learned.items()} if beyond_lengths else {}
    ranks = stats.rank(means, pairs) if means else {}
    for name, s in schemes.items():
        s.pop("cells")
        cs = learned.get(name)
        if not cs:
            s.update(learned=False, beyond=None, beyond_ci=None, in_range=None, rank=None, by_length={})
            continue
        s["learned"] = True
        s["in_range"] = float(_matrix(cs, [n for n in lengths if int(n) <= hi]).mean())
        s["beyond"] = means.get(name)
        s["beyond_ci"] = stats.interval(reps[name]) if name in reps else None
        s["rank"] = ranks.get(name)
        per_length = stats.bootstrap({n: _matrix(cs, [n]) for n in lengths}, replicates=500, seed=seed)
        s["by_length"] = {n: {"mean": float(_matrix(cs, [n]).mean()), "ci": stats.interval(per_length[n])}
                          for n in lengths}
    order = sorted(schemes, key=lambda k: (schemes[k]["rank"] or math.inf, -(schemes[k]["beyond"] or 0), k))
    return {"task": first["task"], "train_lengths": [lo, hi], "test_max": first["test_max"],
            "length_unit": first["length_unit"], "lengths": lengths, "schemes": schemes, "order": order,
            "pairs": {f"{a} > {b}": v for (a, b), v in pairs.items() if v["diff"] > 0 or (v["diff"] == 0 and a < b)},
            "paper": paper_reading(schemes, pairs),
            "claims": [paper_reading(schemes, pairs, claim) for claim in CLAIMS
                       if any(a in schemes for a in claim.leaders) and any(b in schemes for b in claim.laggards)]}


def paper_reading(schemes: dict[str, Any], pairs: dict[tuple[str, str], dict[str, Any]],
                  claim: Claim = KAZEMNEJAD) -> dict[str, Any]:
    """Each (leader, laggard) pair of a published claim: ahead / tied / behind, or not testable.

    The claim *holds* if every testable leader is significantly ahead of every testable laggard;
    it is *contradicted* if some leader is significantly behind a laggard; otherwise the data
    are *consistent but do not separate* the schemes (ties).
    """
    rows = []
    for a in claim.leaders:
        for b in claim.laggards:
            if a not in schemes or b not in schemes:
                continue
            if (a, b) not in pairs:
                missing = [x for x in (a, b) if not schemes[x].get("learned")]
                rows.append({"leader": a, "laggard": b, "reading": "not testable",
                             "why": f"{' and '.join(missing)} did not learn the task"})
                continue
            p = pairs[(a, b)]
            reading = "tied" if not p["significant"] else ("ahead" if p["diff"] > 0 else "behind")
            rows.append({"leader": a, "laggard": b, "reading": reading, "diff": p["diff"],
                         "ci": (p["low"], p["high"])})
    by_leader = {a: _verdict([r for r in rows if r["leader"] == a]) for a in claim.leaders if a in schemes}
    return {**asdict(claim), "verdict": _verdict(rows), "by_leader": by_leader, "pairs": rows}


def _verdict(rows: list[dict[str, Any]]) -> str:
    tested = [r for r in rows if r["reading"] != "not testable"]
    if not tested:
        return "not testable"
    if any(r["reading"] == "behind" for r in tested):
        return "contradicted"
    if all(r["reading"] == "ahead" for r in tested):
        return "holds"
    return "consistent, not separated"


def summarise(cells: Sequence[dict[str, Any]], **kwargs: Any) -> dict[str, Any]:
    """Per task (in the cells' order), :func:`summarise_task`."""
    tasks: dict[str, list[dict[str, Any]]] = {}
    for c in cells:
        tasks.setdefault(c["task"], []).append(c)
    return {t: summarise_task(cs, **kwargs) for t, cs in tasks.items()}
