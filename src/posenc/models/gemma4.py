"""Gemma 4's text decoder: the parts it has beyond posenc's Llama-family decoder, and its builder.

Gemma 4 is Gemma 3's layout (sandwich norms, QK-norm, GeGLU, ×√D, 5 sliding :
1 global layers) with these additions, each a part here:

* **per-layer attention widths** — the global layers have their own head width
  (``global_head_dim``, 512 against 256) and may have their own key/value head
  count; ``Gemma4Config.layer_head_dims`` / ``layer_kv_heads`` give one per layer.
* **values from the keys** (``attention_k_eq_v``) — a global layer without a
  value projection uses its raw key projection as values (before the k-norm
  and the rotation).
* **a value norm** — each head's values are RMS-normalised without a gain
  (``rms-unit``), as queries and keys are with one.
* **KV sharing** (``num_kv_shared_layers``) — the last N layers have no key/value
  projections: each reuses the keys and values (already normed, rotated and
  cached) of the last earlier layer with the same window, the *producer*; its
  own queries attend to them through its own window. In cached decoding a
  consumer's cache stays empty and the producer's cache serves both. Consumers
  may have a feed-forward twice as wide (``use_double_wide_mlp``).
* **per-layer embeddings** (PLE, ``hidden_size_per_layer_input`` P) — a second
  token table of width L·P (×√P) plus a projection of the scaled token vectors
  (×D^−½, RMS-normed per layer slice) are averaged (×2^−½) into one P-vector per
  token and layer; after its FFN each layer adds
  norm(proj_P→D(gelu(gate_D→P(x)) · ple_i)) to its stream.

and every layer's output is multiplied by a learned scalar (``layer_scalar``). The
26B-A4B size adds a mixture-of-experts branch beside each dense FFN (``Gemma4MoE``:
a router choosing k of E gated experts per token).
Norms are ``rms-float`` (HF ``Gemma4RMSNorm``: the gain multiplied in float32,
not zero-centred); the softmax scale is 1 (the QK-norm gains carry it).

``Gemma4Config`` is a ``DecoderConfig`` with these fields; ``build_decoder`` hands
it to ``build_gemma4`` (its ``build_model``), so loading, ``generate``,
``describe`` and ``posenc inspect`` treat it as any decoder. The HF reader is
``posenc.families.gemma4``.

Reference used to verify: HF ``Gemma4ForCausalLM`` on tiny random checkpoints
with every part on (``tests/families/test_gemma4.py``).

Shape legend: B batch, T sequence length, D model width, L layers, P per-layer
embedding width, H query heads, Hkv key/value heads, Dh head width.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.attention import KVCache, MultiHeadAttention
from posenc.checks import compiling
from posenc.embedding import OutputHead, TokenEmbedding
from posenc.models.builders import output_head_for
from posenc.models.decoder_parts import FFNS, NORMS, GatedFFN, UnitRMSNorm
from posenc.models.decoder import DecoderConfig, Decoder
from posenc.plan import LayerSpec
from posenc.positions import PositionScheme, build
from posenc.positions.rotary import positions_fixed

#: KV-sharing roles: a layer that keeps its keys/values for later layers, and one that reuses them.
STORE, REUSE = "store", "reuse"


@dataclass(frozen=True, kw_only=True)
class Gemma4Config(DecoderConfig):
    """A ``DecoderConfig`` with Gemma 4's parts (module docstring); plain data.

    Args:
        layer_head_dims: each layer's head width; None: ``head_dim`` everywhere.
        layer_kv_heads: each layer's key/value heads; None: ``num_kv_heads`` everywhere.
        k_eq_v: full-window layers take their values from the key projection (no v_proj).
        v_norm: RMS-normalise each head's values (no gain).
        kv_shared_layers: the last N layers reuse the keys/values of the last earlier layer
            with the same window (0: none).
        double_wide_ffn: the KV-sharing layers' FFN is 2·``ffn_dim`` wide.
        ple_dim: per-layer embedding width P (0: no per-layer embeddings).
        ple_vocab: rows of the per-layer table (default ``vocab_size``).
        layer_scalar: every layer's output is multiplied by a learned scalar.
        num_experts, top_k_experts, moe_ffn_dim: the mixture-of-experts block beside every
            layer's dense FFN (26B-A4B): E experts of width ``moe_ffn_dim``, k chosen per token
            (0: no experts).
    """

    layer_head_dims: Sequence[int] | None = None
    layer_kv_heads: Sequence[int] | None = None
    k_eq_v: bool = False
    v_norm: bool = True
    kv_shared_layers: int = 0
    double_wide_ffn: bool = False
    ple_dim: int = 0
    ple_vocab: int | None = None
    layer_scalar: bool = True
    num_experts: int = 0
    top_k_experts: int = 0
    moe_ffn_dim: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name, default in (("layer_head_dims", self.attention_head_dim), ("layer_kv_heads", self.kv_heads)):
            values = getattr(self, name)
            if values is None:
                continue
            values = tuple(values)
            if len(values) != self.num_layers or any(isinstance(v, bool) or not isinstance(v, int) or v < 1
                                                     for v in values):
                raise ValueError(f"Gemma4Config.{name} must hold one positive integer per layer "
                                 f"({self.num_layers}), got {values!r}")
            object.__setattr__(self, name, values)
        for i, kv in enumerate(self.kv_heads_per_layer()):
            if self.num_heads % kv:
                raise ValueError(f"layer {i}: num_heads={self.num_heads} is not a multiple of its {kv} kv heads")
        n = self.kv_shared_layers
        if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < self.num_layers:
            raise ValueError(f"Gemma4Config.kv_shared_layers must be in 0 … {self.num_layers - 1} (a layer must "
                             f"produce the keys the others share), got {n!r}")
        self.sharing()  # every consumer has a producer
        if isinstance(self.ple_dim, bool) or not isinstance(self.ple_dim, int) or self.ple_dim < 0:
            raise ValueError(f"Gemma4Config.ple_dim must be an integer >= 0, got {self.ple_dim!r}")
        if self.ple_vocab is not None and (not isinstance(self.ple_vocab, int) or self.ple_vocab < 1):
            raise ValueError(f"Gemma4Config.ple_vocab must be a positive integer or None, got {self.ple_vocab!r}")
        moe = (self.num_experts, self.top_k_experts, self.moe_ffn_dim)
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in moe) or \
                (any(moe) and not (self.num_experts >= self.top_k_experts >= 1 and self.moe_ffn_dim >= 1)):
            raise ValueError(f"Gemma4Config: num_experts={self.num_experts}, top_k_experts={self.top_k_experts}, "
                             f"moe_ffn_dim={self.moe_ffn_dim} must all be 0 (no experts) or E >= k >= 1 and a "
                             "positive width")

    def head_dims(self) -> tuple[int, ...]:
        """Each layer's head width."""
        return tuple(self.layer_head_dims) if self.layer_head_dims else (self.attention_head_dim,) * self.num_layers

    def kv_heads_per_layer(self) -> tuple[int, ...]:
        """Each layer's key/value heads."""
        return tuple(self.layer_kv_heads) if self.layer_kv_heads else (self.kv_heads,) * self.num_layers

    def sharing(self) -> list[tuple[str | None, str]]:
        """Each layer's (KV-sharing role, window kind): role None, "store" (a producer) or "reuse" (a consumer).

        A consumer reuses the last layer before the first consumer that has its window (HF's
        ``kv_sharing_modes``; the window kind stands for HF's layer type).

        Raises:
            ValueError: a consumer whose window no earlier layer has.
        """
        kinds = [str(spec.window) for spec in self.plan]
        first = self.num_layers - self.kv_shared_layers
        roles: list[str | None] = [None if i < first else REUSE for i in range(self.num_layers)]
        if self.kv_shared_layers:
            for kind in sorted(set(kinds[first:])):
                producers = [i for i in range(first) if kinds[i] == kind]
                if not producers:
                    raise ValueError(f"the KV-sharing layers {first} … {self.num_layers - 1} include a {kind} layer, "
                                     f"but no layer before {first} has that window to share its keys")
                roles[producers[-1]] = STORE
        return list(zip(roles, kinds))

    def build_model(self, *, device: str | torch.device | None = None) -> "Gemma4LM":
        """``build_decoder`` calls this: the Gemma 4 decoder."""
        return build_gemma4(self, device=device)


class Gemma4Attention(MultiHeadAttention):
    """Grouped-query attention with Gemma 4's value norm, values from keys, and KV sharing.

    Args (besides ``MultiHeadAttention``'s):
        v_norm: applied to each head's values (None: none).
        values_from_keys: no value projection; values are the key projection (before k-norm, rotation).
        role: None, "store" (leave keys/values in ``shared_kv`` for later layers) or "reuse"
            (no key/value projections: attend to what the producer of ``kind`` left).
        kind: the window kind that names the shared entry.
    """

    def __init__(self, *, v_norm: nn.Module | None = None, values_from_keys: bool = False, role: str | None = None,
                 kind: str = "full", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.role, self.kind = role, kind
        self.v_norm = None if role == REUSE else v_norm
        if role == REUSE:
            self.k_proj = self.v_proj = self.k_norm = None  # type: ignore[assignment]
        elif values_from_keys:
            self.v_proj = None  # type: ignore[assignment]

    def forward(self, x: Tensor, *, q_pos: Tensor, cache: KVCache | None = None,  # type: ignore[override]
                shared_kv: dict[str, tuple] | None = None) -> tuple[Tensor, None]:
        """Causal self-attention of ``x`` (B, T, D) at ``q_pos``; returns (output (B, T, D), None)."""
        batch, q_len, _ = x.shape
        q = self._heads(self.q_proj(x), self.num_heads)  # (B, H, T, Dh)
        if self.q_norm is not None:
            q = self.q_norm(q)
        if self.role == REUSE:
            if shared_kv is None or self.kind not in shared_kv:
                raise RuntimeError(f"a KV-sharing layer ({self.kind}) ran before its producer")
            k, v, k_pos, k_start, offset = shared_kv[self.kind]
            q = self.position.rotate_query(q, q_pos)
        else:
            offset = cache.length if cache is not None else 0  # sequence index of the first query
            projected = self.k_proj(x)
            k = self._heads(projected, self.num_kv_heads)  # (B, Hkv, T, Dh)
            v = k if self.v_proj is None else self._heads(self.v_proj(x), self.num_kv_heads)
            if self.k_norm is not None:
                k = self.k_norm(k)
            if self.v_norm is not None:
                v = self.v_norm(v)
            q, k = self.position.rotate(q, k, q_pos, q_pos)
            k_pos, k_start = q_pos, 0
            if cache is not None:
                k_start = cache.dropped
                k, v, k_pos = cache.append(k, v, k_pos)
            if self.role == STORE and shared_kv is not None:
                shared_kv[self.kind] = (k, v, k_pos, k_start, offset)  # before the window drops any
        windowed = not self.window.full
        if windowed and self.window.binds(k_start, offset + q_len - 1):
            out = self._windowed(q, k, v, q_pos, k_pos, offset=offset, k_start=k_start)
        else:
            out, _ = self._attend(q, k, v, q_pos, k_pos, causal=True)
        if windowed and cache is not None and self.role != REUSE:
            cache.keep_from(self.window.first_visible(offset + q_len))
        out = out.transpose(1, 2).reshape(batch, q_len, self.num_heads * self.head_dim)
        return self.out_proj(out), None


class PerLayerEmbedding(nn.Module):
    """Gemma 4's per-layer inputs: ((norm(proj(x)·D^−½) + table(ids)·√P) · 2^−½), one P-vector per layer.

    Args:
        vocab_size: rows of the table; num_layers: L; dim: D; ple_dim: P; norm: the P-wide norm.
    """

    def __init__(self, *, vocab_size: int, num_layers: int, dim: int, ple_dim: int, norm: nn.Module) -> None:
        super().__init__()
        self.num_layers, self.dim, self.ple_dim = num_layers, dim, ple_dim
        self.embed = TokenEmbedding(vocab_size=vocab_size, dim=num_layers * ple_dim, scale=False)
        self.projection = nn.Linear(dim, num_layers * ple_dim, bias=False)
        self.norm = norm

    def forward(self, ids: Tensor, x: Tensor) -> Tensor:
        """ids (B, T) and the scaled token vectors x (B, T, D) → (B, T, L, P)."""
        shape = (*ids.shape, self.num_layers, self.ple_dim)
        table = self.embed(ids)
        table = (table * torch.tensor(self.ple_dim ** 0.5, dtype=table.dtype, device=table.device)).view(shape)
        projected = self.norm((self.projection(x) * self.dim ** -0.5).view(shape))
        return (projected + table) * 2 ** -0.5


class Gemma4Router(nn.Module):
    """Picks k of E experts per token (HF ``Gemma4TextRouter``): softmax over proj(unit-rms(x) · s · D^−½),
    the top k renormalised to sum 1, then × a learned scale per expert."""

    def __init__(self, *, dim: int, num_experts: int, top_k: int, eps: float) -> None:
        super().__init__()
        self.top_k = top_k
        self.norm = UnitRMSNorm(dim, eps=eps)
        self.proj = nn.Linear(dim, num_experts, bias=False)
        self.scale = nn.Parameter(torch.ones(dim))
        self.per_expert_scale = nn.Parameter(torch.ones(num_experts))

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (N, D) → (weights (N, k), expert indices (N, k))."""
        scores = self.proj(self.norm(x) * self.scale * x.shape[-1] ** -0.5)  # (N, E)
        weights, index = torch.topk(scores.softmax(dim=-1, dtype=torch.float32), k=self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights * self.per_expert_scale[index], index


class Gemma4Experts(nn.Module):
    """E gated experts stored as two 3-D tensors (HF ``Gemma4TextExperts``): gate_up (E, 2F, D), down (E, D, F)."""

    def __init__(self, *, dim: int, hidden: int, num_experts: int, activation: str) -> None:
        super().__init__()
        self.activation = activation
        self.gate_up_proj = nn.Parameter(torch.empty(num_experts, 2 * hidden, dim))
        self.down_proj = nn.Parameter(torch.empty(num_experts, dim, hidden))
        nn.init.normal_(self.gate_up_proj, std=dim ** -0.5)
        nn.init.normal_(self.down_proj, std=hidden ** -0.5)

    def forward(self, x: Tensor, index: Tensor, weights: Tensor) -> Tensor:
        """x (N, D), index/weights (N, k) → Σ_k weight · expert_k(x), (N, D); only the chosen experts run."""
        out = torch.zeros_like(x)
        for expert in index.unique().tolist():
            token, slot = torch.where(index == expert)  # the tokens that chose this expert, and in which slot
            gate, up = F.linear(x[token], self.gate_up_proj[expert]).chunk(2, dim=-1)
            y = F.linear(FFNS[self.activation](gate) * up, self.down_proj[expert])
            out.index_add_(0, token, (y * weights[token, slot, None]).to(out.dtype))
        return out


class Gemma4MoE(nn.Module):
    """The expert branch beside the dense FFN: post₂(experts(pre₂(x), router(x))), x the FFN's residual input."""

    def __init__(self, *, dim: int, hidden: int, num_experts: int, top_k: int, activation: str, norm: Any,
                 eps: float) -> None:
        super().__init__()
        self.router = Gemma4Router(dim=dim, num_experts=num_experts, top_k=top_k, eps=eps)
        self.experts = Gemma4Experts(dim=dim, hidden=hidden, num_experts=num_experts, activation=activation)
        self.pre_norm, self.post_norm = norm(dim, eps=eps), norm(dim, eps=eps)

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, x.shape[-1])  # (B·T, D)
        weights, index = self.router(flat)
        return self.post_norm(self.experts(self.pre_norm(flat), index, weights).reshape(x.shape))


class Gemma4Block(nn.Module):
    """Gemma 4's layer: sandwich-normed attention and FFN, then the per-layer input, then × the layer scalar."""

    def __init__(self, *, attn: Gemma4Attention, ffn: nn.Module, attn_norm: nn.Module, attn_post_norm: nn.Module,
                 ffn_norm: nn.Module, ffn_post_norm: nn.Module, ple: tuple[nn.Module, nn.Module, nn.Module] | None,
                 activation: str, layer_scalar: bool, moe: Gemma4MoE | None = None,
                 ffn_moe_norm: nn.Module | None = None) -> None:
        super().__init__()
        self.attn_norm, self.attn, self.attn_post_norm = attn_norm, attn, attn_post_norm
        self.ffn_norm, self.ffn, self.ffn_post_norm = ffn_norm, ffn, ffn_post_norm
        #: with experts: the dense FFN's own post-norm before the two branches are summed (HF ``_1``)
        self.moe, self.ffn_moe_norm = moe, ffn_moe_norm
        self.ple_gate, self.ple_proj, self.ple_norm = ple if ple is not None else (None, None, None)
        self.activation = activation
        self.layer_scalar = nn.Parameter(torch.ones(1)) if layer_scalar else None

    def forward(self, x: Tensor, *, positions: Tensor, cache: KVCache | None = None, ple_input: Tensor | None = None,
                shared_kv: dict[str, tuple] | None = None) -> Tensor:
        h, _ = self.attn(self.attn_norm(x), q_pos=positions, cache=cache, shared_kv=shared_kv)
        x = x + self.attn_post_norm(h)
        h = self.ffn(self.ffn_norm(x))
        if self.moe is not None:
            assert self.ffn_moe_norm is not None
            h = self.ffn_moe_norm(h) + self.moe(x)
        x = x + self.ffn_post_norm(h)
        if self.ple_gate is not None:
            assert self.ple_proj is not None and self.ple_norm is not None and ple_input is not None
            gated = FFNS[self.activation](self.ple_gate(x)) * ple_input  # (B, T, P)
            x = x + self.ple_norm(self.ple_proj(gated))
        return x if self.layer_scalar is None else x * self.layer_scalar.to(x.dtype)


class Gemma4LM(Decoder):
    """``Decoder`` with per-layer inputs and KV sharing threaded through the layers."""

    def __init__(self, *, ple: PerLayerEmbedding | None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ple = ple

    def hidden(self, ids: Tensor, *, positions: Tensor | None = None, cache: list[KVCache] | None = None) -> Tensor:
        positions = self._positions(ids, positions, cache)
        x = self.embed(ids)  # (B, T, D)
        if self.embed_scale is not None:
            x = x * torch.tensor(self.embed_scale, dtype=x.dtype, device=x.device)
        per_layer = self.ple(ids, x) if self.ple is not None else None  # (B, T, L, P)
        shared: dict[str, tuple] = {}  # window kind → the producer's (k, v, k_pos, k_start, offset)
        with contextlib.ExitStack() as stack:
            if not compiling():
                for scheme in self.schemes():
                    stack.enter_context(positions_fixed(scheme))
            for i, layer in enumerate(self.layers):
                x = layer(x, positions=positions, cache=None if cache is None else cache[i],
                          ple_input=None if per_layer is None else per_layer[:, :, i], shared_kv=shared)
        return self.norm(x)

    def describe(self) -> dict[str, Any]:
        out = super().describe()
        cfg: Gemma4Config = self.config  # type: ignore[assignment]
        for row, width, kv, (role, _), layer in zip(out["layers"], cfg.head_dims(), cfg.kv_heads_per_layer(),
                                                    cfg.sharing(), self.layers):
            row |= {"head_dim": width, "kv_heads": kv, "kv_sharing": role,
                    "values": "keys" if layer.attn.v_proj is None and role != REUSE else "v_proj"}
        out["per_layer_embedding"] = cfg.ple_dim or None
        return out


def build_gemma4(config: Gemma4Config, *, device: str | torch.device | None = None) -> Gemma4LM:
    """The Gemma 4 decoder of ``config``: one built scheme per distinct (head width, scheme setting)."""
    cfg = config
    plan, widths = cfg.plan, cfg.head_dims()
    shared: dict[str, PositionScheme] = {}

    def scheme(spec: LayerSpec, width: int) -> PositionScheme:
        key = json.dumps([width, spec.scheme_key()])
        if key not in shared:
            shared[key] = build(spec.position, dim=cfg.num_heads * width, num_heads=cfg.num_heads,
                                max_length=cfg.max_position_embeddings, causal=True, **dict(spec.position_options))
        return shared[key]

    schemes = [scheme(spec, width) for spec, width in zip(plan, widths)]
    position = build("none", dim=cfg.num_heads * cfg.attention_head_dim, num_heads=cfg.num_heads,
                     max_length=cfg.max_position_embeddings, causal=True)
    with torch.device(device) if device is not None else contextlib.nullcontext():
        return _assemble(cfg, position, plan, schemes)


def _assemble(cfg: Gemma4Config, position: PositionScheme, plan: Sequence[LayerSpec],
              schemes: Sequence[PositionScheme]) -> Gemma4LM:
    norm = NORMS[cfg.norm]
    qk = None if cfg.qk_norm == "none" else NORMS[cfg.qk_norm]
    token = TokenEmbedding(vocab_size=cfg.vocab_size, dim=cfg.dim, scale=False)
    layers = []
    for spec, scheme, width, kv, (role, kind) in zip(plan, schemes, cfg.head_dims(), cfg.kv_heads_per_layer(),
                                                     cfg.sharing()):
        use_qk = qk is not None and spec.qk_norm is not False
        attn = Gemma4Attention(
            dim=cfg.dim, num_heads=cfg.num_heads, num_kv_heads=kv, head_dim=width, bias=cfg.qkv_bias,
            out_bias=cfg.out_bias, position=scheme, window=spec.window, scale=cfg.attn_scale,
            q_norm=qk(width, eps=cfg.norm_eps) if use_qk else None,
            k_norm=qk(width, eps=cfg.norm_eps) if use_qk else None,
            v_norm=UnitRMSNorm(width, eps=cfg.norm_eps) if cfg.v_norm else None,
            values_from_keys=cfg.k_eq_v and spec.window.full, role=role, kind=kind)
        hidden = cfg.ffn_dim * (2 if cfg.double_wide_ffn and role == REUSE else 1)
        ffn = GatedFFN(dim=cfg.dim, hidden=hidden, bias=cfg.ffn_bias, activation=cfg.ffn)
        ple = None
        if cfg.ple_dim:
            ple = (nn.Linear(cfg.dim, cfg.ple_dim, bias=False), nn.Linear(cfg.ple_dim, cfg.dim, bias=False),
                   norm(cfg.dim, eps=cfg.norm_eps))
        moe = None
        if cfg.num_experts:
            moe = Gemma4MoE(dim=cfg.dim, hidden=cfg.moe_ffn_dim, num_experts=cfg.num_experts, top_k=cfg.top_k_experts,
                            activation=cfg.ffn, norm=norm, eps=cfg.norm_eps)
        layers.append(Gemma4Block(attn=attn, ffn=ffn, **{n: norm(cfg.dim, eps=cfg.norm_eps) for n in
                                                         ("attn_norm", "attn_post_norm", "ffn_norm", "ffn_post_norm")},
                                  ple=ple, activation=cfg.ffn, layer_scalar=cfg.layer_scalar, moe=moe,
                                  ffn_moe_norm=norm(cfg.dim, eps=cfg.norm_eps) if moe is not None else None))
    per_layer = None
    if cfg.ple_dim:
        per_layer = PerLayerEmbedding(vocab_size=cfg.ple_vocab or cfg.vocab_size, num_layers=cfg.num_layers,
                                      dim=cfg.dim, ple_dim=cfg.ple_dim, norm=norm(cfg.ple_dim, eps=cfg.norm_eps))
    head: OutputHead = output_head_for(token, dim=cfg.dim, vocab_size=cfg.vocab_size, tie=cfg.tie_embeddings,
                                       position=cfg.position)
    return Gemma4LM(config=cfg, embed=token, position=position, layers=layers, norm=norm(cfg.dim, eps=cfg.norm_eps),
                    head=head, ple=per_layer)


__all__ = ["Gemma4Attention", "Gemma4Block", "Gemma4Config", "Gemma4Experts", "Gemma4LM", "Gemma4MoE", "Gemma4Router",
           "PerLayerEmbedding", "build_gemma4"]
