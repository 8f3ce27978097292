"""Cache policies: what a decoder's KV cache keeps, and at which positions, when a stream outgrows it.

Engines run streams longer than the context by moving the cache; posenc treats positions as data and owns its
cache, so it moves it exactly. A policy string (``parse_policy``; ``posenc generate/perplexity --cache``):

``full``
    keep everything at its sequence index (the cache as it always was; nothing moves).
``window:W``
    a rolling window of the last W tokens, no sinks.
``sink:S,window:W``
    StreamingLLM (Xiao et al., 2023): the first S tokens ("attention sinks") and the last W.
``shift:KEEP`` or ``shift:KEEP,ctx:N``
    llama.cpp's context shift: when N tokens are held (default the model's trained context) and more come,
    drop half of those after the first KEEP, oldest first.
``rescale``
    keep everything, and as the stream grows change a length-dependent RoPE scaling (rope-yarn's factor,
    rope-longrope's short → long switch, rope-dynamic-ntk's length), re-rotating the cached keys with the new
    frequencies instead of re-running the tokens.

Positions live inside the cache: after every move the tokens a full-attention layer holds sit at positions
0, 1, …, N − 1 in stream order (StreamingLLM's "positions within the cache"; llama.cpp's shift gives the same
numbers), so the model never sees a position past the cache. Layers with a window of their own (Gemma 3's
sliding layers, Llama 4's chunks) keep their window, counted in stream order as before; their keys move with the
newest tokens (by the same Δ), so their relative distances stay true. A move re-rotates each moved key from the
raw (unrotated) key the cache keeps (``KVCache.keep_raw``, ``KVCache.move``): no rotation is ever applied to an
already rotated key, so nothing accumulates — a key moved 1,000 times equals one computed once.

What can move, by family (``movable``): rotary schemes (RoPE and its scalings, xPos, FoPE, PoPE, M-RoPE for
text positions, the query temperatures, MLA's decoupled rotary slice) by re-rotation; bias schemes (ALiBi, T5,
KERPLE, FIRE, Shaw, CoPE), NoPE and the remapping schemes (raw keys, positions used at attention time) by their
positions alone. Additive schemes (sinusoidal, learned, …) are refused: the position is added to the token
vectors at the input, so every cached key and value of every layer carries it and cannot be moved without
re-running the tokens.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from posenc.attention import KVCache
from posenc.positions import PositionScheme
from posenc.positions.mrope import PACKED_FLAG

GRAMMAR = "full | window:W | sink:S,window:W | shift:KEEP[,ctx:N] | rescale  (S, KEEP >= 0; W, N >= 1)"
#: the schemes whose frequencies depend on the stream length, and the option ``rescale`` changes
RESCALABLE = {"rope-yarn": "factor", "rope-longrope": "max_seq_len", "rope-dynamic-ntk": "max_seq_len"}


@dataclass(frozen=True)
class CachePolicy:
    """A parsed policy (see the module docstring). ``kind``: full, window, sink, shift or rescale."""

    kind: str
    window: int | None = None  # window, sink
    sinks: int = 0  # sink
    keep: int = 0  # shift
    ctx: int | None = None  # shift (None: the model's trained context)

    def __str__(self) -> str:
        if self.kind == "window":
            return f"window:{self.window}"
        if self.kind == "sink":
            return f"sink:{self.sinks},window:{self.window}"
        if self.kind == "shift":
            return f"shift:{self.keep}" + ("" if self.ctx is None else f",ctx:{self.ctx}")
        return self.kind

    @property
    def moves(self) -> bool:
        """Whether the cache moves (drops tokens and renumbers, or re-rotates): everything but ``full``."""
        return self.kind != "full"

    @property
    def drops(self) -> bool:
        return self.kind in ("window", "sink", "shift")


_ITEM = re.compile(r"^(window|sink|shift|ctx):(\d+)$")


def parse_policy(text: str | CachePolicy) -> CachePolicy:
    """``"sink:4,window:1020"`` → ``CachePolicy``; anything else is refused with the grammar."""
    if isinstance(text, CachePolicy):
        return text
    if not isinstance(text, str):
        raise TypeError(f"a cache policy is a string ({GRAMMAR}), got {type(text).__name__}")
    spec = text.strip().replace(" ", "")

    def bad(why: str) -> ValueError:
        return ValueError(f"cache policy {text!r}: {why}; the grammar is {GRAMMAR}")

    if spec in ("full", "rescale"):
        return CachePolicy(spec)
    items: dict[str, int] = {}
    for item in spec.split(","):
        m = _ITEM.match(item)
        if m is None:
            raise bad(f"{item!r} is not one of full, rescale, window:W, sink:S, shift:KEEP, ctx:N")
        if m[1] in items:
            raise bad(f"{m[1]} is given twice")
        if len(m[2]) > 12:
            raise bad(f"{m[1]}:{m[2]} is too large")
        items[m[1]] = int(m[2])
    keys = set(items)
    if keys == {"window"}:
        kind = "window"
    elif keys == {"sink", "window"}:
        kind = "sink"
    elif keys in ({"shift"}, {"shift", "ctx"}):
        kind = "shift"
    else:
        raise bad(f"{' + '.join(sorted(keys))} do not go together")
    if "window" in items and items["window"] < 1:
        raise bad("the window must be at least 1 token")
    if "ctx" in items and items["ctx"] < 1:
        raise bad("ctx must be at least 1 token")
    if kind == "shift" and "ctx" in items and items["ctx"] < items["shift"] + 2:
        raise bad(f"ctx:{items['ctx']} must exceed KEEP={items['shift']} by at least 2 (half of what follows "
                  "the kept tokens is dropped)")
    return CachePolicy(kind, window=items.get("window"), sinks=items.get("sink", 0), keep=items.get("shift", 0),
                       ctx=items.get("ctx"))


def movable(scheme: PositionScheme) -> str | None:
    """None where a cache under ``scheme`` can move; otherwise why not (a sentence naming the scheme)."""
    if scheme.family == "additive":
        return (f"{scheme.name} adds its position vectors to the token vectors at the input, so every cached "
                "key and value of every layer carries its position; they cannot be moved without re-running the "
                "tokens (use --cache full, or a rotary, bias or no-position scheme)")
    return None


def keeps_raw(scheme: PositionScheme) -> bool:
    """Whether a moving cache must keep the unrotated keys: the scheme rotates keys by position at caching time."""
    return scheme.family == "rotary" and not scheme.remaps


class StreamCache(list):  # type: ignore[type-arg]
    """One ``KVCache`` per attention (a list, as ``Decoder.new_cache`` gives) plus the policy that moves them.

    Build it with ``Decoder.new_cache(policy)`` (or directly over any attention modules with ``position`` and
    ``window``, e.g. one ``MultiHeadAttention`` in a test). Before each forward of ``n`` new tokens call
    ``make_room(n)``: it moves the caches if the policy says so and returns the positions of the new tokens
    (``Decoder.hidden`` does this, in pieces of at most ``piece`` tokens).

    Attributes:
        policy: the ``CachePolicy``.
        tokens: the stream indices of the tokens a full-attention layer holds, (N,) int64 (their positions are
            0 … N − 1 once anything moved).
        seen: tokens seen so far.
        moves: how many times the caches were moved; ``dropped``: tokens dropped from full-attention layers.
    """

    def __init__(self, attentions: Sequence[nn.Module], policy: str | CachePolicy, *,
                 context: int | None = None) -> None:
        policy = parse_policy(policy)
        super().__init__(KVCache() for _ in attentions)
        self.attentions = list(attentions)
        self.policy = policy
        self.seen = 0
        self.moves = 0
        self.dropped = 0
        self.tokens = torch.zeros(0, dtype=torch.long)
        self._next = 0  # position of the next token
        self.capacity: int | None = None
        if policy.kind in ("window", "sink"):
            assert policy.window is not None
            self.capacity = policy.sinks + policy.window
        elif policy.kind == "shift":
            self.capacity = policy.ctx if policy.ctx is not None else context
            if self.capacity is None:
                raise ValueError(f"cache policy {policy}: give ctx:N (the model states no trained context)")
            if self.capacity < policy.keep + 2:
                raise ValueError(f"cache policy {policy}: a context of {self.capacity} tokens must exceed "
                                 f"KEEP={policy.keep} by at least 2")
        self._original: dict[int, tuple[PositionScheme, str, Any]] = {}
        for attn in self.attentions:
            why = movable(attn.position)
            if why is not None and policy.moves:
                raise ValueError(f"cache policy {policy} is not defined for this model: {why}")
        if policy.moves and self.capacity is not None:
            widest = max((a.window.size or 0 for a in self.attentions if not a.window.full), default=0)
            if widest and _sure_kept(policy, self.capacity) < widest:
                raise ValueError(
                    f"cache policy {policy}: the model's windowed layers keep their window of {widest} tokens, "
                    f"more than the {_sure_kept(policy, self.capacity)} tokens this policy is sure to keep "
                    f"(with up to {self.piece} new tokens a forward); give a cache of at least "
                    f"{self._smallest(widest)} tokens")
        if policy.kind == "rescale":
            for attn in self.attentions:
                scheme = attn.position
                if scheme.name in RESCALABLE and id(scheme) not in self._original:
                    option = RESCALABLE[scheme.name]
                    self._original[id(scheme)] = (scheme, option, getattr(scheme, option))
            if not self._original:
                names = sorted({a.position.name for a in self.attentions})
                raise ValueError(f"cache policy rescale is not defined for {', '.join(names)}: no layer has a "
                                 f"length-dependent RoPE scaling ({', '.join(RESCALABLE)} do)")
        for attn, cache in zip(self.attentions, self):
            cache.keep_raw = policy.moves and keeps_raw(attn.position)

    @property
    def piece(self) -> int:
        """The most new tokens one forward may bring (``Decoder.hidden`` splits longer inputs)."""
        return _piece(self.policy, self.capacity)

    def _smallest(self, widest: int) -> int:
        """The smallest cache (sinks + window, or ctx) this policy's kind needs to keep ``widest`` tokens."""
        p = self.policy
        size = widest + 1
        while True:
            window = size - p.sinks
            trial = CachePolicy(p.kind, window=window, sinks=p.sinks, keep=p.keep, ctx=size)
            if window >= 1 and _sure_kept(trial, size) >= widest:
                return size
            size += 1

    def pieces(self, total: int) -> Iterator[tuple[int, int]]:
        """[start, stop) ranges of ``total`` new tokens, each at most ``piece`` long."""
        start = 0
        while start < total:
            stop = min(total, start + self.piece)
            yield start, stop
            start = stop

    def make_room(self, n: int, device: torch.device | None = None) -> Tensor:
        """Move the caches so that ``n`` new tokens fit; return their positions (n,) int64."""
        if n > self.piece:
            raise ValueError(f"cache policy {self.policy}: {n} new tokens at once; at most {self.piece} "
                             "(feed them in pieces, as Decoder.hidden does)")
        p = self.policy
        held = self.tokens.numel()
        keep: Tensor | None = None
        if p.kind in ("window", "sink") and held + n > (self.capacity or 0):
            assert p.window is not None
            recent = p.window - n
            sinks = min(p.sinks, held)
            keep = torch.cat((torch.arange(sinks), torch.arange(max(sinks, held - recent), held)))
        elif p.kind == "shift" and held + n > (self.capacity or 0):
            assert self.capacity is not None
            count = held
            discard = 0
            while count + n > self.capacity:  # llama.cpp: n_discard = n_left / 2, until the new tokens fit
                step = (count - p.keep) // 2
                if step <= 0:
                    raise ValueError(f"cache policy {p}: {n} new tokens do not fit after the {p.keep} kept")
                discard += step
                count -= step
            keep = torch.cat((torch.arange(min(p.keep, held)), torch.arange(p.keep + discard, held)))
        elif p.kind == "rescale":
            self._rescale(self.seen + n)
        if keep is not None:
            self._move(keep)
        positions = torch.arange(self._next, self._next + n, dtype=torch.long, device=device)
        self.tokens = torch.cat((self.tokens, torch.arange(self.seen, self.seen + n)))
        self.seen += n
        self._next += n
        return positions

    def _move(self, keep: Tensor) -> None:
        """Keep the held tokens ``keep`` (indices into ``tokens``), renumbered 0 … N − 1; windowed layers shift."""
        held = self.tokens.numel()
        shift = held - keep.numel()  # every token after the last dropped one moves back by this much
        for attn, cache in zip(self.attentions, self):
            if cache.k is None:
                continue
            assert cache.positions is not None
            if bool((cache.positions >= PACKED_FLAG).any()):
                raise ValueError(f"cache policy {self.policy}: {attn.position.name}'s cache holds packed (t, h, w) "
                                 "image positions; only text positions can be moved")
            if attn.window.full:
                if cache.stored != held:
                    raise ValueError(f"cache policy {self.policy}: a full-attention layer holds {cache.stored} "
                                     f"tokens, the stream {held}: the caches were used outside this StreamCache")
                cache.move(keep, torch.arange(keep.numel(), device=cache.positions.device), attn.position)
            else:
                new = cache.positions - shift
                if bool((new < 0).any()):
                    raise ValueError(f"cache policy {self.policy}: a layer's window of {attn.window.size} tokens "
                                     f"reaches past the {keep.numel()} tokens the policy keeps; give a larger cache")
                cache.move(None, new, attn.position)
        self.tokens = self.tokens[keep]
        self._next = keep.numel()
        self.dropped += shift
        self.moves += 1

    def _rescale(self, length: int) -> None:
        """Set each length-dependent scheme's option for a stream of ``length`` tokens; re-rotate if it changed."""
        changed: set[int] = set()
        for key, (scheme, option, original) in self._original.items():
            value = rescaled(scheme, option, original, length)
            if getattr(scheme, option) != value:
                setattr(scheme, option, value)
                changed.add(key)
        if not changed:
            return
        moved = False
        for attn, cache in zip(self.attentions, self):
            if id(attn.position) in changed and cache.k is not None:
                assert cache.positions is not None
                cache.move(None, cache.positions, attn.position)
                moved = True
        self.moves += moved

    def restore(self) -> None:
        """Give ``rescale``'s schemes back their options as built (the model is left as it was)."""
        for scheme, option, original in self._original.values():
            setattr(scheme, option, original)

    def describe(self) -> dict[str, Any]:
        return {"policy": str(self.policy), "capacity": self.capacity, "seen": self.seen, "held": self.tokens.numel(),
                "moves": self.moves, "dropped": self.dropped}


def _piece(p: CachePolicy, capacity: int | None) -> int:
    """The most new tokens one forward may bring under policy ``p`` with a cache of ``capacity`` tokens."""
    if p.kind in ("window", "sink"):
        assert p.window is not None
        return max(1, p.window // 4)
    if p.kind == "shift":
        assert capacity is not None
        return max(1, (capacity - p.keep) // 4)
    return 1 << 62


def _sure_kept(p: CachePolicy, capacity: int) -> int:
    """The fewest tokens a move under ``p`` can leave (pieces of up to ``_piece`` tokens): what a windowed layer
    may rely on. Window and sinks: the cache less one piece. Shift: it moves when the held tokens and a piece
    overflow the cache, i.e. from at least capacity − piece + 1 held, and drops half of those after KEEP (once
    suffices: half of what follows KEEP is at least a piece)."""
    piece = _piece(p, capacity)
    if p.kind == "shift":
        held = max(capacity - piece + 1, p.keep + 1)
        return held - (held - p.keep) // 2
    return capacity - piece


def rescaled(scheme: PositionScheme, option: str, original: Any, length: int) -> Any:
    """The option value ``rescale`` gives ``scheme`` for a stream of ``length`` tokens.

    rope-yarn: factor = min(the built factor, the power of two ≥ length / L₀), at least 1 (plain RoPE frequencies
    while the stream fits L₀, then 2, 4, … — log₂ switches, so re-rotation costs O(1) per token amortised);
    rope-dynamic-ntk: max_seq_len = L₀ · that power of two (fixed mode); rope-longrope: max_seq_len = L₀ (short
    factors) until the stream passes L₀, then L₀ + 1 (long factors for every key, cached ones re-rotated).
    """
    base = int(getattr(scheme, "original_max_len"))
    power = 1 << max(0, math.ceil(math.log2(max(length, 1) / base))) if length > base else 1
    if scheme.name == "rope-yarn":
        return float(min(float(original), float(power))) if power > 1 else 1.0
    if scheme.name == "rope-longrope":
        return base if length <= base else base + 1
    return base * power  # rope-dynamic-ntk
