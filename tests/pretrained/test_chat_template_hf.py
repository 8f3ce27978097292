"""posenc renders the real chat templates of its model families exactly as HF ``transformers`` does.

Each template in ``chat_templates/`` (see its README for where each came from) is rendered by posenc's
``Tokenizer.apply_chat_template`` and by transformers' ``apply_chat_template(tokenize=False)`` from the same
model folder (tokenizer.json + tokenizer_config.json naming the family's special tokens), and the text and the
ids must be equal — or both must refuse the conversation. SmolLM2's template is read from the real GGUF file
the test dependencies install, and its tokenizer and a Qwen2 GGUF's are compared with transformers' own GGUF
loader; the Qwen2 one is also run through ``posenc generate --chat``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers", minversion="5.0",
                                   reason="reference tests need HF transformers >= 5, a test-only dependency")
pytest.importorskip("jinja2")

from gguf_helpers import (hf_gguf_tokenizer_of, smollm2_path, tiny_hf, tokenizer_fields,  # noqa: E402
                          train_tokenizer, write_gguf)
from tokenizers import AddedToken  # noqa: E402
from tokenizers import Tokenizer as HFTokenizer  # noqa: E402
from transformers import PreTrainedTokenizerFast  # noqa: E402

from posenc.pretrained.chat_template import MAX_CHARS, render, render_chat  # noqa: E402
from posenc.pretrained.tokenizer import Tokenizer, load_tokenizer  # noqa: E402

TEMPLATES = Path(__file__).parent / "chat_templates"
LLAMA3 = ({"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
          ["<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|python_tag|>"])
CHATML = ["<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>"]
#: template file → (special tokens as tokenizer_config.json names them, the other control tokens, kwargs)
FAMILIES = {
    "llama3_1": (*LLAMA3, {"date_string": "26 Jul 2024"}),
    "llama3_2": (*LLAMA3, {"date_string": "26 Jul 2024"}),
    "qwen2_5": ({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, CHATML, {}),
    "qwen3": ({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, CHATML, {}),
    "qwen3_no_thinking": ({"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, CHATML,
                          {"enable_thinking": False}),
    "smollm3": ({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>"}, CHATML, {}),
    "smollm3_no_thinking": ({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>", "pad_token": "<|im_end|>"},
                            CHATML, {"enable_thinking": False}),
    "gemma3": ({"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"},
               ["<start_of_turn>", "<end_of_turn>", "<start_of_image>"], {}),
    "phi3_5": ({"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>", "pad_token": "<|endoftext|>"},
               ["<|system|>", "<|user|>", "<|assistant|>", "<|end|>"], {}),
    "mistral_v0_3": ({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
                     ["[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_CALLS]", "[TOOL_RESULTS]",
                      "[/TOOL_RESULTS]"], {}),
    "command_r7b_tool_use": ({"bos_token": "<BOS_TOKEN>", "eos_token": "<|END_OF_TURN_TOKEN|>", "unk_token": "<UNK>",
                              "sep_token": "<SEP>", "pad_token": "<PAD>", "cls_token": "<CLS>",
                              "mask_token": "<MASK_TOKEN>"},  # all seven of HF's named special tokens
                             ["<|START_OF_TURN_TOKEN|>", "<|SYSTEM_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>",
                              "<|START_RESPONSE|>", "<|END_RESPONSE|>", "<|START_THINKING|>", "<|END_THINKING|>",
                              "<|START_ACTION|>", "<|END_ACTION|>", "<|START_TOOL_RESULT|>", "<|END_TOOL_RESULT|>"],
                             {}),
    "gpt_oss": ({"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"},
                ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>"], {}),
    "gpt_oss_high": ({"bos_token": "<|startoftext|>", "eos_token": "<|return|>", "pad_token": "<|endoftext|>"},
                     ["<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>"],
                     {"reasoning_effort": "high"}),
}

SYSTEM = [{"role": "system", "content": "You are terse. Answer in one word."}]
USER = [{"role": "user", "content": "What is the capital of France?"}]
MULTI = USER + [{"role": "assistant", "content": "Paris."},
                {"role": "user", "content": "And of Italy? café, 東京, 🙂, <b>&'\"</b>"}]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The city, e.g. Zürich"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}]
CALL = {"id": "call12345", "type": "function",  # nine characters: Mistral's template checks
        "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}
TOOL_TURN = [{"role": "user", "content": "How warm is Paris?"},
             {"role": "assistant", "content": "", "tool_calls": [CALL]},
             {"role": "tool", "tool_call_id": "call12345", "name": "get_weather", "content": "22"}]
#: conversation → (messages, tools, add_generation_prompt)
CASES = {
    "user": (USER, None, True),
    "system": (SYSTEM + USER, None, True),
    "multi-turn": (SYSTEM + MULTI, None, True),
    "history": (SYSTEM + MULTI + [{"role": "assistant", "content": "Rome."}], None, False),
    "tools": (SYSTEM + USER, TOOLS, True),
    "tool call and result": (TOOL_TURN, TOOLS, True),
    "tool call without content": ([TOOL_TURN[0], {k: v for k, v in TOOL_TURN[1].items() if k != "content"},
                                   TOOL_TURN[2]], TOOLS, True),  # some templates refuse it: both sides must
}


def _template(name: str) -> str:
    return (TEMPLATES / f"{name.removesuffix('_no_thinking').removesuffix('_high')}.jinja").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def base_tokenizer():
    return train_tokenizer()


def model_folder(folder: Path, base, template, special: dict[str, str], controls: list[str]) -> Path:
    """tokenizer.json (the trained BPE + these control tokens) and tokenizer_config.json, as an HF folder has."""
    tok = HFTokenizer.from_str(base.to_str())
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in dict.fromkeys([*special.values(), *controls])])
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": template, **special}))
    return folder


def pair(folder: Path) -> tuple[Tokenizer, PreTrainedTokenizerFast]:
    return load_tokenizer(folder), PreTrainedTokenizerFast.from_pretrained(folder)


def assert_same(ours: Tokenizer, theirs, messages, *, tools=None, documents=None, add_generation_prompt=True,
                **kwargs) -> str | None:
    """Same text and ids from posenc and transformers, or both refuse (posenc with a ValueError). The text."""
    try:
        want = theirs.apply_chat_template(messages, tools=tools, documents=documents, tokenize=False,
                                          add_generation_prompt=add_generation_prompt, **kwargs)
    except Exception as err:  # noqa: BLE001 - a template refusing: jinja2.TemplateError, TypeError, ...
        with pytest.raises(ValueError, match="chat template"):
            ours.apply_chat_template(messages, tools=tools, documents=documents,
                                     add_generation_prompt=add_generation_prompt, **kwargs)
        return f"refused: {err}"
    got = ours.apply_chat_template(messages, tools=tools, documents=documents,
                                   add_generation_prompt=add_generation_prompt, **kwargs)
    assert got == want
    want_ids = theirs.apply_chat_template(messages, tools=tools, documents=documents, tokenize=True,
                                          return_dict=False, add_generation_prompt=add_generation_prompt, **kwargs)
    assert ours.encode_chat(messages, tools=tools, documents=documents, add_generation_prompt=add_generation_prompt,
                            **kwargs) == want_ids
    return got


@pytest.fixture(scope="module")
def families(tmp_path_factory, base_tokenizer) -> dict[str, tuple[Tokenizer, PreTrainedTokenizerFast, dict]]:
    out = {}
    for name, (special, controls, kwargs) in FAMILIES.items():
        folder = model_folder(tmp_path_factory.mktemp(name), base_tokenizer, _template(name), special, controls)
        out[name] = (*pair(folder), kwargs)
    return out


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("family", list(FAMILIES))
def test_real_templates_render_as_transformers(families, family: str, case: str) -> None:
    ours, theirs, kwargs = families[family]
    messages, tools, add_generation_prompt = CASES[case]
    text = assert_same(ours, theirs, messages, tools=tools, add_generation_prompt=add_generation_prompt, **kwargs)
    if family.startswith(("qwen", "llama", "mistral", "command_r7b")) and case == "tools":
        assert "get_weather" in text, "the template takes tools: they must be in the text"


def test_every_named_special_token_reaches_the_template(families, tmp_path, base_tokenizer) -> None:
    special, controls, _ = FAMILIES["command_r7b_tool_use"]
    source = "{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ sep_token }}|{{ pad_token }}|{{ cls_token }}|" \
             "{{ mask_token }}|{{ tools }}|{{ documents }}|{{ add_generation_prompt }}"
    ours, theirs = pair(model_folder(tmp_path, base_tokenizer, source, special, controls))
    assert ours.special_tokens_map == theirs.special_tokens_map
    assert len(ours.special_tokens_map) == 7
    assert_same(ours, theirs, USER)
    assert assert_same(ours, theirs, USER, eos_token="<override>").startswith("<BOS_TOKEN>|<override>|")
    assert ours.apply_chat_template(USER) == "<BOS_TOKEN>|<|END_OF_TURN_TOKEN|>|<UNK>|<SEP>|<PAD>|<CLS>|<MASK_TOKEN>" \
                                             "|None|None|True"
    for name in ("llama3_1", "qwen2_5", "phi3_5", "mistral_v0_3"):
        ours, theirs, _ = families[name]
        assert ours.special_tokens_map == theirs.special_tokens_map, name


def test_special_tokens_come_from_tokenizer_config_not_from_ids(tmp_path, base_tokenizer) -> None:
    """A Qwen2.5 folder: config.json names a BOS id, tokenizer_config.json says bos_token null — HF's tokenizer,
    and so the template, has no bos_token (``is defined`` is false), though posenc still knows the id."""
    source = "{{ bos_token is defined }}|{{ bos_token }}|{{ eos_token }}|{{ pad_token }}"
    folder = model_folder(tmp_path, base_tokenizer, source, {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
                          CHATML)
    config = json.loads((folder / "tokenizer_config.json").read_text()) | {"bos_token": None}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    (folder / "config.json").write_text(json.dumps({"bos_token_id": base_tokenizer.token_to_id("<|endoftext|>")}))
    ours, theirs = pair(folder)
    assert ours.bos_id == base_tokenizer.token_to_id("<|endoftext|>")
    assert ours.special_tokens_map == theirs.special_tokens_map == {"eos_token": "<|im_end|>",
                                                                    "pad_token": "<|endoftext|>"}
    assert assert_same(ours, theirs, USER) == "False||<|im_end|>|<|endoftext|>"


def test_qwen3_thinking_and_reasoning_content(families) -> None:
    ours, theirs, _ = families["qwen3"]
    history = USER + [{"role": "assistant", "content": "Paris.", "reasoning_content": "France's capital is Paris."},
                      {"role": "user", "content": "Sure?"}]
    for kwargs in ({}, {"enable_thinking": True}, {"enable_thinking": False}):
        assert_same(ours, theirs, history, **kwargs)
        assert_same(ours, theirs, history + [{"role": "assistant", "content": "Yes.", "thinking": "I am."}],
                    add_generation_prompt=False, **kwargs)  # "thinking" is read as reasoning_content
    without = ours.apply_chat_template(USER, enable_thinking=False)
    assert without.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert ours.apply_chat_template(USER).endswith("<|im_start|>assistant\n")


def test_gpt_oss_analysis_channel_and_effort(families) -> None:
    ours, theirs, _ = families["gpt_oss"]
    history = SYSTEM + USER + [{"role": "assistant", "content": "Paris.", "thinking": "Easy one."},
                               {"role": "user", "content": "Thanks"}]
    for effort in ("low", "medium", "high"):
        text = assert_same(ours, theirs, history, tools=TOOLS, reasoning_effort=effort,
                           model_identity="You are a test model.")
        assert f"Reasoning: {effort}" in text


def test_dates_from_strftime_now_and_from_date_string(families) -> None:
    ours, theirs, _ = families["llama3_2"]
    for _ in range(2):  # today's date on both sides (a second try if midnight fell between the two renders)
        if ours.apply_chat_template(USER) == theirs.apply_chat_template(USER, tokenize=False,
                                                                         add_generation_prompt=True):
            break
    else:
        pytest.fail("Llama 3.2's template renders today's date differently")
    before, text, after = time.strftime("%d %b %Y"), ours.apply_chat_template(USER), time.strftime("%d %b %Y")
    assert f"Today Date: {before}" in text or f"Today Date: {after}" in text
    assert "Today Date: 01 Jan 2030" in assert_same(ours, theirs, USER, date_string="01 Jan 2030")


def test_command_r7b_documents_and_tool_results(families) -> None:
    ours, theirs, _ = families["command_r7b_tool_use"]
    documents = [{"title": "Paris", "text": "Paris is the capital of France."},
                 {"title": "Rome", "text": "Rome is the capital of Italy."}]
    text = assert_same(ours, theirs, SYSTEM + MULTI, tools=TOOLS, documents=documents)
    assert "Rome is the capital of Italy." in text
    # the tool_use variant iterates over tools: without them both refuse (the "rag" variant serves that case)
    assert assert_same(ours, theirs, SYSTEM + MULTI, documents=documents).startswith("refused")
    assert_same(ours, theirs, TOOL_TURN + [{"role": "assistant", "content": "It is 22 °C."}], tools=TOOLS,
                documents=documents, add_generation_prompt=False)


@pytest.mark.parametrize("family", ["qwen2_5", "llama3_1", "phi3_5", "mistral_v0_3"])
def test_continue_final_message(families, family: str) -> None:
    ours, theirs, kwargs = families[family]
    messages = USER + [{"role": "assistant", "content": "The capital of France is"}]
    text = assert_same(ours, theirs, messages, add_generation_prompt=False, continue_final_message=True, **kwargs)
    assert text.endswith("The capital of France is")
    with pytest.raises(ValueError, match="exclude each other"):
        ours.apply_chat_template(messages, continue_final_message=True)


def test_named_templates_take_tool_use_when_given_tools(tmp_path, base_tokenizer) -> None:
    special, controls, _ = FAMILIES["command_r7b_tool_use"]
    named = [{"name": "default", "template": _template("qwen2_5")},
             {"name": "tool_use", "template": _template("command_r7b_tool_use")}]
    ours, theirs = pair(model_folder(tmp_path, base_tokenizer, named, special, controls))
    assert "<|START_OF_TURN_TOKEN|>" in assert_same(ours, theirs, SYSTEM + USER, tools=TOOLS)
    assert assert_same(ours, theirs, SYSTEM + USER).startswith("<|im_start|>system")


def test_raise_exception_in_a_real_template_is_a_value_error_naming_it(families) -> None:
    ours, theirs, _ = families["mistral_v0_3"]
    messages = USER + USER  # two user turns in a row
    with pytest.raises(Exception, match="must alternate"):
        theirs.apply_chat_template(messages, tokenize=False)
    with pytest.raises(ValueError, match=r"^the model's chat template: After the optional system message, "
                                         "conversation roles must alternate") as err:
        ours.apply_chat_template(messages)
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="chat template: "):
        ours.encode_chat(messages)


def test_environment_as_transformers(tmp_path, base_tokenizer) -> None:
    """The pieces of HF's Jinja environment a real template may use, one template exercising each."""
    source = ("{% for m in messages %}{% if loop.index > 3 %}{% break %}{% endif %}{% if m.role == 'system' %}"
              "{% continue %}{% endif %}{% generation %}[{{ m.content }}]{% endgeneration %}{% endfor %}\n"
              "{{ tools | tojson }}|{{ tools | tojson(indent=2, sort_keys=true) }}"
              "|{{ tools | tojson(ensure_ascii=true) }}|{{ tools | tojson(separators=(',', ':')) }}"
              "|{{ '<&>' | tojson }}|{{ {'b': 1, 'a': [1.5, none, true]} | tojson }}\n"
              "{{ undefined_thing }}|{{ undefined_thing is defined }}"
              "|{% if not tools_in_user_message %}lenient{% endif %}"
              "|{{ custom }}|{{ dict(a=1) }}|{{ dict.fromkeys(['x']) }}|{% set ns = namespace(n=0) %}"
              "{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}|{{ strftime_now('%Y') }}"
              "|{{ messages[0].keys() | list }}")
    ours, theirs = pair(model_folder(tmp_path, base_tokenizer, source, {"eos_token": "<|im_end|>"}, CHATML))
    messages = SYSTEM + MULTI + [{"role": "assistant", "content": "Rome.", "tool_calls": None}]
    text = assert_same(ours, theirs, messages, tools=TOOLS, custom={"k": [1, 2]})
    assert text.startswith("[What is the capital of France?][Paris.][{")  # trim_blocks ate the newline
    assert '"description": "The city, e.g. Zürich"' in text and "Z\\u00fcrich" in text and "|\"<&>\"|" in text
    assert "|False|lenient|{'k': [1, 2]}|{'a': 1}|{'x': None}|3|" in text


def test_message_handling_as_transformers(families) -> None:
    ours, theirs, _ = families["qwen2_5"]
    with pytest.raises(ValueError, match="at least one message"):
        ours.apply_chat_template([])
    with pytest.raises(ValueError, match="must be dicts"):
        ours.apply_chat_template(["hi"])
    with pytest.raises(ValueError, match="JSON schemas"):
        ours.apply_chat_template(USER, tools=[len])
    messages = [{"role": "user", "content": "hi", "name": None}]  # None-valued keys are dropped, as HF drops them
    source = "{% for m in messages %}{{ m.keys() | list }}{{ m.name is defined }}{% endfor %}"
    assert render_chat(source, messages) == "['role', 'content']False"
    original = [{"role": "user", "content": "hi"}]
    render_chat("{{ messages[0].content }}", original, continue_final_message=True)
    assert original == [{"role": "user", "content": "hi"}], "the caller's messages are never changed"


def test_smollm2_gguf_equals_transformers_gguf_loader() -> None:
    path = smollm2_path()
    ours, theirs = load_tokenizer(path), hf_gguf_tokenizer_of(path)
    assert ours.special_tokens_map == theirs.special_tokens_map
    assert ours.chat_template == theirs.chat_template and "SmolLM" in ours.chat_template
    for name in ("user", "system", "multi-turn", "history"):  # its template takes no tools
        messages, _, add_generation_prompt = CASES[name]
        assert_same(ours, theirs, [m for m in messages if "🙂" not in m["content"]],  # HF's loader splits
                    add_generation_prompt=add_generation_prompt)  # non-ASCII numerics its own way


def test_gemma3_system_prefix_and_alternation(families) -> None:
    ours, theirs, _ = families["gemma3"]
    assert assert_same(ours, theirs, SYSTEM + USER).startswith("<bos><start_of_turn>user\nYou are terse.")
    with pytest.raises(ValueError, match="^the model's chat template: Conversation roles must alternate"):
        ours.apply_chat_template(USER + USER)


@pytest.fixture(scope="module")
def qwen2_gguf(tmp_path_factory, base_tokenizer) -> Path:
    """A tiny Qwen2 GGUF as llama.cpp writes Qwen2.5: the Qwen2 split, <|endoftext|> as BOS and padding,
    <|im_end|> as EOS, no unknown token, and Qwen2.5's chat template (which opens with ``{%- if tools %}``)."""
    tok = base_tokenizer
    ids = {t: tok.token_to_id(t) for t in ("<|endoftext|>", "<|im_end|>")}
    meta = {"tokenizer.chat_template": _template("qwen2_5"), "tokenizer.ggml.bos_token_id": ids["<|endoftext|>"],
            "tokenizer.ggml.eos_token_id": ids["<|im_end|>"], "tokenizer.ggml.padding_token_id": ids["<|endoftext|>"],
            "tokenizer.ggml.unknown_token_id": None}
    return write_gguf(tmp_path_factory.mktemp("qwen2") / "qwen2.gguf", tiny_hf("qwen2", tok.get_vocab_size()),
                      tokenizer_fields(tok), arch="qwen2", pre="qwen2", meta=meta)


def test_qwen2_gguf_chat_renders_with_tools_undefined(qwen2_gguf) -> None:
    """The reported bug: "the model's chat template failed to render: 'tools' is undefined"."""
    ours = load_tokenizer(qwen2_gguf)
    text = ours.apply_chat_template(USER)
    assert text == ("<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
                    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    theirs = hf_gguf_tokenizer_of(qwen2_gguf)
    assert ours.special_tokens_map == theirs.special_tokens_map == {"bos_token": "<|endoftext|>",
                                                                    "eos_token": "<|im_end|>",
                                                                    "pad_token": "<|endoftext|>"}
    for name in ("user", "system", "tools", "tool call and result"):
        messages, tools, add_generation_prompt = CASES[name]
        assert_same(ours, theirs, [m for m in messages if "🙂" not in m.get("content", "")], tools=tools,
                    add_generation_prompt=add_generation_prompt)


def test_generate_chat_command_renders_the_template(qwen2_gguf, tmp_path) -> None:
    from posenc.cli import main

    out = tmp_path / "gen.json"
    assert main(["generate", str(qwen2_gguf), "--chat", "--system", "Be brief.", "--prompt", "Capital of France?",
                 "--max-new-tokens", "2", "--quiet", "--json", str(out), "--weights", "dequantised"]) == 0
    result = json.loads(out.read_text())
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Capital of France?"}]
    want = hf_gguf_tokenizer_of(qwen2_gguf).apply_chat_template(messages, add_generation_prompt=True,
                                                                return_dict=False)
    assert result["chat"] is True and result["prompt_tokens"] == len(want)


# -- the sandbox's bounds hold for what the HF environment adds -------------------------------------------------
@pytest.mark.parametrize("source", [
    "{% set s = 'x' * 1000000 %}{{ ([s] * 1000000) | tojson }}",  # one long string a million times
    "{{ (range(1000) | list) | tojson(indent=1000000) }}",
    "{{ (range(1000) | list) | tojson(separators=('x' * 100000, ':')) }}",
    "{% for i in range(100000) %}{% generation %}{% for j in range(100000) %}{% endfor %}{% endgeneration %}"
    "{% endfor %}",
    "{% for i in range(100000) %}{% for j in range(100000) %}{% continue %}{% endfor %}{% endfor %}",
    "{% set ns = namespace() %}{% set ns._x = 1 %}",
    "{{ strftime_now('%Y' * 500000) }}",
])
def test_hostile_templates_are_still_refused(source: str) -> None:
    start = time.perf_counter()
    with pytest.raises(ValueError, match="chat template") as err:
        render_chat(source, USER)
    assert time.perf_counter() - start < 30
    assert "\n" not in str(err.value)


def test_tojson_at_the_bound() -> None:
    text = render("{{ s | tojson }}", s="x" * (MAX_CHARS - 2))
    assert len(text) == MAX_CHARS
    with pytest.raises(ValueError, match="JSON text of more than"):
        render("{{ s | tojson }}", s="x" * (MAX_CHARS - 1))
