"""Issue 63 (part B, items 9–10): a corrupt config gives a refusal naming the key, never a silent result.

Encoder–decoder checkpoints are written by transformers' own classes (tiny, random), then tampered;
``posenc inspect`` must refuse what the loader refuses. ``posenc rope`` reads a model type posenc does
not run through the same typed, bounded reader (``HFConfig``), and its calculator refuses inputs that
give no RoPE, by flag.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_refused, posenc

from posenc.formats import CheckpointError
from posenc.ropecheck.audit import audit, calculator

transformers = pytest.importorskip("transformers")


def _retouch(folder: Path, config: dict, drop: str | None = None) -> Path:
    cfg = json.loads((folder / "config.json").read_text())
    cfg.update(config)
    (folder / "config.json").write_text(json.dumps(cfg))
    if drop is not None:
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(folder / "model.safetensors"))
        del tensors[drop]
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def t5_folder(tmp_path_factory) -> Path:
    config = transformers.T5Config(vocab_size=61, d_model=32, d_kv=8, d_ff=40, num_layers=2, num_decoder_layers=2,
                                   num_heads=4, relative_attention_num_buckets=8, relative_attention_max_distance=20,
                                   decoder_start_token_id=0)
    folder = tmp_path_factory.mktemp("t5")
    transformers.T5ForConditionalGeneration(config).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def marian_folder(tmp_path_factory) -> Path:
    config = transformers.MarianConfig(vocab_size=71, d_model=32, encoder_layers=2, decoder_layers=2,
                                       encoder_attention_heads=4, decoder_attention_heads=2, encoder_ffn_dim=40,
                                       decoder_ffn_dim=48, max_position_embeddings=64, activation_function="swish",
                                       scale_embedding=True, pad_token_id=70, decoder_start_token_id=70,
                                       eos_token_id=0)
    folder = tmp_path_factory.mktemp("marian")
    transformers.MarianMTModel(config).save_pretrained(folder)
    return folder


def _copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def _inspect(folder: Path):
    from posenc.inspect import inspect_checkpoint

    return inspect_checkpoint(folder, sample=20)


def test_untouched_encoder_decoders_are_measured(t5_folder, marian_folder):
    t5 = _inspect(t5_folder)
    assert {s["tensor"] for s in t5["stacks"].values()} == {
        f"{stack}.block.0.layer.0.SelfAttention.relative_attention_bias.weight" for stack in ("encoder", "decoder")}
    marian = _inspect(marian_folder)
    assert marian["position"]["kind"] == "sinusoidal"
    assert all("computed by the scheme" in s["note"] for s in marian["stacks"].values())


def test_t5_without_its_decoder_bias_table_is_refused_not_called_computed(t5_folder, tmp_path):
    """The decoder's bucket table is learned: missing, it is a corrupt checkpoint, not "computed by the scheme"."""
    name = "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"
    folder = _retouch(_copy(t5_folder, tmp_path / "t5"), {}, drop=name)
    with pytest.raises(CheckpointError, match=r"decoder's position scheme \(t5\) is learned.*stores no decoder "
                                              r"table") as err:
        _inspect(folder)
    assert name in str(err.value)


@pytest.mark.parametrize("buckets", [0, -8, 1, 2.5, "8"])
def test_t5_nonsense_bucket_counts_are_refused_by_name(t5_folder, tmp_path, buckets):
    folder = _retouch(_copy(t5_folder, tmp_path / "t5"), {"relative_attention_num_buckets": buckets})
    with pytest.raises(CheckpointError, match="relative_attention_num_buckets"):
        _inspect(folder)


@pytest.mark.parametrize("key, value", [("d_model", "x"), ("d_model", -32), ("max_position_embeddings", -1),
                                        ("max_position_embeddings", 1e20), ("scale_embedding", "yes")])
def test_marian_bad_sizes_are_refused_naming_the_key_not_no_position_table(marian_folder, tmp_path, key, value):
    folder = _retouch(_copy(marian_folder, tmp_path / "marian"), {key: value})
    with pytest.raises(CheckpointError, match=key) as err:
        _inspect(folder)
    assert "no position table" not in str(err.value)


def test_inspect_refusal_is_one_line_through_the_cli(marian_folder, tmp_path):
    folder = _retouch(_copy(marian_folder, tmp_path / "marian"), {"d_model": "x"})
    result = posenc("inspect", folder)
    assert result.code in (1, 2) and "Traceback" not in result.err
    assert "d_model" in result.err and "no position table" not in result.out + result.err


# -- posenc rope: a model type posenc does not run goes through the same typed reader -----------------------------
BASE = {"model_type": "somethingnew", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 3,
        "max_position_embeddings": 256, "rope_theta": 10000.0}
GEMMA = {**BASE, "head_dim": 16, "rope_local_base_freq": 10000.0, "rope_theta": 1e6,
         "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]}


def test_an_unknown_model_types_sound_config_is_audited():
    report = audit(dict(GEMMA), hf_check=False)
    assert {e["layer_type"] for e in report["layer_types"]} == {"full_attention", "sliding_attention"}
    assert audit(dict(BASE), hf_check=False)["layer_types"][0]["original_max_len"] == 256


@pytest.mark.parametrize("config, key", [
    ({**BASE, "head_dim": 0}, "head_dim"),
    ({**BASE, "head_dim": -128}, "head_dim"),
    ({**BASE, "num_attention_heads": 0}, "num_attention_heads"),
    ({**BASE, "hidden_size": 2, "num_attention_heads": 4}, "head width"),
    ({**BASE, "max_position_embeddings": -1}, "max_position_embeddings"),
    ({**BASE, "max_position_embeddings": 1e20}, "max_position_embeddings"),
    ({**BASE, "max_position_embeddings": "4096"}, "max_position_embeddings"),
    ({**BASE, "num_hidden_layers": 10**6}, "num_hidden_layers"),
    ({**GEMMA, "layer_types": ["sliding_attention"]}, "layer_types"),
    ({**GEMMA, "layer_types": "full_attention"}, "layer_types"),
    ({**GEMMA, "layer_types": ["sliding_attention", 3, "full_attention"]}, "layer_types"),
    ({**GEMMA, "layer_types": ["sliding_attention", "weird", "full_attention"]}, "weird"),
    ({**GEMMA, "rope_local_base_freq": [1]}, "rope_local_base_freq"),
    ({**BASE, "no_rope_layers": [1, 2, 1]}, "no_rope_layers"),
    ({**BASE, "rope_parameters": {"rope_type": "default", "mrope_section": [8, "x"]}}, "mrope_section"),
    ({**BASE, "rope_parameters": {"rope_type": "dynamic", "alpha": "big"}}, "alpha"),
])
def test_rope_refuses_a_corrupt_config_of_a_type_posenc_does_not_run(config, key, tmp_path):
    """Before: "L₀ = -1", an audit of 0 heads, an OverflowError for 1e20, layer types silently unmeasured."""
    with pytest.raises(ValueError, match=key):
        audit(config, hf_check=False, source="config.json")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert_refused(posenc("rope", path, "--no-hf"), key)


def test_rope_calls_a_fifo_config_a_fifo(tmp_path):
    import os

    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)
    result = posenc("rope", fifo, "--no-hf")
    assert_refused(result, "FIFO")
    assert "no such file" not in result.err


# -- posenc rope --calc -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["linear", "ntk", "yarn", "llama3", "dynamic"])
@pytest.mark.parametrize("flags, named", [
    (["--head-dim", "0"], "--head-dim"), (["--head-dim", "3"], "--head-dim"), (["--head-dim", "-128"], "--head-dim"),
    (["--base", "1"], "--base"), (["--base", "0.5"], "--base"), (["--base", "nan"], "--base"),
    (["--target-len", str(10**400)], "--target-len"), (["--target-len", "4096"], "--target-len"),
    (["--original-max-len", "0"], "--original-max-len"), (["--original-max-len", "-5"], "--original-max-len"),
])
def test_calculator_refuses_inputs_that_give_no_rope_by_flag(method, flags, named):
    argv = {"--original-max-len": "4096", "--target-len": "16384"} | dict(zip(flags[::2], flags[1::2]))
    result = posenc("rope", "--calc", method, *[x for pair in argv.items() for x in pair])
    assert_refused(result, named)


def test_calculator_ntk_head_dim_2_is_refused_not_a_zero_division():
    with pytest.raises(ValueError, match="--head-dim.*d ≥ 4"):
        calculator("ntk", original_max_len=4096, target_len=8192, head_dim=2)
    assert calculator("linear", original_max_len=4096, target_len=8192, head_dim=2)["factor"] == 2
    assert_refused(posenc("rope", "--calc", "ntk", "--original-max-len", "4096", "--target-len", "8192",
                          "--head-dim", "2"), "--head-dim")


def test_calculator_refuses_a_target_len_beyond_any_context_not_an_overflow():
    with pytest.raises(ValueError, match="--target-len"):
        calculator("yarn", original_max_len=4096, target_len=10**400)
    assert_refused(posenc("rope", "--calc", "yarn", "--original-max-len", "4096", "--target-len", "1e400"),
                   "--target-len")
