"""BERT (Devlin et al., 2019): learned absolute positions plus token types, a post-norm encoder.

config.json ``model_type`` "bert" (``BertModel`` and the task models around it:
bert-base, MiniLM, all-MiniLM-L6-v2, …). Positions are posenc's ``learned``
additive scheme with ``max_position_embeddings`` rows, added with the
token-type (segment) vectors before the embedding LayerNorm. Parts: post-norm
encoder layers (LayerNorm ε = ``layer_norm_eps``), exact-GELU feed-forward,
biases everywhere, the pooler when the checkpoint has one. Built by
``posenc.models.encoder.build_encoder``; sentence embeddings by
``Encoder.sentence_embedding`` (mean pooling, as sentence-transformers).

Names: ``BertModel``'s (``embeddings.…``, ``encoder.layer.N.…``, ``pooler.…``),
also under a task model's ``bert.`` prefix; an MLM or classification head is
not part of the encoder and is refused by name.

Refused by name: ``position_embedding_type`` other than "absolute" (Shaw-style
relative keys), ``is_decoder`` / ``add_cross_attention``, activations other
than gelu/relu.

Reference used to verify: HF ``BertModel`` on tiny random checkpoints and the
real all-MiniLM-L6-v2 weights (``tests/families/test_bert.py``).
"""

from __future__ import annotations

from posenc.families.hf_config import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_VOCAB, MAX_WIDTH, HFConfig
from posenc.families.stacks import StackFamily

TOP_NAMES = {"embeddings.word_embeddings.weight": "embed.weight",
             "embeddings.position_embeddings.weight": "position.weight",
             "embeddings.token_type_embeddings.weight": "token_type.weight",
             **{f"embeddings.LayerNorm.{w}": f"embed_norm.{w}" for w in ("weight", "bias")},
             **{f"pooler.dense.{w}": f"pooler.{w}" for w in ("weight", "bias")}}
BLOCK_NAMES = {
    **{f"attention.self.{hf}.{w}": f"attn.{p}_proj.{w}" for hf, p in (("query", "q"), ("key", "k"), ("value", "v"))
       for w in ("weight", "bias")},
    **{f"attention.output.dense.{w}": f"attn.out_proj.{w}" for w in ("weight", "bias")},
    **{f"attention.output.LayerNorm.{w}": f"attn_res.norm.{w}" for w in ("weight", "bias")},
    **{f"intermediate.dense.{w}": f"ffn.up.{w}" for w in ("weight", "bias")},
    **{f"output.dense.{w}": f"ffn.down.{w}" for w in ("weight", "bias")},
    **{f"output.LayerNorm.{w}": f"ffn_res.norm.{w}" for w in ("weight", "bias")},
}


def config_from_hf(c: HFConfig, pairing: str):
    from posenc.models.encoder import EncoderConfig

    kind = c.str("position_embedding_type", "absolute")
    if kind != "absolute":
        raise ValueError(f"{c.source}: position_embedding_type {kind!r} is not supported; posenc runs BERT with "
                         "'absolute' (learned) positions")
    for key in ("is_decoder", "add_cross_attention"):
        if c.bool(key, False):
            raise ValueError(f"{c.source}: {key} = true is not supported; posenc runs BERT as an encoder")
    act = c.str("hidden_act", "gelu", choices=("gelu", "relu"))
    context = c.int("max_position_embeddings", 512, maximum=MAX_CONTEXT)
    return EncoderConfig(
        vocab_size=c.int("vocab_size", maximum=MAX_VOCAB), dim=c.int("hidden_size", maximum=MAX_WIDTH),
        num_layers=c.int("num_hidden_layers", maximum=MAX_LAYERS),
        num_heads=c.int("num_attention_heads", maximum=MAX_HEADS),
        ffn_dim=c.int("intermediate_size", maximum=MAX_WIDTH), norm_eps=c.float("layer_norm_eps", 1e-12, above=0),
        position="learned", position_options={"max_len": context}, max_position_embeddings=context,
        type_vocab_size=c.int("type_vocab_size", 2, minimum=0, maximum=MAX_VOCAB), activation=act, family="bert",
    )


def build(config, *, device=None):
    from posenc.models.encoder import build_encoder

    return build_encoder(config, device=device)


FAMILY = StackFamily(name="bert", model_types=("bert",), config_from_hf=config_from_hf, block_names=BLOCK_NAMES,
                     top_names=TOP_NAMES, prefix="encoder", stack="layer", strip=("bert.",), builder=build)
