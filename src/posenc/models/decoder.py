"""The decoder every pretrained family runs in: ``DecoderConfig``, ``Decoder``, ``build_decoder``.

One decoder-only Transformer assembled from posenc's parts, whose config names
its parts and its per-layer plan: it runs Llama 2/3, Mistral, Qwen2/3, SmolLM,
Gemma 3, Phi-3, GPT-2, BLOOM, MPT, GPT-J, GPT-NeoX, OPT, DeepSeek's MLA and the
mixture-of-experts families (``posenc.families`` reads each into a
``DecoderConfig``). Its default is the Llama layout — a pre-norm stack of
RMSNorm → (grouped-query) attention → residual, RMSNorm → SwiGLU → residual, a
final RMSNorm and an output head (tied to the token table or not) — and a
family's config names other parts (sandwich or parallel blocks, LayerNorm,
GELU MLPs, biases). It was called ``LlamaConfig`` / ``LlamaLM`` /
``build_llama`` (``posenc.models.llama``) when Llama was all it built; those
names still work for one release, with a DeprecationWarning. Positions come from any registered scheme —
RoPE and its scalings for real checkpoints — built through
``posenc.positions.build`` and handed to every attention as one shared part.

References used to verify: HF ``transformers`` ``LlamaForCausalLM``,
``MistralForCausalLM`` and ``Qwen2ForCausalLM`` loaded with the same weights
(``tests/pretrained``; every other family in ``tests/families``): logits equal within float32 round-off, full forward and
cached decoding.

Tiny CPU example::

    import torch
    from posenc.models.decoder import DecoderConfig, build_decoder
    model = build_decoder(DecoderConfig(vocab_size=100, dim=64, num_layers=2, num_heads=4, num_kv_heads=2, ffn_dim=128))
    out = model.generate(torch.tensor([[1, 2, 3]]), max_new_tokens=5)   # (1, 8) ids, greedy

Shape legend: B batch, T sequence length (new tokens when a cache is given),
D model width, F feed-forward width, V vocabulary.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.attention import KVCache, MultiHeadAttention
from posenc.models.config import JSONConfig
from posenc.models import fused
from posenc.models.cache_policy import CachePolicy, StreamCache, movable, parse_policy
from posenc.models.decoder_parts import (BLOCKS, FFN_NAMES, NORMS, GatedFFN, PreNormBlock, RMSNorm, build_ffn,
                                         clip_projections)
from posenc.plan import FULL, LayerSpec, Window, format_plan, parse_plan, plan_rows
from posenc.embedding import OutputHead, TokenEmbedding, count_parameters
from posenc.models.builders import output_head_for
from posenc.positions import PositionScheme, build, check_positions, default_positions, lookup
from posenc.checks import compiling
from posenc.positions.rotary import positions_fixed


@dataclass(frozen=True, kw_only=True)
class DecoderConfig(JSONConfig):
    """Everything needed to build a Llama-family model; plain data (JSON-serialisable).

    Args:
        vocab_size: V.
        dim: model width D (HF ``hidden_size``).
        num_layers: decoder blocks.
        num_heads: query heads H.
        num_kv_heads: key/value heads (grouped-query attention), default H; 1 = multi-query.
        head_dim: per-head width, default D / H.
        ffn_dim: SwiGLU hidden width F (HF ``intermediate_size``).
        norm_eps: RMSNorm epsilon.
        position: registered scheme name (``posenc.positions.names()``); "rope" and
            its scalings for real checkpoints.
        position_options: that scheme's options (base, pairing, rotary_dim, factor, …).
        max_position_embeddings: the context the checkpoint was trained for (L₀);
            informational — positions beyond it are allowed (that is what
            context extension measures).
        qkv_bias: biases on the q, k, v projections (Qwen2).
        out_bias: bias on the attention output projection (Llama's ``attention_bias``
            puts one on all four projections).
        ffn_bias: biases in the SwiGLU projections (HF ``mlp_bias``).
        tie_embeddings: the output head reuses the token table.
        sliding_window: every layer without a plan entry attends to at most this
            many keys (Mistral v0.1): a sliding window of W keys, itself included.
        layer_plan: one ``posenc.plan.LayerSpec`` (or its dict) per layer — its own
            scheme (rotary, bias or none), window and query scale; layers with equal
            scheme settings share one built scheme. None: every layer uses
            ``position`` with ``sliding_window``. With a plan, ``position`` acts
            only at the input, and only if it is additive.
        family: the model family the config was read for ("llama", "gemma3", …); informational.
        block: the residual layout, a name of ``posenc.models.decoder_parts.BLOCKS``
            ("pre", "sandwich", "parallel").
        norm: the norm, a name of ``NORMS`` ("rms", "rms-offset", "layer").
        ffn: the feed-forward, a name of ``FFNS`` ("swiglu", "geglu") or of ``MLPS`` (the plain
            two-layer MLPs "gelu-tanh-mlp", "gelu-mlp", "relu-mlp" of GPT-2, GPT-NeoX, OPT, …).
        qk_norm: a norm over each head's queries and keys before the rotation
            ("none" or a name of ``NORMS``; a layer spec's ``qk_norm=False`` turns it off there).
        attn_scale: the softmax scale, default 1/√Dh (Gemma: ``query_pre_attn_scalar``^−½).
        embed_scale: multiply token vectors by √D (Gemma), rounded to the activation dtype as HF does.
        logit_scale: multiply the logits by this (Cohere).
        final_softcap: logits → c·tanh(logits / c) (Gemma 2); None: off.
        attn_sinks: one learned sink logit per head in every attention (GPT-OSS).
        moe: the mixture-of-experts FFN of some layers (``posenc.models.moe.MoESpec`` as a dict:
            router, experts, sizes and ``layers``); the other layers keep the dense ``ffn``.
            None: every layer is dense.
        embed_norm: a norm right after the token table (BLOOM's ``word_embeddings_layernorm``).
        final_norm: a norm closing the stack (False for post-norm stacks, which end normed: OPT-350m).
        head_bias: a bias on the output head (GPT-J's ``lm_head``).
        clip_qkv: clamp the q, k, v projections' outputs to [−c, c] (MPT); None: off.
        mla: multi-head latent attention in every layer instead of ``MultiHeadAttention``
            (``posenc.models.mla.MLASpec`` as a dict: DeepSeek-V2/V3's low-rank q and kv and
            the decoupled rotary slice). None: ordinary attention.
    """

    vocab_size: int
    dim: int = 256
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int | None = None
    head_dim: int | None = None
    ffn_dim: int = 688
    norm_eps: float = 1e-5
    position: str = "rope"
    position_options: dict[str, Any] = field(default_factory=dict)
    max_position_embeddings: int = 2048
    qkv_bias: bool = False
    out_bias: bool = False
    ffn_bias: bool = False
    tie_embeddings: bool = False
    sliding_window: int | None = None
    layer_plan: Sequence[Any] | None = None
    family: str = "llama"
    block: str = "pre"
    norm: str = "rms"
    ffn: str = "swiglu"
    qk_norm: str = "none"
    attn_scale: float | None = None
    embed_scale: bool = False
    logit_scale: float | None = None
    final_softcap: float | None = None
    attn_sinks: bool = False
    moe: dict[str, Any] | None = None
    embed_norm: bool = False
    final_norm: bool = True
    head_bias: bool = False
    clip_qkv: float | None = None
    mla: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        from posenc import validation as bounds
        from posenc.validation import check_memory, number

        limits = {"vocab_size": bounds.MAX_VOCAB, "dim": bounds.MAX_WIDTH, "num_layers": bounds.MAX_LAYERS,
                  "num_heads": bounds.MAX_HEADS, "ffn_dim": bounds.MAX_WIDTH,
                  "max_position_embeddings": bounds.MAX_CONTEXT, "num_kv_heads": bounds.MAX_HEADS,
                  "head_dim": bounds.MAX_WIDTH, "sliding_window": bounds.MAX_CONTEXT}
        for name, limit in limits.items():  # bounded before build_decoder makes num_layers modules
            value = getattr(self, name)
            if value is None and name in ("num_kv_heads", "head_dim", "sliding_window"):
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= limit:
                raise ValueError(f"DecoderConfig.{name} must be a positive integer <= {limit:,}, got {value!r}")
        number(self.norm_eps, "DecoderConfig.norm_eps", above=0, maximum=1,
               fix="RMSNorm divides by sqrt(mean(x²) + eps): a NaN, zero or negative eps gives NaN outputs")
        kv = self.kv_heads
        if kv <= 0 or self.num_heads % kv:
            raise ValueError(f"num_heads={self.num_heads} must be a positive multiple of num_kv_heads={kv}")
        if self.head_dim is None and self.dim % self.num_heads:
            raise ValueError(f"dim={self.dim} is not divisible by num_heads={self.num_heads}; pass head_dim")
        d, f, v, q = self.dim, self.ffn_dim, self.vocab_size, self.num_heads * self.attention_head_dim
        per_layer = 2 * d * q + 2 * d * kv * self.attention_head_dim + 3 * d * f + 2 * d
        parameters = v * d * (1 if self.tie_embeddings else 2) + self.num_layers * per_layer + d
        check_memory(2.0 * parameters, f"a Llama model of {parameters:,} parameters (2 bytes each at least)",
                     fix="the config is not a real model's, or set POSENC_MEMORY_BUDGET (bytes) higher")
        for name, choices in (("block", BLOCKS), ("norm", NORMS), ("ffn", FFN_NAMES),
                              ("qk_norm", {"none": 0, **NORMS})):
            if getattr(self, name) not in choices:
                raise ValueError(f"DecoderConfig.{name} must be one of {sorted(choices)}, got {getattr(self, name)!r}")
        for name in ("attn_scale", "logit_scale", "final_softcap", "clip_qkv"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and 0 < value < float("inf")):
                raise ValueError(f"DecoderConfig.{name} must be a finite number > 0 or None, got {value!r}")
        if self.moe is not None:  # kept as plain data (JSON), checked here
            from posenc.models.moe import MoESpec

            spec = MoESpec.from_dict(self.moe)
            bad = [i for i in spec.layers if not 0 <= i < self.num_layers]
            if bad:
                raise ValueError(f"DecoderConfig.moe layers {bad} are outside 0 … {self.num_layers - 1}")
            object.__setattr__(self, "moe", spec.to_dict())
        if self.mla is not None:
            from posenc.models.mla import MLASpec

            object.__setattr__(self, "mla", MLASpec.from_dict(self.mla).to_dict())
        if self.layer_plan is not None:  # kept as plain data (JSON), checked here
            object.__setattr__(self, "layer_plan", tuple(spec.to_dict() for spec in
                                                         parse_plan(self.layer_plan, self.num_layers)))
            for i, spec in enumerate(self.plan):
                family = lookup(spec.position).family
                if family == "additive":
                    raise ValueError(f"layer_plan[{i}]: {spec.position!r} is additive — it acts once, at the input, "
                                     "not in a layer; make it the model's position instead")

    @property
    def plan(self) -> tuple[LayerSpec, ...]:
        """Every layer's spec: ``layer_plan`` parsed, or ``position`` + ``sliding_window`` for every layer."""
        if self.layer_plan is not None:
            return parse_plan(self.layer_plan, self.num_layers)
        window = FULL if self.sliding_window is None else Window("sliding", self.sliding_window)
        spec = LayerSpec(position=self.position, position_options=dict(self.position_options), window=window)
        return (spec,) * self.num_layers

    @property
    def kv_heads(self) -> int:
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def attention_head_dim(self) -> int:
        return self.dim // self.num_heads if self.head_dim is None else self.head_dim


class SwiGLU(GatedFFN):
    """Gated feed-forward with a SiLU gate (Shazeer, 2020): down(silu(gate(x)) · up(x)) — the Llama family's FFN."""

    def __init__(self, *, dim: int, hidden: int, bias: bool = False) -> None:
        super().__init__(dim=dim, hidden=hidden, bias=bias, activation="swiglu")


#: The Llama family's block: pre-norm attention and FFN branches.
LlamaBlock = PreNormBlock


class Decoder(nn.Module):
    """A Llama-family causal language model from built parts; ``build_decoder(config)`` assembles one.

    Args:
        config: the DecoderConfig the parts were built from (kept for ``describe`` and re-building).
        embed: token table (unscaled).
        position: the scheme shared by every attention (its additive hook acts on the embeddings).
        layers: the decoder blocks.
        embed_norm: a norm on the token vectors before anything else (BLOOM); None: none.
        norm: the final norm.
        head: D → V (tied to ``embed`` or not).
    """

    def __init__(self, *, config: DecoderConfig, embed: TokenEmbedding, position: PositionScheme,
                 layers: Sequence[nn.Module], norm: nn.Module, head: OutputHead,
                 embed_norm: nn.Module | None = None) -> None:
        super().__init__()
        self.config = config
        self.embed, self.position = embed, position
        self.embed_norm = embed_norm
        self.layers = nn.ModuleList(layers)
        self.norm, self.head = norm, head
        #: √D, rounded to the activation dtype where it is used, as HF's Gemma does (None: no scaling)
        self.embed_scale = float(config.dim) ** 0.5 if config.embed_scale else None

    def schemes(self) -> list[PositionScheme]:
        """The distinct position schemes of the model: the input's and each layer's, each once."""
        seen: dict[int, PositionScheme] = {id(self.position): self.position}
        for layer in self.layers:
            seen.setdefault(id(layer.attn.position), layer.attn.position)
        return list(seen.values())

    def new_cache(self, policy: str | CachePolicy | None = None) -> list[KVCache]:
        """One empty KV cache per layer, for ``forward(..., cache=...)`` and ``generate``.

        ``policy`` (``posenc.models.cache_policy``: "window:W", "sink:S,window:W", "shift:KEEP[,ctx:N]",
        "rescale"; None or "full": the plain cache) gives a ``StreamCache`` that moves itself as the stream
        outgrows it; refused by name where the model's scheme cannot move.
        """
        if policy is None or parse_policy(policy).kind == "full":
            return [KVCache() for _ in self.layers]
        attentions = [getattr(layer, "attn", None) for layer in self.layers]
        if any(a is None or not hasattr(a, "position") or not hasattr(a, "window") for a in attentions):
            raise ValueError(f"cache policy {policy}: this model's layers are not the decoder's attention blocks")
        for scheme in self.schemes():
            why = movable(scheme)
            if why is not None:
                raise ValueError(f"cache policy {parse_policy(policy)} is not defined for this model: {why}")
        return StreamCache(attentions, policy, context=self.config.max_position_embeddings)

    def _positions(self, ids: Tensor, positions: Tensor | None, cache: list[KVCache] | None) -> Tensor:
        if ids.dim() != 2:
            raise ValueError(f"token ids must have shape (B, T), got {tuple(ids.shape)}")
        offset = cache[0].length if cache else 0
        if positions is None:
            positions = default_positions(ids.shape[1], offset=offset, device=ids.device)
        else:
            positions = check_positions(positions).to(ids.device)
            if positions.shape[-1] != ids.shape[1]:
                raise ValueError(f"{positions.shape[-1]} positions given for {ids.shape[1]} tokens")
        return positions

    def hidden(self, ids: Tensor, *, positions: Tensor | None = None, cache: list[KVCache] | None = None) -> Tensor:
        """ids (B, T) → hidden states (B, T, D) after the final norm.

        Args:
            positions: (T,) or (B, T) integer positions; default continues after the cache.
            cache: from ``new_cache()``; ids then holds only the new tokens.
        """
        if isinstance(cache, StreamCache):  # the policy numbers the positions and moves the cache, piece by piece
            if positions is not None:
                raise ValueError(f"cache policy {cache.policy} numbers the positions itself; give no positions")
            if ids.dim() != 2:
                raise ValueError(f"token ids must have shape (B, T), got {tuple(ids.shape)}")
            outs = [self._hidden(ids[:, start:stop], cache.make_room(stop - start, ids.device), cache)
                    for start, stop in cache.pieces(ids.shape[1])]
            return outs[0] if len(outs) == 1 else torch.cat(outs, dim=1)
        return self._hidden(ids, self._positions(ids, positions, cache), cache)

    def _hidden(self, ids: Tensor, positions: Tensor, cache: list[KVCache] | None) -> Tensor:
        x = self.embed(ids)  # (B, T, D)
        if self.embed_scale is not None:
            x = x * torch.tensor(self.embed_scale, dtype=x.dtype, device=x.device)
        if self.embed_norm is not None:
            x = self.embed_norm(x)
        x = self.position.add(x, positions)  # a no-op unless the input scheme is additive
        # every layer rotates with these positions: one cos/sin gather per scheme and forward (under compile:
        # traced once, nothing to reuse, and no Python state to touch inside the graph)
        with contextlib.ExitStack() as stack:
            if not compiling():
                for scheme in self.schemes():
                    stack.enter_context(positions_fixed(scheme))
            # a decoding step: the whole token in one kernel call where every block takes it, else one call per
            # block where it applies
            step = cache is not None and x.shape[1] == 1
            whole = fused.steps(self.layers, x, positions, cache) if step else None  # type: ignore[arg-type]
            if whole is not None:
                x = whole
            else:
                for i, layer in enumerate(self.layers):
                    out = fused.block_step(layer, x, positions, cache[i]) if step else None  # type: ignore[index]
                    x = layer(x, positions=positions, cache=None if cache is None else cache[i]) if out is None else out
        return self.norm(x)

    def logits(self, h: Tensor, *, pass_rows: int | None = None) -> Tensor:
        """Hidden states (…, D) → logits (…, V): the head, then the family's logit scale or soft cap.

        ``pass_rows``: the rows of a whole pass that ``h`` is one chunk of (a loss over a long window, computed
        chunk by chunk): a quantised head routes the chunk as it would the whole pass."""
        from posenc.models.quant import chunk_of_pass

        out = self.head(h) if pass_rows is None else chunk_of_pass(self.head, h, pass_rows)
        if self.config.logit_scale is not None:
            out = out * self.config.logit_scale
        if self.config.final_softcap is not None:
            cap = self.config.final_softcap
            out = torch.tanh(out / cap) * cap
        return out

    def forward(self, ids: Tensor, *, positions: Tensor | None = None, cache: list[KVCache] | None = None) -> Tensor:
        """ids (B, T) → logits (B, T, V); see ``hidden`` for the arguments."""
        return self.logits(self.hidden(ids, positions=positions, cache=cache))

    @torch.no_grad()
    def generate(
        self, prompt: Tensor, max_new_tokens: int, *, temperature: float = 0.0, top_k: int | None = None,
        top_p: float | None = None, eos_id: int | Sequence[int] | None = None, seed: int | None = None,
        on_token: Callable[[Tensor], None] | None = None, cache: list[KVCache] | None = None,
        cache_policy: str | CachePolicy | None = None,
    ) -> Tensor:
        """Continue ``prompt`` (B, T) with the KV cache; greedy at temperature 0, else sampled.

        Args:
            max_new_tokens: upper bound on new tokens.
            temperature: 0 → argmax; > 0 divides the logits before sampling.
            top_k: sample among the k most likely tokens only.
            top_p: sample from the smallest set whose probability reaches p (nucleus).
            eos_id: a token id (or ids) that ends a row; finished rows are padded with it.
            seed: seeds the sampler's own generator (reproducible, independent of global RNG).
            on_token: called with each new (B,) token batch (streaming output).
            cache_policy: what the cache keeps when the stream outgrows it (``new_cache(policy)``: "full", the
                default, "window:W", "sink:S,window:W", "shift:KEEP[,ctx:N]", "rescale"); a moving policy
                lifts the limit of the trained context.
            cache: continue this cache (from ``new_cache``, e.g. the last turn of a chat) instead of a new one:
                ``prompt`` is then only the new tokens. The cache holds everything but the last new token; the
                next call's prompt starts with it.

        Returns:
            (B, T + generated) ids.
        """
        from posenc.validation import check_memory, number
        from posenc.validation import seed as check_seed

        max_new_tokens = number(max_new_tokens, "max_new_tokens", minimum=0, integer=True)
        check_sampling(temperature, top_k, top_p)
        seed = None if seed is None else check_seed(seed)
        total = prompt.shape[-1] + max_new_tokens
        window = self.config.sliding_window
        if cache is None:
            cache = self.new_cache(cache_policy)
        elif cache_policy is not None:
            raise ValueError("give a cache or a cache_policy, not both (the cache has its policy)")
        moving = isinstance(cache, StreamCache)
        if moving:
            total = min(total, cache.capacity or total)
        elif window is not None and total > window:
            raise ValueError(f"a {prompt.shape[-1]}-token prompt + max_new_tokens={max_new_tokens:,} exceeds this "
                             f"model's sliding attention window of {window:,} tokens; generate fewer tokens")
        cfg, item = self.config, torch.finfo(self.embed.weight.dtype).bits // 8
        check_memory(2.0 * cfg.num_layers * prompt.shape[0] * cfg.kv_heads * cfg.attention_head_dim * total * item,
                     f"the KV cache of {prompt.shape[0]} × {total:,} tokens (prompt + max_new_tokens)",
                     fix="lower max_new_tokens")
        stops = torch.tensor([] if eos_id is None else [eos_id] if isinstance(eos_id, int) else list(eos_id),
                             dtype=torch.long, device=prompt.device)
        generator = None
        if temperature > 0:
            generator = torch.Generator(device=prompt.device)
            generator.manual_seed(torch.seed() if seed is None else seed)
        done = torch.zeros(prompt.shape[0], dtype=torch.bool, device=prompt.device)
        own = cache_policy is not None  # a cache made here: a rescaled scheme gets its options back at the end
        try:
            ids, new = prompt, prompt
            for _ in range(max_new_tokens):
                for layer_cache in cache:  # under torch.compile: one decoding graph for every cache length
                    layer_cache.mark_dynamic()
                h = self.hidden(new, cache=cache)[:, -1]  # (B, D): only the last position needs logits
                logits = self.logits(h).float()  # (B, V)
                if not all_finite(logits):  # one B × V check per token: a NaN must not pick a token
                    done_so_far = ids.shape[1] - prompt.shape[1]
                    raise FloatingPointError(f"the model's logits hold NaN or ±inf at new token {done_so_far}; its "
                                             "weights or activations overflow (try --dtype float32, or another file)")
                nxt = next_token(logits, temperature=temperature, top_k=top_k, top_p=top_p, generator=generator)  # (B,)
                if stops.numel():
                    nxt = torch.where(done, stops[0], nxt)
                    done |= torch.isin(nxt, stops)
                if on_token is not None:
                    on_token(nxt)
                new = nxt[:, None]
                ids = torch.cat((ids, new), dim=1)
                if stops.numel() and bool(done.all()):
                    break
        finally:
            if own and isinstance(cache, StreamCache):
                cache.restore()
        return ids

    def describe(self) -> dict[str, Any]:
        """What was built: config, the input scheme, every layer's scheme / window / query scale, and the
        number of distinct schemes the layers share."""
        ids = {id(s): i for i, s in enumerate(self.schemes())}
        plan = self.config.plan
        return {
            "kind": "llama" if self.config.family == "llama" else f"decoder ({self.config.family})",
            "config": self.config.to_dict(),
            "position": {**self.position.describe(), "parameters": count_parameters(self.position)},
            "layers": plan_rows(plan, [ids[id(layer.attn.position)] for layer in self.layers]),
            "schemes_built": len({id(layer.attn.position) for layer in self.layers}),
            "embeddings": {"tied_output": self.head.tied},
            "parameters": count_parameters(self),
        }

    def plan_table(self) -> str:
        """The layer plan as a text table (``posenc inspect`` prints it)."""
        return format_plan(plan_rows(self.config.plan))


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Raise a clear error for sampling settings that mean nothing."""
    from posenc.validation import F32_TINY, number

    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not temperature >= 0 or \
            temperature == float("inf"):
        raise ValueError(f"temperature must be >= 0 and finite (0 = greedy), got {temperature}")
    if 0 < temperature < F32_TINY:  # the logits are divided by it in float32, where it would be 0
        raise ValueError(f"temperature={temperature!r} must be 0 (greedy) or at least {F32_TINY:.3g}, float32's "
                         "smallest normal number")
    if top_k is not None:
        number(top_k, "top_k", minimum=1, integer=True)
    if top_p is not None:
        number(top_p, "top_p", above=0, maximum=1)


def all_finite(logits: Tensor) -> bool:
    """Whether every value of ``logits`` is finite: a NaN or ±inf shows in its row's largest or smallest value
    (``amax``/``amin`` propagate NaN) — two vectorised passes, where ``isfinite(...).all()`` costs ~1 ms a token
    for a 262,144-token vocabulary."""
    return bool(torch.isfinite(logits.amax(-1)).all() and torch.isfinite(logits.amin(-1)).all())


#: how many logits greedy() reduces per block
GREEDY_BLOCK = 1024


def greedy(logits: Tensor) -> Tensor:
    """``logits.argmax(-1)`` for (B, V) logits — the first index of each row's largest value — in vectorised
    passes: each block of GREEDY_BLOCK values' largest (``amax``), the first block holding the row's largest,
    the first index of it there; the last V mod GREEDY_BLOCK values compared after. torch's ``argmax`` walks a
    row one value at a time: ~0.5 ms a token for Gemma 3's 262,144-token vocabulary, ~0.08 ms this way. Equal to
    ``argmax`` on rows without NaN (``generate`` checks that first)."""
    if logits.dim() != 2 or logits.shape[-1] < 2 * GREEDY_BLOCK:
        return logits.argmax(-1)
    rows, vocab = logits.shape
    n = vocab - vocab % GREEDY_BLOCK
    blocks = logits[:, :n].unflatten(-1, (-1, GREEDY_BLOCK))  # (B, C, block)
    peaks = blocks.amax(-1)  # (B, C)
    first = peaks.argmax(-1)  # (B,): the first block holding the row's largest
    index = torch.arange(rows, device=logits.device)
    best = first * GREEDY_BLOCK + blocks[index, first].argmax(-1)
    if n < vocab:  # the tail wins only if strictly larger: a tie's first index lies in the blocks
        tail_max, tail_at = logits[:, n:].max(-1)
        best = torch.where(tail_max > peaks[index, first], n + tail_at, best)
    return best


def next_token(logits: Tensor, *, temperature: float = 0.0, top_k: int | None = None, top_p: float | None = None,
               generator: torch.Generator | None = None) -> Tensor:
    """Pick one token per row from logits (B, V): argmax at temperature 0, else a sample.

    Filters apply in HF's order: temperature, then top-k, then top-p (the
    smallest prefix of the sorted distribution whose mass reaches p, always at
    least the most likely token).
    """
    if temperature == 0:
        return greedy(logits)
    logits = (logits - logits.amax(-1, keepdim=True)) / temperature  # max 0: a small temperature cannot overflow
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p is not None and top_p < 1:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs >= top_p  # mass before this token already reaches p
        drop[:, 0] = False  # the most likely token always stays (a top_p below float32's range keeps just it)
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    probs = logits.softmax(-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def build_decoder(config: DecoderConfig, *, device: str | torch.device | None = None) -> Decoder:
    """Assemble a decoder from its config: parts by name, one built scheme per distinct layer setting.

    Args:
        device: where the parameters are created; ``"meta"`` gives the structure
            without memory (``posenc.pretrained`` fills it with checkpoint tensors
            one by one). Position schemes are always built for real, on the
            default device: their own buffers, if any, are not in a checkpoint.
    """
    own = getattr(config, "build_model", None)
    if own is not None:  # a family config with parts beyond this decoder's brings its own builder (Gemma 4)
        return own(device=device)
    cfg = config
    # each scheme is told the model's heads, head width, trained context and that the stack is causal
    def make(name: str, options: dict[str, Any]) -> PositionScheme:
        return build(name, dim=cfg.num_heads * cfg.attention_head_dim, num_heads=cfg.num_heads,
                     max_length=cfg.max_position_embeddings, causal=True, **options)

    plan = cfg.plan
    shared: dict[str, PositionScheme] = {}
    if cfg.layer_plan is None:  # one scheme for the input hook and every layer, as always
        shared[plan[0].scheme_key()] = position = make(cfg.position, dict(cfg.position_options))
    else:
        position = make(cfg.position, dict(cfg.position_options)) if lookup(cfg.position).family == "additive" \
            else make("none", {})
    layer_schemes = []
    for spec in plan:
        key = spec.scheme_key()
        if key not in shared:
            shared[key] = make(spec.position, dict(spec.position_options))
        layer_schemes.append(shared[key])
    with torch.device(device) if device is not None else contextlib.nullcontext():
        return _assemble(cfg, position, plan, layer_schemes)


def _assemble(cfg: DecoderConfig, position: PositionScheme, plan: Sequence[LayerSpec],
              layer_schemes: Sequence[PositionScheme]) -> Decoder:
    token = TokenEmbedding(vocab_size=cfg.vocab_size, dim=cfg.dim - position.extra_width, scale=False)
    norm = NORMS[cfg.norm]
    block_cls, norm_names = BLOCKS[cfg.block]
    head_dim = cfg.attention_head_dim

    def qk_norm(spec: LayerSpec) -> nn.Module | None:
        on = cfg.qk_norm != "none" if spec.qk_norm is None else spec.qk_norm
        if not on:
            return None
        return NORMS["rms" if cfg.qk_norm == "none" else cfg.qk_norm](head_dim, eps=cfg.norm_eps)

    moe = None
    if cfg.moe is not None:
        from posenc.models.moe import MoESpec, build_moe

        moe = MoESpec.from_dict(cfg.moe)
    layers = []
    for i, (spec, scheme) in enumerate(zip(plan, layer_schemes)):
        attn: nn.Module
        if cfg.mla is not None:
            from posenc.models.mla import MLASpec, MultiHeadLatentAttention

            attn = MultiHeadLatentAttention(MLASpec.from_dict(cfg.mla), dim=cfg.dim, num_heads=cfg.num_heads,
                                            position=scheme, window=spec.window, scale=cfg.attn_scale)
        else:
            attn = MultiHeadAttention(dim=cfg.dim, num_heads=cfg.num_heads, num_kv_heads=cfg.kv_heads,
                                      head_dim=head_dim, bias=cfg.qkv_bias, out_bias=cfg.out_bias, position=scheme,
                                      window=spec.window, scale=cfg.attn_scale, q_norm=qk_norm(spec),
                                      k_norm=qk_norm(spec), query_scale=spec.query_scale, sinks=cfg.attn_sinks)
        if cfg.clip_qkv is not None:
            clip_projections(attn, cfg.clip_qkv)
        ffn: nn.Module
        if moe is not None and i in moe.layers:
            ffn = build_moe(moe, dim=cfg.dim, shared_bias=cfg.ffn_bias)
        else:
            ffn = build_ffn(cfg.ffn, dim=cfg.dim, hidden=cfg.ffn_dim, bias=cfg.ffn_bias)
        layers.append(block_cls(attn=attn, ffn=ffn, **{n: norm(cfg.dim, eps=cfg.norm_eps) for n in norm_names}))
    head = output_head_for(token, dim=cfg.dim, vocab_size=cfg.vocab_size, tie=cfg.tie_embeddings,
                           position=cfg.position)
    if cfg.head_bias:
        head.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
    return Decoder(config=cfg, embed=token, position=position, layers=layers,
                   norm=norm(cfg.dim, eps=cfg.norm_eps) if cfg.final_norm else nn.Identity(), head=head,
                   embed_norm=norm(cfg.dim, eps=cfg.norm_eps) if cfg.embed_norm else None)
