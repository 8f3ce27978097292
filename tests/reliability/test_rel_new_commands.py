"""Hostile input to the commands added since December (extend, finetune, rope): the standard of the old ones.

Each refusal is one ``posenc: error:`` line naming the value and the fix (exit 2), never a hang, a bare
Python message or an allocation past the memory budget.
"""

from __future__ import annotations

import pytest

from conftest import assert_refused, posenc
from model_files import hf_folder


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return hf_folder(tmp_path_factory.mktemp("tiny") / "model")


@pytest.mark.parametrize("method", ["self-extend", "string", "dca", "rerope"])
def test_extend_at_the_smallest_trained_context_reports_instead_of_a_format_error(tiny, tmp_path, method):
    """L0 = 2: the first bucket (positions 0–1) holds only the first token, which nothing predicts: no perplexity
    — said as n/a, not ``unsupported format string passed to NoneType.__format__``."""
    result = posenc("extend", tiny, "--methods", method, "--original-max-len", "2", "--passkey-trials", "0",
                    "--text", "licenses", "--max-tokens", "8", "--out", tmp_path / "out")
    assert result.code == 0, result.err
    assert "ppl first bucket n/a" in result.out


# -- sizes bounded before anything is allocated or run -------------------------------------------------------------
@pytest.mark.parametrize("option", ["--population", "--mutations", "--crossovers", "--generations", "--samples"])
def test_finetune_search_sizes_are_bounded(option):
    """A million individuals per generation would be scored by forward passes for ever: refused at parsing."""
    assert_refused(posenc("finetune", "search", "m", "--factor", "2", option, "1000000"), option, "<= 4096")


def test_search_config_bounds_the_same_sizes():
    from posenc.finetune.longrope import SearchConfig

    with pytest.raises(ValueError, match="--mutations 1000000: at most 4096"):
        SearchConfig(factor=2.0, original_max_len=64, mutations=1_000_000)


def test_finetune_lora_rank_above_the_projection_is_refused_before_allocation(tiny):
    """Width 16 (k_proj 32 → 16): rank 10⁶ once ran to 4.1 GB and exited 0."""
    assert_refused(posenc("finetune", "run", tiny, "--factor", "2", "--steps", "1", "--lora-rank", "1000000"),
                   "--lora-rank 1000000", "k_proj", "rank <= 16")


def test_finetune_batch_size_is_checked_against_the_memory_budget(tiny):
    """--batch-size 10⁶ once ended in "unexpected RuntimeError … can't allocate"."""
    assert_refused(posenc("finetune", "run", tiny, "--factor", "2", "--steps", "1", "--batch-size", "1000000"),
                   "1000000 window(s) of 128 tokens", "memory budget", "lower --batch-size")


def test_finetune_memory_estimate_admits_an_ordinary_run(tiny, monkeypatch):
    from posenc.finetune.model import load_start
    from posenc.finetune.run import FinetuneConfig, check_training_memory

    monkeypatch.setenv("POSENC_MEMORY_BUDGET", str(256 << 20))
    start = load_start(str(tiny))
    check_training_memory(start.model, FinetuneConfig(method="rope", factor=None, original_max_len=64, length=128,
                                                      steps=1, batch_size=4, lora_rank=8))
    with pytest.raises(ValueError, match="POSENC_MEMORY_BUDGET"):
        check_training_memory(start.model, FinetuneConfig(method="rope", factor=None, original_max_len=64,
                                                          length=4096, steps=1, batch_size=4096))


@pytest.mark.parametrize("model_type", ["llama", "qwen2_vl", "not_a_posenc_family"])
def test_rope_refuses_a_huge_head_dim_in_any_config(tmp_path, model_type):
    """head_dim 10⁹ once made ``posenc rope`` try to allocate 4 GB; every model_type goes through the family
    reader's bounds, posenc's families or not."""
    import json

    config = {"model_type": model_type, "hidden_size": 32, "num_attention_heads": 4, "num_hidden_layers": 2,
              "max_position_embeddings": 64, "rope_theta": 10000.0, "head_dim": 10**9}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert_refused(posenc("rope", tmp_path / "config.json", "--no-hf"), "head_dim", "1,048,576")
    assert_refused(posenc("rope", "--calc", "yarn", "--original-max-len", "8192", "--target-len", "32768",
                          "--head-dim", str(10**9)), "--head-dim", "1,048,576")


# -- a checkpoint that already carries a RoPE scaling: the real reason named ----------------------------------------
def _scaled_checkpoint(kind: str, path):
    transformers = pytest.importorskip("transformers", minversion="5.24")
    from model_files import VOCAB, tokenizer_json

    common = dict(hidden_size=64, num_attention_heads=4, vocab_size=VOCAB, max_position_embeddings=128,
                  bos_token_id=0, eos_token_id=1)
    if kind == "gpt_oss":
        cfg = transformers.GptOssConfig(**common, num_hidden_layers=2, intermediate_size=32, num_key_value_heads=2,
                                        head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
                                        rope_parameters={"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                                                         "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                                                         "original_max_position_embeddings": 4096})
        model = transformers.GptOssForCausalLM(cfg)
    elif kind == "deepseek_v3":
        cfg = transformers.DeepseekV3Config(**common, num_hidden_layers=2, intermediate_size=48,
                                            moe_intermediate_size=16, num_key_value_heads=4, n_routed_experts=4,
                                            num_experts_per_tok=2, n_group=2, topk_group=1, n_shared_experts=1,
                                            first_k_dense_replace=1, q_lora_rank=24, kv_lora_rank=16,
                                            qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=12,
                                            rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                                                             "original_max_position_embeddings": 32,
                                                             "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 1.0,
                                                             "mscale_all_dim": 1.0})
        model = transformers.DeepseekV3ForCausalLM(cfg)
    else:
        cfg = transformers.Llama4TextConfig(**common, num_hidden_layers=4, intermediate_size=32,
                                            intermediate_size_mlp=48, num_key_value_heads=2, head_dim=16,
                                            num_local_experts=4, num_experts_per_tok=2, interleave_moe_layer_step=2,
                                            no_rope_layer_interval=4, attention_chunk_size=4,
                                            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                                             "factor": 8.0, "low_freq_factor": 1.0,
                                                             "high_freq_factor": 4.0,
                                                             "original_max_position_embeddings": 16})
        model = transformers.Llama4ForCausalLM(cfg)
    model.save_pretrained(path)
    (path / "tokenizer.json").write_text(tokenizer_json())
    return path


@pytest.mark.parametrize("kind", ["deepseek_v3", "gpt_oss", "llama4"])
def test_a_checkpoint_already_scaled_is_refused_for_that_reason_not_for_layers(tmp_path, kind):
    """No --layers was given (finetune has no such flag): the message must not blame one."""
    model = _scaled_checkpoint(kind, tmp_path / kind)
    for argv in (["extend", model, "--quick", "--methods", "rope-yarn", "--passkey-trials", "0", "--text", "licenses",
                  "--out", "-"],
                 ["finetune", "run", model, "--factor", "2", "--steps", "1"]):
        result = posenc(*argv)
        assert_refused(result, "already carries a RoPE scaling")
        assert "--layers" not in result.err, result.err
