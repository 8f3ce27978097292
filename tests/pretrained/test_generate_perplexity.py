"""``posenc generate`` / ``posenc perplexity`` and the tokenizer wrapper, on a tiny HF model with a real BPE tokenizer.

The tokenizer is trained here with the ``tokenizers`` package (byte-level BPE,
as SmolLM's), the model is a random HF Llama of that vocabulary; HF
``transformers`` is the reference for generation, chat templates and loss.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

transformers = pytest.importorskip("transformers", minversion="5.0",
                                   reason="reference tests need HF transformers >= 5, a test-only dependency")
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast  # noqa: E402

from posenc.cli import main  # noqa: E402
from posenc.commands.perplexity import window_plan  # noqa: E402
from posenc.pretrained import load_pretrained  # noqa: E402

TEXT = ("Rotary position embeddings rotate queries and keys by angles that grow with the position. "
        "The capital of France is Paris. The capital of Italy is Rome. Attention compares every query "
        "with every key, and the model learns which positions matter. ") * 4
TEMPLATE = ("{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
            "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


@pytest.fixture
def folder(tmp_path, seed):
    """A model folder: random tiny Llama + trained byte-level BPE tokenizer.json + tokenizer_config.json."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok.train_from_iterator([TEXT], trainers.BpeTrainer(vocab_size=300, special_tokens=specials,
                                                        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({
        "chat_template": TEMPLATE, "bos_token": "<|im_start|>", "eos_token": "<|im_end|>",
        "tokenizer_class": "PreTrainedTokenizerFast"}))
    config = LlamaConfig(vocab_size=tok.get_vocab_size(), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=2)
    LlamaForCausalLM(config).save_pretrained(tmp_path, safe_serialization=True)
    return tmp_path


def hf_pair(folder):
    return LlamaForCausalLM.from_pretrained(folder).eval(), PreTrainedTokenizerFast.from_pretrained(folder)


def test_tokenizer_and_chat_template_equal_hf(folder):
    _, hf_tok = hf_pair(folder)
    tok = load_pretrained(folder).tokenizer
    assert tok.encode(TEXT[:120]) == hf_tok(TEXT[:120])["input_ids"]
    assert tok.decode(tok.encode(TEXT[:120])) == TEXT[:120]
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]
    assert tok.apply_chat_template(messages) == hf_tok.apply_chat_template(messages, tokenize=False,
                                                                            add_generation_prompt=True)
    assert (tok.bos_id, tok.eos_id) == (hf_tok.bos_token_id, hf_tok.eos_token_id)


def test_generate_command_equals_hf_greedy(folder, tmp_path_factory):
    hf, hf_tok = hf_pair(folder)
    prompt = "The capital of France is"
    ids = torch.tensor([hf_tok(prompt)["input_ids"]])
    # HF greedy without any EOS handling (its default config names eos id 2, and min_new_tokens would mask
    # that logit), cut where posenc's command stops: at the first of the tokenizer's EOS ids, inclusive.
    hf.generation_config.eos_token_id = None
    ref = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                      pad_token_id=0)[0, ids.shape[1]:].tolist()  # explicit mask: no token taken for padding
    eos = set(load_pretrained(folder).tokenizer.eos_ids)
    stop = next((i + 1 for i, t in enumerate(ref) if t in eos), len(ref))
    ref = ref[:stop]
    out = tmp_path_factory.mktemp("out") / "gen.json"
    assert main(["generate", str(folder), "--prompt", prompt, "--max-new-tokens", "6", "--quiet",
                 "--json", str(out), "--threads", "1"]) == 0
    result = json.loads(out.read_text())
    assert result["completion"] == hf_tok.decode(ref, skip_special_tokens=True)
    assert result["prompt_tokens"] == ids.shape[1] and result["new_tokens"] == len(ref)
    assert result["stopped_at_eos"] == (ref[-1] in eos)


def test_generate_command_chat_and_sampling(folder, capsys):
    args = ["generate", str(folder), "--prompt", "Capital of France?", "--chat", "--max-new-tokens", "5",
            "--temperature", "0.8", "--top-k", "20", "--top-p", "0.9", "--seed", "3", "--json", "-"]
    assert main(args) == 0
    first = json.loads(capsys.readouterr().out)
    assert main(args) == 0
    assert json.loads(capsys.readouterr().out)["completion"] == first["completion"]  # seeded: reproducible
    assert first["chat"] and first["prompt_tokens"] > 5


def test_perplexity_command_equals_hf_loss(folder, capsys):
    hf, hf_tok = hf_pair(folder)
    text_file = folder / "text.txt"
    text_file.write_text(TEXT[:400])
    ids = torch.tensor([hf_tok(TEXT[:400])["input_ids"]])
    with torch.no_grad():
        logits = hf(ids).logits[0, :-1]
    ref = math.exp(float(torch.nn.functional.cross_entropy(logits, ids[0, 1:])))
    # one window covering the whole text: every token after the first scored with its full context
    assert main(["perplexity", str(folder), str(text_file), "--window", str(ids.shape[1]), "--json", "-",
                 "--quiet"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["tokens"] == ids.shape[1] - 1
    assert result["perplexity"] == pytest.approx(ref, rel=1e-4)
    # strided windows score the same tokens (less context each): a finite, different-but-close loss
    assert main(["perplexity", str(folder), str(text_file), "--window", "16", "--stride", "8", "--json", "-",
                 "--quiet"]) == 0
    strided = json.loads(capsys.readouterr().out)
    assert strided["tokens"] == ids.shape[1] - 1 and math.isfinite(strided["perplexity"])


def test_perplexity_per_token_losses_equal_hf_and_average_to_the_printed_loss(folder, tmp_path, capsys):
    hf, hf_tok = hf_pair(folder)
    text_file = tmp_path / "text.txt"
    text_file.write_text(TEXT[:400])
    ids = hf_tok(TEXT[:400])["input_ids"]
    window, stride = 16, 6
    out = tmp_path / "per-token.jsonl"
    assert main(["perplexity", str(folder), str(text_file), "--window", str(window), "--stride", str(stride),
                 "--per-token", str(out), "--json", "-", "--quiet"]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    # every scored token once, in order, with its id and its text
    assert [r["index"] for r in rows] == list(range(1, len(ids))) and len(rows) == result["tokens"]
    assert [r["id"] for r in rows] == ids[1:]
    assert [r["text"] for r in rows] == [hf_tok.decode([t]) for t in ids[1:]]
    # their mean is the loss the command reports
    mean = math.fsum(r["loss"] for r in rows) / len(rows)
    assert mean == pytest.approx(result["nll_per_token"], rel=1e-12)
    assert math.exp(mean) == pytest.approx(result["perplexity"], rel=1e-12)
    # and each equals HF's model on the same window, in float64 log-softmax
    ref = []
    with torch.no_grad():
        for start, end, scored in window_plan(len(ids), window, stride):
            chunk = torch.tensor([ids[start:end]])
            logp = torch.log_softmax(hf(chunk).logits[0].double(), dim=-1)  # (T, V)
            targets = chunk[0, -scored:]
            ref += (-logp[-scored - 1:-1].gather(1, targets[:, None])[:, 0]).tolist()
    assert len(ref) == len(rows)
    assert [r["loss"] for r in rows] == pytest.approx(ref, abs=1e-4)
    # '-' prints the rows on stdout and moves the summary to stderr; both on stdout is refused
    assert main(["perplexity", str(folder), str(text_file), "--window", str(window), "--stride", str(stride),
                 "--per-token", "-", "--quiet"]) == 0
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()] == rows
    assert captured.err.startswith("perplexity ")
    assert main(["perplexity", str(folder), str(text_file), "--per-token", "-", "--json", "-", "--quiet"]) == 2
    assert "both ask for stdout" in capsys.readouterr().err


@pytest.mark.parametrize("n,window,stride", [(10, 4, 2), (10, 4, 4), (11, 5, 3), (2, 8, 4), (100, 7, 1)])
def test_window_plan_scores_every_token_once(n, window, stride):
    plan = window_plan(n, window, stride)
    scored = [t for start, end, k in plan for t in range(end - k, end)]
    assert scored == list(range(1, n))
    assert all(end - start <= window and 0 < k <= end - start - (start == 0) for start, end, k in plan)


def test_command_errors_exit_2(folder, tmp_path, capsys):
    assert main(["perplexity", str(folder), str(tmp_path / "missing.txt")]) == 2
    assert "no such text file" in capsys.readouterr().err
    if not torch.cuda.is_available():
        assert main(["generate", str(folder), "--prompt", "x", "--device", "cuda"]) == 2
        assert "no CUDA device" in capsys.readouterr().err
    (folder / "tokenizer_config.json").write_text("{}")
    assert main(["generate", str(folder), "--prompt", "x", "--chat", "--quiet"]) == 2
    assert "no chat template" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:  # a usage error at parse time now
        main(["generate", str(folder), "--prompt", "x", "--top-p", "1.5"])
    assert stop.value.code == 2 and "--top-p: 1.5 must be a finite number > 0 and <= 1" in capsys.readouterr().err


def test_a_layer_plan_is_stated_not_none(folder, tmp_path, capsys):
    """Gemma 3 has no one position scheme but a plan (five sliding RoPE layers, one global): generate and
    perplexity state the plan's summary (``posenc.plan.plan_summary``), not the model-level "none"."""
    vocab = Tokenizer.from_file(str(folder / "tokenizer.json")).get_vocab_size()
    config = transformers.Gemma3TextConfig(num_hidden_layers=6, hidden_size=32, intermediate_size=48,
                                           num_attention_heads=2, num_key_value_heads=1, head_dim=16,
                                           vocab_size=vocab, sliding_window=8, max_position_embeddings=256,
                                           bos_token_id=1, eos_token_id=2, pad_token_id=0)
    transformers.Gemma3ForCausalLM(config).save_pretrained(folder)  # replaces the Llama's config and weights
    summary = "per layer: rope base 1e4 sliding 8 ×5, rope base 1e6 ×1"
    assert main(["generate", str(folder), "--prompt", "The capital", "--max-new-tokens", "2"]) == 0
    err = capsys.readouterr().err
    assert f"(6 layers, d=32, {summary}, float32" in err and "none" not in err
    (tmp_path / "text.txt").write_text(TEXT[:200])
    assert main(["perplexity", str(folder), str(tmp_path / "text.txt"), "--window", "32", "--quiet",
                 "--json", "-"]) == 0
    assert json.loads(capsys.readouterr().out)["position"] == summary


@pytest.mark.parametrize("family_logits", [{"final_softcap": 2.0}, {"logit_scale": 0.25}])
def test_scoring_in_chunks_equals_the_whole_windows_loss_with_the_familys_logit_step(family_logits, monkeypatch,
                                                                                     seed):
    """``perplexity`` scores a window's logits a chunk of positions at a time (bounded memory), each through
    ``Decoder.logits`` — Gemma 2's soft cap and Cohere's logit scale included, which the head alone skipped."""
    from posenc.commands import perplexity
    from posenc.models.decoder import DecoderConfig, build_decoder

    gen = torch.Generator().manual_seed(seed)
    vocab = 37
    model = build_decoder(DecoderConfig(vocab_size=vocab, dim=16, num_layers=2, num_heads=2, ffn_dim=24,
                                        **family_logits)).eval()
    ids = torch.randint(0, vocab, (41,), generator=gen)
    plan = window_plan(len(ids), 16, 8)
    monkeypatch.setattr(perplexity, "LOGIT_BYTES", 4 * vocab * 3)  # 3 positions at a time
    assert perplexity.logit_rows(vocab) == 3
    nll, count = perplexity.score(model, ids, plan, quiet=True)
    ref = 0.0  # float64, every window's logits whole, from the model's forward (head + the family's step)
    with torch.no_grad():
        for start, end, scored in plan:
            logits = model(ids[None, start:end])[0, -scored - 1:-1].double()
            ref += float(torch.nn.functional.cross_entropy(logits, ids[end - scored:end], reduction="sum"))
    assert count == len(ids) - 1
    assert nll == pytest.approx(ref, rel=1e-6)
