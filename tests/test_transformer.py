"""Cross-scheme model properties: every registered scheme must pass these."""

import pytest
import torch

from posenc import ModelConfig, build_decoder_only, build_encoder_decoder
from posenc.positions import names


def config(name: str, **kw) -> ModelConfig:
    return ModelConfig(vocab_size=37, dim=32, num_heads=4, num_layers=2, position=name,
                       tie_embeddings=name != "naive", **kw)


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("name", names())
def test_decoder_only_cached_equals_full(name, norm_first, gen):
    model = build_decoder_only(config(name, norm_first=norm_first)).double().eval()
    ids = torch.randint(0, 37, (2, 9), generator=gen)
    full = model(ids)
    cache = model.new_cache()
    steps = [model(ids[:, :4], cache=cache)] + [model(ids[:, i:i + 1], cache=cache) for i in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


@pytest.mark.parametrize("name", names())
def test_encoder_decoder_cached_equals_full(name, gen):
    model = build_encoder_decoder(config(name)).double().eval()
    src = torch.randint(0, 37, (2, 6), generator=gen)
    tgt = torch.randint(0, 37, (2, 7), generator=gen)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[1, 4:] = True
    memory = model.encode(src, src_padding_mask=pad)
    full = model.decode(tgt, memory, memory_padding_mask=pad)
    cache = model.new_cache()
    steps = [model.decode(tgt[:, i:i + 1], memory, memory_padding_mask=pad, cache=cache) for i in range(7)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)


@pytest.mark.parametrize("name", names())
def test_future_token_never_changes_earlier_output(name, gen):
    model = build_encoder_decoder(config(name)).double().eval()
    src = torch.randint(0, 37, (1, 5), generator=gen)
    tgt = torch.randint(0, 37, (1, 8), generator=gen)
    cut = int(torch.randint(1, 8, (1,), generator=gen))
    changed = tgt.clone()
    changed[:, cut:] = torch.randint(0, 37, (1, 8 - cut), generator=gen)
    a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :cut], b[:, :cut])
    lm = build_decoder_only(config(name)).double().eval()
    torch.testing.assert_close(lm(tgt)[:, :cut], lm(changed)[:, :cut])


@pytest.mark.parametrize("name", names())
def test_positions_are_data_offset_equals_shifted_cache(name, gen):
    """Running tokens at explicit positions p..p+T equals the same tokens after a cache of length p."""
    lm = build_decoder_only(config(name, position_options={"max_len": 64} if name == "learned" else {})).double().eval()
    ids = torch.randint(0, 37, (1, 10), generator=gen)
    cache = lm.new_cache()
    lm(ids[:, :6], cache=cache)
    cached = lm(ids[:, 6:], cache=cache)
    full = lm(ids)[:, 6:]
    torch.testing.assert_close(cached, full)
    # per-sequence (B, T) positions give the same as shared (T,) positions
    torch.testing.assert_close(lm(ids, positions=torch.arange(10)[None].expand(1, 10)), lm(ids))


def test_generated_tokens_get_their_true_positions(gen):
    """Greedy generation with the cache equals recomputing the whole sequence each step."""
    lm = build_decoder_only(config("rope")).double().eval()
    prompt = torch.randint(0, 37, (2, 4), generator=gen)
    out = lm.generate(prompt, max_new_tokens=6)
    ids = prompt
    for _ in range(6):
        ids = torch.cat([ids, lm(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, ids)


def test_left_padding_with_per_sequence_positions(gen):
    """A left-padded row given its own positions scores like the unpadded sequence."""
    lm = build_decoder_only(config("rope")).double().eval()
    seq = torch.randint(1, 37, (1, 5), generator=gen)
    padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), seq], dim=1)
    pad = torch.tensor([[True] * 3 + [False] * 5])
    pos = torch.tensor([[0, 0, 0, 0, 1, 2, 3, 4]])
    torch.testing.assert_close(lm(padded, positions=pos, key_padding_mask=pad)[:, 3:], lm(seq))


def test_describe_says_exactly_what_was_built():
    info = build_encoder_decoder(config("alibi")).describe()
    assert info["position"]["encoder"]["name"] == "alibi"
    assert info["position"]["encoder"]["parameters"] == 0
    assert info["position"]["cross_attention"] == "none"
    assert info["embeddings"]["tied_output"] is True


def test_naive_scheme_widens_token_vectors():
    lm = build_decoder_only(config("naive"))
    assert lm.embed.token.dim == 31
    assert lm(torch.randint(0, 37, (1, 4))).shape == (1, 4, 37)
    with pytest.raises(ValueError, match="cannot tie"):
        build_decoder_only(ModelConfig(vocab_size=37, dim=32, num_heads=4, position="naive"))
