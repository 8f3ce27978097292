"""Cache policies (posenc.models.cache_policy): a moved cache equals the cache recomputed at the new positions.

Every registered scheme × every moving policy, at one attention: the keys and values of one attention layer
depend only on each token's input and its position, so "recomputed from scratch" is a fresh forward over the
tokens the cache kept, at the positions it gave them — keys within 1e-6 relative (float32), outputs likewise.
Schemes that cannot move are refused by name. The grammar, the decoder (full == cached where nothing moves,
a multi-turn chat beyond the context, per-layer plans, MLA) and drift over 1,000 moves are covered too.
"""

from __future__ import annotations

import pytest
import torch

from posenc.attention import KVCache, MultiHeadAttention
from posenc.models.cache_policy import GRAMMAR, RESCALABLE, StreamCache, parse_policy
from posenc.models.decoder import DecoderConfig, build_decoder
from posenc.models.mla import MLASpec, MultiHeadLatentAttention
from posenc.plan import LayerSpec, Window
from posenc.positions import build, lookup, names
from posenc.positions.mrope import pack_positions

DIM, HEADS = 32, 4
POLICIES = ("window:6", "sink:2,window:6", "shift:2,ctx:10", "rescale")
TOKENS = 30


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def scheme_for(name: str, policy: str):
    options = {"original_max_len": 8} if name in RESCALABLE else {}
    return build(name, dim=DIM, num_heads=HEADS, max_length=64, causal=True, **options)


def stream(attn, policy: str, x: torch.Tensor, pieces=(1, 2, 3)):
    """Stream x through attn under policy; after every step compare with a fresh forward over what is kept."""
    sc = StreamCache([attn], policy, context=64)
    worst_k = worst_out = 0.0
    start, i = 0, 0
    while start < x.shape[1]:
        n = min(pieces[i % len(pieces)], sc.piece, x.shape[1] - start)
        pos = sc.make_room(n)
        out, _ = attn(x[:, start:start + n], q_pos=pos, causal=True, cache=sc[0])
        fresh = KVCache()
        kept = sc.tokens
        full, _ = attn(x[:, kept], q_pos=sc[0].positions, causal=True, cache=fresh)
        assert torch.equal(sc[0].positions, fresh.positions)
        worst_k = max(worst_k, rel(sc[0].k, fresh.k))
        worst_out = max(worst_out, rel(out, full[:, -n:]))
        start += n
        i += 1
    return sc, worst_k, worst_out


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("name", names())
def test_every_scheme_moved_equals_recomputed(name: str, policy: str) -> None:
    torch.manual_seed(0)
    scheme = scheme_for(name, policy)
    attn = MultiHeadAttention(dim=DIM, num_heads=HEADS, num_kv_heads=HEADS if name == "fope" else 2,
                              position=scheme).eval()  # FoPE per head: no grouped keys
    x = torch.randn(1, TOKENS, DIM)
    if lookup(name).family == "additive":
        with pytest.raises(ValueError, match=f"{name} adds its position vectors"):
            StreamCache([attn], policy, context=64)
        return
    if policy == "rescale" and name not in RESCALABLE:
        with pytest.raises(ValueError, match=f"rescale is not defined for {name}"):
            StreamCache([attn], policy, context=64)
        return
    with torch.no_grad():
        sc, worst_k, worst_out = stream(attn, policy, x)
    assert worst_k <= 1e-6, (name, policy, worst_k)
    assert worst_out <= 1e-5, (name, policy, worst_out)
    assert sc.seen == TOKENS
    if parse_policy(policy).drops:
        assert sc.moves > 0 and int(sc[0].positions.max()) < sc.capacity  # never a position past the cache
        assert torch.equal(sc[0].positions, torch.arange(sc[0].stored))
    else:  # rescale: switched (8 → 16 → 32 tokens), and the mutated scheme is the one built with those options
        assert sc.moves == (1 if name == "rope-longrope" else 2)
        again = build(name, dim=DIM, num_heads=HEADS, **scheme.options())
        k = torch.randn(1, 2, 5, DIM // HEADS)
        p = torch.arange(20, 25)
        assert torch.equal(scheme.rotate_key(k, p), again.rotate_key(k, p))
        option = RESCALABLE[name]
        sc.restore()
        assert getattr(scheme, option) == getattr(scheme_for(name, policy), option)


def test_sinks_are_kept_and_window_rolls() -> None:
    attn = MultiHeadAttention(dim=DIM, num_heads=HEADS, position=build("rope", dim=DIM, num_heads=HEADS)).eval()
    with torch.no_grad():
        sc, _, _ = stream(attn, "sink:3,window:5", torch.randn(1, 20, DIM), pieces=(1,))
    assert sc.tokens.tolist() == [0, 1, 2, 15, 16, 17, 18, 19]
    with torch.no_grad():
        sc, _, _ = stream(attn, "shift:2,ctx:10", torch.randn(1, 11, DIM), pieces=(1,))
    assert sc.tokens.tolist() == [0, 1, 6, 7, 8, 9, 10]  # llama.cpp: 10 held, 11th comes: drop (10 − 2) / 2 = 4


def test_mla_rotary_slice_moves() -> None:
    torch.manual_seed(1)
    spec = MLASpec(q_lora_rank=None, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8)
    attn = MultiHeadLatentAttention(spec, dim=DIM, num_heads=HEADS,
                                    position=build("rope-yarn", dim=8 * HEADS, num_heads=HEADS, original_max_len=8)).eval()
    for policy in POLICIES:
        with torch.no_grad():
            sc, worst_k, worst_out = stream(attn, policy, torch.randn(1, TOKENS, DIM))
        assert worst_k <= 1e-6 and worst_out <= 1e-5, (policy, worst_k, worst_out)
        sc.restore()


def test_mrope_packed_positions_refused() -> None:
    attn = MultiHeadAttention(dim=DIM, num_heads=HEADS, position=build("mrope", dim=DIM, num_heads=HEADS)).eval()
    sc = StreamCache([attn], "window:16")
    packed = pack_positions(torch.tensor([[0, 1, 2, 3], [0, 0, 1, 1], [0, 1, 0, 1]]))
    with torch.no_grad():
        sc.make_room(4)
        attn(torch.randn(1, 4, DIM), q_pos=packed, causal=True, cache=sc[0])
        sc.make_room(4)
        attn(torch.randn(1, 4, DIM), q_pos=packed + 4, causal=True, cache=sc[0])
        with pytest.raises(ValueError, match="packed"):
            for _ in range(3):  # the cache fills; the fourth piece of 4 moves it
                attn(torch.randn(1, 4, DIM), q_pos=sc.make_room(4), causal=True, cache=sc[0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["rope", "rope-yarn", "xpos"])
def test_no_drift_after_1000_moves(name: str, dtype: torch.dtype) -> None:
    torch.manual_seed(2)
    scheme = build(name, dim=DIM, num_heads=HEADS)
    raw = torch.randn(1, 2, 16, DIM // HEADS, dtype=dtype)
    cache = KVCache(keep_raw=True)
    start = torch.arange(100, 116)
    cache.append(scheme.rotate_key(raw, start), raw.clone(), start, raw=raw)
    positions = start
    for _ in range(1000):
        positions = positions + torch.randint(-50, 51, ()).item() if int(positions.min()) > 60 else positions + 50
        cache.move(None, positions, scheme)
    fresh = scheme.rotate_key(raw, positions)
    assert rel(cache.k, fresh) <= 1e-6


def test_grammar() -> None:
    assert str(parse_policy(" sink:4, window:1020 ")) == "sink:4,window:1020"
    for text in ("full", "rescale", "window:8", "shift:4", "shift:4,ctx:64", "sink:0,window:3"):
        assert str(parse_policy(text)) == text


@pytest.mark.parametrize("text", ["", "window", "window:0", "window:-3", "sink:4", "shift:4,window:8",
                                  "window:8,window:9", "shift:10,ctx:11", "ctx:5", "bogus:3", "full,window:3",
                                  "window:8x", "window:1e3", "rescale:2"])
def test_grammar_refusals(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_policy(text)
    assert GRAMMAR in str(err.value)


def tiny(position: str = "rope", **changes):
    cfg = DecoderConfig(vocab_size=64, dim=DIM, num_layers=2, num_heads=HEADS, num_kv_heads=2, ffn_dim=48,
                        position=position, max_position_embeddings=32, **changes)
    torch.manual_seed(3)
    return build_decoder(cfg).eval()


def test_full_is_the_plain_cache_and_unmoved_cache_equals_full_forward() -> None:
    model = tiny()
    assert type(model.new_cache("full")) is list and type(model.new_cache()) is list
    ids = torch.randint(0, 64, (1, 20))
    with torch.no_grad():
        whole = model(ids)
        for policy in ("window:64", "sink:4,window:60", "shift:4,ctx:64"):
            cache = model.new_cache(policy)
            parts = torch.cat([model(ids[:, i:i + 3], cache=cache) for i in range(0, 20, 3)], dim=1)
            assert cache.moves == 0
            assert rel(parts, whole) <= 1e-5, policy
        a = model.generate(ids[:, :5], 10)
        b = model.generate(ids[:, :5], 10, cache_policy="full")
    assert torch.equal(a, b)


def test_multi_turn_chat_beyond_the_context() -> None:
    model = tiny()
    cache = model.new_cache("sink:2,window:16")
    last = torch.zeros(1, 0, dtype=torch.long)
    total = 0
    for turn in range(8):
        prompt = torch.cat((last, torch.randint(0, 64, (1, 8))), dim=1)
        out = model.generate(prompt, 10, cache=cache)
        assert out.shape[1] == prompt.shape[1] + 10
        total += prompt.shape[1] + 9
        last = out[:, -1:]
        for layer in cache:
            assert int(layer.positions.max()) < 18 and layer.stored <= 18
    assert cache.seen == total > 4 * model.config.max_position_embeddings
    with pytest.raises(ValueError, match="not both"):
        model.generate(last, 1, cache=cache, cache_policy="window:4")


def test_decoder_refusals() -> None:
    with pytest.raises(ValueError, match="sinusoidal adds its position vectors"):
        tiny("sinusoidal").new_cache("window:8")
    with pytest.raises(ValueError, match="rescale is not defined for rope"):
        tiny().new_cache("rescale")
    with pytest.raises(ValueError, match="cache policy"):
        tiny().new_cache("window:0")
    model = tiny()
    with pytest.raises(ValueError, match="numbers the positions itself"):
        model(torch.zeros(1, 2, dtype=torch.long), positions=torch.arange(2), cache=model.new_cache("window:8"))


def test_per_layer_plan_sliding_layers_keep_their_window() -> None:
    plan = [LayerSpec(position="rope", window=Window("sliding", 6)), LayerSpec(position="rope")]
    model = tiny(layer_plan=[s.to_dict() for s in plan])
    with pytest.raises(ValueError, match="window of 6 tokens.*at least 7 tokens"):
        model.new_cache("window:6")
    model.new_cache("window:7")  # 7 − 7 // 4 = 6 kept
    with pytest.raises(ValueError, match="window of 6 tokens.*at least 11 tokens"):
        model.new_cache("shift:1,ctx:10")
    model.new_cache("shift:1,ctx:11")  # pieces of up to (11 − 1) // 4 = 2: moves from 10 held, keeps 10 − 4 = 6
    for ctx in range(11, 30):  # whatever the pieces, a cache the check allows never cuts into the sliding window
        cache = model.new_cache(f"shift:1,ctx:{ctx}")
        with torch.no_grad():
            for n in [cache.piece, 1, cache.piece - 1 or 1, 2] * 12:
                model(torch.randint(0, 64, (1, min(n, cache.piece))), cache=cache)
    cache = model.new_cache("sink:2,window:12")
    ids = torch.randint(0, 64, (1, 40))
    with torch.no_grad():
        for i in range(40):
            model(ids[:, i:i + 1], cache=cache)
            sliding, full = cache
            assert sliding.stored <= 6 and full.stored <= 14
            # the sliding layer's keys sit where the full layer's newest keys do: same distances
            assert torch.equal(sliding.positions, full.positions[-sliding.stored:])
            assert torch.equal(sliding.k, model.layers[0].attn.position.rotate_key(sliding.raw, sliding.positions))
    assert cache.moves > 0


def test_move_keeps_per_sequence_positions() -> None:
    scheme = build("rope", dim=DIM, num_heads=HEADS)
    raw = torch.randn(2, 2, 5, DIM // HEADS)
    positions = torch.tensor([[0, 1, 2, 3, 4], [3, 4, 5, 6, 7]])
    cache = KVCache(keep_raw=True)
    cache.append(scheme.rotate_key(raw, positions), raw, positions, raw=raw)
    cache.move(torch.tensor([0, 3, 4]), torch.arange(3), scheme)
    assert cache.positions.shape == (2, 3) and cache.dropped == 2 and cache.length == 5
    assert torch.equal(cache.k, scheme.rotate_key(raw[..., [0, 3, 4], :], torch.arange(3)))
