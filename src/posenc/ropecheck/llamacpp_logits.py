"""llama.cpp's next-token distributions against posenc's, on the same GGUF file and the same tokens: the
end-to-end half of ``posenc rope --engines llama.cpp``.

The RoPE probe (``posenc.ropecheck.llamacpp``) checks llama.cpp's reading of the file and its kernel one layer
group at a time, but cannot follow a YaRN file: llama.cpp forms YaRN's attention factor inside its context
without printing it. This check follows every scaling, because it compares what the whole model computes:

1. **llama.cpp's own program** ``llama-perplexity -m FILE -f TEXT -c N --chunks 1 --kl-divergence-base OUT``
   tokenizes the text, runs the first N tokens and writes its token ids and, for each of the chunk's second
   half (positions N/2 … N − 2), the log-probabilities of the whole vocabulary (16 bits over the 16 nats
   below the largest: within 1.3e-4 nats; the format of ``tools/perplexity/perplexity.cpp``).
2. **posenc** loads the same file as stored and scores the very same ids, once as it reads the file's
   positions and once per *wrong reading* of them — the bug classes of ``posenc.ropecheck.engines`` at the
   level of the whole model (the scaling dropped, YaRN's attention factor collapsed to 1, a scaling on the
   wrong layer type, the other pairing, θ at its default).
3. Per reading: the mean KL divergence KL(llama.cpp ‖ posenc) over the scored positions, the mean and largest
   |Δ| of the next token's loss, and how often the two agree on the most likely token.

Verdict: ``agrees`` when posenc's own reading is the nearest one and within :data:`KL_AGREES` (the distance two
correct programs keep on quantised weights: different kernels, different rounding); ``differs`` otherwise,
named by the nearest wrong reading when one is nearer than posenc's. Each wrong reading's own distance is
printed, so a reader sees that the check can tell them apart (a reading that moves the distributions less than
the tolerance could not be caught, and is said so).

The prompt: the first N tokens of Debian's licence texts (``posenc.extend.texts``; llama-perplexity needs 2N
tokens of text). N defaults to :data:`DEFAULT_TOKENS`; a file whose scaling switches at its original context
(LongRoPE in llama.cpp) needs N past that context for the switch to be crossed — ``--logits-tokens`` sets it.
"""

from __future__ import annotations

import dataclasses
import math
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from posenc.ropecheck.llamacpp import Unavailable  # the check cannot run here (the message says why)

#: Tokens of the prompt (llama-perplexity's context); the second half is scored.
DEFAULT_TOKENS = 512
#: Mean KL(llama.cpp ‖ posenc) in nats at or below which the two programs agree. Measured: the as-stored
#: SmolLM2 and Gemma 3 files keep well below it under the right reading, while every wrong reading tried moves
#: them above it (docs/rope.md's llama.cpp logits table, recorded by benchmarks/rope).
KL_AGREES = 0.02
#: |Δ loss| of one token (nats) past which a position counts as diverging (``first_diverging``).
TOKEN_DIVERGES = 0.25


# -- llama.cpp's side ----------------------------------------------------------------------------------------------
def read_logprobs(path: str | Path) -> dict[str, Any]:
    """A ``--kl-divergence-base`` file of llama-perplexity → {"n_ctx", "n_vocab", "tokens" (int64, the chunk),
    "logprobs" (float64, (N/2 − 1, V): llama.cpp's log-probabilities at positions N/2 … N − 2)}.

    Format (``tools/perplexity/perplexity.cpp``): ``_logits_``, int32 n_ctx, n_vocab, n_chunk, the chunks'
    int32 tokens, then per scored row ``nv = 2·⌈V/2⌉ + 4`` uint16: float32 scale and minimum, then one uint16
    per token, log p = minimum + scale · q (q = 0: at or below the minimum, 16 nats under the largest).
    """
    raw = Path(path).read_bytes()
    if raw[:8] != b"_logits_":
        raise Unavailable(f"{path}: not a llama-perplexity logits file (it starts with {raw[:8]!r})")
    n_ctx, n_vocab, n_chunk = struct.unpack_from("<iii", raw, 8)
    at = 20
    tokens = np.frombuffer(raw, dtype="<i4", count=n_chunk * n_ctx, offset=at).astype(np.int64)
    at += 4 * n_chunk * n_ctx
    nv = 2 * ((n_vocab + 1) // 2) + 4
    rows = n_ctx - 1 - n_ctx // 2
    if len(raw) < at + rows * nv * 2:
        raise Unavailable(f"{path}: {len(raw)} bytes, short of the {rows} scored rows of {n_vocab} tokens")
    block = np.frombuffer(raw, dtype="<u2", count=rows * nv, offset=at).reshape(rows, nv)
    head = block[:, :4].copy().view("<f4")  # (rows, 2): scale, minimum
    q = block[:, 4 : 4 + n_vocab].astype(np.float64)
    logprobs = head[:, 1:2].astype(np.float64) + head[:, 0:1].astype(np.float64) * q
    return {"n_ctx": n_ctx, "n_vocab": n_vocab, "tokens": torch.from_numpy(tokens[:n_ctx].copy()),
            "logprobs": torch.from_numpy(logprobs)}


def llama_logprobs(perplexity: Path, gguf: str | Path, text: Path, tokens: int, *, threads: int,
                   work: Path) -> dict[str, Any]:
    """Run llama-perplexity on the first ``tokens`` tokens of ``text``; its ids and log-probabilities."""
    out = work / "llama-logits.bin"
    cmd = [str(perplexity), "-m", str(gguf), "-f", str(text), "-c", str(tokens), "-b", str(tokens), "--chunks", "1",
           "-t", str(threads), "--kl-divergence-base", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode or not out.is_file():
        lines = [line for line in (done.stderr + done.stdout).strip().splitlines() if line.strip()]
        raise Unavailable(f"llama-perplexity failed (exit {done.returncode}): " + " | ".join(lines[-2:])[:400])
    return read_logprobs(out)


# -- posenc's side -------------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Reading:
    """One reading of the file's positions: posenc's own (``bug`` None) or a published wrong one."""

    bug: str | None
    why: str
    plan: list[dict[str, Any]]
    short: str = ""  # a few words that tell two readings of one bug class apart


def readings(model: Any) -> list[Reading]:
    """posenc's reading of the model's per-layer positions, then each wrong reading that changes it."""
    plan = [spec.to_dict() for spec in model.config.plan]
    out = [Reading(None, "posenc's reading of the file", plan)]
    rotary = [i for i, s in enumerate(plan) if str(s["position"]).startswith("rope")]
    if not rotary:
        return out

    def changed(change: Callable[[dict[str, Any]], dict[str, Any] | None], layers: list[int]) -> list[dict[str, Any]]:
        new = [dict(s, position_options=dict(s["position_options"])) for s in plan]
        for i in layers:
            spec = change(new[i])
            if spec is not None:
                new[i] = spec
        return new

    def add(bug: str, why: str, new: list[dict[str, Any]], short: str = "") -> None:
        if new != plan and all(new != r.plan for r in out):
            out.append(Reading(bug, why, new, short))

    def plain(spec: dict[str, Any]) -> dict[str, Any]:
        keep = {k: v for k, v in spec["position_options"].items() if k in ("base", "pairing", "rotary_dim")}
        return {**spec, "position": "rope", "position_options": keep}

    scaled = [i for i in rotary if plan[i]["position"] != "rope"]
    unscaled = [i for i in rotary if plan[i]["position"] == "rope"]
    if scaled:
        kinds = sorted({plan[i]["position"] for i in scaled})
        if unscaled:
            add("scaling-on-wrong-layers", f"the {'/'.join(kinds)} scaling of layers {_span(scaled)} not applied "
                "(a port that scales the other layer type)", changed(plain, scaled), "none scaled")
            first = plan[scaled[0]]

            def spread(spec: dict[str, Any]) -> dict[str, Any]:
                opts = {**first["position_options"], "base": spec["position_options"].get("base", 10000.0)}
                return {**spec, "position": first["position"], "position_options": opts}

            add("scaling-on-wrong-layers", f"the {first['position']} scaling applied to layers {_span(unscaled)} "
                "as well (a port that scales every layer)", changed(spread, unscaled), "all scaled")
        else:
            add("scaling-dropped", "the scaling block never read: plain RoPE at the file's base (YaRN keys "
                "missing from a converted GGUF, a reader of another key)", changed(plain, scaled))
        if any(plan[i]["position"] == "rope-yarn" for i in scaled):
            add("attention-factor-one", "YaRN's attention factor collapsed to 1 (exllamav3 with mscale == "
                "mscale_all_dim == 1)", changed(lambda s: {**s, "position_options": {
                    **s["position_options"], "attention_factor": 1.0}} if s["position"] == "rope-yarn" else None,
                    scaled))
        if any(plan[i]["position"] == "rope-llama3" for i in scaled):
            add("llama3-scaling-misread", "the factor applied to every pair (read as linear scaling)",
                changed(lambda s: {**s, "position": "rope-linear", "position_options": {
                    **plain(s)["position_options"], "factor": s["position_options"].get("factor", 8.0)}}
                    if s["position"] == "rope-llama3" else None, scaled))
    bases = {float(plan[i]["position_options"].get("base", 10000.0)) for i in rotary}
    if bases != {10000.0}:
        add("theta-default", "rope_theta not read: the default base 10000", changed(lambda s: {
            **s, "position_options": {**s["position_options"], "base": 10000.0}}, rotary))

    def flip(spec: dict[str, Any]) -> dict[str, Any]:
        opts = spec["position_options"]
        return {**spec, "position_options": {**opts, "pairing": "half" if opts.get("pairing") == "interleaved"
                                             else "interleaved"}}

    add("pairing", "the other pairing rotated where the q/k rows are in this one (a fused kernel's convention, "
        "or rows not permuted on conversion)", changed(flip, rotary))
    return out


def _span(layers: list[int]) -> str:
    return f"{layers[0]}-{layers[-1]}" if layers == list(range(layers[0], layers[-1] + 1)) else str(layers)


def with_plan(model: Any, plan: list[dict[str, Any]]) -> Any:
    """``model`` rebuilt with another per-layer plan, sharing its weights (quantised ones are not copied)."""
    from posenc.extend.methods import default_builder
    from posenc.pretrained.as_stored import share_quantised

    if plan == [spec.to_dict() for spec in model.config.plan]:
        return model
    config = dataclasses.replace(model.config, layer_plan=plan, sliding_window=None)
    first = next(model.parameters())
    variant = default_builder(model)(config).to(device=first.device, dtype=first.dtype)
    share_quantised(model, variant)
    variant.load_state_dict(model.state_dict(), strict=True)
    return variant.eval()


def posenc_logprobs(model: Any, ids: torch.Tensor, *, chunk: int = 64) -> torch.Tensor:
    """float64 log-probabilities at positions N/2 … N − 2 of one pass over ``ids`` (N,)."""
    n = ids.numel()
    first = n // 2
    with torch.no_grad():
        h = model.hidden(ids[None])[0, first : n - 1]
        return torch.cat([torch.log_softmax(model.logits(h[i : i + chunk], pass_rows=h.shape[0]).double(), -1)
                          for i in range(0, h.shape[0], chunk)])


def distance(llama: torch.Tensor, ours: torch.Tensor, targets: torch.Tensor) -> dict[str, Any]:
    """llama.cpp's (R, V) log-probabilities against posenc's: KL(llama.cpp ‖ posenc) per row, |Δ loss| of each
    next token, top-1 agreement.

    The KL divergence is llama-perplexity's own (``--kl-divergence``): Σ p (log p − log q) over the tokens whose
    stored log-probability is above −16 (below it the 16-bit rows hold only a floor), not renormalised."""
    kept = llama > -16.0
    kl = torch.where(kept, llama.exp() * (llama - ours), torch.zeros_like(llama)).sum(-1)
    rows = torch.arange(targets.numel())
    dloss = (llama[rows, targets] - ours[rows, targets]).abs()
    return {"kl": kl, "dloss": dloss, "top1": float((llama.argmax(-1) == ours.argmax(-1)).double().mean()),
            "nll": float(-ours[rows, targets].mean()), "nll_llama": float(-llama[rows, targets].mean())}


def check(perplexity: Path, gguf: str | Path, *, tokens: int = DEFAULT_TOKENS, threads: int = 1,
          say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The whole check on one GGUF file: a row of ``posenc rope --engines`` (layer_type ``logits``).

    Raises:
        Unavailable: no licence text to read, or llama-perplexity failed (the message quotes it).
    """
    from posenc.extend.texts import licenses_text
    from posenc.pretrained import load_pretrained

    if tokens < 16:
        raise ValueError(f"--logits-tokens {tokens}: the prompt needs at least 16 tokens (half of them scored)")
    say = say or (lambda line: None)
    try:
        text = licenses_text()
    except FileNotFoundError as err:
        raise Unavailable(f"no text to score: {err}") from None
    with tempfile.TemporaryDirectory(prefix="posenc-llama-logits-") as tmp:
        work = Path(tmp)
        (work / "text.txt").write_text(text, encoding="utf-8")
        say(f"llama.cpp logits: llama-perplexity on the first {tokens} tokens of the licence texts")
        llama = llama_logprobs(perplexity, gguf, work / "text.txt", tokens, threads=threads, work=work)
    say("llama.cpp logits: posenc on the same ids, as it reads the file and as each wrong reading would")
    pm = load_pretrained(gguf)
    ids = llama["tokens"]
    if int(ids.max()) >= pm.model.config.vocab_size:
        raise Unavailable(f"llama.cpp's token id {int(ids.max())} is outside posenc's vocabulary of "
                          f"{pm.model.config.vocab_size}: the two read different vocabularies")
    targets = ids[tokens // 2 + 1 :]
    results = []
    for reading in readings(pm.model):
        ours = posenc_logprobs(with_plan(pm.model, reading.plan), ids)
        d = distance(llama["logprobs"], ours, targets)
        results.append({"bug_class": reading.bug, "short": reading.short, "reading": reading.why,
                        "mean_kl": float(d["kl"].mean()),
                        "mean_abs_dloss": float(d["dloss"].mean()), "max_abs_dloss": float(d["dloss"].max()),
                        "top1_agree": d["top1"], "nll_posenc": d["nll"], "nll_llama": d["nll_llama"],
                        "_dloss": d["dloss"]})
    return verdict(results, tokens)


def verdict(results: list[dict[str, Any]], tokens: int) -> dict[str, Any]:
    """The engine row from the readings' distances (the first is posenc's own reading)."""
    own, wrong = results[0], results[1:]
    nearest = min(wrong, key=lambda r: r["mean_kl"], default=None)
    first = tokens // 2
    over = torch.nonzero(own["_dloss"] > TOKEN_DIVERGES)
    row: dict[str, Any] = {"layer_type": "logits", "scheme": "whole model", "max_abs_err": own["max_abs_dloss"],
                           "first_diverging": None, "bug_class": None}
    if own["mean_kl"] <= KL_AGREES and (nearest is None or own["mean_kl"] < nearest["mean_kl"]):
        row["status"] = "agrees"
    else:
        row["status"] = "differs"
        if len(over):
            row["first_diverging"] = {"pair": None, "position": first + int(over[0])}
        if nearest is not None and nearest["mean_kl"] < own["mean_kl"]:
            row["bug_class"] = nearest["bug_class"]
    blind = [_name(r) for r in wrong if r["mean_kl"] <= KL_AGREES]
    row["reason"] = (f"next-token distributions on {tokens} tokens (positions {first}-{tokens - 2} scored): mean "
                     f"KL(llama.cpp ‖ posenc) {own['mean_kl']:.2g} nats, top-1 equal {own['top1_agree']:.1%}, mean "
                     f"loss {own['nll_llama']:.4f} vs {own['nll_posenc']:.4f}; wrong readings: "
                     + (", ".join(f"{_name(r)} {r['mean_kl']:.2g}" for r in wrong) or "none apply")
                     + (f" (within the {KL_AGREES:g} tolerance, so not told apart here: {', '.join(blind)})"
                        if blind else ""))
    row["logits"] = {"tokens": tokens, "scored": tokens - 1 - first, "kl_agrees": KL_AGREES,
                     "readings": [{k: (None if isinstance(v, float) and math.isnan(v) else v)
                                   for k, v in r.items() if not k.startswith("_")} for r in results]}
    return row


def _name(result: dict[str, Any]) -> str:
    return f"{result['bug_class']} ({result['short']})" if result.get("short") else str(result["bug_class"])
