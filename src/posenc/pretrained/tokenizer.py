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
    """

    def __init__(self, tokenizer: HFTokenizer, *, bos_id: int | None = None, eos_id: int | None = None,
                 chat_template: str | None = None, eos_ids: list[int] | None = None, add_bos: bool = False) -> None:
        self.tokenizer = tokenizer
        self.add_bos = add_bos and bos_id is not None
        self.bos_id, self.eos_id = bos_id, eos_id
        self.chat_template = chat_template
        self.eos_ids = eos_ids if eos_ids is not None else ([] if eos_id is None else [eos_id])

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

    def apply_chat_template(self, messages: list[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        """Render ``messages`` ([{"role": ..., "content": ...}]) with the model's chat template.

        Raises:
            ValueError: the tokenizer has no chat template.
        """
        if not self.chat_template:
            raise ValueError("this model's tokenizer has no chat template; drop --chat and give the raw prompt")
        try:
            import jinja2  # noqa: F401
        except ImportError:
            raise ValueError("chat templates need the 'jinja2' package: pip install 'posenc[models]'") from None
        from posenc.pretrained.chat_template import render

        bos = self.token(self.bos_id) if self.bos_id is not None else ""
        eos = self.token(self.eos_id) if self.eos_id is not None else ""
        return render(self.chat_template, messages=messages, add_generation_prompt=add_generation_prompt,
                      bos_token=bos, eos_token=eos)

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """Ids of the rendered chat: the template writes its own special tokens, so none are added."""
        return self.encode(self.apply_chat_template(messages), add_special_tokens=False)


def _special_id(tok: HFTokenizer, value: Any) -> int | None:
    """A token id from a tokenizer_config/config entry: an id, a token string, or {"content": token}."""
    if value is None:
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        value = value.get("content")
    return tok.token_to_id(value) if isinstance(value, str) else None


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
    try:
        from tokenizers import Tokenizer as HFTokenizer
    except ImportError:
        raise ValueError(f"{path}: reading it needs the 'tokenizers' package: pip install 'posenc[models]'") from None
    try:
        tok = HFTokenizer.from_file(str(path))
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as err:  # noqa: BLE001 - a bare Exception, or a Rust panic, on a malformed file
        raise ValueError(f"{path}: not a valid tokenizer.json ({err}); re-download it from the model's repository") \
            from None
    extra: dict[str, Any] = {}
    config_path = folder / "tokenizer_config.json"
    if config_path.exists():
        extra = _json_object(config_path)
    template = extra.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
        if not all(isinstance(t, dict) for t in template):
            raise ValueError(f"{config_path}: chat_template must be a string or a list of "
                             '{"name": ..., "template": ...} objects')
        named = {t.get("name"): t.get("template") for t in template}
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
    return Tokenizer(tok, bos_id=bos, eos_id=eos, chat_template=template, eos_ids=eos_ids,
                     add_bos=adds_special(tok, extra, "bos", bos))


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


def gguf_tokenizer(meta: dict[str, Any], path: Path) -> Tokenizer:
    """The tokenizer a GGUF file's metadata describes, with its BOS/EOS ids, chat template and add-BOS flag."""
    from posenc.formats.gguf_tokenizer import tokenizer_from_metadata

    get = lambda key: int(meta[key]) if key in meta else None  # noqa: E731
    return Tokenizer(tokenizer_from_metadata(meta, path), bos_id=get("tokenizer.ggml.bos_token_id"),
                     eos_id=get("tokenizer.ggml.eos_token_id"), chat_template=meta.get("tokenizer.chat_template"),
                     add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)))


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
