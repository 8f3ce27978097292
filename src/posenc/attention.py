"""Multi-head attention with position hooks, masks and a KV cache.

The attention asks its position scheme for a rotation of q and k and for a
bias on the logits — every scheme answers both (most with "nothing") — so it
never inspects which scheme it holds.

Masks (all optional, combined):

* ``valid_lens`` — d2l semantics: (B,) keys at index ≥ valid_lens[b] are
  hidden from every query of sequence b; (B, Tq) gives one length per query.
* ``key_padding_mask`` — (B, Tk) bool, True marks a padding key (as in
  ``torch.nn.MultiheadAttention``).
* ``causal`` — query i may see key j only if j ≤ i + (Tk − Tq): the queries
  are the *last* Tq positions of the key sequence, which is what cached
  decoding needs (``is_causal`` of SDPA aligns top-left and would be wrong).

A row whose keys are all masked gets uniform weights over the masked keys
instead of NaN (d2l semantics); callers drop such rows.

Windows (``posenc.window.Window``): a causal self-attention may be
``sliding`` (query i sees keys i − W + 1 … i) or ``chunked`` (the keys of its
own chunk of C tokens up to itself), counted in sequence order. They run
blockwise — blocks of queries against the keys their window can reach, never a
Tq×Tk mask — so a full forward holds O(T·W) scores, and the KV cache keeps
only the keys the window can still see (O(W) per sliding layer; positions are
stored with them, so they stay true).

Grouped-query attention (Ainslie et al., 2023): with ``num_kv_heads`` < H,
each key/value head serves H / Hkv consecutive query heads (HF's
``repeat_kv`` order); ``num_kv_heads=1`` is multi-query attention (Shazeer,
2019). Keys and values are projected, rotated and cached with Hkv heads only.

Shape legend: B batch, H query heads, Hkv key/value heads, Tq query length,
Tk key length, D model width, Dh head width (D / H unless given).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from posenc.plan import QueryScale
from posenc.window import FULL, Window, window_mask
from posenc.positions.base import NoPosition, PositionScheme, check_positions, default_positions


#: Spare room a growing cache allocates past what it holds: at least this many tokens, or 1/GROWTH of it.
GROWTH_TOKENS, GROWTH = 64, 4


@dataclass
class KVCache:
    """Keys (already rotated), values and the positions they were computed at, for one attention.

    ``static`` caches (cross-attention) are filled once from the encoder
    output and reused at every step.

    Growing: after the first fill (held as given, no spare memory), a decoding
    step writes its keys into spare room of a larger buffer instead of
    concatenating — a ``torch.cat`` copies every held key at every step, which
    after a 16k prompt is ~25 MB per layer per token. The buffer holds what is
    held plus max(GROWTH_TOKENS, held / GROWTH) tokens of room; when the room is
    used up the held keys move to a new buffer (so copies are amortised to a few
    per token, and a windowed layer's buffer stays O(W)). ``k``, ``v`` and
    ``positions`` are views of the held part; views handed out earlier keep
    their values (writes go past their end). A cache that moves
    (``posenc.models.cache_policy``) also keeps the unrotated keys
    (``keep_raw``, ``raw``) and concatenates; ``move`` drops and renumbers
    held tokens, rotating each kept key afresh from its raw key. Under ``torch.compile``, while
    gradients are recorded, and when shared and per-sequence positions mix, the
    cache concatenates as before; ``reorder`` and ``mark_dynamic`` leave a plain
    tensor that the next step moves into fresh room.
    """

    k: Tensor | None = None  # (B, Hkv, Tk, Dh)
    v: Tensor | None = None  # (B, Hkv, Tk, Dh)
    positions: Tensor | None = None  # (Tk,) or (B, Tk)
    static: bool = False
    #: tokens seen but no longer held (a windowed layer drops the keys its window can no longer reach)
    dropped: int = 0
    #: (buffers for k, v, positions; index of the first held token in them), or None: not growing in place
    _room: tuple[tuple[Tensor, Tensor, Tensor], int] | None = field(default=None, repr=False, compare=False)
    #: also hold each key as it was before the scheme rotated it (``raw``), so that ``move`` can rotate it afresh
    #: to a new position (``posenc.models.cache_policy``); a cache that keeps raw keys concatenates (no room)
    keep_raw: bool = False
    raw: Tensor | None = None  # (B, Hkv, Tk, Dh): the unrotated keys, when keep_raw

    @property
    def length(self) -> int:
        """Tokens this cache has seen (the sequence index of the next token), held or dropped."""
        return self.dropped + self.stored

    @property
    def stored(self) -> int:
        """Keys held now."""
        return 0 if self.k is None else self.k.shape[-2]

    def keep_from(self, index: int) -> None:
        """Drop the keys before sequence index ``index`` (they are out of every later query's window)."""
        drop = index - self.dropped
        if self.k is None or drop <= 0:
            return
        assert self.v is not None and self.positions is not None
        drop = min(drop, self.stored)
        self.k, self.v = self.k[..., drop:, :], self.v[..., drop:, :]
        self.positions = self.positions[..., drop:]
        if self.raw is not None:
            self.raw = self.raw[..., drop:, :]
        self.dropped += drop
        if self._room is not None:
            self._room = (self._room[0], self._room[1] + drop)
        # a slice keeps its whole storage alive: after a long prefill that would be every key the window
        # dropped (Gemma 3 270M at 32k: ~1 GiB over 15 sliding layers). Copy once the held keys fill less
        # than half of it, so the cache holds at most 2 W keys' worth and decoding copies once per ~W steps.
        if (not torch.compiler.is_compiling()
                and self.k.untyped_storage().nbytes() > 2 * self.k.numel() * self.k.element_size()):
            self.k, self.v, self.positions = self.k.clone(), self.v.clone(), self.positions.clone()
            self.raw = None if self.raw is None else self.raw.clone()
            self._room = None

    def move(self, index: Tensor | None, positions: Tensor, scheme: PositionScheme) -> None:
        """Keep the held tokens ``index`` (sorted (N,) indices into what is held; None: all) at new ``positions``.

        The dropped tokens count as seen (``length`` is unchanged). Keys are what ``scheme`` makes of each raw key
        at its new position — rotated afresh from the raw key (``keep_raw``), never from the rotated one, so a
        key moved a thousand times equals one computed once at its last position; a scheme whose keys carry no
        position (bias schemes, NoPE, a remapping scheme's raw keys) only takes the new positions.
        """
        if self.k is None or self.static:
            if index is not None and index.numel():
                raise ValueError("an empty or static cache has nothing to move")
            return
        assert self.v is not None and self.positions is not None
        positions = check_positions(positions, name="positions").to(self.positions.device)
        if index is not None:
            index = index.to(self.k.device)
            self.dropped += self.stored - index.numel()
            self.k, self.v = self.k.index_select(-2, index), self.v.index_select(-2, index)
            self.raw = None if self.raw is None else self.raw.index_select(-2, index)
        if positions.shape[-1] != self.stored:
            raise ValueError(f"{positions.shape[-1]} positions for {self.stored} held keys")
        if self.positions.dim() == 2 and positions.dim() == 1:  # per-sequence positions stay (B, T)
            positions = positions.expand(self.positions.shape[0], -1)
        self.positions = positions.clone()
        if self.raw is not None:
            self.k = scheme.rotate_key(self.raw, self.positions).contiguous()
        self._room = None

    def fork(self) -> KVCache:
        """A cache that continues from what this one holds and leaves this one as it is.

        The fork shares the held keys, values and positions read-only: its first append copies them into room
        of its own (it starts with none), and this cache's later appends write past the end of what the fork
        sees. Many prompts that begin alike can so continue one prefix's cache (``posenc.extend.passkey``'s
        ``PrefixCaches``) without reading the prefix again.
        """
        return KVCache(k=self.k, v=self.v, positions=self.positions, static=self.static, dropped=self.dropped,
                       keep_raw=self.keep_raw, raw=self.raw)

    def mark_dynamic(self) -> None:
        """Tell ``torch.compile`` that the key length will grow: one graph serves every length.

        Call it between decoding steps, outside the compiled call (``generate``
        does). Without it the compiler first specialises on the prompt length
        and recompiles once or twice before it makes the length dynamic by
        itself; with it the first decoding step compiles the only decoding
        graph. A static cache (cross-attention) does not grow and is left alone.
        A cache grown in place (eager steps) is made contiguous first, the layout
        the compiled step's own concatenation produces. Nothing is done unless
        the compiler is in use in this process (``torch._dynamo`` imported):
        marking would import it (~2 s, the first token of an eager ``generate``)
        and give up the room an eager cache grows into.
        """
        if self.static or self.k is None or "torch._dynamo" not in sys.modules:
            return
        assert self.v is not None and self.positions is not None
        if self._room is not None:
            self.k, self.v, self.positions = self.k.contiguous(), self.v.contiguous(), self.positions.contiguous()
            self._room = None
        for t in (self.k, self.v, self.positions) + (() if self.raw is None else (self.raw,)):
            torch._dynamo.maybe_mark_dynamic(t, t.dim() - (2 if t is not self.positions else 1))

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (B',) in that order, e.g. the surviving hypotheses of a beam search."""
        if self.k is None:
            return
        assert self.v is not None and self.positions is not None
        self.k, self.v = self.k.index_select(0, index), self.v.index_select(0, index)
        self.raw = None if self.raw is None else self.raw.index_select(0, index)
        if self.positions.dim() == 2:
            self.positions = self.positions.index_select(0, index)
        self._room = None

    def append(self, k: Tensor, v: Tensor, positions: Tensor,
               raw: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
        """Add new keys/values at ``positions``; return all keys, values and positions so far.

        ``raw``: the keys before the scheme rotated them, held when ``keep_raw`` (ignored otherwise).
        """
        if self.keep_raw:
            if raw is None:
                raise ValueError("this cache keeps raw keys (a moving cache policy): append them with raw=")
            self.raw = raw.contiguous() if self.raw is None else torch.cat((self.raw, raw), dim=-2)
        if self.k is None:
            # fresh and contiguous, like every later torch.cat result: a compiled decoding step then sees one
            # layout, and no two layers' caches share a positions tensor (the compiler guards on aliasing)
            self.k, self.v, self.positions = k.contiguous(), v.contiguous(), positions.clone()
            return self.k, self.v, self.positions
        assert self.v is not None and self.positions is not None
        old, new = self.positions, positions
        mixed = old.dim() != new.dim()  # shared (T,) and per-sequence (B, T) positions
        if mixed:
            old, new = old.expand(k.shape[0], -1), new.expand(k.shape[0], -1)
        if (mixed or self.keep_raw or torch.compiler.is_compiling()
                or (torch.is_grad_enabled() and (k.requires_grad or v.requires_grad))):
            self.k = torch.cat((self.k, k), dim=-2)
            self.v = torch.cat((self.v, v), dim=-2)
            self.positions = torch.cat((old, new), dim=-1)
            self._room = None
            return self.k, self.v, self.positions
        held, t = self.stored, k.shape[-2]
        buffers, at = self._grow(t)
        for buffer, part, dim in zip(buffers, (k, v, new), (-2, -2, -1)):
            buffer.narrow(dim, at + held, part.shape[dim]).copy_(part)
        self._hold(held + t)
        return self.k, self.v, self.positions

    def _grow(self, t: int) -> tuple[tuple[Tensor, Tensor, Tensor], int]:
        """Room for ``t`` more tokens past what is held: the (keys, values, positions) buffers and the index of
        the first held token in them; held tokens move to larger buffers when the room is used up."""
        assert self.k is not None and self.v is not None and self.positions is not None
        held = self.stored
        if self._room is None or self._room[1] + held + t > self._room[0][0].shape[-2]:
            capacity = held + t + max(GROWTH_TOKENS, (held + t) // GROWTH)
            buffers = []
            for tensor, dim in ((self.k, -2), (self.v, -2), (self.positions, -1)):
                shape = list(tensor.shape)
                shape[dim] = capacity
                buffers.append(tensor.new_empty(shape))
                buffers[-1].narrow(dim, 0, held).copy_(tensor)
            self._room = (tuple(buffers), 0)
        return self._room

    def _hold(self, count: int) -> None:
        """Make the held views the first ``count`` tokens of the room."""
        assert self._room is not None
        buffers, at = self._room
        self.k, self.v, self.positions = (b.narrow(dim, at, count) for b, dim in zip(buffers, (-2, -2, -1)))

    def can_reserve(self, positions: Tensor) -> bool:
        """Whether ``reserve(positions)`` gives a slot (it changes nothing where it does not)."""
        return not (self.k is None or self.static or self.keep_raw or self.positions is None
                    or self.positions.dim() != 1 or positions.dim() != 1 or torch.compiler.is_compiling())

    def reserve(self, positions: Tensor) -> tuple[Tensor, Tensor, int, int] | None:
        """A slot for one token whose key and value a fused decoding step writes itself (``posenc.models.fused``).

        Records ``positions`` (1,) and holds one more token; returns the key and value buffers
        (B, Hkv, capacity, Dh), the index of the first held token in them and the new token's index — or None
        (nothing changed) where the cache does not grow in place: empty, static, per-sequence positions,
        or under ``torch.compile``. The caller must write the new key and value before anything reads them.
        """
        if not self.can_reserve(positions):
            return None
        held = self.stored
        buffers, at = self._grow(1)
        buffers[2].narrow(-1, at + held, 1).copy_(positions)
        self._hold(held + 1)
        return buffers[0], buffers[1], at, at + held


def build_mask(
    *,
    batch: int,
    q_len: int,
    k_len: int,
    valid_lens: Tensor | None = None,
    key_padding_mask: Tensor | None = None,
    causal: bool = False,
    device: torch.device | None = None,
) -> Tensor | None:
    """Boolean "may attend" mask broadcastable to (B, 1, Tq, Tk), or None when nothing is masked."""
    allowed: Tensor | None = None

    def combine(m: Tensor) -> None:
        nonlocal allowed
        allowed = m if allowed is None else allowed & m

    if not causal and valid_lens is None and key_padding_mask is None:
        return None  # nothing to mask (e.g. one decoding query): no index tensors built
    key_index = torch.arange(k_len, device=device)
    if causal:
        query_index = torch.arange(q_len, device=device) + (k_len - q_len)
        combine((key_index[None, :] <= query_index[:, None]).view(1, 1, q_len, k_len))
    if valid_lens is not None:
        if valid_lens.dtype.is_floating_point:
            raise TypeError(f"valid_lens must be an integer tensor, got {valid_lens.dtype}")
        if valid_lens.dim() == 1 and valid_lens.shape[0] == batch:
            lens = valid_lens.view(batch, 1, 1, 1)
        elif valid_lens.dim() == 2 and tuple(valid_lens.shape) == (batch, q_len):
            lens = valid_lens.view(batch, 1, q_len, 1)
        else:
            raise ValueError(f"valid_lens must have shape ({batch},) or ({batch}, {q_len}), got {tuple(valid_lens.shape)}")
        combine(key_index.view(1, 1, 1, k_len) < lens.to(device))
    if key_padding_mask is not None:
        if tuple(key_padding_mask.shape) != (batch, k_len):
            raise ValueError(f"key_padding_mask must have shape ({batch}, {k_len}), got {tuple(key_padding_mask.shape)}")
        if key_padding_mask.dtype != torch.bool:
            raise TypeError(f"key_padding_mask must be bool (True = padding), got {key_padding_mask.dtype}")
        combine(~key_padding_mask.view(batch, 1, 1, k_len).to(device))
    return allowed


class MultiHeadAttention(nn.Module):
    """Multi-head scaled dot-product attention (Vaswani et al., 2017, §3.2.2), optionally grouped-query.

    Reference used to verify: ``torch.nn.MultiheadAttention`` with the same
    weights (self and cross, with masks); HF ``transformers`` Llama / Qwen2
    attention for grouped-query heads and q/k/v biases; the attention modules
    of HF's Gemma 3, Qwen3, Cohere 2, Llama 4 and GPT-OSS for QK-norm, scales,
    windows, query temperatures and sinks (``tests/families``). Runs through
    ``F.scaled_dot_product_attention`` unless weights are asked for.

    Args:
        dim: model width D (queries, output).
        num_heads: H query heads; D must be divisible by H unless ``head_dim`` is given.
        num_kv_heads: Hkv key/value heads (grouped-query attention); H must be a
            multiple of it; 1 is multi-query attention; default H.
        head_dim: Dh, default D / H (Mistral-Nemo-style models use another width).
        kv_dim: width of the key/value source (cross-attention), default D.
        bias: biases in the q, k and v projections (and the output projection
            unless ``out_bias`` says otherwise).
        out_bias: bias in the output projection, default ``bias`` (Qwen2: q/k/v
            biases, none on the output).
        dropout: dropout on attention weights during training.
        position: the scheme whose rotation/bias hooks act here (default none);
            cross-attention normally has none.
        window: which keys a causal query sees (``posenc.plan.Window``; default full).
        scale: the softmax scale, default 1/√Dh of the head width, also when a scheme widens
            q and k (PoPE: 2·Dh); Gemma: query_pre_attn_scalar^−½.
        q_norm, k_norm: modules applied to each head's queries / keys before the
            rotation (QK-norm: Qwen3, Gemma 3; an RMS norm without gain for Llama 4).
        query_scale: a factor on the rotated queries per sequence index (tokens before
            the query, cached ones included — not its position value, as in HF)
            (``posenc.plan.QueryScale``: Llama 4's temperature).
        sinks: learn one sink logit per head (GPT-OSS): a virtual key every query
            sees, with logit s_h and a zero value, that takes a share of the
            softmax mass.
    """

    def __init__(
        self,
        *,
        dim: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        head_dim: int | None = None,
        kv_dim: int | None = None,
        bias: bool = True,
        out_bias: bool | None = None,
        dropout: float = 0.0,
        position: PositionScheme | None = None,
        window: Window = FULL,
        scale: float | None = None,
        q_norm: nn.Module | None = None,
        k_norm: nn.Module | None = None,
        query_scale: QueryScale | None = None,
        sinks: bool = False,
    ) -> None:
        super().__init__()
        if num_heads <= 0 or (head_dim is None and dim % num_heads):
            raise ValueError(f"dim={dim} must be divisible by num_heads={num_heads} (or pass head_dim)")
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        if num_kv_heads <= 0 or num_heads % num_kv_heads:
            raise ValueError(f"num_heads={num_heads} must be a positive multiple of num_kv_heads={num_kv_heads}")
        head_dim = dim // num_heads if head_dim is None else head_dim
        if head_dim <= 0:
            raise ValueError(f"head_dim must be positive, got {head_dim}")
        if scale is not None and not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"the attention scale must be a finite number > 0, got {scale}")
        kv_dim = dim if kv_dim is None else kv_dim
        self.dim, self.num_heads, self.num_kv_heads, self.head_dim = dim, num_heads, num_kv_heads, head_dim
        self.dropout = dropout
        self.q_proj = nn.Linear(dim, num_heads * head_dim, bias=bias)
        self.k_proj = nn.Linear(kv_dim, num_kv_heads * head_dim, bias=bias)
        self.v_proj = nn.Linear(kv_dim, num_kv_heads * head_dim, bias=bias)
        self.out_proj = nn.Linear(num_heads * head_dim, dim, bias=bias if out_bias is None else out_bias)
        self.position = position if position is not None else NoPosition()
        self.window = window
        self.scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
        self.q_norm, self.k_norm = q_norm, k_norm
        self.query_scale = query_scale
        self.sinks = nn.Parameter(torch.zeros(num_heads)) if sinks else None

    def _heads(self, x: Tensor, heads: int, norm: nn.Module | None = None) -> Tensor:
        """(B, T, heads · Dh) → (B, heads, T, Dh), each head's vector normed first when ``norm`` is given (QK-norm:
        per row of Dh, so before the transpose, on contiguous rows)."""
        b, t, _ = x.shape
        x = x.view(b, t, heads, self.head_dim)
        return (x if norm is None else norm(x)).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        q_pos: Tensor | None = None,
        k_pos: Tensor | None = None,
        valid_lens: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        causal: bool = False,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Attend from ``x`` (B, Tq, D) to ``context`` (B, Tk, Dkv), or to ``x`` itself.

        Args:
            q_pos: (Tq,) or (B, Tq) integer positions of the queries; default
                continues after what ``cache`` holds (0 … Tq − 1 without a cache).
            k_pos: positions of the keys; self-attention uses ``q_pos``.
            cache: a KVCache to extend (self-attention) or reuse (static, cross).
            need_weights: also return the (B, H, Tq, Tk) attention weights.

        Returns:
            (output (B, Tq, D), weights or None).
        """
        if x.dim() != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"x must have shape (B, T, {self.dim}), got {tuple(x.shape)}")
        batch, q_len, _ = x.shape
        self_attention = context is None
        offset = cache.length if (cache is not None and self_attention) else 0  # sequence index of the 1st query
        q_pos = default_positions(q_len, offset=offset, device=x.device) if q_pos is None else check_positions(q_pos, name="q_pos")
        q = self._heads(self.q_proj(x), self.num_heads, self.q_norm)  # (B, H, Tq, Dh)

        k_start = 0  # sequence index of the first key held
        if cache is not None and cache.static and cache.k is not None:
            k, v, k_pos = cache.k, cache.v, cache.positions
            assert v is not None and k_pos is not None
            if not self.position.remaps:  # a remapping scheme rotates per (query, key) pair, in _remapped
                q = self.position.rotate_query(q, q_pos)  # keys were rotated when the cache was filled
        else:
            source = x if self_attention else context
            assert source is not None
            k = self._heads(self.k_proj(source), self.num_kv_heads, self.k_norm)  # (B, Hkv, Tk, Dh)
            v = self._heads(self.v_proj(source), self.num_kv_heads)
            if k_pos is None:
                k_pos = q_pos if self_attention else default_positions(source.shape[1], device=x.device)
            if k_pos is not q_pos:  # q_pos was checked above
                k_pos = check_positions(k_pos, name="k_pos")
            raw = k  # what a moving cache keeps to rotate afresh (KVCache.keep_raw)
            if not self.position.remaps:  # a remapping scheme's cache holds raw keys, rotated per piece later
                q, k = self.position.rotate(q, k, q_pos, k_pos)
            if cache is not None:
                if cache.static:
                    cache.k, cache.v, cache.positions = k, v, k_pos
                else:
                    k_start = cache.dropped
                    k, v, k_pos = cache.append(k, v, k_pos, raw=raw)
        if self.query_scale is not None:
            # by sequence index, not position value: HF's Llama4TextAttention counts the tokens its cache has
            # seen (past_seen_tokens + arange), whatever position_ids it was given
            factors = self.query_scale.factors(default_positions(q_len, offset=offset, device=x.device))  # (Tq,)
            q = (q * factors[:, None]).to(q.dtype)

        windowed = not self.window.full and causal and self_attention
        if self.position.remaps:
            out, weights = self._remapped(q, k, v, q_pos, k_pos, causal=causal, k_start=k_start, windowed=windowed,
                                          valid_lens=valid_lens, key_padding_mask=key_padding_mask,
                                          need_weights=need_weights)
        elif windowed and self.window.binds(k_start, offset + q_len - 1):
            if valid_lens is not None or key_padding_mask is not None:
                raise ValueError(f"{self.window} attention takes no valid_lens or key_padding_mask; "
                                 "pad on the right and drop the padded outputs instead")
            if need_weights:
                allowed = window_mask(self.window, q_index=offset, k_index=k_start, q_len=q_len,
                                      k_len=k.shape[-2], device=x.device)
                out, weights = self._attend(q, k, v, q_pos, k_pos, allowed=allowed, need_weights=True)
            else:
                out, weights = self._windowed(q, k, v, q_pos, k_pos, offset=offset, k_start=k_start), None
        elif (causal and self_attention and CONTINUATION_MIN < q_len < k.shape[-2] and valid_lens is None
              and key_padding_mask is None and not need_weights and not torch.compiler.is_compiling()):
            out, weights = self._continued(q, k, v, q_pos, k_pos), None
        else:
            out, weights = self._attend(q, k, v, q_pos, k_pos, causal=causal, valid_lens=valid_lens,
                                        key_padding_mask=key_padding_mask, need_weights=need_weights)
        if windowed and cache is not None:
            cache.keep_from(self.window.first_visible(offset + q_len))  # what the next query can still see
        out = out.transpose(1, 2).reshape(batch, q_len, self.num_heads * self.head_dim)  # (B, Tq, H·Dh)
        return self.out_proj(out), weights

    def _remapped(self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, *, causal: bool, k_start: int,
                  windowed: bool, valid_lens: Tensor | None, key_padding_mask: Tensor | None,
                  need_weights: bool) -> tuple[Tensor, Tensor | None]:
        """A remapping scheme's attention (``posenc.positions.remap``): unrotated q and k, blockwise, online softmax.

        The queries are the last Tq of the keys held (sequence indices k_start + Tk − Tq …), as for the causal mask.
        """
        from posenc.positions.remap import remap_attention

        q_len, k_len = q.shape[-2], k.shape[-2]
        allowed = build_mask(batch=q.shape[0], q_len=q_len, k_len=k_len, valid_lens=valid_lens,
                             key_padding_mask=key_padding_mask, device=q.device)
        return remap_attention(self.position, q, k, v, q_pos, k_pos, scale=self.scale, causal=causal,  # type: ignore[arg-type]
                               q_index=k_start + k_len - q_len, k_index=k_start, window=self.window if windowed else FULL,
                               allowed=allowed, sinks=self.sinks, dropout=self.dropout if self.training else 0.0,
                               need_weights=need_weights)

    def _windowed(self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, *, offset: int,
                  k_start: int) -> Tensor:
        """Windowed causal attention, a block of queries at a time against the keys their window reaches.

        Query i (sequence index offset + i) and key j (index k_start + j). Each block's mask is
        (block, block + W) for a sliding window, (block, C) for a chunked one: memory O(T·W), never (T, T).
        """
        q_len, size = q.shape[-2], self.window.size
        assert size is not None
        block = max(size, WINDOW_BLOCK) if self.window.kind == "sliding" else size
        outs = []
        start = 0
        while start < q_len:
            first = offset + start  # sequence index of the block's first query
            stop = min(q_len, start + block)
            if self.window.kind == "chunked":
                stop = min(stop, start + size - first % size)  # a block never crosses a chunk boundary
            lo = max(k_start, self.window.first_visible(first))  # first key any query of the block sees
            hi = offset + stop  # one past the last key (the block's last query itself)
            ks = slice(lo - k_start, hi - k_start)
            allowed = window_mask(self.window, q_index=first, k_index=lo, q_len=stop - start, k_len=hi - lo,
                                  device=q.device)
            qb = q[..., start:stop, :]
            qp = q_pos[..., start:stop]
            out, _ = self._attend(qb, k[..., ks, :], v[..., ks, :], qp, k_pos[..., ks], allowed=allowed)
            outs.append(out)
            start = stop
        return outs[0] if len(outs) == 1 else torch.cat(outs, dim=-2)  # (B, H, Tq, Dh)

    def _continued(self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor) -> Tensor:
        """Causal attention of many queries that continue a cache (the last Tq of Tk > Tq keys).

        One masked call would score the whole (Tq, Tk) rectangle — the Tq²/2 pairs the mask hides included,
        as many pairs as the whole prompt's causal pass when the prefix is as long as the continuation — and
        hold a (Tq, Tk) mask. On the CPU, with no logit bias, sinks or dropout, it is two calls of the fused
        kernel instead — every query against the cached keys, unmasked (a key head's query heads folded into
        one: nothing repeated), and the new keys causally (a square) — merged by their log-sum-exps: the
        pairs a causal pass scores, no mask. Otherwise the one masked call.
        """
        base = PositionScheme
        scheme = type(self.position)
        if (q.device.type != "cpu" or self.sinks is not None or (self.training and self.dropout > 0)
                or scheme.logit_bias is not base.logit_bias or scheme.attention_bias is not base.attention_bias
                or q.dtype not in (torch.float32, torch.float64, torch.bfloat16)):
            return self._attend(q, k, v, q_pos, k_pos, causal=True)[0]
        flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
        batch, heads, q_len, head_dim = q.shape
        kv_heads, past = k.shape[1], k.shape[-2] - q.shape[-2]
        groups = heads // kv_heads
        folded = q.reshape(batch, kv_heads, groups * q_len, head_dim)  # consecutive query heads share a key head
        out_past, lse_past = flash(folded, k[..., :past, :], v[..., :past, :], 0.0, False, scale=self.scale)
        out_past, lse_past = out_past.reshape(q.shape), lse_past.reshape(batch, heads, q_len)
        k_new, v_new = k[..., past:, :], v[..., past:, :]
        if groups > 1:
            k_new, v_new = k_new.repeat_interleave(groups, dim=1), v_new.repeat_interleave(groups, dim=1)
        out_new, lse_new = flash(q, k_new, v_new, 0.0, True, scale=self.scale)
        top = torch.maximum(lse_past, lse_new)
        w_past, w_new = (lse_past - top).exp().unsqueeze(-1), (lse_new - top).exp().unsqueeze(-1)
        return ((out_past * w_past + out_new * w_new) / (w_past + w_new)).to(q.dtype)  # (B, H, Tq, Dh)

    def _attend(self, q: Tensor, k: Tensor, v: Tensor, q_pos: Tensor, k_pos: Tensor, *, causal: bool = False,
                valid_lens: Tensor | None = None, key_padding_mask: Tensor | None = None,
                allowed: Tensor | None = None, need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """softmax(q·kᵀ · scale + bias, masked) · v for one block of queries: (B, H, Tq, Dh) and the weights.

        ``allowed`` (Tq, Tk) is an explicit may-attend mask (windows); otherwise the
        causal / valid-length / padding masks are built here.
        """
        batch, _, q_len, _ = q.shape
        k_len = k.shape[-2]
        if allowed is not None and allowed.dim() == 2:
            allowed = allowed.view(1, 1, q_len, k_len)
        bias = self.position.logit_bias(q, k, q_pos, k_pos)
        dropout = self.dropout if self.training else 0.0
        # square causal attention with nothing else to mask: SDPA's own causal path needs no (Tq, Tk) mask
        # (top-left and bottom-right alignment coincide when Tq == Tk)
        # a branch, not bool(...): with a dynamic cache length q_len == k_len is symbolic, and under
        # torch.compile only a branch turns it into the plain bool SDPA's is_causal must be
        plain_causal = False
        if (causal and allowed is None and q_len == k_len and valid_lens is None and key_padding_mask is None
                and bias is None and not need_weights and self.sinks is None):
            plain_causal = True
        if allowed is None and not plain_causal:
            allowed = build_mask(
                batch=batch, q_len=q_len, k_len=k_len, valid_lens=valid_lens, key_padding_mask=key_padding_mask,
                causal=causal and q_len > 1,  # one query is the last position: it sees every key, nothing to mask
                device=q.device,
            )

        groups = self.num_heads // self.num_kv_heads
        value_term = self.position.uses_weights  # the scheme adds Σ_j α_ij·r_ij to the output: weights needed
        if need_weights or value_term:
            if groups > 1:  # each kv head serves `groups` consecutive query heads
                k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # (B, H, Tk, Dh)
            scores = q @ k.transpose(-1, -2) * self.scale  # (B, H, Tq, Tk)
            if bias is not None:
                scores = scores + bias.to(scores.dtype)
            if allowed is not None:
                scores = scores.masked_fill(~allowed, torch.finfo(scores.dtype).min)
            if self.sinks is not None:  # the sink column takes its share of the mass, then is dropped
                sink = self.sinks.to(scores.dtype).view(1, -1, 1, 1).expand(*scores.shape[:-1], 1)
                weights = torch.cat((scores, sink), dim=-1).softmax(dim=-1)[..., :-1]
            else:
                weights = scores.softmax(dim=-1)
            dropped = F.dropout(weights, dropout, self.training)
            out = dropped @ v
            if value_term:
                out = out + self.position.value_bias(dropped, q_pos, k_pos).to(out.dtype)  # (B, H, Tq, Dh)
            return out, weights if need_weights else None

        attn_mask: Tensor | None = None
        if bias is not None:
            # 4-D on purpose: given a 3-D (H, Tq, Tk) mask, CPU SDPA leaves its fused kernel for the math
            # path and expands the mask to (B, H, Tq, Tk) — ~5× slower; (1, H, Tq, Tk) stays fused
            attn_mask = bias.to(q.dtype)
            attn_mask = attn_mask.view(1, *attn_mask.shape) if attn_mask.dim() == 3 else attn_mask
        if allowed is not None:
            fill = torch.finfo(q.dtype).min
            base = attn_mask if attn_mask is not None else torch.zeros((), dtype=q.dtype, device=q.device)
            attn_mask = torch.where(allowed, base, torch.tensor(fill, dtype=q.dtype, device=q.device))
        if self.sinks is not None:
            # a sink is a key with logit s_h and a zero value: one zero key/value column, its logit set by the mask
            zeros = k.new_zeros(*k.shape[:-2], 1, k.shape[-1])
            k, v = torch.cat((k, zeros), dim=-2), torch.cat((v, zeros), dim=-2)
            base = attn_mask if attn_mask is not None else q.new_zeros(1, 1, q_len, k_len)
            base = base.expand(base.shape[0], self.num_heads, q_len, k_len)  # (B or 1, H, Tq, Tk)
            sink = self.sinks.to(q.dtype).view(1, -1, 1, 1).expand(base.shape[0], -1, q_len, 1)
            attn_mask = torch.cat((base, sink), dim=-1)  # (B or 1, H, Tq, Tk + 1)
        if groups > 1 and q_len == 1 and attn_mask is None:
            # one decoding query per head: the `groups` query heads of a kv head become `groups` queries of
            # that head, a plain attention with nothing repeated — 2× faster than enable_gqa on CPU (1 thread)
            q_folded = q.reshape(batch, self.num_kv_heads, groups, q.shape[-1])  # (B, Hkv, g, Dh or a widened q)
            out = F.scaled_dot_product_attention(q_folded, k, v, dropout_p=dropout, scale=self.scale)
            return out.reshape(batch, self.num_heads, 1, self.head_dim), None  # (B, H, 1, Dh)
        # enable_gqa reads each kv head for its query group without materialising the repeat: measured on
        # CPU (1 thread, 9/3 heads, Dh 64) as fast as repeat_interleave + SDPA at 2,048 tokens, 1.1× at 512
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout,
                                             is_causal=plain_causal, enable_gqa=groups > 1, scale=self.scale)
        return out, None


#: Queries per block of sliding-window attention (at least the window): fewer, larger SDPA calls.
WINDOW_BLOCK = 256
#: More queries than this continuing a cache take ``MultiHeadAttention._continued`` (fewer: one masked call).
CONTINUATION_MIN = 64
