"""The peers posenc is timed against, written from their documented semantics (no copied code).

Each RoPE peer takes x (..., T, Dh) and the tables in the form its library
builds them, and returns the rotated x:

* ``hf_rope`` — Hugging Face ``transformers`` Llama: ``q·cos + rotate_half(q)·sin``
  with ``rotate_half(x) = cat(−x₂, x₁)`` and cos/sin of width Dh (the angle
  row repeated twice), cast to x's dtype; half pairing. With ``rotary_dim``
  < Dh it is the GPT-NeoX/Phi form: rotate the first part, ``cat`` the rest.
* ``torchtune_rope`` — torchtune ``RotaryPositionalEmbeddings``: x in float32
  reshaped to (…, P, 2), a (T, P, 2) cache of (cos, sin), the two products
  stacked and flattened, cast back with ``type_as``; interleaved pairing.
* ``meta_rope`` — Meta's Llama reference: x in float32 viewed as complex,
  times ``freqs_cis`` (complex64), viewed back as real; interleaved pairing.
* ``naive_attention`` — ``softmax(q·kᵀ/√Dh + mask)·v`` with the (B, H, T, T)
  scores materialised, the textbook form SDPA replaces.
* ``TorchTransformerSeq2Seq`` — ``torch.nn.Transformer`` with token embeddings
  (×√d), the same sinusoidal table posenc adds, dropout, and an output head
  tied to the target embedding: posenc's encoder–decoder, built from torch's.

Each library's own way of forming angles is in ``float32_angles`` (HF,
torchtune, Meta: float32) — the bench measures its accuracy separately; the
timed peers get posenc's exact tables so that only the application differs.

Shape legend: B batch, H heads, T sequence length, Dh head width, P pairs,
S source length, V vocabulary, D width.
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.positions.absolute import sinusoid_table


# -- tables in each library's layout -------------------------------------------------
def float32_angles(positions: Tensor, rotary_dim: int, base: float = 10000.0) -> Tensor:
    """p·θ formed in float32 as HF/torchtune/Meta do: θ in float32, positions cast to float32, (T, P)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.int64).float() / rotary_dim))
    return positions.float()[:, None] * inv_freq[None, :]


def hf_tables(cos: Tensor, sin: Tensor, dtype: torch.dtype) -> tuple[Tensor, Tensor]:
    """(T, P) cos/sin → HF's (T, R) layout (``emb = cat(freqs, freqs)``), cast to the activation dtype."""
    return torch.cat((cos, cos), dim=-1).to(dtype), torch.cat((sin, sin), dim=-1).to(dtype)


def torchtune_cache(cos: Tensor, sin: Tensor) -> Tensor:
    """(T, P) cos/sin → torchtune's (T, P, 2) float cache."""
    return torch.stack((cos, sin), dim=-1).float()


def meta_freqs_cis(cos: Tensor, sin: Tensor) -> Tensor:
    """(T, P) cos/sin → Meta's complex64 ``freqs_cis`` (T, P)."""
    return torch.complex(cos.float(), sin.float())


# -- RoPE applications -------------------------------------------------------------------
def rotate_half(x: Tensor) -> Tensor:
    """HF: (x₁, x₂) → (−x₂, x₁) over the two halves of the last dim."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def hf_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """HF form; cos/sin (T, R) from ``hf_tables``; R < Dh rotates the first R coordinates (NeoX)."""
    rot = cos.shape[-1]
    if rot == x.shape[-1]:
        return x * cos + rotate_half(x) * sin
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    return torch.cat((x_rot * cos + rotate_half(x_rot) * sin, x_pass), dim=-1)


def torchtune_rope(x: Tensor, cache: Tensor) -> Tensor:
    """torchtune form; cache (T, P, 2) from ``torchtune_cache``."""
    xs = x.float().reshape(*x.shape[:-1], -1, 2)  # (..., T, P, 2)
    out = torch.stack(
        (xs[..., 0] * cache[..., 0] - xs[..., 1] * cache[..., 1],
         xs[..., 1] * cache[..., 0] + xs[..., 0] * cache[..., 1]),
        dim=-1,
    )
    return out.flatten(-2).type_as(x)


def meta_rope(x: Tensor, freqs_cis: Tensor) -> Tensor:
    """Meta Llama form; freqs_cis (T, P) complex64 from ``meta_freqs_cis``."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    return torch.view_as_real(xc * freqs_cis).flatten(-2).type_as(x)


# -- attention ------------------------------------------------------------------------------
def naive_attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False) -> Tensor:
    """softmax(q·kᵀ/√Dh)·v with the (B, H, Tq, Tk) scores materialised; causal: top-left aligned."""
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # (B, H, Tq, Tk)
    if causal:
        tq, tk = q.shape[-2], k.shape[-2]
        mask = torch.ones(tq, tk, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


# -- the torch.nn.Transformer seq2seq model ------------------------------------------------
class TorchTransformerSeq2Seq(nn.Module):
    """``torch.nn.Transformer`` wrapped as a translation model the way its tutorial does.

    Token embeddings ×√D, plus the float64-formed sinusoidal table cast to
    float32 (the same one posenc adds), dropout, ``nn.Transformer`` with a
    causal target mask, final norms, and an output head tied to the target
    embedding. Pre-norm (``norm_first=True``) to match posenc's default.
    """

    def __init__(self, *, vocab_size: int, dim: int, num_heads: int, num_layers: int, ffn_dim: int,
                 dropout: float, max_len: int = 1024, norm_first: bool = True) -> None:
        super().__init__()
        self.dim = dim
        self.src_embed = nn.Embedding(vocab_size, dim)
        self.tgt_embed = nn.Embedding(vocab_size, dim)
        for emb in (self.src_embed, self.tgt_embed):
            nn.init.normal_(emb.weight, std=dim**-0.5)
        self.register_buffer("pe", sinusoid_table(torch.arange(max_len), dim).float(), persistent=False)
        self.dropout = nn.Dropout(dropout)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "enable_nested_tensor ... norm_first": an inference-only fast path
            self.transformer = nn.Transformer(
                d_model=dim, nhead=num_heads, num_encoder_layers=num_layers, num_decoder_layers=num_layers,
                dim_feedforward=ffn_dim, dropout=dropout, batch_first=True, norm_first=norm_first)

    def embed(self, emb: nn.Embedding, ids: Tensor) -> Tensor:
        return self.dropout(emb(ids) * math.sqrt(self.dim) + self.pe[: ids.shape[1]])  # (B, T, D)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.shape[1], device=tgt.device)
        h = self.transformer(self.embed(self.src_embed, src), self.embed(self.tgt_embed, tgt),
                             tgt_mask=causal, tgt_is_causal=True)
        return F.linear(h, self.tgt_embed.weight)  # (B, T, V), tied head
