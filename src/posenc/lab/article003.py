"""Article 003 — ids become vectors, vectors become scores (the last seven lab claims; docs/lab.md).

Everything goes through ``posenc.embedding``: TokenEmbedding, OutputHead,
one_hot_lookup, count_parameters, neighbours.

Shape legend: V vocabulary, d width, N ids.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from posenc.embedding import OutputHead, TokenEmbedding, count_parameters, neighbours, one_hot_lookup
from posenc.lab import measures
from posenc.lab.core import Finding, LabConfig, experiment
from posenc.lab.flops import count_flops
from posenc.positions import build, default_positions

VOCAB = 1000


def seeded_embedding(cfg: LabConfig, *, vocab: int = VOCAB, scale: bool = False, salt: int = 0) -> TokenEmbedding:
    """A TokenEmbedding whose default initialisation is drawn under the lab's seed."""
    torch.manual_seed(cfg.seed * 7919 + salt)
    return TokenEmbedding(vocab_size=vocab, dim=cfg.dim, scale=scale)


@experiment("lookup-is-matmul", article="003", title="A lookup is a one-hot matrix product, minus the work")
def lookup_is_matmul(cfg: LabConfig, *, vocab: int = VOCAB, ids: int = 256) -> Finding:
    """table[id] vs one_hot(id) @ table: equal bit for bit; FLOPs of each, counted."""
    emb = seeded_embedding(cfg, vocab=vocab)
    idx = torch.randint(0, vocab, (ids,), generator=cfg.generator(71))
    with torch.no_grad():
        looked = emb(idx)
        product = one_hot_lookup(idx, emb.weight)
    counts = {"lookup": count_flops(lambda: emb(idx)),
              "one_hot_matmul": count_flops(lambda: one_hot_lookup(idx, emb.weight))}
    equal = bool(torch.equal(looked, product))
    holds = equal and counts["lookup"] == 0 and counts["one_hot_matmul"] == 2 * ids * vocab * cfg.dim
    return Finding(
        id="", claim="Looking up row id of the table gives exactly one_hot(id) @ table; the lookup skips the "
        "V·d multiply-adds per id.",
        params={"vocab": vocab, "dim": cfg.dim, "ids": ids, "seed": cfg.seed},
        values={"bitwise_equal": equal, "max_difference": float((looked - product).abs().max()),
                "flops": counts, "flops_per_id_saved": counts["one_hot_matmul"] // ids},
        holds=holds,
    )


@experiment("table-size", article="003", title="The table holds V·d numbers")
def table_size(cfg: LabConfig, *, vocabs: tuple[int, ...] = (VOCAB, 2 * VOCAB, 4 * VOCAB)) -> Finding:
    """Parameter counts of TokenEmbedding for growing V."""
    counts = [count_parameters(TokenEmbedding(vocab_size=v, dim=cfg.dim)) for v in vocabs]
    ratios = [b / a for a, b in zip(counts, counts[1:])]
    holds = all(c == v * cfg.dim for c, v in zip(counts, vocabs)) and all(
        r == b / a for r, a, b in zip(ratios, vocabs, vocabs[1:]))
    return Finding(
        id="", claim="An embedding table holds V·d numbers: doubling the vocabulary doubles it.",
        params={"vocabs": list(vocabs), "dim": cfg.dim},
        values={"parameters": counts, "expected": [v * cfg.dim for v in vocabs], "ratios": ratios}, holds=holds,
    )


@experiment("tying", article="003", title="Tied input/output tables: V·d instead of 2·V·d")
def tying(cfg: LabConfig, *, vocab: int = VOCAB) -> Finding:
    """Count parameters tied vs untied; logits are dot products of the hidden vector with each row."""
    emb = seeded_embedding(cfg, vocab=vocab)
    tied = OutputHead(dim=cfg.dim, vocab_size=vocab, tied_to=emb)
    untied = OutputHead(dim=cfg.dim, vocab_size=vocab)
    counts = {"tied": count_parameters(emb, tied), "untied": count_parameters(emb, untied)}
    h = torch.randn(3, cfg.dim, generator=cfg.generator(81))
    with torch.no_grad():
        logits = tied(h)  # (3, V)
        rows = torch.stack([torch.stack([h[b] @ emb.weight[v] for v in range(vocab)]) for b in range(3)])
        # both sides are float32 dot products of length d, summed in different orders: each is within
        # λ·√d·u·Σ|h_c·w_c| of the exact value (measures.float32_dot_error_bound), so their gap within twice that
        bound = 2 * measures.float32_dot_error_bound(h.abs() @ emb.weight.abs().T, cfg.dim)  # (3, V)
    gap = (logits - rows).abs().double()
    err = float(gap.max())
    over = float((gap / bound.clamp(min=1e-300)).max())
    same = tied.weight is emb.weight
    holds = counts["tied"] == vocab * cfg.dim and counts["untied"] == 2 * vocab * cfg.dim and same and over <= 1
    return Finding(
        id="", claim="With tied weights the output head is the embedding table itself (V·d parameters in all); "
        "untied it is a second table (2·V·d). A logit is the dot product of the hidden vector with one row.",
        params={"vocab": vocab, "dim": cfg.dim, "seed": cfg.seed},
        values={"parameters": counts, "expected": {"tied": vocab * cfg.dim, "untied": 2 * vocab * cfg.dim},
                "same_tensor": same, "logit_vs_row_dot": err,
                "tolerance": {"logit_vs_row_dot": float(bound.max()), "logit_vs_row_dot_over_tolerance": over,
                              "from": "2·λ·√d·u₃₂·Σ|h·w| per logit: two float32 dot products of length d "
                                      f"(probabilistic bound, λ = {measures.PROBABILISTIC_LAMBDA:g})"}},
        holds=holds,
    )


@experiment("self-score", article="003", title="A token's own row usually scores highest — not always")
def self_score(cfg: LabConfig, *, vocab: int = VOCAB, spreads: tuple[float, ...] = (0.0, 0.1, 0.25, 0.5, 1.0)) -> Finding:
    """With h = a token's row, how often is that token the argmax of the tied logits, as row lengths vary?

    Rows are the default initialisation multiplied by exp(σ·z), z ~ N(0, 1):
    σ = 0 is the plain table; larger σ spreads the row lengths.
    """
    emb = seeded_embedding(cfg, vocab=vocab)
    base = emb.weight.detach().double()
    z = torch.randn(vocab, 1, generator=cfg.generator(91), dtype=torch.float64)
    fractions, cosine_fractions, examples = [], [], []
    for sigma in spreads:
        table = base * torch.exp(sigma * z)  # (V, d): same directions, spread lengths
        scores = table @ table.T  # row i: logits for h = table[i]
        top = scores.argmax(-1)
        own = top == torch.arange(vocab)
        fractions.append(float(own.double().mean()))
        cos = F.normalize(table, dim=-1)
        cosine_fractions.append(float(((cos @ cos.T).argmax(-1) == torch.arange(vocab)).double().mean()))
        if not bool(own.all()) and not examples:
            i = int((~own).nonzero()[0])
            w = int(top[i])
            examples.append({"sigma": sigma, "token": i, "winner": w, "own_norm": float(table[i].norm()),
                             "winner_norm": float(table[w].norm()), "own_score": float(scores[i, i]),
                             "winner_score": float(scores[i, w])})
    holds = fractions[0] > 0.5 and min(fractions) < 1.0 and all(c == 1.0 for c in cosine_fractions)
    return Finding(
        id="", claim="When the hidden vector equals a token's embedding, that token tends to score highest under "
        "dot product — but a longer row can beat it (never under cosine).",
        params={"vocab": vocab, "dim": cfg.dim, "length_spreads": list(spreads), "seed": cfg.seed},
        values={"self_top_fraction": fractions, "cosine_self_top_fraction": cosine_fractions,
                "example": examples[0] if examples else None},
        holds=holds,
    )


@experiment("cosine-vs-dot", article="003", title="Stretch a row: cosine lists stay, dot lists change")
def cosine_vs_dot(cfg: LabConfig, *, vocab: int = 200, factors: tuple[float, ...] = (2.0, 10.0, 100.0),
                  k: int = 5, probes: int = 100) -> Finding:
    """Stretch one row by each factor and compare every probe's neighbour list before and after.

    A longer row can only climb the dot-product lists of tokens it points
    towards (positive cosine); those are the lists it is counted in.
    """
    emb = seeded_embedding(cfg, vocab=vocab, salt=1)
    table = emb.weight.detach().double()
    sid = int(torch.randint(0, vocab, (1,), generator=cfg.generator(101)))
    unit = F.normalize(table, dim=-1)
    probe_ids = [i for i in range(vocab) if i != sid][:probes]
    aligned = [i for i in probe_ids if float(unit[i] @ unit[sid]) > 0]

    def rank(t: torch.Tensor, i: int, metric: str = "dot") -> int:
        order, _ = neighbours(t, i, k=vocab, metric=metric)  # every other row, best first
        return int((order == sid).nonzero()[0]) + 1

    dot_rank = rank
    cos_changed, led, mean_rank, cos_rank = [], [], [], []
    for factor in factors:
        stretched = table.clone()
        stretched[sid] *= factor
        changed = sum(int(not torch.equal(neighbours(table, i, k=k)[0], neighbours(stretched, i, k=k)[0]))
                      for i in [sid, *probe_ids])
        ranks = [dot_rank(stretched, i) for i in aligned]
        cos_changed.append(changed)
        led.append(sum(r == 1 for r in ranks) / max(len(aligned), 1))
        mean_rank.append(sum(ranks) / max(len(ranks), 1))
        cos_rank.append(sum(rank(stretched, i, "cosine") for i in aligned) / max(len(aligned), 1))
    rank_before = sum(dot_rank(table, i) for i in aligned) / max(len(aligned), 1)
    headline = factors[len(factors) // 2]
    stretched = table.clone()
    stretched[sid] *= headline
    # show a list the stretched row was far down in and leads after stretching (else the most aligned one)
    jumped = [i for i in aligned if dot_rank(stretched, i) == 1 and dot_rank(table, i) > k]
    example = max(jumped or probe_ids, key=lambda i: dot_rank(table, i) if jumped else float(unit[i] @ unit[sid]))
    lists = {name: neighbours(t, example, k=k, metric=m)[0].tolist()
             for name, t, m in (("cosine_before", table, "cosine"), ("cosine_after", stretched, "cosine"),
                                ("dot_before", table, "dot"), ("dot_after", stretched, "dot"))}
    holds = all(c == 0 for c in cos_changed) and led[-1] > 0.9 and all(a <= b for a, b in zip(led, led[1:])) and (
        mean_rank[0] < rank_before)
    return Finding(
        id="", claim="Stretching one row leaves every cosine neighbour list unchanged, but under dot product the "
        "stretched row jumps to the front of the lists of the tokens it points towards: closeness by cosine, "
        "scores by dot product.",
        params={"vocab": vocab, "dim": cfg.dim, "factors": list(factors), "k": k, "probes": len(probe_ids),
                "stretched": sid, "seed": cfg.seed},
        values={"cosine_lists_changed": cos_changed, "aligned_probes": len(aligned),
                "dot_rank_before": rank_before, "dot_rank_after": mean_rank, "dot_led_fraction": led,
                "cosine_rank_before": sum(rank(table, i, "cosine") for i in aligned) / max(len(aligned), 1),
                "cosine_rank_after": cos_rank,
                "example_token": example, "example_factor": headline, "example_lists": lists},
        holds=holds,
    )


@experiment("sqrt-d", article="003", title="×√d scales every norm by √d and turns nothing")
def sqrt_d(cfg: LabConfig, *, vocab: int = VOCAB) -> Finding:
    """TokenEmbedding with and without scale on the same table: norm ratios and cosines."""
    plain = seeded_embedding(cfg, vocab=vocab)
    scaled = TokenEmbedding(vocab_size=vocab, dim=cfg.dim, scale=True)
    with torch.no_grad():
        scaled.weight.copy_(plain.weight)
        ids = torch.arange(vocab)[None]
        a, b = plain(ids)[0].double(), scaled(ids)[0].double()
    ratio = b.norm(dim=-1) / a.norm(dim=-1)
    cos = F.cosine_similarity(a, b, dim=-1)
    root = math.sqrt(cfg.dim)
    # float32: each scaled entry is w·fl(√d) rounded once — relative error ≤ 2u₃₂ — and the norms and cosines
    # are then formed in float64 over d entries (≤ (d + 2)·ε₆₄ each); a common relative error δ ≤ u₃₂ per
    # entry turns a direction by at most δ, so 1 − cos ≤ u₃₂² plus the float64 rounding
    ratio_tolerance = (2 * measures.U32 + 2 * (cfg.dim + 2) * measures.EPS) * root
    cosine_tolerance = measures.U32**2 + 4 * (cfg.dim + 2) * measures.EPS
    holds = (float((ratio - root).abs().max()) <= ratio_tolerance
             and float((cos - 1).abs().max()) <= cosine_tolerance)
    return Finding(
        id="", claim="Multiplying embeddings by √d scales every norm by exactly √d and changes no direction.",
        params={"vocab": vocab, "dim": cfg.dim, "seed": cfg.seed},
        values={"sqrt_d": root, "ratio_min": float(ratio.min()), "ratio_max": float(ratio.max()),
                "cosine_min": float(cos.min()), "mean_norm_before": float(a.norm(dim=-1).mean()),
                "mean_norm_after": float(b.norm(dim=-1).mean()),
                "tolerance": {"ratio": ratio_tolerance, "cosine": cosine_tolerance,
                              "from": "(2u₃₂ + 2(d+2)ε₆₄)·√d for the ratio (one float32 product, float64 norms); "
                                      "u₃₂² + 4(d+2)ε₆₄ for 1 − cos"}},
        holds=holds,
    )


@experiment("no-context", article="003", title="An embedding knows nothing of context")
def no_context(cfg: LabConfig, *, vocab: int = 50, length: int = 12) -> Finding:
    """The same id at different places and in different sentences gets the same vector (until positions are added)."""
    emb = seeded_embedding(cfg, vocab=vocab, scale=True)
    ids = torch.randint(0, vocab, (2, length), generator=cfg.generator(111))
    token = int(ids[0, 0])
    ids[0, length // 2] = token  # the same id twice in one sentence …
    ids[1, -1] = token  # … and once in another, at another place
    places = [(0, 0), (0, length // 2), (1, length - 1)]
    pe = build("sinusoidal", dim=cfg.dim, num_heads=1, base=cfg.base)
    with torch.no_grad():
        x = emb(ids)  # (2, T, d)
        z = pe.add(x, default_positions(length))
    vecs = torch.stack([x[b, t] for b, t in places])
    with_pos = torch.stack([z[b, t] for b, t in places])
    same = float((vecs - vecs[0]).abs().max())
    differ = float((with_pos - with_pos[0]).abs().max())
    holds = same == 0.0 and differ > 0
    return Finding(
        id="", claim="The same id gives the same vector wherever it stands: the embedding carries no context "
        "(only an added position makes the copies differ).",
        params={"vocab": vocab, "dim": cfg.dim, "length": length, "token": token, "places": places,
                "seed": cfg.seed},
        values={"max_difference": same, "max_difference_with_positions": differ}, holds=holds,
    )
