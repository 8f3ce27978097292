"""The benchmark suites: each builds its contenders, checks them against posenc, times them.

A suite returns plain data: a list of *cases*, each with its contenders'
statistics, which contender is the floor and which is posenc, and whatever
extra facts (errors, memory) the case has. ``posenc.bench.report`` prints it.

Sizes: ``SIZES["small"]`` runs the whole bench in a minute or two on a laptop;
``SIZES["full"]`` are the issue's sizes (q of shape (8, 16, 1024, 64), the
nn.Transformer configuration, L = 65,536 at d = 1,024).

Shape legend: B batch, H heads, T sequence length, Dh head width, D width.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from posenc.bench import peers
from posenc.bench.checks import MismatchError, check_same
from posenc.bench.timing import Stats, measure
from posenc.positions import RoPE, build, lookup, names

SIZES: dict[str, dict[str, Any]] = {
    "tiny": {  # for tests: seconds
        "rope": (1, 2, 16, 8), "repeats": 2, "additive": (2, 16, 8), "bias": (2, 2, 16),
        "attention": (1, 2, 32, 8), "train": {"batch": 2, "length": 8, "vocab": 50, "dim": 16, "heads": 2,
                                               "layers": 1, "ffn": 32, "steps": 1, "warmup": 1},
        "compile": {"batch": 2, "length": 8, "vocab": 50, "dim": 16, "heads": 2, "layers": 1, "ffn": 32,
                    "new_tokens": 3, "repeats": 2, "schemes": ["rope"], "backend": "eager", "llama": True},
        "lab": (64, 16), "angle_positions": (10**4, 10**6), "train_dropouts": (0.0,),
    },
    "small": {
        "rope": (2, 16, 1024, 64), "repeats": 7, "additive": (8, 512, 512), "bias": (8, 8, 512),
        "attention": (2, 8, 1024, 64), "train": {"batch": 8, "length": 32, "vocab": 8000, "dim": 256, "heads": 4,
                                                   "layers": 3, "ffn": 1024, "steps": 2, "warmup": 1},
        "compile": {"batch": 8, "length": 64, "vocab": 2000, "dim": 128, "heads": 4, "layers": 1,
                     "ffn": 512, "new_tokens": 16, "repeats": 5, "schemes": ["rope", "alibi", "t5"], "llama": True},
        "lab": (8192, 256), "angle_positions": (10**4, 10**5, 10**6), "train_dropouts": (0.0,),
    },
    "full": {
        "rope": (8, 16, 1024, 64), "repeats": 15, "additive": (8, 1024, 1024), "bias": (8, 16, 1024),
        "attention": (8, 16, 1024, 64), "train": {"batch": 32, "length": 64, "vocab": 8000, "dim": 256, "heads": 4,
                                                    "layers": 3, "ffn": 1024, "steps": 6, "warmup": 2},
        "compile": {"batch": 8, "length": 128, "vocab": 8000, "dim": 256, "heads": 4, "layers": 3,
                    "ffn": 1024, "new_tokens": 32, "repeats": 7, "schemes": ["rope", "alibi", "t5"], "llama": True},
        "lab": (65536, 1024), "angle_positions": (10**4, 10**5, 10**6), "train_dropouts": (0.0, 0.1),
    },
}


@dataclass
class Case:
    """One comparison: contenders timed side by side on the same input."""

    suite: str
    name: str
    stats: dict[str, Stats] = field(default_factory=dict)
    floor: str | None = None
    posenc: str | None = None
    facts: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"suite": self.suite, "name": self.name, "floor": self.floor, "posenc": self.posenc,
                "stats": {k: v.to_dict() for k, v in self.stats.items()}, "facts": self.facts}


# -- RoPE ---------------------------------------------------------------------------------------------------
def _forward_backward(fn: Callable[[Tensor], Tensor], x: Tensor, grad: Tensor) -> Callable[[], Tensor]:
    def run() -> Tensor:
        x.grad = None
        y = fn(x)
        y.backward(grad)
        return x.grad
    return run


def rope_cases(size: str, *, compile_peers: bool, generator: torch.Generator) -> list[Case]:
    """posenc's rotation vs HF / torchtune / Meta / torch.compile(HF), fwd and fwd+bwd, fp32 and bf16."""
    b, h, t, dh = SIZES[size]["rope"]
    repeats = SIZES[size]["repeats"]
    positions = torch.arange(t)
    configs = [("half", dh, torch.float32), ("interleaved", dh, torch.float32), ("half", dh // 2, torch.float32),
               ("half", dh, torch.bfloat16), ("interleaved", dh, torch.bfloat16)]
    compiled = torch.compile(peers.hf_rope, dynamic=False) if compile_peers else None
    cases = []
    for pairing, rot, dtype in configs:
        rope = RoPE(head_dim=dh, pairing=pairing, rotary_dim=rot)  # type: ignore[arg-type]
        cos, sin = rope.cos_sin(positions)  # (T, P) float32, float64-formed
        x = torch.randn(b, h, t, dh, generator=generator).to(dtype)
        want = rope.rotate_one(x, positions)
        forms: dict[str, Callable[[Tensor], Tensor]] = {"posenc": lambda v, r=rope: r.rotate_one(v, positions)}
        if pairing == "half":
            hc, hs = peers.hf_tables(cos, sin, dtype)
            forms["hf"] = lambda v, c=hc, s=hs: peers.hf_rope(v, c, s)
            if compiled is not None:
                forms["hf+compile"] = lambda v, c=hc, s=hs: compiled(v, c, s)
        else:
            cache, freqs = peers.torchtune_cache(cos, sin), peers.meta_freqs_cis(cos, sin)
            forms["torchtune"] = lambda v, c=cache: peers.torchtune_rope(v, c)
            forms["meta-complex"] = lambda v, f=freqs: peers.meta_rope(v, f)
        tol = 1e-5 if dtype == torch.float32 else 0.1  # bf16 peers round every step in bf16
        facts: dict[str, Any] = {"shape": [b, h, t, dh], "dtype": str(dtype).replace("torch.", ""),
                                 "pairing": pairing, "rotary_dim": rot, "max_abs_diff": {}}
        for name, fn in forms.items():
            facts["max_abs_diff"][name] = check_same(name, fn(x), want, atol=tol, rtol=tol)
        label = f"{pairing}{'' if rot == dh else f' R={rot}'} {facts['dtype']}"
        buf = torch.empty_like(x)
        fwd = {"floor (copy into buffer)": lambda: buf.copy_(x), "clone (copy, fresh)": lambda: x.clone()}
        fwd.update({name: (lambda fn=fn: fn(x)) for name, fn in forms.items()})
        cases.append(Case("rope", f"{label} forward", measure(fwd, repeats=repeats), "floor (copy into buffer)",
                          "posenc", facts))
        xg = x.clone().requires_grad_()
        grad = torch.randn(x.shape, generator=generator).to(dtype)
        gbuf = torch.empty_like(x)
        both = {"floor (2 copies into buffers)": lambda: (buf.copy_(x), gbuf.copy_(grad))}
        both.update({name: _forward_backward(fn, xg, grad) for name, fn in forms.items()})
        cases.append(Case("rope", f"{label} fwd+bwd", measure(both, repeats=repeats),
                          "floor (2 copies into buffers)", "posenc", facts))
    return cases


# -- angles -------------------------------------------------------------------------------------------------
def angle_cases(size: str) -> list[Case]:
    """cos/sin error at large positions by how the angles are formed, and what each way costs per call."""
    dh = 64
    rope = RoPE(head_dim=dh)
    errors: dict[str, dict[str, float]] = {}
    for p in SIZES[size]["angle_positions"]:
        pos = torch.arange(p - 7, p + 1)
        exact = pos.double()[:, None] * rope.inv_freq()
        ref = torch.cat((exact.cos(), exact.sin()), -1)
        c, s = rope.cos_sin(pos)
        f32 = peers.float32_angles(pos, dh)
        bf = pos.to(torch.bfloat16)[:, None] * rope.inv_freq().to(torch.bfloat16)[None, :]
        errors[str(p)] = {
            "posenc (float64 angles, float32 tables)": float((torch.cat((c, s), -1).double() - ref).abs().max()),
            "float32 angles (HF, torchtune, Meta)": float((torch.cat((f32.cos(), f32.sin()), -1).double() - ref).abs().max()),
            "bf16 angles": float((torch.cat((bf.float().cos(), bf.float().sin()), -1).double() - ref).abs().max()),
        }
    t = SIZES[size]["rope"][2]
    pos = torch.arange(t)
    contenders: dict[str, Callable[[], Any]] = {
        "posenc cos_sin (cached rows)": lambda: rope.cos_sin(pos),
        "posenc cos_sin (float64, uncached)": lambda: rope._cos_sin_direct(pos, torch.float32),
        "float32 angles, cos, sin per call": lambda: (lambda a: (a.cos(), a.sin()))(peers.float32_angles(pos, dh)),
    }
    for name in names():  # every other registered RoPE variant: frequency transform formed once, then cached
        if name != "rope" and issubclass(lookup(name), RoPE) and "cos_sin" not in vars(lookup(name)):
            variant = build(name, dim=dh, num_heads=1)
            contenders[f"{name} cos_sin"] = lambda v=variant: v.cos_sin(pos)
    costs = measure(contenders, repeats=SIZES[size]["repeats"] * 5, min_time_s=0.05)
    return [Case("angles", f"cos/sin tables for T={t}, Dh={dh}", costs, None, "posenc cos_sin (cached rows)",
                 {"max_abs_error_vs_float64": errors})]


# -- additive -----------------------------------------------------------------------------------------------
def additive_cases(size: str, *, generator: torch.Generator) -> list[Case]:
    """x + PE: posenc's additive hook vs one read-add-write into a buffer and a precomputed-table add (d2l)."""
    b, t, d = SIZES[size]["additive"]
    x = torch.randn(b, t, d, generator=generator)
    pos = torch.arange(t)
    cases = []
    for name in ("sinusoidal", "learned"):
        scheme = build(name, dim=d, num_heads=1, **({"max_len": t} if name == "learned" else {}))
        with torch.no_grad():
            table = scheme.encode(pos).float()  # (T, D) precomputed, as d2l's PositionalEncoding keeps it
            want = scheme.add(x, pos)
        check_same("precomputed add", x + table, want, atol=1e-6)
        buf = torch.empty_like(x)
        with torch.no_grad():
            stats = measure({
                "floor (read-add-write into buffer)": lambda: torch.add(x, table, out=buf),
                "precomputed table add (d2l)": lambda: x + table,
                "posenc add": lambda s=scheme: s.add(x, pos),
            }, repeats=SIZES[size]["repeats"])
        cases.append(Case("additive", f"{name} ({b}, {t}, {d})", stats, "floor (read-add-write into buffer)",
                          "posenc add", {"shape": [b, t, d]}))
    return cases


# -- bias ---------------------------------------------------------------------------------------------------
def bias_cases(size: str, *, generator: torch.Generator) -> list[Case]:
    """What an ALiBi-biased attention hands the kernel, and what that costs, per masking situation."""
    from posenc import attention as attention_module
    from posenc.attention import MultiHeadAttention

    b, h, t = SIZES[size]["bias"]
    dim = h * 16
    mha = MultiHeadAttention(dim=dim, num_heads=h, position=build("alibi", dim=dim, num_heads=h)).eval()
    plain = MultiHeadAttention(dim=dim, num_heads=h).eval()
    plain.load_state_dict(mha.state_dict())
    x = torch.randn(b, t, dim, generator=generator)
    pad = torch.zeros(b, t, dtype=torch.bool)
    pad[0, -1] = True
    seen: list[tuple[int, ...]] = []
    sdpa = attention_module.F.scaled_dot_product_attention

    def spy(*args: Any, **kwargs: Any) -> Tensor:
        mask = kwargs.get("attn_mask")
        seen.append(tuple(mask.shape) if mask is not None else ())
        return sdpa(*args, **kwargs)

    situations = {
        "shared positions": {},
        "shared positions, causal": {"causal": True},
        "shared positions, key padding": {"key_padding_mask": pad},
        "per-sequence positions": {"q_pos": torch.arange(t).expand(b, t)},
    }
    facts: dict[str, Any] = {}
    attention_module.F.scaled_dot_product_attention = spy  # type: ignore[assignment]
    try:
        with torch.no_grad():
            for label, kwargs in situations.items():
                seen.clear()
                mha(x, **kwargs)
                shape = seen[-1]
                facts.setdefault("mask_handed_to_sdpa", {})[label] = {
                    "shape": "×".join(map(str, shape)), "MiB": math.prod(shape) * 4 / 2**20,
                    "batch dim": bool(shape) and shape[0] == b and b > 1}
    finally:
        attention_module.F.scaled_dot_product_attention = sdpa  # type: ignore[assignment]
    with torch.no_grad():
        stats = measure({
            "attention, no position": lambda: plain(x),
            "attention + ALiBi (H, T, T) bias": lambda: mha(x),
            "ALiBi bias alone": lambda: mha.position.attention_bias(torch.arange(t), torch.arange(t)),
        }, repeats=SIZES[size]["repeats"])
    return [Case("bias", f"ALiBi B={b} H={h} T={t}", stats, "attention, no position",
                 "attention + ALiBi (H, T, T) bias", facts)]


# -- attention ----------------------------------------------------------------------------------------------
def attention_cases(size: str, *, generator: torch.Generator, memory: bool = True) -> list[Case]:
    """F.scaled_dot_product_attention vs naive softmax attention: time and peak memory (fresh processes)."""
    from posenc.bench.worker import run_in_subprocess

    b, h, t, dh = SIZES[size]["attention"]
    q, k, v = (torch.randn(b, h, t, dh, generator=generator) for _ in range(3))
    want = F.scaled_dot_product_attention(q, k, v)
    check_same("naive attention", peers.naive_attention(q, k, v), want, atol=1e-4)
    check_same("naive attention, causal", peers.naive_attention(q, k, v, causal=True),
               F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=1e-4)
    with torch.no_grad():
        stats = measure({
            "sdpa": lambda: F.scaled_dot_product_attention(q, k, v),
            "naive softmax attention": lambda: peers.naive_attention(q, k, v),
        }, repeats=max(3, SIZES[size]["repeats"] // 2))
    facts: dict[str, Any] = {"shape": [b, h, t, dh], "scores_bytes": b * h * t * t * 4}
    if memory:
        facts["peak_extra_mb"] = {
            name: run_in_subprocess({"task": "attention_memory", "kind": kind, "shape": [b, h, t, dh]})["peak_extra_mb"]
            for name, kind in (("sdpa", "sdpa"), ("naive softmax attention", "naive"))
        }
    return [Case("attention", f"attention forward B={b} H={h} T={t} Dh={dh}", stats, None, "sdpa", facts)]


# -- training -----------------------------------------------------------------------------------------------
def train_cases(size: str) -> list[Case]:
    """posenc's EncoderDecoder vs torch.nn.Transformer: training tokens/s and peak memory, fresh process each.

    Dropout 0 (and 0.1 at the full size). Each process pays torch's imports and
    AdamW's first construction before timing starts; neither is timed.
    """
    from posenc.bench.worker import run_in_subprocess

    cfg = SIZES[size]["train"]
    cases = []
    for dropout in SIZES[size]["train_dropouts"]:
        results = {kind: run_in_subprocess({"task": "train", "kind": kind, "dropout": dropout, **cfg})
                   for kind in ("posenc", "torch")}
        stats = {("posenc EncoderDecoder" if k == "posenc" else "torch.nn.Transformer"): Stats(
            median_ms=r["median_step_ms"], p25_ms=r["p25_step_ms"], p75_ms=r["p75_step_ms"], repeats=r["steps"],
            faults_per_call=r["faults_per_step"]) for k, r in results.items()}
        facts = {"config": cfg, "dropout": dropout,
                 "tokens_per_s": {"posenc EncoderDecoder": results["posenc"]["tokens_per_s"],
                                  "torch.nn.Transformer": results["torch"]["tokens_per_s"]},
                 "peak_extra_mb": {"posenc EncoderDecoder": results["posenc"]["peak_extra_mb"],
                                   "torch.nn.Transformer": results["torch"]["peak_extra_mb"]},
                 "parameters": {"posenc EncoderDecoder": results["posenc"]["parameters"],
                                "torch.nn.Transformer": results["torch"]["parameters"]}}
        cases.append(Case("train", f"enc-dec training step, dropout {dropout}", stats, None,
                          "posenc EncoderDecoder", facts))
    return cases


# -- eager vs torch.compile ---------------------------------------------------------------------------------
def compile_cases(size: str) -> list[Case]:
    """Eager vs compiled, training and decoding tokens/s, in two pairs: posenc (RoPE, ALiBi, T5)
    vs torch.nn.Transformer, and posenc Decoder vs HF LlamaForCausalLM on the same weights.

    One fresh process times every contender of both pairs interleaved
    (``posenc.bench.compiled``); compile time (a compiled contender's first
    call) is reported apart. One case per pair and kind; the Llama pair is a
    single "skipped" case, with the reason, where ``transformers`` is missing.
    """
    from posenc.bench.compiled import LLAMA, LLAMA_PEER, PEER
    from posenc.bench.worker import run_in_subprocess

    cfg = SIZES[size]["compile"]
    result = run_in_subprocess({"task": "compile", **cfg})
    pairs = [("seq2seq", [f"posenc {s}" for s in cfg["schemes"]], PEER, "")]
    if "llama" in result["groups"]:
        pairs.append(("llama", [LLAMA], LLAMA_PEER, "Llama "))
    cases = []
    for group, mine, peer, prefix in pairs:
        for kind, what in (("train", "training step (AdamW)"),
                           ("decode", f"greedy decoding, {cfg['new_tokens']} tokens")):
            part = result[kind]
            names = [*mine, peer]
            labels = [f"{m} {mode}" for m in names for mode in ("eager", "compiled")]
            stats = {k: Stats(**part["stats"][k]) for k in labels}
            rate = {k: part["tokens_per_s"][k] for k in labels}
            goals = {f"{m}: compiled >= eager": rate[f"{m} compiled"] >= rate[f"{m} eager"] for m in names}
            goals.update({f"{m} compiled >= {peer} compiled": rate[f"{m} compiled"] >= rate[f"{peer} compiled"]
                          for m in mine})
            facts: dict[str, Any] = {
                "config": cfg, "backend": result["backend"], "tokens_per_s": rate,
                "compile_s": {k: v for k, v in part["compile_s"].items() if k in labels}, "goals_met": goals,
                "parameters": {m: result["parameters"][m] for m in names}}
            if kind == "decode":
                facts["decoded_ids_equal_eager"] = {m: result["decode_agrees"][m] for m in names}
            if group == "llama":
                facts.update({k: v for k, v in result["llama"].items()
                              if k != "decoded_ids_posenc_equal_hf" or kind == "decode"})
            cases.append(Case("compile", f"eager vs torch.compile: {prefix}{what}", stats, None,
                              f"{mine[0]} compiled", facts))
    if "llama" not in result["groups"]:
        cases.append(Case("compile", f"eager vs torch.compile: {LLAMA} vs {LLAMA_PEER}", {}, None, None,
                          {"skipped": result["llama"]["skipped"]}))
    return cases


# -- lab measures at scale ----------------------------------------------------------------------------------
def lab_cases(size: str) -> list[Case]:
    """The lab's shift-is-linear fit and distance profile on an L × d sinusoid table (if the lab exists)."""
    try:
        from posenc.lab import measures
    except ImportError:
        return [Case("lab", "lab measures", {}, None, None, {"skipped": "posenc.lab.measures is not installed"})]
    from posenc.positions.absolute import sinusoid_table

    length, dim = SIZES[size]["lab"]
    table = sinusoid_table(torch.arange(length), dim)  # (L, d) float64
    facts: dict[str, Any] = {"L": length, "d": dim, "table_mb": table.numel() * 8 / 2**20}
    profile = shift = None

    def run_profile() -> None:
        nonlocal profile
        profile = measures.table_distance_profile(table)

    def run_shift() -> None:
        nonlocal shift
        shift = measures.shift_residual(table, offsets=(1,))

    stats = measure({"distance profile": run_profile, "shift-is-linear fit (k=1)": run_shift}, repeats=1, warmup=0)
    assert profile is not None and shift is not None
    facts["profile_method"] = profile["method"]
    facts["profile_max_spread"] = profile["max_spread"]
    facts["shift_method"] = shift["method"]
    facts["shift_max_residual"] = shift["max_residual"]
    return [Case("lab", f"lab measures, sinusoid L={length} d={dim}", stats, None, None, facts)]
