"""A real checkpoint through ``posenc export`` and back: do transformers and posenc read the exported HF folder and
GGUF to the logits of the variant ``posenc extend`` measured?

    .venv/bin/python benchmarks/extend/export_check.py MODEL.gguf --method rope-yarn --factor 2 --out /tmp/exp \\
        [--layers global] [--tokens 1024] [--text bible] [--llama-logits llama_logits] [--format hf,gguf] \\
        [--dtype float32] [--gguf-type q8_0]

The variant is posenc's own (``posenc.extend.methods.build_variant``: the method on the layers ``extend`` changes,
float32 weights dequantised from the source); the export is ``posenc export MODEL --position METHOD
--position-option factor=F --dtype D --force``. The HF folder is written in float32 here unless ``--dtype`` says
otherwise (then its readers are compared with the variant of the weights rounded to that dtype, printed as a
second reference); the GGUF keeps the source's blocks (``--gguf-type``: requantised, compared with the float32
variant, so the requantisation error shows). Each reader runs the same tokens of real text; printed per reader: the
largest |Δ logit|, the largest logit (scale), mean NLL over the text, and whether every position's argmax agrees.
The tokenizer written to the HF folder is checked against posenc's on the same text, and its chat template (where
the model has one) against posenc's rendering.
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import time
from pathlib import Path

import numpy as np
import torch


def nll(logits: torch.Tensor, ids: torch.Tensor) -> float:
    return float(torch.nn.functional.cross_entropy(logits[0, :-1].float(), ids[0, 1:]))


class LlamaCpp:
    """llama.cpp as a reader: ``llama_logits`` (benchmarks/extend/llama_logits.cpp) run on the GGUF."""

    def __init__(self, binary: str, gguf: Path) -> None:
        self.binary, self.gguf = binary, gguf

    def __call__(self, ids: torch.Tensor) -> torch.Tensor:
        folder = self.gguf.parent
        ids[0].numpy().astype(np.int32).tofile(folder / "ids.i32")
        subprocess.run([self.binary, str(self.gguf), str(folder / "ids.i32"), str(folder / "logits.f32")], check=True,
                       capture_output=True)
        logits = np.fromfile(folder / "logits.f32", dtype=np.float32)
        (folder / "logits.f32").unlink()
        return torch.from_numpy(logits.reshape(1, ids.shape[1], -1))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("model")
    p.add_argument("--method", default="rope-yarn")
    p.add_argument("--factor", type=float, default=2.0)
    p.add_argument("--layers", default=None, help="global, all or rotary (default: what the family does)")
    p.add_argument("--tokens", type=int, default=1024)
    p.add_argument("--text", default="bible")
    p.add_argument("--out", required=True, help="export folder (an HF folder and model.gguf; an earlier export there "
                                                "is replaced)")
    p.add_argument("--llama-logits", default=None, metavar="BINARY",
                   help="llama_logits built from benchmarks/extend/llama_logits.cpp: adds llama.cpp as a reader of "
                        "the GGUF (logits and its own tokenisation of the text)")
    p.add_argument("--format", default="hf,gguf", help="what to export (hf, gguf or both; readers follow)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                   help="the HF folder's weights (default float32: the variant's own numbers)")
    p.add_argument("--gguf-type", default=None, choices=("q8_0", "f16", "bf16", "f32"),
                   help="requantise the GGUF (default: the source's blocks)")
    args = p.parse_args()
    torch.manual_seed(0)
    import transformers

    transformers.utils.logging.disable_progress_bar()

    from posenc.extend.export import export_model
    from posenc.extend.methods import build_variant
    from posenc.extend.texts import doc_tokens, load_document
    from posenc.pretrained import load_pretrained

    t0 = time.perf_counter()
    pm = load_pretrained(args.model, pairing="half", weights="dequantised")
    l0 = int(pm.config.max_position_embeddings)
    variant = build_variant(pm.model, args.method, factor=args.factor, original_max_len=l0, layers=args.layers)
    ids = torch.tensor([doc_tokens(load_document(args.text), pm.tokenizer, args.tokens)])
    with torch.no_grad():
        want = variant(ids)
        want_hf = want
        if args.dtype != "float32":  # the HF folder holds the weights rounded to --dtype
            for param in variant.parameters():
                param.copy_(param.to(getattr(torch, args.dtype)).float())
            want_hf = variant(ids)
    del variant, pm
    gc.collect()
    formats = tuple(args.format.split(","))
    options = {} if args.method == "rope" else {"factor": args.factor}
    result = export_model(args.model, args.method, options, args.out, layers=args.layers, formats=formats,
                          dtype=args.dtype, gguf_type=args.gguf_type, force=True)
    print(f"{args.model}: {args.method} ×{args.factor:g}, layers {result['layers']}, {args.tokens} tokens of "
          f"{args.text}; exported in {time.perf_counter() - t0:.0f} s")
    print(f"rope_parameters: {result['rope_parameters']}")
    print(f"GGUF rope keys: {result['gguf_rope']}")
    print(f"sizes: {result['sizes']}; HF weights {result.get('dtype')}; GGUF tensor types {result.get('gguf_types')}")
    out = Path(args.out)
    text = load_document(args.text).text[:20000]
    if formats == ("hf", "gguf"):
        hf_tok = transformers.AutoTokenizer.from_pretrained(out)
        ours = load_pretrained(out / "model.gguf", weights="dequantised").tokenizer
        same = list(hf_tok(text).input_ids) == list(ours.encode(text))  # each with its own BOS rule
        print(f"tokenizer.json (transformers) and the GGUF's vocabulary (posenc) give the same ids on the text's "
              f"first 20,000 characters, BOS included where the model wants one: {same}")
        if ours.chat_template:
            chat = [{"role": "user", "content": text[:200]}, {"role": "assistant", "content": "Yes."},
                    {"role": "user", "content": "And then?"}]
            same = hf_tok.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == \
                ours.apply_chat_template(chat, add_generation_prompt=True)
            print(f"the chat template (transformers, from the HF folder) renders as posenc's: {same}")
        if args.llama_logits:
            (out / "text.txt").write_text(text, encoding="utf-8")
            subprocess.run([args.llama_logits, str(out / "model.gguf"), str(out / "text.txt"), str(out / "text.i32"),
                            "tokenize"], check=True, capture_output=True)
            theirs = np.fromfile(out / "text.i32", dtype=np.int32).tolist()
            same = theirs == list(ours.encode(text))
            print(f"llama.cpp's tokenisation of the same characters gives posenc's ids: {same}")
    print("| reader | max abs Δ logit | max abs logit | mean NLL | argmax agrees |")
    print("| --- | ---: | ---: | ---: | --- |")
    print(f"| posenc variant (reference) | 0 | {float(want.abs().max()):.2f} | {nll(want, ids):.6f} | — |")
    if want_hf is not want:
        print(f"| posenc variant, weights in {args.dtype} (reference of the HF readers) | "
              f"{float((want_hf - want).abs().max()):.2e} | {float(want_hf.abs().max()):.2f} | "
              f"{nll(want_hf, ids):.6f} | {bool((want_hf.argmax(-1) == want.argmax(-1)).all())} |")
    readers = {}
    if "hf" in formats:
        readers["transformers, HF folder"] = lambda: transformers.AutoModelForCausalLM.from_pretrained(
            out, dtype=torch.float32).eval()
        readers["posenc, HF folder"] = lambda: load_pretrained(out, pairing="half").model
    if "gguf" in formats:
        readers["posenc, GGUF"] = lambda: load_pretrained(out / "model.gguf", pairing="half",
                                                          weights="dequantised").model
        if "hf" in formats:  # transformers' GGUF loader drops rope.scaling.*: the config.json says it
            readers["transformers, GGUF + config.json"] = lambda: transformers.AutoModelForCausalLM.from_pretrained(
                out, gguf_file="model.gguf", config=transformers.AutoConfig.from_pretrained(out),
                dtype=torch.float32).eval()
        if args.llama_logits:
            readers["llama.cpp, GGUF"] = lambda: LlamaCpp(args.llama_logits, out / "model.gguf")
    for name, load in readers.items():
        model = load()
        with torch.no_grad():
            got = model(ids)
        got = getattr(got, "logits", got)
        ref = want_hf if "HF folder" in name else want
        agree = bool((got.argmax(-1) == ref.argmax(-1)).all())
        print(f"| {name} | {float((got - ref).abs().max()):.2e} | {float(got.abs().max()):.2f} | "
              f"{nll(got, ids):.6f} | {agree} |")
        del model, got
        gc.collect()
    print(f"wall {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
