"""Measured property profile of every registered position scheme (the table in docs/schemes.md).

Run from the repository root:

    PYTHONPATH=src python benchmarks/schemes/profile.py --length 256 --json benchmarks/schemes/profile.json \
        --markdown benchmarks/schemes/profile.md

Everything is computed from ``scheme.similarity`` (the object the lab
measures) plus two precision probes; the lab (``posenc.lab``) measures more
properties on the same object. Numbers depend on the seed for learned schemes
(their values at initialisation), on nothing else.

Columns:
  params      learned parameters of one scheme instance (dim 64, 4 heads)
  rel         translation invariance: max over diagonals of the spread of S(i, i−d),
              relative to max |S| (≈ 1e-16: a function of i − j alone)
  incr        in how many of the L−1 steps of the causal profile f(d) = S(L−1, L−1−d)
              the similarity rises (0: decays monotonically with distance; worst head)
  sym         max |S − Sᵀ| / max |S| (0: symmetric in i, j)
  far         S at positions (10⁶, 10⁶ − 1) minus S at (1, 0), relative to max |S|
              ("defined far out, and the same there"; blank when positions that far are refused)
  fp32 err    rotary: max |cos, sin error| of the float32 tables the model uses at positions up
              to 10⁶, vs float64; additive: max |table error| in float32. Bias: max relative
              error of the float32 bias at distances up to 10⁶ vs float64.
"""

from __future__ import annotations

import argparse
import json
import sys

import torch
from tqdm import tqdm

from posenc.positions import build, names
from posenc.positions.base import PositionScheme


def heads(sim: torch.Tensor) -> torch.Tensor:
    return sim if sim.dim() == 3 else sim.unsqueeze(0)  # (H, Ti, Tj)


def scale(sim: torch.Tensor) -> float:
    return max(float(sim.abs().max()), 1e-300)


def diagonal_spread(sim: torch.Tensor) -> float:
    """Max over diagonals d of max − min of S(i, i + d), all heads."""
    length = sim.shape[-1]
    worst = 0.0
    for d in range(-(length - 1), length):
        diag = torch.diagonal(sim, offset=d, dim1=-2, dim2=-1)  # (H, L − |d|)
        worst = max(worst, float((diag.amax(-1) - diag.amin(-1)).max()))
    return worst


def causal_increases(sim: torch.Tensor) -> int:
    """Steps d → d+1 where f(d) = S(L−1, L−1−d) rises (relative tolerance 1e-12), worst head."""
    last = sim[:, -1, :].flip(-1)  # (H, L): f(0), f(1), …
    tol = 1e-12 * scale(sim)
    return int(((last[:, 1:] - last[:, :-1]) > tol).sum(-1).max())


def far_minus_near(scheme: PositionScheme) -> float | None:
    far = torch.tensor([10**6, 10**6 - 1])
    near = torch.tensor([1, 0])
    try:
        a, b = heads(scheme.similarity(far, far)), heads(scheme.similarity(near, near))
    except ValueError:
        return None
    return float((a - b).abs().max()) / scale(b)


def fp32_error(scheme: PositionScheme, gen: torch.Generator) -> float | None:
    positions = torch.cat([torch.randint(0, 10**6, (2000,), generator=gen), torch.tensor([10**6])])
    with torch.no_grad():
        if scheme.family == "rotary" and hasattr(scheme, "cos_sin") and scheme.name != "xpos":
            exact = scheme.angles(positions)  # float64
            a = scheme.attention_factor
            cos, sin = scheme.cos_sin(positions)  # what the model uses in float32
            return max(float((cos.double() - a * exact.cos()).abs().max()),
                       float((sin.double() - a * exact.sin()).abs().max()))
        if scheme.family == "additive" and scheme.name not in ("learned", "naive"):
            exact = scheme.double().encode(positions).double()
            return float((exact.float().double() - exact).abs().max())
        if scheme.family == "bias":
            q_pos, k_pos = torch.tensor([10**6]), positions
            q = torch.ones(1, scheme.num_heads, 1, getattr(scheme, "head_dim", 8))
            low = scheme.float().attention_bias(q_pos, k_pos, q).double()
            high = scheme.double().attention_bias(q_pos, k_pos, q.double())
            scheme.float()
            return float((low - high).abs().max()) / scale(high)
    return None


def profile(name: str, length: int, seed: int) -> dict:
    torch.manual_seed(seed)
    scheme = build(name, dim=64, num_heads=4)
    pos = torch.arange(length)
    max_pos = scheme.max_position()
    if max_pos is not None:
        pos = pos[: max_pos + 1]
    with torch.no_grad():
        sim = heads(scheme.similarity(pos, pos))
    s = scale(sim)
    return {
        "name": name,
        "family": scheme.family,
        "params": sum(p.numel() for p in scheme.parameters()),
        "translation_spread": diagonal_spread(sim) / s,
        "causal_increases": causal_increases(sim),
        "steps": sim.shape[-1] - 1,
        "asymmetry": float((sim - sim.transpose(-1, -2)).abs().max()) / s,
        "far_minus_near": far_minus_near(scheme),
        "fp32_error": fp32_error(scheme, torch.Generator().manual_seed(seed)),
    }


def fmt(x: float | None) -> str:
    if x is None:
        return ""
    if x == 0:
        return "0"
    return f"{x:.1e}"


def markdown(rows: list[dict]) -> str:
    lines = ["| scheme | family | params | rel (spread) | incr / steps | sym | far | fp32 err |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        lines.append(f"| {r['name']} | {r['family']} | {r['params']} | {fmt(r['translation_spread'])} | "
                     f"{r['causal_increases']} / {r['steps']} | {fmt(r['asymmetry'])} | {fmt(r['far_minus_near'])} | "
                     f"{fmt(r['fp32_error'])} |")
    return "\n".join(lines)


def precision_figures(seed: int) -> dict:
    """The figures quoted in docs/schemes.md § Precision."""
    from posenc.positions import RoPE, XPos
    gen = torch.Generator().manual_seed(seed)
    rope = RoPE(head_dim=128)
    positions = torch.cat([torch.randint(0, 10**6, (5000,), generator=gen), torch.tensor([10**6])])
    exact = rope.angles(positions)
    # the common float32 pipeline: angles formed in float32 (position.float() * inv_freq.float())
    fp32_angles = positions.float().unsqueeze(-1) * rope.inv_freq().float()
    bf16_positions = positions.to(torch.bfloat16).double()
    return {
        "posenc_cos_error_fp32": float((rope.cos_sin(positions)[0].double() - exact.cos()).abs().max()),
        "fp32_angle_pipeline_angle_error": float((fp32_angles.double() - exact).abs().max()),
        "fp32_angle_pipeline_cos_error": float((fp32_angles.cos().double() - exact.cos()).abs().max()),
        "bf16_position_error": float((bf16_positions - positions.double()).abs().max()),
        "xpos_max_position_fp32": XPos(head_dim=64).max_position_for(torch.float32),
        "xpos_max_position_fp64": XPos(head_dim=64).max_position_for(torch.float64),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=256, help="positions 0 … L−1 for the similarity")
    parser.add_argument("--seed", type=int, default=0, help="seed for learned schemes' initial values")
    parser.add_argument("--json", help="also write the rows and precision figures here")
    parser.add_argument("--markdown", help="also write the table and the precision figures as Markdown here "
                                           "(docs/schemes.md quotes it through generated blocks)")
    args = parser.parse_args(argv)
    rows = [profile(name, args.length, args.seed) for name in tqdm(names(), desc="schemes", file=sys.stderr)]
    figures = precision_figures(args.seed)
    print(markdown(rows))
    print()
    for key, value in figures.items():
        print(f"{key}: {value:.3g}" if isinstance(value, float) else f"{key}: {value}")
    if args.markdown:
        with open(args.markdown, "w", encoding="utf-8") as fh:
            fh.write("# Measured property profile of every registered scheme\n\n"
                     f"Written by `benchmarks/schemes/profile.py --length {args.length} --seed {args.seed}`.\n\n"
                     "## Profile\n\n" + markdown(rows) + "\n\n## Precision\n\n"
                     "| figure | value |\n| --- | --- |\n"
                     + "".join(f"| {k} | {v:.3g} |\n" if isinstance(v, float) else f"| {k} | {v} |\n"
                               for k, v in figures.items()))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"length": args.length, "seed": args.seed, "rows": rows, "precision": figures}, fh, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
