"""Every experiment at non-default sizes (d, L, base, seed) against an independent computation.

References are float64 loops / numpy written here from the formulas, not the
library's code; seeded inputs are re-drawn from the same generator contract
(``LabConfig.generator``) where the experiment's random content matters.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posenc.lab import article000, article002, article003
from posenc.lab.core import EXPERIMENTS, LabConfig


@pytest.fixture
def cfg(seed: int) -> LabConfig:
    return LabConfig(dim=24, length=300, base=500.0, seed=seed % 10_000)


def omegas(dim: int, base: float) -> list[float]:
    return [base ** (-2 * i / dim) for i in range(dim // 2)]


def pe_row(p: int, dim: int, base: float) -> np.ndarray:
    out = []
    for w in omegas(dim, base):
        out += [math.sin(p * w), math.cos(p * w)]
    return np.array(out)


def pe_table(length: int, dim: int, base: float) -> np.ndarray:
    return np.stack([pe_row(p, dim, base) for p in range(length)])


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_ids_follow_spec_order():
    ids = list(EXPERIMENTS)
    assert ids[:8] == ["naive-position", "sinusoid-norm", "distance-only", "not-monotonic", "shift-is-linear",
                       "beyond-training-length", "position-vs-content", "permutation"]
    assert len(ids) == len(set(ids)) == 22


def test_naive_position(cfg):
    f = EXPERIMENTS["naive-position"].run(cfg, width=6, tokens=5, starts=(0, 37))
    content = 0.5 * torch.randn(5, 6, generator=cfg.generator(1), dtype=torch.float64).numpy()
    root = math.sqrt(7)
    for w in f.values["windows"]:
        s = w["start"]
        pos = np.arange(s, s + 5, dtype=float)
        assert w["position_spread"] == pytest.approx(((s + 4) ** 2 - s**2) / root, rel=1e-12)
        cc = content @ content.T / root
        assert w["content_spread"] == pytest.approx(cc.max() - cc.min(), rel=1e-12)
        logits = cc + np.outer(pos, pos) / root
        assert w["max_prob"] == pytest.approx(softmax(logits).max(), rel=1e-12)
    assert [w["start"] for w in f.values["windows"]] == [0, 37]


def test_sinusoid_norm_distance_and_profile(cfg):
    table = pe_table(cfg.length, cfg.dim, cfg.base)
    norm = EXPERIMENTS["sinusoid-norm"].run(cfg)
    assert norm.values["norm"] == pytest.approx(math.sqrt(cfg.dim / 2), rel=1e-14) and norm.holds
    assert norm.values["norm_spread"] < 1e-13
    dist = EXPERIMENTS["distance-only"].run(cfg)
    gram = table @ table.T
    spreads = [np.ptp(np.diagonal(gram, k)) for k in range(cfg.length)]
    assert dist.values["diagonal_spread"] < 1e-11 and max(spreads) < 1e-11 and dist.holds
    assert dist.values["formula_error"] < 1e-11
    mono = EXPERIMENTS["not-monotonic"].run(cfg)
    prof = [sum(math.cos(d * w) for w in omegas(cfg.dim, cfg.base)) for d in range(cfg.length)]
    v = mono.values
    assert v["profile_head"] == pytest.approx(prof[:8], abs=1e-11)
    assert v["increases"] == sum(b - a > 1e-9 * max(map(abs, prof)) for a, b in zip(prof, prof[1:]))
    assert v["steps"] == cfg.length - 1 and v["argmin"] == int(np.argmin(prof))
    assert v["min"] == pytest.approx(min(prof), abs=1e-11) and v["last"] == pytest.approx(prof[-1], abs=1e-11)
    assert mono.holds == (v["increases"] > 0)


def test_shift_is_linear(cfg):
    f = EXPERIMENTS["shift-is-linear"].run(cfg)
    table = pe_table(cfg.length, cfg.dim, cfg.base)
    rnd = (torch.randn(cfg.length, cfg.dim, generator=cfg.generator(5), dtype=torch.float64) / math.sqrt(cfg.dim)).numpy()
    assert f.values["offsets"] == [1, 2, 5, 17, 50]
    for n, k in enumerate(f.values["offsets"]):
        for t, key in ((table, "sinusoid_residual"), (rnd, "random_residual")):
            sol = np.linalg.lstsq(t[:-k], t[k:], rcond=None)[0]
            want = np.abs(t[k:] - t[:-k] @ sol).max()
            if key == "sinusoid_residual":
                assert f.values[key][n] < 1e-10 and want < 1e-10
            else:
                assert f.values[key][n] == pytest.approx(want, rel=1e-8)
    assert max(f.values["rotation_block_error"]) < 1e-12 and f.holds


def test_beyond_training_length(cfg):
    f = EXPERIMENTS["beyond-training-length"].run(cfg)
    p = f.values["position"]
    assert p == 4000
    a, b = pe_row(p, cfg.dim, cfg.base), pe_row(p + 1, cfg.dim, cfg.base)
    assert f.values["norm"] == pytest.approx(np.linalg.norm(a), abs=1e-12)
    assert f.values["dot_next"] == pytest.approx(a @ b, abs=1e-10)
    assert f.values["dot_origin"] == pytest.approx(sum(math.cos(w) for w in omegas(cfg.dim, cfg.base)), abs=1e-12)
    assert f.values["learned_defined"] is False and "300 rows" in f.values["learned_error"] and f.holds


def test_position_vs_content(cfg):
    f = EXPERIMENTS["position-vs-content"].run(cfg, draws=16)
    x = article000.partner_tokens(cfg, draws=16).numpy()  # (S, 6, d)
    s = math.sqrt(cfg.dim) / 4
    pe = pe_table(6, cfg.dim, cfg.base)
    rows_without, rows_with = [], []
    for sent in x:
        c = sent * s
        rows_without.append(softmax(c @ c.T / math.sqrt(cfg.dim))[0])
        z = c + pe
        rows_with.append(softmax(z @ z.T / math.sqrt(cfg.dim))[0])
    assert f.values["without"] == pytest.approx(np.mean(rows_without, 0).tolist(), abs=1e-12)
    assert f.values["with"] == pytest.approx(np.mean(rows_with, 0).tolist(), abs=1e-12)
    cos = [float(a[0] @ a[3] / np.linalg.norm(a[0]) / np.linalg.norm(a[3])) for a in x]
    assert np.mean(cos) > 0.6  # the partner is topical to token 0 …
    assert f.values["partner_with"] == f.values["with"][3] and f.values["neighbour_with"] == f.values["with"][1]
    v = f.values
    assert f.holds == (v["partner_with"] < v["partner_without"] and v["neighbour_with"] > v["neighbour_without"]
                       and v["row_change_by_scale"][-1] < v["row_change_by_scale"][0])


def test_permutation(cfg):
    f = EXPERIMENTS["permutation"].run(cfg, tokens=7, num_heads=3)
    v = f.values
    assert (v["no_position"], v["position_fixed"], v["position_travels"]) == (True, False, True) and f.holds
    assert v["max_difference"]["position_fixed"] > 1e-6 and sorted(f.params["permutation"]) == list(range(7))


def test_pe_module_columns_and_crossings(cfg):
    f = EXPERIMENTS["pe-module"].run(cfg, rows=40, columns=(2, 5), dropout=0.2)
    dim = f.params["dim"]
    assert dim == 12 and f.values["output_shape"] == [2, 40, 12]
    table = pe_table(cfg.length, dim, cfg.base)
    signs = (table[1:] * table[:-1]) < 0
    per_pair = signs.sum(0).reshape(-1, 2).sum(-1).tolist()
    assert f.values["crossings_per_pair"] == per_pair
    assert f.series["columns"]["5"] == pytest.approx(pe_table(40, dim, cfg.base)[:, 5].tolist(), abs=1e-12)
    assert abs(f.values["dropout_zero_fraction"] - 0.2) < 0.06


def test_multihead_shapes(cfg):
    f = EXPERIMENTS["multihead-shapes"].run(cfg, dim=24, num_heads=3, batch=3, queries=5, keys=7,
                                             valid_lens=(1, 4, 7))
    v = f.values
    assert v["output_shape"] == v["input_shape"] == [3, 5, 24] and v["weights_shape"] == [3, 3, 5, 7]
    assert v["masked_weight"] == 0.0 and v["masked_keys_effect"] < 1e-10 and f.holds


def test_multihead_shapes_tolerance_scales_with_the_width(cfg, gen):
    """At a width nobody chose (up to 1,536) the true claim holds and its tolerance, 100·d·ε·max(1, |out|), is stated."""
    heads = int(torch.randint(1, 7, (1,), generator=gen))
    dim = heads * int(torch.randint(16, 257, (1,), generator=gen))
    f = EXPERIMENTS["multihead-shapes"].run(cfg, dim=dim, num_heads=heads)
    v = f.values
    assert f.holds, v
    assert v["tolerance"] >= 100 * dim * torch.finfo(torch.float64).eps
    assert v["masked_keys_effect"] <= v["tolerance"] and v["sdpa_vs_explicit"] <= v["tolerance"]


def test_complexity_counts_match_closed_forms(cfg):
    d, k = 16, 5
    f = EXPERIMENTS["complexity"].run(cfg, dim=d, kernel=k, lengths=(16, 32, 64), path_lengths=(6, 11), repeats=1)
    v = f.values
    for n, cnn, rnn, att in zip((16, 32, 64), v["flops"]["cnn"], v["flops"]["rnn"], v["flops"]["attention"]):
        assert cnn == 2 * k * n * d * d  # Conv1d: k·d·d multiply-adds per output position
        assert rnn == n * 2 * (2 * d * d)  # two d×d products per step
        assert att == 4 * 2 * n * d * d + 2 * 2 * n * n * d  # 4 projections + QKᵀ + AV
    assert v["max_path_length"]["cnn"] == [math.ceil((n - 1) / (k // 2)) for n in (6, 11)]
    assert v["max_path_length"]["rnn"] == [6, 11] and v["max_path_length"]["attention"] == [1, 1]
    depth = v["sequential_depth"]
    assert depth["cnn"][0] == depth["cnn"][-1] and depth["attention"][0] == depth["attention"][-1]
    assert depth["rnn"][-1] > 3.5 * depth["rnn"][0]


def test_graph_depth_counts_a_chain():
    x = torch.ones(3, requires_grad=True)
    y = x
    for _ in range(10):
        y = y * 2
    assert article002.graph_depth(y) == 11  # 10 multiplications + the leaf's accumulator


def test_encoder_decoder_causal(cfg):
    f = EXPERIMENTS["encoder-decoder-causal"].run(cfg, vocab=13, src_len=5, tgt_len=6, num_layers=1, num_heads=2)
    v = f.values
    assert v["max_change_before"] == 0.0 and v["decoder_only_max_change_before"] == 0.0
    assert v["min_change_at"] > 0 and v["encoder_first_changed_by_last_source"] > 0 and f.holds
    assert v["memory_shape"] == [2, 5, cfg.dim]


def test_probe_accuracy_matches_numpy_ridge(gen):
    h = torch.randn(120, 5, generator=gen, dtype=torch.float64)
    pos = torch.randint(0, 4, (120,), generator=gen)
    got = article002.probe_accuracy(h[:60], pos[:60], h[60:], pos[60:], classes=4, ridge=0.5)
    a = np.c_[h[:60].numpy(), np.ones(60)]
    w = np.linalg.solve(a.T @ a + 0.5 * np.eye(6), a.T @ np.eye(4)[pos[:60].numpy()])
    pred = (np.c_[h[60:].numpy(), np.ones(60)] @ w).argmax(-1)
    assert got == pytest.approx((pred == pos[60:].numpy()).mean())


def test_exercises_depth(cfg):
    f = EXPERIMENTS["exercises-depth"].run(cfg, tokens=8, sequences=40, depths=(0, 1, 6))
    v = f.values
    assert v["depths"] == [0, 1, 6] and v["chance"] == 1 / 8
    assert v["accuracy_plain"][0] == v["accuracy_residual"][0]  # same input before any layer
    assert v["token_spread_plain"][-1] < 1e-6 < v["token_spread_residual"][-1]  # plain layers collapse the tokens
    assert v["accuracy_plain"][-1] <= 2 / 8


def test_exercises_train_and_shift(cfg):
    learned = EXPERIMENTS["exercises-learned"].run(cfg, length=8, steps=30)
    v = learned.values
    assert set(v["accuracy"]) == {"learned", "sinusoidal", "none"}
    assert v["accuracy_beyond_table"]["learned"] is None and v["accuracy_shifted"]["learned"] is None
    # with no positions the shifted model is the same model: identical accuracy
    assert v["accuracy_shifted"]["none"] == v["accuracy"]["none"]
    rel = EXPERIMENTS["exercises-relative"].run(cfg, length=8, steps=30)
    assert "rope" in rel.values["accuracy"]
    assert rel.values["accuracy_shifted"]["rope"] == pytest.approx(rel.values["accuracy"]["rope"], abs=0.01)


def test_lookup_table_size_tying(cfg):
    f = EXPERIMENTS["lookup-is-matmul"].run(cfg, vocab=37, ids=11)
    assert f.values["bitwise_equal"] and f.values["flops"]["one_hot_matmul"] == 2 * 11 * 37 * cfg.dim
    assert f.values["flops"]["lookup"] == 0 and f.holds
    t = EXPERIMENTS["table-size"].run(cfg, vocabs=(7, 14, 42))
    assert t.values["parameters"] == [7 * 24, 14 * 24, 42 * 24] and t.values["ratios"] == [2.0, 3.0] and t.holds
    tie = EXPERIMENTS["tying"].run(cfg, vocab=19)
    assert tie.values["parameters"] == {"tied": 19 * 24, "untied": 2 * 19 * 24} and tie.holds


def test_self_score(cfg):
    f = EXPERIMENTS["self-score"].run(cfg, vocab=60, spreads=(0.0, 0.7))
    base = article003.seeded_embedding(cfg, vocab=60).weight.detach().double().numpy()
    z = torch.randn(60, 1, generator=cfg.generator(91), dtype=torch.float64).numpy()
    for n, sigma in enumerate((0.0, 0.7)):
        t = base * np.exp(sigma * z)
        own = [int(np.argmax([t[i] @ t[j] for j in range(60)]) == i) for i in range(60)]
        assert f.values["self_top_fraction"][n] == pytest.approx(sum(own) / 60)
    assert f.values["cosine_self_top_fraction"] == [1.0, 1.0]


def test_cosine_vs_dot(cfg):
    f = EXPERIMENTS["cosine-vs-dot"].run(cfg, vocab=40, factors=(3.0, 50.0), probes=20)
    base = article003.seeded_embedding(cfg, vocab=40, salt=1).weight.detach().double().numpy()
    sid = f.params["stretched"]
    probes = [i for i in range(40) if i != sid][:20]
    unit = base / np.linalg.norm(base, axis=1, keepdims=True)
    aligned = [i for i in probes if unit[i] @ unit[sid] > 0]
    assert f.values["aligned_probes"] == len(aligned) and f.values["cosine_lists_changed"] == [0, 0]
    for n, factor in enumerate((3.0, 50.0)):
        t = base.copy()
        t[sid] *= factor
        led = 0
        for i in aligned:
            scores = [(t[i] @ t[j], j) for j in range(40) if j != i]
            led += max(scores)[1] == sid
        assert f.values["dot_led_fraction"][n] == pytest.approx(led / max(len(aligned), 1))


def test_sqrt_d_and_no_context(cfg):
    f = EXPERIMENTS["sqrt-d"].run(cfg, vocab=30)
    assert f.values["sqrt_d"] == math.sqrt(24)
    assert abs(f.values["ratio_min"] - math.sqrt(24)) < 1e-5 and abs(f.values["ratio_max"] - math.sqrt(24)) < 1e-5
    assert f.values["cosine_min"] > 1 - 1e-6 and f.holds
    g = EXPERIMENTS["no-context"].run(cfg, vocab=9, length=7)
    assert g.values["max_difference"] == 0.0 and g.values["max_difference_with_positions"] > 0 and g.holds


@pytest.mark.parametrize("exp_id", list(EXPERIMENTS))
def test_every_experiment_reports_plain_data(exp_id):
    import json

    f = EXPERIMENTS[exp_id].run(LabConfig(dim=16, length=64, base=100.0, seed=3)) if exp_id not in (
        "exercises-learned", "exercises-relative", "complexity") else EXPERIMENTS[exp_id].run(
        LabConfig(dim=16, length=64, seed=3), **({"steps": 5, "length": 6} if exp_id != "complexity" else
                                                  {"lengths": (8, 16), "path_lengths": (4,), "repeats": 1}))
    rec = json.loads(json.dumps(f.public()))
    assert rec["id"] == exp_id and set(rec) == {"id", "claim", "params", "values", "holds"}
    assert isinstance(rec["holds"], bool) and rec["claim"]


@pytest.mark.parametrize("length", [4096, 4097])  # both sides of EXACT_GRAM_ROWS: exact Gram, then FFT + rows
def test_distance_only_holds_on_both_sides_of_the_method_switch(length):
    f = EXPERIMENTS["distance-only"].run(LabConfig(dim=32, length=length))
    method = "exact" if length <= article000.measures.EXACT_GRAM_ROWS else "fft+sampled"
    assert f.params["method"] == method and f.holds, f.values
    tol = f.values["tolerance"]
    assert f.values["diagonal_spread"] <= tol["diagonal_spread"] and tol["formula_error_over_tolerance"] <= 1
    # the tolerance is a rounding bound, not a loose constant: a table off by 1e-6 in one entry fails
    assert tol["diagonal_spread"] < 1e-8 and tol["formula_error"] < 1e-8


def test_shift_is_linear_holds_with_either_fit(cfg, monkeypatch):
    exact = EXPERIMENTS["shift-is-linear"].run(cfg)
    monkeypatch.setattr(article000.measures, "QR_FLOP_LIMIT", 0)  # force the shared-Gram method at this size
    gram = EXPERIMENTS["shift-is-linear"].run(cfg)
    assert (exact.params["method"], gram.params["method"]) == ("qr", "gram")
    for f in (exact, gram):
        v = f.values
        assert f.holds and all(r <= b for r, b in zip(v["sinusoid_residual"], v["tolerance"]["sinusoid_residual"]))
    assert gram.values["random_relative"] == pytest.approx(exact.values["random_relative"], rel=1e-9)
