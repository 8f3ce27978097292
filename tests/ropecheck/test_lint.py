"""``posenc rope --lint``: each rule on a config that breaks it, and silence on one that does not."""

from __future__ import annotations

from posenc.formats.gguf_header import Value
from posenc.ropecheck.lint import lint

BASE = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2}


def rules(config, **kw):
    return [f["rule"] for f in lint(config, **kw)]


def test_a_sound_yarn_config_has_no_findings():
    cfg = {**BASE, "max_position_embeddings": 16384, "rope_theta": 1e4,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}}
    assert rules(cfg) == []


def test_factor_times_original_is_not_the_context():
    cfg = {**BASE, "max_position_embeddings": 32768, "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}}
    assert rules(cfg) == ["factor-vs-context"]
    dyn = {**BASE, "max_position_embeddings": 16384, "original_max_position_embeddings": 4096,
           "rope_scaling": {"rope_type": "dynamic", "factor": 4.0}}
    assert rules(dyn) == ["factor-vs-context"]


def test_scaling_on_sliding_layers():
    cfg = {**BASE, "max_position_embeddings": 32768, "rope_parameters": {
        "sliding_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e4},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}}
    assert rules(cfg) == ["scaling-on-sliding-layers"]


def test_mscale_and_explicit_attention_factor():
    cfg = {**BASE, "max_position_embeddings": 16384, "rope_scaling": {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "mscale": 1.0,
        "mscale_all_dim": 0.5}}
    (f,) = lint(cfg)
    assert f["rule"] == "mscale-attention-factor" and "off" in f["message"]
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096,
                           "attention_factor": 1.0}
    assert rules(cfg) == ["mscale-attention-factor"]


def test_longrope_switch_inside_the_context():
    cfg = {**BASE, "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
           "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8}}
    assert rules(cfg) == ["longrope-switch-in-prompts"]


def test_rope_scaling_and_rope_parameters_disagree():
    cfg = {**BASE, "max_position_embeddings": 16384, "rope_theta": 1e4,
           "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096},
           "rope_parameters": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 2048,
                               "rope_theta": 1e4}}
    assert "rope-blocks-disagree" in rules(cfg)


def test_gguf_without_its_yarn_keys():
    hf = {**BASE, "max_position_embeddings": 16384, "rope_parameters": {
        "rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0, "original_max_position_embeddings": 4096}}
    meta = {"general.architecture": Value(type=8, value="llama"), "llama.context_length": Value(type=4, value=16384),
            "llama.rope.freq_base": Value(type=6, value=1e6)}
    found = [f for f in lint({**BASE}, gguf=meta, hf_source=hf) if f["rule"] == "gguf-rope-keys"]
    assert len(found) == 1 and "llama.rope.scaling.type" in found[0]["message"]
    meta |= {"llama.rope.scaling.type": Value(type=8, value="yarn"), "llama.rope.scaling.factor": Value(6, 4.0),
             "llama.rope.scaling.original_context_length": Value(4, 4096)}
    assert not [f for f in lint({**BASE}, gguf=meta, hf_source=hf) if f["rule"] == "gguf-rope-keys"]
