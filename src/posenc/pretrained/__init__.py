"""Pretrained checkpoints (decoder LMs, BERT encoders, encoder–decoders) run by posenc's own modules.

    from posenc.pretrained import load_pretrained
    pm = load_pretrained("path/to/SmolLM2-135M")          # HF folder, or a .gguf file
    ids = torch.tensor([pm.tokenizer.encode("The capital of France is")])
    out = pm.model.generate(ids, 8)
    print(pm.tokenizer.decode(out[0].tolist()))

``pm.model`` is a ``posenc.models.decoder.Decoder``, ``pm.config`` its
``DecoderConfig`` (position scheme + options built from the checkpoint's RoPE
settings), ``pm.tokenizer`` the model's own tokenizer. A BERT folder gives a
``posenc.models.encoder.Encoder`` (config ``EncoderConfig``), a T5, Marian or
Whisper folder a ``posenc.models.EncoderDecoder`` (config ``Seq2SeqConfig``)::

    pm = load_pretrained("path/to/t5-small")
    out = pm.model.generate(src_ids, bos_id=pm.config.decoder_start_token_id, max_new_tokens=20)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from posenc.models.encoder import Encoder, EncoderConfig
from posenc.models.encoder_decoder import EncoderDecoder
from posenc.models.decoder import DecoderConfig, Decoder
from posenc.models.seq2seq import Seq2SeqConfig
from posenc.pretrained.description import ModelDescription
from posenc.pretrained.tokenizer import Tokenizer

#: GGUF architectures whose as-stored (quantised) path is checked against their dequantised load (itself equal
#: to HF's): every architecture posenc reads from GGUF. Others would load dequantised.
AS_STORED_ARCHS = ("llama", "qwen2", "qwen3", "gemma3")
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class Pretrained:
    """A loaded checkpoint: the model, its config, its tokenizer (None if the checkpoint has none)."""

    model: Decoder | Encoder | EncoderDecoder
    config: DecoderConfig | EncoderConfig | Seq2SeqConfig
    tokenizer: Tokenizer | None
    source: str
    hf_config: dict[str, Any] = field(default_factory=dict)
    #: how the weights are held (``posenc.pretrained.as_stored.WEIGHTS``) and, per quantised module, as what
    weights: str = "dequantised"
    stored: dict[str, str] = field(default_factory=dict)
    #: the one reading of the checkpoint every command shares (``posenc.pretrained.description``)
    description: ModelDescription | None = None


def load_pretrained(path: str | Path, *, dtype: torch.dtype | str = torch.float32, device: str | torch.device = "cpu",
                    pairing: str = "interleaved", weights: str | None = None) -> Pretrained:
    """Load an HF-layout folder, a GGUF file or a model of ``posenc models`` by name as a posenc model (eval mode).

    Args:
        path: a folder with config.json + *.safetensors (+ tokenizer.json), or a ``.gguf`` file.
        dtype: float32, bfloat16 or float16 (a torch dtype or its name); weights are cast one tensor at a time.
        device: "cpu" or "cuda" (or a torch.device).
        pairing: RoPE pairing the model runs — "interleaved" (posenc's fast kernel; q/k rows are
            permuted once at load time) or "half" (the rows as HF stores them). Same logits either way.
        weights: how the weights are held — "as-stored" (GGUF blocks kept and run by posenc's quantised kernel;
            the default for .gguf files), "dequantised" (every tensor in ``dtype``; the default for HF
            folders), "int8" or "int4" (weight-only quantisation at load). See ``posenc.pretrained.as_stored``.

    Raises:
        FileNotFoundError: nothing at ``path``.
        ValueError: unsupported model, RoPE type or dtype; malformed, truncated or pickle-based files.
    """
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        dtype = DTYPES[dtype]
    if dtype not in DTYPES.values():
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype}")
    from posenc.pretrained.catalogue import MODELS, resolve

    if not Path(path).exists() and str(path).lower() in MODELS:  # a short name of `posenc models`
        path = resolve(path)
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or folder; give an HF model folder, a .gguf file or a name "
                                f"from `posenc models` ({', '.join(MODELS)})")
    if path.is_file() and path.suffix.lower() == ".json":
        raise ValueError(f"{path}: a config.json alone holds no weights; give the model's folder or a .gguf file")
    from posenc.progress import Stages

    # a load over ~2 s shows its stages on stderr (reading the file, building the tokenizer, weights N/M tensors)
    with Stages(f"loading {path.name}"):
        return _load(path, dtype=dtype, device=device, pairing=pairing, weights=weights)


def _load(path: Path, *, dtype: torch.dtype, device: str | torch.device, pairing: str,
          weights: str | None) -> Pretrained:
    from posenc.pretrained.as_stored import check_weights, quantise_model
    from posenc.pretrained.description import read_model
    from posenc.progress import stage

    stage("reading the file")
    # the one reading of the model (posenc.pretrained.description): config, plan, tokenizer — shared by every command
    reading = read_model(path)
    d = reading.description
    gguf = d.format == "gguf"
    if gguf and d.family is None:
        from posenc.formats.gguf_arch import arch_named

        arch_named(d.model_type.removeprefix("gguf:"), path)  # refused, listing the architectures posenc reads
    asked = weights
    weights = check_weights(weights, gguf=gguf, device=device)
    if gguf and weights == "as-stored":
        from posenc.formats.gguf_arch import arch_of

        arch = arch_of(d.hf_config).name
        if arch not in AS_STORED_ARCHS:  # not checked: dequantised
            if asked == "as-stored":
                raise ValueError(f"{path}: --weights as-stored is checked for GGUF architectures "
                                 f"{list(AS_STORED_ARCHS)} only, not {arch!r}; use --weights dequantised")
            weights = "dequantised"
    if gguf and weights == "as-stored":
        from posenc.pretrained.as_stored import load_gguf_as_stored

        stage("loading the weights as stored")
        got = load_gguf_as_stored(Path(reading.mapped.path), dtype=dtype, pairing=pairing, mapped=reading.mapped,
                                  hf_config=d.hf_config, tokenizer=reading.tokenizer)
        return Pretrained(model=got["model"], config=got["config"], tokenizer=got["tokenizer"], source=str(path),
                          hf_config=got["hf_config"], weights=weights, stored=got["stored"], description=d)
    if gguf:
        pm = _load_gguf(Path(reading.mapped.path), reading, dtype=dtype, device=device, pairing=pairing)
        if weights in ("int8", "int4"):
            stage(f"quantising the weights to {weights}")
            pm.stored, pm.weights = quantise_model(pm.model, 8 if weights == "int8" else 4), weights
        return pm
    from posenc.pretrained.hf import load_hf_folder

    model, hf = load_hf_folder(path, dtype=dtype, device=device, pairing=pairing, hf=d.hf_config)
    if weights in ("int8", "int4"):
        stage(f"quantising the weights to {weights}")
    stored = quantise_model(model, 8 if weights == "int8" else 4) if weights in ("int8", "int4") else {}
    return Pretrained(model=model, config=model.config, tokenizer=reading.tokenizer, source=str(path),
                      hf_config=hf, weights=weights, stored=stored, description=d)


def require_causal_lm(path: str | Path, *, command: str) -> None:
    """Refuse, before anything loads, a checkpoint that is not a causal LM: an encoder such as BERT.

    ``generate``, ``perplexity``, ``extend`` and ``finetune`` run a decoder that
    predicts the next token; an HF folder whose family builds another model (its
    own ``builder``: BERT's bidirectional encoder, which has no LM head) loads
    fine for ``inspect`` and the lab but cannot do that. Anything else (a GGUF
    file, a config this check cannot read) is left to the loader and its messages.

    Args:
        path: what the user gave as MODEL.
        command: the command's name, for the message ("generate", "finetune run").

    Raises:
        ValueError: ``path`` is a model posenc does not run as a causal LM (naming what it is and what to use).
    """
    from posenc.families import config_from_hf, family_for
    from posenc.formats.safetensors import MAX_CONFIG_BYTES, read_json
    from posenc.models.encoder import EncoderConfig

    path = Path(path)
    if not path.is_dir() or not (path / "config.json").is_file():
        return
    try:
        hf = read_json(path / "config.json", limit=MAX_CONFIG_BYTES)
        family = family_for(hf, source=str(path / "config.json"))
    except ValueError:  # unreadable, or no family posenc knows: the loader says which
        return
    if getattr(family, "builder", None) is None:  # a decoder family: built as a Decoder
        return
    try:
        encoder = isinstance(config_from_hf(hf, source=str(path / "config.json")), EncoderConfig)
    except ValueError:
        encoder = False
    what = (f"a {family.name.upper()} encoder (bidirectional, no LM head)" if encoder
            else f"a {family.name} model that posenc builds with its own builder, not a causal decoder")
    raise ValueError(f"{path} is {what}; {command} needs a causal LM (a decoder with an LM head: a Llama-family "
                     f"HF folder or a .gguf file) — use `posenc inspect {path}` to measure its position and token "
                     "tables")


def _load_gguf(path: Path, reading: Any, *, dtype: torch.dtype, device: str | torch.device,
               pairing: str) -> Pretrained:
    """A GGUF file dequantised: ``read_gguf`` gives HF-layout tensors for the description's config; the HF path does
    the rest."""
    from posenc.models.decoder import build_decoder
    from posenc.formats.gguf import read_gguf
    from posenc.pretrained.hf import llama_config_from_hf, load_llama_weights

    d = reading.description
    # interleaved: run llama.cpp's q/k rows as stored (no permutation at all); half: rows un-permuted as read
    from posenc.progress import counted, stage

    stage("reading the weights")
    ckpt = read_gguf(path, keep_interleaved=pairing == "interleaved", dtype=dtype, config=dict(d.hf_config),
                     tokenizer=False)
    config = llama_config_from_hf(d.hf_config, pairing=pairing, source=str(path))
    model = build_decoder(config, device="meta")
    # the model takes over the tensors read_gguf cast to `dtype`: one copy of the weights in memory
    load_llama_weights(model, counted(ckpt.tensors.items(), len(ckpt.tensors), "loading weights"), source=str(path), dtype=dtype, device=device,
                       source_pairing=ckpt.pairing)
    return Pretrained(model=model.eval(), config=config, tokenizer=reading.tokenizer, source=str(path),
                      hf_config=d.hf_config, description=d)


__all__ = ["DTYPES", "ModelDescription", "Pretrained", "Tokenizer", "load_pretrained", "require_causal_lm"]
