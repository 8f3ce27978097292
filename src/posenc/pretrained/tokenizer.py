"""A model's own tokenizer: HF ``tokenizers`` for the text, plus BOS/EOS ids and the chat template.

One class for both checkpoint formats: an HF folder supplies ``tokenizer.json``
(+ ``tokenizer_config.json`` for the chat template and special tokens), a GGUF
file supplies a ``tokenizers.Tokenizer`` built from its metadata
(``posenc.formats.gguf``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the tokenizers package is needed only when a tokenizer is loaded
    from tokenizers import Tokenizer as HFTokenizer


class Tokenizer:
    """Text ↔ ids with the model's special tokens.

    Args:
        tokenizer: a ``tokenizers.Tokenizer`` (its post-processor decides whether
            ``encode`` adds BOS, as HF's fast tokenizers do).
        bos_id, eos_id: the model's begin/end-of-sequence ids, if it has them.
        chat_template: the Jinja chat template of ``tokenizer_config.json`` / GGUF metadata.
        eos_ids: every id that ends a generation (some models list several); default ``[eos_id]``.
        add_bos: the model expects BOS first (GGUF's ``tokenizer.ggml.add_bos_token``; an HF
            folder's ``add_bos_token`` or post-processor): ``encode`` prepends it where the
            tokenizer's own post-processor does not, and text built from pieces encoded without
            special tokens (``posenc.extend.texts.bos_prefix``) starts with it.
        special_tokens: the named special tokens as strings — ``bos_token``, ``eos_token``,
            ``unk_token``, ``sep_token``, ``pad_token``, ``cls_token``, ``mask_token``, those the
            tokenizer has — as HF's ``special_tokens_map`` holds them; ``bos_token`` / ``eos_token``
            not named here are the tokens of ``bos_id`` / ``eos_id``, and a name given None is absent
            (an HF folder's tokenizer_config.json decides, as it does for HF's tokenizer). The chat
            template sees each.
        chat_templates: a tokenizer_config.json's named templates ({"default": ..., "tool_use": ...});
            ``apply_chat_template`` takes "tool_use" when it is given tools, as HF does.
    """

    def __init__(self, tokenizer: HFTokenizer, *, bos_id: int | None = None, eos_id: int | None = None,
                 chat_template: str | None = None, eos_ids: list[int] | None = None, add_bos: bool = False,
                 special_tokens: dict[str, str | None] | None = None,
                 chat_templates: dict[str, str] | None = None) -> None:
        self.tokenizer = tokenizer
        self.add_bos = add_bos and bos_id is not None
        self.bos_id, self.eos_id = bos_id, eos_id
        self.chat_template = chat_template
        self.chat_templates = dict(chat_templates or {})
        self.eos_ids = eos_ids if eos_ids is not None else ([] if eos_id is None else [eos_id])
        self._special_tokens = dict(special_tokens or {})

    @property
    def special_tokens_map(self) -> dict[str, str]:
        """The named special tokens as strings (HF's ``special_tokens_map``): what a chat template sees."""
        from posenc.pretrained.chat_template import SPECIAL_TOKENS

        found = {"bos_token": self._token_text(self.bos_id), "eos_token": self._token_text(self.eos_id)}
        found.update({k: v for k, v in self._special_tokens.items() if v is None or isinstance(v, str)})
        return {name: found[name] for name in SPECIAL_TOKENS if found.get(name) is not None}

    def _token_text(self, token_id: int | None) -> str | None:
        return self.token(token_id) if isinstance(token_id, int) and 0 <= token_id < self.vocab_size else None

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        if add_special_tokens and self.add_bos and (not ids or ids[0] != self.bos_id):
            ids = [self.bos_id, *ids]
        return ids

    def decode(self, ids: list[int], *, skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token(self, token_id: int) -> str | None:
        return self.tokenizer.id_to_token(token_id)

    def apply_chat_template(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True,
                            tools: list[dict[str, Any]] | None = None, documents: list[dict[str, Any]] | None = None,
                            **kwargs: Any) -> str:
        """Render ``messages`` ([{"role": ..., "content": ...}]) with the model's chat template, as HF's
        ``apply_chat_template(messages, tools=tools, documents=documents, tokenize=False, ...)`` renders it.

        The template sees ``messages``, ``tools`` (None or a list of JSON schemas), ``documents``,
        ``add_generation_prompt``, the tokenizer's named special tokens (:attr:`special_tokens_map`) and every
        further keyword argument — ``enable_thinking=False`` (Qwen3, SmolLM3), ``date_string=...`` (Llama 3),
        ``reasoning_effort=...`` (gpt-oss) — which overrides a special token of the same name.
        ``continue_final_message=True`` ends the text inside the last message (give ``add_generation_prompt=False``).
        Unlike HF, ``add_generation_prompt`` is on by default: posenc renders chats to generate from them.

        Raises:
            ValueError: the tokenizer has no chat template, or the template refuses these messages
                (``posenc.pretrained.chat_template.render_chat``).
        """
        template = self.chat_templates.get("tool_use") if tools is not None else None
        template = template or self.chat_template
        if not template:
            raise ValueError("this model's tokenizer has no chat template; drop --chat and give the raw prompt")
        from posenc.checks import require

        require("jinja2", "chat templates")
        from posenc.pretrained.chat_template import render_chat

        return render_chat(template, messages, tools=tools, documents=documents,
                           add_generation_prompt=add_generation_prompt, special_tokens=self.special_tokens_map,
                           **kwargs)

    def encode_chat(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True,
                    tools: list[dict[str, Any]] | None = None, documents: list[dict[str, Any]] | None = None,
                    **kwargs: Any) -> list[int]:
        """Ids of the rendered chat (:meth:`apply_chat_template`, same arguments): the template writes its own
        special tokens, so none are added — HF's ``apply_chat_template(..., tokenize=True)``."""
        return self.encode(self.apply_chat_template(messages, add_generation_prompt=add_generation_prompt,
                                                    tools=tools, documents=documents, **kwargs),
                           add_special_tokens=False)


def _special_id(tok: HFTokenizer, value: Any) -> int | None:
    """A token id from a tokenizer_config/config entry: an id, a token string, or {"content": token}."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        value = value.get("content")
    return tok.token_to_id(value) if isinstance(value, str) else None


def _special_text(value: Any) -> str | None:
    """A special token's string from a tokenizer_config entry: a string, or an AddedToken {"content": ...}."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _json_object(path: Path) -> dict[str, Any]:
    """A settings file (tokenizer_config.json) that must hold an object, read within ``MAX_CONFIG_BYTES``."""
    from posenc.formats.safetensors import MAX_CONFIG_BYTES, read_json

    data = read_json(path, limit=MAX_CONFIG_BYTES)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: must hold a JSON object, got {type(data).__name__}; re-download it")
    return data


def load_hf_tokenizer(folder: Path, hf_config: dict[str, Any]) -> Tokenizer | None:
    """The tokenizer of an HF model folder (``tokenizer.json``), or None when the folder has none."""
    path = folder / "tokenizer.json"
    if not path.exists():
        return None
    from posenc.validation import regular_file

    regular_file(path, "tokenizer.json")  # a FIFO would block the read
    from posenc.checks import require

    require("tokenizers", f"{path}: reading it")
    from tokenizers import Tokenizer as HFTokenizer
    try:
        tok = HFTokenizer.from_file(str(path))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # noqa: BLE001 - a bare Exception, or a Rust panic, on a malformed file
        raise ValueError(f"{path}: not a valid tokenizer.json ({err}); re-download it from the model's repository") \
            from None
    extra: dict[str, Any] = {}
    templates: dict[str, str] = {}
    config_path = folder / "tokenizer_config.json"
    if config_path.exists():
        extra = _json_object(config_path)
    template = extra.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
        if not all(isinstance(t, dict) for t in template):
            raise ValueError(f"{config_path}: chat_template must be a string or a list of "
                             '{"name": ..., "template": ...} objects')
        named = {t.get("name"): t.get("template") for t in template}
        templates = {k: v for k, v in named.items() if isinstance(k, str) and isinstance(v, str)}
        template = named.get("default") or next(iter(named.values()), None)
    if template is not None and not isinstance(template, str):
        raise ValueError(f"{config_path}: chat_template must be a string, got {type(template).__name__}")
    if template is None and (folder / "chat_template.jinja").is_file():
        template = (folder / "chat_template.jinja").read_text(encoding="utf-8")
    bos = _special_id(tok, extra.get("bos_token"))
    bos = hf_config.get("bos_token_id") if bos is None else bos
    eos = _special_id(tok, extra.get("eos_token"))
    eos_ids = hf_config.get("eos_token_id")
    eos_ids = [eos_ids] if isinstance(eos_ids, int) else eos_ids or []
    vocab = tok.get_vocab_size(with_added_tokens=True)
    for key, ids in (("bos_token_id", [] if bos is None else [bos]), ("eos_token", [] if eos is None else [eos]),
                     ("eos_token_id", eos_ids)):
        if not isinstance(ids, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab
                                                for i in ids):
            raise ValueError(f"{folder}: {key} {ids!r} (config.json / tokenizer_config.json) must be token ids "
                             f"from 0 to {vocab - 1:,} of {path.name}; use the files of one model")
    eos_ids = list(eos_ids)
    if eos is None and eos_ids:
        eos = eos_ids[0]
    if eos is not None and eos not in eos_ids:
        eos_ids.insert(0, eos)
    from posenc.pretrained.chat_template import SPECIAL_TOKENS

    # the special tokens' strings as HF's tokenizer holds them: tokenizer_config.json's, then (older folders)
    # special_tokens_map.json's for those it does not name; never the ids' tokens (config.json's bos_token_id
    # of a Qwen2.5 names a BOS that its tokenizer, and so its chat template, does not have)
    legacy = folder / "special_tokens_map.json"
    legacy_map = _json_object(legacy) if legacy.is_file() else {}
    special = {name: _special_text(extra.get(name)) or _special_text(legacy_map.get(name)) for name in SPECIAL_TOKENS}
    return Tokenizer(tok, bos_id=bos, eos_id=eos, chat_template=template, eos_ids=eos_ids,
                     add_bos=adds_special(tok, extra, "bos", bos), special_tokens=special, chat_templates=templates)


def adds_special(tok: HFTokenizer, tokenizer_config: dict[str, Any] | None, which: str, token_id: int | None) -> bool:
    """Whether an HF tokenizer puts ``which`` ("bos" first, "eos" last) around a text: tokenizer_config.json's
    ``add_bos_token`` / ``add_eos_token`` where it says, else whether the post-processor adds that id (Gemma's and
    Llama's tokenizer.json put BOS in the template; SmolLM2's adds nothing)."""
    given = (tokenizer_config or {}).get(f"add_{which}_token")
    if isinstance(given, bool):
        return given
    if token_id is None:
        return False
    ids = tok.encode("a", add_special_tokens=True).ids
    return bool(ids) and ids[0 if which == "bos" else -1] == token_id


#: GGUF metadata (llama.cpp's ``Keys.Tokenizer``, "seperator" as llama.cpp spells it) → HF's special token name.
GGUF_SPECIAL_IDS = {"tokenizer.ggml.unknown_token_id": "unk_token", "tokenizer.ggml.seperator_token_id": "sep_token",
                    "tokenizer.ggml.padding_token_id": "pad_token", "tokenizer.ggml.cls_token_id": "cls_token",
                    "tokenizer.ggml.mask_token_id": "mask_token"}


def gguf_tokenizer(meta: dict[str, Any], path: Path) -> Tokenizer:
    """The tokenizer a GGUF file's metadata describes, with its BOS/EOS ids, the strings of its other special
    tokens (unk/sep/pad/cls/mask, where the file names their ids), chat template and add-BOS flag."""
    from posenc.formats.gguf_tokenizer import tokenizer_from_metadata
    from posenc.malloc import trim_heap

    get = lambda key: int(meta[key]) if key in meta else None  # noqa: E731
    tok = tokenizer_from_metadata(meta, path)
    trim_heap()  # the merges' temporary Python objects are freed: their pages go back (posenc.malloc)
    vocab = tok.get_vocab_size(with_added_tokens=True)
    special = {}
    for key, name in GGUF_SPECIAL_IDS.items():
        token_id = meta.get(key)
        if hasattr(token_id, "__index__") and not isinstance(token_id, bool) and 0 <= int(token_id) < vocab:
            text = tok.id_to_token(int(token_id))
            if text is not None:
                special[name] = text
    return Tokenizer(tok, bos_id=get("tokenizer.ggml.bos_token_id"),
                     eos_id=get("tokenizer.ggml.eos_token_id"), chat_template=meta.get("tokenizer.chat_template"),
                     add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)), special_tokens=special)


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Just the tokenizer of a checkpoint — a ``.gguf`` file or an HF folder — without its weights.

    Raises:
        ValueError: the folder has no ``tokenizer.json``.
    """
    path = Path(path)
    if path.suffix == ".gguf":
        from posenc.formats.gguf import open_gguf, read_metadata

        return gguf_tokenizer(read_metadata(open_gguf(path)), path)
    config = _json_object(path / "config.json") if (path / "config.json").exists() else {}
    tokenizer = load_hf_tokenizer(path, config)
    if tokenizer is None:
        raise ValueError(f"{path}: no tokenizer.json; give a model folder with one, or a .gguf file")
    return tokenizer
