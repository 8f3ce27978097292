"""The builders: one config → parts that fit; tying/width/vocabulary checks; what the scheme is told."""

from dataclasses import replace

import pytest
import torch

from posenc.models import (
    DecoderOnlyLM, EncoderDecoder, DecoderConfig, ModelConfig, build_decoder_only, build_encoder_decoder, build_decoder,
)
from posenc.models.builders import decoder_layer, output_head, position_scheme, token_embedding
from posenc.models.parts import InputEmbedding, layer_norm


def cfg(**kw) -> ModelConfig:
    return ModelConfig(**{"vocab_size": 29, "dim": 16, "num_heads": 4, "num_layers": 1, **kw})


def test_decoder_stacks_are_told_they_are_causal():
    assert build_decoder_only(cfg(position="t5")).position.bidirectional is False
    ed = build_encoder_decoder(cfg(position="t5"))
    assert ed.src_position.bidirectional is True and ed.tgt_position.bidirectional is False
    # the user's option wins over what the model says
    assert build_decoder_only(cfg(position="t5", position_options={"bidirectional": True})).position.bidirectional


def test_max_length_reaches_the_learned_table_and_aliases_work():
    lm = build_decoder_only(cfg(position="learned", max_length=40))
    assert lm.position.max_len == 40 and lm.position.max_position() == 39
    assert build_decoder_only(cfg(position="nope")).position.name == "none"
    assert build_decoder_only(cfg(position="absolute")).position.name == "sinusoidal"


def test_tie_check_lives_in_the_builder():
    with pytest.raises(ValueError, match="cannot tie the output head.*'naive'.*tie_embeddings=False"):
        build_decoder_only(cfg(position="naive"))
    with pytest.raises(ValueError, match="cannot tie"):
        build_encoder_decoder(cfg(position="naive"))
    lm = build_decoder_only(cfg(position="naive", tie_embeddings=False))
    assert lm.embed.token.dim == 15 and not lm.head.tied


def test_llama_builder_uses_the_same_tie_check():
    llama = DecoderConfig(vocab_size=29, dim=16, num_heads=4, num_layers=1, ffn_dim=32, position="naive")
    with pytest.raises(ValueError, match="cannot tie the output head.*'naive'.*tie_embeddings=False"):
        build_decoder(replace(llama, tie_embeddings=True))
    assert not build_decoder(llama).head.tied
    tied = build_decoder(replace(llama, position="rope", tie_embeddings=True))
    assert tied.head.tied and tied(torch.zeros(1, 3, dtype=torch.long)).shape == (1, 3, 29)


def test_shared_tables_need_one_vocabulary():
    with pytest.raises(ValueError, match="vocab_size=29, tgt_vocab_size=31"):
        build_encoder_decoder(cfg(share_embeddings=True, tgt_vocab_size=31))
    ed = build_encoder_decoder(cfg(share_embeddings=True))
    assert ed.src_embed.token is ed.tgt_embed.token and ed.describe()["embeddings"]["shared"] is True
    assert ed.head.tied and ed.head(torch.zeros(1, 1, 16)).shape == (1, 1, 29)


def test_hidden_then_head_is_forward(gen):
    lm = build_decoder_only(cfg(position="rope", num_layers=2)).double().eval()
    ids = torch.randint(0, 29, (2, 7), generator=gen)
    h = lm.hidden(ids)
    assert h.shape == (2, 7, 16)
    torch.testing.assert_close(lm.head(h), lm(ids))
    # hidden is after the final norm: LayerNorm without learned shift/scale changes → zero mean per row
    torch.testing.assert_close(h.mean(-1), torch.zeros(2, 7, dtype=torch.float64), atol=1e-12, rtol=0)


def test_a_model_assembled_by_hand_from_parts_runs_and_describes_itself(gen):
    """What a new architecture's builder does: choose the parts, hand them to the model."""
    c = cfg(position="alibi")
    position = position_scheme(c, causal=True)
    token = token_embedding(c, c.vocab_size, position)
    layers = [decoder_layer(c, position, cross_attention=False) for _ in range(2)]
    lm = DecoderOnlyLM(embed=InputEmbedding(token=token, position=position), layers=layers,
                       norm=layer_norm(16)(), head=output_head(c, token, c.vocab_size))
    ids = torch.randint(0, 29, (1, 6), generator=gen)
    assert lm(ids).shape == (1, 6, 29)
    info = lm.describe()
    assert info["config"] is None and info["position"]["name"] == "alibi" and info["embeddings"]["tied_output"]


def test_config_round_trips_and_reads_dicts_saved_before_max_length():
    c = cfg(position="learned", position_options={"max_len": 12}, max_length=10)
    assert ModelConfig.from_dict(c.to_dict()) == c
    old = {k: v for k, v in cfg().to_dict().items() if k != "max_length"}  # a checkpoint from before the field
    assert ModelConfig.from_dict(old) == cfg()
    with pytest.raises(ValueError, match=r"unknown ModelConfig field\(s\) \['dims'\]"):
        ModelConfig.from_dict({**old, "dims": 3})


#: State-dict names of models saved before the models package existed: checkpoints must keep loading.
SAVED_NAMES = {
    "decoder-only": {"position.weight", "embed.token.weight", "embed.position.weight", "norm.weight", "norm.bias",
                     "layers.0.self_attn.position.weight",
                     *(f"layers.0.{m}.{p}" for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                      "self_attn.out_proj", "ffn.up", "ffn.down",
                                                      "self_res.norm", "ffn_res.norm") for p in ("weight", "bias"))},
    "encoder-decoder": {"src_position.weight", "tgt_position.weight", "src_embed.token.weight",
                        "src_embed.position.weight", "tgt_embed.token.weight", "tgt_embed.position.weight",
                        "encoder_norm.weight", "encoder_norm.bias", "decoder_norm.weight", "decoder_norm.bias",
                        "encoder.0.attn.position.weight", "decoder.0.self_attn.position.weight",
                        *(f"encoder.0.{m}.{p}" for m in ("attn.q_proj", "attn.k_proj", "attn.v_proj", "attn.out_proj",
                                                         "ffn.up", "ffn.down", "attn_res.norm", "ffn_res.norm")
                          for p in ("weight", "bias")),
                        *(f"decoder.0.{m}.{p}" for m in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                         "self_attn.out_proj", "cross_attn.q_proj", "cross_attn.k_proj",
                                                         "cross_attn.v_proj", "cross_attn.out_proj", "ffn.up",
                                                         "ffn.down", "self_res.norm", "cross_res.norm", "ffn_res.norm")
                          for p in ("weight", "bias"))},
}


@pytest.mark.parametrize("kind", sorted(SAVED_NAMES))
def test_state_dict_names_are_those_of_saved_checkpoints(kind):
    build = build_decoder_only if kind == "decoder-only" else build_encoder_decoder
    model = build(cfg(position="learned"))
    assert isinstance(model, DecoderOnlyLM if kind == "decoder-only" else EncoderDecoder)
    names = set(model.state_dict())
    names -= {n for n in names if n.endswith("head.weight")}  # tied: the token table again
    assert names == SAVED_NAMES[kind]
